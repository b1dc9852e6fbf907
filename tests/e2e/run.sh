#!/usr/bin/env bash
# Runs one end-to-end test of tests/e2e under node, for CTest (tests/CMakeLists.txt, label e2e).
# What the test needs and does not find (node 18 or later, the npm modules package-lock.json
# pins, and with --chromium Debian's chromium or $MOEFLUX_CHROMIUM; scripts/setup.sh installs
# them all) skips it with exit status 77, unless MOEFLUX_REQUIRE_E2E=1 (.ci/run) makes it fail.
# Usage: tests/e2e/run.sh [--chromium] TEST.test.mjs PATH/TO/moeflux
set -euo pipefail
cd "$(dirname "$0")"
chromium=""
if [ "${1:-}" = --chromium ]; then chromium=${MOEFLUX_CHROMIUM:-/usr/bin/chromium}; shift; fi
missing() {
  if [ "${MOEFLUX_REQUIRE_E2E:-}" = 1 ]; then echo "FAIL: $* (MOEFLUX_REQUIRE_E2E=1; scripts/setup.sh installs it)"; exit 1; fi
  echo "SKIP: $* (scripts/setup.sh installs it)"
  exit 77
}
command -v node >/dev/null || missing "no node"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' ||
  missing "node $(node --version) is older than 18"
# Every package of package-lock.json at its version in node_modules.
if ! stale=$(node -e '
  const fs = require("fs");
  const bad = [];
  for (const [dir, pkg] of Object.entries(JSON.parse(fs.readFileSync("package-lock.json", "utf8")).packages)) {
    if (!dir) continue;
    let v = null;
    try { v = JSON.parse(fs.readFileSync(dir + "/package.json", "utf8")).version; } catch {}
    if (v !== pkg.version) bad.push(dir.slice("node_modules/".length) + "@" + pkg.version + (v ? " (found " + v + ")" : ""));
  }
  if (bad.length) { console.log(bad.join(", ")); process.exit(1); }'); then
  missing "tests/e2e/node_modules lacks $stale"
fi
if [ -n "$chromium" ] && [ ! -x "$chromium" ]; then missing "no $chromium"; fi
exec node "$@"
