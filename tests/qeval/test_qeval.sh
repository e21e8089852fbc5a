#!/bin/bash
# test_qeval.sh CASE QEVAL QPACK QP_GEN TOKENIZER_DIR WORK_DIR [QRUN]
#
# qeval end to end, one CASE per ctest test (tests/qeval/qeval.cmake). "setup"
# writes tiny random checkpoints into WORK_DIR and packs them; the other
# cases use them:
#   bpf     two identical containers in BPF: the JSON parses, top-1 agreement
#           is 100 %, KL < 1e-6, and both get identical accuracy numbers;
#           the table and the per-layer trace (needs root, else skipped)
#   emu     the same on the host twin (no root needed)
#   text    --prompts and --text with the real tokenizer: NLL of model and
#           reference side by side, near log(vocab) for a random model
#   plot    --plot: the SVG parses as XML (python3), has one labelled point per
#           container, placed in the order of their bits per weight and mean
#           KL in the JSON; an input as --plot's destination is refused first
#   errors  one clear line and a non-zero exit for each mistake
#   lost_output  stdout on /dev/full (every write fails): exit 1 and one
#           line, for --json and the table, never a silent success
#   cache   --ref-cache: a second run reads the reference's results, the same
#           numbers; damaged entries are recomputed
#   sources containers packed from other files than --ref's are refused
#           (--force: a warning)
#   csv     --csv has --json's keys and values, a line per model
#   progress  a progress line on a terminal only (script), none with --quiet
#   signals SIGINT and SIGTERM end it within 0.5 s, nothing left in the cache
#   logits  --prompt-ids and logits:FILE: the logits qrun --dump-logits-all
#           writes of a container score what qeval measures of the
#           container itself (to float32's rounding); the reference's own
#           logits score 0; a file of the wrong size, an id past the
#           vocabulary, --text with a logits file are refused in one line
set -u

CASE=$1 QEVAL=$2 QPACK=$3 QP_GEN=$4 TOKDIR=$5 WORK=$6 QRUN=${7:-}
T=$WORK/$CASE.tmp

fail() { echo "FAIL ($CASE): $*" >&2; exit 1; }
skip() { echo "SKIP ($CASE): $*"; exit 77; }

if [ "$CASE" = setup ]; then
    rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot create $WORK"
    cd "$WORK" || fail "cd $WORK"
    "$QP_GEN" ck --preset tiny --seed 1 >/dev/null || fail "qp-gen-checkpoint ck"
    "$QPACK" pack ck -o M.qpk --quiet || fail "qpack pack ck"
    cp M.qpk M2.qpk || fail "cp"
    "$QPACK" pack ck -o I8.qpk --format int8 --quiet || fail "qpack pack ck int8"
    "$QPACK" pack ck -o I4.qpk --format int4-pure --quiet || fail "qpack pack ck int4-pure"
    "$QP_GEN" ck3 --preset tiny --seed 1 --layers 3 >/dev/null || fail "qp-gen-checkpoint ck3"
    "$QPACK" pack ck3 -o L3.qpk --quiet || fail "qpack pack ck3"
    if [ -f "$TOKDIR/tokenizer.json" ]; then
        # the real tokenizer's ids need the real vocabulary; the tiny vocabulary cannot hold them
        "$QP_GEN" ckt --preset tiny --seed 2 --vocab 151936 --tokenizer-dir "$TOKDIR" >/dev/null ||
            fail "qp-gen-checkpoint ckt"
        "$QPACK" pack ckt -o T.qpk --quiet || fail "qpack pack ckt"
        # a vocabulary of 512 and the real tokenizer only in the reference
        # folder (qpack refuses a tokenizer with ids past the vocabulary)
        "$QP_GEN" cks --preset tiny --seed 3 >/dev/null || fail "qp-gen-checkpoint cks"
        "$QPACK" pack cks -o S.qpk --quiet 2>/dev/null || fail "qpack pack cks"
        cp "$TOKDIR/tokenizer.json" cks/ || fail "cp tokenizer.json"
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
      logit_max_abs_err, logit_mae, logit_rms_err, kl_mean, kl_max, top1_agree, top1_percent, top5_overlap,
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
    jqt "$n" '.models[0].logit_max_abs_err < 1e-3 and .models[0].logit_mae <= .models[0].logit_rms_err and .models[0].logit_rms_err <= .models[0].logit_max_abs_err'
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
plot)
    command -v python3 >/dev/null || skip "python3 is not installed"
    run plot --ref ck M.qpk I8.qpk I4.qpk --json --backend emu --positions 8 --plot "$T/kl.svg"
    [ "$rc" = 0 ] || fail "plot: exit $rc: $(cat "$T/plot.err")"
    # (label, bits per weight, mean KL) per container, from the JSON, in order
    jq -r '.models[] | [(.path | split("/") | last), .bits_per_weight, .kl_mean] | @tsv' "$T/plot.out" >"$T/expect.tsv"
    python3 - "$T/kl.svg" "$T/expect.tsv" <<'PY' || fail "plot: the SVG does not show the JSON's points"
