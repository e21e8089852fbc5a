#!/bin/sh
# accuracy_kv.sh [BUILD_DIR] - a measurement, not a test: what a narrower
# KV cache costs before any other approximation. The float64 reference
# runs with its K and V cache rounded to K and V bits a head vector at a
# time (qp-accuracy --kv-bits: a block float per vector, K scaled by the
# power of two of its k_norm gain) against itself exact, on the learned
# tiny model and the real-shape Qwen3-0.6B random checkpoints, plain and --stress (cached in ${QP_BENCH_DIR:-/tmp/qp-bench}):
# mean and max KL, max logit error, top-1 agreement, for the 16-bit cache
# the kernels keep and an 8-bit one. QP_PROMPTS x QP_POSITIONS positions
# (default 4 x 16 at 0.6B, where the float64 reference is slow; 8 x 64 on
# the tiny model). The stress checkpoint shows what per-vector scales
# cannot hold: its large channels.
# Then the kernels themselves (qrun --kv-cache): qeval of each model's q24
# container with the int16 and with the 8-bit cache against the float64
# reference, on qeval's random prompts (4 x QP_QEVAL_POSITIONS, default 32,
# and 16 greedy tokens each): mean KL, max logit error, top-1 agreement,
# and the KL the 8-bit cache adds (the target: at most 1e-3).
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record accuracy_kv "$@"
acc=$build/devtools/qp-accuracy
for bits in 16:16 8:8; do
    echo "== tiny-learned, K:V bits $bits"
    "$acc" --ref "$root/tests/data/tiny-learned/model" --kv-bits "$bits" --prompts 8 --positions 64 | sed 's/^/  /'
    for kind in plain stress; do
        src=$(bench_06b "$kind")
        echo "== 0.6B $kind, K:V bits $bits"
        "$acc" --ref "$src" --kv-bits "$bits" --prompts "${QP_PROMPTS:-4}" --positions "${QP_POSITIONS:-16}" | sed 's/^/  /'
    done
done
echo "== the kernels: q24 containers, qeval --kv-cache int16 and int8 against the float64 reference"
printf '  %-14s %-22s %-22s %-10s %s\n' model "int16: KL, max err" "int8: KL, max err" "KL added" "top-1 int16, int8"
for kind in tiny-learned plain stress; do
    if [ "$kind" = tiny-learned ]; then
        src=$root/tests/data/tiny-learned/model q24=$work/tiny-learned-q24.qpk
    else
        src=$(bench_06b "$kind") q24=$src.qpk
    fi
    [ -f "$q24" ] || "$build/bin/qpack" pack "$src" -o "$q24" --quiet
    for kv in int16 int8; do
        "$build/bin/qeval" --ref "$src" "$q24" --kv-cache "$kv" --positions "${QP_QEVAL_POSITIONS:-32}" \
            --ref-cache "$work" --quiet --json >"$work/accuracy_kv_$kv.json"
    done
    a=$(jq -r '.models[0] | "\(.kl_mean) \(.logit_max_abs_err) \(.top1_agree) \(.positions)"' "$work/accuracy_kv_int16.json")
    b=$(jq -r '.models[0] | "\(.kl_mean) \(.logit_max_abs_err) \(.top1_agree) \(.positions)"' "$work/accuracy_kv_int8.json")
    # shellcheck disable=SC2086
    echo "$kind $a $b" | awk '{ printf "  %-14s %-22s %-22s %-10s %d/%d, %d/%d\n", $1, sprintf("%.3g, %.3g", $2, $3),
                                sprintf("%.3g, %.3g", $6, $7), sprintf("%.3g", $6 - $2), $4, $5, $8, $9 }'
done
bench_recorded
