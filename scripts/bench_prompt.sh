#!/bin/sh
# bench_prompt.sh [BUILD_DIR] - a benchmark, not a test: prompts, long
# contexts and a shared machine, on the real-shape Qwen3-0.6B random
# checkpoint (generated and packed once, q24 and int4, into
# ${QP_BENCH_DIR:-/tmp/qp-bench}). For each format it reports the medians of
# QP_RUNS runs (default 3), "before" and "after" interleaved run by run:
#   prompt   ms/token of a 512-token prompt, bpf calls per prompt token
#   decode@16, decode@4096   ms/token of 16 tokens generated after a prompt
#            of 16 and of 4080 tokens (-c 4096; the ratio's target is <= 2)
#   busy     decode@16 while a competing busy loop (started here, stopped
#            after the run, at most 10 minutes) holds one of the cores; the
#            ratio to the quiet run's target is <= 2.5
#   longest  the longest single kernel invocation of the run (target <= 10 ms)
#   lookup   "after" only, --lookup QP_LOOKUP (default 15, a block's worth:
#            the fastest where drafts are kept) against without
#            it, decode ms/token and the speed-up (target >= 1.5), twice:
#            "falling"  64 tokens after a short prompt that repeats: the
#                       random model takes ~20 tokens to fall into a loop,
#                       and drafts are refused on the way;
#            "looping"  96 tokens after that prompt followed by the model's
#                       own first 40 tokens (from a plain run): a prompt
#                       whose continuation repeats, every draft kept
# "after" is BUILD_DIR's qrun with its default block; "before" is
# QRUN_BEFORE (a qrun binary, e.g. the main branch's build) or, when unset,
# the same qrun with QP_BLOCK=1 (one position per block: the prompt speed
# before blocks). QP_FORMATS="q24 int4" picks the formats; QP_SKIP_LONG=1
# skips the 4096 context (its prompt takes minutes "before"); QP_LOOKUP_ONLY=1
# runs the lookup lines alone.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_prompt "$@"
runs=${QP_RUNS:-3}
after=$build/bin/qrun
src=$(bench_06b plain)
[ -f "$src.qpk" ] || "$build/bin/qpack" pack "$src" -o "$src.qpk" --quiet
[ -f "$work/0.6b-int4.qpk" ] || "$build/bin/qpack" pack "$src" -o "$work/0.6b-int4.qpk" --format int4 --quiet
log=$(mktemp "$work/bench_prompt.XXXXXX")
busy_pid=

