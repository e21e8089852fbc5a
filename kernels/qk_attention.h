/* qk_attention.h - attention over the KV cache in (position, task heads,
 * chunk of 256 positions) tasks, each a partial softmax sum and value
 * vector (struct qk_attn_part), and attn_merge, which combines a head's
 * chunks into its slice of the act vector. */
#ifndef QP_QK_ATTENTION_H
#define QP_QK_ATTENTION_H

#include "qk_rope.h"

/* ---- attention: (head, chunk) tasks over the KV cache --------------- */

struct qk_attn_ctx {
    u32 layer, max_pos, n_chunks, first_task;
    u32 kv0;            /* the task's: KV cache row of position 0 of its entry's KV slot (qk_kv_row0) */
    u32 b0, b;          /* block entries: the first of the invocation, the task's */
    u32 head, kv_head, chunk, first, count;
    u32 has_ext;        /* the layer's K has extension bits (klayout) */
    /* per head of the task (head, head + 1): */
    u32 min_shift[2];   /* smallest V vector shift read (qk_attn_part) */
    u32 deadline;       /* the invocation's (qk_deadline): its task loop stops after the task that
                           passes it; in the struct's padding, so the stack does not grow */
    s64 max_score[2];
    u64 sum[2];
    struct qm_lin lin[2];   /* the score's log2-domain argument (qk_attn_weight) */
};

/* the score of the task's head at position j */
static long qk_attn_score_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, head = cx->head, kv_head = cx->kv_head;
    const s64 *q = QK_LOOKUP(qrot, cx->b);
    const s16 *k = QK_LOOKUP(kcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, cx->b * QK_CFG.n_heads + head);
    if (!q || !k || !sc || j >= QK_CFG.ctx || head >= QK_CFG.n_heads || kv_head >= QK_CFG.n_kv_heads)
        return 1;
    q += head * QK_CFG.head_dim;
    k += kv_head * QK_CFG.head_dim;
    /* blocks of 16 through their own pointers: indexing q[d + t] made clang
     * recompute each address (three times the instructions) */
    s64 s = 0;
    for (u32 d = 0; d < QK_CFG.head_dim; d += 16) {
        const s64 *qb = q + d;
        const s16 *kb = k + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s += qb[t] * kb[t];
            QK_KEEP(s);
        }
    }
    if (cx->has_ext) {
        const s64 *corr = q + QK_CFG.q_dim;   /* qk_query_corr_cb */
        for (u32 d = 0; d < QK_CFG.head_dim; d += 16) {
            const s64 *cb = corr + d;
            const s16 *kb = k + d;
QK_UNROLL
            for (int t = 0; t < 16; t++) {
                s += cb[t] * (kb[t] & 1);
                QK_KEEP(s);
            }
        }
    }
    s = qm_rshift_round(s, qm_cache_untag(k));   /* to the layer's K exponent */
    sc[j] = s;
    if (i == 0 || s > cx->max_score[0])
        cx->max_score[0] = s;
    return 0;
}

/* the scores of the task's two heads at position j, which share their K
 * head: each K entry is read once for both */
static long qk_attn_score2_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, head = cx->head, kv_head = cx->kv_head;
    const s64 *q = QK_LOOKUP(qrot, cx->b);
    const s16 *k = QK_LOOKUP(kcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, cx->b * QK_CFG.n_heads + head);
    s64 *sc2 = QK_LOOKUP(scores, cx->b * QK_CFG.n_heads + head + 1);
    if (!q || !k || !sc || !sc2 || j >= QK_CFG.ctx || head >= QK_CFG.n_heads - 1 || kv_head >= QK_CFG.n_kv_heads)
        return 1;
    q += head * QK_CFG.head_dim;
    const s64 *q2 = q + QK_CFG.head_dim;
    k += kv_head * QK_CFG.head_dim;
    s64 s = 0, s2 = 0;
    for (u32 d = 0; d < QK_CFG.head_dim; d += 16) {
        const s64 *qb = q + d, *qb2 = q2 + d;
        const s16 *kb = k + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s64 kt = kb[t];
            s += qb[t] * kt;
            s2 += qb2[t] * kt;
            QK_KEEP(s);
            QK_KEEP(s2);
        }
    }
    if (cx->has_ext) {
        const s64 *corr = q + QK_CFG.q_dim, *corr2 = q2 + QK_CFG.q_dim;   /* qk_query_corr_cb */
        for (u32 d = 0; d < QK_CFG.head_dim; d += 16) {
            const s64 *cb = corr + d, *cb2 = corr2 + d;
            const s16 *kb = k + d;
QK_UNROLL
            for (int t = 0; t < 16; t++) {
                s64 kt = kb[t] & 1;
                s += cb[t] * kt;
                s2 += cb2[t] * kt;
                QK_KEEP(s);
                QK_KEEP(s2);
            }
        }
    }
    u32 sh = qm_cache_untag(k);   /* to the layer's K exponent */
    s = qm_rshift_round(s, sh);
    s2 = qm_rshift_round(s2, sh);
    sc[j] = s;
    sc2[j] = s2;
    if (i == 0 || s > cx->max_score[0])
        cx->max_score[0] = s;
    if (i == 0 || s2 > cx->max_score[1])
        cx->max_score[1] = s2;
    return 0;
}

