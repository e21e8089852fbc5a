/* plan_kv.c - what attention reads beside the weights, planned from the
 * container: the KV cache's exponents per layer (static bounds that no
 * activation can exceed), the K cache layout (channel boosts and the
 * extension bits some channels borrow from donors, qwen3_abi.h's klayout)
 * and the RoPE table. */
#include "plan_kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "pf16.h"

/* bounds on the KV cache get this much slack for rounding in the kernels */
#define KV_BOUND_MARGIN 1.01

static int64_t i32s_abs(const struct qpk_tensor *t, uint32_t i)
{
    int32_t q;
    memcpy(&q, t->data + 4 * (uint64_t)i, 4);
    return llabs((long long)q);
}

static int64_t i32s_max_q(const struct qpk_tensor *t)
{
    int64_t max = 0;
    for (uint32_t i = 0; i < t->cols; i++)
        max = i32s_abs(t, i) > max ? i32s_abs(t, i) : max;
    return max;
}

static double i32s_max_abs(const struct qpk_tensor *t)
{
    return ldexp((double)i32s_max_q(t), -t->scale_exp);
}

/* value of element (r, c) of a blocked matrix (q24, i8g or i4g) whose row
 * block holding r is at blk, in its kernel encoding */
static double matrix_value(const struct qpk_tensor *t, const uint8_t *blk, uint32_t r, uint32_t c)
{
    if (qpk_kernel_encoding(t->encoding) == QPK_ENC_I4G) {
        uint64_t word = 0;
        memcpy(&word, blk + 8 * ((uint64_t)(c / 16) * 4 + r % 4), 8);   /* little-endian host */
        unsigned q = (unsigned)(word >> (4 * (c % 16))) & 15;
        uint16_t dm[8];
        memcpy(dm, blk + 2 * (uint64_t)t->cols + 16 * (uint64_t)(c / t->group_size), 16);
        return ldexp((double)pf16_int(dm[r % 4]) * q - (double)pf16_int(dm[4 + r % 4]), -t->scale_exp);
    }
    uint64_t at = (uint64_t)(c / QPK_Q24_TILE_COLS) * 64 + (r % 4) * 16 + c % 16;
    if (qpk_kernel_encoding(t->encoding) == QPK_ENC_I8G) {
        int32_t d;
        memcpy(&d, blk + (uint64_t)t->cols * 4 + ((uint64_t)(c / t->group_size) * 4 + r % 4) * 4, 4);
        return ldexp((double)d * (int8_t)blk[at], -t->scale_exp);
    }
    int32_t q;
    memcpy(&q, blk + 4 * at, 4);
    return ldexp((double)q, -24);
}

/* largest Euclidean norm of a row of a matrix (-1: out of memory) */
static double max_row_norm(const struct qpk_tensor *t)
{
    uint8_t *expanded = qpk_encoding_packed(t->encoding) ? malloc(qpk_kernel_stride(t)) : NULL;
    if (qpk_encoding_packed(t->encoding) && !expanded)
        return -1;
    double best = 0;
    for (uint32_t r = 0; r < t->rows; r++) {
        const uint8_t *blk = t->data + (uint64_t)(r / QPK_Q24_TILE_ROWS) * t->row_stride;
        if (expanded && r % QPK_Q24_TILE_ROWS == 0)
            qpk_expand_blocks(t, blk, 1, expanded);
        double ss = 0;
        for (uint32_t c = 0; c < t->cols; c++) {
            double v = matrix_value(t, expanded ? expanded : blk, r, c);
            ss += v * v;
        }
        best = fmax(best, sqrt(ss));
    }
    free(expanded);
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
int qp_plan_kv_exponents(struct qp_plan *p, const struct qpk_file *f, qp_err *err)
{
    struct qk_config *c = &p->cfg;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        double gk = i32s_max_abs(qpk_tensor_of(f, QPK_ROLE_K_NORM, l));
        double gx = i32s_max_abs(qpk_tensor_of(f, QPK_ROLE_ATTN_NORM, l));
        double wv = max_row_norm(qpk_tensor_of(f, QPK_ROLE_V, l));
        if (wv < 0)
            return qp_fail(err, "out of memory");
        c->k_exp[l] = cache_exponent(sqrt((double)c->head_dim) * gk);
        c->v_exp[l] = cache_exponent(wv * sqrt((double)c->hidden) * gx);
    }
    return 0;
}

/* the larger |g| of RoPE pair i (channels i and i + half) */
static int64_t pair_gain(const struct qpk_tensor *g, uint32_t i, uint32_t half)
{
    int64_t a = i32s_abs(g, i), b = i32s_abs(g, i + half);
    return a > b ? a : b;
}

