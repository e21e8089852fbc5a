/* plan.c - the model constants (struct qk_config) and the layout of the
 * maps from a validated container: which map each matrix lands in, at
 * which key, and every map's size. What attention reads beside the
 * weights is planned in plan_kv.c; what qrun rewrites as it fills a map,
 * in plan_encode.c. */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_kv.h"

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

/* the encoding the kernels read t in (i6g and i7g as i8g, i4k as i4g) */
static unsigned kernel_enc(const struct qpk_tensor *t)
{
    return qpk_kernel_encoding(t->encoding);
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
    uint32_t n = (uint32_t)(t->nbytes / t->row_stride);
    bool widen = qp_tensor_widened(t);
    s[m->n_segs++] = (struct qp_segment){key, n, t->data, qpk_encoding_packed(t->encoding) || widen ? t : NULL,
                                         .widen4 = widen};
    return 0;
}

/* the maps a matrix of this role can be in: [wide, i4g] */
static const enum qp_map_id hid_maps[2] = {QP_MAP_W_HID, QP_MAP_W4_HID};
static const enum qp_map_id o_maps[2] = {QP_MAP_W_O, QP_MAP_W4_O};
static const enum qp_map_id down_maps[2] = {QP_MAP_W_DOWN, QP_MAP_W4_DOWN};

/* the container's role of each of a layer's matrices (enum qk_matrix) */
static const unsigned layer_matrix_roles[QK_MATRICES_PER_LAYER] = {
    [QK_MATRIX_Q] = QPK_ROLE_Q, [QK_MATRIX_K] = QPK_ROLE_K, [QK_MATRIX_V] = QPK_ROLE_V, [QK_MATRIX_O] = QPK_ROLE_O,
    [QK_MATRIX_GATE] = QPK_ROLE_GATE, [QK_MATRIX_UP] = QPK_ROLE_UP, [QK_MATRIX_DOWN] = QPK_ROLE_DOWN};

static enum qp_map_id matrix_map(unsigned role, const struct qpk_tensor *t)
{
    int i4 = kernel_enc(t) == QPK_ENC_I4G;
    return role == QPK_ROLE_O ? o_maps[i4] : role == QPK_ROLE_DOWN ? down_maps[i4] : hid_maps[i4];
}

/* Whether the embedding or lm_head t runs as i6 lanes: an i6g tensor among
 * i8g wide matrices (it shares their map and scale layout), with groups of
 * whole act blocks and the quantised act vector at hand (an i4g matrix).
 * Else (and always for i7g, whose codes do not fit the lanes' 6 bits) it
 * expands to i8g and the i8g kernel reads it. */
static bool as_i6_lanes(const struct qk_config *c, const struct qpk_tensor *t)
{
    return t->encoding == QPK_ENC_I6G && c->w_enc == QK_ENC_I8G && c->has_i4 && c->w_group % QK_XQ_BLOCK == 0;
}

/* Gives every matrix its first key in its map, in file order per map;
 * counts[] receives each map's number of row blocks. */
static void assign_keys(struct qp_plan *p, const struct qpk_file *f, uint32_t counts[QP_MAP_COUNT])
{
    struct qk_config *c = &p->cfg;
    memset(counts, 0, QP_MAP_COUNT * sizeof counts[0]);
    for (uint32_t l = 0; l < c->n_layers; l++)
        for (enum qk_matrix k = 0; k < QK_MATRICES_PER_LAYER; k++) {
            const struct qpk_tensor *t = qpk_tensor_of(f, layer_matrix_roles[k], l);
            enum qp_map_id m = matrix_map(layer_matrix_roles[k], t);
            c->w_key[l * QK_MATRIX_STRIDE + k] = counts[m];
            if (kernel_enc(t) == QPK_ENC_I4G)
                c->w_i4[l] |= QK_MATRIX_BIT(k);
            counts[m] += t->rows / QPK_Q24_TILE_ROWS;
        }
    const struct qpk_tensor *embed = qpk_tensor_of(f, QPK_ROLE_EMBED, QPK_NO_LAYER);
    const struct qpk_tensor *head = qpk_tensor_of(f, QPK_ROLE_LM_HEAD, QPK_NO_LAYER);
    enum qp_map_id m = matrix_map(QPK_ROLE_EMBED, embed);
    c->embed_key = c->lm_key = counts[m];
    c->embed_i4 = c->lm_i4 = kernel_enc(embed) == QPK_ENC_I4G;
    c->embed_i6 = c->lm_i6 = as_i6_lanes(c, embed);
    counts[m] += embed->rows / QPK_Q24_TILE_ROWS;
    if (head) {
        m = matrix_map(QPK_ROLE_LM_HEAD, head);
        c->lm_key = counts[m];
        c->lm_i4 = kernel_enc(head) == QPK_ENC_I4G;
        c->lm_i6 = as_i6_lanes(c, head);
        counts[m] += head->rows / QPK_Q24_TILE_ROWS;
    }
    if (c->lm_i6)   /* the i4g programs' product: row_adj of i4g */
        c->lm_adj = 24 + QK_I4_GROUP_SHIFT - (head ? head : embed)->scale_exp;
}