/* the softmax weight (Q30, before normalising) of head h of the task at
 * position j, whose score is sc[j] */
QM_INLINE u64 qk_attn_weight(struct qk_attn_ctx *cx, u32 h, s64 score)
{
    const struct qm_lin *lin = &cx->lin[h & 1];
    u64 t = (u64)(cx->max_score[h & 1] - score);
    if (t >= lin->t_cut)
        return 0;
    u64 p = qm_exp2_neg_q30(qm_lin_arg_q24(lin, t));
    cx->sum[h & 1] += p;
    return p;
}

/* acc += w * v over a head's entries. |w| <= 2^38 and |v| < 2^15: a
 * chunk's 256 positions keep |acc| < 2^61 */
QM_INLINE void qk_attn_add_v(s64 *acc, const s16 *v, s64 w)
{
    for (u32 d = 0; d < QK_CFG.head_dim; d += 16) {
        s64 *ab = acc + d;
        const s16 *vb = v + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s64 wv = vb[t];
            QK_MUL_INTO(wv, w);
            ab[t] += wv;
        }
    }
}

static long qk_attn_value_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, kv_head = cx->kv_head;
    const s16 *v = QK_LOOKUP(vcache, cx->kv0 + j);
    const s64 *sc = QK_LOOKUP(scores, cx->b * QK_CFG.n_heads + cx->head);
    s64 *part = QK_LOOKUP(parts, (cx->b * QK_CFG.n_heads + cx->head) * QK_CFG.max_chunks + cx->chunk);
    if (!v || !sc || !part || j >= QK_CFG.ctx || kv_head >= QK_CFG.n_kv_heads)
        return 1;
    u64 p = qk_attn_weight(cx, 0, sc[j]);
    if (p == 0)
        return 0;
    v += kv_head * QK_CFG.head_dim;
    u32 sh = qm_cache_untag(v);   /* this vector's exponent: v_exp - sh */
    if (sh < cx->min_shift[0])
        cx->min_shift[0] = sh;
    qk_attn_add_v(part + QK_PART_ACC, v, qm_v_weight(p, qm_cache_untag(v + 4), sh));
    return 0;
}

/* the V weights of the task's two heads at position j, in place of their
 * scores (qm_v_weight: the softmax weight with the V vector's scale
 * undone; 0 where the softmax underflowed), for qk_attn_value2x2_cb */
static long qk_attn_weight2_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 j = cx->first + (u32)i, key = cx->b * QK_CFG.n_heads + cx->head;
    const s16 *v = QK_LOOKUP(vcache, cx->kv0 + j);
    s64 *sc = QK_LOOKUP(scores, key), *sc2 = QK_LOOKUP(scores, key + 1);
    u32 kv_head = cx->kv_head;   /* read after the lookups: one register, checked and used */
    if (!v || !sc || !sc2 || j >= QK_CFG.ctx || kv_head >= QK_CFG.n_kv_heads)
        return 1;
    v += kv_head * QK_CFG.head_dim;
    u32 sh = qm_cache_untag(v), st = qm_cache_untag(v + 4);
    u64 p = qk_attn_weight(cx, 0, sc[j]), p2 = qk_attn_weight(cx, 1, sc2[j]);
    if (p && sh < cx->min_shift[0])
        cx->min_shift[0] = sh;
    if (p2 && sh < cx->min_shift[1])
        cx->min_shift[1] = sh;
    sc[j] = p ? qm_v_weight(p, st, sh) : 0;
    sc2[j] = p2 ? qm_v_weight(p2, st, sh) : 0;
    return 0;
}

