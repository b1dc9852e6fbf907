#!/usr/bin/env python3
"""Renders tests/data/template_cases.json with transformers' apply_chat_template and writes
tests/data/fixtures/template_goldens.json ({"transformers": version, "cases": {name: {"prompt": str}
or {"error": str}}}), which tests/template/test_template_chat.cpp compares moeflux against.

Usage (needs transformers + jinja2; run where they are installed, e.g. the GPU machine):
    python3 scripts/template_golden.py [--cases tests/data/template_cases.json] [--out ...]
"""
import argparse
import gzip
import json
import os
import shutil
import tempfile

import jinja2

try:
    import transformers
    from transformers import AutoTokenizer
except ImportError:  # --emulate works with jinja2 alone
    transformers = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_tokenizer(name, cache, workdir):
    """tests/data/tokenizers/<name> keeps tokenizer.json gzipped; unpack it into a temp dir."""
    if name not in cache:
        src = os.path.join(ROOT, "tests", "data", "tokenizers", name)
        dst = os.path.join(workdir, name)
        os.makedirs(dst)
        for f in os.listdir(src):
            if f.endswith(".gz"):
                with gzip.open(os.path.join(src, f), "rb") as i, open(os.path.join(dst, f[:-3]), "wb") as o:
                    shutil.copyfileobj(i, o)
            else:
                shutil.copy(os.path.join(src, f), dst)
        cache[name] = AutoTokenizer.from_pretrained(dst)
    return cache[name]


class EmulatedTokenizer:
    """--emulate: transformers' rendering path (ImmutableSandboxedEnvironment, trim_blocks,
    lstrip_blocks, loopcontrols, raise_exception, strftime_now, its tojson) with jinja2 alone.
    For checking moeflux where transformers is not installed; the goldens must come from
    transformers itself."""

    def __init__(self, name):
        from datetime import datetime
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        with open(os.path.join(ROOT, "tests", "data", "tokenizers", name, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        self.template = cfg.get("chat_template")
        self.special = {}
        for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
            v = cfg.get(k)
            if isinstance(v, dict):
                v = v.get("content")
            if v is not None:
                self.special[k] = v
        if "additional_special_tokens" in cfg:
            self.special["additional_special_tokens"] = cfg["additional_special_tokens"]

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        self.env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        self.env.filters["tojson"] = tojson
        self.env.globals["raise_exception"] = raise_exception
        self.env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=False, chat_template=None, tokenize=False, **kw):
        tpl = chat_template or self.template
        if tpl is None:
            raise ValueError("no chat template")
        ctx = {**self.special, **kw}
        return self.env.from_string(tpl).render(messages=messages, tools=tools, documents=None,
                                                add_generation_prompt=add_generation_prompt, **ctx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=os.path.join(ROOT, "tests", "data", "template_cases.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "fixtures", "template_goldens.json"))
    ap.add_argument("--emulate", action="store_true", help="jinja2 only, without transformers (for checking)")
    args = ap.parse_args()
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    version = "emulated" if args.emulate else transformers.__version__
    out = {"transformers": version, "jinja2": jinja2.__version__, "cases": {}}
    cache = {}
    with tempfile.TemporaryDirectory() as workdir:
        for case in cases:
            if args.emulate:
                tok = cache.setdefault(case["tokenizer"], EmulatedTokenizer(case["tokenizer"]))
            else:
                tok = load_tokenizer(case["tokenizer"], cache, workdir)
            kwargs = dict(case.get("extra", {}))
            try:
                prompt = tok.apply_chat_template(
                    case["messages"],
                    tools=case.get("tools"),
                    add_generation_prompt=case.get("add_generation_prompt", False),
                    chat_template=case.get("template"),
                    tokenize=False,
                    **kwargs,
                )
                out["cases"][case["name"]] = {"prompt": prompt}
            except Exception as e:  # the template raised (e.g. raise_exception): record the message
                out["cases"][case["name"]] = {"error": f"{type(e).__name__}: {e}"}
            print(case["name"], "->", "error" if "error" in out["cases"][case["name"]] else "ok")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