static int weight_segments(struct qp_plan *p, const struct qpk_file *f, qp_err *err)
{
    const struct qk_config *c = &p->cfg;
    int rc = 0;
    for (uint32_t l = 0; l < c->n_layers && !rc; l++) {
        for (enum qk_matrix k = 0; k < QK_MATRICES_PER_LAYER && !rc; k++) {
            const struct qpk_tensor *t = qpk_tensor_of(f, layer_matrix_roles[k], l);
            rc = add_seg(p, matrix_map(layer_matrix_roles[k], t), c->w_key[l * QK_MATRIX_STRIDE + k], t, err);
        }
        rc = rc || add_seg(p, QP_MAP_NORMS, 2 * l, qpk_tensor_of(f, QPK_ROLE_ATTN_NORM, l), err) ||
             add_seg(p, QP_MAP_NORMS, 2 * l + 1, qpk_tensor_of(f, QPK_ROLE_MLP_NORM, l), err) ||
             add_seg(p, QP_MAP_QK_NORMS, 2 * l, qpk_tensor_of(f, QPK_ROLE_Q_NORM, l), err) ||
             add_seg(p, QP_MAP_QK_NORMS, 2 * l + 1, qpk_tensor_of(f, QPK_ROLE_K_NORM, l), err);
    }
    const struct qpk_tensor *embed = qpk_tensor_of(f, QPK_ROLE_EMBED, QPK_NO_LAYER);
    enum qp_map_id em = matrix_map(QPK_ROLE_EMBED, embed);
    if (rc || add_seg(p, em, c->embed_key, embed, err))
        return -1;
    p->maps[em].segs[p->maps[em].n_segs - 1].lanes6 = c->embed_i6;
    if (add_seg(p, QP_MAP_NORMS, 2 * c->n_layers, qpk_tensor_of(f, QPK_ROLE_FINAL_NORM, QPK_NO_LAYER), err))
        return -1;
    const struct qpk_tensor *head = qpk_tensor_of(f, QPK_ROLE_LM_HEAD, QPK_NO_LAYER);
    if (!head)
        return 0;
    enum qp_map_id hm = matrix_map(QPK_ROLE_LM_HEAD, head);
    if (add_seg(p, hm, c->lm_key, head, err))
        return -1;
    p->maps[hm].segs[p->maps[hm].n_segs - 1].lanes6 = c->lm_i6;
    return 0;
}

bool qp_map_is_matrix(enum qp_map_id id)
{
    return id <= QP_MAP_W4_DOWN;
}

