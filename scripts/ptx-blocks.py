#!/usr/bin/env python3
"""Count a CUDA kernel's PTX instructions per basic block, on this machine, without a GPU.

Input: a .cu file of src/ (its PTX made with the build's own nvcc command, taken from
`ninja -t commands` in BUILD, -ptx instead of -c) or a .ptx file. For each kernel (.entry) whose
name contains --kernel, prints the blocks holding an MMA or at least --min instructions: their
label, instruction count, MMAs and commonest opcodes, then the kernel's totals. The ratio of a
loop block's instructions to its MMAs, and the blocks around it (copies issued, group flushes),
show where a tensor-core kernel's issue slots go before a device call measures it (PTX, not
SASS: 64-bit address arithmetic and moves may differ in the final code).

Usage: ptx-blocks.py backend/cuda/mma_rows.cu [--build build-cuda] [--kernel gate_up_tc] [--min 60]
       ptx-blocks.py FILE.ptx [--kernel NAME]
"""
import argparse
import collections
import os
import re
import shlex
import subprocess
import sys
import tempfile


def ptx_of(source, build):
    obj = f"src/CMakeFiles/moeflux_backend_cuda.dir/{source}.o"
    cmds = subprocess.run(["ninja", "-C", build, "-t", "commands", obj], capture_output=True, text=True, check=True)
    lines = [l for l in cmds.stdout.splitlines() if l.strip()]
    if not lines:
        sys.exit(f"{build}: no build command for {obj} (configure with -DMOEFLUX_CUDA=ON)")
    args = shlex.split(lines[-1])
    if args and args[0].endswith("ccache"):
        args = args[1:]
    out, keep, skip = [], [], 0
    for a in args:  # drop the object output, the dependency file and -c
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MT", "-MF"):
            skip = 1
            continue
        if a in ("-c", "-MD"):
            continue
        keep.append(a)
    fd, path = tempfile.mkstemp(suffix=".ptx")
    os.close(fd)
    subprocess.run(keep + ["-ptx", "-o", path], cwd=build, check=True)
    with open(path) as f:
        text = f.read()
    os.unlink(path)
    return text


def entries(text):
    parts = re.split(r"^\.(?:visible )?\.?entry\s+", text, flags=re.M)
    for p in parts[1:]:
        name = p.split("(", 1)[0].strip()
        yield name, p


def blocks(body):
    cur, out = "(entry)", collections.OrderedDict()
    out[cur] = []
    for line in body.splitlines():
        s = line.strip()
        m = re.match(r"^(\$L__BB\d+_\d+):", s)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        if not s or s[0] in "/.{}" or s.startswith("//"):
            continue
        if s.startswith("@"):  # predicated: count the instruction behind the guard
            s = s.split(None, 1)[1] if " " in s else s
        out[cur].append(s.split()[0].split(".")[0].rstrip(";"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("--build", default="build-cuda")
    ap.add_argument("--kernel", default="")
    ap.add_argument("--min", type=int, default=60)
    a = ap.parse_args()
    if a.input.endswith(".ptx"):
        with open(a.input) as f:
            text = f.read()
    else:
        text = ptx_of(a.input, a.build)
    found = False
    for name, body in entries(text):
        if a.kernel not in name:
            continue
        found = True
        print(name)
        total, mmas = 0, 0
        for label, ops in blocks(body).items():
            n, m = len(ops), sum(1 for o in ops if o == "mma")
            total += n
            mmas += m
            if m or n >= a.min:
                common = ", ".join(f"{o} {c}" for o, c in collections.Counter(ops).most_common(8))
                per = f", {n / m:.1f} a MMA" if m else ""
                print(f"  {label:14s} {n:5d} instructions, {m:3d} MMAs{per}: {common}")
        print(f"  all blocks: {total} instructions, {mmas} MMAs (each block once)\n")
    if not found:
        sys.exit(f"no kernel whose name contains {a.kernel!r}")


if __name__ == "__main__":
    main()
