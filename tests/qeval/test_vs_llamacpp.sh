#!/bin/bash
# test_vs_llamacpp.sh QPACK QEVAL QRUN DATA_DIR
#
# qpack's int4 and int8 against llama.cpp's Q4_K_M and Q8_0 of the same
# learned model, on the same positions: scripts/compare_llamacpp.sh ran
# llama.cpp (its llama-quantize, its logits) and wrote its figures and the
# windows of eval.txt it measured into DATA_DIR/llamacpp.json; this packs
# the containers, scores them with qeval on those windows and holds them to
# the targets against the recorded figures:
#   int4: file size, logit MAE, the largest logit error and mean KL at
#         most Q4_K_M's, top-1 agreement at least Q4_K_M's;
#   int8: file size at most Q8_0's, mean KL below Q8_0's.
# BPF when root (as CI runs), else the host twin (bit-identical to BPF).
set -u

QPACK=$1 QEVAL=$2 QRUN=$3 DATA=$4

fail() { echo "FAIL: $*" >&2; exit 1; }
command -v jq >/dev/null || { echo "SKIP: jq is not installed"; exit 77; }
work=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$work"' EXIT
fig=$DATA/llamacpp.json
[ -r "$fig" ] || fail "$fig is missing (scripts/compare_llamacpp.sh writes it)"

# the recorded windows: positions_per_window tokens of eval.txt from each start
"$QRUN" tokenize --tokenizer "$DATA/model/tokenizer.json" <"$DATA/eval.txt" | tr -s ' \n' '\n' | grep . \
    >"$work/ids" || fail "qrun tokenize $DATA/eval.txt"
n=$(jq -r .positions_per_window "$fig")
for s in $(jq -r '.window_starts[]' "$fig"); do
    sed -n "$((s + 1)),$((s + n))p" "$work/ids" | paste -sd' ' >>"$work/windows"
done
[ "$(wc -l <"$work/windows")" = "$(jq -r .windows "$fig")" ] || fail "the windows of $fig"

for f in int4 int8; do
    "$QPACK" pack "$DATA/model" -o "$work/$f.qpk" --format $f --quiet || fail "qpack pack --format $f"
done
backend=bpf
[ "$(id -u)" = 0 ] || backend=emu
"$QEVAL" --ref "$DATA/model" "$work/int4.qpk" "$work/int8.qpk" --prompt-ids "$work/windows" --backend $backend \
    --json -q >"$work/eval.json" 2>"$work/eval.err" || fail "qeval: $(cat "$work/eval.err")"
[ "$(jq '.models[0].positions' "$work/eval.json")" = "$(jq .positions "$fig")" ] || fail "positions compared"

# at_most FORMAT KEY THEIRS: qpack's FORMAT (0 int4, 1 int8) has KEY <= llama.cpp's THEIRS
at_most() {
    local ours theirs
    ours=$(jq ".models[$1].$2" "$work/eval.json")
    theirs=$(jq --arg t "llama.cpp $3" '.models[] | select(.name == $t) | .'"$2" "$fig")
    [ -n "$theirs" ] || fail "$fig has no $3"
    jq -en --argjson a "$ours" --argjson b "$theirs" '$a <= $b' >/dev/null ||
        fail "$(basename "$DATA"): qpack's $2 $ours, over llama.cpp $3's $theirs"
    echo "ok $(basename "$DATA") $2: qpack $ours <= $3 $theirs"
}
at_most 0 file_bytes Q4_K_M
at_most 0 logit_mae Q4_K_M
at_most 0 kl_mean Q4_K_M
at_most 0 logit_max_abs_err Q4_K_M
at_most 1 file_bytes Q8_0
at_most 1 kl_mean Q8_0
# top-1: at least, so the other way round
ours=$(jq '.models[0].top1_agree' "$work/eval.json")
theirs=$(jq '.models[] | select(.name == "llama.cpp Q4_K_M") | .top1_agree' "$fig")
[ "$ours" -ge "$theirs" ] || fail "$(basename "$DATA"): qpack int4's top-1 $ours, below Q4_K_M's $theirs"
echo "ok $(basename "$DATA") top-1: qpack $ours >= Q4_K_M $theirs"
