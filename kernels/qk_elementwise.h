/* qk_elementwise.h - the kernels that walk vectors, not matrices: embed
 * (a token's row into the residual), rmsnorm (the residual into the act
 * vector), quant_x (the act vector into 8- and 16-bit records for the
 * narrow products), swiglu, and argmax_reduce (the vocabulary pass's
 * partial argmaxes into one token). */
#ifndef QP_QK_ELEMENTWISE_H
#define QP_QK_ELEMENTWISE_H

#include "qk_shims.h"

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
    if (i >= QK_CFG.hidden / 16)
        return 1;
    u32 tile = (u32)QK_IDX(i, QK_MAX_HIDDEN / 16);
    u32 key = QK_CFG.embed_key + cx->token / 4;
    const s32 *blk = cx->streamed ? QK_LOOKUP(work, cx->work_key)
                     : QK_CFG.embed_i4 ? QK_LOOKUP(w4_hid, key) : QK_LOOKUP(w_hid, key);
    s64 *h = QK_LOOKUP(h, cx->b);
    if (!blk || !h)
        return 1;
    s64 *dst = h + tile * 16;
    if (QK_CFG.embed_i4) {
        /* value = (D * q - M) * 2^-E; 16 columns of row k = one code word.
         * The word index is an add the verifier can bound: clang would write
         * tile * 4 + k as an OR, whose bound the verifier rounds up to the
         * next power of two (past the block from Qwen3-4B's width on). */
        u32 k = cx->token & 3, g = (tile * 16) >> QK_CFG.w4_group_shift, word = tile * 4;
        QK_OPAQUE(word);
        u64 w = ((const u64 *)blk)[word + k];
        const s32 *par = (const s32 *)((const u8 *)blk + 2 * QK_CFG.hidden);
        const s32 *dm = par + g * 8;
        QK_OPAQUE(dm);
        s64 d = dm[k], m = dm[4 + k];
        s32 up = qk_exp_const(QK_CFG.embed_adj);
QK_UNROLL
        for (int j = 0; j < 16; j++)
            dst[j] = qm_scale_pow2_checked(d * (s64)((w >> (4 * j)) & 15) - m, up, &cx->bad);
        return 0;
    }
    if (QK_CFG.w_enc == QK_ENC_I8G) {
        /* value = scale * q * 2^-E: Q32 is (scale * q) * 2^(32 - E); i6
         * lanes (QK_CFG.embed_i6) hold each chunk's codes reordered and biased */
        const u8 *q = (const u8 *)blk + tile * 64 + (cx->token & 3) * 16;
        const s32 *scale =
            (const s32 *)((const u8 *)blk + QK_CFG.hidden * 4) + ((tile * 16) >> QK_CFG.w_group_shift) * 4;
        QK_OPAQUE(scale);
        s64 d = scale[cx->token & 3];
        s32 up = qk_exp_const(QK_CFG.embed_adj);
        bool lanes = QK_CFG.embed_i6 != 0;
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
    if (a->token >= QK_CFG.vocab || a->b0 >= QK_CFG.block)
        return -1;
    struct qk_scalars *sc = QK_LOOKUP(scal, 0);   /* the range flag lives in entry 0 */
    if (!sc)
        return -1;
    struct qk_embed_ctx cx = {a->token, a->streamed, a->work_key, a->b0, 0};
    QK_LOOP(QK_CFG.hidden / 16, qk_embed_cb, &cx);
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
    if (!h || tile >= QK_CFG.hidden / 16)
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
    if (!h || tile >= QK_CFG.hidden / 16)
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
    if (!h || !g || tile >= QK_CFG.hidden / 16)
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
    if (!h || !g || !x || tile >= QK_CFG.hidden / 16)
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
    QK_LOOP(QK_CFG.hidden / 16, qk_norm_max_cb, &cx);
    cx.shift = qm_act_shift(cx.max);
    QK_LOOP(QK_CFG.hidden / 16, qk_norm_sumsq_cb, &cx);
    cx.inv = qk_rms_inv(cx.sumsq, cx.shift, QK_SF(inv_hidden), QK_SF(eps));
    cx.max = 0;
    QK_LOOP(QK_CFG.hidden / 16, qk_norm_zmax_cb, &cx);
    cx.out_shift = qm_act_shift(cx.max);
    QK_LOOP(QK_CFG.hidden / 16, qk_norm_out_cb, &cx);
    sc->x_exp = qk_rms_exp(cx.inv, qk_exp_const(QK_CFG.norm_exp[QK_IDX(cx.norm, 4 * QK_MAX_LAYERS)]), cx.out_shift);
    return 0;
}

QM_INLINE int qk_rmsnorm(const struct qk_args *a)
{
    u32 norm;
    if (a->mode == QK_NORM_FINAL)
        norm = 2 * QK_CFG.n_layers;
    else if (a->layer < QK_CFG.n_layers && a->mode <= QK_NORM_MLP)
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
    return (u64 *)(xq + QK_XQ_BYTES(QK_CFG.act_len)) + b * QK_XP_REC;
}

/* act block *b (the callback's index i) of entry cx->b: its values m and
 * the entry's record value xq; false when a lookup fails or i is past the
 * act vector */
QM_INLINE bool qk_act_block(const struct qk_xq_ctx *cx, u64 i, u32 *b, const s64 **m, u8 **xq)
{
    const s64 *x = QK_LOOKUP(x, cx->b);
    *xq = QK_LOOKUP(xq, cx->b);
    *b = (u32)QK_IDX(i, QK_MAX_ACT / QK_XQ_BLOCK);
    if (!x || !*xq || i >= QK_CFG.act_len / QK_XQ_BLOCK)
        return false;
    *m = x + *b * QK_XQ_BLOCK;
    return true;
}