struct qp_matrix_rows qp_plan_matrix_of(const struct qp_plan *p, uint32_t layer, uint32_t mode, uint32_t r)
{
    const struct qk_config *c = &p->cfg;
    struct qp_matrix_rows m;
    switch (mode) {
    case QK_MV_QKV:
        if (r < c->q_dim)
            m = (struct qp_matrix_rows){QK_MATRIX_Q, 0, c->q_dim, 0};
        else if (r < c->q_dim + c->kv_dim)
            m = (struct qp_matrix_rows){QK_MATRIX_K, c->q_dim, c->kv_dim, 0};
        else
            m = (struct qp_matrix_rows){QK_MATRIX_V, c->q_dim + c->kv_dim, c->kv_dim, 0};
        break;
    case QK_MV_GATE_UP:
        m = r < c->inter ? (struct qp_matrix_rows){QK_MATRIX_GATE, 0, c->inter, 0}
                         : (struct qp_matrix_rows){QK_MATRIX_UP, c->inter, c->inter, 0};
        break;
    case QK_MV_O: m = (struct qp_matrix_rows){QK_MATRIX_O, 0, c->hidden, 0}; break;
    case QK_MV_DOWN: m = (struct qp_matrix_rows){QK_MATRIX_DOWN, 0, c->hidden, 0}; break;
    default: m = (struct qp_matrix_rows){QK_MATRIX_VOCAB, 0, c->vocab, 0}; break;
    }
    if (m.matrix == QK_MATRIX_VOCAB)   /* the kernels' rule, qk_matrix_enc */
        m.enc = c->lm_i6 ? QK_ENC_I6L : c->lm_i4 ? QK_ENC_I4G : c->w_enc;
    else
        m.enc = c->w_i4[layer] & QK_MATRIX_BIT(m.matrix) ? QK_ENC_I4G : c->w_enc;
    return m;
}

bool qp_plan_reads_act_records(const struct qp_plan *p, uint32_t layer, uint32_t mode)
{
    if (p->cfg.w_enc == QK_ENC_I8G)   /* every matrix not i4g is i8g */
        return true;
    uint32_t rows = mode == QK_MV_QKV ? p->cfg.q_dim + 2 * p->cfg.kv_dim : mode == QK_MV_GATE_UP ? 2 * p->cfg.inter
                  : mode == QK_MV_LOGITS ? p->cfg.vocab : p->cfg.hidden;
    for (uint32_t r = 0; r < rows;) {
        struct qp_matrix_rows m = qp_plan_matrix_of(p, layer, mode, r);
        if (m.enc != QK_ENC_Q24)
            return true;
        r = m.row0 + m.rows;
    }
    return false;
}

void qp_plan_matvec_source(const struct qp_plan *p, uint32_t layer, uint32_t mode, uint32_t begin,
                           enum qp_map_id *map, uint32_t *key)
{
    struct qp_matrix_rows m = qp_plan_matrix_of(p, layer, mode, begin);
    bool in_w4 = m.enc == QK_ENC_I4G;
    *map = m.matrix == QK_MATRIX_O ? o_maps[in_w4] : m.matrix == QK_MATRIX_DOWN ? down_maps[in_w4] : hid_maps[in_w4];
    *key = (m.matrix == QK_MATRIX_VOCAB ? p->cfg.lm_key : p->cfg.w_key[layer * QK_MATRIX_STRIDE + m.matrix]) +
           (begin - m.row0) / 4;
}

/* the adjustment qk_row_adj adds to a product's exponent for a tensor */
static int32_t row_adj(const struct qpk_tensor *t)
{
    if (kernel_enc(t) == QPK_ENC_I4G)
        return 24 + QK_I4_GROUP_SHIFT - t->scale_exp;
    return kernel_enc(t) == QPK_ENC_I8G ? 24 + QK_I8_GROUP_SHIFT - t->scale_exp : 0;
}

static uint32_t log2_u32(uint32_t v)
{
    uint32_t s = 0;
    while ((1u << s) < v)
        s++;
    return s;
}

