#!/usr/bin/env bash
# One call on the GPU machine: build the engine-only moeflux (MOEFLUX_MINIMAL, Release) of this
# tree and of each tree under carry/NAME (a `git archive` of another commit, for A/Bs), make the
# CPU benchmark pack (Qwen3-30B-A3B shape, CPU_LAYERS of its 48 layers), then run the steps in
# $DEVICE_STEPS. Outputs under $OUT.
#   table   bench -p 128 -n 32 -r 5, TABLE_RUNS processes (default 3)
#   seqs    batched decode: bench -p 0 -n 32 -r 3 --seqs 2,4,8
#   ab      this tree against each carry tree, alternating ROUNDS rounds (default 3, the order
#           reversed every other round): bench $BENCH (default -p 128 -n 32 -r 3)
#   stream  expert streaming tables (scripts/device-stream.sh)
# Usage: OUT=dir DEVICE_STEPS="ab seqs" [CPU_LAYERS=48] scripts/device-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
W=build-device/cpu
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
build() {  # build SRC_DIR BUILD_DIR NAME
  cmake -S "$1" -B "$2" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMOEFLUX_MINIMAL=ON -DMOEFLUX_WERROR=OFF >"$OUT/cmake-$3.log" 2>&1 &&
    timeout 300 cmake --build "$2" -j"$(nproc)" --target moeflux >"$OUT/build-$3.log" 2>&1 && echo "built $3 $(date -u +%T)"
}
build . "$W/build" new || { tail -30 "$OUT/build-new.log"; exit 1; }
bins=("new=$W/build/src/moeflux")
for t in carry/*/; do
  n=$(basename "$t")
  [ -f "$t/CMakeLists.txt" ] && build "$t" "$W/tree-$n" "$n" && bins+=("$n=$W/tree-$n/src/moeflux")
done
CPU_LAYERS=${CPU_LAYERS:-48}
p=$W/qwen3-30b-a3b-l$CPU_LAYERS
if [ ! -f "$p/manifest.json" ]; then
  t0=$SECONDS
  timeout 420 $W/build/src/moeflux synth --preset qwen3-30b-a3b --layers "$CPU_LAYERS" --format pack --out "$p" >/dev/null 2>&1
  echo "synth of $CPU_LAYERS layers: $((SECONDS - t0)) s"
fi
rows() { grep -E "^\| (qwen|[a-z_0-9]+ \|)" | grep -v -- "---"; }
for s in ${DEVICE_STEPS:-table}; do
  case $s in
    table)
      for i in $(seq "${TABLE_RUNS:-3}"); do
        $W/build/src/moeflux bench -m "$p" -p 128 -n 32 -r 5 2>&1 | rows | tee -a "$OUT/table.md"
      done ;;
    seqs)
      timeout 300 $W/build/src/moeflux bench -m "$p" -p 0 -n 32 -r 3 --seqs 2,4,8 2>&1 | rows | tee -a "$OUT/seqs.md" ;;
    ab)
      for round in $(seq "${ROUNDS:-3}"); do
        order=("${bins[@]}")
        [ $((round % 2)) = 0 ] && mapfile -t order < <(printf '%s\n' "${bins[@]}" | tac)
        for b in "${order[@]}"; do
          timeout 120 "${b#*=}" bench -m "$p" ${BENCH:--p 128 -n 32 -r 3} 2>&1 | rows | sed "s/^/round$round ${b%%=*} /" | tee -a "$OUT/ab.md"
        done
      done ;;
    stream) OUT=$OUT scripts/device-stream.sh ;;
  esac
done
