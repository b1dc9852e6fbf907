#!/usr/bin/env bash
# A/B of MOEFLUX_CHUNKS_PER_THREAD (4 vs 8) on the GPU host's CPU: decode and prefill on all
# threads, alternating, on the pack scripts/device-bench-cpu.sh synthesises. Output: $OUT/ab.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
W=build-device/cpu
mf=$W/build/src/moeflux
pack=$W/qwen3-30b-a3b-l16
[ -f "$pack/manifest.json" ] || timeout 240 "$mf" synth --preset qwen3-30b-a3b --layers 16 --format pack --out "$pack" >/dev/null 2>&1
for round in 1 2; do
  for c in 4 8; do
    echo "## chunks per thread $c, round $round" | tee -a "$OUT/ab.md"
    MOEFLUX_CHUNKS_PER_THREAD=$c timeout 60 "$mf" bench -m "$pack" -p 128 -n 32 -r 3 --profile 2>/dev/null | tee -a "$OUT/ab.md"
  done
done
