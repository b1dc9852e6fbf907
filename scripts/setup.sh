#!/usr/bin/env bash
# Installs the Debian 12 packages moeflux builds and tests with, and the npm modules of the
# end-to-end tests (tests/e2e/package-lock.json). Safe to run repeatedly.
# Usage: scripts/setup.sh   (as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(build-essential cmake ninja-build pkg-config
      nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
      libpcre2-dev libutf8proc-dev zlib1g-dev libedit-dev liburing-dev libcpp-httplib-dev
      clang libclang-rt-14-dev llvm  # clang builds; libFuzzer / sanitizer runtimes; llvm-symbolizer
      chromium)                      # the chat page's test in a headless browser (tests/e2e)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run tests/e2e: Debian's, unless a node is there already (NodeSource's nodejs
# bundles npm and conflicts with Debian's npm package).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
else
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
e2e=tests/e2e
if [ ! -e $e2e/node_modules/.package-lock.json ] || [ $e2e/package-lock.json -nt $e2e/node_modules/.package-lock.json ]; then
  echo "setup: npm ci in $e2e"
  (cd $e2e && npm ci --ignore-scripts --no-audit --no-fund)
else
  echo "setup: $e2e/node_modules up to date"
fi
