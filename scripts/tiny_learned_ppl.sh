#!/bin/bash
# tiny_learned_ppl.sh [WINDOWS [FORMAT...]] - perplexity on held-out text of the
# committed model with learned weights (tests/data/tiny-learned), for the
# float64 reference and each FORMAT of `qpack pack` (default: q24 int8 int4).
# A FORMAT may also be LABEL='QPACK PACK OPTIONS', @DATA@ standing for the
# data folder, e.g. int4-cal='--format int4 --calibrate @DATA@/calib.txt'.
#
# qeval --text scores the first 256 tokens of a text (the model's positions),
# so eval.txt is cut at paragraphs into windows of at least 256 tokens and
# WINDOWS of them (default 24), evenly spaced, are scored one qeval run each;
# the first token of a window is context only. A window's first paragraph
# (up to 400 bytes, one line) is also qeval's prompt, for KL and top-1
# against the reference. Prints per model: tokens scored, NLL per token,
# perplexity, mean KL, top-1 agreement. A measurement, not a test: it takes
# ~10 s per window on a quiet machine.
#
# QP_BUILD (default build/) holds the binaries; QP_BACKEND (default bpf as
# root, else emu) is the containers' backend; QP_TINY_LEARNED another folder
# laid out like tests/data/tiny-learned (model/, eval.txt).
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record tiny_learned_ppl "$@"
build=${QP_BUILD:-$root/build}
data=${QP_TINY_LEARNED:-$root/tests/data/tiny-learned}
windows=${1:-24}
[ $# -gt 0 ] && shift
formats=("$@")
[ ${#formats[@]} -gt 0 ] || formats=(q24 int8 int4)
backend=${QP_BACKEND:-$([ "$(id -u)" = 0 ] && echo bpf || echo emu)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

models=()
labels=()
for i in "${!formats[@]}"; do
    f=${formats[$i]}
    if [[ $f == *=* ]]; then
        label=${f%%=*}
        opts=${f#*=}
        read -r -a args <<<"${opts//@DATA@/$data}"
    else
        label=$f
        args=(--format "$f")
    fi
    "$build/bin/qpack" pack "$data/model" -o "$work/m$i.qpk" "${args[@]}" --quiet
    models+=("$work/m$i.qpk")
    labels+=("$label")
done

# paragraphs (blank-line separated) in groups of >= 1200 bytes (~350 tokens at
# 3.5 bytes a token): window files w.1, w.2, ...
awk -v dir="$work" 'BEGIN { RS = ""; n = 0 }
    { text = text (text == "" ? "" : "\n\n") $0 }
    length(text) >= 1200 { printf "%s\n", text > (dir "/w." ++n); close(dir "/w." n); text = "" }' \
    "$data/eval.txt"
total=$(find "$work" -name 'w.*' | wc -l)
[ "$windows" -le "$total" ] || windows=$total
echo "eval.txt: $total windows; scoring $windows with qeval ($backend): ${labels[*]}" >&2

for k in $(seq 0 $((windows - 1))); do
    w=$work/w.$((k * total / windows + 1))
    head -c 400 "$w" | head -n 1 >"$work/prompt"
    "$build/bin/qeval" --ref "$data/model" "${models[@]}" --prompts "$work/prompt" --text "$w" \
        --backend "$backend" --json >"$work/r.$k.json" 2>/dev/null
    printf '.' >&2
done
echo >&2

jq -s -r '
  def score(f): {n: (map(f | .text_tokens) | add), nll: ((map(f | .text_nll * .text_tokens) | add)
                                                        / (map(f | .text_tokens) | add))};
  def r(k): . * k | round / k;
  ["model", "tokens", "NLL/token", "perplexity", "mean KL", "top-1 %"],
  (score(.reference) | ["reference", .n, (.nll | r(1e4)), (.nll | exp | r(1e3)), "-", "-"]),
  (. as $runs | range(.[0].models | length) as $i
   | score(.models[$i]) + {kl: (($runs | map(.models[$i].kl_mean * .models[$i].positions) | add)
                                / ($runs | map(.models[$i].positions) | add)),
                           top1: (100 * ($runs | map(.models[$i].top1_agree) | add)
                                  / ($runs | map(.models[$i].positions) | add))}
   | [$i, .n, (.nll | r(1e4)), (.nll | exp | r(1e3)), (.kl | r(1e7)), (.top1 | r(10))])
  | @tsv' "$work"/r.*.json |
    awk -F'\t' -v names="${labels[*]}" 'BEGIN { split(names, f, " ") }
        NR > 2 { $1 = f[$1 + 1] } { printf "%-12s %8s %10s %11s %10s %8s\n", $1, $2, $3, $4, $5, $6 }'
bench_recorded
