#!/bin/bash
# test_gguf_pack.sh QPACK QEVAL GGUF_WRITE GEN TINY_LEARNED_DIR QRUN - `qpack pack
# FILE.gguf` end to end: GGUFs of every type written by qp-gguf-write from
# the model with learned weights pack into the encodings that hold them
# (Q8_0, Q4_0 also with searched scales, Q4_1, F16 with no error against
# the GGUF's own values), run close to the float reference computed on
# those values, a split file packs to the same tensors, and broken files
# and names the provenance cannot record are refused with one line. A
# tokenizer with a hole before its special tokens, or with no merges, runs
# through the HF folder and the GGUF alike with the ids its file gives.
set -u
QPACK=$1 QEVAL=$2 WRITE=$3 GEN=$4 DATA=$5 QRUN=$6
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v jq >/dev/null || { echo "SKIP: jq is not installed"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
M=$DATA/model

# type : the matrices' encoding : exact against the GGUF's values
for spec in Q8_0:i8g:1 Q4_0:i4g:1 Q4_1:i4g:1 Q4_K:i4k:0 Q5_K:i8g:0 Q6_K:i8g:0 F16:q24:1 BF16:q24:0 F32:q24:0; do
    IFS=: read -r type enc exact <<<"$spec"
    "$WRITE" "$M" "$W/$type.gguf" --type "$type" --dequantised "$W/ref-$type" || fail "write $type"
    "$QPACK" pack "$W/$type.gguf" -o "$W/$type.qpk" 2>"$W/$type.log" || fail "pack $type: $(tail -3 "$W/$type.log")"
    "$QPACK" info "$W/$type.qpk" --json >"$W/$type.json" || fail "info $type"
    jq -e --arg enc "$enc" --arg t "$type" '[.provenance.tensors[] | select(.name | test("proj")) |
        .encoding == $enc and .source_dtype == $t] | all' "$W/$type.json" >/dev/null ||
        fail "$type: $(jq -c '[.provenance.tensors[] | {name, encoding, source_dtype}][1]' "$W/$type.json")"
    if [ "$exact" = 1 ]; then
        grep -q "all exact" "$W/$type.log" || fail "$type is not held exactly: $(tail -1 "$W/$type.log")"
    fi
    "$QEVAL" --ref "$W/ref-$type" "$W/$type.qpk" --backend emu --force --json >"$W/$type.eval" 2>/dev/null ||
        fail "qeval $type"
    jq -e '.models[0].kl_mean < 0.01 and .models[0].top1_percent >= 95' "$W/$type.eval" >/dev/null ||
        fail "$type against its float reference: $(jq -c '.models[0] | {kl_mean, top1_percent}' "$W/$type.eval")"
    echo "ok: $type -> $enc $(jq -c '.models[0] | {kl_mean, top1_percent}' "$W/$type.eval")"
done

# Q4_0 with searched scales (an importance matrix's): still held exactly
"$WRITE" "$M" "$W/searched.gguf" --type Q4_0 --searched || fail "write searched Q4_0"
"$QPACK" pack "$W/searched.gguf" -o "$W/searched.qpk" 2>"$W/searched.log" || fail "pack searched Q4_0"
grep -q "all exact" "$W/searched.log" || fail "searched Q4_0 is not held exactly: $(tail -1 "$W/searched.log")"
cmp -s "$W/searched.gguf" "$W/Q4_0.gguf" && fail "--searched wrote the plain Q4_0 file"
echo "ok: Q4_0 with searched scales, exact"

# the chat template and tokenizer came along
"$QPACK" info "$W/Q4_K.qpk" --json | jq -e '.sections | map(.name) | index("chat_template") and index("tokenizer")' \
    >/dev/null || fail "the container lacks its chat template or tokenizer"

# a split file: the same tensors as the single one
"$WRITE" "$M" "$W/split.gguf" --type Q4_K --split 3 || fail "write split"
"$QPACK" pack "$W/split-00001-of-00003.gguf" -o "$W/split.qpk" --quiet || fail "pack split"
"$QPACK" info "$W/split.qpk" --json | jq -c '[.tensors[] | {name, xxh3}]' >"$W/split.t"
jq -c '[.tensors[] | {name, xxh3}]' "$W/Q4_K.json" >"$W/single.t"
cmp -s "$W/split.t" "$W/single.t" || fail "the split file packs to other tensors"
rm "$W/split-00003-of-00003.gguf"
"$QPACK" pack "$W/split-00001-of-00003.gguf" -o "$W/bad.qpk" 2>"$W/err" && fail "a missing part packed"
grep -q "split-00003-of-00003.gguf" "$W/err" || fail "missing part: $(cat "$W/err")"
echo "ok: split into 3 parts"

