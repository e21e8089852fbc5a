#!/bin/sh
# test_sanitizers.sh [BUILD_DIR] - builds the whole project with clang and
# -DQP_SANITIZE=ON (AddressSanitizer + UndefinedBehaviorSanitizer on all host
# code; BPF programs are not instrumented) into build-asan, and runs the
# whole ctest suite there (including the fuzz corpus/regression replays).
# Any sanitizer report aborts the test that hit it, so ctest fails.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-asan}
cc=${QP_SANITIZE_CC:-clang}
"$root/scripts/build.sh" "$build" -DQP_SANITIZE=ON -DCMAKE_C_COMPILER="$cc"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
ctest --output-on-failure -j "$(nproc)"
