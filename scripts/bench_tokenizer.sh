#!/bin/sh
# bench_tokenizer.sh [BUILD_DIR] - tokenizer load time and encode throughput.
#
# Load: 11 fresh processes (as qrun starts), median. Encode: 4 MB of
# generated mixed text (fixed seed), encoded in one call, median of 5 runs,
# cold (new tokenizer, empty word cache) and warm. One core.
# Targets: load <= 150 ms, encode >= 5 MB/s.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_tokenizer "$@"
tokenizer=$root/assets/qwen3-tokenizer/tokenizer.json
"$root/scripts/fetch_tokenizer.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target qptok-bench -j "$(nproc)" >/dev/null
bench=$build/devtools/qptok-bench

times=""
for i in 1 2 3 4 5 6 7 8 9 10 11; do
    times="$times $(taskset -c 0 "$bench" load "$tokenizer")"
done
echo "$times" | tr ' ' '\n' | grep . | sort -n | awk '
    { v[NR] = $1 }
    END { printf "load: median %.1f ms (11 runs, min %.1f, max %.1f ms; target <= 150)\n", v[6], v[1], v[NR] }'
taskset -c 0 "$bench" encode "$tokenizer" 4 5
echo "(encode target >= 5 MB/s)"
bench_recorded
