/* plan.c - model constants and map layout from a validated container. */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* bounds on the KV cache get this much slack for rounding in the kernels */
#define KV_BOUND_MARGIN 1.01

struct qm_sf qp_sf_from_double(double v)
{
    int e;
    double frac = frexp(v, &e);               /* v = frac * 2^e, frac in [0.5, 1) */
    uint64_t m = (uint64_t)llround(ldexp(frac, 32));
    return qm_sf_make(m, e - 32);
}

double qp_sf_to_double(struct qm_sf v)
{
    return ldexp((double)v.m, v.e);
}

static double i32s_max_abs(const struct qpk_tensor *t)
{
    int64_t max = 0;
    for (uint32_t i = 0; i < t->cols; i++) {
        int32_t q;
        memcpy(&q, t->data + 4 * (uint64_t)i, 4);
        max = llabs((long long)q) > max ? llabs((long long)q) : max;
    }
    return ldexp((double)max, -t->scale_exp);
}

/* value of element (r, c) of a tiled matrix (q24 or i8g) */
static double matrix_value(const struct qpk_tensor *t, uint32_t r, uint32_t c)
{
    const uint8_t *blk = t->data + (uint64_t)(r / QPK_Q24_TILE_ROWS) * t->row_stride;
    uint64_t at = (uint64_t)(c / QPK_Q24_TILE_COLS) * 64 + (r % 4) * 16 + c % 16;
    if (t->encoding == QPK_ENC_I8G) {
        int32_t d;
        memcpy(&d, blk + (uint64_t)t->cols * 4 + ((uint64_t)(c / t->group_size) * 4 + r % 4) * 4, 4);
        return ldexp((double)d * (int8_t)blk[at], -t->scale_exp);
    }
    int32_t q;
    memcpy(&q, blk + 4 * at, 4);
    return ldexp((double)q, -24);
}

/* largest Euclidean norm of a row of a matrix */
static double max_row_norm(const struct qpk_tensor *t)
{
    double best = 0;
    for (uint32_t r = 0; r < t->rows; r++) {
        double ss = 0;
        for (uint32_t c = 0; c < t->cols; c++) {
            double v = matrix_value(t, r, c);
            ss += v * v;
        }
        best = fmax(best, sqrt(ss));
    }
    return best;
}

/* smallest exponent e with bound <= 32767 * 2^e */
static int32_t cache_exponent(double bound)
{
    if (!(bound > 0))
        return -30;
    return (int32_t)ceil(log2(bound * KV_BOUND_MARGIN / 32767.0));
}

/* K after q/k RMSNorm and RoPE: |k_i| <= sqrt(head_dim) max|g|. V = W_v x
 * with x the input RMSNorm's output: |v_j| <= |W_v row j| |x|, and
 * |x| <= sqrt(hidden) max|g|. Neither bound can be exceeded. */
static void kv_exponents(struct qp_plan *p, const struct qpk_file *f)
{
    struct qk_config *c = &p->cfg;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        double gk = i32s_max_abs(qpk_tensor_of(f, QPK_ROLE_K_NORM, l));
        double gx = i32s_max_abs(qpk_tensor_of(f, QPK_ROLE_ATTN_NORM, l));
        double wv = max_row_norm(qpk_tensor_of(f, QPK_ROLE_V, l));
        c->k_exp[l] = cache_exponent(sqrt((double)c->head_dim) * gk);
        c->v_exp[l] = cache_exponent(wv * sqrt((double)c->hidden) * gx);
    }
}

/* K channel boosts. q_norm/k_norm scales in the hundreds on a few channels
 * would leave the other channels of an int16 K vector with few bits. Each
 * RoPE channel pair i of layer l is stored as k * 2^b_i, with b_i the most
 * (up to QK_KBOOST_MAX) that keeps it under the vector's static bound:
 * 2^b_i <= max|g| / max(|g_i|, |g_i+half|). The query is scaled by
 * 2^(QK_KBOOST_MAX - b_i), so q.k gains the constant 2^QK_KBOOST_MAX. */
