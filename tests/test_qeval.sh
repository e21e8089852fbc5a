#!/bin/bash
# test_qeval.sh CASE QEVAL QPACK QP_GEN TOKENIZER_DIR WORK_DIR
#
# qeval end to end, one CASE per ctest test (tests/qeval.cmake). "setup"
# writes tiny random checkpoints into WORK_DIR and packs them; the other
# cases use them:
#   bpf     two identical containers in BPF: the JSON parses, top-1 agreement
#           is 100 %, KL < 1e-6, and both get identical accuracy numbers;
#           the table and the per-layer trace (needs root, else skipped)
#   emu     the same on the host twin (no root needed)
#   text    --prompts and --text with the real tokenizer: NLL of model and
#           reference side by side, near log(vocab) for a random model
#   errors  one clear line and a non-zero exit for each mistake
set -u

CASE=$1 QEVAL=$2 QPACK=$3 QP_GEN=$4 TOKDIR=$5 WORK=$6
T=$WORK/$CASE.tmp

fail() { echo "FAIL ($CASE): $*" >&2; exit 1; }
skip() { echo "SKIP ($CASE): $*"; exit 77; }

if [ "$CASE" = setup ]; then
    rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot create $WORK"
    cd "$WORK" || fail "cd $WORK"
    "$QP_GEN" ck --preset tiny --seed 1 >/dev/null || fail "qp-gen-checkpoint ck"
    "$QPACK" pack ck -o M.qpk --quiet || fail "qpack pack ck"
    cp M.qpk M2.qpk || fail "cp"
    "$QP_GEN" ck3 --preset tiny --seed 1 --layers 3 >/dev/null || fail "qp-gen-checkpoint ck3"
    "$QPACK" pack ck3 -o L3.qpk --quiet || fail "qpack pack ck3"
    if [ -f "$TOKDIR/tokenizer.json" ]; then
        # the real tokenizer's ids need the real vocabulary; the tiny vocabulary cannot hold them
        "$QP_GEN" ckt --preset tiny --seed 2 --vocab 151936 --tokenizer-dir "$TOKDIR" >/dev/null ||
            fail "qp-gen-checkpoint ckt"
        "$QPACK" pack ckt -o T.qpk --quiet || fail "qpack pack ckt"
        "$QP_GEN" cks --preset tiny --seed 3 --tokenizer-dir "$TOKDIR" >/dev/null || fail "qp-gen-checkpoint cks"
        "$QPACK" pack cks -o S.qpk --quiet || fail "qpack pack cks"
    fi
    echo "ok setup"
    exit 0
fi

[ -f "$WORK/M.qpk" ] || fail "no $WORK/M.qpk: the qeval_setup test must run first"
command -v jq >/dev/null || skip "jq is not installed"
rm -rf "$T" && mkdir -p "$T" || fail "cannot create $T"
cd "$WORK" || fail "cd $WORK"

# run NAME ARGS...: qeval with stdout in $T/NAME.out, stderr in $T/NAME.err; sets rc
run() {
    local name=$1
    shift
    "$QEVAL" "$@" >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
}

# jqt NAME FILTER: the filter must give true on $T/NAME.out
jqt() {
    local v
    v=$(jq -e "$2" "$T/$1.out" 2>&1) || fail "$1: jq '$2' is not true ($v)"
}

# accuracy-only fields of a model (timings and memory high-water marks vary between runs)
ACC='{file_bytes, map_bytes, bits_per_weight, kv_bytes_per_pos, calls_per_token, positions,
      logit_max_abs_err, logit_rms_err, kl_mean, kl_max, top1_agree, top1_percent, top5_overlap,
      greedy_prefix_mean, trace_layers}'

