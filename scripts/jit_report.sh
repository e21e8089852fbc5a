#!/bin/sh
# jit_report.sh [BUILD_DIR] - a measurement, not a test: the x86 instructions
# the kernel's BPF JIT spends per multiply-add in the hot inner loop of every
# matrix kernel, and the same count for the BPF instructions the
# JIT was given (bpftool prog dump xlated). Needs root (or CAP_BPF +
# CAP_PERFMON), objdump (binutils) and cc.
#
# What it does: writes a tiny random checkpoint (the tiny-learned test
# model's tokenizer, so that qrun serve starts), packs it as q24, int8 and
# int4-pure, and for each starts `qrun serve --port 0`, which loads every
# program of kernels/qwen3.bpf.c and keeps it loaded. The programs are the ones
# whose ids are in the server's /proc/PID/fdinfo (another qrun on the
# machine has programs of the same names). bpftool here may be built
# without libbfd (no `dump jited`), so a small C helper (below) reads the
# JIT image, the functions' lengths and their kernel addresses with
# libbpf's bpf_obj_get_info_by_fd; /proc/kallsyms names each function
# (bpf_prog_<tag>_<name>: the bpf_loop callbacks are functions of their own
# thanks to the BTF func info) and objdump disassembles it.
#
# The multiply-adds are in one bpf_loop callback per (program, matrix
# role; hid = q/k/v/gate/up/lm_head, o, down), kernels/qk_matvec.h:
#   matvec_q24       *_cb_chunk  qk_rows_q24_dot: per iteration of its c loop
#                              16 columns x 4 rows = 64 MACs (j unrolled)
#   matvec_i8        *_cb_chunk  qk_dot_i8_row_chunk: per iteration of its h
#                              loop one 32-column act block of one row,
#                              4 code words x 4 SWAR multiplies of two
#                              lanes = 32 MACs, 16 multiplies (the group's
#                              scale product is in the enclosing g loop)
#   matvec_i8_block  *_cb_chunk  qk_rows_i8_unpacked, for a block of
#                              positions: per iteration of its h loop one
#                              act block of all four rows from pre-unpacked
#                              pair words: 64 SWAR multiplies = 128 MACs
#   matvec_i4        *_cb_chunk  qk_dot_i4_row_g32: per iteration of its g
#                              loop two 32-column groups of one row, each
#                              2 x qk_dot_i4_chunk = 8 SWAR multiplies of
#                              4 lanes = 32 MACs (+ 2 group-scale
#                              multiplies): 64 MACs, 20 multiplies
#   matvec_i4_block  *_cb_chunk  qk_rows_i4_unpacked: per iteration of its g
#                              loop one 32-column group of all four rows
#                              from pre-unpacked lane words, each act word
#                              loaded once for the four: 32 SWAR multiplies
#                              (+ 8 group-scale multiplies) = 128 MACs (the
#                              *_cb_unpack callback, run once per 4-row
#                              block and chunk for all positions of the
#                              block, is not counted)
#   matvec_i6 (int4 preset)    qk_mv_i6_*_cb_chunk: the i6 vocabulary
#                              projection, qk_dot_i6_row_chunk, one group
#                              of 64 columns per g iteration (16 SWAR
#                              multiplies + 1 scale): 64 MACs
#   matvec_i6_block (preset)   qk_mv_i6b_*_cb_row: the same from unpacked
#                              lanes, qk_dot_i6_row_unpacked
# How the loop is found: every backward jump (a j* whose target is below
# its own address; in xlated, "goto pc-N") closes a range [target, jump].
# The hot loop is the smallest such range that contains at least the
# multiplies (x86 imul, BPF "*=") of one iteration: 64 for q24, 16 for
# int8 and int4, 32 for int4's block of positions (smaller ranges with fewer are qk_mv_emit's loop over the 4
# rows, or the outer loop's latch placed above the inner loop). The
# instructions counted are those of the range, both ends included (a
# 10-byte movabs, BPF's 16-byte ld_imm64, count as one).
# The table prints the range's addresses (offsets in the function for x86,
# instruction numbers for BPF) so that it can be checked against
# QP_JIT_KEEP's dumps, and "jumps": the other jumps inside the range (0:
# straight-line, every instruction runs once per iteration), and "muls":
# the multiplies in it (64 for q24, 16 for int8; 16 + 4 for int4, 32 + 8
# for its block of positions, 16 + 1 for i6).
#
# QP_JIT_KEEP=DIR keeps the disassembly (DIR/<format>-<program>-<func>.s,
# .x for xlated) there. The loops' bodies do not depend on the model's
# width (the sizes are constants read from .rodata), only on its encodings.
set -eu
. "$(dirname "$0")/bench_lib.sh"
bench_record jit_report "$@"
work=$(mktemp -d)
keep=${QP_JIT_KEEP:-}
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
[ -n "$keep" ] && mkdir -p "$keep"

