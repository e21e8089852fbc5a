#!/bin/sh
# bench_latency.sh [BUILD_DIR] - a benchmark, not a test: what qpack's kernel
# calls cost a real-time task on this kernel, and what bounding them by time
# (--call-us) costs the model. On a kernel without preemption (PREEMPT_NONE)
# a BPF program holds its core until it returns: a task that wakes meanwhile
# waits for the program's end.
#
# cyclictest (rt-tests, installed here when missing) runs a SCHED_FIFO 80
# thread on each core, waking every 1 ms, for QP_SECONDS (default 20) beside
# each load, and the table gives the wakeup latency's median, 99th
# percentile and worst, in microseconds, over both threads:
#   idle        nothing else
#   llama.cpp   llama-bench on 2 threads, a 512-token prompt then 128-token
#               decodes, on a Q4_0 GGUF of the same checkpoint (made with
#               qp-gguf-write) - when LLAMA_CPP_DIR names a llama.cpp
#               checkout built in LLAMA_CPP_DIR/build (a CPU build; nothing
#               of it is in this tree)
#   prompt      qrun prefilling 1,500 tokens of the real-shape Qwen3-0.6B
#               random checkpoint packed int4, at each --call-us of
#               QP_CALL_US (default "none 1000 500 200 100 50")
#   decode      qrun decoding after a 16-token prompt, at each --call-us
# cyclictest starts QP_LOAD_WAIT seconds (default 10) after qrun, once the
# model is in its maps. Then the cost: qrun's decode and 512-token prompt
# ms/token at each --call-us, medians of QP_RUNS runs (default 3, the
# budgets interleaved run by run), cyclictest not running.
set -eu
. "$(dirname "$0")/bench_lib.sh"
command -v cyclictest >/dev/null 2>&1 || {
    echo "installing rt-tests (cyclictest)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rt-tests >/dev/null
}
bench_record bench_latency "$@"
qrun=$build/bin/qrun
seconds=${QP_SECONDS:-20}
wait_load=${QP_LOAD_WAIT:-10}
budgets=${QP_CALL_US:-none 1000 500 200 100 50}
runs=${QP_RUNS:-3}
src=$(bench_06b plain)
model=$work/0.6b-int4.qpk
[ -f "$model" ] || "$build/bin/qpack" pack "$src" -o "$model" --format int4 --quiet
tmp=$(mktemp -d "$work/bench_latency.XXXXXX")
load_pid=
stop_load() {
    [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null && { wait "$load_pid" 2>/dev/null || :; }
    load_pid=
}
trap 'stop_load; rm -rf "$tmp"' EXIT INT TERM

# ids N: N seeded random token ids
ids() { awk -v n="$1" 'BEGIN { srand(5); for (i = 0; i < n; i++) printf "%d ", 1000 + int(rand() * 149000) }'; }

# latency FILE: "p50 p99 worst" (us) of a cyclictest -h run, both threads;
# a wakeup past the histogram counts at its end
latency() {
    awk '/^[0-9]+ / { for (i = 2; i <= NF; i++) { n[$1 + 0] += $i; total += $i } }
         /^# Histogram Overflows:/ { for (i = 4; i <= NF; i++) { over += $i; total += $i } }
         /^# Max Latencies:/ { for (i = 4; i <= NF; i++) if ($i + 0 > worst) worst = $i + 0 }
         END {
             if (!total) { print "- - -"; exit }
             for (b = 0; b <= 50000; b++) {
                 c += n[b]
                 if (!p50 && c >= 0.50 * total) p50 = b
                 if (!p99 && c >= 0.99 * total) p99 = b
             }
             printf "%s %s %d\n", p50 ? p50 : "-", p99 ? p99 : ">50000", worst
         }' "$1"
}

# cyclic TAG: cyclictest for $seconds, its figures as a table row
cyclic() {
    cyclictest -m -t -a -p 80 -i 1000 -D "$seconds" -q -h 50000 >"$tmp/$1.cyc" 2>&1
    set -- "$1" $(latency "$tmp/$1.cyc")
    printf '%-22s %8s %8s %8s\n' "$1" "$2" "$3" "$4"
}

# beside TAG CMD...: CMD in the background, cyclictest once it has loaded
beside() {
    tag=$1
    shift
    "$@" >/dev/null 2>&1 &
    load_pid=$!
    sleep "$wait_load"
    kill -0 "$load_pid" 2>/dev/null || { echo "$tag: the load ended before cyclictest started" >&2; exit 1; }
    cyclic "$tag"
    stop_load
}

echo "bench_latency.sh: cyclictest -m -t -a -p 80 -i 1000 -D $seconds, beside each load (us, both cores)"
printf '%-22s %8s %8s %8s\n' load p50 p99 worst
cyclic idle
if [ -n "${LLAMA_CPP_DIR:-}" ]; then
    gguf=$work/0.6b-q4_0.gguf
    if [ ! -f "$gguf" ]; then
        # the GGUF carries a tokenizer: the checkpoint's files beside Qwen3's
        tok=$work/0.6b-plain-tok
        mkdir -p "$tok"
        for f in "$src"/*; do ln -sf "$f" "$tok/"; done
        ln -sf "$root/assets/qwen3-tokenizer/tokenizer.json" "$root/assets/qwen3-tokenizer/tokenizer_config.json" "$tok/"
        "$build/devtools/qp-gguf-write" "$tok" "$gguf" --type Q4_0 >/dev/null
    fi
    beside "llama.cpp prompt" "$LLAMA_CPP_DIR/build/bin/llama-bench" -m "$gguf" -t 2 -p 512 -n 0 -r 1000
    beside "llama.cpp decode" "$LLAMA_CPP_DIR/build/bin/llama-bench" -m "$gguf" -t 2 -p 0 -n 128 -r 1000
fi
for b in $budgets; do
    beside "prompt --call-us $b" "$qrun" -m "$model" -c 2048 --no-verify --call-us "$b" --temp 0 --ids "$(ids 1500)" -n 1 --print-ids
done
for b in $budgets; do
    beside "decode --call-us $b" "$qrun" -m "$model" -c 2048 --no-verify --call-us "$b" --temp 0 --ids "$(ids 16)" -n 2000 \
        --print-ids
done

# the cost: ms/token without cyclictest, the budgets interleaved run by run
i=0
while [ "$i" -lt "$runs" ]; do
    for b in $budgets; do
        "$qrun" -m "$model" -c 600 --no-verify --call-us "$b" --temp 0 --ids "$(ids 512)" -n 1 --print-ids --stats 2>&1 \
            >/dev/null | sed "s/^/prompt-$b /" >>"$tmp/cost"
        "$qrun" -m "$model" -c 600 --no-verify --call-us "$b" --temp 0 --ids "$(ids 16)" -n 65 --print-ids --stats 2>&1 \
            >/dev/null | sed "s/^/decode-$b /" >>"$tmp/cost"
    done
    i=$((i + 1))
done
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "-" }'; }
field() { grep "^$1 " "$tmp/cost" | sed -n "s/$2/\1/p" | median; }
prompt_re='.*tokens in [0-9]* ms (\([0-9.]*\) ms\/token.*'
decode_re='.*generated [0-9]* tokens, \([0-9.]*\) ms\/token.*'
longest_re='.*the programs alone (kernel clock): longest \([0-9.]*\) ms.*'
paused_re='.*, \([0-9]*\) runs paused at --call-us.*'
echo
echo "the cost: qrun ms/token, medians of $runs runs; the longest program run by the kernel clock (ms)"
printf '%-10s %9s %9s %8s %8s %10s\n' --call-us prompt decode ratio longest paused
base=
for b in $budgets; do
    p=$(field "prompt-$b" "$prompt_re") d=$(field "decode-$b" "$decode_re")
    [ -n "$base" ] || base=$d
    longest=$(grep -e "^prompt-$b " -e "^decode-$b " "$tmp/cost" | sed -n "s/$longest_re/\1/p" | sort -g | tail -1)
    paused=$(field "decode-$b" "$paused_re")
    printf '%-10s %9s %9s %8s %8s %10s\n' "$b" "$p" "$d" \
        "$(awk -v a="$d" -v b="$base" 'BEGIN { if (b + 0 > 0) printf "%.3f", a / b; else print "-" }')" \
        "${longest:--}" "$paused"
done
echo "(ratio: decode ms/token against the first budget's; paused: program runs per decode run that reached the budget)"
bench_recorded
