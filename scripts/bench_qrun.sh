#!/bin/sh
# bench_qrun.sh [BUILD_DIR] - a benchmark, not a test: runs qrun on the
# real-shape Qwen3-0.6B random checkpoint (generated and packed once into
# ${QP_BENCH_DIR:-/tmp/qp-bench}) several times and reports the medians of
# start-up time, prompt time per token, decode time per token, bpf calls per
# token, the longest single kernel invocation, BPF map bytes, KV bytes per
# position and peak RSS. Issue targets: decode <= 0.30 s/token, every
# invocation <= 10 ms, start-up <= 3 s. QP_MODEL=FILE.qpk benchmarks another
# container of that checkpoint instead (scripts/bench_formats.sh packs them;
# decode targets: int8 <= 0.15 s, int4 <= 0.08 s). QP_PROMPT=N gives a
# prompt of N seeded random token ids instead of the 8 default ones: the
# cost of attention over a long context (N + QP_NEW must fit in 4096).
# QP_STREAM=1 runs qrun --stream (the small-memory mode) instead.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_qrun "$@"
runs=${QP_RUNS:-5}
new=${QP_NEW:-16}
src=$(bench_06b plain)
[ -f "$src.qpk" ] || "$build/bin/qpack" pack "$src" -o "$src.qpk" --quiet
model=${QP_MODEL:-$src.qpk}
out=$work/bench_qrun.txt
: > "$out"
ids="9707 11 1879 0 576 1207 374 220"
if [ -n "${QP_PROMPT:-}" ]; then
    ids=$(awk -v n="$QP_PROMPT" 'BEGIN { srand(5); for (i = 0; i < n; i++) printf "%d ", 1000 + int(rand() * 149000) }')
fi
i=0
while [ "$i" -lt "$runs" ]; do
    # shellcheck disable=SC2046
    "$build/bin/qrun" -m "$model" --ids "$ids" -n "$new" --temp 0 $([ -n "${QP_STREAM:-}" ] && echo --stream) \
        --print-ids --stats 2>>"$out" >/dev/null
    i=$((i + 1))
done
# median VALUES...: the middle value (mean of the two middle ones)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# pick WORDS: the number after WORDS on each --stats line that has them
pick() { sed -n "s/.*$1 \([0-9.]*\).*/\1/p" "$out"; }
# shellcheck disable=SC2046
{
    echo "qrun${QP_STREAM:+ --stream}, Qwen3-0.6B shape, $(basename "$model"), $(echo "$ids" | wc -w)-token prompt, $runs runs (medians):"
    echo "  start-up          $(median $(pick 'load')) ms   (target <= 3000): checksums $(median $(pick 'checksums')), maps and programs $(median $(pick 'maps and programs')), weight copy $(median $(pick 'weight copy')) ms"
    echo "  decode            $(median $(sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) ms\/token.*/\1/p' "$out")) ms/token (target <= 300)"
    echo "  prompt            $(median $(sed -n 's/.*tokens in [0-9]* ms (\([0-9.]*\) ms\/token.*/\1/p' "$out")) ms/token"
    echo "  bpf calls         $(median $(sed -n 's/.* \([0-9.]*\) bpf calls\/token.*/\1/p' "$out")) per token"
    echo "  longest call      $(median $(pick 'longest call')) ms   (target <= 10)"
    echo "  calls over 10 ms  $(median $(sed -n 's/.*ms (.*), \([0-9]*\) of [0-9]* calls over.*/\1/p' "$out")) per run, of $(median $(sed -n 's/.* of \([0-9]*\) calls over.*/\1/p' "$out")) (a shared host's preemption stretches single calls)"
    grep 'BPF maps' "$out" | tail -1 | sed 's/^qrun: /  /'
}
bench_recorded
