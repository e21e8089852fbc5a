#!/bin/sh
# fuzz.sh [SECONDS] [TARGETS...] - builds the libFuzzer targets (tests/fuzz)
# with clang into build-fuzz (-DQP_FUZZ=ON: ASan+UBSan+coverage) and runs
# each for SECONDS (default 60) on a scratch copy of its committed seed
# corpus and regression inputs. Prints executions and coverage per target.
# Exits non-zero when any target reports a crash, leak, timeout, OOM or UB;
# the reproducer is copied to tests/fuzz/regressions/<target>/ (commit it:
# the ctest <target>_replay runs it in every build from then on).
#
# Environment: QP_FUZZ_CC (default clang), QP_FUZZ_BUILD (default
# build-fuzz), QP_FUZZ_NO_BUILD=1 (use the existing build, e.g. when running
# several fuzz.sh at once), QP_FUZZ_ARGS (extra libFuzzer flags),
# QP_FUZZ_KEEP=DIR (keep the grown corpora and logs in DIR).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
[ $# -gt 0 ] && shift
# every target tests/fuzz/targets.cmake lists
all=$(sed -n '/^set(QP_FUZZ_TARGETS/,/)/p' "$root/tests/fuzz/targets.cmake" | grep -o 'fuzz_[a-z_]*' | tr '\n' ' ')
targets=${*:-$all}
build=${QP_FUZZ_BUILD:-$root/build-fuzz}
cc=${QP_FUZZ_CC:-clang}

if [ "${QP_FUZZ_NO_BUILD:-0}" != 1 ]; then
  cmake -S "$root" -B "$build" -DQP_FUZZ=ON -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$(nproc)" --target $targets >/dev/null
fi

if [ -n "${QP_FUZZ_KEEP:-}" ]; then
  work=$QP_FUZZ_KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=""
summary=""
for t in $targets; do
  bin=$build/tests/fuzz/$t
  [ -x "$bin" ] || { echo "fuzz.sh: no target $t ($bin)" >&2; exit 2; }
  d=$work/$t
  rm -rf "$d"
  mkdir -p "$d/corpus" "$d/artifacts"
  cp "$root/tests/fuzz/corpus/$t/"* "$d/corpus/" 2>/dev/null || true
  for r in "$root/tests/fuzz/regressions/$t/"*; do
    case $(basename "$r") in README*) continue ;; esac
    [ -f "$r" ] && cp "$r" "$d/corpus/"
  done
  start=$(date +%s)
  rc=0
  # shellcheck disable=SC2086
  (cd "$d" && "$bin" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2560 \
      -print_final_stats=1 -artifact_prefix="$d/artifacts/" ${QP_FUZZ_ARGS:-} \
      corpus >"$d/log" 2>&1) || rc=$?
  took=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log" | tail -n 1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$d/log" | tail -n 1 || true)
  cov=$(printf '%s\n' "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(printf '%s\n' "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
  corp=$(printf '%s\n' "$last" | sed -n 's/.*corp: \([^ ]*\).*/\1/p')
  status=ok
  found=$(ls "$d/artifacts" 2>/dev/null || true)
  if [ "$rc" -ne 0 ] || [ -n "$found" ] ||
     grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$d/log"; then
    status=FAILED
    failed="$failed $t"
    echo "---- $t: finding (exit $rc); log tail:" >&2
    tail -n 60 "$d/log" >&2
    mkdir -p "$root/tests/fuzz/regressions/$t"
    for a in $found; do
      cp "$d/artifacts/$a" "$root/tests/fuzz/regressions/$t/$a"
      echo "fuzz.sh: saved tests/fuzz/regressions/$t/$a" >&2
    done
  fi
  line=$(printf '%-24s %-6s %6ss  execs %-10s cov %-6s ft %-7s corpus %s' \
         "$t" "$status" "$took" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")
  echo "$line"
  summary="$summary$line
"
done
echo "---- fuzz summary (${secs}s per target)"
printf '%s' "$summary"
if [ -n "$failed" ]; then
  echo "fuzz.sh: findings in:$failed" >&2
  exit 1
fi
