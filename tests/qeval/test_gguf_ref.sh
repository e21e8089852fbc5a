#!/bin/bash
# test_gguf_ref.sh QPACK QEVAL GGUF_WRITE DATA_DIR QRUN - qeval with a container
# packed from a GGUF (qp-gguf-write's, of DATA_DIR/model, the model with
# learned weights):
#   - against the Hugging Face folder it came from: the GGUF keeps
#     rms_norm_eps as float32 (1e-6 becomes 9.9999999747524271e-07), which
#     is the same value to the precision it is stored in, so the configs
#     agree and --force (the GGUF is not the folder's files) runs it;
#   - a config value that differs beyond that precision is still refused,
#     one line naming it, --force or not;
#   - --ref takes the GGUF itself (what qpack packs): its container matches
#     its recorded source without --force, at the KL its encoding implies
#     (F16 in q24: exact; Q4_K in i4k: the nearest fit), and a container
#     packed from the folder is refused against it, naming what differs;
#     qrun --backend ref runs the GGUF too, greedy as its F16 container.
set -u
QPACK=$1 QEVAL=$2 WRITE=$3 DATA=$4 QRUN=$5
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v jq >/dev/null || { echo "SKIP: jq is not installed"; exit 77; }
W=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$W"' EXIT
M=$DATA/model
backend=bpf
[ "$(id -u)" = 0 ] || backend=emu

"$WRITE" "$M" "$W/tl.gguf" --type F16 || fail "qp-gguf-write"
"$QPACK" pack "$M" -o "$W/tl.qpk" --quiet || fail "qpack pack $M"
"$QPACK" pack "$W/tl.gguf" -o "$W/tl-gguf.qpk" --quiet || fail "qpack pack tl.gguf"
[ "$(jq .rms_norm_eps "$M/config.json")" = 1e-06 ] || fail "the model's rms_norm_eps is not 1e-6"

"$QEVAL" --ref "$M" "$W/tl.qpk" "$W/tl-gguf.qpk" --backend $backend --force --json >"$W/eval.json" 2>"$W/eval.err" ||
    fail "qeval --ref the folder, the GGUF's container: $(cat "$W/eval.err")"
jq -e '(.models | length) == 2 and .models[1].kl_mean < 0.01 and .models[1].top1_percent >= 95' "$W/eval.json" \
    >/dev/null || fail "the GGUF's container against the folder: $(jq -c '.models[1]' "$W/eval.json")"
grep -q "warning: .*tl-gguf.qpk was packed from a tl.gguf" "$W/eval.err" ||
    fail "--force did not say what differs: $(cat "$W/eval.err")"
echo "ok: the GGUF's container against its folder: $(jq -c '.models[1] | {kl_mean, top1_percent}' "$W/eval.json")"

# a real difference: rms_norm_eps 2e-6
mkdir "$W/other" && cp "$M"/* "$W/other/" || fail "copying the model"
jq '.rms_norm_eps = 2e-6' "$M/config.json" >"$W/other/config.json" || fail "jq"
"$QEVAL" --ref "$W/other" "$W/tl-gguf.qpk" --backend $backend --force >"$W/other.out" 2>"$W/other.err" &&
    fail "a reference with another rms_norm_eps was compared"
[ "$(wc -l <"$W/other.err")" = 1 ] && grep -q "config differs from the reference .*: rms_norm_eps" "$W/other.err" ||
    fail "another rms_norm_eps: $(cat "$W/other.err")"
echo "ok: $(cat "$W/other.err")"

# --ref FILE.gguf: its values decoded as its types say
for type in F16 Q4_K; do
    [ "$type" = F16 ] || "$WRITE" "$M" "$W/tl.gguf" --type $type || fail "qp-gguf-write $type"
    [ "$type" = F16 ] || "$QPACK" pack "$W/tl.gguf" -o "$W/tl-gguf.qpk" --quiet || fail "qpack pack $type"
    "$QEVAL" --ref "$W/tl.gguf" "$W/tl-gguf.qpk" --backend $backend --json >"$W/g.json" 2>"$W/g.err" ||
        fail "--ref tl.gguf ($type): $(cat "$W/g.err")"
    [ ! -s "$W/g.err" ] || fail "--ref tl.gguf ($type): stderr: $(cat "$W/g.err")"
    bound=0.01
    [ "$type" = F16 ] && bound=1e-8
    jq -e --argjson b $bound '.models[0].kl_mean < $b and .models[0].top1_percent >= 95' "$W/g.json" >/dev/null ||
        fail "--ref tl.gguf ($type): $(jq -c '.models[0] | {kl_mean, top1_percent}' "$W/g.json")"
    echo "ok: --ref tl.gguf ($type): $(jq -c '.models[0] | {kl_mean, top1_percent}' "$W/g.json")"
    if [ "$type" = F16 ]; then
        want=$("$QRUN" -m "$W/tl-gguf.qpk" --backend emu -p "The package" -n 12 --temp 0 --print-ids) || fail "qrun emu"
        got=$("$QRUN" -m "$W/tl.gguf" --backend ref -p "The package" -n 12 --temp 0 --print-ids 2>"$W/q.err") ||
            fail "qrun --backend ref -m tl.gguf: $(cat "$W/q.err")"
        [ "$got" = "$want" ] || fail "qrun --backend ref -m tl.gguf: $got, its container: $want"
        echo "ok: qrun --backend ref -m tl.gguf: $got"
    fi
done
"$QEVAL" --ref "$W/tl.gguf" "$W/tl.qpk" --backend $backend >"$W/mix.out" 2>"$W/mix.err" &&
    fail "the folder's container was compared with the GGUF without --force"
[ "$(wc -l <"$W/mix.err")" = 1 ] && grep -q "tl.qpk was packed from a config.json that .*tl.gguf lacks (--force" "$W/mix.err" ||
    fail "the folder's container against the GGUF: $(cat "$W/mix.err")"
echo "ok: $(cat "$W/mix.err")"