static int fill_kboost(struct qp_plan *p, const struct qpk_file *f, qp_err *err)
{
    const struct qk_config *c = &p->cfg;
    uint32_t half = c->head_dim / 2;
    p->kboost_table = calloc((uint64_t)c->n_layers * half, sizeof(int32_t));
    if (!p->kboost_table)
        return qp_fail(err, "out of memory");
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const struct qpk_tensor *g = qpk_tensor_of(f, QPK_ROLE_K_NORM, l);
        int64_t gmax = 0;
        for (uint32_t i = 0; i < c->head_dim; i++) {
            int32_t q;
            memcpy(&q, g->data + 4 * (uint64_t)i, 4);
            gmax = llabs((long long)q) > gmax ? llabs((long long)q) : gmax;
        }
        for (uint32_t i = 0; i < half; i++) {
            int32_t a, b;
            memcpy(&a, g->data + 4 * (uint64_t)i, 4);
            memcpy(&b, g->data + 4 * (uint64_t)(i + half), 4);
            int64_t pair = llabs((long long)a) > llabs((long long)b) ? llabs((long long)a) : llabs((long long)b);
            int32_t boost = 0;
            while (boost < QK_KBOOST_MAX && (pair << (boost + 1)) <= gmax)
                boost++;
            p->kboost_table[(uint64_t)l * half + i] = boost;
        }
    }
    return 0;
}

static int fill_rope(struct qp_plan *p, double theta, qp_err *err)
{
    const struct qk_config *c = &p->cfg;
    uint32_t half = c->head_dim / 2;
    p->rope_table = malloc((uint64_t)c->ctx * half * 2 * sizeof(int32_t));
    if (!p->rope_table)
        return qp_fail(err, "out of memory for the RoPE table");
    for (uint32_t pos = 0; pos < c->ctx; pos++)
        for (uint32_t i = 0; i < half; i++) {
            double a = pos * pow(theta, -2.0 * i / c->head_dim);
            int32_t *cs = p->rope_table + ((uint64_t)pos * half + i) * 2;
            cs[0] = (int32_t)llround(ldexp(cos(a), 30));
            cs[1] = (int32_t)llround(ldexp(sin(a), 30));
        }
    return 0;
}

static void set_map(struct qp_plan *p, enum qp_map_id id, const char *name, uint64_t value_size,
                    uint64_t entries)
{
    p->maps[id] = (struct qp_mapspec){.name = name, .value_size = (uint32_t)value_size,
                                      .max_entries = (uint32_t)entries};
}

static int add_seg(struct qp_plan *p, enum qp_map_id id, uint32_t key, const struct qpk_tensor *t,
                   qp_err *err)
{
    struct qp_mapspec *m = &p->maps[id];
    struct qp_segment *s = realloc(m->segs, (m->n_segs + 1) * sizeof *s);
    if (!s)
        return qp_fail(err, "out of memory");
    m->segs = s;
    uint32_t n = (uint32_t)(t->nbytes / m->value_size);
    s[m->n_segs++] = (struct qp_segment){key, n, t->data};
    return 0;
}

static int weight_segments(struct qp_plan *p, const struct qpk_file *f, qp_err *err)
{
    const struct qk_config *c = &p->cfg;
    static const unsigned hid_roles[] = {QPK_ROLE_Q, QPK_ROLE_K, QPK_ROLE_V, QPK_ROLE_GATE, QPK_ROLE_UP};
    int rc = 0;
    for (uint32_t l = 0; l < c->n_layers && !rc; l++) {
        uint32_t key = l * c->hid_groups_per_layer;
        for (size_t r = 0; r < 5 && !rc; r++) {
            const struct qpk_tensor *t = qpk_tensor_of(f, hid_roles[r], l);
            rc = add_seg(p, QP_MAP_W_HID, key, t, err);
            key += t->rows / QPK_Q24_TILE_ROWS;
        }
        rc = rc || add_seg(p, QP_MAP_W_O, l * (c->hidden / 4), qpk_tensor_of(f, QPK_ROLE_O, l), err) ||
             add_seg(p, QP_MAP_W_DOWN, l * (c->hidden / 4), qpk_tensor_of(f, QPK_ROLE_DOWN, l), err) ||
             add_seg(p, QP_MAP_NORMS, 2 * l, qpk_tensor_of(f, QPK_ROLE_ATTN_NORM, l), err) ||
             add_seg(p, QP_MAP_NORMS, 2 * l + 1, qpk_tensor_of(f, QPK_ROLE_MLP_NORM, l), err) ||
             add_seg(p, QP_MAP_QK_NORMS, 2 * l, qpk_tensor_of(f, QPK_ROLE_Q_NORM, l), err) ||
             add_seg(p, QP_MAP_QK_NORMS, 2 * l + 1, qpk_tensor_of(f, QPK_ROLE_K_NORM, l), err);
    }
    if (rc || add_seg(p, QP_MAP_W_HID, c->embed_group, qpk_tensor_of(f, QPK_ROLE_EMBED, QPK_NO_LAYER), err) ||
        add_seg(p, QP_MAP_NORMS, 2 * c->n_layers, qpk_tensor_of(f, QPK_ROLE_FINAL_NORM, QPK_NO_LAYER), err))
        return -1;
    const struct qpk_tensor *head = qpk_tensor_of(f, QPK_ROLE_LM_HEAD, QPK_NO_LAYER);
    return head ? add_seg(p, QP_MAP_W_HID, c->lm_group, head, err) : 0;
}