/* the wide encoding and the group sizes (the plan checked they are one each) */
static void fill_matrix_encoding(struct qk_config *c, const struct qpk_file *f)
{
    const struct qpk_tensor *embed = qpk_tensor_of(f, QPK_ROLE_EMBED, QPK_NO_LAYER);
    const struct qpk_tensor *head = qpk_tensor_of(f, QPK_ROLE_LM_HEAD, QPK_NO_LAYER);
    c->w_enc = QK_ENC_Q24;
    c->w_group = 16;
    c->w4_group = QK_XQ_BLOCK;
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        if (kernel_enc(t) == QPK_ENC_I4G) {
            c->has_i4 = 1;
            c->w4_group = t->group_size;
        } else if (!qpk_role_is_norm(t->role)) {
            c->w_enc = kernel_enc(t);
            if (t->group_size)
                c->w_group = t->group_size;
        }
    }
    c->w_group_shift = log2_u32(c->w_group);
    c->w4_group_shift = log2_u32(c->w4_group);
    c->embed_adj = QM_RESID_FRAC - embed->scale_exp;
    c->lm_adj = row_adj(head ? head : embed);
    for (uint32_t l = 0; l < c->n_layers; l++)
        for (enum qk_matrix k = 0; k < QK_MATRICES_PER_LAYER; k++)
            c->w_adj[l * QK_MATRIX_STRIDE + k] = row_adj(qpk_tensor_of(f, layer_matrix_roles[k], l));
}

/* Every wide matrix shares one kernel encoding and every grouped encoding
 * one power-of-two group size (i4g: at least one 32-entry act block); i6g
 * and i7g count as i8g and i4k as i4g. */
static int check_matrix_encodings(const struct qpk_file *f, qp_err *err)
{
    const struct qpk_tensor *wide = NULL, *i4 = NULL;
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        if (qpk_role_is_norm(t->role))
            continue;
        const struct qpk_tensor **first = kernel_enc(t) == QPK_ENC_I4G ? &i4 : &wide;
        if (!*first)
            *first = t;
        if (kernel_enc(t) == QPK_ENC_I4G && t->group_size < QK_XQ_BLOCK)
            return qp_fail(err, "%s: tensor %s: the kernels need %s groups of at least %d columns (has %u)",
                           f->path, t->name, qpk_encoding_name(t->encoding), QK_XQ_BLOCK, t->group_size);
        bool bad = kernel_enc(t) != kernel_enc(*first) || t->group_size != (*first)->group_size ||
                   (t->group_size & (t->group_size - 1));
        if (bad)
            return qp_fail(err, "%s: tensor %s: the kernels need one encoding for the q24/int8 matrices and one "
                           "power-of-two group size per encoding", f->path, t->name);
    }
    return 0;
}

/* The columns a product's callback takes at a time (qk_dot.h, "Column
 * chunks"): the largest power of two dividing hidden, q_dim and inter (the
 * lowest bit set in any of them), at most QK_COL_CHUNK_MAX. */
static uint32_t column_chunk(const struct qk_config *c)
{
    uint32_t any = c->hidden | c->q_dim | c->inter, chunk = any & (~any + 1);
    return chunk < QK_COL_CHUNK_MAX ? chunk : QK_COL_CHUNK_MAX;
}

static void fill_config(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block)
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
    c->kv_slots = kv_slots;
    c->block = block;
    c->max_chunks = (ctx + QK_ATTN_CHUNK - 1) / QK_ATTN_CHUNK;
    c->attn_heads = c->n_heads / c->n_kv_heads % 2 == 0 ? 2 : 1;
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
    c->col_chunk = column_chunk(c);
    c->col_chunk_shift = log2_u32(c->col_chunk);
    c->eps = qp_sf_from_double(q->rms_eps);
    c->inv_hidden = qp_sf_from_double(1.0 / c->hidden);
    c->inv_head_dim = qp_sf_from_double(1.0 / c->head_dim);
    c->attn_c = qp_sf_from_double(1.0 / (log(2.0) * sqrt((double)c->head_dim)));
}

/* bytes of one row block (4 rows) of a matrix with cols columns */
static uint64_t row_block_bytes(uint32_t enc, uint32_t group, uint32_t cols)
{
    if (enc == QK_ENC_I4G)   /* int32 parameters (qp_segment.widen4) */
        return 2ull * cols + 32ull * (cols / group);
    if (enc == QK_ENC_I8G)
        return 4ull * cols + 16ull * (cols / group);
    return 16ull * cols;
}

uint64_t qp_map_row_block_bytes(const struct qpk_tensor *t)
{
    return row_block_bytes(kernel_enc(t), t->group_size, t->cols);
}

/* a matrix map of n row blocks; an unused one keeps one, so the
 * kernel code that reads it still verifies */
