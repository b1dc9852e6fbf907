#!/bin/bash
# Alternating A/B of decode speed on a noisy machine: ROUNDS rounds, the variants' order reversed
# every other round, 5 s idle before each run; per run the median of bench's samples_ts and its
# share of that run's read ceiling.
#   scripts/bench-ab.sh ROUNDS PACK "name=ENV=1,ENV2=0 name2=ENV=0" [bench args...]
# A variant's BIN=path selects its binary (default build/src/moeflux); bench args default to
# "-p 0 -n 32 -r 5".
set -uo pipefail
rounds=${1:?rounds} pack=${2:?pack}
read -r -a variants <<<"${3:?variants}"
shift 3
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-p 0 -n 32 -r 5)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  order=("${variants[@]}")
  [ $((round % 2)) = 0 ] && mapfile -t order < <(printf '%s\n' "${variants[@]}" | tac)
  for v in "${order[@]}"; do
    name=${v%%=*} spec=${v#*=} bin=build/src/moeflux envs=()
    IFS=, read -r -a kv <<<"$spec"
    for e in "${kv[@]}"; do
      if [ "${e%%=*}" = BIN ]; then bin=${e#BIN=}; elif [ -n "$e" ]; then envs+=("$e"); fi
    done
    sleep 5
    env "${envs[@]}" "$bin" bench -m "$pack" "${args[@]}" --json >"$out" 2>/dev/null || { echo "round$round $name: bench failed"; continue; }
    python3 - "$round" "$name" "$out" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[3]))
for t in d["tests"]:
    m = statistics.median(t["samples_ts"])
    if t["test"].startswith("tg"):
        pct, ceil = 100 * m * d["bytes_per_token"] / 1e9 / d["read_bw_gbs"], f"read ceiling {d['read_bw_gbs']:.1f} GB/s"
    else:  # the bench's own share of the FMA peak (its mean, not this median)
        pct, ceil = t["fma_pct"], f"FMA peak {d['fma_peak_gflops']:.1f} GFLOP/s"
    print(f"round{sys.argv[1]} {sys.argv[2]} {t['test']}: median {m:.2f} t/s = {pct:.1f}% "
          f"({ceil}); samples {' '.join('%.1f' % x for x in t['samples_ts'])}", flush=True)
PY
  done
done
