#!/usr/bin/env bash
# Installs the Debian 12 packages moeflux builds and tests with. Safe to run repeatedly.
# Usage: scripts/setup.sh   (as root, or with sudo available)
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config
      nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
      libpcre2-dev libutf8proc-dev zlib1g-dev libedit-dev liburing-dev libcpp-httplib-dev
      clang libclang-rt-14-dev llvm)  # clang builds; libFuzzer / sanitizer runtimes; llvm-symbolizer
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then echo "setup: all packages present"; exit 0; fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
