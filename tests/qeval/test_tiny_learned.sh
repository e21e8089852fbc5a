#!/bin/bash
# test_tiny_learned.sh QPACK QEVAL DATA_DIR [PPL_BOUND]
#
# A committed model with learned weights (DATA_DIR = tests/data/tiny-learned
# or tiny-learned-16k, made by scripts/train_tiny_qwen3.py) packed to q24 and
# scored by qeval on the first 256 tokens of its held-out text (eval.txt):
#   - the float64 reference's perplexity is below PPL_BOUND (default 200, for
#     tiny-learned): a model that does not predict from context does not get
#     there (on these tokens of tiny-learned the training text's unigram
#     frequencies score 775, a uniform model 2048, the trained model 83; a
#     broken forward pass or tokenizer lands in the hundreds or thousands;
#     tiny-learned-16k's figures are in its README);
#   - the reference's NLL per token is the one an independent implementation,
#     the trainer's torch model in float64 on the same BF16 weights, wrote
#     into expected.json (to 1e-9: both are float64 over the same sums);
#   - q24's perplexity is within 1 % of the reference's, also over three
#     windows of the text (--text-windows 3: 765 tokens), whose note counts
#     the text's windows as the trainer did;
#   - with the 8-bit KV cache (--kv-cache int8), over the first 20 lines of
#     eval.txt as prompts: the mean KL it adds to q24's int16 cache is at
#     most 1e-3 and its top-1 agreement with the reference within 1 % of
#     the int16 cache's; its perplexity within 1 % of the reference's.
# BPF when root (as CI runs), else the host twin (bit-identical to BPF).
set -u

QPACK=$1 QEVAL=$2 DATA=$3
PPL_BOUND=${4:-200}   # tiny-learned: unigram model of the training text 775 on these tokens; the model 83 (README)

fail() { echo "FAIL: $*" >&2; exit 1; }
command -v jq >/dev/null || { echo "SKIP: jq is not installed"; exit 77; }
work=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$work"' EXIT

"$QPACK" pack "$DATA/model" -o "$work/q24.qpk" --quiet || fail "qpack pack $DATA/model"
# One short prompt instead of qeval's random ones: the text is what is measured here.
printf 'The package\n' >"$work/prompt.txt"
backend=bpf
[ "$(id -u)" = 0 ] || backend=emu
"$QEVAL" --ref "$DATA/model" "$work/q24.qpk" --prompts "$work/prompt.txt" --text "$DATA/eval.txt" \
    --backend "$backend" --json >"$work/eval.json" 2>"$work/eval.err" ||
    fail "qeval: $(cat "$work/eval.err")"

jq -e '.reference.text_tokens == 255 and .models[0].text_tokens == 255' "$work/eval.json" >/dev/null ||
    fail "expected 255 scored tokens (256 positions of the model): $(jq -c '.reference' "$work/eval.json")"
ref=$(jq '.reference.text_ppl' "$work/eval.json")
q24=$(jq '.models[0].text_ppl' "$work/eval.json")
echo "perplexity of the first 256 tokens of eval.txt: reference $ref, q24 ($backend) $q24"
jq -e --argjson bound "$PPL_BOUND" '.reference.text_ppl < $bound' "$work/eval.json" >/dev/null ||
    fail "reference perplexity $ref is not below $PPL_BOUND: the model or the reference is broken"
want=$(jq '.eval_first_window.nll' "$DATA/expected.json") || fail "no $DATA/expected.json"
jq -e --argjson want "$want" '(.reference.text_nll - $want) | fabs < 1e-9' "$work/eval.json" >/dev/null ||
    fail "reference NLL $(jq '.reference.text_nll' "$work/eval.json") is not torch's $want (expected.json)"
jq -e '(.models[0].text_ppl / .reference.text_ppl - 1) | fabs < 0.01' "$work/eval.json" >/dev/null ||
    fail "q24 perplexity $q24 is not within 1 % of the reference's $ref"
# --text-windows 3: three windows of 256 positions one after the other, 765
# tokens scored; the note counts the text's windows as the trainer did
# (expected.json scores all of them: the text's tokens less one per window)
"$QEVAL" --ref "$DATA/model" "$work/q24.qpk" --prompts "$work/prompt.txt" --text "$DATA/eval.txt" --text-windows 3 \
    --backend "$backend" --json >"$work/windows.json" 2>"$work/windows.err" ||
    fail "qeval --text-windows 3: $(cat "$work/windows.err")"
jq -e '.text_windows == 3 and .text_window_positions == 256 and .reference.text_tokens == 765 and
       .models[0].text_tokens == 765 and (.models[0].text_ppl / .reference.text_ppl - 1 | fabs) < 0.01' \
    "$work/windows.json" >/dev/null || fail "--text-windows 3: $(jq -c '{text_windows, reference}' "$work/windows.json")"
tokens=$(jq .text_file_tokens "$work/windows.json")
windows=$((tokens - $(jq .eval_all_windows.tokens_scored "$DATA/expected.json")))
grep -qF "eval.txt has $tokens tokens in $windows windows of 256 positions; scoring 765 tokens of the first 3" \
    "$work/windows.err" || fail "--text-windows 3: the note: $(cat "$work/windows.err")"
jq -e --argjson one "$(jq .reference.text_nll "$work/eval.json")" '.reference.text_nll * 765 > $one * 255 and
    .reference.text_nll != $one' "$work/windows.json" >/dev/null || fail "--text-windows 3 scored the first window only"
echo "3 windows of eval.txt: perplexity reference $(jq .reference.text_ppl "$work/windows.json"), q24 $(jq '.models[0].text_ppl' "$work/windows.json")"
grep -v '^$' "$DATA/eval.txt" | head -n 20 >"$work/lines.txt"
for kv in int16 int8; do
    "$QEVAL" --ref "$DATA/model" "$work/q24.qpk" --prompts "$work/lines.txt" --text "$DATA/eval.txt" \
        --backend "$backend" --kv-cache "$kv" --ref-cache "$work" --json >"$work/$kv.json" 2>"$work/eval.err" ||
        fail "qeval --kv-cache $kv: $(cat "$work/eval.err")"
done
jq -e '.models[0].kv_cache == "int8"' "$work/int8.json" >/dev/null || fail "qeval did not run the 8-bit cache"
kl16=$(jq '.models[0].kl_mean' "$work/int16.json") kl8=$(jq '.models[0].kl_mean' "$work/int8.json")
top16=$(jq '.models[0].top1_percent' "$work/int16.json") top8=$(jq '.models[0].top1_percent' "$work/int8.json")
ppl8=$(jq '.models[0].text_ppl' "$work/int8.json")
echo "20 lines of eval.txt: mean KL int16 cache $kl16, int8 cache $kl8; top-1 $top16 % and $top8 %; int8 perplexity $ppl8"
jq -n -e --argjson a "$kl16" --argjson b "$kl8" '$b - $a <= 1e-3' >/dev/null ||
    fail "the 8-bit cache adds more than 1e-3 of mean KL ($kl16 -> $kl8)"
jq -n -e --argjson a "$top16" --argjson b "$top8" '$b >= $a - 1' >/dev/null ||
    fail "the 8-bit cache's top-1 agreement $top8 % is more than 1 % below the int16 cache's $top16 %"
jq -e '(.models[0].text_ppl / .reference.text_ppl - 1) | fabs < 0.01' "$work/int8.json" >/dev/null ||
    fail "the 8-bit cache's perplexity $ppl8 is not within 1 % of the reference's $ref"
echo "ok"
