#!/usr/bin/env bash
# One call on the GPU machine: build the engine-only moeflux (MOEFLUX_MINIMAL, Release) of this
# tree and of each tree under carry/NAME (a `git archive` of another commit, for A/Bs), make the
# CPU benchmark pack (Qwen3-30B-A3B shape, CPU_LAYERS of its 48 layers), then run the steps in
# $DEVICE_STEPS. Outputs under $OUT.
#   table   bench -p 128 -n 32 -r 5, TABLE_RUNS processes (default 3)
#   seqs    batched decode: bench -p 0 -n 32 -r 3 --seqs 2,4,8
#   ab      this tree against each carry tree, alternating ROUNDS rounds (default 3, the order
#           reversed every other round): bench $BENCH (default -p 128 -n 32 -r 3)
#   cuda-ab the same with --backend cuda on qwen3-30b-a3b (CUDA_LAYERS of 48, default all):
#           bench --backend cuda $CUDA_AB_BENCH (default -p 128 -n 128 -r 2)
#   stream  expert streaming tables (scripts/device-stream.sh)
#   cuda-test   the CUDA tests: the backend op table, the fixture suite and the engine tests
#               through cuda, the GPU expert cache's (logs under $OUT/cuda-*.log)
#   cuda-ops    the backend op table alone, the cases matching OPS_FILTER (a gtest filter of case
#               names, default all; e.g. "*gqa*:*mla*") with the switches MOEFLUX_TEST_FLIPS flips
#   cuda-bench  bench --backend cuda on synth packs: qwen3-30b-a3b (CUDA_LAYERS of 48, default
#               all) -p 512 -n 128, and mixtral-8x7b (4 layers) -p 512 -n 128; CUDA_PROFILE=1
#               adds the per-stage profile of qwen3-30b-a3b
#   serve-bench the load benchmark of moeflux serve --backend cuda (scripts/bench-serve.py, 1 / 4 /
#               16 clients) on qwen3-30b-a3b (CUDA_LAYERS of 48); needs FULL=1
#   cuda-cache  the GPU expert cache: bench --backend cuda on CACHE_PRESET (default qwen3-30b-a3b;
#               qwen3.5-397b-a17b is 3.6 GB a layer: 12 layers fit the disk) (CUDA_LAYERS of 48),
#               experts streamed (host cache 100%) through GPU budgets CACHE_BUDGETS (10/25/50/100%),
#               --moe-misses CACHE_MODES (copy cpu auto), routing skews CACHE_SKEWS (0 1); CACHE_BENCH:
#               more bench arguments (e.g. "--alternate device_tables"); CACHE_TESTS: the tests (default
#               "-p 512 -n 128 -r 2")
#   cuda-alt    bench --backend cuda --alternate $ALT (a CUDA A/B switch, flipped token by token in
#               one process) on qwen3-30b-a3b (CUDA_LAYERS of 48) and mixtral-8x7b (4 layers);
#               CUDA_ALT_BENCH: the tests (default -p 128 -n 128 -r 3)
#   cuda-long   decode after a long context: bench --backend cuda -p 0 -n 32 -r 2 -d D for D in
#               LONG_DEPTHS (default "8192 16384") on LONG_MODELS (default "qwen3-30b-a3b:12
#               deepseek-v3:6", preset:layers; deepseek-v3 is MLA); with ALT set, --alternate $ALT
#   cuda-prefill  prefill: bench --backend cuda -p P -n 0 -r 2 for P in PREFILL_LENGTHS (default
#               "512 4096") on PREFILL_MODELS (default as LONG_MODELS); with ALT set, --alternate
#               $ALT, else --profile (device time per stage)
#   cuda-ncu    Nsight Compute's duration of each kernel of the first decode tokens (8 layers of
#               qwen3-30b-a3b; --clock-control none), summed by kernel name; NCU_BENCH: the bench
#               arguments instead (default "-p 0 -n 3 -r 1"; "-p 512 -n 0 -r 1": a prefill);
#               NCU_KERNELS: the sections of one launch of each kernel matching these
#   cuda-sass   Nsight Compute's per-instruction counters (executed, stall samples) of one launch
#               (past the first SASS_SKIP, default 20) of each kernel matching SASS_KERNELS
#               (default "gate_up_vec matvec_vec") in bench $SASS_BENCH (default "-p 0 -n 3 -r 1";
#               "-p 512 -n 0 -r 1" and SASS_SKIP=4: a prefill's), summarised by
#               scripts/sass-summary.py (CSVs under $OUT)
# FULL=1: the full moeflux (tokenizer, server) instead of the engine-only one, with the
# libraries the machine lacks taken from carry/deps (scripts/carry-deps.sh; carry ["carry/deps"]).
# Usage: OUT=dir DEVICE_STEPS="ab seqs" [CPU_LAYERS=48] scripts/device-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
W=build-device/cpu
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
full=()  # FULL=1 with carry/deps: the full moeflux (server, tokenizer) for every step
if [ -n "${FULL:-}" ] && [ -d carry/deps ]; then
  export LD_LIBRARY_PATH=$PWD/carry/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_LIBDIR=$PWD/carry/deps/lib/pkgconfig
  export PATH=$PWD/carry/deps/bin:$PATH
  full=(-DMOEFLUX_MINIMAL=OFF -DCMAKE_PREFIX_PATH="$PWD/carry/deps" -DPKG_CONFIG_EXECUTABLE="$PWD/carry/deps/bin/pkg-config")
