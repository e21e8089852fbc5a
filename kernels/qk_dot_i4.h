/* qk_dot_i4.h - i4g matrices (4-bit codes, a scale and a minimum per
 * group) times the act vector's 8-bit records: four multiply-adds per
 * 64-bit multiply in 16-bit lanes, one position at a time from the packed
 * codes, or a block of positions from the block unpacked once. */
#ifndef QP_QK_DOT_I4_H
#define QP_QK_DOT_I4_H

#include "qk_dot.h"

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

/* row k of a block, columns [c0, c0 + QK_CFG.col_chunk): codes[4t + k] is its
 * 16-column chunk t */
QM_INLINE s64 qk_dot_i4_row_chunk(const u64 *codes, const u8 *xq, const s32 *par, u32 k, u32 c0)
{
    const u64 *xr = qk_xq_from(xq, c0);
    const u64 *cw = codes + c0 / 4;
    const s32 *pg = par + (c0 >> QK_CFG.w4_group_shift) * 8;
    u32 blocks_per_group = QK_CFG.w4_group >> 5;
    s64 row = 0;
    if (blocks_per_group == 1)
        return qk_dot_i4_row_g32(cw + k, xr, pg + k, QK_CFG.col_chunk / QK_XQ_BLOCK);
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w4_group_shift); g++) {
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

QM_INLINE void qk_rows_i4_chunk(const void *blk, const void *xq, u32 cols, u32 c0, s64 *acc)
{
    const u64 *codes = (const u64 *)blk;
    const s32 *par = (const s32 *)((const u8 *)blk + 2 * cols);
    for (u32 k = 0; k < 4; k++)
        acc[k] += qk_dot_i4_row_chunk(codes, xq, par, k, c0);
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
 * the integer qk_rows_i4_chunk takes, and the group terms are its own: the
 * same bits. This unpacks columns [c0, c0 + QK_CFG.col_chunk). */
#define QK_I4_LANE_BIAS (8 * 0x0001000100010001ULL)

QM_INLINE void qk_unpack_i4_chunk(const void *blk, u64 *lanes, u32 cols, u32 c0)
{
    const u64 *codes = (const u64 *)blk + c0 / 4;
    const s32 *par = (const s32 *)((const u8 *)blk + 2 * cols) + (c0 >> QK_CFG.w4_group_shift) * 8;
    u64 *l = lanes + QK_UNPK_I4_UNIT * (c0 / QK_XQ_BLOCK);
    u32 blocks_per_group = QK_CFG.w4_group >> 5;
    for (u32 t = 0; t < QK_CFG.col_chunk / 16; t++) {
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
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w4_group_shift); g++) {
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
QM_INLINE void qk_unpacked_i4_block(const u64 *l, const u64 *xr, s64 *sp)
{
    u64 s[4];
    qk_lane_sums_rows(l, xr, 8, QK_XQ_BIAS, s);
    s64 a8 = (s64)xr[QK_XQ_A] * 8;
    u64 r = xr[QK_XQ_R];
QK_UNROLL
    for (int k = 0; k < 4; k++)
        sp[k] = ((((s64)s[k] >> 48) + a8) * (1 << QK_XQ_FRAC)) >> r;
}

/* row[k] += a group's term, from its SP (sp[k]) and SA, parameters d[2 k] */
QM_INLINE void qk_unpacked_i4_group(const s64 *sp, s64 sa, const s64 *d, s64 *row)
{
QK_UNROLL
    for (int k = 0; k < 4; k++)
        row[k] += (d[2 * k] * sp[k] - d[2 * k + 1] * sa) >> QK_I4_GROUP_SHIFT;
}

/* the four rows of an unpacked block (a thread's scratch) times entry xq,
 * columns [c0, c0 + QK_CFG.col_chunk), added into row[0..3] */
QM_INLINE void qk_rows_i4_unpacked(const void *lanes, const void *xq, u32 cols, u32 c0, s64 *row)
{
    const u64 *xr = qk_xq_from((const u8 *)xq, c0);
    const u64 *l = (const u64 *)lanes + QK_UNPK_I4_UNIT * (c0 / QK_XQ_BLOCK);
    (void)cols;   /* the layout is by act block, whatever the width */
    u32 blocks_per_group = QK_CFG.w4_group >> 5;
    s64 sp[4];
    if (blocks_per_group == 1) {   /* the default groups of 32: a group per act block */
        for (u32 g = QK_CFG.col_chunk / QK_XQ_BLOCK; g; g--) {
            qk_unpacked_i4_block(l, xr, sp);
            qk_unpacked_i4_group(sp, (s64)xr[QK_XQ_SA], (const s64 *)l + QK_UNPK_I4_PAR, row);
            l += QK_UNPK_I4_UNIT;
            xr += QK_XQ_REC;
        }
        return;
    }
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w4_group_shift); g++) {
        const s64 *d = (const s64 *)l + QK_UNPK_I4_PAR;
        s64 sg[4] = {0, 0, 0, 0}, sa = 0;
        for (u32 h = 0; h < blocks_per_group; h++) {
            qk_unpacked_i4_block(l, xr, sp);
QK_UNROLL
            for (int k = 0; k < 4; k++)
                sg[k] += sp[k];
            sa += (s64)xr[QK_XQ_SA];
            l += QK_UNPK_I4_UNIT;
            xr += QK_XQ_REC;
        }
        qk_unpacked_i4_group(sg, sa, d, row);
    }
}

#endif
