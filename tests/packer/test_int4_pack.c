/* test_int4_pack.c - `qpack pack --format int4|int4-pure` and the i4g
 * encoding: every code and parameter decoded from the container bytes by
 * the QPK.md formula against packer/quant.h run on the source values, the
 * mixed preset's choice of int8 matrices, --keep, the file's bits per
 * weight, search against round-to-nearest, and the reader's i4g checks on
 * containers made with the writer.
 *
 * qpack and qp-gen-checkpoint are run as programs (paths from the build). */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "le.h"
#include "qpk.h"
#include "qp_test.h"
#include "qpk_write.h"
#include "quant.h"
#include "safetensors.h"

/* A checkpoint every group size divides: hidden 128, MLP 256, q 128, kv 64. */
#define WIDE "--preset tiny --hidden 128 --intermediate 256 --head-dim 32"

/* ----------------------------------------------------------------- helpers */

static struct qpk_file open_qpk(const char *name)
{
    struct qpk_file f;
    qp_err err = {{0}};
    ck_assert_msg(qpk_open(&f, path_of("%s", name), QPK_VERIFY, &err) == 0, "%s", err.msg);
    return f;
}

/* pf16 by its definition: a 12-bit two's-complement mantissa times 2^shift */
static int64_t pf16_value(uint16_t v)
{
    int64_t t = v & 0xfff;
    if (t >= 2048)
        t -= 4096;
    return t * ((int64_t)1 << (v >> 12));
}

/* i4g, from the bytes (QPK.md): the code of (r, c) and its group's d or m */
static unsigned i4_code(const struct qpk_tensor *t, uint32_t r, uint32_t c)
{
    uint64_t word = le64(t->data + (uint64_t)(r / 4) * t->row_stride + 8 * ((uint64_t)(c / 16) * 4 + r % 4));
    return (unsigned)(word >> (4 * (c % 16))) & 0xf;
}

static uint16_t i4_param(const struct qpk_tensor *t, uint32_t r, uint32_t c, bool m)
{
    const uint8_t *block = t->data + (uint64_t)(r / 4) * t->row_stride;
    return le16(block + 2 * (uint64_t)t->cols + 16 * (uint64_t)(c / t->group_size) + (m ? 8 : 0) + 2 * (r % 4));
}

static double i4_value(const struct qpk_tensor *t, uint32_t r, uint32_t c)
{
    int64_t D = pf16_value(i4_param(t, r, c, false)), M = pf16_value(i4_param(t, r, c, true));
    return ldexp((double)(D * (int64_t)i4_code(t, r, c) - M), -t->scale_exp);
}

static float *source_values(const struct st_model *m, const char *name, uint64_t n)
{
    const struct st_tensor *s = st_find(m, name);
    ck_assert_msg(s != NULL, "%s: not in the source", name);
    ck_assert_uint_eq(s->numel, n);
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (uint64_t i = 0; i < n; i++)
        x[i] = st_get_f32(s, i);
    return x;
}

/* The bytes an encoding needs for [rows, cols] (QPK.md), not the packer's. */
static uint64_t expected_nbytes(const struct qpk_tensor *t)
{
    uint64_t n = (uint64_t)t->rows * t->cols, g = t->group_size;
    switch (t->encoding) {
    case QPK_ENC_I4G: return n / 2 + n / g * 4;     /* 4 bits + 2 x u16 per group */
    case QPK_ENC_I8G: return n + n / g * 4;         /* 8 bits + i32 per group */
    case QPK_ENC_I6G: return n * 3 / 4 + n / g * 2; /* 6 bits + pf16 per group */
    case QPK_ENC_I7G: return n * 7 / 8 + n / g * 2; /* 7 bits + pf16 per group */
    case QPK_ENC_I4K: return n / 2 + n / (8 * g) * 16;  /* 4 bits + 16 bytes per 8 groups */
    case QPK_ENC_I32S: return ((uint64_t)t->cols * 4 + 7) / 8 * 8;
    default: return n * 4;
    }
}

static double sq(double v) { return v * v; }

static const cJSON *provenance_tensor(cJSON *prov, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(prov, "tensors")) {
        if (!strcmp(cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring, name))
            return t;
    }
    ck_abort_msg("%s: not in the provenance", name);
    return NULL;
}