/* the adjustment qk_row_adj adds to a product's exponent for a tensor */
static int32_t row_adj(const struct qpk_tensor *t)
{
    return t->encoding == QPK_ENC_I8G ? 24 + QK_I8_GROUP_SHIFT - t->scale_exp : 0;
}

static void fill_matrix_encoding(struct qk_config *c, const struct qpk_file *f)
{
    static const unsigned roles[8] = {QPK_ROLE_Q, QPK_ROLE_K, QPK_ROLE_V, QPK_ROLE_O,
                                      QPK_ROLE_GATE, QPK_ROLE_UP, QPK_ROLE_DOWN, 0};
    const struct qpk_tensor *embed = qpk_tensor_of(f, QPK_ROLE_EMBED, QPK_NO_LAYER);
    const struct qpk_tensor *head = qpk_tensor_of(f, QPK_ROLE_LM_HEAD, QPK_NO_LAYER);
    c->w_enc = embed->encoding;
    c->w_group = embed->group_size ? embed->group_size : 16;
    while ((1u << c->w_group_shift) < c->w_group)
        c->w_group_shift++;
    c->embed_adj = QM_RESID_FRAC - embed->scale_exp;
    c->lm_adj = row_adj(head ? head : embed);
    for (uint32_t l = 0; l < c->n_layers; l++)
        for (int k = 0; k < 7; k++)
            c->w_adj[l * 8 + k] = row_adj(qpk_tensor_of(f, roles[k], l));
}

static void fill_config(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx)
{
    const struct qpk_config *q = &f->cfg;
    struct qk_config *c = &p->cfg;
    memset(c, 0, sizeof *c);
    c->hidden = q->hidden;
    c->inter = q->intermediate;
    c->head_dim = q->head_dim;
    c->n_heads = q->n_heads;
    c->n_kv_heads = q->n_kv_heads;
    c->q_dim = q->n_heads * q->head_dim;
    c->kv_dim = q->n_kv_heads * q->head_dim;
    c->vocab = q->vocab;
    c->n_layers = q->n_layers;
    c->ctx = ctx;
    c->max_chunks = (ctx + QK_ATTN_CHUNK - 1) / QK_ATTN_CHUNK;
    c->hid_groups_per_layer = (c->q_dim + 2 * c->kv_dim + 2 * c->inter) / 4;
    c->embed_group = c->n_layers * c->hid_groups_per_layer;
    c->lm_group = (q->flags & QPK_CONFIG_TIED) ? c->embed_group : c->embed_group + c->vocab / 4;
    c->act_len = c->hidden > c->q_dim ? c->hidden : c->q_dim;
    c->act_len = c->inter > c->act_len ? c->inter : c->act_len;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        c->norm_exp[2 * l] = qpk_tensor_of(f, QPK_ROLE_ATTN_NORM, l)->scale_exp;
        c->norm_exp[2 * l + 1] = qpk_tensor_of(f, QPK_ROLE_MLP_NORM, l)->scale_exp;
        c->qk_norm_exp[2 * l] = qpk_tensor_of(f, QPK_ROLE_Q_NORM, l)->scale_exp;
        c->qk_norm_exp[2 * l + 1] = qpk_tensor_of(f, QPK_ROLE_K_NORM, l)->scale_exp;
    }
    c->norm_exp[2 * c->n_layers] = qpk_tensor_of(f, QPK_ROLE_FINAL_NORM, QPK_NO_LAYER)->scale_exp;
    fill_matrix_encoding(c, f);
    c->eps = qp_sf_from_double(q->rms_eps);
    c->inv_hidden = qp_sf_from_double(1.0 / c->hidden);
    c->inv_head_dim = qp_sf_from_double(1.0 / c->head_dim);
    c->attn_c = qp_sf_from_double(1.0 / (log(2.0) * sqrt((double)c->head_dim)));
}