static void set_matrix_map(struct qp_plan *p, enum qp_map_id id, const char *name, uint32_t enc, uint32_t group,
                           uint32_t cols, uint32_t n)
{
    set_map(p, id, name, row_block_bytes(enc, group, cols), n ? n : 1);
}

static void size_maps(struct qp_plan *p, const uint32_t counts[QP_MAP_COUNT])
{
    const struct qk_config *c = &p->cfg;
    set_matrix_map(p, QP_MAP_W_HID, "w_hid", c->w_enc, c->w_group, c->hidden, counts[QP_MAP_W_HID]);
    set_matrix_map(p, QP_MAP_W_O, "w_o", c->w_enc, c->w_group, c->q_dim, counts[QP_MAP_W_O]);
    set_matrix_map(p, QP_MAP_W_DOWN, "w_down", c->w_enc, c->w_group, c->inter, counts[QP_MAP_W_DOWN]);
    set_matrix_map(p, QP_MAP_W4_HID, "w4_hid", QK_ENC_I4G, c->w4_group, c->hidden, counts[QP_MAP_W4_HID]);
    set_matrix_map(p, QP_MAP_W4_O, "w4_o", QK_ENC_I4G, c->w4_group, c->q_dim, counts[QP_MAP_W4_O]);
    set_matrix_map(p, QP_MAP_W4_DOWN, "w4_down", QK_ENC_I4G, c->w4_group, c->inter, counts[QP_MAP_W4_DOWN]);
    set_map(p, QP_MAP_NORMS, "norms", 4ull * c->hidden, 2ull * c->n_layers + 1);
    set_map(p, QP_MAP_QK_NORMS, "qk_norms", 4ull * c->head_dim, 2ull * c->n_layers);
    set_map(p, QP_MAP_ROPE, "rope", 4ull * c->head_dim, c->ctx);
    set_map(p, QP_MAP_KLAYOUT, "klayout", 4ull * QK_KL_LEN(c->head_dim), c->n_layers);
    /* int16: a row per position (all heads); 8-bit: a value per head vector */
    uint64_t rows = (uint64_t)c->kv_slots * c->n_layers * c->ctx * (c->kv8 ? c->n_kv_heads : 1);
    uint64_t row = c->kv8 ? QK_KV8_VEC_BYTES(c->head_dim) : 2ull * c->kv_dim;
    set_map(p, QP_MAP_KCACHE, "kcache", row, rows);
    set_map(p, QP_MAP_VCACHE, "vcache", row, rows);
    set_map(p, QP_MAP_H, "h", 8ull * c->hidden, c->block);
    set_map(p, QP_MAP_X, "x", 8ull * c->act_len, c->block);
    /* the 8-bit act records, then the i8g products' 16-bit ones */
    set_map(p, QP_MAP_XQ, "xq",
            QK_XQ_BYTES(c->act_len) + (c->w_enc == QK_ENC_I8G ? QK_XP_BYTES(c->act_len) : 0), c->block);
    set_map(p, QP_MAP_QKV, "qkv", 8ull * (c->q_dim + 2 * c->kv_dim), c->block);
    set_map(p, QP_MAP_QROT, "qrot", 16ull * c->q_dim, c->block);   /* q | corrections */
    set_map(p, QP_MAP_GU, "gu", 16ull * c->inter, c->block);
    set_map(p, QP_MAP_SCORES, "scores", 8ull * c->ctx, (uint64_t)c->n_heads * c->block);
    set_map(p, QP_MAP_PARTS, "parts", 8ull * (QK_PART_ACC + c->head_dim), (uint64_t)c->n_heads * c->max_chunks * c->block);
    set_map(p, QP_MAP_LOGITS, "logits", 8ull * c->vocab, c->block);
    set_map(p, QP_MAP_AMAX, "amax", sizeof(struct qk_argmax), (uint64_t)QK_MAX_ARGMAX_SLOTS * c->block);
    set_map(p, QP_MAP_SCAL, "scal", sizeof(struct qk_scalars), c->block);
    set_map(p, QP_MAP_SEQ, "seq", sizeof(struct qk_seq), c->block);
    /* --stream's work map: at most QP_STREAM_WORK_BYTES, at most half the
     * matrices' row blocks (so streaming never holds the model), at least 8 */
    uint64_t widest = row_block_bytes(c->w_enc, c->w_group, c->act_len);
    if (c->has_i4 && row_block_bytes(QK_ENC_I4G, c->w4_group, c->act_len) > widest)
        widest = row_block_bytes(QK_ENC_I4G, c->w4_group, c->act_len);
    uint64_t row_blocks = 0;
    for (int i = 0; i < QP_MAP_COUNT; i++)
        row_blocks += qp_map_is_matrix(i) ? counts[i] : 0;
    uint64_t work = QP_STREAM_WORK_BYTES / widest < row_blocks / 2 ? QP_STREAM_WORK_BYTES / widest : row_blocks / 2;
    set_map(p, QP_MAP_WORK, "work", widest, work > 8 ? work : 8);
    set_map(p, QP_MAP_UNPK, "unpk", QK_UNPK_BYTES(c->act_len), 2);   /* one per thread */
    p->kv_bytes_per_pos = 2ull * p->maps[QP_MAP_KCACHE].value_size * c->n_layers * (c->kv8 ? c->n_kv_heads : 1);
}