static cJSON *provenance(const struct qpk_file *f)
{
    char *text;
    size_t len;
    qp_err err = {{0}};
    ck_assert_msg(qpk_read_section(f, QPK_SEC_PROVENANCE, &text, &len, &err) == 0, "%s", err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_ptr_nonnull(j);
    return j;
}

static double number(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    ck_assert_msg(cJSON_IsNumber(v), "no number %s", key);
    return v->valuedouble;
}

/* "... 6.060 bits per weight" in the last run's output */
static double printed_bits_per_weight(void)
{
    const char *at = strstr(out_text, " bits per weight");
    ck_assert_msg(at != NULL, "no bits per weight in: %s", out_text);
    while (at > out_text && at[-1] != ' ')
        at--;
    return atof(at);
}

/* ------------------------------------- 1. int4-pure against the quantiser */

/* The searched quantiser's column weights, restated from QPK.md / pack.c:
 * the squared gain of the norm feeding the matrix (floored at 1e-4 of the
 * mean), 1 + g^2 / mean(g^2) of the final norm for a tied embedding, none
 * for o_proj, down_proj, an untied embedding and round-to-nearest. As a
 * [rows x cols] matrix for qnt_quantize_tensor, or NULL. */
static float *importance_of(struct st_model *m, const struct qpk_tensor *t, bool tied, qnt_method method)
{
    char name[128];
    if (method != QNT_SEARCH)
        return NULL;
    if (t->role == QPK_ROLE_Q || t->role == QPK_ROLE_K || t->role == QPK_ROLE_V)
        snprintf(name, sizeof name, "model.layers.%u.input_layernorm.weight", t->layer);
    else if (t->role == QPK_ROLE_GATE || t->role == QPK_ROLE_UP)
        snprintf(name, sizeof name, "model.layers.%u.post_attention_layernorm.weight", t->layer);
    else if (t->role == QPK_ROLE_LM_HEAD || (t->role == QPK_ROLE_EMBED && tied))
        snprintf(name, sizeof name, "model.norm.weight");
    else
        return NULL;
    float *g = source_values(m, name, t->cols);
    double sum = 0;
    for (uint32_t j = 0; j < t->cols; j++) {
        g[j] = g[j] * g[j];
        sum += g[j];
    }
    float floor = (float)(1e-4 * sum / t->cols);
    float *w = malloc(sizeof(float) * t->rows * t->cols);
    ck_assert_ptr_nonnull(w);
    for (uint32_t j = 0; j < t->cols; j++) {
        float wj = t->role == QPK_ROLE_EMBED ? 1.0f + (float)(g[j] * t->cols / sum) : fmaxf(g[j], floor);
        for (uint32_t r = 0; r < t->rows; r++)
            w[(uint64_t)r * t->cols + j] = wj;
    }
    free(g);
    return w;
}

/* Every matrix of qpk against qnt_quantize_tensor on the source: the same
 * exponent, codes and parameters, and the decoded values' error is what
 * qnt_tensor_stats (and the provenance) report. */
static void check_i4_against_quantiser(const char *ck, const char *qpk, uint32_t group, qnt_method method)
{
    qp_err err = {{0}};
    struct st_model m;
    ck_assert_msg(st_open_dir(&m, path_of("%s", ck), &err) == 0, "%s", err.msg);
    struct qpk_file f = open_qpk(qpk);
    cJSON *prov = provenance(&f);
    ck_assert_uint_eq(f.cfg.weight_format, QPK_FORMAT_INT4);
    unsigned matrices = 0;
    for (uint32_t ti = 0; ti < f.n_tensors; ti++) {
        const struct qpk_tensor *t = &f.tensors[ti];
        if (qpk_role_is_norm(t->role))
            continue;
        matrices++;
        ck_assert_int_eq(t->encoding, QPK_ENC_I4G);
        ck_assert_uint_eq(t->group_size, group);
        ck_assert_uint_eq(t->rows_per_block, 4);
        ck_assert_uint_eq(t->row_stride, 2 * (uint64_t)t->cols + 16 * (uint64_t)(t->cols / group));
        uint64_t n = (uint64_t)t->rows * t->cols;
        float *x = source_values(&m, t->name, n);
        float *w = importance_of(&m, t, f.cfg.flags & QPK_CONFIG_TIED, method);
        qnt_tensor ref;
        qnt_stats st;
        ck_assert_msg(qnt_quantize_tensor(x, w, t->rows, t->cols, 4, (int)group, method, &ref, &st, &err) == 0,
                      "%s", err.msg);
        free(w);
        ck_assert_int_eq(t->scale_exp, ref.E);
        double sse = 0, max_err = 0;
        for (uint32_t r = 0; r < t->rows; r++)
            for (uint32_t c = 0; c < t->cols; c++) {
                uint64_t i = (uint64_t)r * t->cols + c, gi = i / group;
                ck_assert_msg(i4_code(t, r, c) == ref.codes[i], "%s[%u, %u]: code %u, quantiser %u", t->name, r, c,
                              i4_code(t, r, c), ref.codes[i]);
                ck_assert_msg(i4_param(t, r, c, false) == ref.d[gi] && i4_param(t, r, c, true) == ref.m[gi],
                              "%s[%u, %u]: d/m %04x/%04x, quantiser %04x/%04x", t->name, r, c,
                              i4_param(t, r, c, false), i4_param(t, r, c, true), ref.d[gi], ref.m[gi]);
                double e = fabs((double)x[i] - i4_value(t, r, c));
                sse += e * e;
                max_err = fmax(max_err, e);
            }
        ck_assert_msg(sse == st.sse && max_err == st.max_err, "%s: decoded sse %g max %g, quantiser %g %g",
                      t->name, sse, max_err, st.sse, st.max_err);
        const cJSON *p = provenance_tensor(prov, t->name);
        ck_assert_double_eq(number(p, "max_error"), max_err);
        ck_assert_double_eq_tol(number(p, "rms_error"), sqrt(sse / (double)n), 1e-9 * sqrt(sse / (double)n));
        ck_assert_uint_eq(number(p, "group"), group);
        qnt_tensor_free(&ref);
        free(x);
    }
    ck_assert_uint_eq(matrices, 7 * f.cfg.n_layers + 1 + !(f.cfg.flags & QPK_CONFIG_TIED));
    cJSON_Delete(prov);
    qpk_close(&f);
    st_close(&m);
}

/* int4-pure against packer/quant.h on the source: a group size and method
 * each; --quant rtn is the naive baseline, symmetric absmax; minmax the
 * range one */
static const struct i4_case {
    const char *gen, *pack;
    uint32_t group;
    qnt_method method;
} i4_cases[] = {
    {WIDE " --seed 71 --untied", "--format int4-pure", 32, QNT_SEARCH},
    {WIDE " --seed 72", "--format int4-pure --group 64 --quant rtn", 64, QNT_ABSMAX},
    {WIDE " --seed 72", "--format int4-pure --group 64 --quant minmax", 64, QNT_RTN},
    {WIDE " --seed 73 --stress --untied", "--format int4-pure --group 128", 128, QNT_SEARCH},  /* stress values */
};

START_TEST(int4_pure_matches_the_quantiser)
{
    const struct i4_case *c = &i4_cases[_i];
    qp_test_model("ck", c->gen, c->pack);
    check_i4_against_quantiser("ck", "ck.qpk", c->group, c->method);
    remove_dir();
}
END_TEST

/* The same bytes every run and whatever the number of threads: each block
 * is quantised on its own and the error sums are added block by block in
 * order. The 40000 x 128 BF16 embedding (10 MB) spans three of the packer's
 * 4 MB chunks. */
START_TEST(int4_pack_is_deterministic)
{
    make_dir();
    gen("ck", WIDE " --vocab 40000 --seed 74");
    pack_checkpoint("ck", "a.qpk", "--format int4 --quiet");
    pack_checkpoint("ck", "b.qpk", "--format int4 --quiet");
    setenv("QPACK_THREADS", "1", 1);
    pack_checkpoint("ck", "one.qpk", "--format int4 --quiet");
    setenv("QPACK_THREADS", "3", 1);
    pack_checkpoint("ck", "three.qpk", "--format int4 --quiet");
    unsetenv("QPACK_THREADS");
    size_t na, n;
    char *a = slurp(path_of("a.qpk"), &na);
    static const char *const others[] = {"b.qpk", "one.qpk", "three.qpk"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char *b = slurp(path_of("%s", others[i]), &n);
        ck_assert_msg(n == na && memcmp(a, b, na) == 0, "%s differs from a.qpk", others[i]);
        free(b);
    }
    free(a);
    remove_dir();
}
END_TEST

/* ------------------------- 1b. the packed encodings i6g, i7g and i4k */

/* bits-wide field i of a little-endian bit stream: bits [bits i, bits (i
 * + 1)), bit by bit */
static unsigned field_bits(const uint8_t *p, unsigned bits, uint64_t i)
{
    unsigned v = 0;
    for (unsigned b = 0; b < bits; b++) {
        uint64_t bit = bits * i + b;
        v |= (unsigned)(p[bit / 8] >> (bit % 8) & 1) << b;
    }
    return v;
}

static unsigned field6(const uint8_t *p, uint64_t i) { return field_bits(p, 6, i); }

/* i6g and i7g, from the bytes: the code of (r, c) and its group's d */
static unsigned code_bits(const struct qpk_tensor *t) { return t->encoding == QPK_ENC_I7G ? 7 : 6; }

static int i6_code(const struct qpk_tensor *t, uint32_t r, uint32_t c)
{
    const uint8_t *block = t->data + (uint64_t)(r / 4) * t->row_stride;
    unsigned bits = code_bits(t);
    int v = (int)field_bits(block, bits, (uint64_t)(c / 16) * 64 + (r % 4) * 16 + c % 16);
    return v >= 1 << (bits - 1) ? v - (1 << bits) : v;
}

static uint16_t i6_param(const struct qpk_tensor *t, uint32_t r, uint32_t c)
{
    const uint8_t *block = t->data + (uint64_t)(r / 4) * t->row_stride;
    return le16(block + (uint64_t)t->cols * 4 * code_bits(t) / 8 +
                2 * ((uint64_t)(c / t->group_size) * 4 + r % 4));
}

/* i4k, from the bytes: group c / g's super-block scale (m: the offset's)
 * and 6-bit multiple, and the integer they make: their product */
static void i4k_parts(const struct qpk_tensor *t, uint32_t r, uint32_t c, bool m, uint16_t *scale, unsigned *sub)
{
    const uint8_t *sb = t->data + (uint64_t)(r / 4) * t->row_stride + 2 * (uint64_t)t->cols +
                        64 * (uint64_t)(c / t->group_size / 8);
    *scale = le16(sb + (m ? 8 : 0) + 2 * (r % 4));
    *sub = field6(sb + 16 + 12 * (r % 4), (m ? 8 : 0) + c / t->group_size % 8);
}

static int64_t i4k_param(const struct qpk_tensor *t, uint32_t r, uint32_t c, bool m)
{
    uint16_t scale;
    unsigned sub;
    i4k_parts(t, r, c, m, &scale, &sub);
    int64_t mant = pf16_value(scale & 0xfff);     /* the scale's mantissa: -32..31 */
    ck_assert_msg(mant >= -32 && mant <= 31, "%s[%u, %u]: scale %04x", t->name, r, c, scale);
    return pf16_value(scale) * sub;
}

static double packed_value(const struct qpk_tensor *t, uint32_t r, uint32_t c)
{
    if (t->encoding == QPK_ENC_I6G || t->encoding == QPK_ENC_I7G)
        return ldexp((double)pf16_value(i6_param(t, r, c)) * i6_code(t, r, c), -t->scale_exp);
    int64_t D = i4k_param(t, r, c, false), M = i4k_param(t, r, c, true);
    return ldexp((double)(D * (int64_t)i4_code(t, r, c) - M), -t->scale_exp);
}

/* One packed matrix against qnt_i6_row / qnt_i7_row / qnt_i4k_row run on its source
 * rows: the same codes and parameters, and the error of the values decoded
 * by QPK.md is the provenance's. */
static void check_packed_against_quantiser(struct st_model *m, const struct qpk_tensor *t, bool tied, cJSON *prov)
{
    uint64_t n = (uint64_t)t->rows * t->cols;
    uint32_t groups = t->cols / t->group_size, supers = groups / 8;
    float *x = source_values(m, t->name, n), *w = importance_of(m, t, tied, QNT_SEARCH);
    uint8_t *q = malloc(t->cols), *sub = malloc(16 * (size_t)supers + 1);
    uint16_t *d = malloc(2 * (size_t)groups), *sd = malloc(2 * (size_t)supers + 2), *sm = malloc(2 * (size_t)supers + 2);
    ck_assert(q && sub && d && sd && sm);
    double sse = 0, max_err = 0;
    for (uint32_t r = 0; r < t->rows; r++) {
        qnt_damage dmg = {0};
        const float *xr = x + (uint64_t)r * t->cols, *wr = w ? w + (uint64_t)r * t->cols : NULL;
        if (t->encoding == QPK_ENC_I6G)
            qnt_i6_row(xr, wr, t->cols, (int)t->group_size, t->scale_exp, QNT_SEARCH, (int8_t *)q, d, &dmg);
        else if (t->encoding == QPK_ENC_I7G)
            qnt_i7_row(xr, wr, t->cols, (int)t->group_size, t->scale_exp, QNT_SEARCH, (int8_t *)q, d, &dmg);
        else
            qnt_i4k_row(xr, wr, t->cols, (int)t->group_size, t->scale_exp, QNT_SEARCH, q, sd, sm, sub, &dmg);
        for (uint32_t c = 0; c < t->cols; c++) {
            uint32_t gi = c / t->group_size;
            if (t->encoding == QPK_ENC_I6G || t->encoding == QPK_ENC_I7G) {
                ck_assert_msg(i6_code(t, r, c) == (int8_t)q[c] && i6_param(t, r, c) == d[gi],
                              "%s[%u, %u]: code %d d %04x, quantiser %d %04x", t->name, r, c, i6_code(t, r, c),
                              i6_param(t, r, c), (int8_t)q[c], d[gi]);
                ck_assert_int_le(abs(i6_code(t, r, c)), t->encoding == QPK_ENC_I7G ? 63 : 31);
            } else {
                uint16_t s_d, s_m;
                unsigned a, b;
                i4k_parts(t, r, c, false, &s_d, &a);
                i4k_parts(t, r, c, true, &s_m, &b);
                ck_assert_msg(i4_code(t, r, c) == q[c], "%s[%u, %u]: code", t->name, r, c);
                ck_assert_msg(s_d == sd[gi / 8] && s_m == sm[gi / 8] && a == sub[16 * (gi / 8) + gi % 8] &&
                              b == sub[16 * (gi / 8) + 8 + gi % 8], "%s[%u, %u]: super-block", t->name, r, c);
            }
            double e = fabs((double)xr[c] - packed_value(t, r, c));
            sse += e * e;
            max_err = fmax(max_err, e);
        }
    }
    const cJSON *p = provenance_tensor(prov, t->name);
    ck_assert_double_eq(number(p, "max_error"), max_err);
    ck_assert_double_eq_tol(number(p, "rms_error"), sqrt(sse / (double)n), 1e-9 * sqrt(sse / (double)n));
    free(x), free(w), free(q), free(sub), free(d), free(sd), free(sm);
}

/* hidden 256, MLP 512: 8 groups of 32 divide every int4 matrix's columns */
#define WIDER "--preset tiny --hidden 256 --intermediate 512 --head-dim 32"

START_TEST(int4_preset_packed_matrices_match_quantiser)
{
    /* the embedding i6g: the preset's seventh bit would fit this shape */
    qp_test_model("ck", WIDER " --seed 76", "--format int4 --keep 'model.embed_tokens.weight=int6'");
    qp_err err = {{0}};
    struct st_model m;
    ck_assert_msg(st_open_dir(&m, path_of("ck"), &err) == 0, "%s", err.msg);
    struct qpk_file f = open_qpk("ck.qpk");
    cJSON *prov = provenance(&f);
    unsigned n6 = 0, n4k = 0;
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const struct qpk_tensor *t = &f.tensors[i];
        if (!qpk_encoding_packed(t->encoding))
            continue;
        n6 += t->encoding == QPK_ENC_I6G;
        n4k += t->encoding == QPK_ENC_I4K;
        ck_assert_uint_eq(t->nbytes, expected_nbytes(t));
        check_packed_against_quantiser(&m, t, f.cfg.flags & QPK_CONFIG_TIED, prov);
    }
    /* the embedding; q, k, o, gate, up of both layers (down_proj and v_proj
     * are int8: 2 layers have no inner eighth) */
    ck_assert_uint_eq(n6, 1);
    ck_assert_uint_eq(n4k, 2 * 5);
    cJSON_Delete(prov);
    qpk_close(&f);
    st_close(&m);
    remove_dir();
}
END_TEST

