#!/bin/sh
# bench_qrun.sh [BUILD_DIR] - a benchmark, not a test: runs qrun on the
# real-shape Qwen3-0.6B random checkpoint (generated and packed once into
# ${QP_BENCH_DIR:-/tmp/qp-bench}) several times and reports the medians of
# start-up time, prompt time per token, decode time per token, bpf calls per
# token, the longest single kernel invocation, BPF map bytes, KV bytes per
# position and peak RSS. Issue targets: decode <= 0.30 s/token, every
# invocation <= 10 ms, start-up <= 3 s.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
work=${QP_BENCH_DIR:-/tmp/qp-bench}
runs=${QP_RUNS:-5}
new=${QP_NEW:-16}
src=$work/0.6b-plain
mkdir -p "$work"
[ -f "$src/config.json" ] || "$build/scripts/qp-gen-checkpoint" "$src" --preset 0.6b --seed 1 >/dev/null
[ -f "$src.qpk" ] || "$build/packer/qpack" pack "$src" -o "$src.qpk" --quiet
out=$work/bench_qrun.txt
: > "$out"
i=0
while [ "$i" -lt "$runs" ]; do
    "$build/runtime/qrun" -m "$src.qpk" --ids "9707 11 1879 0 576 1207 374 220" -n "$new" \
        --print-ids --stats 2>>"$out" >/dev/null
    i=$((i + 1))
done
# qrun --stats lines: "load L ms, prompt P tokens in T ms (X ms/token)",
# "generated G tokens, D ms/token, C bpf calls/token, longest call M ms (K)"
awk -v runs="$runs" '
    function median(a, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /load/ { n++; for (k = 1; k <= NF; k++) { if ($k == "load") load[n] = $(k + 1); if ($k == "(" || $k ~ /^\(/) {} }
             match($0, /\(([0-9.]+) ms\/token\)/, m); prompt[n] = m[1] }
    /generated/ { match($0, /, ([0-9.]+) ms\/token/, m); dec[n] = m[1]
                  match($0, /([0-9.]+) bpf calls/, m); calls[n] = m[1]
                  match($0, /longest call ([0-9.]+) ms/, m); longest[n] = m[1] }
    /BPF maps/ { maps = $0 }
    END {
        printf "qrun, Qwen3-0.6B shape, q24, %d runs (medians):\n", n
        printf "  start-up          %8.0f ms   (target <= 3000)\n", median(load, n)
        printf "  prompt            %8.1f ms/token\n", median(prompt, n)
        printf "  decode            %8.1f ms/token (target <= 300)\n", median(dec, n)
        printf "  bpf calls         %8.0f per token\n", median(calls, n)
        printf "  longest call      %8.2f ms   (target <= 10)\n", median(longest, n)
        sub(/^qrun: /, "", maps); printf "  %s\n", maps
    }' "$out"
