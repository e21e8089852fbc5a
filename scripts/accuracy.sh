#!/bin/sh
# accuracy.sh [BUILD_DIR] - a measurement, not a test: generates real-shape
# Qwen3-0.6B random checkpoints (plain and --stress, cached in
# ${QP_BENCH_DIR:-/tmp/qp-bench}), packs them, and compares qrun's BPF
# forward pass with the float64 reference at every position of several
# seeded prompts (QP_PROMPTS x QP_POSITIONS, default 8 x 32: on a stress
# checkpoint one near-tie position can carry most of a 64-position mean).
# Targets: plain max logit error <= 5e-4; stress mean KL <= 1e-3 and
# max logit error <= 0.05.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record accuracy "$@"
prompts=${QP_PROMPTS:-8}
positions=${QP_POSITIONS:-32}
for kind in plain stress; do
    src=$(bench_06b "$kind")
    [ -f "$src.qpk" ] || "$build/bin/qpack" pack "$src" -o "$src.qpk" --quiet
    "$build/devtools/qp-accuracy" --ref "$src" "$src.qpk" --prompts "$prompts" --positions "$positions"
done
bench_recorded
