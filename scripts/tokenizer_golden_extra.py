#!/usr/bin/env python3
"""Hugging Face reference ids for tests/data/tokenizer_extra_texts.json.

Run where the `tokenizers` package is installed (the GPU machine):
    python3 scripts/tokenizer_golden_extra.py
It writes tests/data/fixtures/tokenizer_extra_goldens.json:
    {name: {"texts": [...], "ids": [[...]], "decoded": [...], "tokenizers_version": v}}
for the qwen3, deepseek_v3 and llama2 tokenizers of tests/data/tokenizers (add_special_tokens
False, decode with skip_special_tokens False). test_tokenizer checks moeflux against it.
"""
import gzip
import json
import os
import sys

import tokenizers
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
NAMES = ["qwen3", "deepseek_v3", "llama2"]


def load(name):
    with gzip.open(os.path.join(DATA, "tokenizers", name, "tokenizer.json.gz"), "rt", encoding="utf-8") as f:
        return Tokenizer.from_str(f.read())


def main():
    with open(os.path.join(DATA, "tokenizer_extra_texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    assert isinstance(texts, list) and all(isinstance(t, str) for t in texts)
    out = {}
    for name in NAMES:
        tok = load(name)
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
        out[name] = {"texts": texts, "ids": ids, "decoded": decoded, "tokenizers_version": tokenizers.__version__}
        print(f"{name}: {len(texts)} texts, {sum(map(len, ids))} tokens", file=sys.stderr)
    path = os.path.join(DATA, "fixtures", "tokenizer_extra_goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
