#!/bin/bash
# test_schedule_cli.sh QRUN QPACK QP_GEN - qrun --schedule kernel (the step
# run in the kernel as a chain of BPF work items, docs/SCHEDULE.md) gives
# the bits of --schedule host and of the host twin: every prompt position's
# logits (a block of 16 and one of 4) and the greedy continuation, for q24,
# int8, int4 and int4-pure, both KV caches, a stress checkpoint, and a call
# budget small enough that jobs pause and resume in further work items.
# What it does not run yet is refused with one line. Needs root (BPF):
# skipped otherwise.
set -u
QRUN=$1 QPACK=$2 QP_GEN=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: loading BPF programs needs root"; exit 77; }
T=$(mktemp -d /tmp/qp-schedule-XXXXXX) || fail "mktemp"
trap 'rm -rf "$T"' EXIT
"$QP_GEN" "$T/m" --preset tiny --seed 9 >/dev/null || fail "generator"
"$QP_GEN" "$T/s" --preset tiny --seed 3 --stress >/dev/null || fail "generator (--stress)"
ids="301 7 455 12 88 250 3 19 402 77 150 9 301 7 455 12 88 250 3 19"

# run NAME MODEL ARGS...: NAME.ids (greedy ids) and NAME.f32 (every prompt position's logits)
run() {
    local name=$1 model=$2
    shift 2
    "$QRUN" -m "$model" --ids "$ids" -n 12 --temp 0 --print-ids --dump-logits-all "$T/$name.f32" "$@" \
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
# a budget that pauses products: their rest runs in another work item
same "$T/s-q24.qpk" --call-us 10
paused=$(sed -n 's/.* \([0-9]*\) runs paused at --call-us.*/\1/p' "$T/kernel.err")
[ -n "$paused" ] && [ "$paused" -gt 0 ] || fail "--call-us 10 paused no work item: $(grep generated "$T/kernel.err")"

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
echo "ok: --schedule kernel gives the bits of host and emu ($paused work items paused at --call-us 10)"