# jitimg ID IMAGE: writes the program's JIT image (every function, in
# order) to IMAGE and prints "offset length kernel-address" per function
cat >"$work/jitimg.c" <<'EOF'
#include <bpf/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int fd = bpf_prog_get_fd_by_id((uint32_t)strtoul(argv[1], NULL, 10));
    struct bpf_prog_info info = {0};
    uint32_t info_len = sizeof info;
    if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &info_len)) {
        perror("jitimg");
        return 1;
    }
    /* a second call with room for the image, the symbols and the lengths */
    uint32_t len = info.jited_prog_len, nk = info.nr_jited_ksyms, nl = info.nr_jited_func_lens;
    uint8_t *img = calloc(len + 1, 1);
    uint64_t *ks = calloc(nk + 1, 8);
    uint32_t *fl = calloc(nl + 1, 4);
    memset(&info, 0, sizeof info);
    info.jited_prog_len = len;
    info.jited_prog_insns = (uintptr_t)img;
    info.nr_jited_ksyms = nk;
    info.jited_ksyms = (uintptr_t)ks;
    info.nr_jited_func_lens = nl;
    info.jited_func_lens = (uintptr_t)fl;
    info_len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &info_len)) {
        perror("jitimg");
        return 1;
    }
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(img, 1, len, f) != len || fclose(f)) {
        perror(argv[2]);
        return 1;
    }
    uint64_t off = 0;
    for (uint32_t i = 0; i < nl && i < nk; i++) {
        printf("%llu %u %llx\n", (unsigned long long)off, fl[i], (unsigned long long)ks[i]);
        off += fl[i];
    }
    return 0;
}
EOF
cc -O1 -o "$work/jitimg" "$work/jitimg.c" -lbpf

# loop.awk on "address<TAB>instruction" lines: the hot loop as above;
# prints "first last insns jumps muls" (- - 0 0 0 when there is none).
# mul: the regex of a multiply; need: the multiplies one iteration has.
cat >"$work/loop.awk" <<'EOF'
function hex(s,   i, v) {
    v = 0; s = tolower(s); sub(/^0x/, "", s)
    for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
    return v
}
{ at[NR] = hex($1); ins[NR] = $2; n = NR }
END {
    best = 0
    for (e = 1; e <= n; e++) {
        if (ins[e] !~ /^j/) continue
        split(ins[e], p, /[ \t]+/); t = hex(p[2])
        if (t >= at[e]) continue
        c = 0; m = 0; j = 0
        for (i = 1; i <= e; i++) if (at[i] >= t) { c++; if (ins[i] ~ mul) m++; if (i < e && ins[i] ~ /^j/) j++ }
        if (m >= need && (best == 0 || c < best)) { best = c; lo = t; hi = at[e]; bj = j; bm = m }
    }
    if (best == 0) print "- - 0 0 0"
    else printf "%x %x %d %d %d\n", lo, hi, best, bj, bm
}
EOF

# 0.6B's widths (col_chunk 1024, plan.c) in 2 layers: the verifier drops
# the back edge of a loop that .rodata's sizes make run once, so a narrow
# model would hide the loops counted here
"$build/bin/qp-gen-checkpoint" "$work/ck" --preset tiny --seed 1 --vocab 2048 \
    --hidden 1024 --intermediate 3072 --heads 16 --kv-heads 8 --head-dim 128 --layers 2 \
    --tokenizer-dir "$root/tests/data/tiny-learned/model" >/dev/null

printf '%-9s %-9s %-26s %9s %6s %5s %4s %6s %9s %6s %6s %9s\n' \
    format program callback x86-range x86 jumps muls MACs x86/MAC bpf-pcs bpf bpf/MAC
