#!/bin/bash
# test_blocks_cli.sh QRUN QPACK QP_GEN - what qrun does with blocks of
# positions, end to end. --dump-logits-all: one row per prompt position, row
# i equal to --dump-logits of the prompt cut after position i. --lookup: the
# same tokens as plain greedy decoding, on a prompt whose continuation
# repeats (drafts kept: --stats says how many) and on one of random ids;
# with sampling it is refused with one line. Needs root (BPF): skipped
# otherwise.
set -u
QRUN=$1 QPACK=$2 QP_GEN=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: loading BPF programs needs root"; exit 77; }
T=$(mktemp -d /tmp/qp-lookup-XXXXXX) || fail "mktemp"
trap 'rm -rf "$T"' EXIT
"$QP_GEN" "$T/m" --preset tiny --seed 9 >/dev/null || fail "generator"
"$QPACK" pack "$T/m" -o "$T/m.qpk" --quiet || fail "qpack"

# same IDS: plain and --lookup 8 print the same 60 ids; prints the stats line
same() {
    "$QRUN" -m "$T/m.qpk" --ids "$1" -n 60 --temp 0 --print-ids >"$T/plain.out" 2>"$T/plain.err" || fail "plain run: $(cat "$T/plain.err")"
    "$QRUN" -m "$T/m.qpk" --ids "$1" -n 60 --print-ids --lookup 8 --stats >"$T/look.out" 2>"$T/look.err" ||
        fail "--lookup run: $(cat "$T/look.err")"
    cmp -s "$T/plain.out" "$T/look.out" || fail "--lookup changed the tokens for '$1': $(cat "$T/plain.out") / $(cat "$T/look.out")"
    [ "$(wc -w <"$T/look.out")" = 60 ] || fail "--lookup printed $(wc -w <"$T/look.out") ids, not 60"
    # ms/token is per token printed after the first (a step may make several),
    # ms/step per decode step: ms/token x tokens = ms/step x steps, up to the
    # rounding of the two figures to 0.1 ms
    gen=$(grep '^qrun: generated ' "$T/look.err")
    echo "$gen" | awk '{ if (match($0, /, [0-9.]+ ms\/token \([0-9.]+ tokens\/s\) over [0-9]+ decode steps \([0-9.]+ ms\/step, [0-9]+ tokens/) == 0) exit 1
        split(substr($0, RSTART, RLENGTH), f, /[ (]+/); per_tok = f[2]; steps = f[7]; per_step = f[10]; toks = f[12]
        if (toks != 59 || steps > toks) exit 1
        d = per_tok * toks - per_step * steps; if (d < 0) d = -d
        if (d > 0.05 * (toks + steps) + 0.01 * per_step * steps) exit 1 }' ||
        fail "--lookup's stats line does not add up (59 tokens from its steps): $gen"
    grep '^qrun: lookup: ' "$T/look.err" || fail "--stats has no lookup line"
}

line=$(same "5 17 99 3 5 17 99 3 5 17")
kept=$(echo "$line" | sed -n 's/.*, \([0-9]*\) kept$/\1/p')
[ -n "$kept" ] && [ "$kept" -gt 0 ] || fail "a repeating continuation kept no draft: $line"
same "301 7 455 12 88 250 3 19 402 77 150 9" >/dev/null

"$QRUN" -m "$T/m.qpk" --ids "1 2" -n 4 --lookup 4 --temp 0.7 >"$T/temp.out" 2>"$T/temp.err"
rc=$?
[ "$rc" = 2 ] || fail "--lookup with --temp: exit status $rc, expected 2"
[ "$(wc -l <"$T/temp.err")" = 1 ] && grep -q -- '--lookup needs greedy' "$T/temp.err" || fail "--lookup with --temp: $(cat "$T/temp.err")"
"$QRUN" -m "$T/m.qpk" --ids "1 2" -n 4 --lookup 16 >/dev/null 2>"$T/range.err"
[ $? = 2 ] || fail "--lookup 16 was accepted"
# --dump-logits-all against --dump-logits of each prefix (one row: 512 float32)
ids=(301 7 455 12 88 250 3 19 402 77 150 9 301 7 455 12 88 250 3 19)
"$QRUN" -m "$T/m.qpk" --ids "${ids[*]}" -n 0 --dump-logits-all "$T/all.f32" || fail "--dump-logits-all run"
[ "$(stat -c %s "$T/all.f32")" = $((20 * 512 * 4)) ] || fail "--dump-logits-all wrote $(stat -c %s "$T/all.f32") bytes, not 20 rows"
for n in 1 15 16 17 20; do
    "$QRUN" -m "$T/m.qpk" --ids "${ids[*]:0:$n}" -n 0 --dump-logits "$T/p$n.f32" || fail "--dump-logits of $n ids"
    cmp -s <(tail -c +$(((n - 1) * 2048 + 1)) "$T/all.f32" | head -c 2048) "$T/p$n.f32" ||
        fail "row $n of --dump-logits-all differs from --dump-logits of the first $n ids"
done
"$QRUN" -m "$T/m.qpk" --ids "1 2" -n 0 --dump-logits-all "$T/no/such/dir.f32" 2>"$T/dir.err"
[ $? = 1 ] && [ "$(wc -l <"$T/dir.err")" = 1 ] || fail "an unwritable --dump-logits-all: $(cat "$T/dir.err")"
echo "ok: --dump-logits-all rows equal --dump-logits of each prefix; --lookup keeps the tokens of greedy decoding ($line)"