import sys, xml.etree.ElementTree as ET
ns = {"s": "http://www.w3.org/2000/svg"}
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
want = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
pts = root.findall(".//s:g[@class='point']", ns)
assert len(pts) == len(want) == 3, (len(pts), len(want))
got = []
for g, (label, bpw, kl) in zip(pts, want):
    c, t = g.find("s:circle", ns), g.find("s:text", ns)
    assert t.text.startswith(label + " ("), (t.text, label)
    got.append((float(c.get("cx")), float(c.get("cy")), float(bpw), float(kl)))
# x grows with bits per weight; y (downwards) falls as the KL grows, KL 0 lowest
for a in got:
    for b in got:
        if a[2] < b[2]: assert a[0] < b[0], (a, b)
        if a[3] < b[3]: assert a[1] > b[1], (a, b)
# every label inside the picture, at 7 px per character of the 12 px font
width = float(root.get("width"))
for t in root.iter("{http://www.w3.org/2000/svg}text"):
    x, n = float(t.get("x")), len(t.text or "") * 7
    lo, hi = {"end": (x - n, x), "middle": (x - n / 2, x + n / 2)}.get(t.get("text-anchor"), (x, x + n))
    assert t.get("transform") or (lo >= 0 and hi <= width), ("clipped", t.text, lo, hi, width)
print("ok", [(round(x), round(y)) for x, y, _, _ in got])
PY
    # the destination is checked before any work: an input is never replaced
    cp I4.qpk "$T/victim.qpk"
    run refuse --ref ck "$T/victim.qpk" --backend emu --plot "$T/victim.qpk"
    [ "$rc" = 1 ] && grep -q -- "--plot" "$T/refuse.err" && cmp -s I4.qpk "$T/victim.qpk" ||
        fail "refuse: exit $rc, $(cat "$T/refuse.err")"
    [ ! -s "$T/refuse.out" ] || fail "refuse: printed a report"
    echo "ok plot"
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
    expect missing_ref 1 '--ref nowhere: No such file' --ref nowhere M.qpk --backend emu
    expect file_ref 1 'M.qpk: not a checkpoint folder nor a .gguf file' --ref M.qpk M.qpk --backend emu
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
lost_output)
    for mode in --json ""; do
        "$QEVAL" --ref ck M.qpk --backend emu --positions 4 $mode >/dev/full 2>"$T/full.err"
        rc=$?
        [ "$rc" = 1 ] || fail "qeval $mode >/dev/full: exit $rc, expected 1 ($(cat "$T/full.err"))"
        [ "$(cat "$T/full.err")" = "qeval: writing standard output: No space left on device" ] ||
            fail "qeval $mode >/dev/full: stderr: $(cat "$T/full.err")"
        echo "ok ${mode:-table}: $(cat "$T/full.err")"
    done
    ;;
