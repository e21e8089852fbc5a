#!/bin/sh
# bench_kv.sh [BUILD_DIR] - a benchmark, not a test: the two KV caches
# (qrun --kv-cache int16|int8) on the real-shape Qwen3-0.6B random
# checkpoint, int4 and q24 containers (packed once into
# ${QP_BENCH_DIR:-/tmp/qp-bench}). For each container and cache:
#   decode@P   ms/token at positions 16, 2048 and 4096 (qp-bench-context,
#              median of 7 steps): the cache below P is never written, so
#              every position weighs the same and none is skipped, the most
#              work attention can have there; the ratio of 4096 to 16 (the
#              target with int8 and int4 weights: at most 1.8)
#   attention  the attention kernel's ms per token at 4096, both threads
#   longest    the longest program run at 4096 by the kernel's clock
#   memory     KV bytes per position, and how many sessions of 4,096
#              positions fit in 16 GiB of KV cache
# QP_REAL=1 also runs a real prompt of 4,080 random tokens through qrun
# (int4; minutes per cache): its ms/token, then 16 tokens decoded after it.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_kv "$@"
src=$(bench_06b plain)
[ -f "$work/0.6b-int4.qpk" ] || "$build/bin/qpack" pack "$src" -o "$work/0.6b-int4.qpk" --format int4 --quiet
[ -f "$src.qpk" ] || "$build/bin/qpack" pack "$src" -o "$src.qpk" --quiet
out=$(mktemp "$work/bench_kv.XXXXXX")
trap 'rm -f "$out"' EXIT INT TERM

echo "Qwen3-0.6B shape, decode ms/token at a position (qp-bench-context: every position weighs), 2 threads:"
printf '  %-6s %-6s %8s %8s %8s %7s %11s %9s %12s %9s\n' weights cache @16 @2048 @4096 4096/16 attention longest bytes/pos "in 16 GiB"
for fmt in int4 q24; do
    model=$src.qpk
    [ "$fmt" = int4 ] && model=$work/0.6b-int4.qpk
    for kv in int16 int8; do
        QP_KV_CACHE=$kv "$build/devtools/qp-bench-context" "$model" 16 2048 4096 >"$out"
        # ms at each position, attention ms and longest run at 4096, bytes per position
        awk -v fmt="$fmt" -v kv="$kv" '
            /^position/ { ms[++n] = $3; bytes = $(NF - 6); longest = $(NF - 1) }
            /by kernel/ { for (i = 1; i <= NF; i++) if ($i ~ /^attention8?$/) att = $(i + 1) }
            END {
                sessions = int(16 * 2^30 / (4096 * bytes))
                printf "  %-6s %-6s %8.1f %8.1f %8.1f %6.2fx %9.1f ms %6.2f ms %12d %9d\n", fmt, kv, ms[1], ms[2], ms[3],
                       ms[3] / ms[1], att, longest, bytes, sessions
            }' "$out"
    done
done

if [ "${QP_REAL:-0}" = 1 ]; then
    ids=$(awk 'BEGIN { srand(5); for (i = 0; i < 4080; i++) printf "%d ", 1000 + int(rand() * 149000) }')
    echo "A real 4,080-token prompt (int4), then 16 tokens:"
    for kv in int16 int8; do
        "$build/bin/qrun" -m "$work/0.6b-int4.qpk" -c 4096 --no-verify --kv-cache "$kv" --ids "$ids" -n 16 --temp 0 \
            --print-ids --stats 2>"$out" >/dev/null
        prompt=$(sed -n 's/.*tokens in [0-9]* ms (\([0-9.]*\) ms\/token.*/\1/p' "$out")
        decode=$(sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) ms\/token.*/\1/p' "$out")
        longest=$(sed -n 's/.*kernel clock): longest \([0-9.]*\) ms.*/\1/p' "$out")
        echo "  $kv: prompt $prompt ms/token, decode after it $decode ms/token, longest program run $longest ms"
    done
fi
bench_recorded
