#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, fuzz/README.md) and runs each for
# MOEFLUX_FUZZ_SECONDS (default 20) over its seed corpus in fuzz/, as the fuzz build's CTest tests.
# Environment (optional): MOEFLUX_FUZZ_DIR (default build-fuzz), MOEFLUX_FUZZ_SECONDS,
# MOEFLUX_WERROR (ON: warnings are errors).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${MOEFLUX_FUZZ_DIR:-build-fuzz}
args=(-S . -B "$dir" -G Ninja -DMOEFLUX_FUZZ=ON -DMOEFLUX_TESTS=OFF
      -DMOEFLUX_FUZZ_SECONDS="${MOEFLUX_FUZZ_SECONDS:-20}"
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
[ -n "${MOEFLUX_WERROR:-}" ] && args+=(-DMOEFLUX_WERROR="$MOEFLUX_WERROR")
cmake "${args[@]}" >/dev/null
targets=()
for src in fuzz/fuzz_*.cpp; do targets+=(--target "$(basename "$src" .cpp)"); done
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
ctest --test-dir "$dir" -L fuzz --output-on-failure -j"$(nproc)"
