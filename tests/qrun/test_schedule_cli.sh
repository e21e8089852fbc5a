#!/bin/bash
# test_schedule_cli.sh QRUN QPACK QP_GEN QEVAL TOKENIZER_DIR - qrun
# --schedule kernel (the step run in the kernel as a chain of BPF work
# items, docs/SCHEDULE.md) gives the bits of --schedule host and of the
# host twin: every prompt position's logits (a block of 16 and one of 4)
# and the greedy continuation, for q24, int8, int4 and int4-pure, both KV
# caches, a stress checkpoint, one lane and two, and a call budget small
# enough that jobs pause and resume in further work items. qrun serve's replies (their
# logprobs to 17 digits; two requests at once, batched) and qeval's
# figures are those of --schedule host too. What it does not run yet is
# refused with one line. Needs root (BPF): skipped otherwise.
set -u
QRUN=$1 QPACK=$2 QP_GEN=$3 QEVAL=$4 TOKENIZER=$5
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: loading BPF programs needs root"; exit 77; }
T=$(mktemp -d /tmp/qp-schedule-XXXXXX) || fail "mktemp"
PIN=/sys/fs/bpf/qpack
cleanup() {
    local n
    for n in "$PIN"/qs$$-*; do [ -e "$n" ] && "$QPACK" unload "${n##*/}"; done
    rm -rf "$T"
}
trap cleanup EXIT
"$QP_GEN" "$T/m" --preset tiny --seed 9 >/dev/null || fail "generator"
"$QP_GEN" "$T/s" --preset tiny --seed 3 --stress >/dev/null || fail "generator (--stress)"
ids="301 7 455 12 88 250 3 19 402 77 150 9 301 7 455 12 88 250 3 19"

# run NAME MODEL ARGS...: NAME.ids (greedy ids) and NAME.f32 (every prompt position's logits);
# qrun runs under $WRAP, a command and its options, when set
WRAP=
run() {
    local name=$1 model=$2
    shift 2
    $WRAP "$QRUN" -m "$model" --ids "$ids" -n 12 --temp 0 --print-ids --dump-logits-all "$T/$name.f32" "$@" \
        >"$T/$name.ids" 2>"$T/$name.err" || fail "qrun $* on $model: $(grep -v note "$T/$name.err")"
}

same() {
    local model=$1
    shift
    run host "$model" "$@"
    run kernel "$model" --schedule kernel --stats "$@"
    run emu "$model" --backend emu "$@"
    for other in host emu; do
        cmp -s "$T/$other.f32" "$T/kernel.f32" || fail "$model $*: --schedule kernel's logits differ from $other's"
        cmp -s "$T/$other.ids" "$T/kernel.ids" || fail "$model $*: --schedule kernel's tokens differ from $other's"
    done
    [ "$(stat -c %s "$T/kernel.f32")" = $((20 * 512 * 4)) ] || fail "$model: $(stat -c %s "$T/kernel.f32") bytes of logits"
}

for format in q24 int8 int4 int4-pure; do
    "$QPACK" pack "$T/m" -o "$T/m-$format.qpk" --format "$format" --quiet || fail "qpack --format $format"
    for kv in int16 int8; do
        same "$T/m-$format.qpk" --kv-cache "$kv"
    done
done
for format in q24 int4; do
    "$QPACK" pack "$T/s" -o "$T/s-$format.qpk" --format "$format" --quiet || fail "qpack --stress --format $format"
    same "$T/s-$format.qpk"
