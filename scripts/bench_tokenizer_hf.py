#!/usr/bin/env python3
"""Single-core encode speed of Hugging Face `tokenizers` on the text bench_tokenizer uses.

    build/bench/bench_tokenizer --write-text /tmp/english.txt      # the same generated text
    python3 scripts/bench_tokenizer_hf.py /tmp/english.txt [--reps 5]
Encodes paragraph by paragraph (add_special_tokens=False) with one thread
(RAYON_NUM_THREADS=1), timing process CPU time as bench_tokenizer does, printing the table columns bench_tokenizer prints, so the two compare
directly (it includes the per-call Python overhead; the batch column has less).
"""
import argparse
import gzip
import os
import statistics
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def paragraphs(text):
    out, start = [], 0
    while start < len(text):
        end = text.find("\n\n", start)
        end = len(text) if end < 0 else end + 2
        out.append(text[start:end])
        start = end
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("text")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokenizers", nargs="*", default=["qwen3", "deepseek_v3", "llama2"])
    args = ap.parse_args()
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    paras = paragraphs(text)
    nbytes = len(text.encode("utf-8"))
    print(f"text: {nbytes / 1e6:.2f} MB English, {len(paras)} paragraphs; one thread, CPU time; {args.reps} warm repeats")
    print(f"{'tokenizer':<14} {'load s':>8} {'encode MB/s':>14} {'cold MB/s':>12} {'Mtok/s':>12} {'bytes/tok':>12} "
          f"{'batch MB/s':>12} {'decode MB/s':>14}")
    for name in args.tokenizers:
        t0 = time.process_time()
        with gzip.open(os.path.join(ROOT, "tests", "data", "tokenizers", name, "tokenizer.json.gz"), "rt",
                       encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())
        load = time.process_time() - t0
        rates, cold, ids = [], 0.0, None
        for r in range(args.reps + 1):
            t0 = time.process_time()
            ids = [tok.encode(p, add_special_tokens=False).ids for p in paras]
            rate = nbytes / (time.process_time() - t0) / 1e6
            if r == 0:
                cold = rate
            else:
                rates.append(rate)
        n_tokens = sum(map(len, ids))
        # encode_batch with one rayon thread: less Python overhead per paragraph.
        t0 = time.process_time()
        tok.encode_batch(paras, add_special_tokens=False)
        batch = nbytes / (time.process_time() - t0) / 1e6
        t0 = time.process_time()
        out_bytes = sum(len(tok.decode(i).encode("utf-8")) for i in ids)
        dec = out_bytes / (time.process_time() - t0) / 1e6
        mean = statistics.mean(rates)
        sd = statistics.pstdev(rates)
        enc = f"{mean:.2f} +- {sd:.2f}"
        print(f"{name:<14} {load:8.2f} {enc:>14} {cold:12.2f} {mean / (nbytes / n_tokens):12.3f} "
              f"{nbytes / n_tokens:12.2f} {batch:12.2f} {dec:14.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
