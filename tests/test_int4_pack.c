/* test_int4_pack.c - `qpack pack --format int4|int4-pure` and the i4g
 * encoding: every code and parameter decoded from the container bytes by
 * the QPK.md formula against formats/quant.h run on the source values, the
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
#include "qpk_test_util.h"
#include "qpk_write.h"
#include "quant.h"
#include "safetensors.h"

/* A checkpoint every group size divides: hidden 128, MLP 256, q 128, kv 64. */
#define WIDE "--preset tiny --hidden 128 --intermediate 256 --head-dim 32"

/* ----------------------------------------------------------------- helpers */

/* qpack pack test_dir/src -o test_dir/out ARGS; must succeed. */
static void pack_with(const char *src, const char *out, const char *args)
{
    int rc = run("%s pack %s -o %s %s", QP_QPACK, path_of("%s", src), path_of("%s", out), args);
    ck_assert_msg(rc == 0, "qpack pack %s %s failed: %s", src, args, out_text);
}

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

START_TEST(int4_pure_matches_quantiser_search_g32)
{
    make_dir();
    gen("ck", WIDE " --seed 71 --untied");
    pack_with("ck", "out.qpk", "--format int4-pure --quiet");
    check_i4_against_quantiser("ck", "out.qpk", 32, QNT_SEARCH);
    remove_dir();
}
END_TEST

/* --quant rtn is the naive baseline, symmetric absmax; minmax the range one */
START_TEST(int4_pure_matches_quantiser_rtn_g64)
{
    make_dir();
    gen("ck", WIDE " --seed 72");
    pack_with("ck", "out.qpk", "--format int4-pure --group 64 --quant rtn --quiet");
    check_i4_against_quantiser("ck", "out.qpk", 64, QNT_ABSMAX);
    remove_dir();
}
END_TEST

START_TEST(int4_pure_matches_quantiser_minmax_g64)
{
    make_dir();
    gen("ck", WIDE " --seed 72");
    pack_with("ck", "mm.qpk", "--format int4-pure --group 64 --quant minmax --quiet");
    check_i4_against_quantiser("ck", "mm.qpk", 64, QNT_RTN);
    remove_dir();
}
END_TEST

START_TEST(int4_pure_matches_quantiser_on_stress_values_g128)
{
    make_dir();
    gen("ck", WIDE " --seed 73 --stress --untied");
    pack_with("ck", "out.qpk", "--format int4-pure --group 128 --quiet");
    check_i4_against_quantiser("ck", "out.qpk", 128, QNT_SEARCH);
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
    pack_with("ck", "a.qpk", "--format int4 --quiet");
    pack_with("ck", "b.qpk", "--format int4 --quiet");
    setenv("QPACK_THREADS", "1", 1);
    pack_with("ck", "one.qpk", "--format int4 --quiet");
    setenv("QPACK_THREADS", "3", 1);
    pack_with("ck", "three.qpk", "--format int4 --quiet");
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

/* --------------------------------------------------- 2. the int4 preset */

static unsigned encoding_of(const struct qpk_file *f, unsigned role, unsigned layer)
{
    const struct qpk_tensor *t = qpk_tensor_of(f, role, layer);
    ck_assert_ptr_nonnull(t);
    return t->encoding;
}

/* The preset's rule, restated: int8 for an untied lm_head, every v_proj,
 * and down_proj of the first and last eighth of the layers; the embedding
 * is int4 like the rest. */
static bool preset_int8(const struct qpk_tensor *t, uint32_t n_layers)
{
    uint32_t e = n_layers / 8;
    return t->role == QPK_ROLE_LM_HEAD || t->role == QPK_ROLE_V ||
           (t->role == QPK_ROLE_DOWN && (t->layer < e || t->layer >= n_layers - e));
}

START_TEST(int4_preset_keeps_lm_head_v_and_outer_down_int8_g128)
{
    make_dir();
    gen("ck", WIDE " --layers 16 --seed 81 --untied");
    pack_with("ck", "out.qpk", "--format int4");
    struct qpk_file f = open_qpk("out.qpk");
    ck_assert_uint_eq(f.cfg.weight_format, QPK_FORMAT_INT4);
    uint64_t bytes = 0, weights = 0;
    unsigned n8 = 0, lines = 0;
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const struct qpk_tensor *t = &f.tensors[i];
        if (!qpk_role_is_norm(t->role)) {
            bool int8 = preset_int8(t, 16);
            n8 += int8;
            ck_assert_msg(t->encoding == (int8 ? QPK_ENC_I8G : QPK_ENC_I4G), "%s: encoding %s", t->name,
                          qpk_encoding_name(t->encoding));
            ck_assert_uint_eq(t->group_size, int8 ? 128 : 32);
        }
        ck_assert_uint_eq(t->nbytes, expected_nbytes(t));
        bytes += expected_nbytes(t);
        weights += (uint64_t)t->rows * t->cols;
        /* one damage line per tensor */
        char line[128];
        snprintf(line, sizeof line, "qpack:   %s ", t->name);
        lines += strstr(out_text, line) != NULL;
    }
    /* lm_head, the 16 v_proj, down_proj of layers 0, 1, 14, 15 */
    ck_assert_uint_eq(n8, 1 + 16 + 4);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_EMBED, QPK_NO_LAYER), QPK_ENC_I4G);
    ck_assert_uint_eq(lines, f.n_tensors);
    ck_assert_double_eq_tol(printed_bits_per_weight(), 8.0 * (double)bytes / (double)weights, 0.0006);
    assert_out_has("qpack: matrices: 93 i4g (groups of 32), 21 i8g (groups of 128)\n");

    cJSON *prov = provenance(&f);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(prov, "settings");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(prov, "format")->valuestring, "int4");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "preset")->valuestring, "int4");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "matrices")->valuestring, "i4g+i8g");
    ck_assert_int_eq(number(s, "int8_group"), 128);
    ck_assert_int_eq(number(s, "group"), 32);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "keep")), 0);
    cJSON_Delete(prov);
    qpk_close(&f);
    remove_dir();
}
END_TEST

