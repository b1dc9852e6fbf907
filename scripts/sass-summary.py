#!/usr/bin/env python3
"""Summarise Nsight Compute's per-instruction source counters of one kernel.

Input: the CSV of `ncu --section SourceCounters --page source --print-source sass --csv`
(scripts/device-check.sh, step cuda-sass). Prints the warp instructions executed in all, the
stall reasons sampled, and the SASS in chunks of N lines with each chunk's executed
instructions, samples and commonest opcodes (--hot: only the chunks that ran, e.g. without a
template's instances the launch did not take), then (--lines M) every line executed at least M
times: where a kernel's instructions go without a disassembler on this machine.

Usage: sass-summary.py FILE.csv [--chunk 40] [--hot] [--lines MIN]
"""
import argparse
import collections
import csv
import gzip
import sys


def rows_of(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if head is None:
        sys.exit(f"{path}: no 'Address' header: not a --page source CSV")
    return rows[head], rows[head + 1:]


def number(r, i):
    return int(r[i]) if i < len(r) and r[i].isdigit() else 0


def opcode(src):
    parts = src.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--chunk", type=int, default=40)
    ap.add_argument("--hot", action="store_true")
    ap.add_argument("--lines", type=int, default=None)
    a = ap.parse_args()
    h, data = rows_of(a.csv)
    src, ex, smp = h.index("Source"), h.index("Instructions Executed"), h.index("Warp Stall Sampling (All Samples)")
    stalls = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(number(r, ex) for r in data)
    print(f"warp instructions executed: {total}, stall samples: {sum(number(r, smp) for r in data)}, lines: {len(data)}")
    reasons = collections.Counter()
    for r in data:
        for i in stalls:
            reasons[h[i]] += number(r, i)
    print("stalls:", ", ".join(f"{k[6:]} {v}" for k, v in reasons.most_common(8)))
    for a0 in range(0, len(data), a.chunk):
        ch = data[a0:a0 + a.chunk]
        ops = collections.Counter(opcode(r[src]) for r in ch)
        e, samples = sum(number(r, ex) for r in ch), sum(number(r, smp) for r in ch)
        if a.hot and e == 0 and samples == 0:
            continue
        print(f"{a0:5d} {e:10d} {100.0 * e / max(total, 1):5.1f}% samples {samples:5d}  "
              + " ".join(f"{k}:{v}" for k, v in ops.most_common(6)))
    if a.lines is not None:
        for k, r in enumerate(data):
            if number(r, ex) >= a.lines:
                print(f"{k:5d} {number(r, ex):10d} {number(r, smp):5d}  {r[src].strip()}")


if __name__ == "__main__":
    main()