/* --keep ...=int7: the embedding i7g, its codes and parameters those of
 * qnt_i7_row, its bytes 7.25 bits per weight; against an i6g embedding
 * (--keep ...=int6) of the same checkpoint about half the RMS error (the step of
 * 63 codes instead of 31); the summary and provenance name i7g. */
START_TEST(keep_int7_embedding_matches_quantiser_with_half_i6g_error)
{
    make_dir();
    gen("ck", WIDER " --seed 77");
    pack_checkpoint("ck", "i6.qpk", "--format int4 --quiet --keep 'model.embed_tokens.weight=int6'");
    pack_checkpoint("ck", "i7.qpk", "--format int4 --keep 'model.embed_tokens.weight=int7'");
    assert_out_has("qpack: matrices: 10 i4k + 2 i4g (groups of 32), 1 i7g + 2 i8g (groups of 64)\n");
    qp_err err = {{0}};
    struct st_model m;
    ck_assert_msg(st_open_dir(&m, path_of("ck"), &err) == 0, "%s", err.msg);
    struct qpk_file f6 = open_qpk("i6.qpk"), f7 = open_qpk("i7.qpk");
    const struct qpk_tensor *e6 = qpk_tensor_of(&f6, QPK_ROLE_EMBED, QPK_NO_LAYER),
                            *e7 = qpk_tensor_of(&f7, QPK_ROLE_EMBED, QPK_NO_LAYER);
    ck_assert_uint_eq(e6->encoding, QPK_ENC_I6G);
    ck_assert_uint_eq(e7->encoding, QPK_ENC_I7G);
    ck_assert_uint_eq(e7->group_size, 64);
    ck_assert_uint_eq(e7->nbytes, expected_nbytes(e7));
    ck_assert_uint_eq(8 * e7->nbytes, (uint64_t)e7->rows * e7->cols * 29 / 4);     /* 7.25 bits */
    cJSON *p6 = provenance(&f6), *p7 = provenance(&f7);
    check_packed_against_quantiser(&m, e7, f7.cfg.flags & QPK_CONFIG_TIED, p7);
    double r6 = number(provenance_tensor(p6, e6->name), "rms_error"),
           r7 = number(provenance_tensor(p7, e7->name), "rms_error");
    ck_assert_msg(r7 > 0.35 * r6 && r7 < 0.6 * r6, "rms error i7g %g, i6g %g", r7, r6);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p7, "settings"),
                                                      "matrices")->valuestring, "i4g+i8g+i7g+i4k");
    cJSON_Delete(p6);
    cJSON_Delete(p7);
    qpk_close(&f6);
    qpk_close(&f7);
    st_close(&m);
    remove_dir();
}
END_TEST

/* qpk_expand_blocks by hand: an i6g block's codes sign-extended and its
 * pf16 d as int32 D; an i4k block's parameters as the pf16 of scale x
 * multiple: the scale's shift, the mantissas multiplied */