/* acc += w * v + w1 * v1 over a head's entries, two positions at once:
 * each accumulator is loaded and stored once for both, fewer instructions
 * per multiply-add than a position at a time even with clang spilling a
 * little. The same integer sum as two qk_attn_add_v, whose bound holds in
 * any order. */
QM_INLINE void qk_attn_add_v2(s64 *acc, const s16 *v, s64 w, const s16 *v1, s64 w1)
{
    for (u32 d = 0; d < QK_CFG.head_dim; d += 16) {
        s64 *ab = acc + d;
        const s16 *vb = v + d, *vb1 = v1 + d;
QK_UNROLL
        for (int t = 0; t < 16; t++) {
            s64 wv = vb[t], wv1 = vb1[t];
            QK_MUL_INTO(wv, w);
            QK_MUL_INTO(wv1, w1);
            ab[t] += wv + wv1;
        }
    }
}

/* the values of the task's two heads at positions j = first + 2i and
 * j + 1 (weight 0 past the chunk's end), from qk_attn_weight2_cb's
 * weights: each head's sums take both positions in one pass over its
 * entries, and the two V vectors are in the CPU's cache for the second */
static long qk_attn_value2x2_cb(u64 i, void *vctx)
{
    struct qk_attn_ctx *cx = vctx;
    u32 has1 = 2 * (u32)i + 1 < cx->count;
    u32 j = cx->first + 2 * (u32)i, j1 = j + has1, kv_head = cx->kv_head, key = cx->b * QK_CFG.n_heads + cx->head;
    const s16 *v = QK_LOOKUP(vcache, cx->kv0 + j), *v1 = QK_LOOKUP(vcache, cx->kv0 + j1);
    const s64 *sc = QK_LOOKUP(scores, key), *sc2 = QK_LOOKUP(scores, key + 1);
    s64 *part = QK_LOOKUP(parts, key * QK_CFG.max_chunks + cx->chunk);
    s64 *part2 = QK_LOOKUP(parts, (key + 1) * QK_CFG.max_chunks + cx->chunk);
    QK_OPAQUE(j1);   /* its own register, bounded by its own test */
    if (!v || !v1 || !sc || !sc2 || !part || !part2 || j >= QK_CFG.ctx || j1 >= QK_CFG.ctx ||
        kv_head >= QK_CFG.n_kv_heads)
        return 1;
    s64 only = -(s64)has1;   /* all ones when j + 1 is in the chunk */
    s64 w = sc[j], w1 = sc[j1] & only, x = sc2[j], x1 = sc2[j1] & only;
    v += kv_head * QK_CFG.head_dim;
    v1 += kv_head * QK_CFG.head_dim;
    if (w | w1)
        qk_attn_add_v2(part + QK_PART_ACC, v, w, v1, w1);
    if (x | x1)
        qk_attn_add_v2(part2 + QK_PART_ACC, v, x, v1, x1);
    return 0;
}

/* starts head h of the task: its scores' scale, its sums, its zeroed partial */
QM_INLINE int qk_attn_head_init(struct qk_attn_ctx *t, const struct qk_scalars *sc, u32 h, u32 head)
{
    s32 score_exp = sc->q_exp[QK_IDX(head, QK_MAX_HEADS)] +
                    qk_exp_const(QK_CFG.k_exp[QK_IDX(t->layer, QK_MAX_LAYERS)]) - QK_KBOOST_MAX;
    t->lin[h & 1] = qm_lin_make(score_exp, QK_SF(attn_c));
    t->max_score[h & 1] = 0;
    t->sum[h & 1] = 0;
    t->min_shift[h & 1] = QM_CACHE_SH_MAX;
    s64 *part = QK_LOOKUP(parts, (t->b * QK_CFG.n_heads + head) * QK_CFG.max_chunks + t->chunk);
    if (!part)
        return -1;
    for (u32 d = 0; d < QK_CFG.head_dim; d++)
        part[QK_PART_ACC + d] = 0;
    return 0;
}

/* ends head h of the task: its maximum, sum and shift beside its sums */
QM_INLINE int qk_attn_head_done(const struct qk_attn_ctx *t, u32 h, u32 head)
{
    s64 *part = QK_LOOKUP(parts, (t->b * QK_CFG.n_heads + head) * QK_CFG.max_chunks + t->chunk);
    if (!part)
        return -1;
    part[0] = t->max_score[h & 1];
    part[1] = (s64)t->sum[h & 1];
    part[2] = t->min_shift[h & 1];
    return 0;
}

