/* qk_attention8.h - attention8: attention over the 8-bit KV cache
 * (qk_kv8.h), loaded in place of attention when the model is opened with
 * it. The same tasks (entry, task heads, chunk) and partials, which
 * attn_merge combines as it does the int16 cache's: scores from K's code
 * words and the query's packed words, two multiply-adds per multiply; the
 * softmax weights; then the values, the weights relative to the chunk's
 * smallest V vector shift, two entries per multiply in 32-bit lanes. */
#ifndef QP_QK_ATTENTION8_H
#define QP_QK_ATTENTION8_H

#include "qk_attention.h"
#include "qk_rope8.h"

/* the scores at position j of the task's head and, for a head pair, the
 * next one: two code words of K (head_dim is a multiple of 16) and the
 * query's packed words per step */
QM_INLINE long qk_attn_score8(struct qk_attn_ctx *cx, u64 i, u32 pair)
{
    u32 j = cx->first + (u32)i, head = cx->head, head2 = head + pair, kv_head = cx->kv_head;
    const s64 *q = QK_LOOKUP(qrot, cx->b);
    const u8 *k = QK_LOOKUP(kcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, cx->b * QK_CFG.n_heads + head);
    s64 *sc2 = QK_LOOKUP(scores, cx->b * QK_CFG.n_heads + head2);
    QK_OPAQUE(head2);   /* its own register, bounded by its own test */
    if (!q || !k || !sc || !sc2 || j >= QK_CFG.ctx || head >= QK_CFG.n_heads || head2 >= QK_CFG.n_heads ||
        kv_head >= QK_CFG.n_kv_heads)
        return 1;
    const u64 *qp = (const u64 *)(q + QK_CFG.q_dim + head * QK_CFG.head_dim);
    const u64 *qp2 = (const u64 *)(q + QK_CFG.q_dim + head2 * QK_CFG.head_dim);
    const u64 *kw = (const u64 *)k;
    u64 s = 0, s2 = 0;
    for (u32 g = 0; g < QK_CFG.head_dim / 8; g += 2) {
        const u64 *kb = kw + g, *qb = qp + 4 * g, *qb2 = qp2 + 4 * g;
QK_UNROLL
        for (int w = 0; w < 2; w++) {
            u64 x = kb[w];
QK_UNROLL
            for (int t = 0; t < 4; t++) {
                u64 u = (x >> (8 * t)) & QK_KV8_LANES;
                s += u * qb[4 * w + t];
                QK_KEEP(s);
                if (pair) {
                    s2 += u * qb2[4 * w + t];
                    QK_KEEP(s2);
                }
            }
        }
    }
    u32 up = (QM_CACHE_SH_MAX - (k[QK_CFG.head_dim] & 15)) & 15;
    s64 score = (s64)((u64)qk_kv8_dot(s, (s64)qp[QK_CFG.head_dim / 2]) << up);
    sc[j] = score;
    if (i == 0 || score > cx->max_score[0])
        cx->max_score[0] = score;
    if (pair) {
        s64 score2 = (s64)((u64)qk_kv8_dot(s2, (s64)qp2[QK_CFG.head_dim / 2]) << up);
        sc2[j] = score2;
        if (i == 0 || score2 > cx->max_score[1])
            cx->max_score[1] = score2;
    }
    return 0;
}

/* one callback for both task kinds, pair a constant to the verifier: with
 * a callback per kind, the verifier of Linux 6.18 fails to load the
 * program whose unused kind it drops as dead code ("verifier bug: No
 * program to jit") */
static long qk_attn_score8_cb(u64 i, void *vctx)
{
    return qk_attn_score8(vctx, i, QK_CFG.attn_heads == 2);
}

/* the softmax weights (Q30) at position j in place of the scores, and the
 * smallest V vector shift among the positions that weigh */
