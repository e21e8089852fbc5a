/* qk_rope.h - rope_store: the q and k head norms, RoPE, and K and V into
 * the session's KV cache slot, K laid out by the layer's klayout (boosted
 * channels, and the extension bits some channels borrow from donors). */
#ifndef QP_QK_ROPE_H
#define QP_QK_ROPE_H

#include "qk_elementwise.h"

/* ---- qk_rope: q/k head norms, RoPE, K and V into the cache ---------- */

struct qk_rope_ctx {
    u32 layer, pos;     /* pos: of block entry b */
    u32 b;
    u32 kv0;            /* KV cache row of position 0 (the KV slot's layer: qk_kv_row0) */
};

/* The KV cache row of position 0 of a layer in a KV slot. With kv_slot <
 * QK_CFG.kv_slots, layer < QK_CFG.n_layers and a position below QK_CFG.ctx the row stays
 * inside the KV slot's own rows: the plan keeps kv_slots * n_layers * ctx
 * below 2^31, so the sum cannot wrap into another KV slot's. */
QM_INLINE u32 qk_kv_row0(u32 kv_slot, u32 layer)
{
    return (kv_slot * QK_CFG.n_layers + layer) * QK_CFG.ctx;
}

/* Block entry b's sequence (qwen3_abi.h), or NULL when its KV slot or
 * position is outside the model, or its position past max_pos: the entry
 * is then skipped and scal.seq_error raised, so that no entry ever reaches
 * another KV slot's rows. */
QM_INLINE const struct qk_seq *qk_seq_of(u32 b, u32 max_pos)
{
    const struct qk_seq *sq = QK_LOOKUP(seq, b);
    if (sq && sq->kv_slot < QK_CFG.kv_slots && sq->pos < QK_CFG.ctx && sq->pos <= max_pos)
        return sq;
    struct qk_scalars *sc = QK_LOOKUP(scal, 0);
    if (sc)
        QK_ATOMIC_OR(&sc->seq_error, 1);
    return NULL;
}

/* RMSNorm of one head of qkv in place, as mantissas of at most out_bits
 * bits; returns the exponent. */
QM_INLINE s32 qk_head_norm(s64 *v, const s32 *g, s32 g_exp, u32 out_bits)
{
    u64 max = 0, sumsq = 0;
    for (u32 i = 0; i < QK_CFG.head_dim; i++)
        qk_max_abs(&max, v[i]);
    u32 shift = qm_act_shift(max);
    for (u32 i = 0; i < QK_CFG.head_dim; i++) {
        s64 t = qm_rshift_round(v[i], shift);
        sumsq += (u64)(t * t);
    }
    struct qm_sf inv = qk_rms_inv(sumsq, shift, QK_SF(inv_head_dim), QK_SF(eps));
    u64 zmax = 0;
    for (u32 i = 0; i < QK_CFG.head_dim; i++)
        qk_max_abs(&zmax, qk_rms_z(v[i], inv, g[i]));
    u32 out_shift = qm_shift_to_bits(zmax, out_bits);
    for (u32 i = 0; i < QK_CFG.head_dim; i++)
        v[i] = qm_rshift_round(qk_rms_z(v[i], inv, g[i]), out_shift);
    return qk_rms_exp(inv, g_exp, out_shift);
}

/* rotate-half RoPE of the mantissas m[0..d) (Q30 cos/sin) into entries i, i+d/2 */
QM_INLINE void qk_rope_pair(const s64 *m, const s32 *cs, u32 i, s64 *lo, s64 *hi)
{
    u32 half = QK_CFG.head_dim / 2;
    s64 c = cs[2 * i], s = cs[2 * i + 1];
    *lo = qm_rshift_round(m[i] * c - m[i + half] * s, 30);
    *hi = qm_rshift_round(m[i + half] * c + m[i] * s, 30);
}

struct qk_kext_ctx {
    u32 layer, kv_row, head;    /* kv_row: the position's KV cache row; head: query head, or K head */
    u32 b;                      /* block entry */
    s32 m_exp, c_exp;           /* K: the mantissas' exponent, the vector's step */
};

/* The query's share of the donors' lowest bits (qwen3_abi.h, klayout):
 * corr[e] = round(q_d / 2^(x_d - j)) - q_e for donor e of channel d. */
