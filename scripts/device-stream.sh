#!/usr/bin/env bash
# Expert streaming measurements for a machine with a real disk (without liburing, so
# the pread engine): synthesises packs (Qwen3-30B-A3B shapes with LAYERS30 layers, and a
# Qwen3.5-397B-A17B-shaped pack with LAYERS35 layers), runs scripts/bench-streaming.sh over
# cache budgets x prefetch x buffered/direct, and measures the peak RSS of a direct-I/O decode
# whose cache is a small share of the experts. Outputs go to $OUT. Steps skip what exists.
# Usage: OUT=dir [WORK=build-device/stream] [STEPS="synth table35 table30 rss"] scripts/device-stream.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
WORK=${WORK:-build-device/stream}
LAYERS30=${LAYERS30:-24}
LAYERS35=${LAYERS35:-4}
STEPS=${STEPS:-"synth table30 table35 rss"}
mkdir -p "$OUT" "$WORK"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/stream_steps.log"; }
mf=${MOEFLUX:-build-device/cpu/build/src/moeflux}
[ -x "$mf" ] || { log "no moeflux binary at $mf"; exit 1; }
p30="$WORK/q30-l$LAYERS30"; p35="$WORK/q35-l$LAYERS35"
has() { [[ " $STEPS " == *" $1 "* ]]; }
if has synth; then
  for spec in "qwen3-30b-a3b $LAYERS30 $p30" "qwen3.5-397b-a17b $LAYERS35 $p35"; do
    set -- $spec
    if [ ! -f "$3/manifest.json" ]; then
      log "synth $1 --layers $2"
      rm -rf "$3"
      /usr/bin/env time -v "$mf" synth --preset "$1" --layers "$2" --format pack --out "$3" >"$OUT/synth_$(basename "$3").log" 2>&1 \
        || "$mf" synth --preset "$1" --layers "$2" --format pack --out "$3" >"$OUT/synth_$(basename "$3").log" 2>&1
    fi
    "$mf" inspect "$3" >"$OUT/inspect_$(basename "$3").txt"
  done
fi
if has table30; then
  log "streaming table, $p30"
  MOEFLUX=$mf OUTDIR="$OUT/json30" timeout 200 scripts/bench-streaming.sh "$p30" 12 2 "5% 25% 100%" | tee "$OUT/stream_table_q30.md"
fi
if has table35; then
  log "streaming table, $p35"
  MOEFLUX=$mf OUTDIR="$OUT/json35" timeout 200 scripts/bench-streaming.sh "$p35" 8 2 "5% 25% 100%" | tee "$OUT/stream_table_q35.md"
fi
if has rss; then
  ids=$(seq -s, 11 42)
  for b in 10% 20%; do
    log "peak RSS, $p30, --expert-cache $b --io direct"
    { /usr/bin/env time -v "$mf" logits --model "$p30" --ids "$ids" --generate 16 --out "$WORK/rss.safetensors" \
        --expert-cache "$b" --io direct --stats; } >"$OUT/rss_q30_${b%\%}.txt" 2>&1 || \
      "$mf" logits --model "$p30" --ids "$ids" --generate 16 --out "$WORK/rss.safetensors" --expert-cache "$b" --io direct --stats \
        >"$OUT/rss_q30_${b%\%}.txt" 2>&1
    grep -E "Maximum resident|peak RSS|expert cache|host tier" "$OUT/rss_q30_${b%\%}.txt" || true
  done
  du -b "$p30/dense.bin" "$p30/experts" | tee "$OUT/rss_sizes.txt"
fi
log "done"