static long qk_attn_weight8_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 pair = QK_CFG.attn_heads == 2;
    u32 j = cx->first + (u32)i, key = cx->b * QK_CFG.n_heads + cx->head;
    const u8 *v = QK_LOOKUP(vcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, key), *sc2 = QK_LOOKUP(scores, key + pair);
    u32 kv_head = cx->kv_head;
    if (!v || !sc || !sc2 || j >= QK_CFG.ctx || kv_head >= QK_CFG.n_kv_heads)
        return 1;
    u32 sh = v[QK_CFG.head_dim] & 15;
    u64 p = qk_attn_weight(cx, 0, sc[j]);
    if (p && sh < cx->min_shift[0])
        cx->min_shift[0] = sh;
    sc[j] = (s64)p;
    if (pair) {
        u64 p2 = qk_attn_weight(cx, 1, sc2[j]);
        if (p2 && sh < cx->min_shift[1])
            cx->min_shift[1] = sh;
        sc2[j] = (s64)p2;
    }
    return 0;
}

/* lanes += w u + w1 u1 over a head's code words v and v1 (qk_kv8.h) */
QM_INLINE void qk_attn_add_v8(u64 *lanes, const u64 *v, u64 w, const u64 *v1, u64 w1)
{
    for (u32 g = 0; g < QK_CFG.head_dim / 8; g += 2) {
        u64 *lb = lanes + 4 * g;
        const u64 *vb = v + g, *vb1 = v1 + g;
QK_UNROLL
        for (int n = 0; n < 2; n++) {
            u64 x = vb[n], x1 = vb1[n];
QK_UNROLL
            for (int t = 0; t < 4; t++) {
                u64 u = (x >> (8 * t)) & QK_KV8_LANES, u1 = (x1 >> (8 * t)) & QK_KV8_LANES;
                QK_MUL_INTO(u, w);
                QK_MUL_INTO(u1, w1);
                lb[4 * n + t] += u + u1;
            }
        }
    }
}

/* the value weights of head h at positions j and j1 (0 at j1 unless
 * only): each relative to the chunk's smallest shift (qk_kv8_value_weight),
 * their sum kept beside the head's lanes */
QM_INLINE void qk_attn_weights8(const struct qk_attn_ctx *cx, u32 h, s64 *part, const s64 *sc, u32 j, u32 j1,
                                u64 only, u32 sh, u32 sh1, u64 *w, u64 *w1)
{
    *w = qk_kv8_value_weight((u64)sc[j], sh, cx->min_shift[h & 1]);
    *w1 = qk_kv8_value_weight((u64)sc[j1], sh1, cx->min_shift[h & 1]) & only;
    part[QK_PART_ACC + QK_KV8_W_SUM(QK_CFG.head_dim)] += (s64)(*w + *w1);
}

/* the values of the task's head (or head pair) at positions j = first + 2i
 * and j + 1 (weight 0 past the chunk's end) */
static long qk_attn_value8_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 pair = QK_CFG.attn_heads == 2, has1 = 2 * (u32)i + 1 < cx->count;
    u32 j = cx->first + 2 * (u32)i, j1 = j + has1, key = cx->b * QK_CFG.n_heads + cx->head, kv_head = cx->kv_head;
    const u8 *v = QK_LOOKUP(vcache, cx->kv0 + j), *v1 = QK_LOOKUP(vcache, cx->kv0 + j1);
    const s64 *sc = QK_LOOKUP(scores, key), *sc2 = QK_LOOKUP(scores, key + pair);
    s64 *part = QK_LOOKUP(parts, key * QK_CFG.max_chunks + cx->chunk);
    s64 *part2 = QK_LOOKUP(parts, (key + pair) * QK_CFG.max_chunks + cx->chunk);
    QK_OPAQUE(j1);
    if (!v || !v1 || !sc || !sc2 || !part || !part2 || j >= QK_CFG.ctx || j1 >= QK_CFG.ctx ||
        kv_head >= QK_CFG.n_kv_heads)
        return 1;
    u64 only = 0 - (u64)has1, w, w1, x = 0, x1 = 0;
    u32 sh = v[QK_CFG.head_dim] & 15, sh1 = v1[QK_CFG.head_dim] & 15;
    qk_attn_weights8(cx, 0, part, sc, j, j1, only, sh, sh1, &w, &w1);
    if (pair)
        qk_attn_weights8(cx, 1, part2, sc2, j, j1, only, sh, sh1, &x, &x1);
    const u64 *vw = (const u64 *)v, *vw1 = (const u64 *)v1;
    if (w | w1)
        qk_attn_add_v8((u64 *)(part + QK_PART_ACC), vw, w, vw1, w1);
    if (pair && (x | x1))
        qk_attn_add_v8((u64 *)(part2 + QK_PART_ACC), vw, x, vw1, x1);
    return 0;
}