START_TEST(expansion_gives_the_kernel_encodings)
{
    struct qpk_tensor t = {.encoding = QPK_ENC_I6G, .rows = 4, .cols = 32, .group_size = 16, .rows_per_block = 4};
    t.row_stride = qpk_block_bytes(t.encoding, t.cols, t.group_size);
    ck_assert_uint_eq(t.row_stride, 3 * 32 + 2 * 8);
    ck_assert_uint_eq(qpk_kernel_stride(&t), 4 * 32 + 4 * 2 * 4);
    uint8_t in[512] = {0}, out[512];
    for (unsigned n = 0; n < 128; n++)
        qpk_bits6_put(in, n, (unsigned)((int)(n % 64) - 32) & 63);     /* codes -32..31 */
    for (unsigned i = 0; i < 8; i++)
        put16(in + 96 + 2 * i, (uint16_t)(3 << 12 | (5 + i)));         /* D = (5 + i) * 8 */
    qpk_expand_blocks(&t, in, 1, out);
    for (unsigned n = 0; n < 128; n++) {
        ck_assert_uint_eq(qpk_bits6_get(in, n), (unsigned)((int)(n % 64) - 32) & 63);
        ck_assert_int_eq((int8_t)out[n], (int)(n % 64) - 32);
    }
    for (unsigned i = 0; i < 8; i++)
        ck_assert_int_eq((int32_t)le32(out + 128 + 4 * i), (int)(5 + i) * 8);

    /* i7g: codes -64..63, eight to 7 bytes; the first eight by hand */
    t.encoding = QPK_ENC_I7G;
    t.row_stride = qpk_block_bytes(t.encoding, t.cols, t.group_size);
    ck_assert_uint_eq(t.row_stride, 7 * 32 / 2 + 2 * 8);
    ck_assert_uint_eq(qpk_kernel_stride(&t), 4 * 32 + 4 * 2 * 4);
    memset(in, 0, sizeof in);
    for (unsigned n = 0; n < 128; n++)
        qpk_bits7_put(in, n, (unsigned)((int)n - 64) & 127);           /* codes -64..63 */
    /* codes -64..-57: the fields 64..71, bits 7n.. of a 56-bit word */
    uint64_t word = 0;
    for (unsigned n = 0; n < 8; n++)
        word |= (uint64_t)(64 + n) << (7 * n);
    for (unsigned b = 0; b < 7; b++)
        ck_assert_uint_eq(in[b], (uint8_t)(word >> (8 * b)));
    for (unsigned i = 0; i < 8; i++)
        put16(in + 112 + 2 * i, (uint16_t)(0xfff & -(int)(3 + i)));   /* D = -(3 + i) */
    memset(out, 0xaa, sizeof out);
    qpk_expand_blocks(&t, in, 1, out);
    for (unsigned n = 0; n < 128; n++) {
        ck_assert_uint_eq(qpk_bits7_get(in, n), (unsigned)((int)n - 64) & 127);
        ck_assert_uint_eq(field_bits(in, 7, n), (unsigned)((int)n - 64) & 127);
        ck_assert_int_eq((int8_t)out[n], (int)n - 64);
    }
    for (unsigned i = 0; i < 8; i++)
        ck_assert_int_eq((int32_t)le32(out + 128 + 4 * i), -(int)(3 + i));

    t = (struct qpk_tensor){.encoding = QPK_ENC_I4K, .rows = 4, .cols = 128, .group_size = 16, .rows_per_block = 4};
    t.row_stride = qpk_block_bytes(t.encoding, t.cols, t.group_size);
    ck_assert_uint_eq(t.row_stride, 2 * 128 + 64);
    memset(in, 0, sizeof in);
    for (unsigned b = 0; b < 256; b++)
        in[b] = (uint8_t)(b * 7);                                        /* codes: copied as they are */
    uint8_t *sb = in + 256;
    for (unsigned k = 0; k < 4; k++) {
        put16(sb + 2 * k, (uint16_t)(1 << 12 | (3 + k)));               /* scale of d: 2 (3 + k) */
        put16(sb + 8 + 2 * k, k == 3 ? 15 << 12 | 31 : (uint16_t)(0xfff & -(int)(k + 1)));  /* of m: -(k + 1); 31 x 2^15 */
        for (unsigned i = 0; i < 8; i++) {
            qpk_bits6_put(sb + 16 + 12 * k, i, 7 * i + 1);
            qpk_bits6_put(sb + 16 + 12 * k, 8 + i, 63 - i);
        }
    }
    qpk_expand_blocks(&t, in, 1, out);
    ck_assert_int_eq(memcmp(out, in, 256), 0);
    for (unsigned g = 0; g < 8; g++)
        for (unsigned k = 0; k < 4; k++) {
            uint16_t d = le16(out + 256 + 16 * g + 2 * k), mm = le16(out + 256 + 16 * g + 8 + 2 * k);
            ck_assert_uint_eq(d, (uint16_t)(1 << 12 | (3 + k) * (7 * g + 1)));
            ck_assert_uint_eq(mm, k < 3 ? (uint16_t)(0xfff & -(int)((k + 1) * (63 - g))) : 15 << 12 | 31 * (63 - g));
        }
}
END_TEST

/* the writer and the reader check an i6g scale as the i8g one it becomes,
 * and an i4k scale's 6-bit mantissa */
START_TEST(packed_values_out_of_range_are_refused)
{
    struct qpk_tensor t = {.name = "w", .role = QPK_ROLE_O, .encoding = QPK_ENC_I6G, .rows = 4, .cols = 16,
                           .group_size = 16, .rows_per_block = 4};
    t.row_stride = qpk_block_bytes(t.encoding, t.cols, t.group_size);
    uint8_t block[64] = {0};
    qp_err err = {{0}};
    put16(block + 48 + 2, (uint16_t)(9 << 12 | 2047));        /* 2047 x 2^9 < 2^20 */
    ck_assert_int_eq(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);
    put16(block + 48 + 2, (uint16_t)(10 << 12 | 1025));       /* 1025 x 2^10 > 2^20 */
    ck_assert_int_ne(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);
    ck_assert_msg(strstr(err.msg, "f.qpk: tensor w: row 1, group 0: scale 1049600, outside i6g's +-2^20"), "%s",
                  err.msg);

    /* an embedding's values must stay below 2^29: checked exactly, on the
     * expanded block, where 32 |D| could reach it */
    t.role = QPK_ROLE_EMBED;
    t.scale_exp = -10;
    memset(block, 0, sizeof block);
    put16(block + 48 + 2, (uint16_t)(9 << 12 | 1024));        /* D = 2^19: 32 D 2^10 = 2^34 */
    ck_assert_int_eq(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);     /* every code 0 */
    qpk_bits6_put(block, 16, 1);                              /* row 1, column 0: q = 1, 2^29 */
    ck_assert_int_ne(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);
    ck_assert_msg(strstr(err.msg, "f.qpk: tensor w: row 1 holds a value of magnitude 5.37e+08"), "%s", err.msg);

    /* i7g: its scales after 3.5 bytes per column and row block, its codes
     * up to 64 |D| */
    t.encoding = QPK_ENC_I7G;
    t.role = QPK_ROLE_O;
    t.scale_exp = 0;
    t.row_stride = qpk_block_bytes(t.encoding, t.cols, t.group_size);
    ck_assert_uint_eq(t.row_stride, 56 + 8);
    memset(block, 0, sizeof block);
    put16(block + 56 + 6, (uint16_t)(9 << 12 | 2047));
    ck_assert_int_eq(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);
    put16(block + 56 + 6, (uint16_t)(10 << 12 | 1025));
    ck_assert_int_ne(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);
    ck_assert_msg(strstr(err.msg, "f.qpk: tensor w: row 3, group 0: scale 1049600, outside i7g's +-2^20"), "%s",
                  err.msg);
    t.role = QPK_ROLE_EMBED;
    t.scale_exp = -4;
    memset(block, 0, sizeof block);
    put16(block + 56 + 2, (uint16_t)(9 << 12 | 1024));        /* D = 2^19: 64 D 2^4 = 2^29 */
    qpk_bits7_put(block, 16, 63);                             /* row 1, column 0: q = 63, below 2^29 */
    ck_assert_int_eq(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);
    qpk_bits7_put(block, 17, 64);                             /* row 1, column 1: q = -64, 2^29 */
    ck_assert_int_ne(qpk_check_values("f.qpk", &t, 0, block, 1, &err), 0);
    ck_assert_msg(strstr(err.msg, "f.qpk: tensor w: row 1 holds a value of magnitude 5.37e+08"), "%s", err.msg);

    t.role = QPK_ROLE_O;
    t.scale_exp = 0;
    t.encoding = QPK_ENC_I4K;
    t.cols = 256;
    t.group_size = 32;
    t.row_stride = qpk_block_bytes(t.encoding, t.cols, t.group_size);
    uint8_t k_block[2 * 256 + 64] = {0};
    put16(k_block + 512 + 8 + 4, (uint16_t)(3 << 12 | 31));     /* m of row 2: mantissa 31 */
    ck_assert_int_eq(qpk_check_values("f.qpk", &t, 0, k_block, 1, &err), 0);
    put16(k_block + 512 + 8 + 4, (uint16_t)(3 << 12 | 32));
    ck_assert_int_ne(qpk_check_values("f.qpk", &t, 0, k_block, 1, &err), 0);
    ck_assert_msg(strstr(err.msg, "f.qpk: tensor w: row 2, super-block 0: m scale 3020 has a mantissa outside "
                                  "i4k's -32..31"), "%s", err.msg);
}
END_TEST

/* --------------------------------------------------- 2. the int4 preset */