static long qk_query_corr_cb(u64 i, void *vctx)
{
    struct qk_kext_ctx *cx = vctx;
    u32 k = (u32)i, head = cx->head;
    s64 *q = QK_LOOKUP(qrot, cx->b);
    const s32 *kl = QK_LOOKUP(klayout, cx->layer);
    if (!q || !kl || k >= QK_CFG.head_dim || head >= QK_CFG.n_heads)
        return 1;
    q += head * QK_CFG.head_dim;
    const s32 *ext = kl + QK_KL_EXT(QK_CFG.head_dim);
    u32 e = (u32)ext[k], d = QK_KEXT_PARTNER(e);
    s64 corr = 0;
    if (QK_KEXT_DONOR(e) && d < QK_CFG.head_dim)
        corr = qm_rshift_round(q[d], (QK_KEXT_BITS(ext[d]) - QK_KEXT_BIT(e)) & 31) - q[k];
    q[QK_CFG.q_dim + k] = corr;
    return 0;
}

QM_INLINE int qk_rotate_query(u32 b, u32 layer, u32 head, const s64 *v, const s32 *cs, const s32 *kl, s32 e)
{
    u32 half = QK_CFG.head_dim / 2;
    s64 *q = QK_LOOKUP(qrot, b);
    struct qk_scalars *sc = QK_LOOKUP(scal, b);
    if (!q || !sc || head >= QK_CFG.n_heads || head >= QK_MAX_HEADS)
        return 1;
    q += head * QK_CFG.head_dim;
    for (u32 k = 0; k < half; k++) {
        s64 lo, hi;
        u32 up = (u32)(QK_KBOOST_MAX - kl[k]) & 15;
        qk_rope_pair(v, cs, k, &lo, &hi);
        q[k] = (s64)((u64)lo << up);
        q[k + half] = (s64)((u64)hi << up);
    }
    sc->q_exp[QK_IDX(head, QK_MAX_HEADS)] = e;
    if (kl[QK_KL_DONORS(QK_CFG.head_dim)]) {
        struct qk_kext_ctx x = {.layer = layer, .head = head, .b = b};
        QK_LOOP(QK_CFG.head_dim, qk_query_corr_cb, &x);
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
    if (!v || !kl || !kc || k >= QK_CFG.head_dim || cx->head >= QK_CFG.n_kv_heads)
        return 1;
    v += (QK_CFG.n_heads + cx->head) * QK_CFG.head_dim;
    kc += cx->head * QK_CFG.head_dim;
    const s32 *ext = kl + QK_KL_EXT(QK_CFG.head_dim);
    u32 e = (u32)ext[k], d = QK_KEXT_PARTNER(e);
    if (QK_KEXT_DONOR(e) && d < QK_CFG.head_dim) {
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

QM_INLINE int qk_store_k(u32 b, u32 layer, u32 kv_row, u32 kv_head, s64 *v, const s32 *cs, const s32 *kl, s32 e)
{
    u32 half = QK_CFG.head_dim / 2;
    s16 *kc = QK_LOOKUP(kcache, kv_row);
    if (!kc || kv_head >= QK_CFG.n_kv_heads || layer >= QK_MAX_LAYERS)
        return 1;
    kc += kv_head * QK_CFG.head_dim;
    /* K heads have no place in qrot: rotate in place, pairs (k, k + half) are
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
    s32 c_exp = qk_exp_const(QK_CFG.k_exp[QK_IDX(layer, QK_MAX_LAYERS)]);
    u32 sh = qm_cache_vector_shift(max, e, c_exp), l, r;
    if (kl[QK_KL_DONORS(QK_CFG.head_dim)]) {
        struct qk_kext_ctx x = {.layer = layer, .kv_row = kv_row, .head = kv_head, .b = b, .m_exp = e,
                                .c_exp = c_exp - (s32)sh};
        QK_LOOP(QK_CFG.head_dim, qk_k_entry_cb, &x);
    } else {
        qm_cache_shifts(e, c_exp - (s32)sh, &l, &r);
        for (u32 k = 0; k < QK_CFG.head_dim; k++)
            kc[k] = qm_to_cache16(v[k], l, r, 0);
    }
QK_UNROLL
    for (u32 k = 0; k < 4; k++)
        kc[k] = qm_cache_tag(kc[k], k, sh);
    return 0;
}

/* Head i of the block entry (query heads, then K heads) normalised in
 * place: its mantissas *v in qkv, their exponent *e and the position's
 * RoPE row *cs; 1 on an index outside the model. */
QM_INLINE int qk_rope_head_norm(const struct qk_rope_ctx *cx, u32 head, s64 **v, const s32 **cs, s32 *e)
{
    u32 layer = cx->layer;
    s64 *qkv = QK_LOOKUP(qkv, cx->b);
    *cs = QK_LOOKUP(rope, cx->pos);
    if (!qkv || !*cs || layer >= QK_CFG.n_layers || layer >= QK_MAX_LAYERS ||
        head >= QK_CFG.n_heads + QK_CFG.n_kv_heads || head >= QK_MAX_HEADS)
        return 1;
    u32 is_k = head < QK_CFG.n_heads ? 0 : 1, norm = 2 * layer + is_k;
    const s32 *g = QK_LOOKUP(qk_norms, norm);
    if (!g || norm >= 2 * QK_MAX_LAYERS)
        return 1;
    *v = qkv + head * QK_CFG.head_dim;   /* k heads follow the q heads */
    *e = qk_head_norm(*v, g, qk_exp_const(QK_CFG.qk_norm_exp[QK_IDX(norm, 2 * QK_MAX_LAYERS)]),
                      is_k ? QK_K_ACT_BITS : QK_Q_ACT_BITS);
    return 0;
}

static long qk_rope_head_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx *cx = vctx;
    u32 head = (u32)i, layer = cx->layer;
    const s32 *kl = QK_LOOKUP(klayout, layer);   /* engine/plan_kv.c */
    s64 *v;
    const s32 *cs;
    s32 e;
    if (!kl || qk_rope_head_norm(cx, head, &v, &cs, &e))
        return 1;
    if (head < QK_CFG.n_heads)
        return qk_rotate_query(cx->b, layer, head, v, cs, kl, e);
    return qk_store_k(cx->b, layer, cx->kv0 + cx->pos, head - QK_CFG.n_heads, v, cs, kl, e);
}

/* V of one KV head into the cache, with its own exponent shift and
 * stretch (qmath.h) */
static long qk_store_v_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx *cx = vctx;
    u32 head = (u32)i, layer = cx->layer;
    const s64 *qkv = QK_LOOKUP(qkv, cx->b);
    s16 *vc = QK_LOOKUP(vcache, cx->kv0 + cx->pos);
    if (!qkv || !vc || head >= QK_CFG.n_kv_heads || layer >= QK_CFG.n_layers || layer >= QK_MAX_LAYERS)
        return 1;
    const s64 *src = qkv + QK_CFG.q_dim + QK_CFG.kv_dim + head * QK_CFG.head_dim;
    s16 *dst = vc + head * QK_CFG.head_dim;
    u64 max = 0;        /* the true largest magnitude: the stretch needs more than its bit length */
    for (u32 d = 0; d < QK_CFG.head_dim; d++) {
        u64 m = qm_abs(src[d]);
        max = m > max ? m : max;
    }
    s32 c_exp = qk_exp_const(QK_CFG.v_exp[QK_IDX(layer, QK_MAX_LAYERS)]);
    u32 sh = qm_cache_vector_shift(max, -QM_RESID_FRAC, c_exp), l, r;
    qm_cache_shifts(-QM_RESID_FRAC, c_exp - (s32)sh, &l, &r);
    u32 st = qm_v_stretch((u64)qm_rshift_round((s64)(max << (l & 63)), r));
    for (u32 d = 0; d < QK_CFG.head_dim; d++)
        dst[d] = qm_to_cache16(src[d], l, r, st);
QK_UNROLL
    for (u32 k = 0; k < 4; k++) {
        dst[k] = qm_cache_tag(dst[k], k, sh);
        dst[4 + k] = qm_cache_tag(dst[4 + k], k, st);
    }
    return 0;
}

/* block entry i of the invocation base describes: its position and its
 * KV slot's rows in *cx; 1 when its sequence is outside the model */
QM_INLINE int qk_rope_entry(const struct qk_rope_ctx *base, u32 i, struct qk_rope_ctx *cx)
{
    u32 b = base->b + i;
    const struct qk_seq *sq = qk_seq_of(b, QK_CFG.ctx - 1);
    if (!sq)
        return 1;
    *cx = (struct qk_rope_ctx){base->layer, sq->pos, b, qk_kv_row0(sq->kv_slot, base->layer)};
    return 0;
}

/* the invocation in *cx when its arguments are inside the model */
QM_INLINE int qk_rope_args(const struct qk_args *a, struct qk_rope_ctx *cx)
{
    if (a->layer >= QK_CFG.n_layers || !qk_entries_ok(a))
        return -1;
    *cx = (struct qk_rope_ctx){a->layer, 0, a->b0, 0};
    return 0;
}

/* one block entry: its position's K and V go into its KV slot's cache */
static long qk_rope_entry_cb(u64 i, void *vctx)
{
    struct qk_rope_ctx cx;
    if (qk_rope_entry(vctx, (u32)i, &cx))
        return 1;
    QK_LOOP(QK_CFG.n_heads + QK_CFG.n_kv_heads, qk_rope_head_cb, &cx);
    QK_LOOP(QK_CFG.n_kv_heads, qk_store_v_cb, &cx);
    return 0;
}

QM_INLINE int qk_rope_store(const struct qk_args *a)
{
    struct qk_rope_ctx cx;
    if (qk_rope_args(a, &cx))
        return -1;
    QK_LOOP(a->nb, qk_rope_entry_cb, &cx);
    return 0;
}

#endif