/* bytes of one 4-row block of a matrix with cols columns */
static uint64_t block_bytes(const struct qk_config *c, uint32_t cols)
{
    if (c->w_enc == QK_ENC_I8G)
        return 4ull * cols + 16ull * (cols / c->w_group);
    return 16ull * cols;
}

static void size_maps(struct qp_plan *p, bool tied)
{
    const struct qk_config *c = &p->cfg;
    uint64_t hid_groups = (uint64_t)c->embed_group + c->vocab / 4 * (tied ? 1 : 2);
    set_map(p, QP_MAP_W_HID, "w_hid", block_bytes(c, c->hidden), hid_groups);
    set_map(p, QP_MAP_W_O, "w_o", block_bytes(c, c->q_dim), (uint64_t)c->n_layers * c->hidden / 4);
    set_map(p, QP_MAP_W_DOWN, "w_down", block_bytes(c, c->inter), (uint64_t)c->n_layers * c->hidden / 4);
    set_map(p, QP_MAP_NORMS, "norms", 4ull * c->hidden, 2ull * c->n_layers + 1);
    set_map(p, QP_MAP_QK_NORMS, "qk_norms", 4ull * c->head_dim, 2ull * c->n_layers);
    set_map(p, QP_MAP_ROPE, "rope", 4ull * c->head_dim, c->ctx);
    set_map(p, QP_MAP_KBOOST, "kboost", 2ull * c->head_dim, c->n_layers);
    set_map(p, QP_MAP_KCACHE, "kcache", 2ull * c->kv_dim, (uint64_t)c->n_layers * c->ctx);
    set_map(p, QP_MAP_VCACHE, "vcache", 2ull * c->kv_dim, (uint64_t)c->n_layers * c->ctx);
    set_map(p, QP_MAP_H, "h", 8ull * c->hidden, 1);
    set_map(p, QP_MAP_X, "x", 8ull * c->act_len, 1);
    set_map(p, QP_MAP_QKV, "qkv", 8ull * (c->q_dim + 2 * c->kv_dim), 1);
    set_map(p, QP_MAP_QROT, "qrot", 8ull * c->q_dim, 1);
    set_map(p, QP_MAP_GU, "gu", 16ull * c->inter, 1);
    set_map(p, QP_MAP_SCORES, "scores", 8ull * c->ctx, c->n_heads);
    set_map(p, QP_MAP_PARTS, "parts", 16 + 8ull * c->head_dim, (uint64_t)c->n_heads * c->max_chunks);
    set_map(p, QP_MAP_LOGITS, "logits", 8ull * c->vocab, 1);
    set_map(p, QP_MAP_AMAX, "amax", sizeof(struct qk_argmax), QK_MAX_ARGMAX_SLOTS);
    set_map(p, QP_MAP_SCAL, "scal", sizeof(struct qk_scalars), 1);
    /* --stream's work map: at most QP_STREAM_WORK_BYTES, at most half the
     * matrices' blocks (so streaming never holds the model), at least 8 */
    uint64_t widest = block_bytes(c, c->act_len);
    uint64_t blocks = p->maps[QP_MAP_W_HID].max_entries + p->maps[QP_MAP_W_O].max_entries +
                      p->maps[QP_MAP_W_DOWN].max_entries;
    uint64_t work = QP_STREAM_WORK_BYTES / widest < blocks / 2 ? QP_STREAM_WORK_BYTES / widest : blocks / 2;
    set_map(p, QP_MAP_WORK, "work", widest, work > 8 ? work : 8);
    p->kv_bytes_per_pos = 2ull * 2 * c->kv_dim * c->n_layers;
}

