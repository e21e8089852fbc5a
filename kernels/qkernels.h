/* qkernels.h - every kernel of the forward pass, written once.
 *
 * Compiled into the BPF object (bpf/qrun.bpf.c, where QK_LOOKUP is
 * bpf_map_lookup_elem on an array map and QK_LOOP is bpf_loop) and into the
 * host twin (runtime/emu.c, where they are a bounds-checked pointer
 * computation and a for loop). The arithmetic is qmath.h's.
 *
 * Each kernel reads its arguments (struct qk_args), checks every index it
 * was given against the model's sizes (QK_CFG, constants to the verifier)
 * and walks its range with QK_LOOP callbacks. Buffers ("maps"):
 *   w_hid    4-row blocks (q24 or i8g) of every such matrix with `hidden`
 *            columns: per layer q|k|v|gate|up, then the embedding (and
 *            lm_head; i6 lanes when C.embed_i6 / C.lm_i6, qrun_abi.h);
 *            where each starts: C.w_key, C.embed_key, C.lm_key
 *   w_o      o_proj blocks, w_down down_proj blocks
 *   w4_*     the same for i4g matrices (C.w_i4 says which map a matrix is in),
 *            their pf16 parameters widened to int32 as qrun fills the map
 *            (plan.c widen_i4_params): a load each, not a decode
 *   norms    I32S vectors: layer l attn 2l, mlp 2l+1, final 2L
 *   qk_norms I32S head vectors: q_norm 2l, k_norm 2l+1
 *   rope     per position: cos, sin (Q30) interleaved for head_dim / 2
 *   kcache, vcache  int16 [(slot * n_layers + layer) * ctx + pos][kv_dim]: one
 *            cache of ctx positions per sequence slot (qk_args.kv_slot, at
 *            most C.slots); K laid out by klayout
 * The per-position maps (h, x, xq, qkv, qrot, gu, logits, scal) have one
 * entry per position of the block (C.block); scores, parts and amax one
 * range of entries per block position. A kernel computes block entries
 * [b0, b0 + nb) of args, entry b being position pos + b.
 *   h        residual, Q32 [hidden]
 *   x        act vector mantissas (exponent in scal.x_exp) [act_len]
 *   xq       x quantised to 8-bit blocks for i4g products (QK_XQ_*)
 *   qkv      Q32 q|k|v, then normalised mantissas in place
 *   klayout  per layer: K channel boosts and extension bits (qrun_abi.h)
 *   qrot     rotated query mantissas (exponent per head in scal.q_exp), then
 *            per head the donor corrections of the K extension bits
 *   gu       Q32 gate|up; SiLU(gate) in place
 *   scores   raw q.k per (entry, head) [ctx]; for a head pair, then each
 *            position's V weight in place (qk_attn_weight2_cb)
 *   parts    attention partial per (entry, head, chunk) (struct qk_attn_part)
 *   logits   Q32 [vocab]; amax: argmax partial per (entry, slot); scal: scalars
 *   work     --stream: the 4-row tile blocks of the running job, staged by
 *            the host from the container (value = the widest block)
 */
#ifndef QP_QKERNELS_H
#define QP_QKERNELS_H

#include "qrun_abi.h"

#ifdef __bpf__
#define QK_LOOKUP(map, key) ({ u32 __qk_key = (key); (void *)bpf_map_lookup_elem(&m_##map, &__qk_key); })
#define QK_LOOP(n, cb, ctx) bpf_loop((n), (cb), (ctx), 0)
/* an empty asm that keeps clang from hoisting every product of an unrolled
 * block and spilling them (1.3x slower, and it overflows the stack) */
#define QK_KEEP(a) asm volatile("" : "+r"(a) : : "memory")
/* w *= x in w's register: BPF's multiply overwrites its first operand,
 * and clang otherwise copies the x it still needs rather than the spent w */
#define QK_MUL_INTO(w, x) asm("%0 *= %1" : "+r"(w) : "r"(x))
/* *p |= v, atomically: both threads' kernels may raise a flag at once */
#define QK_ATOMIC_OR(p, v) __sync_fetch_and_or((p), (v))
/* Keeps a pointer's offsets as two additions: clang would otherwise merge
 * a group's offset (low bits zero) and a row index into one OR, whose
 * range the verifier bounds only by its bits (past the value at widths
 * like 2560, where the groups do not fill a power of two). */
#define QK_OPAQUE(p) asm volatile("" : "+r"(p))
#else
#define QK_LOOKUP(map, key) qk_host_lookup(&qk_host->map, (key))
#define QK_LOOP(n, cb, ctx) qk_host_loop((n), (cb), (ctx))
#define QK_KEEP(a) ((void)0)
#define QK_MUL_INTO(w, x) ((w) *= (x))
#define QK_ATOMIC_OR(p, v) __atomic_fetch_or((p), (v), __ATOMIC_RELAXED)
#define QK_OPAQUE(p) ((void)0)
#endif

/* Raises scal.range_error when bad (an OR of qm_outside-style tests) is
 * non-zero; unconditional, so no branch depends on a flag in a bpf_loop
 * context (see qk_mv_ctx). */
QM_INLINE void qk_flag_range(struct qk_scalars *sc, u64 bad)
{
    QK_ATOMIC_OR(&sc->range_error, (u32)(bad | bad >> 32));
}

#define C QK_CFG

/* acc += w * x for a weight w just loaded: the product lands in w's
 * register, and acc stays in its own (QK_KEEP) */
#define QK_MAC(acc, w_load, x)                                             \
    do {                                                                  \
        s64 w_ = (w_load);                                                \
        QK_MUL_INTO(w_, x);                                               \
        acc += w_;                                                        \
        QK_KEEP(acc);                                                     \
    } while (0)

/* s += l * a in l's register */
#define QK_LANE_MAC(s, l, a)                                              \
    do {                                                                  \
        u64 __qk_l = (l);                                                 \
        QK_MUL_INTO(__qk_l, a);                                           \
        (s) += __qk_l;                                                    \
    } while (0)

/* A softfloat model constant, read field by field: clang for BPF copies a
 * whole `const volatile` struct as zeros (seen with clang 19), so never
 * pass C.<sf> by value. */
#define QK_SF(field) qk_sf_fields(C.field.m, C.field.e)

QM_INLINE struct qm_sf qk_sf_fields(u64 m, s32 e)
{
    struct qm_sf r = {m, e};
    return r;
}

/* A fresh load of an argument: the verifier sees an unknown value, not
 * the constant an earlier test on it (a switch over the modes) made it,
 * so the paths that differ only in that value reach a loop in one state
 * and its callbacks are verified once, not once per value. */
QM_INLINE u32 qk_reload(const u32 *p)
{
    return *(const volatile u32 *)p;
}

/* 0, as a value the verifier does not know: the first state of a loop's
 * context then already has the unknown values its callbacks leave there,
 * and the verifier's second walk of the callback finds that state again
 * instead of walking it once more (a zero it knew is not equivalent). */
QM_INLINE s64 qk_unknown_zero(const struct qk_args *a)
{
    return (s64)qk_reload(&a->begin) - (s64)qk_reload(&a->begin);
}

/* integer model constants that feed arithmetic */
QM_INLINE s32 qk_exp_const(s32 v)
{
    s64 e = v;
    asm volatile("" : "+r"(e));
    return (s32)e;
}

/* ---- shared pieces --------------------------------------------------- */

/* Column chunks. A product's row is walked C.col_chunk columns at a time
 * (a power of two up to QK_COL_CHUNK_MAX dividing every width and a
 * multiple of every group size; plan.c), each chunk one bpf_loop callback:
 * the verifier walks a chunk's constant-length loop, so what it processes
 * does not grow with the model's width. The functions below add one
 * chunk, columns [c0, c0 + C.col_chunk), into acc[0..3]. Sums are exact
 * integers: the chunks give the bits of one pass over the row. */

/* acc[k] += sum_c W[k][c] * x[c] for the 4 rows of one Q24 tile block.
 * |x| <= 2^24 and each row's sum of |W| below QPK_Q24_MAX_ROW_SUM = 2^38
 * (checked when the container is read) keep |acc| < 2^62 for the whole
 * row. Most of the time of a token is spent here. */
QM_INLINE void qk_dot4_chunk(const s32 *blk, const s64 *x, u32 c0, s64 *acc)
{
    const s32 *bp = blk + c0 * 4;
    const s64 *xc = x + c0;
    s64 a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (u32 c = 0; c < C.col_chunk; c += 16) {
        const s32 *p = bp + c * 4;
        const s64 *xp = xc + c;
QK_UNROLL
        for (int j = 0; j < 16; j++) {
            s64 xv = xp[j];
            QK_MAC(a0, p[j], xv);
            QK_MAC(a1, p[16 + j], xv);
            QK_MAC(a2, p[32 + j], xv);
            QK_MAC(a3, p[48 + j], xv);
        }
    }
    acc[0] += a0;
    acc[1] += a1;
    acc[2] += a2;
    acc[3] += a3;
}

/* i8g: the 4 rows of a block times the act vector's 16-bit blocks
 * (QK_XP_*). A code word holds 8 columns of a row; with its sign bits
 * flipped (u = q + 128, 0..255) and masked with QK_PAIR_LANES after a shift
 * of 8j bits it holds u_c + u_(c+4) * 2^32 for c = j, and its product with
 * the act word pairing a_c and a_(c+4) has u_c a_c + u_(c+4) a_(c+4) as the
 * coefficient of 2^32: two multiply-adds per multiply. Over an act block's
 * 16 products the coefficient of 2^32 is H = sum u a, |H| < 32 * 2^8 *
 * 2^15 = 2^28, and the coefficients of 2^0 sum to less than 16 * 2^8 *
 * 2^15 = 2^27 in magnitude: with 2^31 added the top 32 bits are H exactly.
 * P_b = H - 128 A_b = sum q a (|P_b| <= 32 * 128 * 2^15 = 2^27); per group:
 * T = D * sum over its blocks of (P_b << QK_XP_FRAC) >> r_b, |T| < 2^20 *
 * 2^3 * 2^35 = 2^58 for groups of up to 256 columns (8 blocks), and T >>
 * QK_I8_GROUP_SHIFT (< 2^46) summed over a row's groups (at most 2^10 of
 * QK_MAX_ACT = 2^15 columns) stays below 2^56. */
#define QK_PAIR_LANES 0x000000FF000000FFULL
#define QK_I8_FLIP 0x8080808080808080ULL
#define QK_XP_BIAS (1ULL << 31)

/* the 8 columns of code word w times their act pair words pk[0..3]: the
 * sum of the four products (sum u a as the coefficient of 2^32) */
QM_INLINE u64 qk_dot_i8_word(u64 w, u64 lanes, const u64 *pk)
{
    u64 t = w ^ QK_I8_FLIP;
    u64 s = (t & lanes) * pk[0];
    s += ((t >> 8) & lanes) * pk[1];
    s += ((t >> 16) & lanes) * pk[2];
    s += ((t >> 24) & lanes) * pk[3];
    return s;
}

/* one act block of a row (its code words cw[0, 1, 8, 9]) times act record
 * xr: P_b at the record's scale */
QM_INLINE s64 qk_dot_i8_block(const u64 *cw, const u64 *xr, u64 lanes)
{
    u64 s = QK_XP_BIAS + qk_dot_i8_word(cw[0], lanes, xr);
    QK_KEEP(s);
    s += qk_dot_i8_word(cw[1], lanes, xr + 4);
    QK_KEEP(s);
    s += qk_dot_i8_word(cw[8], lanes, xr + 8);
    QK_KEEP(s);
    s += qk_dot_i8_word(cw[9], lanes, xr + 12);
    s64 pb = ((s64)s >> 32) - 128 * (s64)xr[QK_XP_A];
    return (pb * (1 << QK_XP_FRAC)) >> xr[QK_XP_R];
}

/* A row's groups of columns [c0, c0 + C.col_chunk) from its first act
 * block on (code words cw, act records xr of rec words, scale d): per
 * group the sum of `block` over its act blocks (16 code words and one act
 * record each) times the group's scale, shifted down by `shift`. `block`
 * is a constant of the caller, so clang inlines it. */
QM_INLINE s64 qk_row_groups(const u64 *cw, const u64 *xr, const s32 *d, u64 lanes,
                            s64 (*block)(const u64 *, const u64 *, u64), u32 rec, u32 shift)
{
    u32 blocks_per_group = C.w_group >> 5;
    s64 row = 0;
    for (u32 g = 0; g < (C.col_chunk >> C.w_group_shift); g++) {
        s64 sp = 0;
        for (u32 h = 0; h < blocks_per_group; h++) {
            sp += block(cw, xr, lanes);
            cw += 16;
            xr += rec;
        }
        row += (d[0] * sp) >> shift;
        d += 4;
    }
    return row;
}

/* The i8g products' act records: after the 8-bit ones in the same value */
QM_INLINE const u64 *qk_xp_from(const u8 *xq, u32 c0)
{
    return (const u64 *)(xq + QK_XQ_BYTES(C.act_len)) + (c0 / QK_XQ_BLOCK) * QK_XP_REC;
}

/* row k of an i8g block, columns [c0, c0 + C.col_chunk) (the plan keeps
 * groups of at least one act block) */
QM_INLINE s64 qk_dot_i8_row_chunk(const u8 *blk, const u8 *xq, u32 cols, u32 k, u32 c0)
{
    const u64 *xr = qk_xp_from(xq, c0);
    const u64 *cw = (const u64 *)(blk + c0 * 4 + k * 16);
    const s32 *d = (const s32 *)(blk + cols * 4) + (c0 >> C.w_group_shift) * 4 + k;
    u64 lanes = QK_PAIR_LANES;
    QK_OPAQUE(lanes);
    return qk_row_groups(cw, xr, d, lanes, qk_dot_i8_block, QK_XP_REC, QK_I8_GROUP_SHIFT);
}

QM_INLINE void qk_dot4_i8_chunk(const void *blk, const void *xq, u32 cols, u32 c0, s64 *acc)
{
    for (u32 k = 0; k < 4; k++)
        acc[k] += qk_dot_i8_row_chunk((const u8 *)blk, (const u8 *)xq, cols, k, c0);
}

/* i8g for a block of positions: a 4-row block's code words unpacked once
 * (QK_UNPK_I8_*, the calling thread's scratch) into pair words, the four
 * rows side by side, q_c + q_(c+4) * 2^32 (the flipped word's lanes less
 * 128 each: two's complement lanes, the word still that integer), and
 * each group's scales beside them; every position of the block then takes
 * the four rows in one pass, each act pair word loaded once for the four.
 * The coefficient of 2^32 is then sum q a itself, |sum q a| < 2^27, and
 * the lower ones stay below 16 * 128 * 2^15 = 2^26: P_b comes out of the
 * lane as in qk_dot_i8_block, the same integer, and the group terms are
 * the same: the same bits. This unpacks columns [c0, c0 + C.col_chunk). */
#define QK_PAIR_BIAS (128 * 0x0000000100000001ULL)