done
# two lanes start from the step's one system call (an XDP test run whose
# frame a CPU map takes to the other CPU), which --stats names; without
# the capability an XDP program takes (CAP_NET_ADMIN), or when asked, a
# thread on the other CPU starts the second lane, with the same bits
lanes() { sed -n 's/.*kernel schedule: \([^,]*\),.*/\1/p' "$T/kernel.err"; }
if [ "$(nproc)" -ge 2 ]; then
    [ "$(lanes)" = "2 lanes (both started by one XDP test run)" ] || fail "two lanes: --stats says '$(lanes)'"
    QP_LANE_THREADS=1 same "$T/s-int4.qpk"
    [ "$(lanes)" = "2 lanes (the second started by a thread)" ] || fail "QP_LANE_THREADS=1: --stats says '$(lanes)'"
    if command -v setpriv >/dev/null; then
        WRAP="setpriv --bounding-set -all,+bpf,+perfmon"
        same "$T/s-int4.qpk"
        WRAP=
        [ "$(lanes)" = "2 lanes (the second started by a thread)" ] ||
            fail "without CAP_NET_ADMIN: --stats says '$(lanes)'"
    fi
fi
# one lane (one host thread): the whole step on one CPU
same "$T/s-int4.qpk" --threads 1
[ "$(lanes)" = "1 lane" ] || fail "--threads 1: --stats says '$(lanes)'"
# a budget that pauses products: their rest runs in another work item
same "$T/s-q24.qpk" --call-us 10
paused=$(sed -n 's/.* \([0-9]*\) runs paused at --call-us.*/\1/p' "$T/kernel.err")
[ -n "$paused" ] && [ "$paused" -gt 0 ] || fail "--call-us 10 paused no work item: $(grep generated "$T/kernel.err")"

# a loaded model (qpack load --schedule kernel, -m pin:NAME): its work
# items live on in their pinned map after the loader exited, and a
# process that opens it by name gets the host schedule's bits on the file;
# its two lanes start from one XDP test run of the pinned lane_kick, also
# for a user in the model's group with no capability
group=$(getent group users | cut -d: -f3)
"$QPACK" load "$T/s-int4.qpk" --name "qs$$-k" -c 64 --schedule kernel ${group:+--group users} >/dev/null \
    2>"$T/load.err" || fail "qpack load --schedule kernel: $(cat "$T/load.err")"
"$QPACK" load "$T/s-int4.qpk" --name "qs$$-h" -c 64 >/dev/null 2>"$T/load.err" || fail "qpack load: $(cat "$T/load.err")"
run host "$T/s-int4.qpk" -c 64
pinned_same() {
    run kernel "pin:qs$$-k" --schedule kernel --stats "$@"
    cmp -s "$T/host.f32" "$T/kernel.f32" || fail "pin:qs$$-k $*: the logits differ from the host's"
    cmp -s "$T/host.ids" "$T/kernel.ids" || fail "pin:qs$$-k $*: the tokens differ from the host's"
}
pinned_same --threads 1
[ "$(lanes)" = "1 lane" ] || fail "pin:qs$$-k --threads 1: --stats says '$(lanes)'"
if [ "$(nproc)" -ge 2 ]; then
    pinned_same --threads 2
    [ "$(lanes)" = "2 lanes (both started by one XDP test run)" ] || fail "pin:qs$$-k: --stats says '$(lanes)'"
    QP_LANE_THREADS=1 pinned_same
    [ "$(lanes)" = "2 lanes (the second started by a thread)" ] ||
        fail "pin:qs$$-k QP_LANE_THREADS=1: --stats says '$(lanes)'"
    if command -v setpriv >/dev/null && [ -n "$group" ]; then
        chmod 0777 "$T"     # the unprivileged run writes its logits there
        WRAP="setpriv --reuid=65534 --regid=$group --clear-groups --inh-caps=-all --bounding-set=-all"
        pinned_same
        WRAP=
        [ "$(lanes)" = "2 lanes (both started by one XDP test run)" ] ||
            fail "pin:qs$$-k as uid 65534 in its group: --stats says '$(lanes)'"
    fi
fi
run kernel "pin:qs$$-k"     # the same pins run the host schedule too
cmp -s "$T/host.f32" "$T/kernel.f32" || fail "pin:qs$$-k --schedule host: the logits differ from the file's"