# check_two NAME BACKEND: the JSON of two identical containers against the reference
check_two() {
    local n=$1 backend=$2
    [ "$rc" = 0 ] || fail "$n: exit $rc: $(cat "$T/$n.err")"
    jq empty "$T/$n.out" || fail "$n: output is not JSON"
    jqt "$n" '.models | length == 2'
    jqt "$n" '.prompts == 4 and .positions == 128 and .greedy_tokens == 16'
    jqt "$n" '.reference.backend == "ref" and .reference.bits_per_weight == 16'
    jqt "$n" ".models[0].backend == \"$backend\""
    jqt "$n" '.models[0].positions == 128 and .models[0].top1_agree == 128 and .models[0].top1_percent == 100'
    jqt "$n" '.models[0].kl_max < 1e-6 and .models[0].kl_mean < 1e-6 and .models[0].kl_mean >= 0'
    jqt "$n" '.models[0].logit_max_abs_err < 1e-3 and .models[0].logit_rms_err <= .models[0].logit_max_abs_err'
    jqt "$n" '.models[0].top5_overlap == 1 and .models[0].greedy_prefix_mean == 16'
    jqt "$n" '.models[0].bits_per_weight > 0 and .models[0].kv_bytes_per_pos > 0 and .models[0].file_bytes > 0'
    jqt "$n" '.models[0].calls_per_token > 0 and .models[0].prompt_ms_per_token > 0 and .models[0].decode_ms_per_token > 0'
    jqt "$n" '.models[0].peak_rss_bytes > 0 and .models[0].load_ms > 0 and .reference.prompt_ms_per_token > 0'
    jqt "$n" '.models[0].trace_layers | length == 2 and all(.max_abs_err < 1e-3 and .rms_err <= .max_abs_err)'
    jqt "$n" "(.models[0] | $ACC) == (.models[1] | $ACC)"
    echo "ok $n: $(jq -c ".models[0] | {logit_max_abs_err, kl_max, top1_percent, top5_overlap, greedy_prefix_mean}" "$T/$n.out")"
}

case $CASE in
bpf)
    [ "$(id -u)" = 0 ] || skip "loading BPF programs needs root"
    run json --ref ck M.qpk M2.qpk --json --trace-layers
    check_two json bpf
    jqt json '.models[0].map_bytes > 0'
    run table --ref ck M.qpk M2.qpk --trace-layers
    [ "$rc" = 0 ] || fail "table: exit $rc: $(cat "$T/table.err")"
    grep -Eq '^metric +reference +M\.qpk +M2\.qpk$' "$T/table.out" || fail "table: no header row"
    grep -Eq '^top-1 agreement +- +128/128 \(100\.00%\) +128/128 \(100\.00%\)$' "$T/table.out" ||
        fail "table: top-1 row: $(grep top-1 "$T/table.out")"
    grep -q '^hidden-state error after each layer' "$T/table.out" || fail "table: no trace"
    grep -Eq '^1 ' "$T/table.out" || fail "table: no layer 1 row"
    [ ! -s "$T/table.err" ] || fail "table: stderr: $(cat "$T/table.err")"
    # the host twin is bit-identical to BPF: same accuracy numbers
    run emu --ref ck M.qpk M2.qpk --json --trace-layers --backend emu
    [ "$rc" = 0 ] || fail "emu: exit $rc: $(cat "$T/emu.err")"
    ACC_NOMAP=$(echo "$ACC" | sed 's/map_bytes, //')
    [ "$(jq -c ".models[0] | $ACC_NOMAP" "$T/json.out")" = "$(jq -c ".models[0] | $ACC_NOMAP" "$T/emu.out")" ] ||
        fail "bpf and emu give different numbers"
    echo "ok table, bpf == emu"
    ;;
emu)
    run json --ref ck M.qpk M2.qpk --json --trace-layers --backend emu
    check_two json emu
    jqt json '.models[0].map_bytes == 0'
    # another seed: other prompts, other numbers, same agreement
    run seed --ref ck M.qpk --json --backend emu --seed 7 --positions 9
    [ "$rc" = 0 ] || fail "seed: exit $rc: $(cat "$T/seed.err")"
    jqt seed '.seed == 7 and .positions == 36 and .models[0].top1_percent == 100'
    ;;