static unsigned encoding_of(const struct qpk_file *f, unsigned role, unsigned layer)
{
    const struct qpk_tensor *t = qpk_tensor_of(f, role, layer);
    ck_assert_ptr_nonnull(t);
    return t->encoding;
}

/* The preset's rule, restated: int8 for an untied lm_head, every v_proj,
 * and down_proj of the first and last eighth of the layers; int6 for the
 * embedding; the rest int4, in super-blocks (i4k) where 8 groups of 32
 * divide the columns. */
static unsigned preset_encoding(const struct qpk_tensor *t, uint32_t n_layers)
{
    uint32_t e = n_layers / 8;
    if (t->role == QPK_ROLE_LM_HEAD || t->role == QPK_ROLE_V ||
        (t->role == QPK_ROLE_DOWN && (t->layer < e || t->layer >= n_layers - e)))
        return QPK_ENC_I8G;
    if (t->role == QPK_ROLE_EMBED)
        return QPK_ENC_I6G;
    return t->cols % 256 ? QPK_ENC_I4G : QPK_ENC_I4K;
}

START_TEST(int4_preset_keeps_lm_head_v_and_outer_down_int8_g64)
{
    make_dir();
    gen("ck", WIDE " --layers 16 --seed 81 --untied");
    pack_checkpoint("ck", "out.qpk", "--format int4");
    struct qpk_file f = open_qpk("out.qpk");
    ck_assert_uint_eq(f.cfg.weight_format, QPK_FORMAT_INT4);
    uint64_t bytes = 0, weights = 0;
    unsigned n8 = 0, n4k = 0, lines = 0;
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const struct qpk_tensor *t = &f.tensors[i];
        if (!qpk_role_is_norm(t->role)) {
            unsigned enc = preset_encoding(t, 16);
            n8 += enc == QPK_ENC_I8G;
            n4k += enc == QPK_ENC_I4K;
            ck_assert_msg(t->encoding == enc, "%s: encoding %s", t->name, qpk_encoding_name(t->encoding));
            ck_assert_uint_eq(t->group_size, qpk_kernel_encoding(enc) == QPK_ENC_I8G ? 64 : 32);
        }
        ck_assert_uint_eq(t->nbytes, expected_nbytes(t));
        bytes += expected_nbytes(t);
        weights += (uint64_t)t->rows * t->cols;
        /* one damage line per tensor */
        char line[128];
        snprintf(line, sizeof line, "qpack:   %s ", t->name);
        lines += strstr(out_text, line) != NULL;
    }
    /* lm_head, the 16 v_proj, down_proj of layers 0, 1, 14, 15; the other
     * 12 down_proj (256 columns) in super-blocks */
    ck_assert_uint_eq(n8, 1 + 16 + 4);
    ck_assert_uint_eq(n4k, 12);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_EMBED, QPK_NO_LAYER), QPK_ENC_I6G);
    ck_assert_uint_eq(lines, f.n_tensors);
    ck_assert_double_eq_tol(printed_bits_per_weight(), 8.0 * (double)bytes / (double)weights, 0.0006);
    assert_out_has("qpack: matrices: 12 i4k + 80 i4g (groups of 32), 1 i6g + 21 i8g (groups of 64)\n");

    cJSON *prov = provenance(&f);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(prov, "settings");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(prov, "format")->valuestring, "int4");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "preset")->valuestring, "int4");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "matrices")->valuestring, "i4g+i8g+i6g+i4k");
    ck_assert_int_eq(number(s, "int8_group"), 64);
    ck_assert_int_eq(number(s, "group"), 32);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "keep")), 0);
    cJSON_Delete(prov);
    qpk_close(&f);
    remove_dir();
}
END_TEST

/* llama.cpp's use_more_bits (llama-quant.cpp): the layers whose attn_v
 * and ffn_down its Q4_K_M stores as Q6_K. */
static bool llama_more_bits(unsigned layer, unsigned n_layers)
{
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

/* The embedding of a tied model is i7g where it holds more than half of
 * the matrices' weights, or where with it the matrices take no more bytes
 * than llama.cpp's Q4_K_M gives them (Q6_K, 210 bytes per 256 weights, for
 * the embedding and the use_more_bits v_proj and down_proj, Q4_K, 144, for
 * the rest), as the tensors' shapes say; else i6g. An untied model's and
 * one a --keep rule names keep theirs. Returns the encoding and whether
 * i7g fits that budget. */
static unsigned embedding_encoding(const char *ck, const char *args, bool *fits)
{
    pack_checkpoint(ck, "out.qpk", args);
    struct qpk_file f = open_qpk("out.qpk");
    uint64_t all = 0, embed = 0, bytes = 0, q4_k_m = 0;
    bool tied = qpk_tensor_of(&f, QPK_ROLE_LM_HEAD, QPK_NO_LAYER) == NULL;
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        struct qpk_tensor t = f.tensors[i];
        if (qpk_role_is_norm(t.role))
            continue;
        uint64_t n = (uint64_t)t.rows * t.cols;
        all += n;
        embed += t.role == QPK_ROLE_EMBED ? n : 0;
        if (t.role == QPK_ROLE_EMBED)
            t.encoding = QPK_ENC_I7G;
        bytes += expected_nbytes(&t);
        bool six = t.role == QPK_ROLE_EMBED || ((t.role == QPK_ROLE_V || t.role == QPK_ROLE_DOWN) &&
                                                llama_more_bits(t.layer, f.cfg.n_layers));
        q4_k_m += n * (six ? 210 : 144) / 256;
    }
    *fits = bytes <= q4_k_m;
    unsigned enc = encoding_of(&f, QPK_ROLE_EMBED, QPK_NO_LAYER);
    bool keep = strstr(args, "--keep") != NULL;
    ck_assert_uint_eq(enc, tied && !keep && (2 * embed > all || *fits) ? QPK_ENC_I7G : QPK_ENC_I6G);
    qpk_close(&f);
    return enc;
}

START_TEST(int4_preset_gives_a_large_vocabulary_seven_bits)
{
    make_dir();
    gen("small", WIDE " --layers 2 --vocab 1024 --seed 84");
    gen("large", WIDE " --layers 2 --vocab 4096 --seed 84");
    gen("untied", WIDE " --layers 2 --vocab 4096 --seed 84 --untied");
    /* tiny-learned's shape: a seventh bit for its 14 % embedding fits */
    gen("budget", "--preset tiny --hidden 256 --intermediate 768 --layers 4 --heads 4 --kv-heads 2 --head-dim 64 "
                  "--vocab 2048 --seed 84");
    bool fits;
    ck_assert_uint_eq(embedding_encoding("small", "--format int4", &fits), QPK_ENC_I6G);
    ck_assert(!fits);
    ck_assert_uint_eq(embedding_encoding("large", "--format int4", &fits), QPK_ENC_I7G);
    ck_assert(!fits);
    assert_out_has("1 i7g + ");
    ck_assert_uint_eq(embedding_encoding("large", "--format int4 --keep model.embed_tokens.weight=int6", &fits),
                      QPK_ENC_I6G);
    ck_assert_uint_eq(embedding_encoding("untied", "--format int4", &fits), QPK_ENC_I6G);
    ck_assert_uint_eq(embedding_encoding("budget", "--format int4", &fits), QPK_ENC_I7G);
    ck_assert(fits);
    remove_dir();
}
END_TEST

START_TEST(int4_preset_on_narrow_model_halves_int8_group)
{
    make_dir();
    gen("ck", "--preset tiny --hidden 32 --intermediate 96 --seed 82"); /* 64 divides neither */
    pack_checkpoint("ck", "out.qpk", "--format int4");
    assert_out_has("i8g (groups of 32: 64 does not divide their columns)");
    struct qpk_file f = open_qpk("out.qpk");
    for (uint32_t i = 0; i < f.n_tensors; i++)
        if (qpk_kernel_encoding(f.tensors[i].encoding) == QPK_ENC_I8G)
            ck_assert_uint_eq(f.tensors[i].group_size, 32);
    qpk_close(&f);
    remove_dir();
}
END_TEST

/* --format int8 stores a scale per 64 columns unless --group says
 * otherwise: 8.5 bits per weight, Q8_0's. */