QM_INLINE void qk_unpack_i8_chunk(const void *blk, u64 *lanes, u32 cols, u32 c0)
{
    const u8 *b = (const u8 *)blk;
    const s32 *d = (const s32 *)(b + cols * 4) + (c0 >> C.w_group_shift) * 4;
    u64 *l = lanes + QK_UNPK_I8_UNIT * (c0 / QK_XQ_BLOCK);
    for (u32 t = 0; t < C.col_chunk / 16; t++) {
        u64 *lt = l + QK_UNPK_I8_UNIT * (t >> 1) + 32 * (t & 1);
QK_UNROLL
        for (u32 k = 0; k < 4; k++) {
            const u64 *cw = (const u64 *)(b + (c0 + 16 * t) * 4 + 16 * k);
QK_UNROLL
            for (u32 h = 0; h < 2; h++) {
                u64 w = cw[h] ^ QK_I8_FLIP;
                lt[16 * h + k] = (w & QK_PAIR_LANES) - QK_PAIR_BIAS;
                lt[16 * h + 4 + k] = ((w >> 8) & QK_PAIR_LANES) - QK_PAIR_BIAS;
                lt[16 * h + 8 + k] = ((w >> 16) & QK_PAIR_LANES) - QK_PAIR_BIAS;
                lt[16 * h + 12 + k] = ((w >> 24) & QK_PAIR_LANES) - QK_PAIR_BIAS;
            }
        }
    }
    for (u32 g = 0; g < (C.col_chunk >> C.w_group_shift); g++) {
        s64 *dk = (s64 *)l + QK_UNPK_I8_UNIT * (C.w_group >> 5) * g + QK_UNPK_I8_PAR;
QK_UNROLL
        for (u32 k = 0; k < 4; k++)
            dk[k] = d[4 * g + k];
    }
}

/* The four rows' sums of an act block's unpacked lane words l[4 j + k]
 * (act word j, row k) times its n act words xr[j], each from `bias`. Each
 * sum is kept right after its product: clang then reuses one register for
 * the products and keeps the act record's pointer out of the stack (for
 * int4 171 BPF instructions per 128 multiply-adds against 191). */