/* Task i (entry, its QK_CFG.attn_heads task heads, chunk) of the invocation
 * base describes, set up in *t with its heads started: 0 to compute it,
 * 2 when the chunk is past its entry's position (the block's later entries
 * have it), 1 on an index outside the model. */
QM_INLINE int qk_attn_task_start(struct qk_attn_ctx *t, u32 i)
{
    u32 task = t->first_task + i, layer = t->layer, n_chunks = t->n_chunks;
    u32 pair = QK_CFG.attn_heads == 2, head_tasks = QK_CFG.n_heads >> pair;
    if (n_chunks == 0 || layer >= QK_CFG.n_layers || layer >= QK_MAX_LAYERS)
        return 1;
    u32 per_entry = head_tasks * n_chunks, b = t->b0 + task / per_entry;
    u32 head = (task % per_entry / n_chunks) << pair, chunk = task % n_chunks;
    struct qk_scalars *sc = QK_LOOKUP(scal, b);
    const s32 *kl = QK_LOOKUP(klayout, layer);
    const struct qk_seq *sq = qk_seq_of(b, t->max_pos);
    if (!sc || !kl || !sq || head + pair >= QK_CFG.n_heads || head + pair >= QK_MAX_HEADS || chunk >= QK_CFG.max_chunks)
        return 1;
    u32 pos = sq->pos;
    if (chunk * QK_ATTN_CHUNK > pos)
        return 2;
    t->b = b;
    t->kv0 = qk_kv_row0(sq->kv_slot, layer);
    t->head = head;
    t->chunk = chunk;
    t->kv_head = head / (QK_CFG.n_heads / QK_CFG.n_kv_heads);
    t->first = chunk * QK_ATTN_CHUNK;
    t->count = pos + 1 - t->first;
    if (t->count > QK_ATTN_CHUNK)
        t->count = QK_ATTN_CHUNK;
    t->has_ext = kl[QK_KL_DONORS(QK_CFG.head_dim)] != 0;
    if (qk_attn_head_init(t, sc, 0, head) || (pair && qk_attn_head_init(t, sc, 1, head + 1)))
        return 1;
    return 0;
}

/* Task i of the invocation base describes: its heads' sums over the
 * chunk's positions. A function of its own in the kernels (QK_SUBPROG):
 * the verifier checks it once, knowing nothing of its arguments, where
 * inlined into the loop's callback it was checked again for each state its
 * set-up's paths reach the loops in (on Linux 6.18.44 past the verifier's
 * limit of 1M instructions at the learned tiny model's sizes). */
QK_SUBPROG int qk_attn_task(const struct qk_attn_ctx *base, u32 i)
{
    if (!base)
        return 1;
    struct qk_attn_ctx t = *base;       /* bpf_loop takes a context on the stack */
    int rc = qk_attn_task_start(&t, i);
    if (rc)
        return rc & 1;
    u32 pair = QK_CFG.attn_heads == 2;
    if (pair) {
        QK_LOOP(t.count, qk_attn_score2_cb, &t);
        QK_LOOP(t.count, qk_attn_weight2_cb, &t);
        QK_LOOP((t.count + 1) / 2, qk_attn_value2x2_cb, &t);
    } else {
        QK_LOOP(t.count, qk_attn_score_cb, &t);
        QK_LOOP(t.count, qk_attn_value_cb, &t);
    }
    if (qk_attn_head_done(&t, 0, t.head) || (pair && qk_attn_head_done(&t, 1, t.head + 1)))
        return 1;
    return 0;
}

/* The end of a task's callback: rc & 1 stops the loop on a failed task,
 * as does the deadline (qk_attn_result tells which). */
QM_INLINE long qk_attn_task_end(const struct qk_attn_ctx *cx, int rc)
{
    QK_OPAQUE(rc);      /* 0 or 1, which the verifier learns from the mask */
    return (rc | qk_past(cx->deadline)) & 1;
}

static long qk_attn_task_cb(u64 i, void *vctx)
{
    return qk_attn_task_end(vctx, qk_attn_task(vctx, (u32)i));
}