/* the segment holding key, or NULL */
static const struct qp_segment *segment_of(const struct qp_segment *segs, uint32_t n_segs, uint32_t key)
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
    return &segs[lo];
}

const uint8_t *qp_segments_find(const struct qp_segment *segs, uint32_t n_segs, uint32_t value_size, uint32_t key)
{
    const struct qp_segment *s = segment_of(segs, n_segs, key);
    if (!s || s->packed)
        return NULL;
    return s->data + (uint64_t)(key - s->first_key) * value_size;
}

const struct qp_segment *qp_plan_segment(const struct qp_plan *p, enum qp_map_id id, uint32_t key)
{
    const struct qp_mapspec *m = &p->maps[id];
    return segment_of(m->segs, m->n_segs, key);
}

uint64_t qp_map_bytes(const struct qp_mapspec *m)
{
    return ((uint64_t)m->value_size + 7) / 8 * 8 * m->max_entries;
}

/* the figures of qp_plan_bytes, from the map sizes */
static void count_bytes(struct qp_plan *p)
{
    struct qp_plan_bytes *b = &p->bytes;
    *b = (struct qp_plan_bytes){0};
    for (int i = 0; i < QP_MAP_COUNT; i++) {
        if (p->stream && qp_map_is_matrix(i))
            continue;
        uint64_t bytes = qp_map_bytes(&p->maps[i]);
        if (i <= QP_MAP_QK_NORMS)
            b->weights += bytes;
        else if (i == QP_MAP_KCACHE || i == QP_MAP_VCACHE)
            b->kv += bytes;
        else
            b->state += bytes;
    }
    p->weight_bytes = b->weights;
    p->state_bytes = b->kv + b->state;
}