START_TEST(int4_preset_on_narrow_model_halves_int8_group)
{
    make_dir();
    gen("ck", "--preset tiny --seed 82"); /* hidden 64, MLP 192: 128 divides neither */
    pack_with("ck", "out.qpk", "--format int4");
    assert_out_has("i8g (groups of 64: 128 does not divide their columns)");
    struct qpk_file f = open_qpk("out.qpk");
    for (uint32_t i = 0; i < f.n_tensors; i++)
        if (f.tensors[i].encoding == QPK_ENC_I8G)
            ck_assert_uint_eq(f.tensors[i].group_size, 64);
    qpk_close(&f);
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
        pack_with("ck", "out.qpk", packs[k]);
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
    pack_with("ck", "out.qpk",
              "--format int4 --quiet --keep 'model.layers.3.mlp.gate_proj.weight=int8' "
              "--keep 'model.embed_tokens.weight=int8' "
              "--keep 'model.layers.*.self_attn.v_proj.weight=int4' "
              "--keep 'model.layers.2.self_attn.v_proj.weight=int8'");
    struct qpk_file f = open_qpk("out.qpk");
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_GATE, 3), QPK_ENC_I8G);
    ck_assert_uint_eq(qpk_tensor_of(&f, QPK_ROLE_GATE, 3)->group_size, 128);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_GATE, 2), QPK_ENC_I4G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_EMBED, QPK_NO_LAYER), QPK_ENC_I8G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_V, 2), QPK_ENC_I8G);
    for (unsigned l = 0; l < 8; l++)
        if (l != 2)
            ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_V, l), QPK_ENC_I4G);
    /* untouched by the rules: the preset */
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_DOWN, 0), QPK_ENC_I8G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_DOWN, 7), QPK_ENC_I8G);
    ck_assert_uint_eq(encoding_of(&f, QPK_ROLE_DOWN, 1), QPK_ENC_I4G);
    cJSON *prov = provenance(&f);
    const cJSON *keep = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(prov, "settings"), "keep");
    ck_assert_int_eq(cJSON_GetArraySize(keep), 4);
    ck_assert_str_eq(cJSON_GetArrayItem(keep, 3)->valuestring, "model.layers.2.self_attn.v_proj.weight=int8");
    cJSON_Delete(prov);
    qpk_close(&f);
    remove_dir();
}
END_TEST