START_TEST(int8_default_group_is_64)
{
    make_dir();
    gen("ck", WIDE " --seed 85");
    static const struct {
        const char *args;
        uint32_t group;
    } packs[] = {{"--format int8", 64}, {"--format int8 --group 32", 32}, {"--format int8 --group 128", 128}};
    for (size_t k = 0; k < sizeof packs / sizeof *packs; k++) {
        pack_checkpoint("ck", "out.qpk", packs[k].args);
        struct qpk_file f = open_qpk("out.qpk");
        for (uint32_t i = 0; i < f.n_tensors; i++)
            if (!qpk_role_is_norm(f.tensors[i].role)) {
                ck_assert_uint_eq(f.tensors[i].encoding, QPK_ENC_I8G);
                ck_assert_uint_eq(f.tensors[i].group_size, packs[k].group);
            }
        qpk_close(&f);
    }
    remove_dir();
}
END_TEST

START_TEST(file_bits_per_weight_is_the_sum_over_tensors)
{
    static const char *const packs[] = {"--format int4-pure --group 64", "--format int4 --group 128",
                                        "--format int8", "--format q24"};
    make_dir();
    gen("ck", WIDE " --seed 83");
    for (size_t k = 0; k < sizeof packs / sizeof *packs; k++) {
        pack_checkpoint("ck", "out.qpk", packs[k]);
        struct qpk_file f = open_qpk("out.qpk");
        uint64_t bytes = 0, weights = 0;
        for (uint32_t i = 0; i < f.n_tensors; i++) {
            ck_assert_uint_eq(f.tensors[i].nbytes, expected_nbytes(&f.tensors[i]));
            bytes += expected_nbytes(&f.tensors[i]);
            weights += (uint64_t)f.tensors[i].rows * f.tensors[i].cols;
        }
        ck_assert_msg(fabs(printed_bits_per_weight() - 8.0 * (double)bytes / (double)weights) < 0.0006,
                      "%s: printed %g, tensors %g", packs[k], printed_bits_per_weight(),
                      8.0 * (double)bytes / (double)weights);
        qpk_close(&f);
    }
    remove_dir();
}
END_TEST

/* ------------------------------------------------------------- 3. --keep */

START_TEST(keep_overrides_preset_and_later_rules_win)
{
    make_dir();
    gen("ck", WIDE " --layers 8 --seed 91");
    pack_checkpoint("ck", "out.qpk",
              "--format int4 --quiet --keep 'model.layers.3.mlp.gate_proj.weight=int8' "
              "--keep 'model.embed_tokens.weight=int8' "
              "--keep 'model.layers.*.self_attn.v_proj.weight=int4' "
              "--keep 'model.layers.2.self_attn.v_proj.weight=int8' "
              "--keep 'model.layers.5.mlp.up_proj.weight=int6' "
              "--keep 'model.layers.6.mlp.up_proj.weight=int7'");
    struct qpk_file f = open_qpk("out.qpk");
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_GATE, 3), QPK_ENC_I8G);
    ck_assert_uint_eq(qpk_tensor_of(&f, QPK_ROLE_GATE, 3)->group_size, 64);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_GATE, 2), QPK_ENC_I4G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_EMBED, QPK_NO_LAYER), QPK_ENC_I8G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_V, 2), QPK_ENC_I8G);
    for (unsigned l = 0; l < 8; l++)
        if (l != 2)
            ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_V, l), QPK_ENC_I4G);
    /* untouched by the rules: the preset */
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_DOWN, 0), QPK_ENC_I8G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_DOWN, 7), QPK_ENC_I8G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_DOWN, 1), QPK_ENC_I4K);   /* 256 columns: super-blocks */
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_UP, 5), QPK_ENC_I6G);
    ck_assert_uint_eq(qpk_tensor_of(&f, QPK_ROLE_UP, 5)->group_size, 64);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_UP, 6), QPK_ENC_I7G);
    ck_assert_uint_eq(qpk_tensor_of(&f, QPK_ROLE_UP, 6)->group_size, 64);
    cJSON *prov = provenance(&f);
    const cJSON *keep = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(prov, "settings"), "keep");
    ck_assert_int_eq(cJSON_GetArraySize(keep), 6);
    ck_assert_str_eq(cJSON_GetArrayItem(keep, 3)->valuestring, "model.layers.2.self_attn.v_proj.weight=int8");
    cJSON_Delete(prov);
    qpk_close(&f);
    remove_dir();
}
END_TEST

START_TEST(keep_int8_in_int4_pure)
{
    qp_test_model("ck", WIDE " --seed 92", "--format int4-pure --group 64 --keep 'model.layers.1.mlp.*=int8'");
    struct qpk_file f = open_qpk("ck.qpk");
    for (unsigned role = QPK_ROLE_GATE; role <= QPK_ROLE_DOWN; role++) {
        ck_assert_uint_eq(encoding_of(&f, role, 1), QPK_ENC_I8G);
        ck_assert_uint_eq(qpk_tensor_of(&f, role, 1)->group_size, 64);
        ck_assert_uint_eq(encoding_of(&f, role, 0), QPK_ENC_I4G);
        ck_assert_uint_eq(qpk_tensor_of(&f, role, 0)->group_size, 64);
    }
    qpk_close(&f);
    remove_dir();
}
END_TEST

START_TEST(keep_pattern_matching_nothing_fails_with_message)
{
    make_dir();
    gen("ck", "--preset tiny --seed 93");
    int rc = run("%s pack %s -o %s --format int4 --keep 'model.layers.9.*=int8'", QP_QPACK, path_of("ck"),
                 path_of("out.qpk"));
    ck_assert_int_eq(rc, 1);
    assert_out_has("--keep 'model.layers.9.*=int8': no matrix matches 'model.layers.9.*'");
    ck_assert_int_ne(access(path_of("out.qpk"), F_OK), 0);
    /* norms are not matrices */
    rc = run("%s pack %s -o %s --format int4 --keep 'model.norm.weight=int8'", QP_QPACK, path_of("ck"),
             path_of("out.qpk"));
    ck_assert_int_eq(rc, 1);
    assert_out_has("no matrix matches");
    remove_dir();
}
END_TEST

