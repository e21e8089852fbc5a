#!/bin/bash
# bench_listen.sh [BUILD_DIR] - a benchmark, not a test (root): qrun listen
# (docs/LISTEN.md) against qrun decoding the same sequence, on the
# real-shape Qwen3-0.6B int4 random checkpoint (made once in
# ${QP_BENCH_DIR:-/tmp/qp-bench}), loaded with --schedule kernel (-c 256,
# one session). Per round, taking turns: qrun ask's request of one id and
# 16 tokens over loopback in a network namespace of its own (16 steps from
# the step packet's send to the answer, the poll included; listen runs two
# lanes), then qrun on the loaded model with the same id and -n 16
# (--schedule kernel and host with qrun's default two lanes/threads, and
# the kernel's one lane for reference). The medians over QP_RUNS rounds
# (default 3) of ms per step against qrun's decode ms/token, and whether
# every round's 16 tokens were qrun's. Target: listen's ms per token at
# most qrun's decode ms/token.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_listen "$@"
runs=${QP_RUNS:-3}
src=$(bench_06b plain)
model=${QP_MODEL:-$work/0.6b-int4.qpk}
[ -f "$model" ] || "$build/bin/qpack" pack "$src" -o "$model" --format int4 --quiet
name=bench-listen-$$ ns=qpbench$$ port=47177 id=9707
t=$(mktemp -d)
cleanup() {
    [ -z "${listener:-}" ] || kill -KILL "$listener" 2>/dev/null
    ip netns del "$ns" 2>/dev/null || true
    [ ! -e "/sys/fs/bpf/qpack/$name" ] || "$build/bin/qpack" unload "$name"
    rm -rf "$t"
}
trap cleanup EXIT
"$build/bin/qpack" load "$model" --name "$name" --schedule kernel -c 256 --sessions 1 >/dev/null
ip netns add "$ns"
nsenter --net="/var/run/netns/$ns" ip link set lo up
: >"$t/listen" && : >"$t/kernel" && : >"$t/host" && : >"$t/kernel1"
same=0
for r in $(seq "$runs"); do
    : >"$t/listen.err"
    nsenter --net="/var/run/netns/$ns" "$build/bin/qrun" listen -m "pin:$name" --udp $port 2>"$t/listen.err" &
    listener=$!
    for i in $(seq 600); do grep -q "answers UDP" "$t/listen.err" && break; sleep 0.1; done
    nsenter --net="/var/run/netns/$ns" "$build/bin/qrun" ask --udp 127.0.0.1:$port --ids $id -n 16 --stats \
        >"$t/ask.ids" 2>"$t/ask.err"
    sed -n 's/.*(\([0-9.]*\) ms\/step.*/\1/p' "$t/ask.err" >>"$t/listen"
    kill -INT "$listener" && wait "$listener"
    listener=
    for run in kernel:kernel:2 host:host:2 kernel1:kernel:1; do
        IFS=: read -r k schedule threads <<<"$run"
        "$build/bin/qrun" -m "pin:$name" --ids $id -n 16 --temp 0 --print-ids --threads "$threads" \
            --schedule "$schedule" --stats >"$t/$k.ids" 2>"$t/$k.err"
        sed -n 's/.*generated 16 tokens, \([0-9.]*\) ms\/token.*/\1/p' "$t/$k.err" >>"$t/$k"
    done
    cmp -s "$t/ask.ids" "$t/kernel.ids" && same=$((same + 1))
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-52s %12s\n' "one id, 16 tokens (medians of $runs)" "ms/token"
printf '%-52s %12s\n' "qrun listen, 2 lanes (packet to answer, per step)" "$(median "$t/listen")"
printf '%-52s %12s\n' "qrun --schedule kernel, 2 lanes (decode)" "$(median "$t/kernel")"
printf '%-52s %12s\n' "qrun --schedule host, 2 threads (decode)" "$(median "$t/host")"
printf '%-52s %12s\n' "qrun --schedule kernel --threads 1 (decode)" "$(median "$t/kernel1")"
echo "listen's 16 tokens were qrun's in $same of $runs rounds"
bench_recorded