QM_INLINE void qk_lane_sums4(const u64 *l, const u64 *xr, const int n, u64 bias, u64 *s)
{
    u64 s0 = bias, s1 = bias, s2 = bias, s3 = bias;
QK_UNROLL
    for (int j = 0; j < n; j++) {
        u64 a = xr[j];
        QK_LANE_MAC(s0, l[4 * j], a);
        QK_KEEP(s0);
        QK_LANE_MAC(s1, l[4 * j + 1], a);
        QK_KEEP(s1);
        QK_LANE_MAC(s2, l[4 * j + 2], a);
        QK_KEEP(s2);
        QK_LANE_MAC(s3, l[4 * j + 3], a);
        QK_KEEP(s3);
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}

/* the four rows' P_b of one act block: its 64 pair words l[4 p + k] (act
 * pair word p, row k) times act record xr, at the record's scale */
QM_INLINE void qk_unpacked8_block(const u64 *l, const u64 *xr, s64 *sp)
{
    u64 s[4];
    qk_lane_sums4(l, xr, 16, QK_XP_BIAS, s);
    u64 r = xr[QK_XP_R];
QK_UNROLL
    for (int k = 0; k < 4; k++)
        sp[k] = (((s64)s[k] >> 32) * (1 << QK_XP_FRAC)) >> r;
}

/* the four rows of an unpacked i8g block (a thread's scratch) times entry
 * xq's 16-bit records, columns [c0, c0 + C.col_chunk), added into row[] */
QM_INLINE void qk_dot4_i8_unpacked(const void *lanes, const void *xq, u32 cols, u32 c0, s64 *row)
{
    const u64 *xr = qk_xp_from((const u8 *)xq, c0);
    const u64 *l = (const u64 *)lanes + QK_UNPK_I8_UNIT * (c0 / QK_XQ_BLOCK);
    u32 blocks_per_group = C.w_group >> 5;
    (void)cols;   /* the layout is by act block, whatever the width */
    for (u32 g = 0; g < (C.col_chunk >> C.w_group_shift); g++) {
        const s64 *d = (const s64 *)l + QK_UNPK_I8_PAR;
        s64 sg[4] = {0, 0, 0, 0}, sp[4];
        for (u32 h = 0; h < blocks_per_group; h++) {
            qk_unpacked8_block(l, xr, sp);
QK_UNROLL
            for (int k = 0; k < 4; k++)
                sg[k] += sp[k];
            l += QK_UNPK_I8_UNIT;
            xr += QK_XP_REC;
        }
QK_UNROLL
        for (int k = 0; k < 4; k++)
            row[k] += (d[k] * sg[k]) >> QK_I8_GROUP_SHIFT;
    }
}

/* i4g: the 4 rows of a block times the quantised act vector (QK_XQ_*).
 * A code word holds 16 columns of one row; (w >> 4j) & QK_NIBBLE_LANES puts
 * columns j, j+4, j+8, j+12 into 16-bit lanes 0..3, and the act word pk[j]
 * holds the same columns' a in lanes 3..0. Their 64-bit product has the
 * 4-term dot product as the coefficient of 2^48 (lanes i and 3 - i meet
 * there; higher coefficients fall off the top). Over the 4 words:
 * |coefficient of 2^48| <= 16 * 15 * 127 < 2^15 and the lower
 * coefficients sum to less than 2^47 in magnitude, so with 2^47 added the
 * top 16 bits are the 16 columns' dot product exactly: four multiplies for
 * 16 multiply-adds. Per act block b of the row: P_b, the sum of its two
 * chunks (|P_b| < 2^16); per group of at most 8 blocks: T = D * SP - M * SA
 * with SP = sum over the group's blocks of (P_b << QK_XQ_FRAC) >> r_b
 * (< 2^31) and |D|, |M| <= 2^26 (pf16 values, int32 in the map), so
 * |T| < 2^58; T >> QK_I4_GROUP_SHIFT
 * (< 2^48) summed over a row's groups (at most 2^10 of them for a row of
 * QK_MAX_ACT = 2^15 columns) stays below 2^58. */
#define QK_NIBBLE_LANES 0x000F000F000F000FULL
#define QK_XQ_BIAS (1ULL << 47)

QM_INLINE s64 qk_dot_i4_lanes(u64 w, u64 lanes, const u64 *pk)
{
    u64 s = QK_XQ_BIAS;
    s += (w & lanes) * pk[0];
    s += ((w >> 4) & lanes) * pk[1];
    s += ((w >> 8) & lanes) * pk[2];
    s += ((w >> 12) & lanes) * pk[3];
    return (s64)s >> 48;
}

QM_INLINE s64 qk_dot_i4_chunk(u64 w, const u64 *pk)
{
    return qk_dot_i4_lanes(w, QK_NIBBLE_LANES, pk);
}

/* The quantised act vector's record of the block holding column c0 (QK_XQ_*). */
QM_INLINE const u64 *qk_xq_from(const u8 *xq, u32 c0)
{
    return (const u64 *)xq + (c0 / QK_XQ_BLOCK) * QK_XQ_REC;
}

/* one group of 32 (the default: one act block per group) of a row: its
 * two code words, one at a time (clang would interleave them and run out
 * of registers), times act record xr, scaled by parameters d[0], d[4] */
QM_INLINE s64 qk_dot_i4_g32_term(const u64 *cw, const u64 *xr, const s32 *d, u64 lanes)
{
    s64 pb = qk_dot_i4_lanes(cw[0], lanes, xr);
    QK_KEEP(pb);
    pb += qk_dot_i4_lanes(cw[4], lanes, xr + 4);
    QK_KEEP(pb);
    s64 sp = (pb * (1 << QK_XQ_FRAC)) >> xr[QK_XQ_R];
    return ((s64)d[0] * sp - (s64)d[4] * (s64)xr[QK_XQ_SA]) >> QK_I4_GROUP_SHIFT;
}

/* groups of 32: every array walked by its own pointer and the lane mask
 * kept in a register, so the loop keeps its values in BPF's ten registers
 * instead of the stack; two groups per iteration */
QM_INLINE s64 qk_dot_i4_row_g32(const u64 *cw, const u64 *xr, const s32 *d, u32 groups)
{
    u64 lanes = QK_NIBBLE_LANES;
    s64 row = 0;
    QK_OPAQUE(lanes);
    if (groups & 1) {
        row = qk_dot_i4_g32_term(cw, xr, d, lanes);
        cw += 8;
        xr += QK_XQ_REC;
        d += 8;
    }
    for (u32 g = groups >> 1; g; g--) {
        row += qk_dot_i4_g32_term(cw, xr, d, lanes);
        QK_KEEP(row);
        row += qk_dot_i4_g32_term(cw + 8, xr + QK_XQ_REC, d + 8, lanes);
        cw += 16;
        xr += 2 * QK_XQ_REC;
        d += 16;
    }
    return row;
}

/* row k of a block, columns [c0, c0 + C.col_chunk): codes[4t + k] is its
 * 16-column chunk t */
QM_INLINE s64 qk_dot_i4_row_chunk(const u64 *codes, const u8 *xq, const s32 *par, u32 k, u32 c0)
{
    const u64 *xr = qk_xq_from(xq, c0);
    const u64 *cw = codes + c0 / 4;
    const s32 *pg = par + (c0 >> C.w4_group_shift) * 8;
    u32 blocks_per_group = C.w4_group >> 5;
    s64 row = 0;
    if (blocks_per_group == 1)
        return qk_dot_i4_row_g32(cw + k, xr, pg + k, C.col_chunk / QK_XQ_BLOCK);
    for (u32 g = 0; g < (C.col_chunk >> C.w4_group_shift); g++) {
        s64 sp = 0, sa = 0;
        for (u32 h = 0; h < blocks_per_group; h++) {
            u32 b = g * blocks_per_group + h;
            const u64 *x = xr + b * QK_XQ_REC;
            s64 pb = qk_dot_i4_chunk(cw[b * 8 + k], x) + qk_dot_i4_chunk(cw[b * 8 + 4 + k], x + 4);
            sp += (pb * (1 << QK_XQ_FRAC)) >> x[QK_XQ_R];
            sa += (s64)x[QK_XQ_SA];
        }
        const s32 *d = pg + 8 * g;
        row += ((s64)d[k] * sp - (s64)d[4 + k] * sa) >> QK_I4_GROUP_SHIFT;
    }
    return row;
}

QM_INLINE void qk_dot4_i4_chunk(const void *blk, const void *xq, u32 cols, u32 c0, s64 *acc)
{
    const u64 *codes = (const u64 *)blk;
    const s32 *par = (const s32 *)((const u8 *)blk + 2 * cols);
    for (u32 k = 0; k < 4; k++)
        acc[k] += qk_dot_i4_row_chunk(codes, xq, par, k, c0);
}

/* i6 lanes (QK_I6_*, the vocabulary projection of an i6g matrix): the 4
 * rows of a block times the quantised act vector. (w & QK_BYTE_LANES) and
 * ((w >> 8) & QK_BYTE_LANES) put the biased codes u = q + 32 (0..63) of
 * four columns into 16-bit lanes, which meet act word pk[j] as in
 * qk_dot_i4_chunk: the coefficient of 2^48 is their 4-term dot product,
 * |sum u a| <= 4 * 63 * 127 < 2^15, and the lower coefficients sum to less
 * than 63 * 127 * (3 * 2^32 + 2 * 2^16 + 1) < 2^47, so with 2^47 added the
 * top 16 bits are that product exactly. Unlike int4's, two such products
 * can overflow a lane, so each is taken out on its own. Per act block b:
 * P_b = sum u a - 32 A_b = sum q a (|P_b| <= 32 * 32 * 127 < 2^17); per
 * group: T = D * sum over its blocks of (P_b << QK_XQ_FRAC) >> r_b, with
 * the i8g scale D (|D| <= 2^20, |T| < 2^20 * 2^5 * 2^29 = 2^54 for a group
 * of up to 32 blocks), and T >> QK_I4_GROUP_SHIFT summed over the groups:
 * the row times the act vector i4g's way (row_adj: scale 2^(24 + 10 - E)). */
#define QK_BYTE_LANES 0x00FF00FF00FF00FFULL

QM_INLINE s64 qk_dot_i6_word(u64 w, u64 lanes, const u64 *pk)
{
    s64 p = (s64)((w & lanes) * pk[0] + QK_XQ_BIAS) >> 48;
    return p + ((s64)(((w >> 8) & lanes) * pk[1] + QK_XQ_BIAS) >> 48);
}

/* one act block of row k of an i6 lanes block (its words cw[0, 1, 8, 9]):
 * P_b at the act record's scale */
QM_INLINE s64 qk_dot_i6_block(const u64 *cw, const u64 *xr, u64 lanes)
{
    s64 pb = qk_dot_i6_word(cw[0], lanes, xr) + qk_dot_i6_word(cw[1], lanes, xr + 2);
    QK_KEEP(pb);
    pb += qk_dot_i6_word(cw[8], lanes, xr + 4) + qk_dot_i6_word(cw[9], lanes, xr + 6);
    QK_KEEP(pb);
    pb -= QK_I6_BIAS * (s64)xr[QK_XQ_A];
    return (pb * (1 << QK_XQ_FRAC)) >> xr[QK_XQ_R];
}

/* row k of an i6 lanes block, columns [c0, c0 + C.col_chunk) */
QM_INLINE s64 qk_dot_i6_row_chunk(const u8 *blk, const u8 *xq, u32 cols, u32 k, u32 c0)
{
    const u64 *xr = qk_xq_from(xq, c0);
    const u64 *cw = (const u64 *)(blk + c0 * 4 + k * 16);
    const s32 *d = (const s32 *)(blk + cols * 4) + (c0 >> C.w_group_shift) * 4 + k;
    u32 blocks_per_group = C.w_group >> 5;
    u64 lanes = QK_BYTE_LANES;
    s64 row = 0;
    QK_OPAQUE(lanes);
    if (blocks_per_group == 2) {   /* the int4 preset's groups of 64: a group per iteration */
        for (u32 g = C.col_chunk >> C.w_group_shift; g; g--) {
            s64 sp = qk_dot_i6_block(cw, xr, lanes);
            QK_KEEP(sp);
            sp += qk_dot_i6_block(cw + 16, xr + QK_XQ_REC, lanes);
            row += (d[0] * sp) >> QK_I4_GROUP_SHIFT;
            cw += 32;
            xr += 2 * QK_XQ_REC;
            d += 4;
        }
        return row;
    }
    return qk_row_groups(cw, xr, d, lanes, qk_dot_i6_block, QK_XQ_REC, QK_I4_GROUP_SHIFT);
}

QM_INLINE void qk_dot4_i6_chunk(const void *blk, const void *xq, u32 cols, u32 c0, s64 *acc)
{
    for (u32 k = 0; k < 4; k++)
        acc[k] += qk_dot_i6_row_chunk((const u8 *)blk, (const u8 *)xq, cols, k, c0);
}

/* The i6 unpacked block's layout (QK_UNPK_*): the index of row k's lane
 * words of column c on, and of its parameters for the group holding c,
 * groups of 2^group_shift columns */
/* (a 64-bit sum: with a 32-bit one clang's row loop is two instructions
 * longer, scripts/jit_report.sh) */
QM_INLINE u64 qk_unpk_lane_at(u32 k, u32 cols, u32 c)
{
    return (u64)(k * (cols / 16) * 4) + c / 4;
}

QM_INLINE u32 qk_unpk_param_at(u32 k, u32 cols, u32 c, u32 group_shift)
{
    return (k * (cols >> group_shift) + (c >> group_shift)) * 2;
}

/* i4g for a block of positions: a 4-row block's code words are unpacked
 * once (QK_UNPK_I4_*, the calling thread's scratch) into lane words, the
 * four rows side by side, and each group's parameters into integers beside
 * them; every position of the block then takes the four rows in one pass,
 * each act word loaded once for all four: per 16 multiply-adds one load,
 * multiply and add of a lane word and a quarter of an act word's load, with
 * no shift, mask or parameter decoding left, and one pointer for both. The
 * lanes hold l = u - 8 (-8..7) as two's complement lanes, the word still
 * that polynomial's value (as qk_unpack_i6_chunk's), so an act block's two
 * 16-column halves share one sum: its coefficient of 2^48 is sum l a,
 * |sum l a| <= 32 * 8 * 127 < 2^15, and the lower coefficients stay below
 * 8 * 8 * 127 * (3 * 2^32 + 2 * 2^16 + 1) < 2^47. P_b = sum l a + 8 A_b is
 * the integer qk_dot4_i4_chunk takes, and the group terms are its own: the
 * same bits. This unpacks columns [c0, c0 + C.col_chunk). */
#define QK_I4_LANE_BIAS (8 * 0x0001000100010001ULL)

QM_INLINE void qk_unpack_i4_chunk(const void *blk, u64 *lanes, u32 cols, u32 c0)
{
    const u64 *codes = (const u64 *)blk + c0 / 4;
    const s32 *par = (const s32 *)((const u8 *)blk + 2 * cols) + (c0 >> C.w4_group_shift) * 8;
    u64 *l = lanes + QK_UNPK_I4_UNIT * (c0 / QK_XQ_BLOCK);
    u32 blocks_per_group = C.w4_group >> 5;
    for (u32 t = 0; t < C.col_chunk / 16; t++) {
        u64 *lt = l + QK_UNPK_I4_UNIT * (t >> 1) + 16 * (t & 1);
QK_UNROLL
        for (u32 k = 0; k < 4; k++) {
            u64 w = codes[4 * t + k];
            lt[k] = (w & QK_NIBBLE_LANES) - QK_I4_LANE_BIAS;
            lt[4 + k] = ((w >> 4) & QK_NIBBLE_LANES) - QK_I4_LANE_BIAS;
            lt[8 + k] = ((w >> 8) & QK_NIBBLE_LANES) - QK_I4_LANE_BIAS;
            lt[12 + k] = ((w >> 12) & QK_NIBBLE_LANES) - QK_I4_LANE_BIAS;
        }
    }
    for (u32 g = 0; g < (C.col_chunk >> C.w4_group_shift); g++) {
        s64 *d = (s64 *)l + QK_UNPK_I4_UNIT * blocks_per_group * g + QK_UNPK_I4_PAR;
QK_UNROLL
        for (u32 k = 0; k < 4; k++) {
            d[2 * k] = par[8 * g + k];
            d[2 * k + 1] = par[8 * g + 4 + k];
        }
    }
}

/* the four rows' P_b of one act block: its 32 lane words l[4 j + k] (act
 * word j, row k) times act record xr, at the record's scale (<< FRAC >> r) */
QM_INLINE void qk_unpacked4_block(const u64 *l, const u64 *xr, s64 *sp)
{
    u64 s[4];
    qk_lane_sums4(l, xr, 8, QK_XQ_BIAS, s);
    s64 a8 = (s64)xr[QK_XQ_A] * 8;
    u64 r = xr[QK_XQ_R];
QK_UNROLL
    for (int k = 0; k < 4; k++)
        sp[k] = ((((s64)s[k] >> 48) + a8) * (1 << QK_XQ_FRAC)) >> r;
}

/* row[k] += a group's term, from its SP (sp[k]) and SA, parameters d[2 k] */
QM_INLINE void qk_unpacked4_group(const s64 *sp, s64 sa, const s64 *d, s64 *row)
{
QK_UNROLL
    for (int k = 0; k < 4; k++)
        row[k] += (d[2 * k] * sp[k] - d[2 * k + 1] * sa) >> QK_I4_GROUP_SHIFT;
}

/* the four rows of an unpacked block (a thread's scratch) times entry xq,
 * columns [c0, c0 + C.col_chunk), added into row[0..3] */
QM_INLINE void qk_dot4_i4_unpacked(const void *lanes, const void *xq, u32 cols, u32 c0, s64 *row)
{
    const u64 *xr = qk_xq_from((const u8 *)xq, c0);
    const u64 *l = (const u64 *)lanes + QK_UNPK_I4_UNIT * (c0 / QK_XQ_BLOCK);
    (void)cols;   /* the layout is by act block, whatever the width */
    u32 blocks_per_group = C.w4_group >> 5;
    s64 sp[4];
    if (blocks_per_group == 1) {   /* the default groups of 32: a group per act block */
        for (u32 g = C.col_chunk / QK_XQ_BLOCK; g; g--) {
            qk_unpacked4_block(l, xr, sp);
            qk_unpacked4_group(sp, (s64)xr[QK_XQ_SA], (const s64 *)l + QK_UNPK_I4_PAR, row);
            l += QK_UNPK_I4_UNIT;
            xr += QK_XQ_REC;
        }
        return;
    }
    for (u32 g = 0; g < (C.col_chunk >> C.w4_group_shift); g++) {
        const s64 *d = (const s64 *)l + QK_UNPK_I4_PAR;
        s64 sg[4] = {0, 0, 0, 0}, sa = 0;
        for (u32 h = 0; h < blocks_per_group; h++) {
            qk_unpacked4_block(l, xr, sp);
QK_UNROLL
            for (int k = 0; k < 4; k++)
                sg[k] += sp[k];
            sa += (s64)xr[QK_XQ_SA];
            l += QK_UNPK_I4_UNIT;
            xr += QK_XQ_REC;
        }
        qk_unpacked4_group(sg, sa, d, row);
    }
}

/* i6 lanes for a block of positions: a 4-row block's code words unpacked
 * once into lanes[4][cols / 16][4], row by row (columns j, j + 4, j + 8,
 * j + 12 of lane word j meet act word pk[j]), and its int32
 * scales into dm (entry [2 g]; [2 g + 1] is not used). The bias comes off the
 * lanes here: each holds q = u - QK_I6_BIAS (-32..31) as a two's-complement
 * lane of the word, and the word is still that polynomial's value, so the
 * products stay exact. */
#define QK_I6_LANE_BIAS (QK_I6_BIAS * 0x0001000100010001ULL)

QM_INLINE void qk_unpack_i6_chunk(const void *blk, u64 *lanes, s64 *dm, u32 cols, u32 c0)
{
    const u8 *b = (const u8 *)blk;
    const s32 *d = (const s32 *)(b + cols * 4) + (c0 >> C.w_group_shift) * 4;
    for (u32 t = 0; t < C.col_chunk / 16; t++)
QK_UNROLL
        for (u32 k = 0; k < 4; k++) {
            const u64 *cw = (const u64 *)(b + (c0 + 16 * t) * 4 + 16 * k);
            u64 *l = lanes + qk_unpk_lane_at(k, cols, c0 + 16 * t);
            l[0] = (cw[0] & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
            l[1] = ((cw[0] >> 8) & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
            l[2] = (cw[1] & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
            l[3] = ((cw[1] >> 8) & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
        }
    for (u32 g = 0; g < (C.col_chunk >> C.w_group_shift); g++)
QK_UNROLL
        for (u32 k = 0; k < 4; k++)
            dm[qk_unpk_param_at(k, cols, c0 + (g << C.w_group_shift), C.w_group_shift)] = d[4 * g + k];
}

/* Two products of unpacked i6 lanes: |q| <= 32, so the top lane's sum of
 * 8 terms is at most 8 * 32 * 127 < 2^15 and the lower coefficients stay
 * below 2 * (3 * 32 * 127 * 2^32 + ...) < 2^47 (qk_dot_i6_word's bound with
 * |q| for u); four would overflow the lane. */
QM_INLINE s64 qk_lanes6_pair(const u64 *l, const u64 *pk)
{
    u64 s = QK_XQ_BIAS;
    s += l[0] * pk[0];
    s += l[1] * pk[1];
    return (s64)s >> 48;
}

/* one act block of an unpacked i6 row: P_b at the act record's scale */
QM_INLINE s64 qk_i6_unpacked_block(const u64 *lk, const u64 *xr)
{
    s64 pb = qk_lanes6_pair(lk, xr) + qk_lanes6_pair(lk + 2, xr + 2);
    pb += qk_lanes6_pair(lk + 4, xr + 4) + qk_lanes6_pair(lk + 6, xr + 6);
    return (pb * (1 << QK_XQ_FRAC)) >> xr[QK_XQ_R];
}

/* qk_dot_i6_row_chunk on an unpacked block: P_b = sum q a comes straight
 * from the signed lanes, the same integer as sum u a - 32 A_b there */
QM_INLINE s64 qk_dot_i6_row_unpacked(const u64 *lanes, const s64 *dm, const u8 *xq, u32 k, u32 cols, u32 c0)
{
    const u64 *xr = qk_xq_from(xq, c0), *lk = lanes + qk_unpk_lane_at(k, cols, c0);
    const s64 *dk = dm + qk_unpk_param_at(k, cols, c0, C.w_group_shift);
    u32 blocks_per_group = C.w_group >> 5;
    s64 row = 0;
    if (blocks_per_group == 2) {   /* the int4 preset's groups of 64: a group per iteration */
        for (u32 g = C.col_chunk >> C.w_group_shift; g; g--) {
            s64 sp = qk_i6_unpacked_block(lk, xr);
            QK_KEEP(sp);
            sp += qk_i6_unpacked_block(lk + 8, xr + QK_XQ_REC);
            row += (dk[0] * sp) >> QK_I4_GROUP_SHIFT;
            lk += 16;
            xr += 2 * QK_XQ_REC;
            dk += 2;
        }
        return row;
    }
    for (u32 g = 0; g < (C.col_chunk >> C.w_group_shift); g++) {
        s64 sp = 0;
        for (u32 h = 0; h < blocks_per_group; h++) {
            sp += qk_i6_unpacked_block(lk, xr);
            lk += 8;
            xr += QK_XQ_REC;
        }
        row += (dk[2 * g] * sp) >> QK_I4_GROUP_SHIFT;
    }
    return row;
}

/* Folds |v| into *acc by OR: only the bit length of a vector's largest
 * magnitude is ever needed, and the OR of the magnitudes has the same bit
 * length. Branch-free, so unrolled loops stay one verifier path. */
QM_INLINE void qk_max_abs(u64 *acc, s64 v)
{
    s64 sign = v >> 63;
    *acc |= (u64)((v ^ sign) - sign);
}

/* 1/rms of a vector from its sum of squares at shift s (qmath formats) */
QM_INLINE struct qm_sf qk_rms_inv(u64 sumsq, u32 s, struct qm_sf inv_n, struct qm_sf eps)
{
    struct qm_sf mean = qm_sf_mul(qm_sf_make(sumsq, 2 * (s32)s - 64), inv_n);
    return qm_sf_rsqrt(qm_sf_add(mean, eps));
}

/* normalised and scaled element before the final shift: h * (g * inv).
 * The per-element factor is formed first (31 bits) and h is used at full
 * Q32 precision: a massive channel thousands of times larger than its
 * neighbours must not cost them their low bits. Value: z * 2^(31 - g_exp + inv.e). */
QM_INLINE s64 qk_rms_z(s64 h, struct qm_sf inv, s32 g)
{
    s64 c = ((s64)g * (s64)inv.m) >> 31;
    return qm_mulhi32(h, c);
}

QM_INLINE s32 qk_rms_exp(struct qm_sf inv, s32 g_exp, u32 out_shift)
{
    return 31 - g_exp + inv.e + (s32)out_shift;
}

/* ---- embed: h = embedding row of a token ---------------------------- */

struct qk_embed_ctx {
    u32 token, streamed, work_key, b;
    u64 bad;            /* a value outside the Q32 range (qm_outside) */
};

static long qk_embed_cb(u64 i, void *vctx)
{
    struct qk_embed_ctx *cx = vctx;
    if (i >= C.hidden / 16)
        return 1;
    u32 tile = (u32)QK_IDX(i, QK_MAX_HIDDEN / 16);
    u32 key = C.embed_key + cx->token / 4;
    const s32 *blk = cx->streamed ? QK_LOOKUP(work, cx->work_key)
                     : C.embed_i4 ? QK_LOOKUP(w4_hid, key) : QK_LOOKUP(w_hid, key);
    s64 *h = QK_LOOKUP(h, cx->b);
    if (!blk || !h)
        return 1;
    s64 *dst = h + tile * 16;
    if (C.embed_i4) {
        /* value = (D * q - M) * 2^-E; 16 columns of row k = one code word.
         * The word index is an add the verifier can bound: clang would write
         * tile * 4 + k as an OR, whose bound the verifier rounds up to the
         * next power of two (past the block from Qwen3-4B's width on). */
        u32 k = cx->token & 3, g = (tile * 16) >> C.w4_group_shift, word = tile * 4;
        QK_OPAQUE(word);
        u64 w = ((const u64 *)blk)[word + k];
        const s32 *par = (const s32 *)((const u8 *)blk + 2 * C.hidden);
        const s32 *dm = par + g * 8;
        QK_OPAQUE(dm);
        s64 d = dm[k], m = dm[4 + k];
        s32 up = qk_exp_const(C.embed_adj);
QK_UNROLL
        for (int j = 0; j < 16; j++)
            dst[j] = qm_scale_pow2_checked(d * (s64)((w >> (4 * j)) & 15) - m, up, &cx->bad);
        return 0;
    }
    if (C.w_enc == QK_ENC_I8G) {
        /* value = scale * q * 2^-E: Q32 is (scale * q) * 2^(32 - E); i6
         * lanes (C.embed_i6) hold each chunk's codes reordered and biased */
        const u8 *q = (const u8 *)blk + tile * 64 + (cx->token & 3) * 16;
        const s32 *scale = (const s32 *)((const u8 *)blk + C.hidden * 4) + ((tile * 16) >> C.w_group_shift) * 4;
        QK_OPAQUE(scale);
        s64 d = scale[cx->token & 3];
        s32 up = qk_exp_const(C.embed_adj);
        bool lanes = C.embed_i6 != 0;
QK_UNROLL
        for (int j = 0; j < 16; j++) {
            s64 code = lanes ? (s64)q[QK_I6_BYTE(j)] - QK_I6_BIAS : (s64)(s8)q[j];
            dst[j] = qm_scale_pow2_checked(d * code, up, &cx->bad);
        }
        return 0;
    }
    const s32 *src = blk + tile * 64 + (cx->token & 3) * 16;
QK_UNROLL
    for (int j = 0; j < 16; j++)
        dst[j] = (s64)((u64)(s64)src[j] << (QM_RESID_FRAC - 24));
    return 0;
}

QM_INLINE int qk_embed(const struct qk_args *a)
{
    if (a->token >= C.vocab || a->b0 >= C.block)
        return -1;
    struct qk_scalars *sc = QK_LOOKUP(scal, 0);   /* the range flag lives in entry 0 */
    if (!sc)
        return -1;
    struct qk_embed_ctx cx = {a->token, a->streamed, a->work_key, a->b0, 0};
    QK_LOOP(C.hidden / 16, qk_embed_cb, &cx);
    qk_flag_range(sc, cx.bad);
    return 0;
}

/* ---- rmsnorm: x = act(h / rms(h) * g) ------------------------------- */

struct qk_norm_ctx {
    u32 norm;           /* index into norms */
    u32 b;              /* block entry */
    u32 shift;          /* h -> 24 bits, for the sum of squares only */
    u64 max;            /* pass result */
    u64 sumsq;
    struct qm_sf inv;
    u32 out_shift;
};

static long qk_norm_max_cb(u64 i, void *vctx)
{
    struct qk_norm_ctx *cx = vctx;
    u32 tile = (u32)i;
    const s64 *h = QK_LOOKUP(h, cx->b);
    if (!h || tile >= C.hidden / 16)
        return 1;
    const s64 *p = h + tile * 16;
QK_UNROLL
    for (int j = 0; j < 16; j++)
        qk_max_abs(&cx->max, p[j]);
    return 0;
}

static long qk_norm_sumsq_cb(u64 i, void *vctx)
{
    struct qk_norm_ctx *cx = vctx;
    u32 tile = (u32)i;
    const s64 *h = QK_LOOKUP(h, cx->b);
    if (!h || tile >= C.hidden / 16)
        return 1;
    const s64 *p = h + tile * 16;
QK_UNROLL
    for (int j = 0; j < 16; j++) {
        s64 v = qm_rshift_round(p[j], cx->shift);
        cx->sumsq += (u64)(v * v);
    }
    return 0;
}

static long qk_norm_zmax_cb(u64 i, void *vctx)
{
    struct qk_norm_ctx *cx = vctx;
    u32 tile = (u32)i;
    const s64 *h = QK_LOOKUP(h, cx->b);
    const s32 *g = QK_LOOKUP(norms, cx->norm);
    if (!h || !g || tile >= C.hidden / 16)
        return 1;
    const s64 *hp = h + tile * 16;
    const s32 *gp = g + tile * 16;
QK_UNROLL
    for (int j = 0; j < 16; j++)
        qk_max_abs(&cx->max, qk_rms_z(hp[j], cx->inv, gp[j]));
    return 0;
}

static long qk_norm_out_cb(u64 i, void *vctx)
{
    struct qk_norm_ctx *cx = vctx;
    u32 tile = (u32)i;
    const s64 *h = QK_LOOKUP(h, cx->b);
    const s32 *g = QK_LOOKUP(norms, cx->norm);
    s64 *x = QK_LOOKUP(x, cx->b);
    if (!h || !g || !x || tile >= C.hidden / 16)
        return 1;
    const s64 *hp = h + tile * 16;
    const s32 *gp = g + tile * 16;
    s64 *out = x + tile * 16;
QK_UNROLL
    for (int j = 0; j < 16; j++)
        out[j] = qm_rshift_round(qk_rms_z(hp[j], cx->inv, gp[j]), cx->out_shift);
    return 0;
}

/* one block entry: x = act(h / rms(h) * g), scal.x_exp */
static long qk_norm_entry_cb(u64 i, void *vctx)
{
    const struct qk_norm_ctx *base = vctx;
    struct qk_norm_ctx cx = {.norm = base->norm, .b = base->b + (u32)i};
    struct qk_scalars *sc = QK_LOOKUP(scal, cx.b);
    if (!sc)
        return 1;
    QK_LOOP(C.hidden / 16, qk_norm_max_cb, &cx);
    cx.shift = qm_act_shift(cx.max);
    QK_LOOP(C.hidden / 16, qk_norm_sumsq_cb, &cx);
    cx.inv = qk_rms_inv(cx.sumsq, cx.shift, QK_SF(inv_hidden), QK_SF(eps));
    cx.max = 0;
    QK_LOOP(C.hidden / 16, qk_norm_zmax_cb, &cx);
    cx.out_shift = qm_act_shift(cx.max);
    QK_LOOP(C.hidden / 16, qk_norm_out_cb, &cx);
    sc->x_exp = qk_rms_exp(cx.inv, qk_exp_const(C.norm_exp[QK_IDX(cx.norm, 4 * QK_MAX_LAYERS)]), cx.out_shift);
    return 0;
}

/* block entries [b0, b0 + nb) exist */
QM_INLINE bool qk_entries_ok(const struct qk_args *a)
{
    return a->nb != 0 && a->nb <= C.block && a->b0 <= C.block - a->nb;
}

QM_INLINE int qk_rmsnorm(const struct qk_args *a)
{
    u32 norm;
    if (a->mode == QK_NORM_FINAL)
        norm = 2 * C.n_layers;
    else if (a->layer < C.n_layers && a->mode <= QK_NORM_MLP)
        norm = 2 * a->layer + a->mode;
    else
        return -1;
    if (norm > 2 * QK_MAX_LAYERS || !qk_entries_ok(a))
        return -1;
    struct qk_norm_ctx cx = {.norm = norm, .b = a->b0};
    QK_LOOP(a->nb, qk_norm_entry_cb, &cx);
    return 0;
}

/* ---- quant_x: x -> 8-bit blocks (QK_XQ_*) and 16-bit ones (QK_XP_*) -- */

struct qk_xq_ctx {
    u32 sh_max;         /* the largest shift of the 8-bit records */
    u32 sh_max16;       /* ... of the 16-bit ones */
    u32 b;              /* block entry */
    u32 len;            /* entries of x to quantise */
    u32 records;        /* qk_act_records */
};

/* the 16-bit records of the i8g products (QK_XP_*), after the 8-bit ones */
QM_INLINE u64 *qk_xp_rec(u8 *xq, u32 b)
{
    return (u64 *)(xq + QK_XQ_BYTES(C.act_len)) + b * QK_XP_REC;
}

/* act block *b (the callback's index i) of entry cx->b: its values m and
 * the entry's record value xq; false when a lookup fails or i is past the
 * act vector */
QM_INLINE bool qk_act_block(const struct qk_xq_ctx *cx, u64 i, u32 *b, const s64 **m, u8 **xq)
{
    const s64 *x = QK_LOOKUP(x, cx->b);
    *xq = QK_LOOKUP(xq, cx->b);
    *b = (u32)QK_IDX(i, QK_MAX_ACT / QK_XQ_BLOCK);
    if (!x || !*xq || i >= C.act_len / QK_XQ_BLOCK)
        return false;
    *m = x + *b * QK_XQ_BLOCK;
    return true;
}

/* pass 1: every block's shifts to at most 8 bits (the 8-bit records) and
 * to at most 15 (the 16-bit ones), kept in their r for pass 2, and the
 * largest of each. The tests of C keep a model's program from reaching
 * records its map does not hold. */
static long qk_act_shift_cb(u64 i, void *vctx)
{
    struct qk_xq_ctx *cx = vctx;
    const s64 *m;
    u8 *xq;
    u32 b;
    if (!qk_act_block(cx, i, &b, &m, &xq))
        return 1;
    u64 max = 0;
QK_UNROLL
    for (int j = 0; j < QK_XQ_BLOCK; j++)
        qk_max_abs(&max, m[j]);
    u32 n = qm_bitlen(max), sh8 = n > 7 ? n - 7 : 0, sh16 = n > 15 ? n - 15 : 0;
    if (C.has_i4 && (cx->records & 1)) {
        ((u64 *)xq)[b * QK_XQ_REC + QK_XQ_R] = sh8;
        cx->sh_max = sh8 > cx->sh_max ? sh8 : cx->sh_max;
    }
    if (C.w_enc == QK_ENC_I8G && (cx->records & 2)) {
        qk_xp_rec(xq, b)[QK_XP_R] = sh16;
        cx->sh_max16 = sh16 > cx->sh_max16 ? sh16 : cx->sh_max16;
    }
    return 0;
}

/* pass 2: the 8-bit values, r_b and the group sums */
static long qk_xq_values_cb(u64 i, void *vctx)
{
    struct qk_xq_ctx *cx = vctx;
    const s64 *m;
    u8 *xq;
    u32 b;
    if (!qk_act_block(cx, i, &b, &m, &xq))
        return 1;
    u64 *rec = (u64 *)xq + b * QK_XQ_REC;
    u32 sh = rec[QK_XQ_R] & 63;
    s64 sum = 0;
    u64 w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
QK_UNROLL
    for (int j = 0; j < QK_XQ_BLOCK; j++) {
        /* |m| < 2^(sh + 7) rounds to at most 128; 127 keeps the dot
         * product of 16 columns inside 15 bits (qk_dot_i4_chunk) */
        s64 v = qm_clamp(qm_rshift_round(m[j], sh), -127, 127);
        w[(j / 16) * 4 + j % 4] += (u64)v << (16 * (3 - (j % 16) / 4));
        sum += v;
    }
QK_UNROLL
    for (int j = 0; j < 8; j++)
        rec[j] = w[j];
    u32 r = cx->sh_max - sh;
    r = r > QK_XQ_MAX_REL ? QK_XQ_MAX_REL : r;
    rec[QK_XQ_R] = r;
    rec[QK_XQ_SA] = (u64)((sum * (1 << QK_XQ_FRAC)) >> r);
    rec[QK_XQ_A] = (u64)sum;
    return 0;
}

/* pass 2: the 16-bit values in their pair words, A_b and r_b */
static long qk_xp_values_cb(u64 i, void *vctx)
{
    struct qk_xq_ctx *cx = vctx;
    const s64 *m;
    u8 *xq;
    u32 b;
    if (!qk_act_block(cx, i, &b, &m, &xq))
        return 1;
    u64 *rec = qk_xp_rec(xq, b);
    u32 sh = rec[QK_XP_R] & 63;
    s64 sum = 0;
QK_UNROLL
    for (int i8 = 0; i8 < 4; i8++)
QK_UNROLL
        for (int j = 0; j < 4; j++) {
            /* |m| < 2^(sh + 15) rounds to at most 2^15 */
            s64 lo = qm_clamp(qm_rshift_round(m[8 * i8 + j], sh), -32767, 32767);
            s64 hi = qm_clamp(qm_rshift_round(m[8 * i8 + j + 4], sh), -32767, 32767);
            rec[4 * i8 + j] = (u64)hi + ((u64)lo << 32);
            sum += lo + hi;
        }
    u32 r = cx->sh_max16 - sh;
    rec[QK_XP_R] = r > QK_XQ_MAX_REL ? QK_XQ_MAX_REL : r;
    rec[QK_XP_A] = (u64)sum;
    return 0;
}

/* one block entry: the 8-bit records when the product reads them, the
 * 16-bit ones when it reads those (qk_quant_x) */
static long qk_quant_entry_cb(u64 i, void *vctx)
{
    const struct qk_xq_ctx *base = vctx;
    struct qk_xq_ctx cx = {.b = base->b + (u32)i, .len = base->len, .records = base->records};
    struct qk_scalars *sc = QK_LOOKUP(scal, cx.b);
    if (!sc)
        return 1;
    QK_LOOP(cx.len / QK_XQ_BLOCK, qk_act_shift_cb, &cx);
    if (C.has_i4 && (cx.records & 1)) {
        QK_LOOP(cx.len / QK_XQ_BLOCK, qk_xq_values_cb, &cx);
        sc->xq_exp = sc->x_exp + (s32)cx.sh_max - QK_XQ_FRAC;
    }
    if (C.w_enc == QK_ENC_I8G && (cx.records & 2)) {
        QK_LOOP(cx.len / QK_XQ_BLOCK, qk_xp_values_cb, &cx);
        sc->xp_exp = sc->x_exp + (s32)cx.sh_max16 - QK_XP_FRAC;
    }
    return 0;
}

/* The act records product `mode` of `layer` reads: bit 0, the 8-bit ones
 * (an i4g or i6 lanes matrix among its tensors), bit 1, the 16-bit ones
 * (an i8g matrix). The host's side is qp_plan_reads_act_records. */
QM_INLINE u32 qk_act_records(u32 layer, u32 mode)
{
    if (mode == QK_MV_LOGITS) {
        u32 narrow = (C.lm_i4 | C.lm_i6) != 0;
        return narrow | (C.w_enc == QK_ENC_I8G && !narrow) << 1;
    }
    u32 roles = mode == QK_MV_QKV ? 0x7 : mode == QK_MV_O ? 0x8 : mode == QK_MV_GATE_UP ? 0x30 : 0x40;
    u32 i4 = C.w_i4[QK_IDX(layer, QK_MAX_LAYERS)] & roles;
    return (i4 != 0) | (C.w_enc == QK_ENC_I8G && i4 != roles) << 1;
}

/* the act vector of the product a->mode is about to run */
QM_INLINE int qk_quant_x(const struct qk_args *a)
{
    u32 len = a->mode == QK_MV_O ? C.q_dim : a->mode == QK_MV_DOWN ? C.inter : C.hidden;
    if (a->mode > QK_MV_LOGITS || !qk_entries_ok(a))
        return -1;
    struct qk_xq_ctx cx = {.b = a->b0, .len = len, .records = qk_act_records(a->layer, a->mode)};
    if (!cx.records)
        return -1;
    QK_LOOP(a->nb, qk_quant_entry_cb, &cx);
    return 0;
}

/* ---- matvec: rows of a weight map times x --------------------------- */

struct qk_mv_ctx {
    u32 first_group;    /* map key of the range's first 4-row group */
    u32 first_row;      /* output row of that group */
    u32 mode;
    u32 layer;
    u32 b0, nb;         /* block entries */
    u32 group;          /* the 4-row group the entry loop is on */
    u32 amax_slot;      /* QK_MV_LOGITS: this invocation's argmax slot */
    u32 scratch;        /* i4g blocks: the thread's unpk entry */
    u32 pad;
    u64 bad;            /* an output outside the Q32 range (qm_outside) */
    s64 acc[4];         /* the 4 rows' sums of the entry in progress, chunk by chunk */
};

/* Branches in a bpf_loop callback test the loop index, never a flag the
 * caller initialised: the verifier can take such a flag for the constant it
 * started as and remove the branch it never saw taken (observed here). */

/* Stores or adds the 4 results of a group where its mode sends them. */
/* The exponent adjustment of row r's tensor: 0 for q24; for i8g,
 * 24 + QK_I8_GROUP_SHIFT - E (value = acc * 2^(x_exp + shift - E)). */
QM_INLINE s32 qk_row_adj(u32 mode, u32 layer, u32 r)
{
    u32 role;
    if (mode == QK_MV_LOGITS)
        return qk_exp_const(C.lm_adj);
    if (mode == QK_MV_QKV)
        role = r < C.q_dim ? 0 : r < C.q_dim + C.kv_dim ? 1 : 2;
    else if (mode == QK_MV_GATE_UP)
        role = r < C.inter ? 4 : 5;
    else
        role = mode == QK_MV_O ? 3 : 6;
    return qk_exp_const(C.w_adj[QK_IDX(layer * 8 + role, QK_MAX_LAYERS * 8)]);
}

/* argmax partial of entry b in this invocation's slot */
QM_INLINE struct qk_argmax *qk_mv_amax(const struct qk_mv_ctx *cx, u32 b)
{
    return QK_LOOKUP(amax, b * QK_MAX_ARGMAX_SLOTS + cx->amax_slot);
}

/* Stores or adds the 4 results of a group of entry b where its mode sends
 * them; x_exp: the exponent of that entry's act vector. */
QM_INLINE void qk_mv_emit(struct qk_mv_ctx *cx, u32 b, u32 r, const s64 *acc, s32 x_exp)
{
    s64 v[4];
    x_exp += qk_row_adj(cx->mode, cx->layer, r);
QK_UNROLL
    for (int k = 0; k < 4; k++)
        v[k] = qm_acc_to_q32_checked(acc[k], x_exp, &cx->bad);
    if (cx->mode == QK_MV_QKV) {
        s64 *out = QK_LOOKUP(qkv, b);
        if (out && r <= C.q_dim + 2 * C.kv_dim - 4)
QK_UNROLL
            for (int k = 0; k < 4; k++)
                out[r + k] = v[k];
    } else if (cx->mode == QK_MV_GATE_UP) {
        s64 *out = QK_LOOKUP(gu, b);
        if (out && r <= 2 * C.inter - 4)
QK_UNROLL
            for (int k = 0; k < 4; k++)
                out[r + k] = v[k];
    } else if (cx->mode == QK_MV_LOGITS) {
        /* rows ascend: a strict > keeps the lowest index of a tie */
        s64 *out = QK_LOOKUP(logits, b);
        struct qk_argmax *m = qk_mv_amax(cx, b);
        if (out && m && r <= C.vocab - 4)
QK_UNROLL
            for (int k = 0; k < 4; k++) {
                out[r + k] = v[k];
                if (v[k] > m->value) {
                    m->value = v[k];
                    m->index = r + k;
                }
            }
    } else {
        s64 *h = QK_LOOKUP(h, b);
        if (h && r <= C.hidden - 4)
QK_UNROLL
            for (int k = 0; k < 4; k++) {
                h[r + k] = (s64)((u64)h[r + k] + (u64)v[k]);
                cx->bad |= qm_outside(h[r + k], QM_Q32_LIMIT_BITS);
            }
    }
}

/* a chunk of a q24 block times the act vector */
QM_INLINE void qk_dot4_q24_chunk(const void *blk, const void *x, u32 cols, u32 c0, s64 *acc)
{
    (void)cols;
    qk_dot4_chunk((const s32 *)blk, (const s64 *)x, c0, acc);
}

/* column chunks of a row of cols columns */
QM_INLINE u32 qk_chunks_of(u32 cols)
{
    return cols >> C.col_chunk_shift;
}

/* 0 for the first chunk of a row, 1 for the others; branch-free, so the
 * verifier walks a chunk's products once, not once per case */
QM_INLINE s64 qk_not_first(u32 t)
{
    return (s64)((u64)-(s64)t >> 63);
}

/* acc = part on a row's first chunk t, acc += part on the others */
QM_INLINE void qk_acc_chunk(s64 *acc, const s64 *part, u32 t)
{
    s64 keep = qk_not_first(t);
QK_UNROLL
    for (int k = 0; k < 4; k++)
        acc[k] = acc[k] * keep + part[k];
}

/* A bpf_loop callback over 4-row blocks of `map` with `cols` columns
 * (name), and the loop it runs for each block over its (entry, column
 * chunk) pairs (name##_chunk): `dot` adds a chunk of the block (the value
 * of `map` at `key`) times an entry's value of map `input` (x for q24, xq
 * for i4g, i6 lanes and i8g) into cx->acc, and the entry's last chunk
 * emits the 4 rows at that entry's exponent `expf` (a qk_scalars field). A
 * block is read from memory once for the whole block of positions; the
 * entries after the first find it in the CPU's cache. */
#define QK_DEFINE_MV_CHUNK_CB(name, map, key, cols, input, dot, expf)     \
    static long name##_chunk(u64 j, void *vctx)                           \
    {                                                                     \
        struct qk_mv_ctx *cx = vctx;                                      \
        u32 n = qk_chunks_of(cols), e = (u32)j / n, t = (u32)j - e * n;   \
        u32 b = cx->b0 + e;                                               \
        const void *blk = QK_LOOKUP(map, key);                            \
        const void *in = QK_LOOKUP(input, b);                             \
        if (!blk || !in || t >= n || cols > C.act_len)                    \
            return 1;                                                     \
        s64 part[4] = {0, 0, 0, 0};                                       \
        dot(blk, in, cols, t << C.col_chunk_shift, part);                 \
        qk_acc_chunk(cx->acc, part, t);                                   \
        if (t + 1 < n)                                                    \
            return 0;                                                     \
        const struct qk_scalars *sc = QK_LOOKUP(scal, b);                 \
        if (!sc)                                                          \
            return 1;                                                     \
        qk_mv_emit(cx, b, cx->first_row + 4 * cx->group, cx->acc, sc->expf);  \
        return 0;                                                         \
    }
#define QK_DEFINE_MV_CB_OF(name, map, cols, input, dot, expf)              \
    QK_DEFINE_MV_CHUNK_CB(name, map, cx->first_group + cx->group, cols, input, dot, expf) \
    static long name(u64 i, void *vctx)                                   \
    {                                                                     \
        struct qk_mv_ctx *cx = vctx;                                      \
        cx->group = (u32)i;                                               \
        QK_LOOP(cx->nb * qk_chunks_of(cols), name##_chunk, cx);           \
        return 0;                                                         \
    }
#define QK_DEFINE_MV_CB(name, map, cols) QK_DEFINE_MV_CB_OF(name, map, cols, x, qk_dot4_q24_chunk, x_exp)
#define QK_DEFINE_MV8_CB(name, map, cols) QK_DEFINE_MV_CB_OF(name, map, cols, xq, qk_dot4_i8_chunk, xp_exp)
#define QK_DEFINE_MV4_CB(name, map, cols) QK_DEFINE_MV_CB_OF(name, map, cols, xq, qk_dot4_i4_chunk, xq_exp)

/* The unpacking pass of a block of positions' product: each 4-row block
 * of `map` unpacked once into the thread's scratch, a column chunk per call */
#define QK_DEFINE_UNPACK_CB(name, map, cols, unpack_call)                 \
    static long name##_unpack(u64 t, void *vctx)                          \
    {                                                                     \
        struct qk_mv_ctx *cx = vctx;                                      \
        const void *blk = QK_LOOKUP(map, cx->first_group + cx->group);    \
        u64 *u = QK_LOOKUP(unpk, cx->scratch);                            \
        if (!blk || !u || t >= qk_chunks_of(cols) || cols > C.act_len)    \
            return 1;                                                     \
        unpack_call;                                                      \
        return 0;                                                         \
    }

/* i4g and i8g for more than one position (qk_unpack_i4_chunk,
 * qk_unpack_i8_chunk): each 4-row block unpacked once, then every (entry,
 * column chunk) of its four rows from the thread's scratch (name##_chunk) */
#define QK_DEFINE_MVB_CB(name, map, cols, unpack, dot, expf)              \
    QK_DEFINE_UNPACK_CB(name, map, cols, unpack(blk, u, cols, (u32)t << C.col_chunk_shift)) \
    QK_DEFINE_MV_CHUNK_CB(name, unpk, cx->scratch, cols, xq, dot, expf)   \
    static long name(u64 i, void *vctx)                                   \
    {                                                                     \
        struct qk_mv_ctx *cx = vctx;                                      \
        cx->group = (u32)i;                                               \
        QK_LOOP(qk_chunks_of(cols), name##_unpack, cx);                   \
        QK_LOOP(cx->nb * qk_chunks_of(cols), name##_chunk, cx);           \
        return 0;                                                         \
    }
#define QK_DEFINE_MV4_BLOCK_CB(name, map, cols)                           \
    QK_DEFINE_MVB_CB(name, map, cols, qk_unpack_i4_chunk, qk_dot4_i4_unpacked, xq_exp)
#define QK_DEFINE_MV8_BLOCK_CB(name, map, cols)                           \
    QK_DEFINE_MVB_CB(name, map, cols, qk_unpack_i8_chunk, qk_dot4_i8_unpacked, xp_exp)

/* i6 lanes for more than one position (qk_unpack_i6_chunk): each 4-row
 * block unpacked once, then every (entry, row, column chunk) from it
 * (name##_row): one row's chunk per call, so the verifier walks one row's
 * loop, not four */
#define QK_DEFINE_MV6_BLOCK_CB(name, map, cols)                           \
    QK_DEFINE_UNPACK_CB(name, map, cols,                                  \
                        qk_unpack_i6_chunk(blk, u, (s64 *)u + QK_UNPK_DM_OFF(C.act_len), cols, \
                                           (u32)t << C.col_chunk_shift)) \
    static long name##_row(u64 j, void *vctx)                             \
    {                                                                     \
        struct qk_mv_ctx *cx = vctx;                                      \
        u32 n = qk_chunks_of(cols), q = (u32)j / n, t = (u32)j - q * n;   \
        u32 k = q & 3, b = cx->b0 + (q >> 2);                             \
        const u64 *u = QK_LOOKUP(unpk, cx->scratch);                      \
        const u8 *in = QK_LOOKUP(xq, b);                                  \
        if (!u || !in || t >= n || cols > C.act_len)                      \
            return 1;                                                     \
        s64 part = qk_dot_i6_row_unpacked(u, (const s64 *)u + QK_UNPK_DM_OFF(C.act_len), in, k & 3, cols, t << C.col_chunk_shift); \
        cx->acc[k & 3] = cx->acc[k & 3] * qk_not_first(t) + part;         \
        if (t + 1 < n || k != 3)                                          \
            return 0;                                                     \
        const struct qk_scalars *sc = QK_LOOKUP(scal, b);                 \
        if (!sc)                                                          \
            return 1;                                                     \
        qk_mv_emit(cx, b, cx->first_row + 4 * cx->group, cx->acc, sc->xq_exp); \
        return 0;                                                         \
    }                                                                     \
    static long name(u64 i, void *vctx)                                   \
    {                                                                     \
        struct qk_mv_ctx *cx = vctx;                                      \
        cx->group = (u32)i;                                               \
        QK_LOOP(qk_chunks_of(cols), name##_unpack, cx);                   \
        QK_LOOP(cx->nb * 4 * qk_chunks_of(cols), name##_row, cx);         \
        return 0;                                                         \
    }

QK_DEFINE_MV_CB(qk_mv_hid_cb, w_hid, C.hidden)
QK_DEFINE_MV_CB(qk_mv_o_cb, w_o, C.q_dim)
QK_DEFINE_MV_CB(qk_mv_down_cb, w_down, C.inter)
QK_DEFINE_MV_CB(qk_mv_work_hid_cb, work, C.hidden)
QK_DEFINE_MV_CB(qk_mv_work_o_cb, work, C.q_dim)
QK_DEFINE_MV_CB(qk_mv_work_down_cb, work, C.inter)
QK_DEFINE_MV8_CB(qk_mv8_hid_cb, w_hid, C.hidden)
QK_DEFINE_MV8_CB(qk_mv8_o_cb, w_o, C.q_dim)
QK_DEFINE_MV8_CB(qk_mv8_down_cb, w_down, C.inter)
QK_DEFINE_MV8_CB(qk_mv8_work_hid_cb, work, C.hidden)
QK_DEFINE_MV8_CB(qk_mv8_work_o_cb, work, C.q_dim)
QK_DEFINE_MV8_CB(qk_mv8_work_down_cb, work, C.inter)
QK_DEFINE_MV4_CB(qk_mv4_hid_cb, w4_hid, C.hidden)
QK_DEFINE_MV4_CB(qk_mv4_o_cb, w4_o, C.q_dim)
QK_DEFINE_MV4_CB(qk_mv4_down_cb, w4_down, C.inter)
QK_DEFINE_MV4_CB(qk_mv4_work_hid_cb, work, C.hidden)
QK_DEFINE_MV4_CB(qk_mv4_work_o_cb, work, C.q_dim)
QK_DEFINE_MV4_CB(qk_mv4_work_down_cb, work, C.inter)
QK_DEFINE_MV_CB_OF(qk_mv6_hid_cb, w_hid, C.hidden, xq, qk_dot4_i6_chunk, xq_exp)
QK_DEFINE_MV_CB_OF(qk_mv6_work_hid_cb, work, C.hidden, xq, qk_dot4_i6_chunk, xq_exp)
QK_DEFINE_MV4_BLOCK_CB(qk_mv4b_hid_cb, w4_hid, C.hidden)
QK_DEFINE_MV4_BLOCK_CB(qk_mv4b_o_cb, w4_o, C.q_dim)
QK_DEFINE_MV4_BLOCK_CB(qk_mv4b_down_cb, w4_down, C.inter)
QK_DEFINE_MV4_BLOCK_CB(qk_mv4b_work_hid_cb, work, C.hidden)
QK_DEFINE_MV4_BLOCK_CB(qk_mv4b_work_o_cb, work, C.q_dim)
QK_DEFINE_MV4_BLOCK_CB(qk_mv4b_work_down_cb, work, C.inter)
QK_DEFINE_MV8_BLOCK_CB(qk_mv8b_hid_cb, w_hid, C.hidden)
QK_DEFINE_MV8_BLOCK_CB(qk_mv8b_o_cb, w_o, C.q_dim)
QK_DEFINE_MV8_BLOCK_CB(qk_mv8b_down_cb, w_down, C.inter)
QK_DEFINE_MV8_BLOCK_CB(qk_mv8b_work_hid_cb, work, C.hidden)
QK_DEFINE_MV8_BLOCK_CB(qk_mv8b_work_o_cb, work, C.q_dim)
QK_DEFINE_MV8_BLOCK_CB(qk_mv8b_work_down_cb, work, C.inter)
QK_DEFINE_MV6_BLOCK_CB(qk_mv6b_hid_cb, w_hid, C.hidden)
QK_DEFINE_MV6_BLOCK_CB(qk_mv6b_work_hid_cb, work, C.hidden)

/* QK_MV_LOGITS: entry b's argmax starts below every logit, at the first row */
static long qk_mv_amax_init_cb(u64 j, void *vctx)
{
    struct qk_mv_ctx *cx = vctx;
    struct qk_argmax *m = qk_mv_amax(cx, cx->b0 + (u32)j);
    if (!m)
        return 1;
    m->value = (s64)(1ull << 63);
    m->index = cx->first_row;
    m->valid = 1;
    return 0;
}

/* The matrix holding rows [begin, end) of a product: its role (the index
 * into w_key / w_i4; 7 = the vocabulary projection), its first row in the
 * product's row space and its row count. */
struct qk_mv_tensor {
    u32 role, row0, rows;
};

QM_INLINE int qk_mv_tensor_of(u32 mode, u32 begin, struct qk_mv_tensor *t)
{
    switch (mode) {
    case QK_MV_QKV:
        if (begin < C.q_dim)
            *t = (struct qk_mv_tensor){0, 0, C.q_dim};
        else if (begin < C.q_dim + C.kv_dim)
            *t = (struct qk_mv_tensor){1, C.q_dim, C.kv_dim};
        else
            *t = (struct qk_mv_tensor){2, C.q_dim + C.kv_dim, C.kv_dim};
        return 0;
    case QK_MV_GATE_UP:
        if (begin < C.inter)
            *t = (struct qk_mv_tensor){4, 0, C.inter};
        else
            *t = (struct qk_mv_tensor){5, C.inter, C.inter};
        return 0;
    case QK_MV_O: *t = (struct qk_mv_tensor){3, 0, C.hidden}; return 0;
    case QK_MV_DOWN: *t = (struct qk_mv_tensor){6, 0, C.hidden}; return 0;
    case QK_MV_LOGITS: *t = (struct qk_mv_tensor){7, 0, C.vocab}; return 0;
    default: return -1;
    }
}

/* Rows [begin, end) (multiples of 4, inside one matrix) of the mode's
 * product. `streamed` and `i4` are compile-time constants: resident or
 * --stream, wide (q24/i8g) or i4g matrices are four programs, each within
 * the verifier's budget on its own; a program refuses a matrix of the
 * other kind. */
QM_INLINE int qk_matvec_impl(const struct qk_args *a, const bool streamed, const bool i4, const bool block)
{
    struct qk_mv_tensor t;
    if ((a->layer >= C.n_layers && a->mode != QK_MV_LOGITS) || qk_mv_tensor_of(a->mode, a->begin, &t))
        return -1;
    if (a->begin >= a->end || a->end > t.row0 + t.rows || (a->begin | a->end) & 3)
        return -1;
    u32 slot = (u32)QK_IDX(a->layer * 8 + t.role, QK_MAX_LAYERS * 8);
    u32 key = t.role == 7 ? C.lm_key : C.w_key[slot];
    /* i6 lanes read the quantised act vector: the i4g programs run them */
    bool is_i4 = t.role == 7 ? (C.lm_i4 | C.lm_i6) != 0 : ((C.w_i4[QK_IDX(a->layer, QK_MAX_LAYERS)] >> t.role) & 1) != 0;
    bool is_i6 = t.role == 7 && C.lm_i6 != 0;
    struct qk_scalars *sc = QK_LOOKUP(scal, 0);   /* the range flag lives in entry 0 */
    if (!sc || is_i4 != i4 || a->streamed != streamed || !qk_entries_ok(a) ||
        a->slot >= QK_MAX_ARGMAX_SLOTS)
        return -1;
    u32 mode = qk_reload(&a->mode);
    s64 zero = qk_unknown_zero(a);
    struct qk_mv_ctx cx = {.first_group = streamed ? a->work_key : key + (a->begin - t.row0) / 4,
                           .first_row = a->begin, .mode = mode, .layer = a->layer, .b0 = a->b0, .nb = a->nb,
                           .group = (u32)zero, .amax_slot = a->slot, .scratch = a->scratch, .bad = (u64)zero,
                           .acc = {zero, zero, zero, zero}};
    u32 n = (a->end - a->begin) / 4;
    /* the wide programs take an i8g block of positions from the thread's
     * scratch too (the i4g ones have programs of their own) */
    bool wide_block = !i4 && a->nb > 1;
    if (mode == QK_MV_LOGITS)
        QK_LOOP(a->nb, qk_mv_amax_init_cb, &cx);
/* the loop over the groups with the callback of the mode in family fam */
#define QK_MV_RUN(fam)                                                     \
    do {                                                                  \
        if (mode == QK_MV_O)                                              \
            QK_LOOP(n, fam##_o_cb, &cx);                                  \
        else if (mode == QK_MV_DOWN)                                      \
            QK_LOOP(n, fam##_down_cb, &cx);                               \
        else                                                              \
            QK_LOOP(n, fam##_hid_cb, &cx);                                \
    } while (0)
    if (i4 && is_i6 && block && streamed)
        QK_LOOP(n, qk_mv6b_work_hid_cb, &cx);
    else if (i4 && is_i6 && block)
        QK_LOOP(n, qk_mv6b_hid_cb, &cx);
    else if (i4 && is_i6 && streamed)
        QK_LOOP(n, qk_mv6_work_hid_cb, &cx);
    else if (i4 && is_i6)
        QK_LOOP(n, qk_mv6_hid_cb, &cx);
    else if (streamed && block)
        QK_MV_RUN(qk_mv4b_work);
    else if (block)
        QK_MV_RUN(qk_mv4b);
    else if (streamed && i4)
        QK_MV_RUN(qk_mv4_work);
    else if (streamed && C.w_enc == QK_ENC_I8G && wide_block)
        QK_MV_RUN(qk_mv8b_work);
    else if (streamed && C.w_enc == QK_ENC_I8G)
        QK_MV_RUN(qk_mv8_work);
    else if (streamed)
        QK_MV_RUN(qk_mv_work);
    else if (i4)
        QK_MV_RUN(qk_mv4);
    else if (C.w_enc == QK_ENC_I8G && wide_block)
        QK_MV_RUN(qk_mv8b);
    else if (C.w_enc == QK_ENC_I8G)
        QK_MV_RUN(qk_mv8);
    else
        QK_MV_RUN(qk_mv);
#undef QK_MV_RUN
    qk_flag_range(sc, cx.bad);
    return 0;
}

QM_INLINE int qk_matvec(const struct qk_args *a)
{
    return qk_matvec_impl(a, false, false, false);
}

QM_INLINE int qk_matvec_stream(const struct qk_args *a)
{
    return qk_matvec_impl(a, true, false, false);
}

QM_INLINE int qk_matvec4(const struct qk_args *a)
{
    return qk_matvec_impl(a, false, true, false);
}

QM_INLINE int qk_matvec4_stream(const struct qk_args *a)
{
    return qk_matvec_impl(a, true, true, false);
}

/* i4g for a block of positions (qk_unpack_i4): programs of their own, so
 * that each stays within the verifier's budget at the wider shapes */
QM_INLINE int qk_matvec4b(const struct qk_args *a)
{
    return qk_matvec_impl(a, false, true, true);
}

QM_INLINE int qk_matvec4b_stream(const struct qk_args *a)
{
    return qk_matvec_impl(a, true, true, true);
}

/* ---- qk_rope: q/k head norms, RoPE, K and V into the cache ---------- */

struct qk_rope_ctx {
    u32 layer, pos;     /* pos: of block entry b */
    u32 b;
    u32 kv0;            /* KV cache row of position 0 (the slot's layer: qk_kv_row0) */
};

/* RMSNorm of one head of qkv in place, as mantissas of at most out_bits
 * bits; returns the exponent. */
QM_INLINE s32 qk_head_norm(s64 *v, const s32 *g, s32 g_exp, u32 out_bits)
{
    u64 max = 0, sumsq = 0;
    for (u32 i = 0; i < C.head_dim; i++)
        qk_max_abs(&max, v[i]);
    u32 shift = qm_act_shift(max);
    for (u32 i = 0; i < C.head_dim; i++) {
        s64 t = qm_rshift_round(v[i], shift);
        sumsq += (u64)(t * t);
    }
    struct qm_sf inv = qk_rms_inv(sumsq, shift, QK_SF(inv_head_dim), QK_SF(eps));
    u64 zmax = 0;
    for (u32 i = 0; i < C.head_dim; i++)
        qk_max_abs(&zmax, qk_rms_z(v[i], inv, g[i]));
    u32 out_shift = qm_shift_to_bits(zmax, out_bits);
    for (u32 i = 0; i < C.head_dim; i++)
        v[i] = qm_rshift_round(qk_rms_z(v[i], inv, g[i]), out_shift);
    return qk_rms_exp(inv, g_exp, out_shift);
}

/* rotate-half RoPE of the mantissas m[0..d) (Q30 cos/sin) into slot i, i+d/2 */
QM_INLINE void qk_rope_pair(const s64 *m, const s32 *cs, u32 i, s64 *lo, s64 *hi)
{
    u32 half = C.head_dim / 2;
    s64 c = cs[2 * i], s = cs[2 * i + 1];
    *lo = qm_rshift_round(m[i] * c - m[i + half] * s, 30);
    *hi = qm_rshift_round(m[i + half] * c + m[i] * s, 30);
}

struct qk_kext_ctx {
    u32 layer, kv_row, head;    /* kv_row: the position's KV cache row; head: query head, or K head */
    u32 b;                      /* block entry */
    s32 m_exp, c_exp;           /* K: the mantissas' exponent, the vector's step */
};

/* The query's share of the donors' lowest bits (qrun_abi.h, klayout):
 * corr[e] = round(q_d / 2^(x_d - j)) - q_e for donor e of channel d. */
static long qk_query_corr_cb(u64 i, void *vctx)
{
    struct qk_kext_ctx *cx = vctx;
    u32 k = (u32)i, head = cx->head;
    s64 *q = QK_LOOKUP(qrot, cx->b);
    const s32 *kl = QK_LOOKUP(klayout, cx->layer);
    if (!q || !kl || k >= C.head_dim || head >= C.n_heads)
        return 1;
    q += head * C.head_dim;
    const s32 *ext = kl + QK_KL_EXT(C.head_dim);
    u32 e = (u32)ext[k], d = QK_KEXT_PARTNER(e);
    s64 corr = 0;
    if (QK_KEXT_DONOR(e) && d < C.head_dim)
        corr = qm_rshift_round(q[d], (QK_KEXT_BITS(ext[d]) - QK_KEXT_BIT(e)) & 31) - q[k];
    q[C.q_dim + k] = corr;
    return 0;
}

static int qk_rotate_query(u32 b, u32 layer, u32 head, const s64 *v, const s32 *cs, const s32 *kl, s32 e)
{
    u32 half = C.head_dim / 2;
    s64 *q = QK_LOOKUP(qrot, b);
    struct qk_scalars *sc = QK_LOOKUP(scal, b);
    if (!q || !sc || head >= C.n_heads || head >= QK_MAX_HEADS)
        return 1;
    q += head * C.head_dim;
    for (u32 k = 0; k < half; k++) {
        s64 lo, hi;
        u32 up = (u32)(QK_KBOOST_MAX - kl[k]) & 15;
        qk_rope_pair(v, cs, k, &lo, &hi);
        q[k] = (s64)((u64)lo << up);
        q[k + half] = (s64)((u64)hi << up);
    }
    sc->q_exp[QK_IDX(head, QK_MAX_HEADS)] = e;
    if (kl[QK_KL_DONORS(C.head_dim)]) {
        struct qk_kext_ctx x = {.layer = layer, .head = head, .b = b};
        QK_LOOP(C.head_dim, qk_query_corr_cb, &x);
    }
    return 0;
}

/* K channel k at 2^x finer steps than the vector's (m_exp: the mantissa's
 * exponent, c_exp: the vector's step), |result| <= 32767 * 2^x */
QM_INLINE s64 qk_k_fine(s64 m, s32 m_exp, s32 c_exp, u32 x)
{
    u32 l, r;
    qm_cache_shifts(m_exp, c_exp - (s32)x, &l, &r);
    return qm_to_cache_wide(m, l, r, x, 0);
}

/* one int16 entry of a K vector on a layer with extension bits */
static long qk_k_entry_cb(u64 i, void *vctx)
{
    struct qk_kext_ctx *cx = vctx;
    u32 k = (u32)i, layer = cx->layer;
    const s64 *v = QK_LOOKUP(qkv, cx->b);
    const s32 *kl = QK_LOOKUP(klayout, layer);
    s16 *kc = QK_LOOKUP(kcache, cx->kv_row);
    if (!v || !kl || !kc || k >= C.head_dim || cx->head >= C.n_kv_heads)
        return 1;
    v += (C.n_heads + cx->head) * C.head_dim;
    kc += cx->head * C.head_dim;
    const s32 *ext = kl + QK_KL_EXT(C.head_dim);
    u32 e = (u32)ext[k], d = QK_KEXT_PARTNER(e);
    if (QK_KEXT_DONOR(e) && d < C.head_dim) {
        s64 even = qk_k_fine(v[k], cx->m_exp, cx->c_exp + 1, 0);   /* at 2 steps: its lowest bit is lent */
        u32 x = QK_KEXT_BITS(ext[d]) & 15;
        s64 bit = (qk_k_fine(v[d], cx->m_exp, cx->c_exp, x) >> (QK_KEXT_BIT(e) & 15)) & 1;
        kc[k] = (s16)(qm_clamp(even, -16383, 16383) * 2 + bit);
        return 0;
    }
    u32 x = QK_KEXT_BITS(e) & 15;
    kc[k] = (s16)(qk_k_fine(v[k], cx->m_exp, cx->c_exp, x) >> x);   /* floor: the low x bits lie in donors */
    return 0;
}

static int qk_store_k(u32 b, u32 layer, u32 kv_row, u32 kv_head, s64 *v, const s32 *cs, const s32 *kl, s32 e)
{
    u32 half = C.head_dim / 2;
    s16 *kc = QK_LOOKUP(kcache, kv_row);
    if (!kc || kv_head >= C.n_kv_heads || layer >= QK_MAX_LAYERS)
        return 1;
    kc += kv_head * C.head_dim;
    /* K heads have no qrot slot: rotate in place, pairs (k, k + half) are
     * read before written */
    u64 max = 0;
    for (u32 k = 0; k < half; k++) {
        s64 lo, hi;
        u32 up = (u32)kl[k] & 15;
        qk_rope_pair(v, cs, k, &lo, &hi);
        lo = (s64)((u64)lo << up);
        hi = (s64)((u64)hi << up);
        v[k] = lo;
        v[k + half] = hi;
        qk_max_abs(&max, lo);
        qk_max_abs(&max, hi);
    }
    s32 c_exp = qk_exp_const(C.k_exp[QK_IDX(layer, QK_MAX_LAYERS)]);
    u32 sh = qm_cache_vector_shift(max, e, c_exp), l, r;
    if (kl[QK_KL_DONORS(C.head_dim)]) {
        struct qk_kext_ctx x = {.layer = layer, .kv_row = kv_row, .head = kv_head, .b = b, .m_exp = e,
                                .c_exp = c_exp - (s32)sh};
        QK_LOOP(C.head_dim, qk_k_entry_cb, &x);
    } else {
        qm_cache_shifts(e, c_exp - (s32)sh, &l, &r);
        for (u32 k = 0; k < C.head_dim; k++)
            kc[k] = qm_to_cache16(v[k], l, r, 0);
    }
QK_UNROLL
    for (u32 k = 0; k < 4; k++)
        kc[k] = qm_cache_tag(kc[k], k, sh);
    return 0;
}

static long qk_rope_head_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx *cx = vctx;
    u32 head = (u32)i, layer = cx->layer;
    s64 *qkv = QK_LOOKUP(qkv, cx->b);
    const s32 *cs = QK_LOOKUP(rope, cx->pos);
    const s32 *kl = QK_LOOKUP(klayout, layer);   /* plan.c fill_klayout */
    if (!qkv || !cs || !kl || layer >= C.n_layers || layer >= QK_MAX_LAYERS ||
        head >= C.n_heads + C.n_kv_heads || head >= QK_MAX_HEADS)
        return 1;
    u32 is_k = head < C.n_heads ? 0 : 1, norm = 2 * layer + is_k;
    const s32 *g = QK_LOOKUP(qk_norms, norm);
    if (!g || norm >= 2 * QK_MAX_LAYERS)
        return 1;
    s64 *v = qkv + head * C.head_dim;   /* k heads follow the q heads */
    s32 e = qk_head_norm(v, g, qk_exp_const(C.qk_norm_exp[QK_IDX(norm, 2 * QK_MAX_LAYERS)]),
                         is_k ? QK_K_ACT_BITS : QK_Q_ACT_BITS);
    if (!is_k)
        return qk_rotate_query(cx->b, layer, head, v, cs, kl, e);
    return qk_store_k(cx->b, layer, cx->kv0 + cx->pos, head - C.n_heads, v, cs, kl, e);
}

/* V of one KV head into the cache, with its own exponent shift and
 * stretch (qmath.h) */
static long qk_store_v_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx *cx = vctx;
    u32 head = (u32)i, layer = cx->layer;
    const s64 *qkv = QK_LOOKUP(qkv, cx->b);
    s16 *vc = QK_LOOKUP(vcache, cx->kv0 + cx->pos);
    if (!qkv || !vc || head >= C.n_kv_heads || layer >= C.n_layers || layer >= QK_MAX_LAYERS)
        return 1;
    const s64 *src = qkv + C.q_dim + C.kv_dim + head * C.head_dim;
    s16 *dst = vc + head * C.head_dim;
    u64 max = 0;        /* the true largest magnitude: the stretch needs more than its bit length */
    for (u32 d = 0; d < C.head_dim; d++) {
        u64 m = qm_abs(src[d]);
        max = m > max ? m : max;
    }
    s32 c_exp = qk_exp_const(C.v_exp[QK_IDX(layer, QK_MAX_LAYERS)]);
    u32 sh = qm_cache_vector_shift(max, -QM_RESID_FRAC, c_exp), l, r;
    qm_cache_shifts(-QM_RESID_FRAC, c_exp - (s32)sh, &l, &r);
    u32 st = qm_v_stretch((u64)qm_rshift_round((s64)(max << (l & 63)), r));
    for (u32 d = 0; d < C.head_dim; d++)
        dst[d] = qm_to_cache16(src[d], l, r, st);
QK_UNROLL
    for (u32 k = 0; k < 4; k++) {
        dst[k] = qm_cache_tag(dst[k], k, sh);
        dst[4 + k] = qm_cache_tag(dst[4 + k], k, st);
    }
    return 0;
}

/* one block entry: its position's K and V go into the cache */
static long qk_rope_entry_cb(u64 i, void *vctx)
{
    const struct qk_rope_ctx *base = vctx;
    struct qk_rope_ctx cx = {base->layer, base->pos + (u32)i, base->b + (u32)i, base->kv0};
    QK_LOOP(C.n_heads + C.n_kv_heads, qk_rope_head_cb, &cx);
    QK_LOOP(C.n_kv_heads, qk_store_v_cb, &cx);
    return 0;
}

/* the positions of entries [b0, b0 + nb) lie inside the context */
QM_INLINE bool qk_positions_ok(const struct qk_args *a)
{
    return qk_entries_ok(a) && a->pos < C.ctx && a->pos + a->b0 + a->nb <= C.ctx;
}

/* The KV cache row of position 0 of a layer in a sequence slot. With
 * slot < C.slots, layer < C.n_layers and a position below C.ctx the row
 * stays inside the slot's own rows: the plan keeps slots * n_layers * ctx
 * below 2^31, so the sum cannot wrap into another slot's. */
QM_INLINE u32 qk_kv_row0(u32 slot, u32 layer)
{
    return (slot * C.n_layers + layer) * C.ctx;
}

/* a layer of a sequence slot the model has (the kernels that touch the
 * KV cache) */
QM_INLINE bool qk_kv_ok(const struct qk_args *a)
{
    return a->layer < C.n_layers && a->kv_slot < C.slots && qk_positions_ok(a);
}

QM_INLINE int qk_rope_store(const struct qk_args *a)
{
    if (!qk_kv_ok(a))
        return -1;
    struct qk_rope_ctx cx = {a->layer, a->pos + a->b0, a->b0, qk_kv_row0(a->kv_slot, a->layer)};
    QK_LOOP(a->nb, qk_rope_entry_cb, &cx);
    return 0;
}

/* ---- attention: (head, chunk) tasks over the KV cache --------------- */

struct qk_attn_ctx {
    u32 layer, pos, n_chunks, first_task;
    u32 kv0;            /* KV cache row of position 0 (qk_kv_row0) */
    u32 b0, b;          /* block entries: the first of the invocation, the task's */
    u32 head, kv_head, chunk, first, count;
    u32 has_ext;        /* the layer's K has extension bits (klayout) */
    /* per head of the task (head, head + 1): */
    u32 min_shift[2];   /* smallest V vector shift read (qk_attn_part) */
    s64 max_score[2];
    u64 sum[2];
    struct qm_lin lin[2];   /* the score's log2-domain argument (qk_attn_weight) */
};

/* the score of the task's head at position j */
static long qk_attn_score_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, head = cx->head, kv_head = cx->kv_head;
    const s64 *q = QK_LOOKUP(qrot, cx->b);
    const s16 *k = QK_LOOKUP(kcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, cx->b * C.n_heads + head);
    if (!q || !k || !sc || j >= C.ctx || head >= C.n_heads || kv_head >= C.n_kv_heads)
        return 1;
    q += head * C.head_dim;
    k += kv_head * C.head_dim;
    /* blocks of 16 through their own pointers: indexing q[d + t] made clang
     * recompute each address (three times the instructions) */
    s64 s = 0;
    for (u32 d = 0; d < C.head_dim; d += 16) {
        const s64 *qb = q + d;
        const s16 *kb = k + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s += qb[t] * kb[t];
            QK_KEEP(s);
        }
    }
    if (cx->has_ext) {
        const s64 *corr = q + C.q_dim;   /* qk_query_corr_cb */
        for (u32 d = 0; d < C.head_dim; d += 16) {
            const s64 *cb = corr + d;
            const s16 *kb = k + d;
QK_UNROLL
            for (int t = 0; t < 16; t++) {
                s += cb[t] * (kb[t] & 1);
                QK_KEEP(s);
            }
        }
    }
    s = qm_rshift_round(s, qm_cache_untag(k));   /* to the layer's K exponent */
    sc[j] = s;
    if (i == 0 || s > cx->max_score[0])
        cx->max_score[0] = s;
    return 0;
}

/* the scores of the task's two heads at position j, which share their K
 * head: each K entry is read once for both */
static long qk_attn_score2_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, head = cx->head, kv_head = cx->kv_head;
    const s64 *q = QK_LOOKUP(qrot, cx->b);
    const s16 *k = QK_LOOKUP(kcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, cx->b * C.n_heads + head);
    s64 *sc2 = QK_LOOKUP(scores, cx->b * C.n_heads + head + 1);
    if (!q || !k || !sc || !sc2 || j >= C.ctx || head >= C.n_heads - 1 || kv_head >= C.n_kv_heads)
        return 1;
    q += head * C.head_dim;
    const s64 *q2 = q + C.head_dim;
    k += kv_head * C.head_dim;
    s64 s = 0, s2 = 0;
    for (u32 d = 0; d < C.head_dim; d += 16) {
        const s64 *qb = q + d, *qb2 = q2 + d;
        const s16 *kb = k + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s64 kt = kb[t];
            s += qb[t] * kt;
            s2 += qb2[t] * kt;
            QK_KEEP(s);
            QK_KEEP(s2);
        }
    }
    if (cx->has_ext) {
        const s64 *corr = q + C.q_dim, *corr2 = q2 + C.q_dim;   /* qk_query_corr_cb */
        for (u32 d = 0; d < C.head_dim; d += 16) {
            const s64 *cb = corr + d, *cb2 = corr2 + d;
            const s16 *kb = k + d;
QK_UNROLL
            for (int t = 0; t < 16; t++) {
                s64 kt = kb[t] & 1;
                s += cb[t] * kt;
                s2 += cb2[t] * kt;
                QK_KEEP(s);
                QK_KEEP(s2);
            }
        }
    }
    u32 sh = qm_cache_untag(k);   /* to the layer's K exponent */
    s = qm_rshift_round(s, sh);
    s2 = qm_rshift_round(s2, sh);
    sc[j] = s;
    sc2[j] = s2;
    if (i == 0 || s > cx->max_score[0])
        cx->max_score[0] = s;
    if (i == 0 || s2 > cx->max_score[1])
        cx->max_score[1] = s2;
    return 0;
}

/* the softmax weight (Q30, before normalising) of head h of the task at
 * position j, whose score is sc[j] */
QM_INLINE u64 qk_attn_weight(struct qk_attn_ctx *cx, u32 h, s64 score)
{
    const struct qm_lin *lin = &cx->lin[h & 1];
    u64 t = (u64)(cx->max_score[h & 1] - score);
    if (t >= lin->t_cut)
        return 0;
    u64 p = qm_exp2_neg_q30(qm_lin_arg_q24(lin, t));
    cx->sum[h & 1] += p;
    return p;
}

/* acc += w * v over a head's entries. |w| <= 2^38 and |v| < 2^15: a
 * chunk's 256 positions keep |acc| < 2^61 */
QM_INLINE void qk_attn_add_v(s64 *acc, const s16 *v, s64 w)
{
    for (u32 d = 0; d < C.head_dim; d += 16) {
        s64 *ab = acc + d;
        const s16 *vb = v + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s64 wv = vb[t];
            QK_MUL_INTO(wv, w);
            ab[t] += wv;
        }
    }
}

static long qk_attn_value_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, kv_head = cx->kv_head;
    const s16 *v = QK_LOOKUP(vcache, cx->kv0 + j);
    const s64 *sc = QK_LOOKUP(scores, cx->b * C.n_heads + cx->head);
    s64 *part = QK_LOOKUP(parts, (cx->b * C.n_heads + cx->head) * C.max_chunks + cx->chunk);
    if (!v || !sc || !part || j >= C.ctx || kv_head >= C.n_kv_heads)
        return 1;
    u64 p = qk_attn_weight(cx, 0, sc[j]);
    if (p == 0)
        return 0;
    v += kv_head * C.head_dim;
    u32 sh = qm_cache_untag(v);   /* this vector's exponent: v_exp - sh */
    if (sh < cx->min_shift[0])
        cx->min_shift[0] = sh;
    qk_attn_add_v(part + QK_PART_ACC, v, qm_v_weight(p, qm_cache_untag(v + 4), sh));
    return 0;
}

/* the V weights of the task's two heads at position j, in place of their
 * scores (qm_v_weight: the softmax weight with the V vector's scale
 * undone; 0 where the softmax underflowed), for qk_attn_value2x2_cb */
static long qk_attn_weight2_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, key = cx->b * C.n_heads + cx->head;
    const s16 *v = QK_LOOKUP(vcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, key), *sc2 = QK_LOOKUP(scores, key + 1);
    u32 kv_head = cx->kv_head;   /* read after the lookups: one register, checked and used */
    if (!v || !sc || !sc2 || j >= C.ctx || kv_head >= C.n_kv_heads)
        return 1;
    v += kv_head * C.head_dim;
    u32 sh = qm_cache_untag(v), st = qm_cache_untag(v + 4);
    u64 p = qk_attn_weight(cx, 0, sc[j]), p2 = qk_attn_weight(cx, 1, sc2[j]);
    if (p && sh < cx->min_shift[0])
        cx->min_shift[0] = sh;
    if (p2 && sh < cx->min_shift[1])
        cx->min_shift[1] = sh;
    sc[j] = p ? qm_v_weight(p, st, sh) : 0;
    sc2[j] = p2 ? qm_v_weight(p2, st, sh) : 0;
    return 0;
}

/* acc += w * v + w1 * v1 over a head's entries, two positions at once:
 * each accumulator is loaded and stored once for both (~4.5 BPF
 * instructions per multiply-add against 5 a position at a time, clang's
 * code spilling a little). The same integer sum
 * as two qk_attn_add_v, whose bound holds in any order. */
QM_INLINE void qk_attn_add_v2(s64 *acc, const s16 *v, s64 w, const s16 *v1, s64 w1)
{
    for (u32 d = 0; d < C.head_dim; d += 16) {
        s64 *ab = acc + d;
        const s16 *vb = v + d, *vb1 = v1 + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s64 wv = vb[t], wv1 = vb1[t];
            QK_MUL_INTO(wv, w);
            QK_MUL_INTO(wv1, w1);
            ab[t] += wv + wv1;
        }
    }
}

/* the values of the task's two heads at positions j = first + 2i and
 * j + 1 (weight 0 past the chunk's end), from qk_attn_weight2_cb's
 * weights: each head's sums take both positions in one pass over its
 * entries, and the two V vectors are in the CPU's cache for the second */
static long qk_attn_value2x2_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 has1 = 2 * (u32)i + 1 < cx->count;
    u32 j = cx->first + 2 * (u32)i, j1 = j + has1, kv_head = cx->kv_head, key = cx->b * C.n_heads + cx->head;
    const s16 *v = QK_LOOKUP(vcache, cx->kv0 + j), *v1 = QK_LOOKUP(vcache, cx->kv0 + j1);
    const s64 *sc = QK_LOOKUP(scores, key), *sc2 = QK_LOOKUP(scores, key + 1);
    s64 *part = QK_LOOKUP(parts, key * C.max_chunks + cx->chunk);
    s64 *part2 = QK_LOOKUP(parts, (key + 1) * C.max_chunks + cx->chunk);
    QK_OPAQUE(j1);   /* its own register, bounded by its own test */
    if (!v || !v1 || !sc || !sc2 || !part || !part2 || j >= C.ctx || j1 >= C.ctx || kv_head >= C.n_kv_heads)
        return 1;
    s64 only = -(s64)has1;   /* all ones when j + 1 is in the chunk */
    s64 w = sc[j], w1 = sc[j1] & only, x = sc2[j], x1 = sc2[j1] & only;
    v += kv_head * C.head_dim;
    v1 += kv_head * C.head_dim;
    if (w | w1)
        qk_attn_add_v2(part + QK_PART_ACC, v, w, v1, w1);
    if (x | x1)
        qk_attn_add_v2(part2 + QK_PART_ACC, v, x, v1, x1);
    return 0;
}

/* starts head h of the task: its scores' scale, its sums, its zeroed partial */
QM_INLINE int qk_attn_head_init(struct qk_attn_ctx *t, const struct qk_scalars *sc, u32 h, u32 head)
{
    s32 score_exp = sc->q_exp[QK_IDX(head, QK_MAX_HEADS)] +
                    qk_exp_const(C.k_exp[QK_IDX(t->layer, QK_MAX_LAYERS)]) - QK_KBOOST_MAX;
    t->lin[h & 1] = qm_lin_make(score_exp, QK_SF(attn_c));
    t->max_score[h & 1] = 0;
    t->sum[h & 1] = 0;
    t->min_shift[h & 1] = QM_CACHE_SH_MAX;
    s64 *part = QK_LOOKUP(parts, (t->b * C.n_heads + head) * C.max_chunks + t->chunk);
    if (!part)
        return -1;
    for (u32 d = 0; d < C.head_dim; d++)
        part[QK_PART_ACC + d] = 0;
    return 0;
}

/* ends head h of the task: its maximum, sum and shift beside its sums */
QM_INLINE int qk_attn_head_done(const struct qk_attn_ctx *t, u32 h, u32 head)
{
    s64 *part = QK_LOOKUP(parts, (t->b * C.n_heads + head) * C.max_chunks + t->chunk);
    if (!part)
        return -1;
    part[0] = t->max_score[h & 1];
    part[1] = (s64)t->sum[h & 1];
    part[2] = t->min_shift[h & 1];
    return 0;
}

/* task (entry, group of C.attn_heads heads, chunk) */
static long qk_attn_task_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 task = cx->first_task + (u32)i, layer = cx->layer, n_chunks = cx->n_chunks;
    u32 pair = C.attn_heads == 2, groups = C.n_heads >> pair;
    if (n_chunks == 0 || layer >= C.n_layers || layer >= QK_MAX_LAYERS)
        return 1;
    u32 per_entry = groups * n_chunks, b = cx->b0 + task / per_entry;
    u32 head = (task % per_entry / n_chunks) << pair, chunk = task % n_chunks, pos = cx->pos + b;
    struct qk_scalars *sc = QK_LOOKUP(scal, b);
    const s32 *kl = QK_LOOKUP(klayout, layer);
    if (!sc || !kl || head + pair >= C.n_heads || head + pair >= QK_MAX_HEADS || chunk >= C.max_chunks)
        return 1;
    if (chunk * QK_ATTN_CHUNK > pos)
        return 0;       /* past this entry's position: the block's later entries have it */
    struct qk_attn_ctx t = *cx;
    t.b = b;
    t.head = head;
    t.chunk = chunk;
    t.kv_head = head / (C.n_heads / C.n_kv_heads);
    t.first = chunk * QK_ATTN_CHUNK;
    t.count = pos + 1 - t.first;
    if (t.count > QK_ATTN_CHUNK)
        t.count = QK_ATTN_CHUNK;
    t.has_ext = kl[QK_KL_DONORS(C.head_dim)] != 0;
    if (qk_attn_head_init(&t, sc, 0, head) || (pair && qk_attn_head_init(&t, sc, 1, head + 1)))
        return 1;
    if (pair) {
        QK_LOOP(t.count, qk_attn_score2_cb, &t);
        QK_LOOP(t.count, qk_attn_weight2_cb, &t);
        QK_LOOP((t.count + 1) / 2, qk_attn_value2x2_cb, &t);
    } else {
        QK_LOOP(t.count, qk_attn_score_cb, &t);
        QK_LOOP(t.count, qk_attn_value_cb, &t);
    }
    if (qk_attn_head_done(&t, 0, head) || (pair && qk_attn_head_done(&t, 1, head + 1)))
        return 1;
    return 0;
}

/* chunks of the block's last entry: every entry's tasks are numbered so */
QM_INLINE u32 qk_attn_chunks(const struct qk_args *a)
{
    return (a->pos + a->b0 + a->nb - 1) / QK_ATTN_CHUNK + 1;
}

/* tasks (entry, head, chunk), entries b0.. in order, [begin, end) of them */
QM_INLINE int qk_attention(const struct qk_args *a)
{
    if (!qk_kv_ok(a))
        return -1;
    u32 n_chunks = qk_attn_chunks(a);
    if (C.attn_heads != 1 && C.attn_heads != 2)
        return -1;
    if (a->begin >= a->end || a->end > a->nb * (C.n_heads >> (C.attn_heads == 2)) * n_chunks)
        return -1;
    struct qk_attn_ctx cx = {.layer = a->layer, .pos = a->pos, .n_chunks = n_chunks, .first_task = a->begin,
                              .kv0 = qk_kv_row0(a->kv_slot, a->layer), .b0 = a->b0};
    QK_LOOP(a->end - a->begin, qk_attn_task_cb, &cx);
    return 0;
}

/* ---- attn_merge: chunks of a head -> its slice of x ----------------- */

struct qk_merge_ctx {
    u32 layer, n_chunks, head, first;
    u32 pos, b;         /* the entry's position and block entry */
    u32 n_heads;        /* heads [first, first + n_heads) */
    u32 parts0;         /* parts key of the entry's head 0, chunk 0 */
    s64 max_score;
    u64 sum;
    s32 score_exp;
    u32 shift;          /* sum normalisation */
    u32 down;           /* bits each partial drops as it is added */
    s32 up;             /* 1: shift left */
    u32 min_shift;      /* smallest V vector shift over all partials */
};

static long qk_merge_max_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    const s64 *part = QK_LOOKUP(parts, cx->parts0 + cx->head * C.max_chunks + (u32)i);
    if (!part)
        return 1;
    if (i == 0 || part[0] > cx->max_score)
        cx->max_score = part[0];
    return 0;
}