START_TEST(keep_is_rejected_outside_int4_and_when_malformed)
{
    make_dir();
    gen("ck", "--preset tiny --seed 94");
    static const struct { const char *args, *message; } bad[] = {
        {"--keep 'model.*=int8'", "--keep applies to --format int4 and int4-pure, not q24"},
        {"--format q24 --keep 'model.*=int8'", "--keep applies to --format int4 and int4-pure, not q24"},
        {"--format int8 --keep 'model.*=int8'", "not int8"},
        {"--format int4 --keep 'model.*'", "expected PATTERN=FMT"},
        {"--format int4 --keep '=int8'", "expected PATTERN=FMT"},
        {"--format int4 --keep 'model.*=int2'", "unknown format 'int2' (int8, int7, int6 or int4)"},
        {"--format int5", "unknown format 'int5'"},
        {"--format q24 --group 64", "--group and --quant apply to --format int8, int4 and int4-pure"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = run("%s pack %s -o %s %s", QP_QPACK, path_of("ck"), path_of("out.qpk"), bad[i].args);
        ck_assert_msg(rc != 0, "%s: exit 0", bad[i].args);
        assert_out_has(bad[i].message);
        ck_assert_int_ne(access(path_of("out.qpk"), F_OK), 0);
    }
    remove_dir();
}
END_TEST

/* ------------------------------------------------------ 4. search vs rtn */

START_TEST(search_total_error_is_at_most_rtn)
{
    make_dir();
    gen("ck", WIDE " --seed 95 --untied");
    pack_checkpoint("ck", "search.qpk", "--format int4 --quiet");
    pack_checkpoint("ck", "rtn.qpk", "--format int4 --quant rtn --quiet");
    struct qpk_file s = open_qpk("search.qpk"), r = open_qpk("rtn.qpk");
    cJSON *ps = provenance(&s), *pr = provenance(&r);
    double total_s = 0, total_r = 0, i4_s = 0, i4_r = 0;
    for (uint32_t i = 0; i < s.n_tensors; i++) {
        const struct qpk_tensor *ts = &s.tensors[i], *tr = &r.tensors[i];
        double n = (double)ts->rows * ts->cols;
        double es = n * sq(number(provenance_tensor(ps, ts->name), "rms_error"));
        double er = n * sq(number(provenance_tensor(pr, tr->name), "rms_error"));
        ck_assert_msg(es <= er * (1 + 1e-12), "%s: search %g > rtn %g", ts->name, es, er);
        total_s += es;
        total_r += er;
        if (ts->encoding != QPK_ENC_I4G)
            continue;
        /* and on the decoded i4g values, against the source */
        qp_err err = {{0}};
        struct st_model m;
        ck_assert_msg(st_open_dir(&m, path_of("ck"), &err) == 0, "%s", err.msg);
        float *x = source_values(&m, ts->name, (uint64_t)n);
        for (uint32_t row = 0; row < ts->rows; row++)
            for (uint32_t c = 0; c < ts->cols; c++) {
                i4_s += sq(x[(uint64_t)row * ts->cols + c] - i4_value(ts, row, c));
                i4_r += sq(x[(uint64_t)row * ts->cols + c] - i4_value(tr, row, c));
            }
        free(x);
        st_close(&m);
    }
    ck_assert_msg(total_s < total_r && i4_s < i4_r, "search %g (i4g %g), rtn %g (i4g %g)", total_s, i4_s, total_r,
                  i4_r);
    cJSON_Delete(ps);
    cJSON_Delete(pr);
    qpk_close(&s);
    qpk_close(&r);
    remove_dir();
}
END_TEST

/* ------------------------------------------- 5. the reader's i4g checks */

typedef void (*edit_fn)(struct qpk_config *cfg, struct qpk_tensor *tensors, uint32_t n);

/* Writes test_dir/dest through the writer from the entries of test_dir/src,
 * edited first; each tensor's data is the source's when its size is
 * unchanged, else zeros (valid in every encoding: the writer checks value
 * ranges as the reader does). */
static void rewrite(const char *src, const char *dest, edit_fn edit)
{
    struct qpk_file f = open_qpk(src);
    struct qpk_config cfg = f.cfg;
    struct qpk_tensor *ts = calloc(f.n_tensors, sizeof *ts);
    ck_assert_ptr_nonnull(ts);
    memcpy(ts, f.tensors, f.n_tensors * sizeof *ts);
    edit(&cfg, ts, f.n_tensors);
    struct qpk_writer *w;
    qp_err err = {{0}};
    ck_assert_msg(qpk_writer_open(&w, path_of("%s", dest), &cfg, NULL, 0, ts, f.n_tensors, &err) == 0, "%s",
                  err.msg);
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        uint64_t n = (uint64_t)(ts[i].rows / ts[i].rows_per_block) * ts[i].row_stride;
        uint8_t *data = calloc(n ? n : 1, 1);
        ck_assert_ptr_nonnull(data);
        if (n == f.tensors[i].nbytes)
            memcpy(data, f.tensors[i].data, n);
        ck_assert_msg(qpk_writer_begin_tensor(w, i, &err) == 0 && qpk_writer_write(w, data, n, &err) == 0 &&
                      qpk_writer_end_tensor(w, &err) == 0, "%s", err.msg);
        free(data);
    }
    ck_assert_msg(qpk_writer_finish(w, "{}", &err) == 0, "%s", err.msg);
    free(ts);
    qpk_close(&f);
}

static void expect_rejected(const char *name, const char *needle)
{
    struct qpk_file f;
    qp_err err = {{0}};
    int rc = qpk_open(&f, path_of("%s", name), 0, &err);
    if (rc == 0)
        qpk_close(&f);
    ck_assert_msg(rc != 0, "%s opened (expected '%s')", name, needle);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "expected '%s' in: %s", needle, err.msg);
    ck_assert_msg(strstr(err.msg, path_of("%s", name)) != NULL, "the message does not name the file: %s", err.msg);
}

static struct qpk_tensor *first_of(struct qpk_tensor *ts, uint32_t n, unsigned role)
{
    for (uint32_t i = 0; i < n; i++)
        if (ts[i].role == role)
            return &ts[i];
    ck_abort_msg("no tensor of role %u", role);
    return NULL;
}

static void set_i4_group(struct qpk_tensor *t, uint32_t g)
{
    t->group_size = g;
    t->row_stride = 2 * (uint64_t)t->cols + 16 * (uint64_t)(t->cols / g);
}

static void keep_all(struct qpk_config *c, struct qpk_tensor *t, uint32_t n) { (void)c, (void)t, (void)n; }
static void group_48(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    set_i4_group(first_of(t, n, QPK_ROLE_Q), 48);
}
static void group_8(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    set_i4_group(first_of(t, n, QPK_ROLE_Q), 8);
}
static void stride_plus_16(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    first_of(t, n, QPK_ROLE_K)->row_stride += 16;
}
static void mixed_i4_groups(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    set_i4_group(first_of(t, n, QPK_ROLE_UP), 64);
}
static void mixed_i8_groups(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    struct qpk_tensor *v = first_of(t, n, QPK_ROLE_V);
    ck_assert_uint_eq(v->encoding, QPK_ENC_I8G);
    v->group_size /= 2;
    v->row_stride = 4 * (uint64_t)v->cols + 16 * (uint64_t)(v->cols / v->group_size);
}
static void scale_exp_181(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    first_of(t, n, QPK_ROLE_O)->scale_exp = 181;
}
static void int8_container(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)t, (void)n;
    c->weight_format = QPK_FORMAT_INT8;
}
static void q24_container(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)t, (void)n;
    c->weight_format = QPK_FORMAT_Q24;
}

static struct qpk_tensor *first_encoded(struct qpk_tensor *ts, uint32_t n, unsigned encoding)
{
    for (uint32_t i = 0; i < n; i++)
        if (ts[i].encoding == encoding)
            return &ts[i];
    ck_abort_msg("no %s tensor", qpk_encoding_name(encoding));
    return NULL;
}
static void i4k_group_64(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    struct qpk_tensor *k = first_encoded(t, n, QPK_ENC_I4K);
    k->group_size = 64;
    k->row_stride = 2 * (uint64_t)k->cols;
}
static void i6g_stride_plus_8(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    first_encoded(t, n, QPK_ENC_I6G)->row_stride += 8;
}
static void i7g_stride_plus_8(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    first_encoded(t, n, QPK_ENC_I7G)->row_stride += 8;
}
static void i4k_as_i4g(struct qpk_config *c, struct qpk_tensor *t, uint32_t n)
{
    (void)c;
    first_encoded(t, n, QPK_ENC_I4K)->encoding = QPK_ENC_I4G;
}

static void pack_int4_pure(void)
{
    qp_test_model("good", "--preset tiny --seed 101", "--format int4-pure");
}

START_TEST(reader_accepts_rewritten_int4_container)
{
    pack_int4_pure();
    rewrite("good.qpk", "same.qpk", keep_all);
    struct qpk_file f = open_qpk("same.qpk");
    qpk_close(&f);
    remove_dir();
}
END_TEST

/* An edit of the int4-pure container the reader refuses, and what its
 * message holds. */
static const struct bad_edit {
    edit_fn edit;
    const char *needle;
} bad_i4g_edits[] = {
    {group_48, "self_attn.q_proj.weight: i4g group size 48 is not a power of two in 16..256"},
    {group_8, "i4g group size 8 is not a power of two in 16..256"},
    {stride_plus_16, "self_attn.k_proj.weight: i4g [32, 64] with groups of 32 needs 4-row blocks of "
                     "160 bytes (has rows_per_block 4, row_stride 176)"},
    {mixed_i4_groups, "mlp.up_proj.weight: i4g group size 64 differs from the 32 of"},
    {scale_exp_181, "self_attn.o_proj.weight: i4g scale_exp 181 outside -128..180"},
    {int8_container, "encoding i4g is not allowed for role embed in int8 containers"},
    {q24_container, "encoding i4g is not allowed for role embed in q24 containers"},
};

START_TEST(reader_rejects_each_bad_i4g_edit)
{
    pack_int4_pure();
    rewrite("good.qpk", "bad.qpk", bad_i4g_edits[_i].edit);
    expect_rejected("bad.qpk", bad_i4g_edits[_i].needle);
    remove_dir();
}
END_TEST

START_TEST(reader_rejects_mixed_i8g_group_sizes_in_int4_container)
{
    qp_test_model("ck", "--preset tiny --seed 102", "--format int4 --keep 'model.layers.*.self_attn.v_proj.weight=int8'");
    rewrite("ck.qpk", "mixed.qpk", mixed_i8_groups);
    expect_rejected("mixed.qpk", "v_proj.weight: i8g group size 32 differs from the 64 of model.embed_tokens.weight");
    remove_dir();
}
END_TEST

/* i4k's super-blocks must fill the columns, strides are exact, and a
 * tensor's bytes are read as the encoding it names */
