#!/bin/sh
# accuracy_sizes.sh [BUILD_DIR] - a measurement, not a test: the error of
# int8 and int4 containers of the big dense Qwen3 shapes against the float64
# reference, on a few positions (the reference takes seconds per position
# there), and where that error comes from. Per size (QP_SIZES, default
# "4b 8b") and format (QP_FORMATS, default "int8 int4"), on a random
# checkpoint from qp-gen-checkpoint --preset SIZE --seed 1:
#   total     qeval --ref CHECKPOINT: the container against the original
#   kernels   qeval --ref DEQ: the container against the float64 reference
#             run on the container's own weights (qp-dequant writes them as
#             float32), i.e. what the integer kernels (quantised activations,
#             fixed-point norms, softmax, RoPE) add
#   weights   with QP_SPLIT=1 (default for 0.6b and 1.7b only: it needs the
#             dequantised weights packed again as q24, 4 bytes per weight):
#             that q24 container against the original, i.e. what the
#             weights' quantisation costs by itself
# qeval's sample: 4 seeded prompts x QP_POSITIONS (default 2) positions,
# plus 16 greedy tokens each for the common-prefix figure. The reference's
# logits are cached in $work/refcache (qeval --ref-cache), so a second
# format of the same size does not recompute them. Also printed: the
# reference's ms per position and peak RSS (qeval's reference column).
# Files go to ${QP_BENCH_DIR:-/tmp/qp-bench}/accuracy and are deleted after
# each size unless QP_KEEP=1 (8B's checkpoint is 16 GB, its float32 copy 32).
# QP_KERNELS=0 leaves the kernels' share out (it runs the reference again,
# on float32 weights: 2x its time). QP_INIT=fan-in generates checkpoints
# with qp-gen-checkpoint --init fan-in (matrices N(0, 0.02 sqrt(1024/width)))
# instead of the fixed N(0, 0.02), whose products and logits grow with the
# width; "ref SD" is the reference logits' spread and "RMS/SD" the RMS
# error in units of it, which compares models of different spreads.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record accuracy_sizes "$@"
bin=$build/bin
work=${QP_BENCH_DIR:-/tmp/qp-bench}/accuracy
sizes=${QP_SIZES:-"4b 8b"}
formats=${QP_FORMATS:-"int8 int4"}
positions=${QP_POSITIONS:-2}
init=${QP_INIT:-fixed}
mkdir -p "$work/refcache"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# evaluate REF CONTAINER [--backend emu]: qeval's CSV of the container
# against REF in $work/last.csv; prints the container's row as
# "KEY=VALUE ..." pairs (row 2 of the CSV is the reference's)
evaluate() {
    ref=$1 qpk=$2
    shift 2
    "$bin/qeval" --ref "$ref" --force --ref-cache "$work/refcache" --positions "$positions" --csv -q "$qpk" "$@" \
        >"$work/last.csv" 2>>"$work/qeval.err"
    pairs 3
}
# pairs N: row N of $work/last.csv as "KEY=VALUE ..." (empty values left out)
pairs() {
    awk -F, -v n="$1" 'NR == 1 { for (i = 1; i <= NF; i++) key[i] = $i }
        NR == n { for (i = 1; i <= NF; i++) if ($i != "") printf "%s=%s ", key[i], $i; print "" }' "$work/last.csv"
}
# pick LINE KEY: the value of KEY in a line of evaluate's output
pick() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
row() {
    printf '%s %s %s %s %s %s %s %s %s %s %s\n' "$1" "$2" "$3" "$(pick "$4" kl_mean)" "$(pick "$4" logit_mae)" \
        "$(pick "$4" logit_max_abs_err)" "$(pick "$4" top1_agree)" "$(pick "$4" positions)" "$(pick "$4" greedy_prefix_mean)" \
        "$(pick "$(pairs 2)" logit_sd)" "$(pick "$4" rms_err_per_ref_sd)" |
        awk '{ printf "%-5s %-5s %-8s %10.3g %8.4f %8.3f %7s %7.2f %7.3f %7.3f\n", $1, $2, $3, $4, $5, $6, $7 "/" $8, $9, $10, $11 }'
}

echo "checkpoints: qp-gen-checkpoint --preset SIZE --seed 1 --init $init"
printf '%-5s %-5s %-8s %10s %8s %8s %7s %7s %7s %7s\n' size fmt share "mean KL" MAE "max err" top-1 prefix "ref SD" "RMS/SD"
for size in $sizes; do
    ck=$work/$size-$init
    ref_note="reference of $size: cached"
    bench_checkpoint "$ck" --preset "$size" --seed 1 --init "$init"
    case $size in 0.6b|1.7b|tiny) split=${QP_SPLIT:-1} ;; *) split=${QP_SPLIT:-0} ;; esac
    for fmt in $formats; do
        qpk=$work/$size-$fmt.qpk
        "$bin/qpack" pack "$ck" -o "$qpk" --format "$fmt" --quiet
        row "$size" "$fmt" total "$(evaluate "$ck" "$qpk")"
        r=$(pairs 2)
        [ "$(pick "$r" cached)" = true ] ||
            ref_note="reference of $size: $(pick "$r" prompt_ms_per_token) ms/position, peak RSS $(pick "$r" peak_rss_bytes | awk '{ printf "%.1f GB", $1 / 1e9 }')"
        deq=$work/$size-$fmt-deq
        if [ "${QP_KERNELS:-1}" = 1 ] || [ "$split" = 1 ]; then
            mkdir -p "$deq"
            "$build/devtools/qp-dequant" "$qpk" "$deq/model.safetensors"
            cp "$ck/config.json" "$deq/"
        fi
        [ "${QP_KERNELS:-1}" = 0 ] || row "$size" "$fmt" kernels "$(evaluate "$deq" "$qpk")"
        if [ "$split" = 1 ]; then
            "$bin/qpack" pack "$deq" -o "$deq.qpk" --quiet
            row "$size" "$fmt" weights "$(evaluate "$ck" "$deq.qpk" --backend emu)"
            rm -f "$deq.qpk"
        fi
        rm -rf "$deq" "$qpk"
    done
    echo "  $ref_note"
    [ "${QP_KEEP:-0}" = 1 ] || rm -rf "$ck"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_recorded
