#!/usr/bin/env bash
# Configures and builds moeflux (default: build/, gcc or the system c++, RelWithDebInfo).
# Usage: scripts/build.sh [TARGET...]   (no target: everything, tests included)
# Environment (all optional):
#   MOEFLUX_BUILD_DIR   build directory (default build)
#   MOEFLUX_BUILD_TYPE  Debug, RelWithDebInfo (default) or Release
#   CC / CXX            compilers, read by CMake when it first configures a directory: give a
#                       fresh MOEFLUX_BUILD_DIR to each compiler
#   MOEFLUX_WERROR      ON: warnings are errors (CI); default OFF
#   MOEFLUX_CMAKE_ARGS  further arguments to cmake's configure step
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${MOEFLUX_BUILD_DIR:-build}
args=(-S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${MOEFLUX_BUILD_TYPE:-RelWithDebInfo}")
[ -n "${MOEFLUX_WERROR:-}" ] && args+=(-DMOEFLUX_WERROR="$MOEFLUX_WERROR")
read -r -a extra <<<"${MOEFLUX_CMAKE_ARGS:-}"
cmake "${args[@]}" "${extra[@]}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
