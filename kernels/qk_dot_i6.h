/* qk_dot_i6.h - the vocabulary projection of an i6g matrix ("i6 lanes",
 * qwen3_abi.h) times the act vector's 8-bit records: 6-bit codes in 16-bit
 * lanes, one position at a time or a block of positions from the block
 * unpacked once. */
#ifndef QP_QK_DOT_I6_H
#define QP_QK_DOT_I6_H

#include "qk_dot.h"

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

/* row k of an i6 lanes block, columns [c0, c0 + QK_CFG.col_chunk) */
QM_INLINE s64 qk_dot_i6_row_chunk(const u8 *blk, const u8 *xq, u32 cols, u32 k, u32 c0)
{
    const u64 *xr = qk_xq_from(xq, c0);
    const u64 *cw = (const u64 *)(blk + c0 * 4 + k * 16);
    const s32 *d = (const s32 *)(blk + cols * 4) + (c0 >> QK_CFG.w_group_shift) * 4 + k;
    u32 blocks_per_group = QK_CFG.w_group >> 5;
    u64 lanes = QK_BYTE_LANES;
    s64 row = 0;
    QK_OPAQUE(lanes);
    if (blocks_per_group == 2) {   /* the int4 preset's groups of 64: a group per iteration */
        for (u32 g = QK_CFG.col_chunk >> QK_CFG.w_group_shift; g; g--) {
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

QM_INLINE void qk_rows_i6_chunk(const void *blk, const void *xq, u32 cols, u32 c0, s64 *acc)
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
    const s32 *d = (const s32 *)(b + cols * 4) + (c0 >> QK_CFG.w_group_shift) * 4;
    for (u32 t = 0; t < QK_CFG.col_chunk / 16; t++)
QK_UNROLL
        for (u32 k = 0; k < 4; k++) {
            const u64 *cw = (const u64 *)(b + (c0 + 16 * t) * 4 + 16 * k);
            u64 *l = lanes + qk_unpk_lane_at(k, cols, c0 + 16 * t);
            l[0] = (cw[0] & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
            l[1] = ((cw[0] >> 8) & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
            l[2] = (cw[1] & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
            l[3] = ((cw[1] >> 8) & QK_BYTE_LANES) - QK_I6_LANE_BIAS;
        }
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w_group_shift); g++)
QK_UNROLL
        for (u32 k = 0; k < 4; k++)
            dm[qk_unpk_param_at(k, cols, c0 + (g << QK_CFG.w_group_shift), QK_CFG.w_group_shift)] = d[4 * g + k];
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
    const s64 *dk = dm + qk_unpk_param_at(k, cols, c0, QK_CFG.w_group_shift);
    u32 blocks_per_group = QK_CFG.w_group >> 5;
    s64 row = 0;
    if (blocks_per_group == 2) {   /* the int4 preset's groups of 64: a group per iteration */
        for (u32 g = QK_CFG.col_chunk >> QK_CFG.w_group_shift; g; g--) {
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
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w_group_shift); g++) {
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

#endif
