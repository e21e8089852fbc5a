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
bench_recorded
