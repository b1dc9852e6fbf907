#!/usr/bin/env bash
# Expert streaming benchmark: decode speed, hit rate, I/O rate and stall share of a
# pack at several cache budgets, prefetch on/off, buffered/direct I/O, beside the disk's
# sequential read rate (measured by each bench run), then the peak RSS of a direct-I/O decode
# with a cache far smaller than the experts.
# Usage: scripts/bench-streaming.sh PACK [N_GEN] [REPS] [BUDGETS] [EXTRA...]
#   e.g. scripts/bench-streaming.sh /work/benchdata/q30-24 16 2 "5% 25% 100%"
set -euo pipefail
PACK=$1; N=${2:-16}; R=${3:-2}; BUDGETS=${4:-"5% 25% 100%"}; shift $(( $# < 4 ? $# : 4 )); EXTRA=("$@")
BIN=${MOEFLUX:-build/src/moeflux}
OUTDIR=${OUTDIR:-$(mktemp -d)}; mkdir -p "$OUTDIR"
echo "pack: $PACK  ($(du -sh "$PACK/experts" | cut -f1) of experts, $(du -sh "$PACK/dense.bin" | cut -f1) dense)"
echo "| budget | prefetch | I/O | decode t/s | hit % | hits in flight % | I/O GB/s | stall % | precision % | recall % | disk seq GB/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
"$BIN" bench -m "$PACK" -p 0 -n "$N" -r "$R" --json --io mmap "${EXTRA[@]}" > "$OUTDIR/bench_mmap.json"
python3 - "$OUTDIR/bench_mmap.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["tests"][0]
print(f'| (mmap, no cache) | - | mmap | {t["tps_mean"]:.2f} +- {t["tps_sd"]:.2f} | - | - | - | - | - | - | - |')
PY
for b in $BUDGETS; do
  for io in buffered direct; do
    for pf in on off; do
      flag=(); [ "$pf" = off ] && flag=(--no-prefetch)
      j="$OUTDIR/bench_${b%\%}_${io}_${pf}.json"
      "$BIN" bench -m "$PACK" -p 0 -n "$N" -r "$R" --json --expert-cache "$b" --io "$io" "${flag[@]}" "${EXTRA[@]}" > "$j"
      python3 - "$j" "$b" "$pf" "$io" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); t = j["tests"][0]; c = t["expert_cache"]; lk = max(c["lookups"], 1)
print(f'| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {t["tps_mean"]:.2f} +- {t["tps_sd"]:.2f} | {100*c["hit_rate"]:.1f} | '
      f'{100*c["inflight_hits"]/lk:.1f} | {c["io_gbs"]:.2f} | {t["stall_pct"]:.1f} | {100*c["precision"]:.1f} | '
      f'{100*c["recall"]:.1f} | {j["disk_read_gbs"]:.2f} |')
PY
    done
  done
done