/* K channel boosts. q_norm/k_norm scales in the hundreds on a few channels
 * would leave the other channels of an int16 K vector with few bits. Each
 * RoPE channel pair i of layer l is stored as k * 2^b_i, with b_i the most
 * (up to QK_KBOOST_MAX) that keeps it under the vector's static bound:
 * 2^b_i <= max|g| / max(|g_i|, |g_i+half|). The query is scaled by
 * 2^(QK_KBOOST_MAX - b_i), so q.k gains the constant 2^QK_KBOOST_MAX. */
static void fill_boosts(int32_t *boost, const struct qpk_tensor *g, uint32_t head_dim)
{
    uint32_t half = head_dim / 2;
    int64_t gmax = i32s_max_q(g);
    for (uint32_t i = 0; i < half; i++) {
        int64_t pair = pair_gain(g, i, half);
        int32_t b = 0;
        while (b < QK_KBOOST_MAX && (pair << (b + 1)) <= gmax)
            b++;
        boost[i] = b;
    }
}

/* channel i's weight once its extension bits are counted */
static double weight_left(const double *w, const int32_t *ext, int i)
{
    return ldexp(w[i], -(int)QK_KEXT_BITS(ext[i]));
}

/* the heaviest channel that may still take a bit (not a tag, not a donor,
 * under QK_KEXT_MAX), and the lightest that may still lend one (neither
 * extended nor a donor, not `heavy`); -1 when none */
static int heaviest_open(const double *w, const int32_t *ext, uint32_t head_dim)
{
    int heavy = -1;
    for (uint32_t i = 4; i < head_dim; i++)
        if (!QK_KEXT_DONOR(ext[i]) && QK_KEXT_BITS(ext[i]) < QK_KEXT_MAX &&
            (heavy < 0 || weight_left(w, ext, (int)i) > weight_left(w, ext, heavy)))
            heavy = (int)i;
    return heavy;
}

static int lightest_open(const double *w, const int32_t *ext, uint32_t head_dim, int heavy)
{
    int light = -1;
    for (uint32_t i = 4; i < head_dim; i++)
        if (ext[i] == 0 && (int)i != heavy && (light < 0 || w[i] < w[light]))
            light = (int)i;
    return light;
}

/* K extension bits (qwen3_abi.h, klayout). A rounding step of K channel i
 * moves a score by about |q_i| * step_i, so channel i weighs
 * w_i = gq_i * 2^-b_i (q_norm gain of its pair, its boost). Each step
 * halves the heaviest channel's error by lending it the lowest bit of the
 * lightest channel left, which doubles that one's: worth it while the
 * heavy weight is more than twice the light one (the sum of squared
 * errors falls). Channels 0..3 carry the vector's exponent tag. Returns
 * the number of donors; equal gains (a plain checkpoint) give none. */
static int32_t fill_extensions(int32_t *ext, const int32_t *boost, const struct qpk_tensor *gq, uint32_t head_dim)
{
    uint32_t half = head_dim / 2;
    double w[QWEN3_MAX_HEAD_DIM];
    for (uint32_t i = 0; i < head_dim; i++) {
        w[i] = ldexp((double)pair_gain(gq, i % half, half), -boost[i % half]);
        ext[i] = 0;
    }
    int32_t n_donors = 0;
    for (;;) {
        int heavy = heaviest_open(w, ext, head_dim);
        int light = heavy < 0 ? -1 : lightest_open(w, ext, head_dim, heavy);
        if (light < 0 || weight_left(w, ext, heavy) <= 2 * w[light])
            return n_donors;
        ext[light] = QK_KEXT_MAKE_DONOR(heavy, QK_KEXT_BITS(ext[heavy]));
        ext[heavy]++;
        n_donors++;
    }
}

/* the klayout map: per layer, boosts, extensions and the donor count */
int qp_plan_klayout(struct qp_plan *p, const struct qpk_file *f, qp_err *err)
{
    const struct qk_config *c = &p->cfg;
    uint32_t len = QK_KL_LEN(c->head_dim);
    p->klayout_table = calloc((uint64_t)c->n_layers * len, sizeof(int32_t));
    if (!p->klayout_table)
        return qp_fail(err, "out of memory");
    for (uint32_t l = 0; l < c->n_layers; l++) {
        int32_t *t = p->klayout_table + (uint64_t)l * len;
        fill_boosts(t, qpk_tensor_of(f, QPK_ROLE_K_NORM, l), c->head_dim);
        t[QK_KL_DONORS(c->head_dim)] =
            fill_extensions(t + QK_KL_EXT(c->head_dim), t, qpk_tensor_of(f, QPK_ROLE_Q_NORM, l), c->head_dim);
    }
    return 0;
}

/* per position and RoPE pair: cos and sin in Q30 */
int qp_plan_rope(struct qp_plan *p, double theta, qp_err *err)
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