/* pass 1: every block's shifts to at most 8 bits (the 8-bit records) and
 * to at most 15 (the 16-bit ones), kept in their r for pass 2, and the
 * largest of each. The tests of QK_CFG keep a model's program from reaching
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
    if (QK_CFG.has_i4 && (cx->records & 1)) {
        ((u64 *)xq)[b * QK_XQ_REC + QK_XQ_R] = sh8;
        cx->sh_max = sh8 > cx->sh_max ? sh8 : cx->sh_max;
    }
    if (QK_CFG.w_enc == QK_ENC_I8G && (cx->records & 2)) {
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
    if (QK_CFG.has_i4 && (cx.records & 1)) {
        QK_LOOP(cx.len / QK_XQ_BLOCK, qk_xq_values_cb, &cx);
        sc->xq_exp = sc->x_exp + (s32)cx.sh_max - QK_XQ_FRAC;
    }
    if (QK_CFG.w_enc == QK_ENC_I8G && (cx.records & 2)) {
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
        u32 narrow = (QK_CFG.lm_i4 | QK_CFG.lm_i6) != 0;
        return narrow | (QK_CFG.w_enc == QK_ENC_I8G && !narrow) << 1;
    }
    u32 mats = mode == QK_MV_QKV ? QK_MATRIX_BIT(QK_MATRIX_Q) | QK_MATRIX_BIT(QK_MATRIX_K) | QK_MATRIX_BIT(QK_MATRIX_V)
             : mode == QK_MV_O ? QK_MATRIX_BIT(QK_MATRIX_O)
             : mode == QK_MV_GATE_UP ? QK_MATRIX_BIT(QK_MATRIX_GATE) | QK_MATRIX_BIT(QK_MATRIX_UP)
             : QK_MATRIX_BIT(QK_MATRIX_DOWN);
    u32 i4 = QK_CFG.w_i4[QK_IDX(layer, QK_MAX_LAYERS)] & mats;
    return (i4 != 0) | (QK_CFG.w_enc == QK_ENC_I8G && i4 != mats) << 1;
}

/* the act vector of the product a->mode is about to run */
QM_INLINE int qk_quant_x(const struct qk_args *a)
{
    u32 len = a->mode == QK_MV_O ? QK_CFG.q_dim : a->mode == QK_MV_DOWN ? QK_CFG.inter : QK_CFG.hidden;
    if (a->mode > QK_MV_LOGITS || !qk_entries_ok(a))
        return -1;
    struct qk_xq_ctx cx = {.b = a->b0, .len = len, .records = qk_act_records(a->layer, a->mode)};
    if (!cx.records)
        return -1;
    QK_LOOP(a->nb, qk_quant_entry_cb, &cx);
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
    if (!gu || k >= QK_CFG.inter)
        return 1;
    s64 *g = gu + k;
    s64 s = qm_mul_q30(*g, qm_sigmoid_q30(*g));
    *g = s;
    qk_max_abs(&cx->max_s, s);
    qk_max_abs(&cx->max_u, g[QK_CFG.inter]);
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
    if (!gu || tile >= QK_CFG.inter / 16)
        return 1;
    const s64 *g = gu + tile * 16, *u = gu + QK_CFG.inter + tile * 16;
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
    if (!gu || !x || tile >= QK_CFG.inter / 16 || QK_CFG.inter > QK_CFG.act_len)
        return 1;
    const s64 *g = gu + tile * 16, *u = gu + QK_CFG.inter + tile * 16;
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
    QK_LOOP(QK_CFG.inter, qk_silu_cb, &cx);
    cx.shift_s = qm_act_shift(cx.max_s);
    cx.shift_u = qm_act_shift(cx.max_u);
    QK_LOOP(QK_CFG.inter / 16, qk_swiglu_max_cb, &cx);
    cx.shift_p = qm_act_shift(cx.max_p);
    QK_LOOP(QK_CFG.inter / 16, qk_swiglu_out_cb, &cx);
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

/* ---- argmax_reduce: the vocabulary pass's amax slots -> one token --- */

struct qk_reduce_ctx {
    s64 value;
    u32 index;
    u32 b;              /* block entry */
    u32 n_amax_slots, pad;
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

/* one block entry: its amax slots -> its token */
static long qk_reduce_entry_cb(u64 i, void *vctx)
{
    const struct qk_reduce_ctx *base = vctx;
    struct qk_reduce_ctx cx = {.b = base->b + (u32)i};
    struct qk_scalars *sc = QK_LOOKUP(scal, cx.b);
    if (!sc)
        return 1;
    QK_LOOP(base->n_amax_slots, qk_reduce_cb, &cx);
    sc->argmax_index = cx.index;
    sc->argmax_value = cx.value;
    return 0;
}

QM_INLINE int qk_argmax_reduce(const struct qk_args *a)
{
    if (a->n_amax_slots == 0 || a->n_amax_slots > QK_MAX_ARGMAX_SLOTS || !qk_entries_ok(a))
        return -1;
    struct qk_reduce_ctx cx = {.b = a->b0, .n_amax_slots = a->n_amax_slots};
    QK_LOOP(a->nb, qk_reduce_entry_cb, &cx);
    return 0;
}

#endif
