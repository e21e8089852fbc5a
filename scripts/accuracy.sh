#!/bin/sh
# accuracy.sh [BUILD_DIR] - a measurement, not a test: generates real-shape
# Qwen3-0.6B random checkpoints (plain and --stress, cached in
# ${QP_BENCH_DIR:-/tmp/qp-bench}), packs them, and compares qrun's BPF
# forward pass with the float64 reference at every position of several
# seeded prompts (QP_PROMPTS x QP_POSITIONS, default 8 x 32: on a stress
# checkpoint one near-tie position can carry most of a 64-position mean).
# Issue targets: plain max logit error <= 5e-4; stress mean KL <= 1e-3 and
# max logit error <= 0.05.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/bench_record.sh"
bench_record accuracy "$@"
build=${1:-$root/build}
work=${QP_BENCH_DIR:-/tmp/qp-bench}
prompts=${QP_PROMPTS:-8}
positions=${QP_POSITIONS:-32}
mkdir -p "$work"
for kind in plain stress; do
    src=$work/0.6b-$kind
    flags=""
    [ "$kind" = stress ] && flags="--stress"
    if [ ! -f "$src/config.json" ]; then
        # shellcheck disable=SC2086
        "$build/bin/qp-gen-checkpoint" "$src" --preset 0.6b --seed 1 $flags >/dev/null
    fi
    [ -f "$src.qpk" ] || "$build/bin/qpack" pack "$src" -o "$src.qpk" --quiet
    "$build/devtools/qp-accuracy" --ref "$src" "$src.qpk" --prompts "$prompts" --positions "$positions"
done
bench_recorded
