#!/usr/bin/env bash
# One device call: build the engine-only moeflux (Release) into build-device/cpu, then run the
# steps named in $DEVICE_STEPS: "stream" (scripts/device-stream.sh) and/or "cpu"
# (scripts/device-bench-cpu.sh), "ops" (bench_ops' expert shapes), "phases", "ab", "rows" (resident vs --mmap, 4-row vs 1-row matvec), "fused" (fused experts and the pool's poll), "isa" (integer vs float dots), "cpuinfo" (lscpu, siblings, flags), "optests" (the op tests, OPTESTS filter), "opsbench" (bench_ops, OPSBENCH filter), "ladder" (read-rate probes from a bare loop to decode regions), "envab" (A/B of environment settings: VARIANTS="name=VAR=1,VAR2=0 name2=THREADS=15 name3=BIN=base" ..., BIN=NAME: the tree in carry/NAME), "stream16", "thp" (huge pages of a resident bench), "ppperf" (perf of a prefill per thread), "alternate" (bench --alternate $ALT: an A/B of a tuning switch in one process; an entry "VAR=x,VAR2=y+NAME" sets VARs for its bench), "table" (bench -p 128 -n 32 -r 5, TABLE_RUNS times). Outputs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
W=build-device/cpu
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B "$W/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMOEFLUX_MINIMAL=ON -DMOEFLUX_WERROR=OFF >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
timeout 300 cmake --build "$W/build" -j"$(nproc)" --target moeflux >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built $(date -u +%T)"
# Other trees to compare against (envab's BIN=NAME): carry/NAME, each a `git archive` of a commit
# (CMakeLists.txt and src suffice), perhaps with a patch applied.
for t in carry/*/; do
  n=$(basename "$t")
  [ -f "$t/CMakeLists.txt" ] || continue
  bt=Release; [ -f "$t/.buildtype" ] && bt=$(cat "$t/.buildtype")  # another CMake build type for this tree
  cmake -S "$t" -B "$W/tree-$n" "${gen[@]}" -DCMAKE_BUILD_TYPE="$bt" -DMOEFLUX_MINIMAL=ON -DMOEFLUX_WERROR=OFF >"$OUT/cmake-$n.log" 2>&1 \
    && timeout 300 cmake --build "$W/tree-$n" -j"$(nproc)" --target moeflux >"$OUT/build-$n.log" 2>&1 && echo "built $n $(date -u +%T)"
done
# The CPU steps' pack: Qwen3-30B-A3B with CPU_LAYERS of its 48 layers (default all: issue 8 allows
# fewer only where the model does not fit in RAM, and the whole 16 GB pack fits in this host's 128 GiB).
CPU_LAYERS=${CPU_LAYERS:-48}
cpu_pack() {
  local p=$W/qwen3-30b-a3b-l$CPU_LAYERS
  if [ ! -f "$p/manifest.json" ]; then
    local t0=$SECONDS
    timeout 420 $W/build/src/moeflux synth --preset qwen3-30b-a3b --layers "$CPU_LAYERS" --format pack --out "$p" >/dev/null 2>&1
    echo "synth of $CPU_LAYERS layers: $((SECONDS - t0)) s" >&2
  fi
  echo "$p"
}
for s in ${DEVICE_STEPS:-stream}; do
  case $s in
    stream) OUT=$OUT scripts/device-stream.sh ;;
    cpu) OUT=$OUT WORK=$W LAYERS=$CPU_LAYERS scripts/device-bench-cpu.sh ;;
    ab) OUT=$OUT scripts/device-ab-chunks.sh ;;
    phases)  # wall time per phase of prefill and decode on all threads (MOEFLUX_PHASES)
      p=$(cpu_pack)
      for t in "-p 128 -n 0" "-p 0 -n 32"; do
        echo "## phases: bench $t -r 2 --profile" | tee -a "$OUT/phases.md"
        MOEFLUX_PHASES=1 timeout 90 $W/build/src/moeflux bench -m "$p" $t -r 2 --profile 2>&1 | grep -v "^measuring" | tee -a "$OUT/phases.md"
      done ;;
    ops)  # op-level rates (bench_ops, built by hand: the engine-only build has no benchmarks)
      g++ -O2 -std=c++20 -Isrc -Itests bench/bench_ops.cpp tests/util/random_weights.cpp "$W/build/src/libmoeflux_core.a" \
          -lbenchmark -lpthread -lz -o "$W/bench_ops" || exit 1
      timeout 240 "$W/bench_ops" --benchmark_filter='(Matvec/q4g64/(expert_gate_up|expert_down|attn_q)|SwigluExperts/q4g64/k8)/avx512/' \
          --benchmark_min_time=0.3s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | tee "$OUT/bench_ops.txt" ;;
    rows)  # A/B on one pack, alternating rounds: 4-row vs 1-row matvec (resident), and --mmap (default rows)
      p=$(cpu_pack) mf=$W/build/src/moeflux
      for round in 1 2 3 4; do
        for v in $([ $((round % 2)) = 1 ] && echo "r4 r1 mm" || echo "mm r1 r4"); do
          case $v in r4) e=(MOEFLUX_MATVEC_ROWS=4); a=() ;; r1) e=(MOEFLUX_MATVEC_ROWS=1); a=() ;; mm) e=(); a=(--mmap) ;; esac  # mm: default rows for the CPU
          echo -n "round$round $v: " | tee -a "$OUT/rows.md"
          timeout 90 env "${e[@]}" $mf bench -m "$p" -p 0 -n 32 -r 3 "${a[@]}" 2>&1 | grep "tg32 " | tee -a "$OUT/rows.md"
        done
      done ;;
    fused)  # 2x2 A/B, alternating rounds: fused decode experts (default) or MOEFLUX_FUSED_EXPERTS=0, caller's poll 500 us (default) or 50
      p=$(cpu_pack) mf=$W/build/src/moeflux
      for round in 1 2 3; do
        for v in $([ $((round % 2)) = 1 ] && echo "fu un fu50 un50" || echo "un50 fu50 un fu"); do
          case $v in fu) e=() ;; un) e=(MOEFLUX_FUSED_EXPERTS=0) ;; fu50) e=(MOEFLUX_POOL_SPIN_US=50) ;; un50) e=(MOEFLUX_FUSED_EXPERTS=0 MOEFLUX_POOL_SPIN_US=50) ;; esac
          echo "round$round $v: " | tee -a "$OUT/fused.md"
          timeout 90 env "${e[@]}" $mf bench -m "$p" -p 0 -n 32 -r 3 --profile 2>&1 | grep -E "^\\| (qwen|tg32)|ceilings measured" | tee -a "$OUT/fused.md"
        done
      done ;;
    isa)  # A/B, alternating rounds: the default (integer dots on VNNI, 1 row on Intel), integer dots on 4 rows, float dots
      p=$(cpu_pack) mf=$W/build/src/moeflux
      for round in $(seq "${ROUNDS:-3}"); do
        for v in $([ $((round % 2)) = 1 ] && echo "int int4 f32" || echo "f32 int4 int"); do
          case $v in int) e=() ;; int4) e=(MOEFLUX_MATVEC_ROWS=4) ;; f32) e=(MOEFLUX_CPU_ISA=avx512) ;; esac
          echo -n "round$round $v: " | tee -a "$OUT/isa.md"
          timeout 90 env "${e[@]}" $mf bench -m "$p" -p 0 -n 32 -r 3 2>&1 | grep -E "tg32 |ceilings measured" | tr '\n' ' ' | tee -a "$OUT/isa.md"
          echo | tee -a "$OUT/isa.md"
        done
      done ;;
    ppperf)  # where prefill's time goes per thread (perf, no call graphs: the main thread's serial steps stand out)
      p=$(cpu_pack) mf=$W/build/src/moeflux
      command -v perf >/dev/null || { echo "perf: not installed" | tee "$OUT/ppperf.txt"; continue; }
      timeout 150 perf record -F 999 -o $W/pp.data $mf bench -m "$p" -p 128 -n 0 -r 3 --profile 2>&1 | grep -E "pp128" | tee "$OUT/ppperf.txt"
      perf report -i $W/pp.data --stdio -s pid,symbol 2>/dev/null | grep '%' | head -80 >>"$OUT/ppperf.txt" ;;
    envab)  # A/B of environment settings, alternating rounds (ROUNDS, default 3): VARIANTS="a=X=1 b=X=0"; BENCH: the bench's tests (default "-p 0 -n 32 -r 3")
      p=$(cpu_pack) mf=$W/build/src/moeflux
      read -r -a vs <<<"${VARIANTS:?set VARIANTS}"
      for round in $(seq "${ROUNDS:-3}"); do
        order=("${vs[@]}")
        [ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${vs[@]}" | tac))
        for v in "${order[@]}"; do
          name=${v%%=*} spec=${v#*=}
          IFS=, read -r -a kv <<<"$spec"
          e=() ta=() bin=$mf  # THREADS=N in a spec is bench's --threads N; BIN=NAME runs carry/NAME's build
          for x in "${kv[@]}"; do
            if [ "${x%%=*}" = THREADS ]; then ta=(--threads "${x#THREADS=}"); elif [ "${x%%=*}" = BIN ]; then bin=$W/tree-${x#BIN=}/src/moeflux; elif [ -n "$x" ]; then e+=("$x"); fi
          done
          echo -n "round$round $name: " | tee -a "$OUT/envab.md"
          s0=$(head -1 /proc/stat)
          timeout 90 env "${e[@]}" "$bin" bench -m "$p" ${BENCH:--p 0 -n 32 -r 3} --profile "${ta[@]}" 2>&1 | grep -E "^\| (qwen|tg[0-9]+ |pp[0-9]+ )|ceilings measured|^phase (attn|experts|moe|route|lm_head)" | sed -E 's/ +/ /g' | tr '\n' ' ' | tee -a "$OUT/envab.md"
          # The share of the guest's CPU time the host took (steal), over the whole bench run.
          echo "$s0" "$(head -1 /proc/stat)" | awk '{t0=0; for(i=2;i<=11;i++) t0+=$i; t1=0; for(i=13;i<=22;i++) t1+=$i; printf "steal %.1f%%", 100*($20-$9)/(t1-t0)}' | tee -a "$OUT/envab.md"
          echo | tee -a "$OUT/envab.md"
        done
      done ;;
    table)  # the issue's table on all threads, TABLE_RUNS processes (default 3): bench -p 128 -n 32 -r 5
      p=$(cpu_pack)
      for i in $(seq "${TABLE_RUNS:-3}"); do
        echo "## table run $i" | tee -a "$OUT/table.md"
        timeout 120 $W/build/src/moeflux bench -m "$p" -p 128 -n 32 -r 5 2>&1 | grep -v "^measuring" | tee -a "$OUT/table.md"
      done ;;
    alternate)  # an A/B in one process: bench --alternate $ALT (a tuning switch), $ALT_REPS runs a side (default 10), paired run for run; ALT may name several
      p=$(cpu_pack)
      for alt in ${ALT:?set ALT}; do  # several switches: one bench each; "VAR=1,VAR2=x+NAME" sets VARs for that bench
        envs=(); name=$alt
        if [[ $alt == *+* ]]; then IFS=, read -ra envs <<<"${alt%%+*}"; name=${alt#*+}; fi
        echo "== ${envs[*]} --alternate $name" | tee -a "$OUT/alternate.md"
        timeout 400 env "${envs[@]}" $W/build/src/moeflux bench -m "$p" ${ALT_BENCH:--p 0 -n 32} -r "${ALT_REPS:-10}" --alternate "$name" --profile 2>&1 \
          | grep -v "^measuring" | tee -a "$OUT/alternate.md"
      done ;;
    optests)  # the op tests (test_ops_cpu's sources) built by hand against this build's engine library: the
      # engine-only build has no tests, and the AVX-512 VNNI paths run only here. OPTESTS: a gtest filter.
      g++ -O2 -std=c++20 -Isrc -Itests '-DMOEFLUX_TEST_SCRATCH="/tmp"' '-DMOEFLUX_TEST_DATA="tests/data"' '-DMOEFLUX_EXE="moeflux"' \
          tests/ops/test_ops_cpu.cpp tests/ops/test_attention_project.cpp tests/ops/test_route_experts.cpp tests/ops/test_group_lanes.cpp tests/ops/test_thread_pool.cpp \
          tests/util/random_weights.cpp tests/util/test_util.cpp "$W/build/src/libmoeflux_core.a" -lgtest -lgtest_main -lpthread -lz \
          -o "$W/test_ops_cpu" 2>"$OUT/optests-build.log" || { tail -20 "$OUT/optests-build.log"; continue; }
      timeout 300 "$W/test_ops_cpu" --gtest_filter="${OPTESTS:-*}" 2>&1 | grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|tests? ran|Expected|Which is|actual" | head -60 | tee "$OUT/optests.md" ;;
    opsbench)  # bench_ops by hand (the engine-only build has no benchmarks); OPSBENCH: a benchmark filter
      [ "$W/bench_ops" -nt "$W/build/src/libmoeflux_core.a" ] || g++ -O2 -std=c++20 -Isrc -Itests bench/bench_ops.cpp \
          tests/util/random_weights.cpp "$W/build/src/libmoeflux_core.a" -lbenchmark -lpthread -lz -o "$W/bench_ops" || continue
      timeout 240 "$W/bench_ops" --benchmark_filter="${OPSBENCH:-Matvec}" --benchmark_min_time=0.2s --benchmark_repetitions=3 \
          --benchmark_report_aggregates_only=true 2>&1 | grep -E "median|ERROR" | tee -a "$OUT/opsbench.txt" ;;
    ladder)  # where the decode's read rate goes: a bare loop with the kernel's vector work, the engine's kernel on
      # per-thread slices, in chunks, in one region, in decode-sized regions (dev/*_probe.cpp)
      g++ -O2 -std=c++20 -mavx512f -mavx512bw -mavx512vnni dev/stream_compute_probe.cpp -lpthread -o "$W/scprobe" || exit 1
      g++ -O2 -std=c++20 -Isrc dev/kernel_ladder_probe.cpp "$W/build/src/libmoeflux_core.a" -lpthread -lz -o "$W/ladder" || exit 1
      timeout 120 "$W/scprobe" "${THREADS:-16}" | grep -v "round 0" | tee -a "$OUT/ladder.md"
      for round in 1 2; do
        for m in loop slices "chunks 64" "chunks 256" region decode hot; do timeout 60 "$W/ladder" "${THREADS:-16}" $m | tee -a "$OUT/ladder.md"; done
        for m in loop slices hot; do timeout 60 "$W/ladder" 1 $m | tee -a "$OUT/ladder.md"; done
        for m in slices region decode; do echo -n "spread off: " | tee -a "$OUT/ladder.md"; MOEFLUX_MATVEC_SPREAD=0 timeout 60 "$W/ladder" "${THREADS:-16}" $m | tee -a "$OUT/ladder.md"; done
      done ;;
    cpuinfo)  # the CPU as this guest sees it: lscpu, SMT siblings, the flags the pool's spin styles need
      { lscpu; for c in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do echo "$c: $(cat "$c")"; done
        echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(waitpkg|hypervisor|avx512_vnni|amx_int8)$' | tr '\n' ' ')"; } | tee "$OUT/cpuinfo.md" ;;
    thp)  # transparent huge pages: the host's settings and a resident bench's share of 2 MiB pages
      p=$(cpu_pack)
      for f in enabled defrag; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f)"; done | tee -a "$OUT/thp.md"
      $W/build/src/moeflux bench -m "$p" -p 0 -n 512 -r 1 >/dev/null 2>&1 &
      bp=$!
      sleep 14
      grep -E "^(Rss|AnonHugePages)" /proc/$bp/smaps_rollup 2>&1 | tr '\n' ' ' | tee -a "$OUT/thp.md"
      wait $bp; echo | tee -a "$OUT/thp.md" ;;
    stream16)  # streaming table and warm-cache check on the CPU bench's 16-layer pack
      p=$W/qwen3-30b-a3b-l16
      [ -f "$p/manifest.json" ] || timeout 240 $W/build/src/moeflux synth --preset qwen3-30b-a3b --layers 16 --format pack --out "$p" >/dev/null 2>&1
      MOEFLUX=$W/build/src/moeflux OUTDIR=$OUT/json16 timeout 170 scripts/bench-streaming.sh "$p" 12 2 "5% 100%" | tee "$OUT/stream_table_l16.md"
      g++ -O2 -std=c++20 -Isrc bench/stream_warm.cpp "$W/build/src/libmoeflux_core.a" -lz -lpthread -o "$W/stream_warm" \
        && timeout 90 "$W/stream_warm" "$p" 12 3 | tee "$OUT/stream_warm.txt" ;;
  esac
done
