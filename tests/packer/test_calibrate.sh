#!/bin/bash
# test_calibrate.sh QPACK TINY_LEARNED_DIR - `qpack pack --calibrate` end to
# end on the model with learned weights: the provenance records the text
# (name, size, XXH3) and the tokens and window run; the container differs
# from the uncalibrated one only in quantised matrices and still verifies;
# each misuse is refused with one line and no output file.
set -u
QPACK=$1 DATA=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v jq >/dev/null || { echo "SKIP: jq is not installed"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

"$QPACK" pack "$DATA/model" -o "$W/plain.qpk" --format int4-pure --quiet || fail "plain pack"
"$QPACK" pack "$DATA/model" -o "$W/cal.qpk" --format int4-pure --calibrate "$DATA/calib.txt" \
    --calibrate-tokens 300 --quiet || fail "calibrated pack"
"$QPACK" verify "$W/cal.qpk" >/dev/null || fail "the calibrated container does not verify"
"$QPACK" info "$W/cal.qpk" --json >"$W/info.json" || fail "info"
size=$(stat -c %s "$DATA/calib.txt")
jq -e --argjson size "$size" '.provenance.settings.calibration |
    .text == "calib.txt" and .text_size == $size and .tokens == 300 and .window == 256
    and (.text_xxh3 | test("^[0-9a-f]{16}$"))' "$W/info.json" >/dev/null ||
    fail "provenance: $(jq -c .provenance.settings "$W/info.json")"
"$QPACK" info "$W/plain.qpk" --json | jq -e '.provenance.settings | has("calibration") | not' >/dev/null ||
    fail "the uncalibrated container claims a calibration"
# the same tensors, encodings and sizes; the quantised codes differ, the norms do not
"$QPACK" info "$W/plain.qpk" --json | jq -c '[.tensors[] | {name, encoding, nbytes}]' >"$W/plain.l"
jq -c '[.tensors[] | {name, encoding, nbytes}]' "$W/info.json" >"$W/cal.l"
cmp -s "$W/plain.l" "$W/cal.l" || fail "the tensor lists differ"
"$QPACK" info "$W/plain.qpk" --json | jq -c '.tensors[] | {name, xxh3}' >"$W/plain.t"
jq -c '.tensors[] | {name, xxh3}' "$W/info.json" >"$W/cal.t"
changed=$(diff "$W/plain.t" "$W/cal.t" | grep -c '^>')
norms=$(diff "$W/plain.t" "$W/cal.t" | grep '^>' | grep -c 'norm')
[ "$changed" -gt 10 ] && [ "$norms" = 0 ] || fail "$changed tensors changed ($norms norms)"
echo "ok: calibrated on 300 tokens, $changed quantised tensors changed"

# on a terminal a progress line counts the tokens; --quiet draws none
if command -v script >/dev/null; then
    script -qfec "'$QPACK' pack '$DATA/model' -o '$W/tty.qpk' --format int4-pure --calibrate '$DATA/calib.txt' \
        --calibrate-tokens 300" /dev/null >"$W/tty.out" || fail "pack on a terminal: $(tail -c 300 "$W/tty.out")"
    grep -aq "qpack: calibrating on $DATA/calib.txt: 1/300 tokens" "$W/tty.out" &&
        grep -aq "calibrating on $DATA/calib.txt: 300/300 tokens" "$W/tty.out" ||
        fail "no calibration progress: $(head -c 400 "$W/tty.out")"
    script -qfec "'$QPACK' pack '$DATA/model' -o '$W/tty.qpk' --format int4-pure --calibrate '$DATA/calib.txt' \
        --calibrate-tokens 300 --quiet" /dev/null >"$W/quiet.out"
    ! grep -aq "calibrating on" "$W/quiet.out" || fail "--quiet drew: $(head -c 300 "$W/quiet.out")"
    echo "ok: calibration progress on a terminal, none with --quiet"
fi

# expect NAME PATTERN ARGS...: exit 2 (usage) or 1, one line naming the problem, no output
expect() {
    local name=$1 pat=$2
    shift 2
    rm -f "$W/out.qpk"
    "$QPACK" pack "$DATA/model" -o "$W/out.qpk" "$@" >"$W/o" 2>"$W/e"
    local rc=$?
    [ "$rc" != 0 ] || fail "$name: exit 0"
    [ ! -e "$W/out.qpk" ] || fail "$name: wrote an output"
    [ "$(wc -l <"$W/e")" = 1 ] && grep -q -- "$pat" "$W/e" || fail "$name: stderr: $(cat "$W/e")"
    echo "ok $name (exit $rc): $(cat "$W/e")"
}
expect q24 'applies to --format int8, int4 and int4-pure' --calibrate "$DATA/calib.txt"
expect rtn 'with --quant search' --format int4 --quant rtn --calibrate "$DATA/calib.txt"
expect tokens_alone '--calibrate-tokens needs --calibrate' --format int4 --calibrate-tokens 10
expect tokens_bad "must be a number in 2..16777216, not '1'" --format int4 --calibrate "$DATA/calib.txt" \
    --calibrate-tokens 1
expect missing 'nope.txt' --format int4 --calibrate "$W/nope.txt"
printf 'x' >"$W/one.txt"
expect one_token 'calibration needs at least 2' --format int4 --calibrate "$W/one.txt"
printf 'a\377b' >"$W/bad.txt"
expect not_utf8 'bad.txt' --format int4 --calibrate "$W/bad.txt"
cp "$DATA/calib.txt" "$W/c.txt"
"$QPACK" pack "$DATA/model" -o "$W/c.txt" --format int4 --calibrate "$W/c.txt" --quiet 2>"$W/e" &&
    fail "-o over the calibration text succeeded"
cmp -s "$DATA/calib.txt" "$W/c.txt" || fail "the calibration text was overwritten"
echo "ok: -o over the calibration text refused: $(cat "$W/e")"
exit 0
