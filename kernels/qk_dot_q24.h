/* qk_dot_q24.h - Q24 matrices (int32 weights) times the act vector:
 * one multiply per multiply-add, exact in int64. */
#ifndef QP_QK_DOT_Q24_H
#define QP_QK_DOT_Q24_H

#include "qk_dot.h"

/* acc[k] += sum_c W[k][c] * x[c] for the 4 rows of one Q24 tile block.
 * |x| <= 2^24 and each row's sum of |W| below QPK_Q24_MAX_ROW_SUM = 2^38
 * (checked when the container is read) keep |acc| < 2^62 for the whole
 * row. Most of the time of a token is spent here. */
QM_INLINE void qk_rows_q24_dot(const s32 *blk, const s64 *x, u32 c0, s64 *acc)
{
    const s32 *bp = blk + c0 * 4;
    const s64 *xc = x + c0;
    s64 a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (u32 c = 0; c < QK_CFG.col_chunk; c += 16) {
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

/* a chunk of a q24 block times the act vector */
QM_INLINE void qk_rows_q24_chunk(const void *blk, const void *x, u32 cols, u32 c0, s64 *acc)
{
    (void)cols;
    qk_rows_q24_dot((const s32 *)blk, (const s64 *)x, c0, acc);
}

#endif