int qp_plan_layout(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block,
                   bool stream, bool kv8, qp_err *err)
{
    memset(p, 0, sizeof *p);
    p->file = f;
    const struct qpk_config *q = &f->cfg;
    if (ctx < 1 || ctx > q->max_positions)
        return qp_fail(err, "context %u outside 1..%u (the model's max_position_embeddings)", ctx,
                       q->max_positions);
    if (q->n_layers > QK_MAX_LAYERS || q->n_heads > QK_MAX_HEADS || q->hidden % 16 || q->intermediate % 16 ||
        q->head_dim % 16 || (q->n_kv_heads * q->head_dim) % 16 || q->vocab % 4 || q->hidden > QK_MAX_HIDDEN ||
        q->intermediate > QK_MAX_ACT || (uint64_t)q->n_heads * q->head_dim > QK_MAX_ACT)
        return qp_fail(err, "%s: this model's shape is outside what the kernels support (sizes must be "
                       "multiples of 16, vocabulary of 4; hidden at most %d, other widths at most %d)",
                       f->path, QK_MAX_HIDDEN, QK_MAX_ACT);
    uint64_t value_max = 16ull * (q->intermediate > q->hidden ? q->intermediate : q->hidden);
    if (value_max > (1u << 30) || 8ull * q->vocab * block > (1u << 30) || 8ull * ctx > (1u << 30))
        return qp_fail(err, "%s: a kernel buffer would exceed 1 GiB", f->path);
    if (block < 1 || block > QK_MAX_BLOCK)
        return qp_fail(err, "block of %u positions outside 1..%d", block, QK_MAX_BLOCK);
    /* the kernels' KV cache rows are u32 sums (qk_kv_row0; the 8-bit
     * cache's, qk_kv8_vec, a row per KV head) */
    if (kv_slots < 1 || (uint64_t)kv_slots * q->n_layers * ctx * (kv8 ? q->n_kv_heads : 1) > QP_MAX_KV_ROWS)
        return qp_fail_code(err, QP_E_ARGUMENT, "%u sessions of %u positions and %u layers are more KV cache rows "
                            "than the kernels address (%llu)", kv_slots, ctx, q->n_layers,
                            (unsigned long long)QP_MAX_KV_ROWS);
    if (check_matrix_encodings(f, err))
        return -1;
    fill_config(p, f, ctx, kv_slots, block);
    p->cfg.kv8 = kv8;
    const struct qk_config *c = &p->cfg;
    if ((c->w_enc == QK_ENC_I8G && c->w_group > c->col_chunk) || (c->has_i4 && c->w4_group > c->col_chunk))
        return qp_fail(err, "%s: the kernels walk rows %u columns at a time (the largest power of two dividing "
                       "hidden, q_dim and intermediate), fewer than a group of %u", f->path, c->col_chunk,
                       c->w_enc == QK_ENC_I8G && c->w_group > c->col_chunk ? c->w_group : c->w4_group);
    if (c->w_enc == QK_ENC_I8G && c->w_group < QK_XQ_BLOCK)
        return qp_fail(err, "%s: int8 groups of %u columns: the kernels read int8 products %u act values at a time "
                       "(repack with --group %u or more)", f->path, c->w_group, QK_XQ_BLOCK, QK_XQ_BLOCK);
    uint32_t counts[QP_MAP_COUNT];
    assign_keys(p, f, counts);
    size_maps(p, counts);
    p->stream = stream;
    if (!stream)
        p->maps[QP_MAP_WORK].max_entries = 1;
    count_bytes(p);
    return 0;
}

/* the KV cache exponents of a plan already built (a loaded model's
 * programs hold them): computing them reads every V matrix */
static int take_kv_exponents(struct qp_plan *p, const struct qk_config *from)
{
    memcpy(p->cfg.k_exp, from->k_exp, sizeof p->cfg.k_exp);
    memcpy(p->cfg.v_exp, from->v_exp, sizeof p->cfg.v_exp);
    return 0;
}

static int build(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block,
                 bool stream, bool kv8, const struct qk_config *exponents, qp_err *err)
{
    if (qp_plan_layout(p, f, ctx, kv_slots, block, stream, kv8, err))
        return -1;
    const struct qpk_config *q = &f->cfg;
    if ((exponents ? take_kv_exponents(p, exponents) : qp_plan_kv_exponents(p, f, err)) || weight_segments(p, f, err) || qp_plan_rope(p, q->rope_theta, err) ||
        qp_plan_klayout(p, f, err)) {
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
    *kb = (struct qp_segment){0, q->n_layers, (const uint8_t *)p->klayout_table};
    p->maps[QP_MAP_KLAYOUT].segs = kb;
    p->maps[QP_MAP_KLAYOUT].n_segs = 1;
    return 0;
}

int qp_plan_build(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block,
                  bool stream, bool kv8, qp_err *err)
{
    return build(p, f, ctx, kv_slots, block, stream, kv8, NULL, err);
}

int qp_plan_build_with(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block,
                       bool kv8, const struct qk_config *exponents, qp_err *err)
{
    return build(p, f, ctx, kv_slots, block, false, kv8, exponents, err);
}

void qp_plan_free(struct qp_plan *p)
{
    for (int i = 0; i < QP_MAP_COUNT; i++)
        free(p->maps[i].segs);
    free(p->rope_table);
    free(p->klayout_table);
    memset(p, 0, sizeof *p);
}
