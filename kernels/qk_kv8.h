/* qk_kv8.h - the 8-bit KV cache (QK_CFG.kv8, qrun --kv-cache int8): the format
 * and the lane arithmetic its attention reads it with.
 *
 * A map value holds one K or V head vector (QK_KV8_VEC_BYTES, keys by
 * qk_kv8_vec): head_dim bytes, then the vector's shift sh
 * (0..QM_CACHE_SH_MAX) in 8 bytes of its own. Entry d is stored as
 * u = c + QK_KV8_BIAS for a code c in -127..127, the value being
 * c * 2^(layer exponent + 8 - sh): the layer's int16 exponent (k_exp,
 * v_exp) 8 bits coarser, then the vector's own shift, so each head vector
 * keeps 7 bits below its largest entry.
 *
 * Lane packing. A 64-bit word of a vector holds 8 entries' bytes; shifted
 * right by 8 t (t = 0..3) and masked with QK_KV8_LANES it is
 * u_t + u_(t+4) * 2^32. Scores: the query, quantised to qb bits
 * (qk_kv8_query_bits), is packed per 8 entries into words
 * Q_t = a_(t+4) + a_t * 2^32 (two's complement lanes: the integer sum), and
 * the product (u_t + u_(t+4) 2^32) Q_t is u_t a_(t+4) + (u_t a_t +
 * u_(t+4) a_(t+4)) 2^32 mod 2^64: one multiply, two multiply-adds. Over a
 * head the sum S = L + H 2^32 has |L|, |H| < 2^31 (qb's bound), so
 * H = round(S / 2^32) exactly, and q.c = H - 128 sum(a). Values: a weight
 * w <= 2^16 times the masked word adds w u_t and w u_(t+4) in two 32-bit
 * lanes that, over a chunk of QK_ATTN_CHUNK positions, stay below
 * 2^16 * 255 * 256 < 2^32: no carry crosses. */
#ifndef QP_QK_KV8_H
#define QP_QK_KV8_H

#include "qmath.h"

#define QK_KV8_BIAS 128
#define QK_KV8_MAX 127
#define QK_KV8_LANES 0x000000FF000000FFull
#define QK_KV8_W_FRAC 16          /* value weights: p (Q30) to at most 2^16 */
/* a partial's entry (of qk_attn_part.acc) that sums the value weights while
 * the first head_dim / 2 hold the value lanes */
#define QK_KV8_W_SUM(head_dim) ((head_dim) / 2)

/* bits of a quantised query entry: head_dim * 255 * (2^qb - 1) < 2^31 */
QM_INLINE u32 qk_kv8_query_bits(u32 head_dim)
{
    return 23 - qm_bitlen(head_dim - 1);
}

/* sh for a vector with largest magnitude max_abs (value max_abs * 2^m_exp)
 * against the layer's int16 exponent c_exp: the most that keeps its codes
 * within 7 bits (rounding may still reach 128: codes saturate at 127) */
QM_INLINE u32 qk_kv8_shift(u64 max_abs, s32 m_exp, s32 c_exp)
{
    s32 bits = (s32)qm_bitlen(max_abs) + m_exp - (c_exp + 8);
    s32 sh = qm_pos(7 - bits);
    return (u32)(sh > QM_CACHE_SH_MAX ? QM_CACHE_SH_MAX : sh);
}

/* the stored byte of m * 2^l / 2^r (qm_cache_shifts against c_exp + 8 - sh) */
QM_INLINE u8 qk_kv8_code(s64 m, u32 l, u32 r)
{
    s64 t = qm_rshift_round((s64)((u64)m << (l & 63)), r);
    return (u8)(qm_clamp(t, -QK_KV8_MAX, QK_KV8_MAX) + QK_KV8_BIAS);
}

/* the packed query word of entries t and t + 4 (qb-bit mantissas) */
QM_INLINE u64 qk_kv8_query_word(s64 a_t, s64 a_t4)
{
    return (u64)a_t4 + ((u64)a_t << 32);
}

/* q.c from a head's sum of products S and its query sum: H - 128 sum(a) */
QM_INLINE s64 qk_kv8_dot(u64 s, s64 a_sum)
{
    s64 h = (s64)(s + (1ull << 31)) >> 32;
    return h - QK_KV8_BIAS * a_sum;
}

/* a position's value weight from its softmax weight p (Q30): relative to the
 * chunk's smallest vector shift min_sh, p 2^(min_sh - sh) at 2^-14, so at
 * most 2^16 (sh >= min_sh) */
QM_INLINE u64 qk_kv8_value_weight(u64 p, u32 sh, u32 min_sh)
{
    u32 s = (30 - QK_KV8_W_FRAC + sh - min_sh) & 63;
    return (p + ((1ull << s) >> 1)) >> s;
}

/* entry sum of a value lane (w sum of u) as the int16 path's partial sum
 * (qk_attn_part.acc: 2^F sum p value / 2^v_exp, F = QM_V_WEIGHT_FRAC):
 * the bias taken off with the weights' sum, then 2^(30 - min_sh) */
QM_INLINE s64 qk_kv8_value_acc(u64 lane, u64 w_sum, u32 min_sh)
{
    s64 c = (s64)lane - (s64)(QK_KV8_BIAS * w_sum);
    return (s64)((u64)c << ((30 - QK_KV8_W_FRAC + 8 + QM_V_WEIGHT_FRAC - min_sh) & 63));
}

#endif
