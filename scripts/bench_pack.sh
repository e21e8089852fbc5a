#!/bin/sh
# bench_pack.sh [-n RUNS] [-b BUILD_DIR] [CHECKPOINT_DIR] - how long `qpack pack`
# takes on a checkpoint of Qwen3-0.6B's real shapes, and how much memory.
#
# A benchmark, not a test: it prints numbers and compares them with the
# targets, it does not fail when they are missed (the exit status is non-zero
# only when something does not run). Timings depend on the machine and on
# what else uses its disk and cores; compare runs made side by side.
#
# The checkpoint (random values, `qp-gen-checkpoint --preset 0.6b --seed 1`,
# 1.5 GB of BF16) is generated once into CHECKPOINT_DIR (default
# /tmp/qp-bench-0.6b) and reused by later runs; a folder that is not empty and
# was not made by this script is refused, never overwritten. Each run packs
# into a temporary folder of this script's own (2.4 GB, removed at the end),
# measured by /usr/bin/time: wall seconds and peak resident memory (its %M,
# in kilobytes; MB here is that / 1000).
#
# Targets: wall <= 10 s, peak RSS <= 512 MB (medians of RUNS, default 5).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
build=$root/build
while getopts n:b: opt; do
    case $opt in
    n) runs=$OPTARG ;;
    b) build=$OPTARG ;;
    *) echo "usage: $0 [-n RUNS] [-b BUILD_DIR] [CHECKPOINT_DIR]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
ckpt=${1:-/tmp/qp-bench-0.6b}
case $runs in '' | *[!0-9]* | 0) echo "$0: RUNS must be a positive number" >&2; exit 2 ;; esac
[ -x /usr/bin/time ] || { echo "$0: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" --target qpack qp-gen-checkpoint -j "$(nproc)" >/dev/null
qpack=$build/packer/qpack
gen=$build/scripts/qp-gen-checkpoint

marker=$ckpt/.qp-bench-pack
recipe="qp-gen-checkpoint --preset 0.6b --seed 1"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$recipe" ] && [ -f "$ckpt/config.json" ]; then
    echo "checkpoint: $ckpt (cached)"
else
    if [ -d "$ckpt" ] && [ -n "$(ls -A "$ckpt")" ] && [ ! -f "$marker" ]; then
        echo "$0: $ckpt is not empty and was not made by this script; give another folder" >&2
        exit 2
    fi
    mkdir -p "$ckpt"
    rm -f "$marker"
    echo "checkpoint: generating $ckpt ($recipe)"
    "$gen" "$ckpt" --preset 0.6b --seed 1
    echo "$recipe" >"$marker"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/qp-bench-pack.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

echo "command: $qpack pack $ckpt -o $work/out.qpk --quiet"
i=1
while [ "$i" -le "$runs" ]; do
    rm -f "$work/out.qpk"
    /usr/bin/time -f "%e %M" -o "$work/time" "$qpack" pack "$ckpt" -o "$work/out.qpk" --quiet
    read -r wall rss_kb <"$work/time"
    echo "$wall $rss_kb" >>"$work/all"
    awk -v i="$i" -v w="$wall" -v k="$rss_kb" 'BEGIN { printf "run %d: %6.2f s wall, peak RSS %6.1f MB\n", i, w, k / 1000 }'
    i=$((i + 1))
done

median() { # column of $work/all
    cut -d' ' -f"$1" "$work/all" | sort -n | awk '
        { v[NR] = $1 }
        END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
wall=$(median 1)
rss_kb=$(median 2)
awk -v w="$wall" -v k="$rss_kb" -v n="$runs" 'BEGIN {
    mb = k / 1000
    printf "median of %d: %.2f s wall (target <= 10 s: %s), peak RSS %.1f MB (target <= 512 MB: %s)\n",
           n, w, w <= 10 ? "met" : "MISSED", mb, mb <= 512 ? "met" : "MISSED"
}'
