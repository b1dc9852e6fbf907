#!/usr/bin/env bash
# Builds moeflux and runs the whole CTest suite. README's test command; .ci/run calls it.
# The build's directory, type and compiler come from scripts/build.sh's environment
# (MOEFLUX_BUILD_DIR, MOEFLUX_BUILD_TYPE, CC / CXX, MOEFLUX_WERROR).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir "${MOEFLUX_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" --timeout 900
