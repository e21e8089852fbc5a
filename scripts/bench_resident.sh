#!/bin/sh
# bench_resident.sh [BUILD_DIR] - a benchmark, not a test: the start-up of a
# cold qrun (it loads, verifies and fills the BPF maps itself) against
# qrun -m pin:NAME on a model qpack load pinned once, in one run, on a tiny
# int4 model and on the real-shape Qwen3-0.6B int4 (random weights; the
# checkpoint and its container are made once in ${QP_BENCH_DIR:-/tmp/qp-bench}:
# minutes and ~3 GB the first time). Reports the medians of QP_RUNS (5) runs
# of `--ids ... -n 1` as --stats reports the start-up, and the wall time of
# the whole process, with `-p "Hi" -n 1` (the tokenizer included) for the
# loaded model (QP_14B=1: and the Qwen3-14B shape, below). Targets
# (docs/RESIDENT.md): start-up <= 50 ms on the loaded 0.6B int4, <= 100 ms on
# a loaded 14B, the whole `-p "Hi" -n 1` <= 250 ms. Needs root (qpack load).
set -eu
. "$(dirname "$0")/bench_lib.sh"
[ "$(id -u)" = 0 ] || { echo "bench_resident.sh: qpack load needs root" >&2; exit 1; }
bench_record bench_resident "$@"
runs=${QP_RUNS:-5}
ctx=${QP_CTX:-2048}
ids="9707 11 1879 0 576 1207 374 220"
tmp=$(mktemp -d)
name=bench-$$
trap '"$build/bin/qpack" unload "$name" 2>/dev/null; rm -rf "$tmp"' EXIT

mkdir -p "$work"
tiny=$work/tiny-resident
bench_checkpoint "$tiny" --preset tiny --vocab 151936 --seed 2 --tokenizer-dir "$root/assets/qwen3-tokenizer"
[ -f "$tiny-int4.qpk" ] || "$build/bin/qpack" pack "$tiny" -o "$tiny-int4.qpk" --format int4 --quiet
big=$work/0.6b-int4.qpk
if [ ! -f "$big" ]; then
    src=$(bench_06b plain)
    "$build/bin/qpack" pack "$src" -o "$big" --format int4 --quiet
fi

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# timed FILE ARGS...: qrun ARGS --stats runs times; the start-up of each into
# FILE.start, its wall time (ms) into FILE.wall
timed() {
    f=$1
    shift
    : >"$f.start"
    : >"$f.wall"
    i=0
    while [ "$i" -lt "$runs" ]; do
        t0=$(now_ms)
        "$build/bin/qrun" "$@" --stats >/dev/null 2>"$f.err"
        t1=$(now_ms)
        sed -n 's/.*start-up \([0-9.]*\) ms.*/\1/p' "$f.err" >>"$f.start"
        echo $((t1 - t0)) >>"$f.wall"
        i=$((i + 1))
    done
}

# shellcheck disable=SC2046
bench() {
    label=$1 model=$2
    timed "$tmp/cold" -m "$model" -c "$ctx" --ids "$ids" -n 1
    t0=$(now_ms)
    "$build/bin/qpack" load "$model" --name "$name" -c "$ctx" --sessions 1 >/dev/null
    load_ms=$(($(now_ms) - t0))
    timed "$tmp/pin" -m "pin:$name" --ids "$ids" -n 1
    timed "$tmp/hi" -m "pin:$name" -p "Hi" -n 1 --tokenizer "$root/assets/qwen3-tokenizer/tokenizer.json"
    "$build/bin/qpack" unload "$name"
    echo "$label ($(basename "$model"), -c $ctx, $runs runs, medians):"
    echo "  cold qrun --ids -n 1          start-up $(median $(cat "$tmp/cold.start")) ms, wall $(median $(cat "$tmp/cold.wall")) ms"
    echo "  qpack load (once)             $load_ms ms"
    echo "  qrun -m pin:NAME --ids -n 1   start-up $(median $(cat "$tmp/pin.start")) ms, wall $(median $(cat "$tmp/pin.wall")) ms"
    echo "  qrun -m pin:NAME -p Hi -n 1   start-up $(median $(cat "$tmp/hi.start")) ms, wall $(median $(cat "$tmp/hi.wall")) ms (tokenizer included)"
}

bench "tiny int4" "$tiny-int4.qpk"
bench "Qwen3-0.6B shape int4" "$big"
# QP_14B=1: the Qwen3-14B shape in int4 too (a 30 GB checkpoint made once
# and deleted after packing unless QP_KEEP=1; an 8 GB container)
if [ "${QP_14B:-0}" = 1 ]; then
    big14=$work/14b-int4.qpk
    if [ ! -f "$big14" ]; then
        bench_checkpoint "$work/14b-plain" --preset 14b --seed 1
        "$build/bin/qpack" pack "$work/14b-plain" -o "$big14" --format int4 --quiet
        [ "${QP_KEEP:-0}" = 1 ] || rm -rf "$work/14b-plain"
    fi
    bench "Qwen3-14B shape int4" "$big14"
fi
bench_recorded
