#!/bin/bash
# compare_llamacpp.sh LLAMA_CPP_DIR - a measurement, not a test: the models
# with learned weights (tests/data/tiny-learned, vocabulary 2048, and
# tests/data/tiny-learned-16k, vocabulary 16384) quantised by llama.cpp and
# by qpack, each against qpack's float64 reference on the same tokens.
#
# LLAMA_CPP_DIR is a llama.cpp checkout at a release tag, built outside this
# tree (cmake -B build; cmake --build build --target llama llama-quantize);
# nothing of it is copied here and CI never needs it. Per model:
#
#   - eval.txt's tokens (qrun tokenize), 6 windows of 128 from the start to
#     the end, evenly spaced (their starts in llamacpp.json): 768 positions,
#     each window from an empty cache;
#   - the checkpoint as a GGUF (devtools' qp-gguf-write, llama.cpp's layout)
#     in F32 and BF16; llama-quantize makes Q8_0, Q4_0 and Q4_K_M of the BF16;
#   - llama.cpp's float32 logits of the windows from each (scripts/
#     llamacpp_logits.c, built here against LLAMA_CPP_DIR's libllama: f32 KV
#     cache, flash attention off); F32 is the check that the GGUF, the
#     driver and the windows are right: its error is float32's alone;
#   - qpack's int8, int4 and int4-pure, each also with --calibrate calib.txt;
#   - qeval --ref model/ over the containers and logits:FILE of llama.cpp's,
#     on --prompt-ids of the windows.
#
# Prints a table per model, which replaces its section of docs/BENCHMARKS.md,
# and writes the figures to tests/data/MODEL/llamacpp.json for the tests
# that hold qpack to llama.cpp's (QP_RECORD=0: neither). QP_BUILD (default
# build/) holds qpack's binaries; QP_BACKEND (default bpf as root, else emu)
# is the containers' backend; QP_MODELS (default "tiny-learned
# tiny-learned-16k") the folders of tests/data measured. Takes ~3 minutes
# on 2 cores. Needs jq, bc and a C compiler.
set -euo pipefail
[ $# = 1 ] || { echo "usage: compare_llamacpp.sh LLAMA_CPP_DIR" >&2; exit 2; }
llama=$(cd "$1" && pwd)
shift
. "$(dirname "$0")/bench_lib.sh"
build=${QP_BUILD:-$root/build}
backend=${QP_BACKEND:-$([ "$(id -u)" = 0 ] && echo bpf || echo emu)}
WINDOWS=6 POSITIONS=128

die() { echo "compare_llamacpp.sh: $*" >&2; exit 1; }
for f in include/llama.h build/bin/llama-quantize build/bin/libllama.so; do
    [ -e "$llama/$f" ] || die "$llama/$f is missing (build llama.cpp there: cmake -B build &&" \
        "cmake --build build --target llama llama-quantize)"
done
for f in bin/qpack bin/qeval bin/qrun devtools/qp-gguf-write; do
    [ -x "$build/$f" ] || die "$build/$f is missing (./scripts/build.sh)"
done
command -v jq >/dev/null || die "jq is not installed"
version=$(git -C "$llama" describe --tags --always 2>/dev/null || echo unknown)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/llamacpp_logits" "$root/scripts/llamacpp_logits.c" -I"$llama/include" -I"$llama/ggml/include" \
    -L"$llama/build/bin" -lllama -Wl,-rpath,"$llama/build/bin" || die "cannot build llamacpp_logits.c"

# windows DATA OUT: WINDOWS lines of POSITIONS token ids of DATA/eval.txt
# (their first tokens' offsets into the text's tokens in OUT.starts)
windows() {
    "$build/bin/qrun" tokenize --tokenizer "$1/model/tokenizer.json" <"$1/eval.txt" | tr -s ' \n' '\n' |
        grep . >"$work/ids" || die "qrun tokenize $1/eval.txt"
    local n k s
    n=$(wc -l <"$work/ids")
    for k in $(seq 0 $((WINDOWS - 1))); do
        s=$((k * (n - POSITIONS) / (WINDOWS - 1)))
        sed -n "$((s + 1)),$((s + POSITIONS))p" "$work/ids" | paste -sd' ' >>"$2"
        echo "$s" >>"$2.starts"
    done
}

# measure NAME: the comparison of tests/data/NAME, its JSON in $work/NAME.json
measure() {
    local data=$root/tests/data/$1 w=$work/$1 t args=()
    mkdir -p "$w"
    windows "$data" "$w/windows.txt"
    "$build/devtools/qp-gguf-write" "$data/model" "$w/F32.gguf" --type F32
    "$build/devtools/qp-gguf-write" "$data/model" "$w/BF16.gguf" --type BF16
    for t in Q8_0 Q4_0 Q4_K_M; do
        "$llama/build/bin/llama-quantize" "$w/BF16.gguf" "$w/$t.gguf" $t >"$w/quantize.log" 2>&1 ||
            die "llama-quantize $t: $(tail -3 "$w/quantize.log")"
    done
    for t in F32 Q8_0 Q4_0 Q4_K_M; do
        "$work/llamacpp_logits" "$w/$t.gguf" "$w/windows.txt" "$w/$t.f32"
        args+=("logits:$w/$t.f32")
    done
    for f in int8 int4 int4-pure; do
        "$build/bin/qpack" pack "$data/model" -o "$w/$f.qpk" --format $f --quiet
        "$build/bin/qpack" pack "$data/model" -o "$w/$f-cal.qpk" --format $f --calibrate "$data/calib.txt" --quiet
        args+=("$w/$f.qpk" "$w/$f-cal.qpk")
    done
    "$build/bin/qeval" --ref "$data/model" "${args[@]}" --prompt-ids "$w/windows.txt" --backend "$backend" \
        --json -q >"$w/qeval.json"
    # file sizes: the GGUFs' from here, the containers' from qeval
    jq --arg name "$1" --arg version "$version" --argjson windows $WINDOWS --argjson positions $POSITIONS \
        --argjson starts "$(jq -s -c . "$w/windows.txt.starts")" \
        --argjson sizes "$(for t in F32 Q8_0 Q4_0 Q4_K_M; do
            printf '{"%s": %s}\n' "$t" "$(stat -c %s "$w/$t.gguf")"; done | jq -s add)" '
        def name_of: if .backend == "file" then "llama.cpp " + (.path | sub(".*/"; "") | sub("\\.f32$"; ""))
                   else "qpack " + (.path | sub(".*/"; "") | sub("\\.qpk$"; "") | sub("-cal$"; ", calibrated"))
                   end;
        {what: "scripts/compare_llamacpp.sh: llama.cpp and qpack against qeval'"'"'s float64 reference",
         model: $name, llama_cpp: $version, windows: $windows, positions_per_window: $positions,
         window_starts: $starts, positions: .positions,
         models: [.models[] | {name: name_of,
                               file_bytes: (if .backend == "file"
                                            then $sizes[.path | sub(".*/"; "") | sub("\\.f32$"; "")]
                                            else .file_bytes end),
                               logit_max_abs_err, logit_mae, kl_mean, top1_agree}]}' \
        "$w/qeval.json" >"$work/$1.json"
}