/* The output's exponent follows the largest V vector any head read, not
 * the layer's static bound, which sits ~2^9 above it on a stress model:
 * every partial of every head (the same on both threads) bounds it. */
static long qk_merge_bound_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    u32 head = (u32)i / cx->n_chunks, chunk = (u32)i % cx->n_chunks;
    const s64 *part = QK_LOOKUP(parts, cx->parts0 + head * C.max_chunks + chunk);
    if (!part)
        return 1;
    if ((u64)part[2] < cx->min_shift)
        cx->min_shift = (u32)part[2];
    return 0;
}

/* Scales chunk i's partial to the head's max and adds it into chunk 0,
 * 2^down smaller: n_chunks partials below 2^61 each sum below 2^62. */
static long qk_merge_add_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    s64 *part = QK_LOOKUP(parts, cx->parts0 + cx->head * C.max_chunks + (u32)i);
    s64 *base = QK_LOOKUP(parts, cx->parts0 + cx->head * C.max_chunks);
    if (!part || !base)
        return 1;
    u64 t = (u64)(cx->max_score - part[0]);
    u32 f = qm_exp2_neg_q30(qm_log2_arg_q24(t, cx->score_exp, QK_SF(attn_c)));
    cx->sum += (u64)qm_mul_q30(part[1], f);
    for (u32 d = 0; d < C.head_dim; d++) {
        s64 v = qm_rshift_round(qm_mul_q30(part[QK_PART_ACC + d], f), cx->down);
        base[QK_PART_ACC + d] = i == 0 ? v : base[QK_PART_ACC + d] + v;
    }
    return 0;
}

