#!/bin/sh
# bench_formats.sh [BUILD_DIR] - a measurement, not a test: packs the
# real-shape Qwen3-0.6B random checkpoints (plain and --stress, cached in
# ${QP_BENCH_DIR:-/tmp/qp-bench}) in every format qpack has, and prints
# qeval's comparison with the float64 reference for each: file size, bits
# per weight, KL, top-1 agreement, decode time per token. Packing int8 and
# int4 with the searched quantiser takes minutes; the containers are cached
# too (repacked when qpack is newer). QP_FORMATS picks formats (default:
# q24 int8 int8-rtn int4 int4-rtn int4-pure int4-pure-rtn).
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_formats "$@"
positions=${QP_POSITIONS:-16}
for kind in plain stress; do
    src=$(bench_06b "$kind")
    set --
    for fmt in ${QP_FORMATS:-q24 int8 int8-rtn int4 int4-rtn int4-pure int4-pure-rtn}; do
        out=$src-$fmt.qpk
        [ "$fmt" = q24 ] && [ -f "$src.qpk" ] && out=$src.qpk
        case $fmt in
        *-rtn) args="--format ${fmt%-rtn} --quant rtn" ;;
        *) args="--format $fmt" ;;
        esac
        # a container older than the packer may hold an older layout: repack
        # shellcheck disable=SC2086
        [ "$out" -nt "$build/bin/qpack" ] || "$build/bin/qpack" pack "$src" -o "$out" $args --quiet
        set -- "$@" "$out"
    done
    echo "== Qwen3-0.6B shape, $kind random checkpoint"
    "$build/bin/qeval" --ref "$src" "$@" --positions "$positions" --seed 1 2>&1 |
        sed -n '1,40p'
done
bench_recorded
