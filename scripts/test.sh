#!/bin/sh
# test.sh - installs what is missing, builds, installs the commands into
# .local/ (install_local.sh), and runs the whole test suite.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" "$root/build"
"$root/scripts/install_local.sh" "$root/build"
cd "$root/build"
ctest --output-on-failure -j "$(nproc)"

# The full suite, in CI (CI set, as CI services do) or with QP_FULL_TESTS=1:
# the whole suite again under ASan+UBSan (build-asan), then every libFuzzer
# target for 60 s (build-fuzz). Any finding fails this script.
case ${CI:-} in ''|0|false) ci= ;; *) ci=1 ;; esac
if [ -n "$ci" ] || [ "${QP_FULL_TESTS:-0}" = 1 ]; then
  "$root/scripts/test_sanitizers.sh"
  "$root/scripts/fuzz.sh" 60
fi