static long qk_merge_head_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    u32 head = cx->first + (u32)i, layer = cx->layer;
    struct qk_scalars *sc = QK_LOOKUP(scal, cx->b);
    s64 *x = QK_LOOKUP(x, cx->b);
    if (!sc || !x || head >= C.n_heads || head >= QK_MAX_HEADS || layer >= C.n_layers ||
        layer >= QK_MAX_LAYERS || C.q_dim > C.act_len)
        return 1;
    struct qk_merge_ctx m = *cx;
    m.head = head;
    m.sum = 0;
    m.score_exp = sc->q_exp[QK_IDX(head, QK_MAX_HEADS)] + qk_exp_const(C.k_exp[QK_IDX(layer, QK_MAX_LAYERS)]) -
                  QK_KBOOST_MAX;
    QK_LOOP(cx->n_chunks, qk_merge_max_cb, &m);
    QK_LOOP(cx->n_chunks, qk_merge_add_cb, &m);
    const s64 *acc = QK_LOOKUP(parts, cx->parts0 + head * C.max_chunks);
    if (!acc || m.sum == 0)
        return 1;
    acc += QK_PART_ACC;
    /* o = acc / sum with the sum brought to [2^38, 2^39): |acc| <= sum *
     * 2^(15 + F - min_shift - down) (F = QM_V_WEIGHT_FRAC), so acc scaled
     * by 2^(8 + min_shift - F + down) stays below 2^62 and o below 2^23 */
    u32 n = qm_bitlen(m.sum);
    u64 sum = n > 39 ? m.sum >> (n - 39) : m.sum << (39 - n);
    s32 sh = 39 - (s32)n + 8 + (s32)m.min_shift - QM_V_WEIGHT_FRAC + (s32)m.down;
    for (u32 d = 0; d < C.head_dim; d++) {
        s64 v = qm_scale_pow2(acc[d], sh);
        u64 mag = qm_abs(v);
        u64 q = (mag + sum / 2) / sum;
        x[head * C.head_dim + d] = v < 0 ? -(s64)q : (s64)q;
    }
    return 0;
}