print_table() {
    jq -r '"\(.model): \(.windows) windows x \(.positions_per_window) positions of eval.txt, llama.cpp \(.llama_cpp)"' "$1"
    echo
    printf '| %s | %s | %s | %s | %s | %s |\n|---|---|---|---|---|---|\n' "" "file MB" "max err" MAE "mean KL" \
        "top-1 / $(jq .positions "$1")"
    jq -r '.models[] | [.name, .file_bytes, .logit_max_abs_err, .logit_mae, .kl_mean, .top1_agree] | @tsv' "$1" |
        while IFS=$'\t' read -r name bytes mx mae kl top1; do
            printf '| %s | %.2f | %.3g | %.3g | %.2e | %s |\n' "$name" "$(echo "$bytes / 1000000" | bc -l)" \
                "$mx" "$mae" "$kl" "$top1"
        done
    echo
}

read -r -a models <<<"${QP_MODELS:-tiny-learned tiny-learned-16k}"
for m in "${models[@]}"; do
    echo "measuring $m ..." >&2
    measure "$m"
done
bench_record compare_llamacpp "$llama"
for m in "${models[@]}"; do
    print_table "$work/$m.json"
done
echo "F32: the GGUF, the windows and the driver checked (llama.cpp's float32 error alone)."
echo "qpack ..., calibrated: qpack pack --calibrate calib.txt (the model's own calibration text)."
bench_recorded
[ "${QP_RECORD:-1}" = 1 ] || exit 0
for m in "${models[@]}"; do
    cp "$work/$m.json" "$root/tests/data/$m/llamacpp.json"
done