cache)
    # --ref-cache: the second run reads the reference's results (marked
    # cached) and gives the same accuracy numbers; a damaged or foreign cache
    # file is recomputed, with a note; the folder is checked before any work
    C=$T/cache
    run first --ref ck M.qpk --backend emu --json --trace-layers --ref-cache "$C"
    [ "$rc" = 0 ] || fail "first: exit $rc: $(cat "$T/first.err")"
    [ "$(ls "$C" | wc -l)" = 1 ] || fail "cache folder: $(ls -a "$C")"
    jqt first '.reference.cached == false and .reference.prompt_ms_per_token > 0'
    run second --ref ck M.qpk --backend emu --json --trace-layers --ref-cache "$C"
    [ "$rc" = 0 ] && [ ! -s "$T/second.err" ] || fail "second: exit $rc: $(cat "$T/second.err")"
    jqt second '.reference.cached == true and (.reference | has("prompt_ms_per_token") | not)'
    [ "$(jq -c ".models[0] | $ACC" "$T/first.out")" = "$(jq -c ".models[0] | $ACC" "$T/second.out")" ] ||
        fail "the cached reference gave other numbers"
    run table --ref ck M.qpk --backend emu --ref-cache "$C" --trace-layers
    grep -q "the reference's results from $C" "$T/table.out" && grep -Eq '^start-up ms +cached ' "$T/table.out" ||
        fail "table: $(head -5 "$T/table.out")"
    # other sequences: another entry
    run seed --ref ck M.qpk --backend emu --json --ref-cache "$C" --seed 5
    jqt seed '.reference.cached == false'
    [ "$(ls "$C" | wc -l)" = 2 ] || fail "expected 2 entries (seed 1 traced, seed 5): $(ls "$C")"
    # a damaged entry is computed again, and replaced
    f=$(ls -t "$C" | tail -1)
    printf 'XXXX' | dd of="$C/$f" bs=1 seek=100 conv=notrunc 2>/dev/null
    run damaged --ref ck M.qpk --backend emu --json --trace-layers --ref-cache "$C"
    [ "$rc" = 0 ] && grep -q "is not this run's reference: computing it again" "$T/damaged.err" ||
        fail "damaged: exit $rc: $(cat "$T/damaged.err")"
    jqt damaged '.reference.cached == false'
    [ "$(jq -c ".models[0] | $ACC" "$T/first.out")" = "$(jq -c ".models[0] | $ACC" "$T/damaged.out")" ] ||
        fail "the recomputed reference gave other numbers"
    run again --ref ck M.qpk --backend emu --json --trace-layers --ref-cache "$C"
    jqt again '.reference.cached == true'
    : >"$T/afile"
    run notdir --ref ck M.qpk --backend emu --ref-cache "$T/afile"
    [ "$rc" = 1 ] && grep -q "not a folder" "$T/notdir.err" || fail "a file as --ref-cache: $rc $(cat "$T/notdir.err")"
    echo "ok: cached and computed references agree"
    ;;
sources)
    # a container packed from other files than --ref's is refused before any
    # work, naming the file; --force compares anyway, with a warning
    rm -rf "$T/ckx" && cp -r ck "$T/ckx" || fail "cp"
    printf ' ' >>"$T/ckx/config.json"
    run other --ref "$T/ckx" M.qpk --backend emu
    [ "$rc" = 1 ] && [ ! -s "$T/other.out" ] && [ "$(wc -l <"$T/other.err")" = 1 ] ||
        fail "other sources: exit $rc: $(cat "$T/other.err")"
    grep -q "M.qpk was packed from another config.json than .*ckx's (recorded .* bytes, xxh3 .*; found .* bytes" "$T/other.err" &&
        grep -q -- "--force" "$T/other.err" || fail "message: $(cat "$T/other.err")"
    run forced --ref "$T/ckx" M.qpk --backend emu --force --json
    [ "$rc" = 0 ] && grep -q "^qeval: warning: M.qpk was packed from another config.json" "$T/forced.err" ||
        fail "--force: exit $rc: $(cat "$T/forced.err")"
    jqt forced '.models[0].top1_percent == 100'
    rm "$T/ckx/tokenizer_config.json" 2>/dev/null
    mv "$T/ckx/model.safetensors" "$T/ckx/x" && cp "$T/ckx/x" "$T/ckx/model.safetensors" && rm "$T/ckx/x"
    cp ck/config.json "$T/ckx/config.json"
    run same --ref "$T/ckx" M.qpk --backend emu
    [ "$rc" = 0 ] || fail "a copy of the same files: exit $rc: $(cat "$T/same.err")"
    echo "ok: $(cat "$T/other.err")"
    ;;