/* one block entry: heads [first, first + n_heads) of its attention output */
static long qk_merge_entry_cb(u64 i, void *vctx)
{
    const struct qk_merge_ctx *base = vctx;
    u32 b = base->b + (u32)i, pos = base->pos + (u32)i, layer = base->layer;
    struct qk_scalars *sc = QK_LOOKUP(scal, b);
    if (!sc || layer >= C.n_layers)
        return 1;
    struct qk_merge_ctx cx = {.layer = layer, .n_chunks = pos / QK_ATTN_CHUNK + 1, .first = base->first,
                              .pos = pos, .b = b, .parts0 = b * C.n_heads * C.max_chunks,
                              .min_shift = QM_CACHE_SH_MAX};
    cx.down = qm_bitlen(cx.n_chunks - 1);
    QK_LOOP(C.n_heads * cx.n_chunks, qk_merge_bound_cb, &cx);
    QK_LOOP(base->n_heads, qk_merge_head_cb, &cx);
    sc->x_exp = qk_exp_const(C.v_exp[QK_IDX(layer, QK_MAX_LAYERS)]) - 8 - (s32)cx.min_shift;
    return 0;
}

QM_INLINE int qk_attn_merge(const struct qk_args *a)
{
    if (a->layer >= C.n_layers || !qk_positions_ok(a) || a->begin >= a->end || a->end > C.n_heads)
        return -1;
    struct qk_merge_ctx cx = {.layer = a->layer, .first = a->begin, .pos = a->pos + a->b0, .b = a->b0,
                              .n_heads = a->end - a->begin};
    QK_LOOP(a->nb, qk_merge_entry_cb, &cx);
    return 0;
}

