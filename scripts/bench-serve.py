#!/usr/bin/env python3
"""Load benchmark of `moeflux serve`: starts the server on a model, then for each client count
runs that many concurrent streaming clients (each REQUESTS completions of MAX_TOKENS tokens
after a prompt of about PROMPT words, greedy) and prints a table: time to first token and
inter-token latency (p50 / p99), aggregate generated tokens per second, and the gain over one
client. --turn-words N adds a conversation's second turn: a prompt of N words, then the same
text with the answer and a new line, against the same text on a server that has forgotten it
(a prompt of other words in between, with one slot and no prefix cache): the time to first
token with the prefix reused and without. Python standard library only.

  scripts/bench-serve.py --moeflux build/src/moeflux -m PACK [--tokenizer DIR] [--clients 1,4,16] [--turn-words 1500]
"""
import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import threading
import time


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def one_request(port, prompt, max_tokens):
    """(ttft_s, [inter-token gaps], generated tokens, text, usage) of one streamed completion."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    ttft, last, gaps, tokens, text, usage = None, None, [], 0, "", {}
    buf = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            data = event[len(b"data: "):]
            if data == b"[DONE]":
                continue
            j = json.loads(data)
            if j.get("usage"):
                usage = j["usage"]
                tokens = usage["completion_tokens"]
            if j["choices"] and j["choices"][0].get("text"):
                text += j["choices"][0]["text"]
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
    conn.close()
    return ttft if ttft is not None else float("nan"), gaps, tokens, text, usage


def run_clients(port, n, requests, prompt, max_tokens):
    ttfts, gaps, tokens, errors = [], [], [0], []
    lock = threading.Lock()

    def client(i):
        for r in range(requests):
            try:
                t, g, k, _, _ = one_request(port, f"Client {i} request {r}. {prompt}", max_tokens)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))
                return
            with lock:
                ttfts.append(t)
                gaps.extend(g)
                tokens[0] += k

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return ttfts, gaps, tokens[0], wall, errors


class serve:
    """moeflux serve on a free port for the `with` block (its port)."""

    def __init__(self, a, slots, extra):
        self.cmd = [a.moeflux, "serve", "-m", a.model, "--port", "0", "--slots", str(slots), "--queue", "256"]
        if a.tokenizer:
            self.cmd += ["--tokenizer", a.tokenizer]
        self.cmd += a.extra.split() + extra

    def __enter__(self):
        self.server = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.server.stdout.readline()
        m = re.search(r"http://[^:]+:(\d+)", line)
        if not m:
            self.server.kill()
            sys.exit(f"the server did not start: {line}{self.server.stderr.read()}")
        print(line.strip(), file=sys.stderr)
        return int(m.group(1))

    def __exit__(self, *exc):
        self.server.send_signal(2)
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()


def clients_table(a, port, prompt):
    """The table of --clients concurrent streaming clients."""
    run_clients(port, 1, 1, prompt, 4)  # warm-up
    print(f"\n{a.requests} completions per client, ~{a.prompt_words}-word prompts, {a.max_tokens} tokens each, greedy\n")
    print("| clients | completions | TTFT p50 ms | TTFT p99 ms | inter-token p50 ms | inter-token p99 ms | aggregate tok/s | x one client |")
    print("|---|---|---|---|---|---|---|---|")
    base = None
    for n in [int(x) for x in a.clients.split(",")]:
        ttfts, gaps, tokens, wall, errors = run_clients(port, n, a.requests, prompt, a.max_tokens)
        if errors:
            print(f"| {n} | errors: {errors[0]} |")
            continue
        tps = tokens / wall
        base = base or tps
        print(f"| {n} | {len(ttfts)} | {1e3 * percentile(ttfts, 50):.0f} | {1e3 * percentile(ttfts, 99):.0f} | "
              f"{1e3 * percentile(gaps, 50):.1f} | {1e3 * percentile(gaps, 99):.1f} | {tps:.1f} | {tps / base:.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moeflux", default="build/src/moeflux")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokenizer", default="")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=2, help="completions per client")
    ap.add_argument("--prompt-words", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--extra", default="", help="more arguments for moeflux serve (e.g. '--backend cuda')")
    ap.add_argument("--turn-words", type=int, default=0, help="also time a second turn after a prompt of this many words")
    a = ap.parse_args()
    words = ("the jury said that the county had been in the first of the city and the state " * 400).split()
    if a.clients:
        with serve(a, a.slots, []) as port:
            clients_table(a, port, " ".join(words[:a.prompt_words]))
    if a.turn_words:
        first = " ".join(words[:a.turn_words])
        print("\n| second turn of a %d-word prompt | prompt tokens | reused | TTFT ms |" % a.turn_words)
        print("|---|---|---|---|")
        for label, slots, extra in (("prefix reused (slot kept)", 2, []), ("prefix reused (prefix cache)", 1, []),
                                    ("prefilled again (no reuse)", 1, ["--cache-ram", "0"])):
            with serve(a, slots, extra) as port:
                _, _, _, answer, _ = one_request(port, first, 8)
                if slots == 1:
                    one_request(port, "Another conversation entirely, asked in between. " * 4, 4)
                t, _, _, _, u = one_request(port, first + answer + " And then the mayor said", 8)
                cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
                print(f"| {label} | {u.get('prompt_tokens', 0)} | {cached} | {1e3 * t:.0f} |")


if __name__ == "__main__":
    main()