csv)
    # --csv: a header and one line per model with the keys and values of --json
    run csv --ref ck M.qpk M2.qpk --backend emu --csv
    run json --ref ck M.qpk M2.qpk --backend emu --json
    [ "$rc" = 0 ] && [ "$(wc -l <"$T/csv.out")" = 4 ] || fail "csv: $(cat "$T/csv.out" "$T/csv.err")"
    head -1 "$T/csv.out" | grep -q "^model,path,backend,file_bytes,map_bytes,bits_per_weight," || fail "header: $(head -1 "$T/csv.out")"
    for key in top1_percent kl_max file_bytes positions; do
        col=$(head -1 "$T/csv.out" | tr ',' '\n' | grep -nx "$key" | cut -d: -f1)
        got=$(sed -n 2p "$T/csv.out" | cut -d, -f"$col")
        [ -z "$got" ] || [ "$key" = file_bytes ] || [ "$key" = positions ] || fail "the reference has a $key: $got"
        got=$(sed -n 3p "$T/csv.out" | cut -d, -f"$col")
        want=$(jq ".models[0].$key" "$T/json.out")
        awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9 * (b < 0 ? -b : b) + 1e-12) }' ||
            fail "$key: csv $got, json $want"
    done
    run both --ref ck M.qpk --csv --json
    [ "$rc" = 2 ] || fail "--csv --json: exit $rc"
    echo "ok: $(sed -n 3p "$T/csv.out" | cut -c1-80)"
    ;;
progress)
    # a progress line on a terminal only: the model, the phase, the positions
    command -v script >/dev/null || skip "needs script (util-linux)"
    script -qfec "'$QEVAL' --ref ck M.qpk --backend emu --positions 400" /dev/null >"$T/tty.out"
    grep -aq "qeval: \[1/2\] reference: " "$T/tty.out" &&
        grep -aq "qeval: \[2/2\] M.qpk: loading: checksums" "$T/tty.out" &&
        grep -aq "qeval: \[2/2\] M.qpk: prompt [1-4] of 4, position [0-9]* of 400" "$T/tty.out" ||
        fail "no progress line: $(head -c 400 "$T/tty.out")"
    script -qfec "'$QEVAL' --ref ck M.qpk --backend emu --positions 64 --quiet" /dev/null >"$T/quiet.out"
    ! grep -aEq 'qeval: \[|position [0-9]+ of' "$T/quiet.out" || fail "--quiet: $(head -c 300 "$T/quiet.out")"
    run plain --ref ck M.qpk --backend emu --positions 64
    [ ! -s "$T/plain.err" ] || fail "stderr not a terminal: $(cat "$T/plain.err")"
    echo "ok"
    ;;
signals)
    # SIGINT/SIGTERM end qeval within 0.5 s, with 130/143 and one line, and
    # leave no cache file behind
    for sig in INT TERM; do
        C=$T/c$sig
        mkdir -p "$C"
        env --default-signal=INT,TERM "$QEVAL" --ref ck M.qpk --backend emu --positions 1500 --ref-cache "$C" \
            >"$T/$sig.out" 2>"$T/$sig.err" &
        pid=$!
        sleep 0.5
        kill -0 $pid 2>/dev/null || fail "$sig: qeval ended early: $(cat "$T/$sig.err")"
        t0=$(date +%s%3N)
        kill -$sig $pid
        wait $pid
        rc=$?
        took=$(($(date +%s%3N) - t0))
        want=$([ $sig = INT ] && echo 130 || echo 143)
        [ "$rc" = "$want" ] && [ "$(cat "$T/$sig.err")" = "qeval: interrupted" ] ||
            fail "$sig: exit $rc: $(cat "$T/$sig.err")"
        [ "$took" -le 500 ] || fail "$sig: qeval took $took ms to end"
        [ -z "$(ls -A "$C")" ] || fail "$sig: left in the cache: $(ls -A "$C")"
        echo "ok SIG$sig: exit $rc after $took ms"
    done
    ;;