# an untied model keeps its output matrix
"$GEN" "$W/untied" --untied --tokenizer-dir "$M" --vocab 2048 --hidden 256 --intermediate 512 >/dev/null || fail "gen untied"
cp "$M/tokenizer_config.json" "$W/untied/"
"$WRITE" "$W/untied" "$W/untied.gguf" --type Q8_0 --output-type Q6_K || fail "write untied"
"$QPACK" pack "$W/untied.gguf" -o "$W/untied.qpk" --quiet || fail "pack untied"
"$QPACK" info "$W/untied.qpk" --json | jq -e '[.provenance.tensors[] | select(.name == "lm_head.weight") |
    .source_dtype == "Q6_K"] == [true]' >/dev/null || fail "untied: no Q6_K lm_head"

# broken files: one line, non-zero, nothing written
head -c 100000 "$W/Q8_0.gguf" >"$W/cut.gguf"
"$QPACK" pack "$W/cut.gguf" -o "$W/cut.qpk" 2>"$W/err" && fail "a truncated GGUF packed"
[ "$(wc -l <"$W/err")" = 1 ] && grep -q "cut.gguf" "$W/err" || fail "truncated: $(cat "$W/err")"
[ ! -e "$W/cut.qpk" ] || fail "a refused pack left a file"
"$QPACK" pack "$W/Q4_K.gguf" -o "$W/q24.qpk" --format q24 2>"$W/err" && fail "q24 of Q4_K packed"
grep -q "is Q4_K: --format q24 is for float checkpoints" "$W/err" || fail "q24: $(cat "$W/err")"
echo "ok: broken files refused"

# names the provenance cannot record as JSON text: refused before packing
cp "$W/Q8_0.gguf" "$W/"$'\xff\xfe'.gguf
"$QPACK" pack "$W/"$'\xff\xfe'.gguf -o "$W/name.qpk" 2>"$W/err" && fail "a non-UTF-8 file name packed"
[ "$(wc -l <"$W/err")" = 1 ] && grep -q "the file's name is not UTF-8" "$W/err" || fail "file name: $(cat "$W/err")"
ln -s "$M" "$W/"$'\xff'
"$QPACK" pack "$W/"$'\xff' -o "$W/name.qpk" 2>"$W/err" && fail "a non-UTF-8 folder name packed"
grep -q "the folder's name is not UTF-8" "$W/err" || fail "folder name: $(cat "$W/err")"
[ ! -e "$W/name.qpk" ] || fail "a refused pack left a file"
echo "ok: non-UTF-8 names refused"

# a hole before the special tokens (the last merge's token removed): they
# keep ids 2043.. in the folder and in its GGUF, where the hole is an
# UNUSED row
cp -r "$M" "$W/holes"
jq '(.model.vocab |= with_entries(select(.value != 2042))) | .model.merges |= .[:-1]' "$M/tokenizer.json" \
    >"$W/holes/tokenizer.json"
"$WRITE" "$W/holes" "$W/holes.gguf" --type Q8_0 >/dev/null || fail "write holes"
for src in "$W/holes" "$W/holes.gguf"; do
    "$QPACK" pack "$src" -o "$W/holes.qpk" --quiet || fail "pack $src"
    ids=$(printf '<|endoftext|><|im_start|><|im_end|>' | "$QRUN" tokenize -m "$W/holes.qpk")
    [ "$ids" = "2043 2044 2045" ] || fail "$src: the special tokens are $ids, not 2043 2044 2045"
    [ "$(echo 2045 | "$QRUN" detokenize -m "$W/holes.qpk")" = "<|im_end|>" ] || fail "$src: 2045 is not <|im_end|>"
done
echo "ok: a hole before the special tokens"

# no merges: every word is its bytes
cp -r "$M" "$W/nomerge"
jq '.model.merges = []' "$M/tokenizer.json" >"$W/nomerge/tokenizer.json"
"$WRITE" "$W/nomerge" "$W/nomerge.gguf" --type Q8_0 >/dev/null || fail "write nomerge"
for src in "$W/nomerge" "$W/nomerge.gguf"; do
    "$QPACK" pack "$src" -o "$W/nomerge.qpk" --quiet || fail "pack $src"
    ids=$(printf 'hi<|im_end|>' | "$QRUN" tokenize -m "$W/nomerge.qpk") || fail "$src: qrun tokenize"
    [ "$ids" = "71 72 2045" ] || fail "$src: hi<|im_end|> is $ids, not 71 72 2045"
    "$QRUN" -m "$W/nomerge.qpk" -p hi -n 2 --backend emu >/dev/null 2>"$W/err" || fail "$src: qrun -p: $(cat "$W/err")"
done
echo "ok: no merges"