/* chunks of the block's last entry: every entry's tasks are numbered so */
QM_INLINE u32 qk_attn_chunks(const struct qk_args *a)
{
    return a->max_pos / QK_ATTN_CHUNK + 1;
}

/* the invocation's tasks in *cx when its arguments are inside the model */
QM_INLINE int qk_attn_args(const struct qk_args *a, struct qk_attn_ctx *cx)
{
    if (a->layer >= QK_CFG.n_layers || !qk_entries_ok(a) || a->max_pos >= QK_CFG.ctx)
        return -1;
    u32 n_chunks = qk_attn_chunks(a);
    if (QK_CFG.attn_heads != 1 && QK_CFG.attn_heads != 2)
        return -1;
    if (a->begin >= a->end || a->end > a->nb * (QK_CFG.n_heads >> (QK_CFG.attn_heads == 2)) * n_chunks)
        return -1;
    *cx = (struct qk_attn_ctx){.layer = a->layer, .max_pos = a->max_pos, .n_chunks = n_chunks,
                               .first_task = a->begin, .b0 = a->b0, .deadline = qk_deadline()};
    return 0;
}

/* an attention invocation's return: 0, or the tasks done (of n) when the
 * deadline stopped it before the last (QK_RET_PARTIAL). A task that failed
 * (an entry outside the model, which the engine's check of the seq map
 * reports) ends it as today, unless the deadline passed too: then the
 * rest runs in another call, and the failed task is not tried again. */
QM_INLINE int qk_attn_result(const struct qk_attn_ctx *cx, long done, u32 n)
{
    return done < n && qk_past(cx->deadline) ? (int)done : 0;
}

/* tasks (entry, head, chunk), entries b0.. in order, [begin, end) of them */
QM_INLINE int qk_attention(const struct qk_args *a)
{
    struct qk_attn_ctx cx;
    if (qk_attn_args(a, &cx))
        return -1;
    long done = QK_LOOP(a->end - a->begin, qk_attn_task_cb, &cx);
    return qk_attn_result(&cx, done, a->end - a->begin);
}

/* ---- attn_merge: chunks of a head -> its slice of x ----------------- */

struct qk_merge_ctx {
    u32 layer, n_chunks, head, first;
    u32 pos, b;         /* the entry's position and block entry */
    u32 n_heads;        /* heads [first, first + n_heads) */
    u32 parts0;         /* parts key of the entry's head 0, chunk 0 */
    s64 max_score;
    u64 sum;
    s32 score_exp;
    u32 shift;          /* sum normalisation */
    u32 down;           /* bits each partial drops as it is added */
    s32 up;             /* 1: shift left */
    u32 min_shift;      /* smallest V vector shift over all partials */
};

static long qk_merge_max_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    const s64 *part = QK_LOOKUP(parts, cx->parts0 + cx->head * QK_CFG.max_chunks + (u32)i);
    if (!part)
        return 1;
    if (i == 0 || part[0] > cx->max_score)
        cx->max_score = part[0];
    return 0;
}

/* The output's exponent follows the largest V vector any head read, not
 * the layer's static bound, which sits ~2^9 above it on a stress model:
 * every partial of every head (the same on both threads) bounds it. */
static long qk_merge_bound_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    u32 head = (u32)i / cx->n_chunks, chunk = (u32)i % cx->n_chunks;
    const s64 *part = QK_LOOKUP(parts, cx->parts0 + head * QK_CFG.max_chunks + chunk);
    if (!part)
        return 1;
    if ((u64)part[2] < cx->min_shift)
        cx->min_shift = (u32)part[2];
    return 0;
}

/* Scales chunk i's partial to the head's max and adds it into chunk 0,
 * 2^down smaller: n_chunks partials below 2^61 each sum below 2^62. */
static long qk_merge_add_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    s64 *part = QK_LOOKUP(parts, cx->parts0 + cx->head * QK_CFG.max_chunks + (u32)i);
    s64 *base = QK_LOOKUP(parts, cx->parts0 + cx->head * QK_CFG.max_chunks);
    if (!part || !base)
        return 1;
    u64 t = (u64)(cx->max_score - part[0]);
    u32 f = qm_exp2_neg_q30(qm_log2_arg_q24(t, cx->score_exp, QK_SF(attn_c)));
    cx->sum += (u64)qm_mul_q30(part[1], f);
    for (u32 d = 0; d < QK_CFG.head_dim; d++) {
        s64 v = qm_rshift_round(qm_mul_q30(part[QK_PART_ACC + d], f), cx->down);
        base[QK_PART_ACC + d] = i == 0 ? v : base[QK_PART_ACC + d] + v;
    }
    return 0;
}

