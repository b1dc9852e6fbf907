#!/usr/bin/env bash
# Builds moeflux and runs the whole CTest suite. README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