fi
build() {  # build SRC_DIR BUILD_DIR NAME
  cmake -S "$1" -B "$2" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMOEFLUX_MINIMAL=ON -DMOEFLUX_WERROR=OFF -DMOEFLUX_CUDA=${MOEFLUX_CUDA:-ON} "${full[@]}" >"$OUT/cmake-$3.log" 2>&1 &&
    timeout 400 cmake --build "$2" -j"$(nproc)" --target moeflux >"$OUT/build-$3.log" 2>&1 && echo "built $3 $(date -u +%T)"
}
if [ ${#full[@]} -gt 0 ] && ! build . "$W/build" full; then
  tail -n 15 "$OUT/cmake-full.log" "$OUT/build-full.log"; echo "the full build failed: the engine-only one instead"
  full=(); rm -rf "$W/build"
fi
[ -x "$W/build/src/moeflux" ] && [ ${#full[@]} -gt 0 ] || build . "$W/build" new || { tail -n 30 "$OUT/build-new.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
bins=("new=$W/build/src/moeflux")
for t in carry/*/; do
  n=$(basename "$t")
  [ -f "$t/CMakeLists.txt" ] && build "$t" "$W/tree-$n" "$n" && bins+=("$n=$W/tree-$n/src/moeflux")
done
synth() {  # synth PRESET LAYERS [SKEW]: the pack's path
  local p=$W/$1-l$2; [ "${3:-0}" = 0 ] || p=$p-s$3
  if [ ! -f "$p/manifest.json" ]; then
    local t0=$SECONDS
    timeout 420 $W/build/src/moeflux synth --preset "$1" --layers "$2" --routing-skew "${3:-0}" --format pack --out "$p" >/dev/null 2>&1
    echo "synth of $1, $2 layers: $((SECONDS - t0)) s" >&2
  fi
  echo "$p"
}
CPU_LAYERS=${CPU_LAYERS:-48}
rows() { grep -E "^\| (qwen|mixtral|[a-z_0-9]+ \|)" | grep -v -- "---"; }
steps=${DEVICE_STEPS:-table}
case " $steps " in *" table "*|*" seqs "*|*" ab "*) p=$(synth qwen3-30b-a3b "$CPU_LAYERS") ;; esac
for s in $steps; do
  case $s in
    cuda-test)
      timeout 400 cmake --build "$W/build" -j"$(nproc)" --target test_backend_ops test_models test_engine >"$OUT/build-tests.log" 2>&1 ||
        { tail -30 "$OUT/build-tests.log"; continue; }
      timeout 300 "$W/build/tests/test_backend_ops" >"$OUT/cuda-ops.log" 2>&1
      echo "op table: rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-ops.log" | tr '\n' ' ')"
      grep -E "^\[  FAILED|Failure|rel_l2|Which is" "$OUT/cuda-ops.log" | head -30
      timeout 300 "$W/build/tests/test_models" --gtest_filter='*BackendFixture*cuda*' >"$OUT/cuda-fixtures.log" 2>&1
      echo "fixtures: rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-fixtures.log" | tr '\n' ' ')"
      grep -E "^\[  FAILED|Failure|Which is|Expected" "$OUT/cuda-fixtures.log" | head -30
      timeout 300 "$W/build/tests/test_engine" --gtest_filter='Cuda*:GpuExpertCache*' >"$OUT/cuda-engine.log" 2>&1
      echo "engine: rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-engine.log" | tr '\n' ' ')"
      grep -E "^\[  FAILED|Failure|Which is|Expected" "$OUT/cuda-engine.log" | head -30
      MOEFLUX_CUDA_DEVICE_GDN=1 timeout 300 "$W/build/tests/test_engine" --gtest_filter='Cuda*' >"$OUT/cuda-engine-gdn.log" 2>&1
      echo "engine, GatedDeltaNet on the device: rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-engine-gdn.log" | tr '\n' ' ')"
      MOEFLUX_CUDA_DEVICE_GDN=1 MOEFLUX_CUDA_GRAPHS=0 timeout 300 "$W/build/tests/test_engine" --gtest_filter='Cuda*EngineBatch*qwen3_next*' >"$OUT/cuda-engine-gdn-nographs.log" 2>&1
      echo "... and no step graphs: rc $? $(grep -E '^\[  (PASSED|FAILED)|B=[0-9]' "$OUT/cuda-engine-gdn-nographs.log" | tr '\n' ' ')" ;;
    cuda-ops)
      timeout 400 cmake --build "$W/build" -j"$(nproc)" --target test_backend_ops >"$OUT/build-tests.log" 2>&1 ||
        { tail -30 "$OUT/build-tests.log"; continue; }
      timeout 300 "$W/build/tests/test_backend_ops" --gtest_filter="${OPS_FILTER:-*}" >"$OUT/cuda-ops.log" 2>&1
      echo "op table (${OPS_FILTER:-*}): rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-ops.log" | tr '\n' ' ')"
      grep -E "^\[  FAILED|Failure|rel_l2|Which is" "$OUT/cuda-ops.log" | head -30 ;;
    cuda-alt)
      for m in "qwen3-30b-a3b ${CUDA_LAYERS:-48}" "mixtral-8x7b 4"; do
        q=$(synth $m)
        timeout 300 $W/build/src/moeflux bench --backend cuda -m "$q" ${CUDA_ALT_BENCH:--p 128 -n 128 -r 3} \
          --alternate "${ALT:?cuda-alt: set ALT}" 2>&1 | tee "$OUT/cuda-alt-${m%% *}.log" | grep -E "^\| [a-z]|median|ratio"
      done ;;
    cuda-long)
      for m in ${LONG_MODELS:-qwen3-30b-a3b:12 deepseek-v3:6}; do
        q=$(synth ${m%%:*} ${m##*:})
        for d in ${LONG_DEPTHS:-8192 16384}; do
          timeout 200 $W/build/src/moeflux bench --backend cuda -m "$q" -p 0 -n 32 -r 2 -d "$d" ${ALT:+--alternate "$ALT"} 2>&1 |
            tee "$OUT/cuda-long-${m%%:*}-d$d.log" | grep -E "^\| [a-z]|median|rror"
        done
      done ;;
    cuda-prefill)
      for m in ${PREFILL_MODELS:-${LONG_MODELS:-qwen3-30b-a3b:12 deepseek-v3:6}}; do
        q=$(synth ${m%%:*} ${m##*:})
        for n in ${PREFILL_LENGTHS:-512 4096}; do
          extra=(--profile); [ -n "${ALT:-}" ] && extra=(--alternate "$ALT")
          timeout 200 $W/build/src/moeflux bench --backend cuda -m "$q" -p "$n" -n 0 -r 2 "${extra[@]}" 2>&1 |
            tee "$OUT/cuda-prefill-${m%%:*}-p$n.log" | grep -E "^\| [a-z]|median|rror"
        done
      done ;;
    cuda-ncu)
      q=$(synth qwen3-30b-a3b 8)
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum -c 400 --csv --page raw \
        $W/build/src/moeflux bench --backend cuda -m "$q" ${NCU_BENCH:--p 0 -n 3 -r 1} >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
      python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
hdr = rows[0]; name = hdr.index("Kernel Name"); dur = hdr.index("gpu__time_duration.sum")
print("unit:", rows[1][dur], "(totals below divided by 1e3)")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[2:]:
    try: d = float(r[dur].replace(",", ""))
    except ValueError: continue
    k = r[name].replace("<unnamed>::", "").replace("(anonymous namespace)::", "").split("(")[0].split("<")[0]
    k = k.split("::")[-1][-40:]; tot[k] += d; cnt[k] += 1
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f"{k:42s} n={cnt[k]:4d} total={v/1e3:9.1f} us  mean={v/cnt[k]/1e3:8.2f} us")
PY
      [ -n "${NCU_KERNELS:-}" ] && for kname in $NCU_KERNELS; do  # NCU_SKIP: launches of it skipped first (default 20)
        timeout 200 "$NCU" --clock-control none -k "regex:$kname" -s "${NCU_SKIP:-20}" -c 1 --section SpeedOfLight \
          --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
          $W/build/src/moeflux bench --backend cuda -m "$q" ${NCU_BENCH:--p 0 -n 3 -r 1} 2>&1 | tee "$OUT/ncu-$kname.txt" |
          grep -E "^  [A-Z]|Duration|Throughput|Stall|Occupancy|Registers|Warp Cycles|Issued|Eligible|Hit Rate|Block Size|Grid Size|Pipe|Executed Ipc|Instructions" | head -80
      done
      ;;
    cuda-sass)
      q=$(synth qwen3-30b-a3b 8)
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      for kname in ${SASS_KERNELS:-gate_up_vec matvec_vec}; do
        timeout 200 "$NCU" --clock-control none -k "regex:$kname" -s "${SASS_SKIP:-20}" -c 1 --section SourceCounters --page source \
          --print-source sass --csv $W/build/src/moeflux bench --backend cuda -m "$q" ${SASS_BENCH:--p 0 -n 3 -r 1} \
          >"$OUT/sass-$kname.csv" 2>"$OUT/sass-$kname.err"
        python3 scripts/sass-summary.py "$OUT/sass-$kname.csv" --chunk 100 --hot >"$OUT/sass-$kname.txt" 2>&1
        echo "$kname:"; head -60 "$OUT/sass-$kname.txt"
        gzip -f "$OUT/sass-$kname.csv"
      done ;;
    serve-bench)
      [ ${#full[@]} -gt 0 ] || { echo "serve-bench: needs FULL=1 and carry/deps (scripts/carry-deps.sh, carry [\"carry/deps\"])"; continue; }
      q=$(synth qwen3-30b-a3b "${CUDA_LAYERS:-48}")
      timeout 500 python3 scripts/bench-serve.py --moeflux "$W/build/src/moeflux" -m "$q" --tokenizer tests/data/tokenizers/qwen3 \
        --clients 1,4,16 --requests 2 --max-tokens 64 --extra "--backend cuda" 2>&1 | tee "$OUT/serve-bench.log" | tail -12 ;;
    cuda-cache)
      for skew in ${CACHE_SKEWS:-0 1}; do
        q=$(synth "${CACHE_PRESET:-qwen3-30b-a3b}" "${CUDA_LAYERS:-48}" "$skew")
        for b in ${CACHE_BUDGETS:-10% 25% 50% 100%}; do
          for mode in ${CACHE_MODES:-copy cpu auto}; do
            l="$OUT/cuda-cache-s$skew-${b%\%}-$mode.log"
            timeout 150 $W/build/src/moeflux bench --backend cuda -m "$q" ${CACHE_TESTS:--p 512 -n 128 -r 2} --expert-cache 100% \
              --gpu-expert-cache "$b" --moe-misses "$mode" ${CACHE_BENCH:-} >"$l" 2>&1
            rows <"$l" | sed "s/^/skew $skew gpu $b $mode /"
            grep -E "gpu expert cache|device tables|cpu experts|auto choice|host-to-device|median ratio" "$l" | sed "s/^/  /"
          done
        done
      done ;;
    cuda-bench)
      q=$(synth qwen3-30b-a3b "${CUDA_LAYERS:-48}")
      timeout 300 $W/build/src/moeflux bench --backend cuda -m "$q" -p 512 -n 128 -r 3 ${CUDA_BENCH:-} 2>&1 | tee "$OUT/cuda-bench-q30.log" | rows
      [ -n "${CUDA_PROFILE:-}" ] && timeout 200 $W/build/src/moeflux bench --backend cuda -m "$q" -p 512 -n 32 -r 1 --profile 2>&1 |
        tee "$OUT/cuda-profile-q30.log" | grep -A14 "device time per stage" 
      x=$(synth mixtral-8x7b 4)
      timeout 200 $W/build/src/moeflux bench --backend cuda -m "$x" -p 512 -n 128 -r 3 ${CUDA_BENCH:-} 2>&1 | tee "$OUT/cuda-bench-mixtral.log" | rows ;;
    table)
      for i in $(seq "${TABLE_RUNS:-3}"); do
        $W/build/src/moeflux bench -m "$p" -p 128 -n 32 -r 5 2>&1 | rows | tee -a "$OUT/table.md"
      done ;;
    seqs)
      timeout 300 $W/build/src/moeflux bench -m "$p" -p 0 -n 32 -r 3 --seqs 2,4,8 2>&1 | rows | tee -a "$OUT/seqs.md" ;;
    ab|cuda-ab)
      pk=${p:-}; be=(); [ "$s" = cuda-ab ] && be=(--backend cuda) && pk=$(synth qwen3-30b-a3b "${CUDA_LAYERS:-48}")
      args=${BENCH:--p 128 -n 32 -r 3}; [ "$s" = cuda-ab ] && args=${CUDA_AB_BENCH:--p 128 -n 128 -r 2}
      for round in $(seq "${ROUNDS:-3}"); do
        order=("${bins[@]}")
        [ $((round % 2)) = 0 ] && mapfile -t order < <(printf '%s\n' "${bins[@]}" | tac)
        for b in "${order[@]}"; do
          timeout 120 "${b#*=}" bench "${be[@]}" -m "$pk" $args 2>&1 | rows | sed "s/^/round$round ${b%%=*} /" | tee -a "$OUT/$s.md"
        done
      done ;;
    stream) OUT=$OUT scripts/device-stream.sh ;;
  esac
done