/* ---- swiglu: x = act(SiLU(gate) * up) ------------------------------- */

struct qk_swiglu_ctx {
    u64 max_s, max_u, max_p;
    u32 shift_s, shift_u, shift_p;
    u32 b;              /* block entry */
};

/* one element per call: the sigmoid's branches, unrolled, would multiply
 * the verifier's paths past its limit */
static long qk_silu_cb(u64 i, void *vctx)
{
    struct qk_swiglu_ctx *cx = vctx;
    u32 k = (u32)i;
    s64 *gu = QK_LOOKUP(gu, cx->b);
    if (!gu || k >= C.inter)
        return 1;
    s64 *g = gu + k;
    s64 s = qm_mul_q30(*g, qm_sigmoid_q30(*g));
    *g = s;
    qk_max_abs(&cx->max_s, s);
    qk_max_abs(&cx->max_u, g[C.inter]);
    return 0;
}

QM_INLINE s64 qk_swiglu_product(const struct qk_swiglu_ctx *cx, s64 s, s64 u)
{
    return qm_rshift_round(s, cx->shift_s) * qm_rshift_round(u, cx->shift_u);
}

static long qk_swiglu_max_cb(u64 i, void *vctx)
{
    struct qk_swiglu_ctx *cx = vctx;
    u32 tile = (u32)i;
    const s64 *gu = QK_LOOKUP(gu, cx->b);
    if (!gu || tile >= C.inter / 16)
        return 1;
    const s64 *g = gu + tile * 16, *u = gu + C.inter + tile * 16;
QK_UNROLL
    for (int j = 0; j < 16; j++)
        qk_max_abs(&cx->max_p, qk_swiglu_product(cx, g[j], u[j]));
    return 0;
}

