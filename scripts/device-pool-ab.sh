#!/usr/bin/env bash
# One device call: the thread pool of this tree against another's, on one pack, in alternating
# rounds of `moeflux bench -m PACK -p 128 -n 32 -r 3 --profile` (order swapped each round), then
# a table of pp128 / tg32 t/s with medians and ratios. Run from the repository root. Binaries:
# $CARRY/bin/moeflux-NAME (CARRY default carry) where carried and runnable here, else built from
# $CARRY/NAME (a `git archive` of a commit) or, for "new" without one, from this tree (Release,
# MOEFLUX_MINIMAL, into build-device/cpu; ~27 s a tree on the 16-vCPU Xeon). Binaries built on
# the dev VM do not run on the GPU machines, which lack liburing.so.2: carry sources there.
# Environment: OUT (outputs), VARIANTS (default "base new"; the first one's synth writes the
# pack, which every variant must read), LAYERS (48), DEADLINE_S (seconds from the start after
# which no round starts; default 380), BENCH (default "-p 128 -n 32 -r 3").
set -uo pipefail
C=${CARRY:-carry}
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
W=build-device/cpu
mkdir -p "$W"
start=$SECONDS
read -r -a vs <<<"${VARIANTS:-base new}"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
declare -A bin
for v in "${vs[@]}"; do
  b=$C/bin/moeflux-$v
  [ -f "$b" ] && chmod +x "$b"
  if [ -x "$b" ] && "$b" --help >/dev/null 2>"$OUT/carried-$v.log"; then bin[$v]=$b; echo "$v: carried binary"; continue; fi
  [ -f "$b" ] && { echo "$v: carried binary does not run here:"; tail -3 "$OUT/carried-$v.log"; }
  src=$C/$v; [ "$v" = new ] && [ ! -f "$src/CMakeLists.txt" ] && src=.
  cmake -S "$src" -B "$W/tree-$v" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DMOEFLUX_MINIMAL=ON -DMOEFLUX_WERROR=OFF >"$OUT/cmake-$v.log" 2>&1 \
    && timeout 300 cmake --build "$W/tree-$v" -j"$(nproc)" --target moeflux >"$OUT/build-$v.log" 2>&1 \
    || { echo "$v: build failed"; tail -20 "$OUT/build-$v.log"; exit 1; }
  bin[$v]=$W/tree-$v/src/moeflux
  echo "$v: built at $((SECONDS - start)) s"
done
{ lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket)"; uptime; } | tee "$OUT/machine.txt"
p=$W/pack-l${LAYERS:-48}
t0=$SECONDS
timeout 200 "${bin[${vs[0]}]}" synth --preset qwen3-30b-a3b --layers "${LAYERS:-48}" --format pack --out "$p" >"$OUT/synth.log" 2>&1 \
  || { echo "synth failed"; tail "$OUT/synth.log"; exit 1; }
echo "synth: $((SECONDS - t0)) s (at $((SECONDS - start)) s)"
steal() { head -1 /proc/stat; }
res=$OUT/results.tsv
: >"$res"
round=0 per_run=0
while :; do
  round=$((round + 1))
  order=("${vs[@]}")
  [ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${vs[@]}" | tac))
  # No round starts that would end past the deadline (a round: one run per variant).
  if [ $round -gt 1 ] && [ $((SECONDS - start + per_run * ${#vs[@]})) -gt "${DEADLINE_S:-380}" ]; then break; fi
  for v in "${order[@]}"; do
    t0=$SECONDS s0=$(steal)
    timeout 120 "${bin[$v]}" bench -m "$p" ${BENCH:--p 128 -n 32 -r 3} --profile >"$OUT/r$round-$v.txt" 2>&1
    st=$(echo "$s0" "$(steal)" | awk '{t0=0; for(i=2;i<=11;i++) t0+=$i; t1=0; for(i=13;i<=22;i++) t1+=$i; printf "%.1f", 100*($20-$9)/(t1-t0)}')
    # t/s of each test: the column after the test's name in bench's table.
    rates=$(awk -F'|' '{for(i=3;i<NF;i++){g=$i; gsub(/ /,"",g); if(g ~ /^(pp|tg)[0-9]+$/){split($(i+1),a," "); printf "%s=%s ", g, a[1]}}}' "$OUT/r$round-$v.txt")
    fma=$(grep "ceilings measured" "$OUT/r$round-$v.txt" | grep -o "FMA [0-9.]*" | tail -1 | awk "{print \$2}")
    echo -e "$round\t$v\t$rates\tfma=$fma\tsteal=$st\t$((SECONDS - t0))s" | tee -a "$res"
    per_run=$(( (SECONDS - t0) > per_run ? (SECONDS - t0) : per_run ))
    grep -E "^\| (pp|tg)[0-9]+ \|" "$OUT/r$round-$v.txt" | sed "s/^/  $v profile: /"
  done
done
python3 - "$res" "${vs[@]}" <<'PY'
import sys, statistics as st, re
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
vs = sys.argv[2:]
data = {}
for r in rows:
    for kv in r[2].split():
        k, v = kv.split("=")
        data.setdefault((r[1], k), []).append(float(v))
tests = sorted({k for (_, k) in data})
print("| test | " + " | ".join(f"{v} runs | {v} median" for v in vs) + " | " + " | ".join(f"{v}/{vs[0]}" for v in vs[1:]) + " |")
for t in tests:
    meds = {v: st.median(data.get((v, t), [float("nan")])) for v in vs}
    cells = " | ".join(" ".join(f"{x:.1f}" for x in data.get((v, t), [])) + f" | {meds[v]:.2f}" for v in vs)
    print(f"| {t} | {cells} | " + " | ".join(f"{meds[v] / meds[vs[0]]:.3f}" for v in vs[1:]) + " |")
PY
echo "total: $((SECONDS - start)) s"