/* a head's value lanes (lane word 4 g + t: entries 8 g + t and 8 g + t + 4)
 * as the int16 path's partial sums, in place: from the last group down, so
 * no lane word is overwritten before it is read */
QM_INLINE void qk_attn_expand8(s64 *acc, u32 min_sh)
{
    u64 w_sum = (u64)acc[QK_KV8_W_SUM(QK_CFG.head_dim)];
    for (u32 n = 0; n < QK_CFG.head_dim / 8; n++) {
        u32 g = QK_CFG.head_dim / 8 - 1 - n;
        u64 l0 = (u64)acc[4 * g], l1 = (u64)acc[4 * g + 1], l2 = (u64)acc[4 * g + 2], l3 = (u64)acc[4 * g + 3];
        s64 *e = acc + 8 * g;
        e[0] = qk_kv8_value_acc(l0 & 0xffffffffu, w_sum, min_sh);
        e[1] = qk_kv8_value_acc(l1 & 0xffffffffu, w_sum, min_sh);
        e[2] = qk_kv8_value_acc(l2 & 0xffffffffu, w_sum, min_sh);
        e[3] = qk_kv8_value_acc(l3 & 0xffffffffu, w_sum, min_sh);
        e[4] = qk_kv8_value_acc(l0 >> 32, w_sum, min_sh);
        e[5] = qk_kv8_value_acc(l1 >> 32, w_sum, min_sh);
        e[6] = qk_kv8_value_acc(l2 >> 32, w_sum, min_sh);
        e[7] = qk_kv8_value_acc(l3 >> 32, w_sum, min_sh);
    }
}

/* task i of the invocation: as qk_attn_task, over the 8-bit cache */
QK_SUBPROG int qk_attn_task8(const struct qk_attn_ctx *base, u32 i)
{
    if (!base)
        return 1;
    struct qk_attn_ctx t = *base;
    int rc = qk_attn_task_start(&t, i);
    if (rc)
        return rc & 1;
    t.kv0 = qk_kv8_vec(t.kv0, t.kv_head, 0);     /* the task's KV head's values from position 0 */
    u32 pair = QK_CFG.attn_heads == 2;
    QK_LOOP(t.count, qk_attn_score8_cb, &t);
    QK_LOOP(t.count, qk_attn_weight8_cb, &t);
    QK_LOOP((t.count + 1) / 2, qk_attn_value8_cb, &t);
    s64 *part = QK_LOOKUP(parts, (t.b * QK_CFG.n_heads + t.head) * QK_CFG.max_chunks + t.chunk);
    s64 *part2 = QK_LOOKUP(parts, (t.b * QK_CFG.n_heads + t.head + pair) * QK_CFG.max_chunks + t.chunk);
    if (!part || !part2)
        return 1;
    qk_attn_expand8(part + QK_PART_ACC, t.min_shift[0]);
    if (pair)
        qk_attn_expand8(part2 + QK_PART_ACC, t.min_shift[1]);
    if (qk_attn_head_done(&t, 0, t.head) || (pair && qk_attn_head_done(&t, 1, t.head + 1)))
        return 1;
    return 0;
}

static long qk_attn_task8_cb(u64 i, void *vctx)
{
    return qk_attn_task_end(vctx, qk_attn_task8(vctx, (u32)i));
}

QM_INLINE int qk_attention8(const struct qk_args *a)
{
    struct qk_attn_ctx cx;
    if (qk_attn_args(a, &cx))
        return -1;
    long done = QK_LOOP(a->end - a->begin, qk_attn_task8_cb, &cx);
    return qk_attn_result(&cx, done, a->end - a->begin);
}

#endif
