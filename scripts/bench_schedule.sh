#!/bin/sh
# bench_schedule.sh [BUILD_DIR] - a benchmark, not a test: the kernel
# schedule (qrun --schedule kernel, docs/SCHEDULE.md) against the host's on
# the real-shape Qwen3-0.6B int4 random checkpoint (generated and packed
# once into ${QP_BENCH_DIR:-/tmp/qp-bench}), each with two threads (lanes)
# and with one, and the kernel's two lanes with the second started by a
# thread (QP_LANE_THREADS=1) instead of the step's one XDP test run: the
# medians over QP_RUNS runs (default 3, the five taking turns) of prompt and
# decode time per token (512 prompt ids, 32 decoded),
# the longest program run or work item by the kernel clock, and, with
# strace installed, the host's system calls per decode step (9 decoded
# tokens against 1, writes left out). Targets: the kernel schedule no
# slower than the host's, at most 2 system calls a step, no item over 10 ms.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_schedule "$@"
runs=${QP_RUNS:-3}
src=$(bench_06b plain)
model=${QP_MODEL:-$work/0.6b-int4.qpk}
[ -f "$model" ] || "$build/bin/qpack" pack "$src" -o "$model" --format int4 --quiet
ids=$(awk 'BEGIN { srand(5); for (i = 0; i < 512; i++) printf "%d ", 1000 + int(rand() * 149000) }')
out=$work/bench_schedule.txt
: >"$out"
# args N: the qrun options of schedule N
args() {
    case $1 in
    1) echo "--schedule host" ;;
    2) echo "--schedule host --threads 1" ;;
    3) echo "--schedule kernel" ;;
    4) echo "--schedule kernel --threads 1" ;;
    5) echo "--schedule kernel" ;;
    esac
}
# envs N: the environment of schedule N
envs() { [ "$1" != 5 ] || echo QP_LANE_THREADS=1; }
# name N: schedule N in the table
name() { if [ "$1" = 5 ]; then echo "kernel, lane 1 by a thread"; else args "$1" | sed 's/--schedule //'; fi; }
i=0
while [ "$i" -lt "$runs" ]; do
    for m in 1 2 3 4 5; do
        # shellcheck disable=SC2046
        env $(envs $m) "$build/bin/qrun" -m "$model" --ids "$ids" -n 32 --temp 0 -c 1024 --stats $(args $m) 2>&1 >/dev/null |
            sed "s/^/$m: /" >>"$out"
    done
    i=$((i + 1))
done
# median VALUES...: the middle value (mean of the two middle ones)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# pick N SED_EXPR: the number SED_EXPR takes from each --stats line of schedule N
pick() { sed -n "s/^$1: $2/\1/p" "$out"; }
# calls N: system calls per decode step of schedule N (strace -c, writes left out)
calls() {
    command -v strace >/dev/null || { echo -; return; }
    for n in 1 9; do
        # shellcheck disable=SC2046
        env $(envs "$1") strace -f -c -o "$work/bench_schedule.strace$n" "$build/bin/qrun" -m "$model" \
            --ids "9707 11 1879" -n $n --temp 0 -c 1024 $(args "$1") >/dev/null 2>&1
    done
    t1=$(awk '$NF != "write" && $NF != "total" && $4 ~ /^[0-9]+$/ { s += $4 } END { print s }' "$work/bench_schedule.strace1")
    t9=$(awk '$NF != "write" && $NF != "total" && $4 ~ /^[0-9]+$/ { s += $4 } END { print s }' "$work/bench_schedule.strace9")
    awk -v a="$t1" -v b="$t9" 'BEGIN { printf "%.1f", (b - a) / 8 }'
}
printf '%-30s %16s %16s %12s %14s\n' schedule "prompt ms/token" "decode ms/token" "longest ms" "calls/step"
for m in 1 2 3 4 5; do
    # shellcheck disable=SC2046
    printf '%-30s %16s %16s %12s %14s\n' "$(name $m)" \
        "$(median $(pick $m '.*prompt [0-9]* tokens in [0-9]* ms (\([0-9.]*\) ms\/token.*'))" \
        "$(median $(pick $m '.*generated [0-9]* tokens, \([0-9.]*\) ms\/token.*'))" \
        "$(median $(pick $m '.*(kernel clock): longest \([0-9.]*\) ms.*'))" \
        "$(calls $m)"
done
bench_recorded