for fmt in q24 int8 int4-pure int4; do
    "$build/bin/qpack" pack "$work/ck" -o "$work/$fmt.qpk" --format "$fmt" --quiet
    : >"$work/err"
    "$build/bin/qrun" serve -m "$work/$fmt.qpk" --port 0 --threads 1 --quiet >/dev/null 2>"$work/err" &
    pid=$!
    i=0
    until grep -q ' on http://' "$work/err"; do
        kill -0 "$pid" 2>/dev/null || { cat "$work/err" >&2; exit 1; }
        i=$((i + 1))
        [ $i -le 600 ] || { echo "jit_report: qrun serve did not start" >&2; exit 1; }
        sleep 0.1
    done
    ids=$(cat /proc/$pid/fdinfo/* 2>/dev/null | sed -n 's/^prog_id:[[:space:]]*//p' | sort -n)
    case $fmt in
    int4-pure) progs="matvec_i4 matvec_i4_block" ;;
    int4) progs="matvec_i6 matvec_i6_block" ;;    # the preset's i6 vocabulary projection (qk_mv_i6*)
    int8) progs="matvec_i8 matvec_i8_block" ;;
    *) progs="matvec_q24" ;;
    esac
    for prog in $progs; do
        id=
        for n in $ids; do
            [ "$(bpftool prog show id "$n" | sed -n '1s/.* name \([^ ]*\) .*/\1/p')" = "$prog" ] && id=$n
        done
        [ -n "$id" ] || { echo "jit_report: no program $prog in qrun ($pid)" >&2; exit 1; }
        bpftool prog dump xlated id "$id" >"$work/x"
        "$work/jitimg" "$id" "$work/img" >"$work/funcs"
        while read -r off len addr; do
            name=$(awk -v a="$addr" '$1 == a { print $3; exit }' /proc/kallsyms)
            func=${name#bpf_prog_*_}
            macs=64 need=64
            case $fmt-$prog-$func in
            int4-pure-matvec_i4_block-*_cb_chunk)
                macs=128 need=32 ;;  # one act block of four rows per iteration
            int4-pure-*_cb_chunk | int4-*-qk_mv_i6_*_cb_chunk | int4-*-qk_mv_i6b_*_cb_row)
                macs=64 need=16 ;;   # two act blocks per iteration
            int8-matvec_i8_block-*_cb_chunk)
                macs=128 need=64 ;;  # one act block of four rows per iteration
            int8-*_cb_chunk)
                macs=32 need=16 ;;   # one act block of a row per iteration
            q24-*_cb_chunk) ;;
            *) continue ;;
            esac
            # x86: "offset-in-function<TAB>instruction", the continuation
            # lines of long instructions dropped
            objdump -D -b binary -m i386:x86-64 --start-address="$off" \
                --stop-address=$((off + len)) "$work/img" |
                awk -F'\t' -v off="$off" "$(sed -n 1,5p "$work/loop.awk")"'
                    NF >= 3 && $3 != "" { a = $1; sub(/:$/, "", a); gsub(/ /, "", a)
                        i = $3; if (i ~ /^j/) { split(i, p, /[ \t]+/); i = sprintf("%-6s 0x%x", p[1], hex(p[2]) - off) }
                        printf "%x\t%s\n", hex(a) - off, i }' >"$work/s"
            # shellcheck disable=SC2046 # the five fields of loop.awk's line
            set -- $(awk -F'\t' -v mul='^imul' -v need="$need" -f "$work/loop.awk" "$work/s")
            xr="$1-$2" x86=$3 jumps=$4 muls=$5
            # BPF: the function's instructions as "pc (hex)<TAB>instruction",
            # a backward jump rewritten as "j TARGET" for loop.awk
            awk -v f="$func(" '
                /^[^ ;]/ { on = index($0, " " f) > 0; next }
                on && /^ *[0-9]+: / { pc = $1; sub(/:$/, "", pc); $1 = ""; $2 = ""; sub(/^ +/, "")
                    if ($0 ~ /goto pc-[0-9]+$/) { n = $NF; sub(/^pc-/, "", n); $0 = sprintf("j %x", pc + 1 - n) }
                    printf "%x\t%s\n", pc, $0 }' "$work/x" >"$work/b"
            # shellcheck disable=SC2046
            set -- $(awk -F'\t' -v mul='[*]=' -v need="$need" -f "$work/loop.awk" "$work/b")
            br="-" bpf=$3
            [ "$1" = - ] || br="$(printf %d "0x$1")-$(printf %d "0x$2")"
            if [ -n "$keep" ]; then
                cp "$work/s" "$keep/$fmt-$prog-$func.s"
                cp "$work/b" "$keep/$fmt-$prog-$func.x"
            fi
            printf '%-9s %-9s %-26s %9s %6d %5d %4d %6d %9s %6s %6d %9s\n' \
                "$fmt" "$prog" "$func" "$xr" "$x86" "$jumps" "$muls" "$macs" \
                "$(echo "$x86 $macs" | awk '{ printf "%.2f", $1 / $2 }')" "$br" "$bpf" \
                "$(echo "$bpf $macs" | awk '{ printf "%.2f", $1 / $2 }')"
        done <"$work/funcs"
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
done
echo "x86-range: offsets (hex) in the function of the hot loop's first instruction and of its"
echo "backward jump; bpf-pcs: the same in xlated instruction numbers; jumps: other jumps inside"
bench_recorded
