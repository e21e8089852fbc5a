/* qk_dot_i8.h - i8g matrices (int8 codes, a scale per group) times the
 * act vector's 16-bit records: two multiply-adds per 64-bit multiply, one
 * position at a time from the packed codes, or a block of positions from
 * the block unpacked once into pair words. */
#ifndef QP_QK_DOT_I8_H
#define QP_QK_DOT_I8_H

#include "qk_dot.h"

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

/* row k of an i8g block, columns [c0, c0 + QK_CFG.col_chunk) (the plan keeps
 * groups of at least one act block) */
QM_INLINE s64 qk_dot_i8_row_chunk(const u8 *blk, const u8 *xq, u32 cols, u32 k, u32 c0)
{
    const u64 *xr = qk_xp_from(xq, c0);
    const u64 *cw = (const u64 *)(blk + c0 * 4 + k * 16);
    const s32 *d = (const s32 *)(blk + cols * 4) + (c0 >> QK_CFG.w_group_shift) * 4 + k;
    u64 lanes = QK_PAIR_LANES;
    QK_OPAQUE(lanes);
    return qk_row_groups(cw, xr, d, lanes, qk_dot_i8_block, QK_XP_REC, QK_I8_GROUP_SHIFT);
}

QM_INLINE void qk_rows_i8_chunk(const void *blk, const void *xq, u32 cols, u32 c0, s64 *acc)
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
 * the same: the same bits. This unpacks columns [c0, c0 + QK_CFG.col_chunk). */
#define QK_PAIR_BIAS (128 * 0x0000000100000001ULL)

QM_INLINE void qk_unpack_i8_chunk(const void *blk, u64 *lanes, u32 cols, u32 c0)
{
    const u8 *b = (const u8 *)blk;
    const s32 *d = (const s32 *)(b + cols * 4) + (c0 >> QK_CFG.w_group_shift) * 4;
    u64 *l = lanes + QK_UNPK_I8_UNIT * (c0 / QK_XQ_BLOCK);
    for (u32 t = 0; t < QK_CFG.col_chunk / 16; t++) {
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
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w_group_shift); g++) {
        s64 *dk = (s64 *)l + QK_UNPK_I8_UNIT * (QK_CFG.w_group >> 5) * g + QK_UNPK_I8_PAR;
QK_UNROLL
        for (u32 k = 0; k < 4; k++)
            dk[k] = d[4 * g + k];
    }
}

/* the four rows' P_b of one act block: its 64 pair words l[4 p + k] (act
 * pair word p, row k) times act record xr, at the record's scale */
QM_INLINE void qk_unpacked_i8_block(const u64 *l, const u64 *xr, s64 *sp)
{
    u64 s[4];
    qk_lane_sums_rows(l, xr, 16, QK_XP_BIAS, s);
    u64 r = xr[QK_XP_R];
QK_UNROLL
    for (int k = 0; k < 4; k++)
        sp[k] = (((s64)s[k] >> 32) * (1 << QK_XP_FRAC)) >> r;
}

/* the four rows of an unpacked i8g block (a thread's scratch) times entry
 * xq's 16-bit records, columns [c0, c0 + QK_CFG.col_chunk), added into row[] */
QM_INLINE void qk_rows_i8_unpacked(const void *lanes, const void *xq, u32 cols, u32 c0, s64 *row)
{
    const u64 *xr = qk_xp_from((const u8 *)xq, c0);
    const u64 *l = (const u64 *)lanes + QK_UNPK_I8_UNIT * (c0 / QK_XQ_BLOCK);
    u32 blocks_per_group = QK_CFG.w_group >> 5;
    (void)cols;   /* the layout is by act block, whatever the width */
    for (u32 g = 0; g < (QK_CFG.col_chunk >> QK_CFG.w_group_shift); g++) {
        const s64 *d = (const s64 *)l + QK_UNPK_I8_PAR;
        s64 sg[4] = {0, 0, 0, 0}, sp[4];
        for (u32 h = 0; h < blocks_per_group; h++) {
            qk_unpacked_i8_block(l, xr, sp);
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

#endif
