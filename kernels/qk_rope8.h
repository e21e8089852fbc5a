/* qk_rope8.h - rope_store8: rope_store for the 8-bit KV cache (qk_kv8.h).
 * The same head norms and RoPE; K and V go into the cache as 8-bit codes
 * with a shift per head vector, and each query head is also quantised and
 * packed for the lane-packed scores of attention8. A program of its own,
 * loaded in place of rope_store when the model is opened with the 8-bit
 * cache. */
#ifndef QP_QK_ROPE8_H
#define QP_QK_ROPE8_H

#include "qk_kv8.h"
#include "qk_rope.h"

/* the 8-bit cache's value of KV head h at position pos of the layer
 * whose int16 row of position 0 is kv0 (qk_kv_row0): QK_KV8_VEC_BYTES */
QM_INLINE u32 qk_kv8_vec(u32 kv0, u32 kv_head, u32 pos)
{
    return kv0 * QK_CFG.n_kv_heads + kv_head * QK_CFG.ctx + pos;
}

/* RoPE of the mantissas v into out (v itself: pairs are read before
 * written), unscaled; returns the largest magnitude */
QM_INLINE u64 qk_rope_rotate(s64 *out, const s64 *v, const s32 *cs)
{
    u32 half = QK_CFG.head_dim / 2;
    u64 max = 0;
    for (u32 k = 0; k < half; k++) {
        s64 lo, hi;
        qk_rope_pair(v, cs, k, &lo, &hi);
        out[k] = lo;
        out[k + half] = hi;
        qk_max_abs(&max, lo);
        qk_max_abs(&max, hi);
    }
    return max;
}

/* the rotated query of one head, quantised to qb bits and packed for the
 * 8-bit cache's lanes after the query (qrot: q_dim + head * head_dim on,
 * head_dim / 2 words then the sum of the codes); its score exponent chosen
 * so that qk_attn_score8's scores, shifted by 15 - sh, meet the int16
 * path's units (q_exp + k_exp - QK_KBOOST_MAX) */
QM_INLINE int qk_rotate_query8(u32 b, u32 head, const s64 *v, const s32 *cs, s32 e)
{
    u32 half = QK_CFG.head_dim / 2, qb = qk_kv8_query_bits(QK_CFG.head_dim);
    s64 *q = QK_LOOKUP(qrot, b);
    struct qk_scalars *sc = QK_LOOKUP(scal, b);
    if (!q || !sc || head >= QK_CFG.n_heads || head >= QK_MAX_HEADS)
        return 1;
    q += head * QK_CFG.head_dim;
    u32 qs = qm_shift_to_bits(qk_rope_rotate(q, v, cs), qb);
    s64 lim = ((s64)1 << qb) - 1, sum = 0;
    u64 *pk = (u64 *)(q + QK_CFG.q_dim);
    for (u32 g = 0; g < QK_CFG.head_dim; g += 8) {
QK_UNROLL
        for (u32 t = 0; t < 4; t++) {
            s64 a = qm_clamp(qm_rshift_round(q[g + t], qs), -lim, lim);
            s64 a4 = qm_clamp(qm_rshift_round(q[g + t + 4], qs), -lim, lim);
            pk[g / 2 + t] = qk_kv8_query_word(a, a4);
            sum += a + a4;
        }
    }
    pk[half] = (u64)sum;
    sc->q_exp[QK_IDX(head, QK_MAX_HEADS)] = e + (s32)qs + 8 + QK_KBOOST_MAX - QM_CACHE_SH_MAX;
    return 0;
}

/* one head vector of m * 2^m_exp, largest magnitude max, into its 8-bit
 * cache value dst (codes, then the shift) against the layer's exponent c_exp */
QM_INLINE void qk_store8(u8 *dst, const s64 *m, u64 max, s32 m_exp, s32 c_exp)
{
    u32 sh = qk_kv8_shift(max, m_exp, c_exp), l, r;
    qm_cache_shifts(m_exp, c_exp + 8 - (s32)sh, &l, &r);
    for (u32 d = 0; d < QK_CFG.head_dim; d++)
        dst[d] = qk_kv8_code(m[d], l, r);
    *(u64 *)(dst + QK_CFG.head_dim) = sh;
}

QM_INLINE int qk_store_k8(u32 layer, u32 kv0, u32 pos, u32 kv_head, s64 *v, const s32 *cs, s32 e)
{
    u8 *kc = QK_LOOKUP(kcache, qk_kv8_vec(kv0, kv_head, pos));
    if (!kc || kv_head >= QK_CFG.n_kv_heads || layer >= QK_MAX_LAYERS)
        return 1;
    u64 max = qk_rope_rotate(v, v, cs);   /* K heads have no place in qrot: in place */
    qk_store8(kc, v, max, e, qk_exp_const(QK_CFG.k_exp[QK_IDX(layer, QK_MAX_LAYERS)]));
    return 0;
}

static long qk_store_v8_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx *cx = vctx;
    u32 head = (u32)i, layer = cx->layer;
    const s64 *qkv = QK_LOOKUP(qkv, cx->b);
    u8 *vc = QK_LOOKUP(vcache, qk_kv8_vec(cx->kv0, head, cx->pos));
    if (!qkv || !vc || head >= QK_CFG.n_kv_heads || layer >= QK_CFG.n_layers || layer >= QK_MAX_LAYERS)
        return 1;
    const s64 *src = qkv + QK_CFG.q_dim + QK_CFG.kv_dim + head * QK_CFG.head_dim;
    u64 max = 0;
    for (u32 d = 0; d < QK_CFG.head_dim; d++)
        qk_max_abs(&max, src[d]);
    qk_store8(vc, src, max, -QM_RESID_FRAC, qk_exp_const(QK_CFG.v_exp[QK_IDX(layer, QK_MAX_LAYERS)]));
    return 0;
}

static long qk_rope_head8_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx *cx = vctx;
    u32 head = (u32)i;
    s64 *v;
    const s32 *cs;
    s32 e;
    if (qk_rope_head_norm(cx, head, &v, &cs, &e))
        return 1;
    if (head < QK_CFG.n_heads)
        return qk_rotate_query8(cx->b, head, v, cs, e);
    return qk_store_k8(cx->layer, cx->kv0, cx->pos, head - QK_CFG.n_heads, v, cs, e);
}

static long qk_rope_entry8_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx cx;
    if (qk_rope_entry(vctx, (u32)i, &cx))
        return 1;
    QK_LOOP(QK_CFG.n_heads + QK_CFG.n_kv_heads, qk_rope_head8_cb, &cx);
    QK_LOOP(QK_CFG.n_kv_heads, qk_store_v8_cb, &cx);
    return 0;
}

QM_INLINE int qk_rope_store8(const struct qk_args *a)
{
    struct qk_rope_ctx cx;
    if (qk_rope_args(a, &cx))
        return -1;
    QK_LOOP(a->nb, qk_rope_entry8_cb, &cx);
    return 0;
}

#endif
