/* qk_dot.h - what the dot products of every encoding share: a row is
 * walked a column chunk at a time, and the narrow encodings read the act
 * vector's records (qwen3_abi.h: QK_XQ_* for 8-bit acts, QK_XP_* for 16-bit
 * ones). The encodings' own products are in qk_dot_q24.h, qk_dot_i8.h,
 * qk_dot_i4.h and qk_dot_i6.h; each adds the four rows of one row block
 * (4 rows, one map value), and the _unpacked forms do the same from a row
 * block unpacked once for a block of positions. */
#ifndef QP_QK_DOT_H
#define QP_QK_DOT_H

#include "qk_shims.h"

/* Column chunks. A product's row is walked QK_CFG.col_chunk columns at a time
 * (a power of two up to QK_COL_CHUNK_MAX dividing every width and a
 * multiple of every group size; engine/plan.c), each chunk one bpf_loop callback:
 * the verifier walks a chunk's constant-length loop, so what it processes
 * does not grow with the model's width. The functions below add one
 * chunk, columns [c0, c0 + QK_CFG.col_chunk), into acc[0..3]. Sums are exact
 * integers: the chunks give the bits of one pass over the row. */

/* An 8-bit act word's lanes meet the codes' lanes at the coefficient of
 * 2^48 (qk_dot_i4_lanes, qk_dot_i6_word); adding 2^47 makes the top 16
 * bits that coefficient exactly when the lower ones sum to less than 2^47
 * in magnitude. */
#define QK_XQ_BIAS (1ULL << 47)

/* A row's groups of columns [c0, c0 + QK_CFG.col_chunk) from its first act
 * block on (code words cw, act records xr of rec words, scale d): per
 * group the sum of `block` over its act blocks (16 code words and one act
 * record each) times the group's scale, shifted down by `shift`. `block`
 * is a constant of the caller, so clang inlines it. */
QM_INLINE s64 qk_row_groups(const u64 *cw, const u64 *xr, const s32 *d, u64 lanes,
                            s64 (*block)(const u64 *, const u64 *, u64), u32 rec, u32 shift)
{
    u32 blocks_per_group = QK_CFG.w_group >> 5;
    s64 row = 0;
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w_group_shift); g++) {
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
    return (const u64 *)(xq + QK_XQ_BYTES(QK_CFG.act_len)) + (c0 / QK_XQ_BLOCK) * QK_XP_REC;
}

/* The four rows' sums of an act block's unpacked lane words l[4 j + k]
 * (act word j, row k) times its n act words xr[j], each from `bias`. Each
 * sum is kept right after its product: clang then reuses one register for
 * the products and keeps the act record's pointer out of the stack
 * (scripts/jit_report.sh counts the loop's instructions). */
QM_INLINE void qk_lane_sums_rows(const u64 *l, const u64 *xr, const int n, u64 bias, u64 *s)
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

/* The quantised act vector's record of the block holding column c0 (QK_XQ_*). */
QM_INLINE const u64 *qk_xq_from(const u8 *xq, u32 c0)
{
    return (const u64 *)xq + (c0 / QK_XQ_BLOCK) * QK_XQ_REC;
}

#endif