# qeval: every figure but the timings
"$QPACK" pack "$T/m" -o "$T/m-int4.qpk" --format int4 --quiet || fail "qpack --format int4"
figures='.models[0] | del(.load_ms, .prompt_ms_per_token, .decode_ms_per_token, .peak_rss_bytes)'
for schedule in host kernel; do
    "$QEVAL" --ref "$T/m" "$T/m-int4.qpk" --schedule $schedule --positions 16 --force --json -q \
        >"$T/qeval-$schedule.json" 2>"$T/qeval.err" || fail "qeval --schedule $schedule: $(cat "$T/qeval.err")"
done
cmp -s <(jq -S "$figures" "$T/qeval-host.json") <(jq -S "$figures" "$T/qeval-kernel.json") ||
    fail "qeval's figures differ between the schedules: $(jq -c "$figures" "$T/qeval-kernel.json")"

# qrun serve: two completions at once (one batch), then one alone, with logprobs
"$QP_GEN" "$T/t" --preset tiny --vocab 151936 --seed 9 --tokenizer-dir "$TOKENIZER" >/dev/null || fail "generator (tokenizer)"
"$QPACK" pack "$T/t" -o "$T/t.qpk" --format int4 --quiet || fail "qpack (tokenizer)"
serve() {
    local schedule=$1 port= i pid
    "$QRUN" serve -m "$T/t.qpk" --port 0 --parallel 2 --schedule "$schedule" >/dev/null 2>"$T/serve.err" &
    pid=$!
    for i in $(seq 300); do
        port=$(sed -n 's|.* on http://[^ ]*:\([0-9]*\)/ with .*|\1|p' "$T/serve.err")
        [ -n "$port" ] && break
        kill -0 $pid 2>/dev/null || fail "qrun serve --schedule $schedule exited: $(cat "$T/serve.err")"
        sleep 0.1
    done
    [ -n "$port" ] || { kill $pid; fail "qrun serve --schedule $schedule did not listen within 30 s"; }
    for p in "Hello, world" "The sky is"; do
        curl -sS -d "{\"prompt\":\"$p\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":2}" \
            "http://127.0.0.1:$port/v1/completions" >"$T/$schedule-${p%% *}.json" &
    done
    wait $(jobs -p | grep -v "^$pid\$")
    curl -sS -d '{"prompt":"Once","max_tokens":8,"temperature":0,"logprobs":2}' \
        "http://127.0.0.1:$port/v1/completions" >"$T/$schedule-Once.json"
    kill $pid
    wait $pid
}
serve host
serve kernel
for p in Hello, The Once; do
    jq -e '.choices[0].logprobs.token_logprobs | length == 8' "$T/kernel-$p.json" >/dev/null ||
        fail "qrun serve --schedule kernel, '$p': $(head -c 300 "$T/kernel-$p.json")"
    cmp -s <(jq -S .choices "$T/host-$p.json") <(jq -S .choices "$T/kernel-$p.json") ||
        fail "qrun serve: the reply to '$p' differs between the schedules"
done

# refused with one line, exit status 1 or 2, never run by the host instead
refused() {
    local want=$1
    shift
    "$QRUN" -m "$T/m-q24.qpk" --ids "1 2" -n 1 "$@" >/dev/null 2>"$T/all.err"
    local rc=$?
    grep -v ': note: ' "$T/all.err" >"$T/refused.err"   # the model has no tokenizer
    [ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "qrun $*: exit status $rc"
    [ "$(wc -l <"$T/refused.err")" = 1 ] && grep -q -- "$want" "$T/refused.err" ||
        fail "qrun $*: $(cat "$T/refused.err")"
}
refused "not with --backend emu" --schedule kernel --backend emu
refused "does not run --stream" --schedule kernel --stream
refused "takes host or kernel" --schedule both
refused "was loaded without it" --schedule kernel -m "pin:qs$$-h"
echo "ok: --schedule kernel gives the bits of host and emu ($paused work items paused at --call-us 10), in qrun serve and qeval too"