static long qk_merge_head_cb(u64 i, void *vctx)
{
    struct qk_merge_ctx *cx = vctx;
    u32 head = cx->first + (u32)i, layer = cx->layer;
    struct qk_scalars *sc = QK_LOOKUP(scal, cx->b);
    s64 *x = QK_LOOKUP(x, cx->b);
    if (!sc || !x || head >= QK_CFG.n_heads || head >= QK_MAX_HEADS || layer >= QK_CFG.n_layers ||
        layer >= QK_MAX_LAYERS || QK_CFG.q_dim > QK_CFG.act_len)
        return 1;
    struct qk_merge_ctx m = *cx;
    m.head = head;
    m.sum = 0;
    m.score_exp = sc->q_exp[QK_IDX(head, QK_MAX_HEADS)] + qk_exp_const(QK_CFG.k_exp[QK_IDX(layer, QK_MAX_LAYERS)]) -
                  QK_KBOOST_MAX;
    QK_LOOP(cx->n_chunks, qk_merge_max_cb, &m);
    QK_LOOP(cx->n_chunks, qk_merge_add_cb, &m);
    const s64 *acc = QK_LOOKUP(parts, cx->parts0 + head * QK_CFG.max_chunks);
    if (!acc || m.sum == 0)
        return 1;
    acc += QK_PART_ACC;
    /* o = acc / sum with the sum brought to [2^38, 2^39): |acc| <= sum *
     * 2^(15 + F - min_shift - down) (F = QM_V_WEIGHT_FRAC), so acc scaled
     * by 2^(8 + min_shift - F + down) stays below 2^62 and o below 2^23 */
    u32 n = qm_bitlen(m.sum);
    u64 sum = n > 39 ? m.sum >> (n - 39) : m.sum << (39 - n);
    s32 sh = 39 - (s32)n + 8 + (s32)m.min_shift - QM_V_WEIGHT_FRAC + (s32)m.down;
    for (u32 d = 0; d < QK_CFG.head_dim; d++) {
        s64 v = qm_scale_pow2(acc[d], sh);
        u64 mag = qm_abs(v);
        u64 q = (mag + sum / 2) / sum;
        x[head * QK_CFG.head_dim + d] = v < 0 ? -(s64)q : (s64)q;
    }
    return 0;
}

/* one block entry: heads [first, first + n_heads) of its attention output */
static long qk_merge_entry_cb(u64 i, void *vctx)
{
    const struct qk_merge_ctx *base = vctx;
    u32 b = base->b + (u32)i, layer = base->layer;
    struct qk_scalars *sc = QK_LOOKUP(scal, b);
    const struct qk_seq *sq = qk_seq_of(b, QK_CFG.ctx - 1);
    if (!sc || !sq || layer >= QK_CFG.n_layers)
        return 1;
    u32 pos = sq->pos;
    struct qk_merge_ctx cx = {.layer = layer, .n_chunks = pos / QK_ATTN_CHUNK + 1, .first = base->first,
                              .pos = pos, .b = b, .parts0 = b * QK_CFG.n_heads * QK_CFG.max_chunks,
                              .min_shift = QM_CACHE_SH_MAX};
    cx.down = qm_bitlen(cx.n_chunks - 1);
    QK_LOOP(QK_CFG.n_heads * cx.n_chunks, qk_merge_bound_cb, &cx);
    QK_LOOP(base->n_heads, qk_merge_head_cb, &cx);
    sc->x_exp = qk_exp_const(QK_CFG.v_exp[QK_IDX(layer, QK_MAX_LAYERS)]) - 8 - (s32)cx.min_shift;
    return 0;
}

QM_INLINE int qk_attn_merge(const struct qk_args *a)
{
    if (a->layer >= QK_CFG.n_layers || !qk_entries_ok(a) || a->begin >= a->end || a->end > QK_CFG.n_heads)
        return -1;
    struct qk_merge_ctx cx = {.layer = a->layer, .first = a->begin, .b = a->b0,
                              .n_heads = a->end - a->begin};
    QK_LOOP(a->nb, qk_merge_entry_cb, &cx);
    return 0;
}

#endif