logits)
    # two prompts as ids; qrun writes each one's logits, every position
    printf '5 17 3 99 250 7 7 1\n\n 42 8 300 12\r\n' >"$T/ids.txt"
    for m in I4 ref; do
        : >"$T/$m.f32"
        while read -r line; do
            line=${line%$'\r'}
            [ -n "$line" ] || continue
            if [ $m = ref ]; then args=(-m ck --backend ref); else args=(-m $m.qpk --backend emu); fi
            "$QRUN" "${args[@]}" --ids "$line" -n 0 --dump-logits-all "$T/one.f32" >/dev/null 2>"$T/qrun.err" ||
                fail "qrun $m: $(cat "$T/qrun.err")"
            cat "$T/one.f32" >>"$T/$m.f32"
        done <"$T/ids.txt"
    done
    run json --ref ck I4.qpk "logits:$T/I4.f32" "logits:$T/ref.f32" --prompt-ids "$T/ids.txt" --json --backend emu
    [ "$rc" = 0 ] || fail "json: exit $rc: $(cat "$T/json.err")"
    jqt json '.prompts == 2 and .positions == 12 and .prompts_source == "'"$T/ids.txt"'"'
    jqt json '.models[1].backend == "file" and .models[1].positions == 12 and (.models[1] | has("file_bytes") | not)'
    # the container's logits through a file: the same figures, less float32's rounding
    jqt json '.models[0].kl_mean > 1e-4 and .models[0].top1_agree == .models[1].top1_agree'
    jqt json '(.models[1].kl_mean / .models[0].kl_mean - 1 | fabs) < 1e-3'
    jqt json '(.models[1].logit_max_abs_err - .models[0].logit_max_abs_err | fabs) < 1e-4'
    jqt json '(.models[1].logit_mae - .models[0].logit_mae | fabs) < 1e-5'
    jqt json '.models[2].kl_max < 1e-9 and .models[2].logit_max_abs_err < 1e-4 and .models[2].top1_agree == 12'
    echo "ok $(jq -c '.models[:2] | map({path, kl_mean, logit_max_abs_err, top1_agree})' "$T/json.out")"
    run table --ref ck "logits:$T/I4.f32" --prompt-ids "$T/ids.txt" --backend emu
    [ "$rc" = 0 ] || fail "table: exit $rc: $(cat "$T/table.err")"
    grep -Eq '^file size +[0-9.]+ kB +-$' "$T/table.out" || fail "table: $(grep 'file size' "$T/table.out")"
    grep -q "^2 prompts from $T/ids.txt, 12 positions" "$T/table.out" || fail "table: $(head -1 "$T/table.out")"
    # mistakes: one line each
    head -c 100 "$T/I4.f32" >"$T/short.f32"
    run short --ref ck "logits:$T/short.f32" --prompt-ids "$T/ids.txt" --backend emu
    [ "$rc" = 1 ] && [ "$(wc -l <"$T/short.err")" = 1 ] &&
        grep -q "logits file $T/short.f32: 100 bytes, not the .* of 12 positions x" "$T/short.err" ||
        fail "short: exit $rc: $(cat "$T/short.err")"
    printf '1 2 3\n4 x 5\n' >"$T/bad.txt"
    run badid --ref ck "logits:$T/I4.f32" --prompt-ids "$T/bad.txt" --backend emu
    [ "$rc" = 1 ] && [ "$(cat "$T/badid.err")" = "qeval: $T/bad.txt line 2: 'x' is not a token id of the model's vocabulary (0 to $(jq '.vocab_size - 1' ck/config.json))" ] ||
        fail "badid: exit $rc: $(cat "$T/badid.err")"
    printf '1 2 %s\n' "$(jq .vocab_size ck/config.json)" >"$T/past.txt"
    run past --ref ck M.qpk --prompt-ids "$T/past.txt" --backend emu
    [ "$rc" = 1 ] && grep -q "past.txt line 1: '[0-9]*' is not a token id" "$T/past.err" || fail "past: exit $rc: $(cat "$T/past.err")"
    run withtext --ref ck "logits:$T/I4.f32" --prompt-ids "$T/ids.txt" --text "$T/ids.txt"
    [ "$rc" = 2 ] && grep -q "a logits file has no --text score" "$T/withtext.err" || fail "withtext: exit $rc: $(cat "$T/withtext.err")"
    run both --ref ck M.qpk --prompt-ids "$T/ids.txt" --prompts "$T/ids.txt"
    [ "$rc" = 2 ] && grep -q "give --prompts or --prompt-ids, not both" "$T/both.err" || fail "both: exit $rc: $(cat "$T/both.err")"
    echo "ok: the mistakes refused"
    ;;
*) fail "unknown case" ;;
esac
exit 0