text)
    [ -f "$WORK/T.qpk" ] || skip "no tokenizer in $TOKDIR (scripts/fetch_tokenizer.sh)"
    printf 'Hello, world!\nThe quick brown fox\n\n  jumps over the lazy dog\r\n' >"$T/prompts.txt"
    printf 'qpack packs a Hugging Face Qwen3 checkpoint once, ahead of time, into one checksummed container.' \
        >"$T/text.txt"
    run text --ref ckt T.qpk --prompts "$T/prompts.txt" --text "$T/text.txt" --json --backend emu
    [ "$rc" = 0 ] || fail "text: exit $rc: $(cat "$T/text.err")"
    jqt text '.prompts == 3 and .positions > 3 and .models[0].top1_percent == 100'
    jqt text '.models[0].text_tokens == .reference.text_tokens and .models[0].text_tokens > 10'
    # a random model is nearly uniform: NLL close to log(151936) = 11.93
    jqt text '(.reference.text_nll - 11.9312 | fabs) < 0.05 and (.models[0].text_nll - .reference.text_nll | fabs) < 1e-3'
    jqt text '(.models[0].text_ppl | log) - .models[0].text_nll | fabs < 1e-9'
    run ttable --ref ckt T.qpk --prompts "$T/prompts.txt" --text "$T/text.txt" --backend emu
    [ "$rc" = 0 ] || fail "ttable: exit $rc: $(cat "$T/ttable.err")"
    grep -Eq '^text NLL/token +[0-9.]+ +[0-9.]+$' "$T/ttable.out" || fail "ttable: no NLL row"
    grep -Eq '^text perplexity ' "$T/ttable.out" || fail "ttable: no perplexity row"
    echo "ok text: $(jq -c '[.reference.text_nll, .models[0].text_nll]' "$T/text.out")"
    ;;
errors)
    # expect NAME STATUS PATTERN ARGS...: exit STATUS, nothing on stdout, one stderr line matching PATTERN
    expect() {
        local name=$1 want=$2 pat=$3
        shift 3
        run "$name" "$@"
        [ "$rc" = "$want" ] || fail "$name: exit $rc, expected $want ($(cat "$T/$name.err"))"
        [ ! -s "$T/$name.out" ] || fail "$name: unexpected stdout: $(head -c 200 "$T/$name.out")"
        [ "$(wc -l <"$T/$name.err")" = 1 ] || fail "$name: expected one line on stderr, got: $(cat "$T/$name.err")"
        grep -q -- "$pat" "$T/$name.err" || fail "$name: '$(cat "$T/$name.err")' does not say '$pat'"
        echo "ok $name (exit $rc): $(cat "$T/$name.err")"
    }
    expect no_ref 2 'give --ref DIR' M.qpk
    expect no_model 2 'no container' --ref ck
    expect bad_opt 2 "unknown option '--bogus'" --ref ck M.qpk --bogus
    expect bad_positions 2 '--positions needs a whole number' --ref ck M.qpk --positions 0
    expect bad_backend 2 "unknown backend 'ref'" --ref ck M.qpk --backend ref
    expect missing_model 1 'nope.qpk: No such file' --ref ck nope.qpk --backend emu
    expect missing_ref 1 'not a folder' --ref nowhere M.qpk --backend emu
    expect missing_prompts 1 'no-such-file' --ref ck M.qpk --prompts no-such-file --backend emu
    echo junk >"$T/junk.qpk"
    expect junk 1 'not a .qpk container' --ref ck "$T/junk.qpk" --backend emu
    expect config 1 'config differs from the reference ck: num_hidden_layers 3 vs 2' --ref ck M.qpk L3.qpk --backend emu
    printf 'x\n' >"$T/p.txt"
    expect no_tokenizer 1 'no tokenizer' --ref ck M.qpk --prompts "$T/p.txt" --backend emu
    expect too_long 1 'past the model' --ref ck M.qpk --positions 5000 --backend emu
    if [ -f "$WORK/S.qpk" ]; then
        printf 'Hello, world!\n' >"$T/hello.txt"
        expect vocab 1 'outside the model.s vocabulary (512)' --ref cks S.qpk --prompts "$T/hello.txt" --backend emu
        printf '\n\n' >"$T/empty.txt"
        expect no_prompts 1 'no prompts' --ref cks S.qpk --prompts "$T/empty.txt" --backend emu
        printf 'a' >"$T/a.txt"
        expect short_text 1 'scoring needs at least 2' --ref cks S.qpk --text "$T/a.txt" --backend emu
    fi
    "$QEVAL" --help >"$T/help.out" 2>&1 || fail "--help: exit $?"
    for o in --ref --prompts --text --positions --seed --backend --json --trace-layers; do
        grep -q -- "$o" "$T/help.out" || fail "--help does not mention $o"
    done
    echo "ok help"
    ;;
*) fail "unknown case" ;;
esac
exit 0
