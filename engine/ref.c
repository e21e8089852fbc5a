/* ref.c - float64 Qwen3 forward pass (the accuracy reference).
 *
 * Straight from the Hugging Face modelling code: RMSNorm, q/k per-head
 * RMSNorm, rotate-half RoPE, grouped-query attention with a float64 KV
 * cache, SiLU-gated MLP, tied or untied vocabulary projection. Weights stay
 * in the mmapped checkpoint and are widened element by element. */
#include "ref.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "gguf_model.h"
#include "safetensors.h"

struct ref_layer {
    const struct st_tensor *attn_norm, *q, *k, *v, *o, *q_norm, *k_norm, *mlp_norm, *gate, *up, *down;
};

struct ref_model {
    struct qwen3_config cfg;
    struct st_model st;
    struct gguf gguf;            /* a GGUF's metadata, which points into st's maps */
    uint32_t ctx;
    int k_bits, v_bits;          /* ref_round_kv; 0: exact */
    enum ref_k_scale k_scale;
    const struct st_tensor *embed, *lm_head, *final_norm;
    struct ref_layer *layers;
    /* state */
    double *x, *xn, *q, *k, *v, *att, *o, *g, *u, *scores;
    double *k_cache, *v_cache;   /* [layer][pos][kv_dim] */
    double *hidden_after;        /* [n_layers + 1][hidden] */
    double *rope_inv_freq;       /* [head_dim / 2] */
    double *input_sumsq[REF_N_INPUTS]; /* ref_collect_inputs: Σ x_j^2 per matrix input, [layer][width] */
    uint64_t input_count;        /* positions added into input_sumsq */
};

static inline double elem(const struct st_tensor *t, uint64_t i)
{
    if (t->dtype == ST_BF16) {
        uint32_t bits = (uint32_t)(t->data[2 * i] | t->data[2 * i + 1] << 8) << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    return st_get_f32(t, i);
}

/* out[r] = sum_c W[r, c] x[c] over rows [r0, r1); a GGUF's block types
 * are decoded a row at a time (element by element, each would decode its
 * whole block) */
static void matvec_rows(const struct st_tensor *w, const double *x, double *out, uint64_t cols, uint64_t r0,
                        uint64_t r1)
{
    float *row = st_dtype_block(w->dtype) > 1 ? malloc(cols * sizeof *row) : NULL;
    for (uint64_t r = r0; r < r1; r++) {
        double acc = 0;
        uint64_t base = r * cols;
        if (row) {
            st_read_f32(w, base, cols, row);
            for (uint64_t c = 0; c < cols; c++)
                acc += row[c] * x[c];
        } else {
            for (uint64_t c = 0; c < cols; c++)
                acc += elem(w, base + c) * x[c];
        }
        out[r] = acc;
    }
    free(row);
}

struct matvec_job {
    const struct st_tensor *w;
    const double *x;
    double *out;
    uint64_t cols, r0, r1;
};

static void *matvec_thread(void *arg)
{
    struct matvec_job *j = arg;
    matvec_rows(j->w, j->x, j->out, j->cols, j->r0, j->r1);
    return NULL;
}

/* Two threads over halves of the rows: the reference is also run on real
 * shapes, where a 0.6B token costs ~0.6 G multiply-adds. */
static void matvec(const struct st_tensor *w, const double *x, double *out)
{
    uint64_t rows = w->shape[0], cols = w->shape[1];
    struct matvec_job half = {w, x, out, cols, rows / 2, rows};
    pthread_t th;
    bool threaded = rows >= 1024 && pthread_create(&th, NULL, matvec_thread, &half) == 0;
    matvec_rows(w, x, out, cols, 0, threaded ? rows / 2 : rows);
    if (threaded)
        pthread_join(th, NULL);
}

static void rmsnorm(double *out, const double *x, const struct st_tensor *g, uint32_t n, double eps)
{
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++)
        out[i] = x[i] * inv * elem(g, i);
}

/* rotate-half RoPE on one head */
static void rope(double *h, uint32_t d, uint32_t pos, const double *inv_freq)
{
    for (uint32_t i = 0; i < d / 2; i++) {
        double a = pos * inv_freq[i], c = cos(a), s = sin(a);
        double x0 = h[i], x1 = h[i + d / 2];
        h[i] = x0 * c - x1 * s;
        h[i + d / 2] = x1 * c + x0 * s;
    }
}

