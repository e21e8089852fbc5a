#!/bin/bash
# bench_int4_preset.sh [BUILD_DIR] - a measurement, not a test: how close
# `qpack pack --format int4` comes to the float64 reference, beside the
# preset it replaced, on random Qwen3-0.6B-shape checkpoints of several
# seeds (QP_SEEDS, default "1 2 3"; cached in ${QP_BENCH_DIR:-/tmp/qp-int4}).
# qeval's default prompts: 4 seeded random sequences of 16 tokens, 64
# positions per model, as in the llama.cpp comparison of docs/BENCHMARKS.md,
# whose Q4_K_M row is printed last for reference.
#
#   int4        the preset (embedding int6, every v_proj and outer
#               down_proj int8, both in groups of 64; the rest int4 with
#               parameters in super-blocks)
#   int4-2611   the rule of 2026-11, through --keep: embedding int8, v_proj
#               int4 between the outer eighths (28 layers: 0-2 and 25-27)
#   int4-d8     the preset with down_proj int8 one layer further in on each
#               side (3 and 24): 3.3 MB more (QP_VARIANTS adds it)
#
# Takes ~2 min per seed on 2 quiet cores (qeval's float64 reference is
# cached in the work folder). Needs jq.
set -euo pipefail
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_int4_preset "$@"
work=${QP_BENCH_DIR:-/tmp/qp-int4}
seeds=${QP_SEEDS:-1 2 3}
variants=${QP_VARIANTS:-int4 int4-2611}
mkdir -p "$work"

variant_args() {
    case $1 in
    int4) echo "--format int4" ;;
    int4-2611) echo "--format int4 --keep model.embed_tokens.weight=int8" \
        "--keep model.layers.*.self_attn.v_proj.weight=int4" \
        "--keep model.layers.[0-2].self_attn.v_proj.weight=int8" \
        "--keep model.layers.2[5-7].self_attn.v_proj.weight=int8" ;;
    int4-d8) echo "--format int4 --keep model.layers.3.mlp.down_proj.weight=int8" \
        "--keep model.layers.24.mlp.down_proj.weight=int8" ;;
    esac
}

printf '%-5s %-10s %9s %9s %8s %8s %6s\n' seed variant "file MB" "mean KL" MAE "max err" top-1
for seed in $seeds; do
    src=$work/0.6b-s$seed
    bench_checkpoint "$src" --preset 0.6b --seed "$seed"
    set --
    for v in $variants; do
        out=$src-$v.qpk
        # shellcheck disable=SC2046
        [ "$out" -nt "$build/bin/qpack" ] || "$build/bin/qpack" pack "$src" -o "$out" $(variant_args $v) --quiet
        set -- "$@" "$out"
    done
    "$build/bin/qeval" --ref "$src" "$@" --positions 16 --seed 1 --ref-cache "$work/cache" --json -q \
        >"$work/s$seed.json"
    jq -r --arg seed "$seed" '.models[] | [$seed, (.path | sub(".*-s[0-9]+-"; "") | sub("\\.qpk$"; "")),
        (.file_bytes / 1e6), .kl_mean, .logit_mae, .logit_max_abs_err, .top1_agree] |
        @tsv' "$work/s$seed.json" |
        while IFS=$'\t' read -r s v mb kl mae mx t1; do
            printf '%-5s %-10s %9.1f %9.5f %8.4f %8.3f %3s/64\n' "$s" "$v" "$mb" "$kl" "$mae" "$mx" "$t1"
        done
done
printf '%-5s %-10s %9.1f %9.5f %8.4f %8.3f %3s/64\n' "-" "Q4_K_M" 397 0.0132 0.129 0.87 31
echo "(Q4_K_M: llama.cpp b10573 on an independently generated checkpoint of the same distribution, 64 positions; docs/BENCHMARKS.md)"
bench_recorded