START_TEST(keep_int8_in_int4_pure)
{
    make_dir();
    gen("ck", WIDE " --seed 92");
    pack_with("ck", "out.qpk", "--format int4-pure --group 64 --quiet --keep 'model.layers.1.mlp.*=int8'");
    struct qpk_file f = open_qpk("out.qpk");
    for (unsigned role = QPK_ROLE_GATE; role <= QPK_ROLE_DOWN; role++) {
        ck_assert_uint_eq(encoding_of(&f, role, 1), QPK_ENC_I8G);
        ck_assert_uint_eq(qpk_tensor_of(&f, role, 1)->group_size, 128);
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
        {"--format int4 --keep 'model.*=int2'", "unknown format 'int2' (int8 or int4)"},
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
    pack_with("ck", "search.qpk", "--format int4 --quiet");
    pack_with("ck", "rtn.qpk", "--format int4 --quant rtn --quiet");
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

static void pack_int4_pure(void)
{
    make_dir();
    gen("ck", "--preset tiny --seed 101");
    pack_with("ck", "good.qpk", "--format int4-pure --quiet");
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

START_TEST(reader_rejects_i4g_group_size_not_a_power_of_two_in_range)
{
    pack_int4_pure();
    rewrite("good.qpk", "g48.qpk", group_48);
    expect_rejected("g48.qpk", "self_attn.q_proj.weight: i4g group size 48 is not a power of two in 16..256");
    rewrite("good.qpk", "g8.qpk", group_8);
    expect_rejected("g8.qpk", "i4g group size 8 is not a power of two in 16..256");
    remove_dir();
}
END_TEST

START_TEST(reader_rejects_i4g_bad_row_stride)
{
    pack_int4_pure();
    rewrite("good.qpk", "stride.qpk", stride_plus_16);
    expect_rejected("stride.qpk", "self_attn.k_proj.weight: i4g [32, 64] with groups of 32 needs 4-row blocks of "
                                  "160 bytes (has rows_per_block 4, row_stride 176)");
    remove_dir();
}
END_TEST

START_TEST(reader_rejects_mixed_i4g_group_sizes)
{
    pack_int4_pure();
    rewrite("good.qpk", "mixed.qpk", mixed_i4_groups);
    expect_rejected("mixed.qpk", "mlp.up_proj.weight: i4g group size 64 differs from the 32 of");
    remove_dir();
}
END_TEST

START_TEST(reader_rejects_mixed_i8g_group_sizes_in_int4_container)
{
    make_dir();
    gen("ck", "--preset tiny --seed 102");
    pack_with("ck", "good.qpk", "--format int4 --quiet --keep 'model.layers.*.self_attn.v_proj.weight=int8'");
    rewrite("good.qpk", "mixed.qpk", mixed_i8_groups);
    expect_rejected("mixed.qpk", "i8g group size 64 differs from the 32 of");
    remove_dir();
}
END_TEST

START_TEST(reader_rejects_i4g_scale_exp_out_of_range)
{
    pack_int4_pure();
    rewrite("good.qpk", "e.qpk", scale_exp_181);
    expect_rejected("e.qpk", "self_attn.o_proj.weight: i4g scale_exp 181 outside -128..180");
    remove_dir();
}
END_TEST

START_TEST(reader_rejects_i4g_outside_int4_containers)
{
    pack_int4_pure();
    rewrite("good.qpk", "int8.qpk", int8_container);
    expect_rejected("int8.qpk", "encoding i4g is not allowed for role embed in int8 containers");
    rewrite("good.qpk", "q24.qpk", q24_container);
    expect_rejected("q24.qpk", "encoding i4g is not allowed for role embed in q24 containers");
    remove_dir();
}
END_TEST

/* ---------------------------------------------------- 6. qpack info */

START_TEST(info_shows_format_encodings_and_groups)
{
    make_dir();
    gen("ck", "--preset tiny --seed 111");
    pack_with("ck", "out.qpk", "--format int4 --quiet");
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("out.qpk")), 0);
    assert_out_has("encodings   int4: 9 i32s, 2 i8g g64, 13 i4g g32");
    ck_assert_int_eq(run("%s info %s --json", QP_QPACK, path_of("out.qpk")), 0);
    cJSON *root = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(root);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(root, "weight_format")->valuestring, "int4");
    struct qpk_file f = open_qpk("out.qpk");
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

/* ------------------------------------------------------------------ suite */

static Suite *suite(void)
{
    Suite *s = suite_create("int4_pack");
    TCase *tc = tcase_create("int4_pure");
    tcase_add_test(tc, int4_pure_matches_quantiser_search_g32);
    tcase_add_test(tc, int4_pure_matches_quantiser_rtn_g64);
    tcase_add_test(tc, int4_pure_matches_quantiser_minmax_g64);
    tcase_add_test(tc, int4_pure_matches_quantiser_on_stress_values_g128);
    tcase_add_test(tc, int4_pack_is_deterministic);
    suite_add_tcase(s, tc);

    tc = tcase_create("preset");
    tcase_add_test(tc, int4_preset_keeps_lm_head_v_and_outer_down_int8_g128);
    tcase_add_test(tc, int4_preset_on_narrow_model_halves_int8_group);
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
    tcase_add_test(tc, reader_rejects_i4g_group_size_not_a_power_of_two_in_range);
    tcase_add_test(tc, reader_rejects_i4g_bad_row_stride);
    tcase_add_test(tc, reader_rejects_mixed_i4g_group_sizes);
    tcase_add_test(tc, reader_rejects_mixed_i8g_group_sizes_in_int4_container);
    tcase_add_test(tc, reader_rejects_i4g_scale_exp_out_of_range);
    tcase_add_test(tc, reader_rejects_i4g_outside_int4_containers);
    suite_add_tcase(s, tc);

    tc = tcase_create("info");
    tcase_add_test(tc, info_shows_format_encodings_and_groups);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