static void attention(struct ref_model *m, uint32_t l, uint32_t pos)
{
    const struct qwen3_config *c = &m->cfg;
    uint32_t d = c->head_dim, kv_dim = c->num_key_value_heads * d, group = c->num_attention_heads / c->num_key_value_heads;
    const double *kc = m->k_cache + (uint64_t)l * m->ctx * kv_dim, *vc = m->v_cache + (uint64_t)l * m->ctx * kv_dim;
    double scale = 1.0 / sqrt((double)d);
    for (uint32_t h = 0; h < c->num_attention_heads; h++) {
        const double *qh = m->q + (uint64_t)h * d;
        uint32_t kvh = h / group;
        double max = -INFINITY;
        for (uint32_t j = 0; j <= pos; j++) {
            const double *kj = kc + (uint64_t)j * kv_dim + (uint64_t)kvh * d;
            double s = 0;
            for (uint32_t i = 0; i < d; i++)
                s += qh[i] * kj[i];
            m->scores[j] = s * scale;
            max = fmax(max, m->scores[j]);
        }
        double sum = 0;
        for (uint32_t j = 0; j <= pos; j++) {
            m->scores[j] = exp(m->scores[j] - max);
            sum += m->scores[j];
        }
        double *out = m->att + (uint64_t)h * d;
        for (uint32_t i = 0; i < d; i++)
            out[i] = 0;
        for (uint32_t j = 0; j <= pos; j++) {
            const double *vj = vc + (uint64_t)j * kv_dim + (uint64_t)kvh * d;
            double p = m->scores[j] / sum;
            for (uint32_t i = 0; i < d; i++)
                out[i] += p * vj[i];
        }
    }
}

/* ---- cache rounding (ref_round_kv): a measurement ------------------- */

static double gain_of_pair(const struct st_tensor *g, uint32_t i, uint32_t half)
{
    return fmax(fabs(elem(g, i)), fabs(elem(g, i + half)));
}

/* v[0..d) to a block float of bits bits; scale[i] (when given) multiplies
 * entry i first. With stretch, as the kernels store V (qmath.h
 * qm_v_stretch): the step is also divided by (16 + st) / 16, st in 0..15
 * the most that keeps the largest entry in range. */
static void round_block(double *v, const double *scale, uint32_t d, int bits, bool stretch)
{
    double max = 0;
    for (uint32_t i = 0; i < d; i++)
        max = fmax(max, fabs(v[i] * (scale ? scale[i] : 1)));
    if (max == 0)
        return;
    int e;
    frexp(max, &e);
    double step = ldexp(1.0, e - (bits - 1)), top = ldexp(1.0, bits - 1) - 1;
    int st = stretch ? 15 : 0;
    while (st > 0 && max / step * (16 + st) / 16 > top)
        st--;
    step = step * 16 / (16 + st);
    for (uint32_t i = 0; i < d; i++) {
        double sc = scale ? scale[i] : 1;
        v[i] = nearbyint(v[i] * sc / step) * step / sc;
    }
}

/* Variable width: pair i keeps k_bits + log2(gk_i gq_i) - mean of that over
 * the pairs (at least 2), each on a fixed grid over its static bound
 * |k| <= gk_i sqrt(head_dim) -- where the bits of a K cache do the most. */
static void round_k_importance(const struct ref_model *m, const struct ref_layer *L, double *k, uint32_t d)
{
    uint32_t half = d / 2;
    double mean = 0;
    for (uint32_t i = 0; i < half; i++)
        mean += log2(gain_of_pair(L->k_norm, i, half) * gain_of_pair(L->q_norm, i, half)) / half;
    for (uint32_t i = 0; i < half; i++) {
        double gk = gain_of_pair(L->k_norm, i, half), gq = gain_of_pair(L->q_norm, i, half);
        long bits = lround(m->k_bits + log2(gk * gq) - mean);
        double step = gk * sqrt((double)d) * ldexp(1.0, -(int)((bits < 2 ? 2 : bits) - 1));
        k[i] = nearbyint(k[i] / step) * step;
        k[i + half] = nearbyint(k[i + half] / step) * step;
    }
}

