#!/bin/sh
# bench_scaling.sh [BUILD_DIR] - a benchmark, not a test: every dense Qwen3
# size that fits this machine, with random weights from qp-gen-checkpoint's
# presets, packed and run on bpf. One row per size and format:
#   pack s, pack MB   qpack pack's wall time and peak RSS (/usr/bin/time)
#   file MB           the container
#   start ms          qrun's start-up (checksums, maps and programs, weights)
#   prompt, decode    ms/token of a 64-token prompt and of 16 generated tokens
#   maps MB, kv kB    BPF map bytes, KV cache bytes per position (qrun --stats)
#   GMAC              multiply-adds per token (all matrices and the vocabulary
#                     projection, from config.json)
#   ms/GMAC           decode ms/token per GMAC: flat across sizes when the
#                     kernels scale with the model
#   long ms, >10ms    the longest BPF call (bpf_prog_test_run) of a run,
#                     and how many of its calls took over 10 ms: the
#                     kernels bound their work per call to stay under it,
#                     so a few calls over it among hundreds of thousands
#                     are the call's thread losing its core, not its work
#   prog ms, >10      the same for the programs alone, as the kernel clocks
#                     them (bpf_prog_test_run's duration, program start to
#                     end): without the system call around each run
#   bpf=emu           every logit of the 64 prompt positions, BPF against the
#                     host twin (qrun --backend emu), compared byte for byte:
#                     "same" or "DIFFER" (QP_EMU=0 skips it)
# Medians of QP_RUNS runs (default 3) for the qrun figures; one pack each.
# QP_SIZES (default "0.6b 1.7b 4b 8b 14b") and QP_FORMATS (default "q24
# int4"; q24 only up to 4b, whose 16 GB of maps is this machine's limit)
# choose the rows. QP_STREAM=1 runs qrun --stream (weights read from the
# file each step, not held in maps) and lets q24 run at 8b and 14b too. Checkpoints and containers go to
# ${QP_BENCH_DIR:-/tmp/qp-bench}/scaling and are deleted after their rows
# unless QP_KEEP=1 (8B's checkpoint is 16 GB, 14B's 30 GB). A size the
# machine cannot load is reported with qrun's one-line reason. QP_SIZES=32b
# is not in the default: its checkpoint is 66 GB and its int4 container
# 20 GB (a disk of 80 GB holds both only compressed: docs/BENCHMARKS.md
# says how), and on 24 GiB its int4 maps (25.9 GB) need QP_STREAM=1
# (int4-pure with --group 128 runs resident: 18.5 GB).
# Check the load average first: another busy process makes every figure
# several times slower.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record bench_scaling "$@"
bin=$build/bin
work=${QP_BENCH_DIR:-/tmp/qp-bench}/scaling
runs=${QP_RUNS:-3}
sizes=${QP_SIZES:-"0.6b 1.7b 4b 8b 14b"}
formats=${QP_FORMATS:-"q24 int4"}
stream=
[ "${QP_STREAM:-0}" = 0 ] || stream=--stream
mkdir -p "$work"
log=$(mktemp "$work/log.XXXXXX")
trap 'rm -f "$log" "$log.t" "$log.e"' EXIT INT TERM

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "-" }'; }
# field REGEX: the median of one sed capture over the runs' stats lines
field() { sed -n "s/$1/\1/p" "$log" | median; }
# ids N VOCAB: N seeded random token ids below VOCAB
ids() { awk -v n="$1" -v v="$2" 'BEGIN { srand(5); for (i = 0; i < n; i++) printf "%d ", int(rand() * v) }'; }

# multiply-adds per token: every layer's projections and the vocabulary's
macs() {
    jq -r '(.num_attention_heads * .head_dim) as $q | (.num_key_value_heads * .head_dim) as $kv |
           .num_hidden_layers * (.hidden_size * ($q + 2 * $kv) + $q * .hidden_size
                                 + 3 * .hidden_size * .intermediate_size)
           + .vocab_size * .hidden_size' "$1/config.json"
}

