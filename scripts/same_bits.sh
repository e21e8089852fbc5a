#!/bin/sh
# same_bits.sh BIN_DIR [OUT_FILE] - a check for refactors, not a test: the
# logits of the real-shape Qwen3-0.6B random checkpoint (plain and --stress,
# generated and packed once into ${QP_BENCH_DIR:-/tmp/qp-bench}) in every
# format, on bpf (resident and --stream) and emu, written as one sha256 line
# per run. Run it with the build before a change and the build after, then
# diff the two files: any line that differs is a changed bit.
#   prompt lengths 1 (the one-position kernels), 17 and 37 (blocks of 16 and
#   a tail): every prompt position's logits (--dump-logits-all);
#   8 greedy tokens after the 37-token prompt, and the same with --lookup 8.
# QP_FORMATS (default "q24 int8 int4 int4-pure") picks the plain formats;
# the stress checkpoint runs int4 and q24.
set -eu
bin=${1:?usage: same_bits.sh BIN_DIR [OUT_FILE]}
out=${2:-/dev/stdout}
work=${QP_BENCH_DIR:-/tmp/qp-bench}
formats=${QP_FORMATS:-q24 int8 int4 int4-pure}
mkdir -p "$work"
tmp=$(mktemp -d "$work/same_bits.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# ids N: N seeded token ids
ids() { awk -v n="$1" 'BEGIN { srand(7); for (i = 0; i < n; i++) printf "%d ", 1000 + int(rand() * 149000) }'; }

# container SRC FORMAT: packs SRC once per format (by the build under test,
# so a packer change shows too), prints the path
container() {
    f=$tmp/$(basename "$1")-$2.qpk
    [ -f "$f" ] || "$bin/qpack" pack "$1" -o "$f" --format "$2" --quiet
    echo "$f"
}

# runs NAME MODEL ARGS...: the logits and greedy ids of one configuration
runs() {
    name=$1 model=$2
    shift 2
    for n in 1 17 37; do
        "$bin/qrun" -m "$model" --no-verify -c 256 "$@" --ids "$(ids $n)" -n 0 --dump-logits-all "$tmp/l.f32" >/dev/null
        echo "$(sha256sum <"$tmp/l.f32" | cut -c1-64) $name prompt $n"
    done
    echo "$("$bin/qrun" -m "$model" --no-verify -c 256 "$@" --ids "$(ids 37)" -n 8 --temp 0 --print-ids | sha256sum | cut -c1-64) $name greedy 8"
    echo "$("$bin/qrun" -m "$model" --no-verify -c 256 "$@" --ids "$(ids 37)" -n 8 --lookup 8 --print-ids | sha256sum | cut -c1-64) $name lookup 8"
}

plain=$work/0.6b-plain
stress=$work/0.6b-stress
[ -f "$plain/config.json" ] || "$bin/qp-gen-checkpoint" "$plain" --preset 0.6b --seed 1 >/dev/null
[ -f "$stress/config.json" ] || "$bin/qp-gen-checkpoint" "$stress" --preset 0.6b --seed 2 --stress >/dev/null

{
    for fmt in $formats; do
        m=$(container "$plain" "$fmt")
        runs "plain-$fmt-bpf" "$m"
        runs "plain-$fmt-stream" "$m" --stream
        runs "plain-$fmt-emu" "$m" --backend emu
        rm -f "$m"
    done
    for fmt in int4 q24; do
        m=$(container "$stress" "$fmt")
        runs "stress-$fmt-bpf" "$m"
        runs "stress-$fmt-emu" "$m" --backend emu
        rm -f "$m"
    done
} >"$out"