static void round_kv_head(const struct ref_model *m, const struct ref_layer *L, double *k, double *v, uint32_t d)
{
    double scale[QWEN3_MAX_HEAD_DIM];
    for (uint32_t i = 0; m->k_scale == REF_K_NORM && i < d / 2; i++)
        scale[i] = scale[i + d / 2] = 1 / exp2(floor(log2(gain_of_pair(L->k_norm, i, d / 2))));
    if (m->k_bits && m->k_scale == REF_K_IMPORTANCE)
        round_k_importance(m, L, k, d);
    else if (m->k_bits)
        round_block(k, m->k_scale == REF_K_NORM ? scale : NULL, d, m->k_bits, false);
    if (m->v_bits)
        round_block(v, NULL, d, m->v_bits, true);
}

void ref_round_kv(struct ref_model *m, int k_bits, int v_bits, enum ref_k_scale k_scale)
{
    m->k_bits = k_bits;
    m->v_bits = v_bits;
    m->k_scale = k_scale;
}

/* The width of each matrix input (ref_collect_inputs). */
static uint32_t input_width(const struct qwen3_config *c, enum ref_input in)
{
    switch (in) {
    case REF_IN_O: return c->num_attention_heads * c->head_dim;
    case REF_IN_DOWN: return c->intermediate_size;
    default: return c->hidden_size;
    }
}

/* Adds the squares of x, input `in` of layer l's matrices, when collecting. */
static void add_input(struct ref_model *m, enum ref_input in, uint32_t l, const double *x)
{
    if (!m->input_sumsq[in])
        return;
    uint32_t n = input_width(&m->cfg, in);
    double *acc = m->input_sumsq[in] + (uint64_t)l * n;
    for (uint32_t i = 0; i < n; i++)
        acc[i] += x[i] * x[i];
}

static void layer_forward(struct ref_model *m, uint32_t l, uint32_t pos)
{
    const struct qwen3_config *c = &m->cfg;
    const struct ref_layer *L = &m->layers[l];
    uint32_t n = c->hidden_size, d = c->head_dim, kv_dim = c->num_key_value_heads * d;
    rmsnorm(m->xn, m->x, L->attn_norm, n, c->rms_norm_eps);
    add_input(m, REF_IN_ATTN, l, m->xn);
    matvec(L->q, m->xn, m->q);
    matvec(L->k, m->xn, m->k);
    matvec(L->v, m->xn, m->v);
    for (uint32_t h = 0; h < c->num_attention_heads; h++) {
        rmsnorm(m->q + h * d, m->q + h * d, L->q_norm, d, c->rms_norm_eps);
        rope(m->q + h * d, d, pos, m->rope_inv_freq);
    }
    double *kc = m->k_cache + ((uint64_t)l * m->ctx + pos) * kv_dim;
    double *vc = m->v_cache + ((uint64_t)l * m->ctx + pos) * kv_dim;
    for (uint32_t h = 0; h < c->num_key_value_heads; h++) {
        rmsnorm(kc + h * d, m->k + h * d, L->k_norm, d, c->rms_norm_eps);
        rope(kc + h * d, d, pos, m->rope_inv_freq);
    }
    memcpy(vc, m->v, kv_dim * sizeof *vc);
    for (uint32_t h = 0; (m->k_bits || m->v_bits) && h < c->num_key_value_heads; h++)
        round_kv_head(m, L, kc + h * d, vc + h * d, d);
    attention(m, l, pos);
    add_input(m, REF_IN_O, l, m->att);
    matvec(L->o, m->att, m->o);
    for (uint32_t i = 0; i < n; i++)
        m->x[i] += m->o[i];
    rmsnorm(m->xn, m->x, L->mlp_norm, n, c->rms_norm_eps);
    add_input(m, REF_IN_MLP, l, m->xn);
    matvec(L->gate, m->xn, m->g);
    matvec(L->up, m->xn, m->u);
    for (uint32_t i = 0; i < c->intermediate_size; i++)
        m->g[i] = m->g[i] / (1.0 + exp(-m->g[i])) * m->u[i];
    add_input(m, REF_IN_DOWN, l, m->g);
    matvec(L->down, m->g, m->o);
    for (uint32_t i = 0; i < n; i++)
        m->x[i] += m->o[i];
}