static long qk_swiglu_out_cb(u64 i, void *vctx)
{
    struct qk_swiglu_ctx *cx = vctx;
    u32 tile = (u32)i;
    const s64 *gu = QK_LOOKUP(gu, cx->b);
    s64 *x = QK_LOOKUP(x, cx->b);
    if (!gu || !x || tile >= C.inter / 16 || C.inter > C.act_len)
        return 1;
    const s64 *g = gu + tile * 16, *u = gu + C.inter + tile * 16;
    s64 *out = x + tile * 16;
QK_UNROLL
    for (int j = 0; j < 16; j++)
        out[j] = qm_rshift_round(qk_swiglu_product(cx, g[j], u[j]), cx->shift_p);
    return 0;
}

/* one block entry */
static long qk_swiglu_entry_cb(u64 i, void *vctx)
{
    const struct qk_swiglu_ctx *base = vctx;
    struct qk_swiglu_ctx cx = {.b = base->b + (u32)i};
    struct qk_scalars *sc = QK_LOOKUP(scal, cx.b);
    if (!sc)
        return 1;
    QK_LOOP(C.inter, qk_silu_cb, &cx);
    cx.shift_s = qm_act_shift(cx.max_s);
    cx.shift_u = qm_act_shift(cx.max_u);
    QK_LOOP(C.inter / 16, qk_swiglu_max_cb, &cx);
    cx.shift_p = qm_act_shift(cx.max_p);
    QK_LOOP(C.inter / 16, qk_swiglu_out_cb, &cx);
    sc->x_exp = (s32)cx.shift_s - QM_RESID_FRAC + (s32)cx.shift_u - QM_RESID_FRAC + (s32)cx.shift_p;
    return 0;
}

QM_INLINE int qk_swiglu(const struct qk_args *a)
{
    if (!qk_entries_ok(a))
        return -1;
    struct qk_swiglu_ctx cx = {.b = a->b0};
    QK_LOOP(a->nb, qk_swiglu_entry_cb, &cx);
    return 0;
}

/* ---- argmax_reduce: the vocabulary pass's slots -> one token -------- */

struct qk_reduce_ctx {
    s64 value;
    u32 index;
    u32 b;              /* block entry */
    u32 n_slots, pad;
};

static long qk_reduce_cb(u64 i, void *vctx)
{
    struct qk_reduce_ctx *cx = vctx;
    const struct qk_argmax *m = QK_LOOKUP(amax, cx->b * QK_MAX_ARGMAX_SLOTS + (u32)i);
    if (!m)
        return 1;
    if (i == 0 || m->value > cx->value || (m->value == cx->value && m->index < cx->index)) {
        cx->value = m->value;
        cx->index = m->index;
    }
    return 0;
}

/* one block entry: its slots -> its token */
static long qk_reduce_entry_cb(u64 i, void *vctx)
{
    const struct qk_reduce_ctx *base = vctx;
    struct qk_reduce_ctx cx = {.b = base->b + (u32)i};
    struct qk_scalars *sc = QK_LOOKUP(scal, cx.b);
    if (!sc)
        return 1;
    QK_LOOP(base->n_slots, qk_reduce_cb, &cx);
    sc->argmax_index = cx.index;
    sc->argmax_value = cx.value;
    return 0;
}

QM_INLINE int qk_argmax_reduce(const struct qk_args *a)
{
    if (a->n_slots == 0 || a->n_slots > QK_MAX_ARGMAX_SLOTS || !qk_entries_ok(a))
        return -1;
    struct qk_reduce_ctx cx = {.b = a->b0, .n_slots = a->n_slots};
    QK_LOOP(a->nb, qk_reduce_entry_cb, &cx);
    return 0;
}

#undef C
#endif
