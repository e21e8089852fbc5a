#!/bin/sh
# bench_pack.sh [-n RUNS] [-b BUILD_DIR] [-f "FORMATS"] [-p PRESET] [CHECKPOINT_DIR]
# - how long `qpack pack` takes on a checkpoint of a real Qwen3 shape, how
# much CPU and how much memory, per format.
#
# A benchmark, not a test: it prints numbers and compares them with the
# targets, it does not fail when they are missed (the exit status is non-zero
# only when something does not run). Timings depend on the machine and on
# what else uses its disk and cores (the load average is printed before and
# after); the formats are run in turn within each round, so they see the same
# conditions. CPU time (user + system) does not depend on the other load.
#
# The checkpoint (random values, `qp-gen-checkpoint --preset PRESET --seed 1`,
# default preset 0.6b: 1.5 GB of BF16; 4b: 8 GB, 8b: 16 GB) is generated once
# into CHECKPOINT_DIR (default /tmp/qp-bench-PRESET) and reused by later runs;
# a folder that is not empty and was not made by this script is refused, never
# overwritten. Each run packs into a temporary folder of this script's own
# (removed at the end), measured by /usr/bin/time: wall seconds, user + system
# CPU seconds and peak resident memory (its %M, in kilobytes; MB here is
# that / 1000).
#
# FORMATS: any of q24 int8 int4 int4-pure (default "q24 int8 int4").
# Targets (medians of RUNS, default 3, on a quiet 2-core machine):
# 0.6b: q24 <= 10 s, int8 <= 15 s, int4 <= 25 s; 8b: int4 <= 480 s; every
# shape and format: peak RSS <= 512 MB.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_pack "$@"
runs=3
build=$root/build
formats="q24 int8 int4"
preset=0.6b
while getopts n:b:f:p: opt; do
    case $opt in
    n) runs=$OPTARG ;;
    b) build=$OPTARG ;;
    f) formats=$OPTARG ;;
    p) preset=$OPTARG ;;
    *) echo "usage: $0 [-n RUNS] [-b BUILD_DIR] [-f \"FORMATS\"] [-p PRESET] [CHECKPOINT_DIR]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
ckpt=${1:-/tmp/qp-bench-$preset}
case $runs in '' | *[!0-9]* | 0) echo "$0: RUNS must be a positive number" >&2; exit 2 ;; esac
for f in $formats; do
    case $f in q24 | int8 | int4 | int4-pure) ;; *) echo "$0: unknown format '$f'" >&2; exit 2 ;; esac
done
[ -x /usr/bin/time ] || { echo "$0: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" --target qpack qp-gen-checkpoint -j "$(nproc)" >/dev/null
qpack=$build/bin/qpack
gen=$build/bin/qp-gen-checkpoint

marker=$ckpt/.qp-bench-pack
recipe="qp-gen-checkpoint --preset $preset --seed 1"
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
    "$gen" "$ckpt" --preset "$preset" --seed 1
    echo "$recipe" >"$marker"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/qp-bench-pack.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: $qpack pack $ckpt -o OUT --format FORMAT --quiet"
i=1
while [ "$i" -le "$runs" ]; do
    for f in $formats; do
        rm -f "$work/out.qpk"
        /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$qpack" pack "$ckpt" -o "$work/out.qpk" --format "$f" --quiet
        read -r wall user sys rss_kb <"$work/time"
        echo "$wall $user $sys $rss_kb" >>"$work/all.$f"
        awk -v f="$f" -v i="$i" -v w="$wall" -v u="$user" -v s="$sys" -v k="$rss_kb" 'BEGIN {
            printf "%-9s run %d: %7.2f s wall, %7.2f s CPU, peak RSS %7.1f MB\n", f, i, w, u + s, k / 1000 }'
    done
    i=$((i + 1))
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { # FORMAT COLUMN...: the median of the sum of those columns of $work/all.FORMAT
    f=$1
    shift
    awk -v cols="$*" 'BEGIN { n = split(cols, c, " ") } { s = 0; for (k = 1; k <= n; k++) s += $c[k]; print s }' \
        "$work/all.$f" | sort -n | awk '
        { v[NR] = $1 }
        END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
target() { # FORMAT: the wall target in seconds for this preset, or 0
    case "$preset/$1" in
    0.6b/q24) echo 10 ;; 0.6b/int8) echo 15 ;; 0.6b/int4) echo 25 ;; 8b/int4) echo 480 ;; *) echo 0 ;;
    esac
}
for f in $formats; do
    awk -v f="$f" -v n="$runs" -v w="$(median "$f" 1)" -v c="$(median "$f" 2 3)" -v k="$(median "$f" 4)" \
        -v t="$(target "$f")" 'BEGIN {
        mb = k / 1000
        printf "%-9s median of %d: %.2f s wall", f, n, w
        if (t > 0)
            printf " (target <= %d s: %s)", t, w <= t ? "met" : "MISSED"
        printf ", %.2f s CPU, peak RSS %.1f MB (target <= 512 MB: %s)\n", c, mb, mb <= 512 ? "met" : "MISSED"
    }'
done
bench_recorded