int ref_forward(struct ref_model *m, uint32_t token, uint32_t pos, double *logits, qp_err *err)
{
    const struct qwen3_config *c = &m->cfg;
    if (token >= c->vocab_size)
        return qp_fail(err, "token id %u is outside the vocabulary (%u)", token, c->vocab_size);
    if (pos >= m->ctx)
        return qp_fail(err, "position %u is past the context of %u", pos, m->ctx);
    uint32_t n = c->hidden_size;
    for (uint32_t i = 0; i < n; i++)
        m->x[i] = elem(m->embed, (uint64_t)token * n + i);
    for (uint32_t l = 0; l < c->num_hidden_layers; l++) {
        layer_forward(m, l, pos);
        memcpy(m->hidden_after + (uint64_t)l * n, m->x, n * sizeof *m->x);
    }
    rmsnorm(m->xn, m->x, m->final_norm, n, c->rms_norm_eps);
    memcpy(m->hidden_after + (uint64_t)c->num_hidden_layers * n, m->xn, n * sizeof *m->xn);
    add_input(m, REF_IN_HEAD, 0, m->xn);
    m->input_count += m->input_sumsq[REF_IN_HEAD] != NULL;
    if (logits)
        matvec(m->lm_head, m->xn, logits);
    return 0;
}

int ref_collect_inputs(struct ref_model *m, qp_err *err)
{
    for (int in = 0; in < REF_N_INPUTS; in++) {
        uint64_t n = (uint64_t)input_width(&m->cfg, in) * (in == REF_IN_HEAD ? 1 : m->cfg.num_hidden_layers);
        free(m->input_sumsq[in]);
        if (!(m->input_sumsq[in] = calloc(n, sizeof(double))))
            return qp_fail(err, "out of memory for the reference's input statistics");
    }
    m->input_count = 0;
    return 0;
}

const double *ref_input_sumsq(const struct ref_model *m, enum ref_input in, uint32_t layer, uint64_t *count)
{
    *count = m->input_count;
    if (!m->input_sumsq[in] || (in == REF_IN_HEAD ? layer != 0 : layer >= m->cfg.num_hidden_layers))
        return NULL;
    return m->input_sumsq[in] + (uint64_t)layer * input_width(&m->cfg, in);
}

const double *ref_hidden_after(const struct ref_model *m, uint32_t layer)
{
    return m->hidden_after + (uint64_t)layer * m->cfg.hidden_size;
}

const struct qwen3_config *ref_config(const struct ref_model *m)
{
    return &m->cfg;
}

static const struct st_tensor *need(struct ref_model *m, const char *name, uint64_t rows, uint64_t cols,
                                    qp_err *err)
{
    const struct st_tensor *t = st_find(&m->st, name);
    if (!t) {
        qp_fail(err, "checkpoint has no tensor %s", name);
        return NULL;
    }
    bool ok = rows ? (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols)
                   : (t->ndim == 1 && t->shape[0] == cols);
    if (!ok) {
        qp_fail(err, "tensor %s does not have the shape config.json implies", name);
        return NULL;
    }
    return t;
}

static int bind_layer(struct ref_model *m, uint32_t l, qp_err *err)
{
    const struct qwen3_config *c = &m->cfg;
    uint64_t n = c->hidden_size, d = c->head_dim, qd = c->num_attention_heads * d,
             kvd = c->num_key_value_heads * d, f = c->intermediate_size;
    struct ref_layer *L = &m->layers[l];
    char name[160];
#define BIND(field, suffix, rows, cols)                                               \
    snprintf(name, sizeof name, "model.layers.%u." suffix, l);                    \
    if (!(L->field = need(m, name, rows, cols, err)))                                 \
        return -1;
    BIND(attn_norm, "input_layernorm.weight", 0, n)
    BIND(q, "self_attn.q_proj.weight", qd, n)
    BIND(k, "self_attn.k_proj.weight", kvd, n)
    BIND(v, "self_attn.v_proj.weight", kvd, n)
    BIND(o, "self_attn.o_proj.weight", n, qd)
    BIND(q_norm, "self_attn.q_norm.weight", 0, d)
    BIND(k_norm, "self_attn.k_norm.weight", 0, d)
    BIND(mlp_norm, "post_attention_layernorm.weight", 0, n)
    BIND(gate, "mlp.gate_proj.weight", f, n)
    BIND(up, "mlp.up_proj.weight", f, n)
    BIND(down, "mlp.down_proj.weight", n, f)
#undef BIND
    return 0;
}