# bpf_equals_emu QPK VOCAB: "same" when both backends give every logit of
# the 64-token prompt bit for bit, "DIFFER" otherwise, "-" when skipped
bpf_equals_emu() {
    [ "${QP_EMU:-1}" = 1 ] || { echo -; return; }
    for b in bpf emu; do
        "$bin/qrun" -m "$1" --backend $b --ids "$(ids 64 "$2")" -n 1 -c 256 --print-ids \
            --dump-logits-all "$work/logits.$b" >/dev/null 2>"$log.e" ||
            { echo "$b failed: $(tail -1 "$log.e")"; return; }
    done
    cmp -s "$work/logits.bpf" "$work/logits.emu" && echo same || echo DIFFER
    rm -f "$work/logits.bpf" "$work/logits.emu"
}

echo "bench_scaling.sh: $runs runs per row (medians)${stream:+, qrun $stream}, load before: $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
printf '%-5s %-5s %7s %7s %8s %8s %7s %7s %7s %6s %7s %5s %8s %7s %6s %8s %8s\n' size fmt "pack s" "pack MB" "file MB" \
       "start ms" prompt decode "long ms" ">10ms" "prog ms" ">10" "maps MB" "kv kB" GMAC ms/GMAC bpf=emu
for size in $sizes; do
    ck=$work/$size
    bench_checkpoint "$ck" --preset "$size" --seed 1
    vocab=$(jq .vocab_size "$ck/config.json")
    gmac=$(awk -v m="$(macs "$ck")" 'BEGIN { printf "%.4g", m / 1e9 }')
    for fmt in $formats; do
        case ${QP_STREAM:-0}:$fmt:$size in 0:q24:8b | 0:q24:14b) continue ;; esac
        qpk=$work/$size-$fmt.qpk
        /usr/bin/time -f "%e %M" -o "$log.t" "$bin/qpack" pack "$ck" -o "$qpk" --format "$fmt" --quiet \
            >/dev/null
        pack_s=$(cut -d' ' -f1 "$log.t")
        pack_mb=$(awk '{ printf "%.0f", $2 / 1000 }' "$log.t")
        file_mb=$(stat -c %s "$qpk" | awk '{ printf "%.0f", $1 / 1e6 }')
        : >"$log"
        reason=
        for _ in $(seq "$runs"); do
            if ! "$bin/qrun" -m "$qpk" $stream --ids "$(ids 64 "$vocab")" -n 16 --temp 0 -c 256 --print-ids --stats >/dev/null 2>>"$log"; then
                reason=$(grep -v '^qrun: \(backend\|generated\|kernel\|BPF\)' "$log" | tail -1)
                break
            fi
        done
        if [ -n "$reason" ]; then
            printf '%-5s %-5s %7s %7s %8s  %s\n' "$size" "$fmt" "$pack_s" "$pack_mb" "$file_mb" "$reason"
        else
            start=$(field '.*start-up \([0-9.]*\) ms.*')
            prompt=$(field '.*prompt [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) ms\/token.*')
            decode=$(field '.*generated [0-9]* tokens, \([0-9.]*\) ms\/token.*')
            long=$(field '.*longest call \([0-9.]*\) ms.*')
            over=$(field '.* \([0-9]*\) of [0-9]* calls over 10 ms.*')
            prog=$(field '.*kernel clock): longest \([0-9.]*\) ms.*')
            prog_over=$(field '.*kernel clock): longest [0-9.]* ms, \([0-9]*\) over.*')
            maps=$(field '.*BPF maps \([0-9.]*\) MB.*')
            kv=$(field '.*KV cache [a-z0-9]* \([0-9.]*\) kB\/position.*')
            per=$(awk -v d="$decode" -v g="$gmac" 'BEGIN { printf "%.1f", d / g }')
            same=$(bpf_equals_emu "$qpk" "$vocab")
            printf '%-5s %-5s %7s %7s %8s %8s %7s %7s %7s %6s %7s %5s %8s %7s %6s %8s %8s\n' "$size" "$fmt" "$pack_s" \
                   "$pack_mb" "$file_mb" "$start" "$prompt" "$decode" "$long" "$over" "$prog" "$prog_over" "$maps" "$kv" "$gmac" "$per" "$same"
        fi
        [ "${QP_KEEP:-0}" = 1 ] || rm -f "$qpk"
    done
    [ "${QP_KEEP:-0}" = 1 ] || rm -rf "$ck"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_recorded