stop_busy() { [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; busy_pid=; }
trap 'stop_busy; rm -f "$log"' EXIT INT TERM

# ids N: N seeded random token ids
ids() { awk -v n="$1" 'BEGIN { srand(5); for (i = 0; i < n; i++) printf "%d ", 1000 + int(rand() * 149000) }'; }

# run WHICH MODEL PROMPT_LEN NEW CTX: one qrun run, its --stats lines on stdout
run() {
    which=$1 model=$2 n=$3 new=$4 ctx=$5
    if [ "$which" = before ] && [ -n "${QRUN_BEFORE:-}" ]; then
        "$QRUN_BEFORE" -m "$model" -c "$ctx" --no-verify --ids "$(ids "$n")" -n "$new" --print-ids --temp 0 --stats 2>&1 >/dev/null
    elif [ "$which" = before ]; then
        QP_BLOCK=1 "$after" -m "$model" -c "$ctx" --no-verify --ids "$(ids "$n")" -n "$new" --print-ids --temp 0 --stats 2>&1 >/dev/null
    else
        "$after" -m "$model" -c "$ctx" --no-verify --ids "$(ids "$n")" -n "$new" --print-ids --temp 0 --stats 2>&1 >/dev/null
    fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "-" }'; }
# field TAG REGEX: the medians of one sed capture over the log lines of TAG
field() { grep "^$1 " "$log" | sed -n "s/$2/\1/p" | median; }

# measure TAG WHICH MODEL PROMPT_LEN NEW CTX
measure() {
    run "$2" "$3" "$4" "$5" "$6" | sed "s/^/$1 /" >>"$log"
}

# lookup TAG MODEL IDS NEW: decode without and with --lookup, interleaved
lookup() {
    "$after" -m "$2" --no-verify --ids "$3" -n "$4" --print-ids --stats 2>&1 >/dev/null | sed "s/^/$1-plain /" >>"$log"
    "$after" -m "$2" --no-verify --ids "$3" -n "$4" --print-ids --stats --lookup "$look_n" 2>&1 >/dev/null |
        sed "s/^/$1-lookup /" >>"$log"
}
look_n=${QP_LOOKUP:-15}

for fmt in ${QP_FORMATS:-q24 int4}; do
    model=$src.qpk
    [ "$fmt" = int4 ] && model=$work/0.6b-int4.qpk
    i=0
    while [ "$i" -lt "$runs" ]; do
        for which in before after; do
            [ -z "${QP_LOOKUP_ONLY:-}" ] || break
            measure "$fmt-$which-prompt" "$which" "$model" 512 1 600
            measure "$fmt-$which-d16" "$which" "$model" 16 17 64
            [ -n "${QP_SKIP_LONG:-}" ] || measure "$fmt-$which-d4096" "$which" "$model" 4080 17 4096
            sh -c 'end=$(($(date +%s) + 600)); while [ "$(date +%s)" -lt "$end" ]; do :; done' >/dev/null &
            busy_pid=$!
            measure "$fmt-$which-busy" "$which" "$model" 16 17 64
            stop_busy
        done
        falling="9707 11 1879 0 9707 11 1879 0 9707 11 1879 0"
        looping="$falling $("$after" -m "$model" --no-verify --ids "$falling" -n 40 --print-ids 2>/dev/null)"
        lookup "$fmt-falling" "$model" "$falling" 65
        lookup "$fmt-looping" "$model" "$looping" 97
        i=$((i + 1))
    done
done

prompt_re='.*tokens in [0-9]* ms (\([0-9.]*\) ms\/token.*'
decode_re='.*generated [0-9]* tokens, \([0-9.]*\) ms\/token.*'
calls_re='.* \([0-9.]*\) bpf calls\/prompt token.*'
longest_re='.*longest call \([0-9.]*\) ms.*'
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
echo "bench_prompt.sh: Qwen3-0.6B shape, $runs runs each (medians), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-6s %9s %7s %9s %10s %6s %9s %6s %9s\n' format run prompt calls decode@16 decode@4096 ratio busy@16 ratio longest
for fmt in ${QP_FORMATS:-q24 int4}; do
    for which in before after; do
        t=$fmt-$which
        p=$(field "$t-prompt" "$prompt_re") c=$(field "$t-prompt" "$calls_re")
        d16=$(field "$t-d16" "$decode_re") d4k=$(field "$t-d4096" "$decode_re") busy=$(field "$t-busy" "$decode_re")
        longest=$(grep "^$t-" "$log" | sed -n "s/$longest_re/\1/p" | sort -g | tail -1)
        printf '%-5s %-6s %9s %7s %9s %10s %6s %9s %6s %9s\n' "$fmt" "$which" "$p" "$c" "$d16" "$d4k" \
            "$(ratio "$d4k" "$d16")" "$busy" "$(ratio "$busy" "$d16")" "${longest:--}"
    done
done
echo "(ms/token; calls: bpf calls per prompt token; longest: ms, over every run of the row)"
for fmt in ${QP_FORMATS:-q24 int4}; do
    for case in falling looping; do
        t=$fmt-$case
        plain=$(field "$t-plain" "$decode_re") look=$(field "$t-lookup" "$decode_re")
        pass=$(field "$t-lookup" '.*(\([0-9.]*\) ms\/step.*')
        kept=$(grep "^$t-lookup qrun: lookup" "$log" | tail -1 | sed 's/.*qrun: lookup: //')
        echo "$fmt lookup, $case: $plain ms/token plain, $look with --lookup $look_n ($pass ms/pass; $kept)," \
            "speed-up $(ratio "$plain" "$look")"
    done
done
bench_recorded