const uint8_t *qp_segments_find(const struct qp_segment *segs, uint32_t n_segs, uint32_t value_size, uint32_t key)
{
    uint32_t lo = 0, hi = n_segs;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (segs[mid].first_key <= key)
            lo = mid;
        else
            hi = mid;
    }
    if (!n_segs || key < segs[lo].first_key || key - segs[lo].first_key >= segs[lo].n_keys)
        return NULL;
    return segs[lo].data + (uint64_t)(key - segs[lo].first_key) * value_size;
}

const uint8_t *qp_plan_block(const struct qp_plan *p, enum qp_map_id id, uint32_t key)
{
    const struct qp_mapspec *m = &p->maps[id];
    return qp_segments_find(m->segs, m->n_segs, m->value_size, key);
}

int qp_plan_build(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, bool stream, qp_err *err)
{
    memset(p, 0, sizeof *p);
    const struct qpk_config *q = &f->cfg;
    if (ctx < 1 || ctx > q->max_positions)
        return qp_fail(err, "context %u outside 1..%u (the model's max_position_embeddings)", ctx,
                       q->max_positions);
    if (q->n_layers > QK_MAX_LAYERS || q->n_heads > QK_MAX_HEADS || q->hidden % 16 || q->intermediate % 16 ||
        q->head_dim % 16 || (q->n_kv_heads * q->head_dim) % 16 || q->vocab % 4)
        return qp_fail(err, "%s: this model's shape is outside what the kernels support (sizes must be "
                       "multiples of 16, vocabulary of 4)", f->path);
    uint64_t value_max = 16ull * (q->intermediate > q->hidden ? q->intermediate : q->hidden);
    if (value_max > (1u << 30) || 8ull * q->vocab > (1u << 30) || 8ull * ctx > (1u << 30))
        return qp_fail(err, "%s: a kernel buffer would exceed 1 GiB", f->path);
    const struct qpk_tensor *embed = qpk_tensor_of(f, QPK_ROLE_EMBED, QPK_NO_LAYER);
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        if (!qpk_role_is_norm(t->role) && (t->encoding != embed->encoding || t->group_size != embed->group_size ||
                                           (t->group_size & (t->group_size - 1))))
            return qp_fail(err, "%s: tensor %s: every matrix must share one encoding and a power-of-two group size", f->path,
                           t->name);
    }
    fill_config(p, f, ctx);
    size_maps(p, q->flags & QPK_CONFIG_TIED);
    p->stream = stream;
    if (!stream)
        p->maps[QP_MAP_WORK].max_entries = 1;
    kv_exponents(p, f);
    for (int i = 0; i < QP_MAP_COUNT; i++) {
        uint64_t bytes = (uint64_t)p->maps[i].value_size * p->maps[i].max_entries;
        bool matrix = i == QP_MAP_W_HID || i == QP_MAP_W_O || i == QP_MAP_W_DOWN;
        if (stream && matrix)
            continue;
        if (i <= QP_MAP_QK_NORMS)
            p->weight_bytes += bytes;
        else
            p->state_bytes += bytes;
    }
    if (weight_segments(p, f, err) || fill_rope(p, q->rope_theta, err) || fill_kboost(p, f, err)) {
        qp_plan_free(p);
        return -1;
    }
    struct qp_segment *rope = malloc(sizeof *rope);
    if (!rope) {
        qp_plan_free(p);
        return qp_fail(err, "out of memory");
    }
    *rope = (struct qp_segment){0, ctx, (const uint8_t *)p->rope_table};
    p->maps[QP_MAP_ROPE].segs = rope;
    p->maps[QP_MAP_ROPE].n_segs = 1;
    struct qp_segment *kb = malloc(sizeof *kb);
    if (!kb) {
        qp_plan_free(p);
        return qp_fail(err, "out of memory");
    }
    *kb = (struct qp_segment){0, q->n_layers, (const uint8_t *)p->kboost_table};
    p->maps[QP_MAP_KBOOST].segs = kb;
    p->maps[QP_MAP_KBOOST].n_segs = 1;
    return 0;
}

void qp_plan_free(struct qp_plan *p)
{
    for (int i = 0; i < QP_MAP_COUNT; i++)
        free(p->maps[i].segs);
    free(p->rope_table);
    free(p->kboost_table);
    memset(p, 0, sizeof *p);
}