static int alloc_state(struct ref_model *m, qp_err *err)
{
    const struct qwen3_config *c = &m->cfg;
    uint64_t n = c->hidden_size, d = c->head_dim, qd = c->num_attention_heads * d,
             kvd = c->num_key_value_heads * d, f = c->intermediate_size;
    uint64_t big = n > qd ? n : qd;
    m->x = calloc(n, sizeof(double));
    m->xn = calloc(n, sizeof(double));
    m->q = calloc(qd, sizeof(double));
    m->k = calloc(kvd, sizeof(double));
    m->v = calloc(kvd, sizeof(double));
    m->att = calloc(qd, sizeof(double));
    m->o = calloc(big, sizeof(double));
    m->g = calloc(f, sizeof(double));
    m->u = calloc(f, sizeof(double));
    m->scores = calloc(m->ctx, sizeof(double));
    m->k_cache = calloc((uint64_t)c->num_hidden_layers * m->ctx * kvd, sizeof(double));
    m->v_cache = calloc((uint64_t)c->num_hidden_layers * m->ctx * kvd, sizeof(double));
    m->hidden_after = calloc((uint64_t)(c->num_hidden_layers + 1) * n, sizeof(double));
    m->rope_inv_freq = calloc(d / 2, sizeof(double));
    m->layers = calloc(c->num_hidden_layers, sizeof *m->layers);
    if (!m->x || !m->xn || !m->q || !m->k || !m->v || !m->att || !m->o || !m->g || !m->u || !m->scores ||
        !m->k_cache || !m->v_cache || !m->hidden_after || !m->rope_inv_freq || !m->layers)
        return qp_fail(err, "out of memory for the reference model's state");
    for (uint64_t i = 0; i < d / 2; i++)
        m->rope_inv_freq[i] = pow(c->rope_theta, -2.0 * (double)i / (double)d);
    return 0;
}

bool ref_is_gguf(const char *path)
{
    struct stat st;
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The config and the tensors, of a folder or of a GGUF */
static int open_checkpoint(struct ref_model *m, const char *path, qp_err *err)
{
    if (ref_is_gguf(path))
        return gguf_open(&m->gguf, path, err) || gguf_config(&m->gguf, &m->cfg, err) ||
                       gguf_checkpoint(&m->gguf, &m->st, err) ? -1 : 0;
    char config[4096];
    snprintf(config, sizeof config, "%s/config.json", path);
    return hf_config_load(config, &m->cfg, err) || st_open_dir(&m->st, path, err) ? -1 : 0;
}

int ref_open(struct ref_model **out, const char *path, uint32_t ctx, qp_err *err)
{
    *out = NULL;
    struct ref_model *m = calloc(1, sizeof *m);
    if (!m)
        return qp_fail(err, "out of memory");
    int rc = open_checkpoint(m, path, err);
    if (!rc) {
        m->ctx = ctx ? ctx : m->cfg.max_position_embeddings;
        rc = alloc_state(m, err);
    }
    const struct qwen3_config *c = &m->cfg;
    if (!rc && (!(m->embed = need(m, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, err)) ||
                !(m->final_norm = need(m, "model.norm.weight", 0, c->hidden_size, err))))
        rc = -1;
    if (!rc) {
        if (c->tie_word_embeddings)
            m->lm_head = m->embed;
        else if (!(m->lm_head = need(m, "lm_head.weight", c->vocab_size, c->hidden_size, err)))
            rc = -1;
    }
    for (uint32_t l = 0; !rc && l < c->num_hidden_layers; l++)
        rc = bind_layer(m, l, err);
    if (rc) {
        ref_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

void ref_close(struct ref_model *m)
{
    if (!m)
        return;
    gguf_close(&m->gguf);
    st_close(&m->st);
    free(m->x);
    free(m->xn);
    free(m->q);
    free(m->k);
    free(m->v);
    free(m->att);
    free(m->o);
    free(m->g);
    free(m->u);
    free(m->scores);
    free(m->k_cache);
    free(m->v_cache);
    free(m->hidden_after);
    free(m->rope_inv_freq);
    free(m->layers);
    for (int in = 0; in < REF_N_INPUTS; in++)
        free(m->input_sumsq[in]);
    free(m);
}