START_TEST(reader_checks_packed_encodings)
{
    qp_test_model("ck", WIDER " --seed 103", "--format int4 --keep 'model.embed_tokens.weight=int6'");
    rewrite("ck.qpk", "same.qpk", keep_all);
    struct qpk_file f = open_qpk("same.qpk");
    qpk_close(&f);
    rewrite("ck.qpk", "g64.qpk", i4k_group_64);
    expect_rejected("g64.qpk", "i4k's super-blocks of 8 groups of 64 do not divide its 256 columns");
    rewrite("ck.qpk", "stride.qpk", i6g_stride_plus_8);
    expect_rejected("stride.qpk", "model.embed_tokens.weight: i6g [512, 256] with groups of 64 needs 4-row blocks "
                                  "of 800 bytes (has rows_per_block 4, row_stride 808)");
    rewrite("ck.qpk", "as_i4g.qpk", i4k_as_i4g);
    expect_rejected("as_i4g.qpk", "q_proj.weight: i4g [128, 256] with groups of 32 needs 4-row blocks of 640 bytes "
                                  "(has rows_per_block 4, row_stride 576)");
    rewrite("ck.qpk", "int8.qpk", int8_container);
    expect_rejected("int8.qpk", "in int8 containers");
    pack_checkpoint("ck", "i7.qpk", "--format int4 --quiet --keep 'model.embed_tokens.weight=int7'");
    rewrite("i7.qpk", "same7.qpk", keep_all);
    f = open_qpk("same7.qpk");
    qpk_close(&f);
    rewrite("i7.qpk", "stride7.qpk", i7g_stride_plus_8);
    expect_rejected("stride7.qpk", "model.embed_tokens.weight: i7g [512, 256] with groups of 64 needs 4-row blocks "
                                   "of 928 bytes (has rows_per_block 4, row_stride 936)");
    remove_dir();
}
END_TEST

/* ---------------------------------------------------- 6. qpack info */

START_TEST(info_shows_format_encodings_and_groups)
{
    qp_test_model("ck", "--preset tiny --seed 111", "--format int4");
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("ck.qpk")), 0);
    assert_out_has("encodings   int4: 9 i32s, 2 i8g g64, 12 i4g g32, 1 i6g g64");
    pack_checkpoint("ck", "ck7.qpk", "--format int4 --quiet --keep 'model.embed_tokens.weight=int7'");
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("ck7.qpk")), 0);
    assert_out_has("encodings   int4: 9 i32s, 2 i8g g64, 12 i4g g32, 1 i7g g64");
    ck_assert_int_eq(run("%s info %s --json", QP_QPACK, path_of("ck.qpk")), 0);
    cJSON *root = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(root);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "weight_format")->valuestring, "int4");
    struct qpk_file f = open_qpk("ck.qpk");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const cJSON *t = cJSON_GetArrayItem(ts, (int)i);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(t, "encoding")->valuestring,
                         qpk_encoding_name(f.tensors[i].encoding));
        ck_assert_uint_eq(number(t, "group"), f.tensors[i].group_size);
    }
    qpk_close(&f);
    cJSON_Delete(root);
    remove_dir();
}
END_TEST

/* the generation defaults and the pooling the container carries, as the
 * checkpoint's generation_config.json and 1_Pooling/config.json say */
START_TEST(info_shows_generation_defaults_and_pooling)
{
    make_dir();
    gen("ck", "--preset tiny --seed 111");
    static const char cfg[] = "{\"do_sample\": true, \"temperature\": 0.6, \"top_k\": 20, \"top_p\": 0.95, "
                              "\"min_p\": 0.05, \"repetition_penalty\": 1.1, \"eos_token_id\": [7, 3]}";
    spit(path_of("ck/generation_config.json"), cfg, strlen(cfg));
    pack_checkpoint("ck", "gen.qpk", "--quiet");
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("gen.qpk")), 0);
    assert_out_has("generation  sampling temperature 0.6, top-k 20, top-p 0.95, min-p 0.05, repetition penalty 1.1; "
                   "eos 7, 3\n");
    assert_out_has("pooling     none (a generator)\n");
    ck_assert_int_eq(run("%s info %s --json", QP_QPACK, path_of("gen.qpk")), 0);
    cJSON *root = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(root);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "generation_config");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "do_sample")));
    ck_assert(number(g, "temperature") == 0.6 && number(g, "top_k") == 20 && number(g, "top_p") == 0.95 &&
              number(g, "min_p") == 0.05 && number(g, "repetition_penalty") == 1.1);
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(g, "eos_token_id");
    ck_assert(cJSON_GetArraySize(eos) == 2 && cJSON_GetArrayItem(eos, 0)->valueint == 7 &&
              cJSON_GetArrayItem(eos, 1)->valueint == 3);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "pooling")->valuestring, "none");
    cJSON_Delete(root);

    /* greedy: the sampling fields mean nothing; an embedding checkpoint */
    static const char greedy[] = "{\"do_sample\": false, \"eos_token_id\": 5}";
    gen("emb", "--preset tiny --seed 112 --pooling mean");
    spit(path_of("emb/generation_config.json"), greedy, strlen(greedy));
    pack_checkpoint("emb", "emb.qpk", "--quiet");
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("emb.qpk")), 0);
    assert_out_has("generation  greedy (do_sample false); eos 5\n");
    assert_out_has("pooling     mean of the tokens (an embedding model)\n");
    ck_assert_int_eq(run("%s info %s --json", QP_QPACK, path_of("emb.qpk")), 0);
    root = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(root);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "pooling")->valuestring, "mean");
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "generation_config"),
                                                             "do_sample")));
    cJSON_Delete(root);

    /* none of either */
    qp_test_model("bare", "--preset tiny --seed 113", "");
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("bare.qpk")), 0);
    assert_out_has("generation  none (no generation_config.json)\n");
    ck_assert_int_eq(run("%s info %s --json", QP_QPACK, path_of("bare.qpk")), 0);
    root = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(root);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "generation_config")));
    cJSON_Delete(root);
    remove_dir();
}
END_TEST

/* ------------------------------------------------------------------ suite */

static Suite *suite(void)
{
    Suite *s = suite_create("int4_pack");
    TCase *tc = tcase_create("int4_pure");
    tcase_add_loop_test(tc, int4_pure_matches_the_quantiser, 0, (int)(sizeof i4_cases / sizeof *i4_cases));
    tcase_add_test(tc, int4_pack_is_deterministic);
    suite_add_tcase(s, tc);

    tc = tcase_create("packed");
    tcase_add_test(tc, int4_preset_packed_matrices_match_quantiser);
    tcase_add_test(tc, keep_int7_embedding_matches_quantiser_with_half_i6g_error);
    tcase_add_test(tc, expansion_gives_the_kernel_encodings);
    tcase_add_test(tc, packed_values_out_of_range_are_refused);
    suite_add_tcase(s, tc);

    tc = tcase_create("preset");
    tcase_add_test(tc, int4_preset_keeps_lm_head_v_and_outer_down_int8_g64);
    tcase_add_test(tc, int4_preset_on_narrow_model_halves_int8_group);
    tcase_add_test(tc, int4_preset_gives_a_large_vocabulary_seven_bits);
    tcase_add_test(tc, int8_default_group_is_64);
    tcase_add_test(tc, file_bits_per_weight_is_the_sum_over_tensors);
    suite_add_tcase(s, tc);

    tc = tcase_create("keep");
    tcase_add_test(tc, keep_overrides_preset_and_later_rules_win);
    tcase_add_test(tc, keep_int8_in_int4_pure);
    tcase_add_test(tc, keep_pattern_matching_nothing_fails_with_message);
    tcase_add_test(tc, keep_is_rejected_outside_int4_and_when_malformed);
    suite_add_tcase(s, tc);

    tc = tcase_create("quantiser");
    tcase_add_test(tc, search_total_error_is_at_most_rtn);
    suite_add_tcase(s, tc);

    tc = tcase_create("reader");
    tcase_add_test(tc, reader_accepts_rewritten_int4_container);
    tcase_add_loop_test(tc, reader_rejects_each_bad_i4g_edit, 0, (int)(sizeof bad_i4g_edits / sizeof *bad_i4g_edits));
    tcase_add_test(tc, reader_rejects_mixed_i8g_group_sizes_in_int4_container);
    tcase_add_test(tc, reader_checks_packed_encodings);
    suite_add_tcase(s, tc);

    tc = tcase_create("info");
    tcase_add_test(tc, info_shows_format_encodings_and_groups);
    tcase_add_test(tc, info_shows_generation_defaults_and_pooling);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(suite());
}
