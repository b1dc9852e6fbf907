#!/usr/bin/env bash
# CPU decode / prefill benchmark for the GPU host (16-core Xeon, no internet, no PCRE2 /
# utf8proc / libedit): builds the engine-only moeflux (MOEFLUX_MINIMAL, Release), synthesises
# a Qwen3-30B-A3B pack (4-bit g64, LAYERS of 48 layers, default all: the 16 GB pack fits in RAM), and runs `moeflux bench` on all
# threads (default kernels: the integer dots where the CPU has AVX512-VNNI, then the float
# kernels for comparison), on one thread, and on the
# scalar reference path (one thread, short), writing the tables (bench_cpu.md) and the machine description to $OUT. Runs in about 7 minutes with all 48 layers; each step is time-boxed.
# Usage: OUT=/some/dir [LAYERS=48] [WORK=/tmp/moeflux-cpu-bench] [BUILD_TIMEOUT=300] [RUNS="all_threads one_thread"] scripts/device-bench-cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the output directory}
LAYERS=${LAYERS:-48}
WORK=${WORK:-/tmp/moeflux-cpu-bench}
mkdir -p "$OUT" "$WORK"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }

{
  lscpu
  echo
  free -g
  echo
  uptime
} >"$OUT/machine.txt" 2>&1

log "build (MOEFLUX_MINIMAL, Release)"
gen=()
if command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S . -B "$WORK/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMOEFLUX_MINIMAL=ON \
  -DMOEFLUX_WERROR=OFF >"$OUT/build.log" 2>&1
timeout "${BUILD_TIMEOUT:-300}" cmake --build "$WORK/build" -j"$(nproc)" --target moeflux >>"$OUT/build.log" 2>&1
mf="$WORK/build/src/moeflux"

pack="$WORK/qwen3-30b-a3b-l$LAYERS"
if [ ! -f "$pack/manifest.json" ]; then
  log "synth qwen3-30b-a3b, $LAYERS layers"
  rm -rf "$pack"
  timeout 420 "$mf" synth --preset qwen3-30b-a3b --layers "$LAYERS" --format pack --out "$pack" \
    >"$OUT/synth.log" 2>&1
fi
du -sh "$pack" | tee -a "$OUT/steps.log"

# Each run prints the llama-bench table and the ceilings it measured on the same threads; all
# tables go to one file (bench_cpu.md, stderr to bench_cpu.err): the device tool returns at
# most 8 files.
run() {  # name, time limit (s), env / bench arguments; RUNS="name ..." keeps only those runs
  local name=$1 limit=$2
  shift 2
  [ -n "${RUNS:-}" ] && [[ " $RUNS " != *" $name "* ]] && return 0
  log "bench $name: $*"
  { echo; echo "## $name: $*"; echo; } | tee -a "$OUT/bench_cpu.md"
  if ! timeout "$limit" env "$@" >"$WORK/last.md" 2>>"$OUT/bench_cpu.err"; then
    log "bench $name: failed or timed out (see bench_cpu.err)"
  fi
  tee -a "$OUT/bench_cpu.md" <"$WORK/last.md"
}
run all_threads 90 "$mf" bench -m "$pack" -p 128 -n 32 -r 3 --profile
run eight_threads 60 "$mf" bench -m "$pack" -p 0 -n 32 -r 3 --threads 8 --profile
# The float kernels (every dot in f32): compare with all_threads (integer dots, if VNNI).
run float_all_threads 90 MOEFLUX_CPU_ISA=avx512 "$mf" bench -m "$pack" -p 0 -n 32 -r 3
run one_thread 120 "$mf" bench -m "$pack" -p 32 -n 16 -r 2 --threads 1
# Short: the scalar path decodes all 48 layers at ~0.1 t/s.
run scalar_one_thread 150 MOEFLUX_CPU_ISA=scalar "$mf" bench -m "$pack" -p 4 -n 2 -r 1 --threads 1
# Where decode time goes on all threads, when perf is there (symbols of the main thread and
# the workers together). Only with CPU_PERF=1: all 48 layers leave no room for it in one call.
if [ "${CPU_PERF:-0}" = 1 ] && command -v perf >/dev/null; then
  log "perf: decode on all threads"
  timeout 90 perf record -g -o "$WORK/perf.data" "$mf" bench -m "$pack" -p 0 -n 32 -r 2 >/dev/null 2>&1 || true
  perf report -i "$WORK/perf.data" --stdio --no-children -s symbol -g none 2>/dev/null | grep '%' | head -40 \
    >"$OUT/perf_decode.txt" || true
else
  log "perf: skipped (CPU_PERF=1 and perf needed)"
fi
log "done"
