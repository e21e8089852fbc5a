/* test_calibrate.c - what `qpack pack --calibrate` collects and what it
 * changes: the float64 reference's per-column input statistics against an
 * independent computation from the checkpoint's tensors, calib_run's
 * means and role mapping, and the quantiser's choice moving with the
 * calibrated weights on a crafted group. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"
#include "qpk.h"
#include "quant.h"
#include "ref.h"
#include "safetensors.h"
#include "tokenizer.h"
#include "qp_test.h"

#define MODEL QP_SOURCE_DIR "/tests/data/tiny-learned/model"

static struct st_model st;
static uint32_t hidden, kv_dim, n_heads, n_kv, head_dim;

static void setup(void)
{
    qp_err err = {{0}};
    ck_assert_msg(st_open_dir(&st, MODEL, &err) == 0, "%s", err.msg);
    const struct st_tensor *v = st_find(&st, "model.layers.0.self_attn.v_proj.weight");
    const struct st_tensor *q = st_find(&st, "model.layers.0.self_attn.q_proj.weight");
    const struct st_tensor *kn = st_find(&st, "model.layers.0.self_attn.k_norm.weight");
    ck_assert(v && q && kn);
    hidden = (uint32_t)v->shape[1];
    kv_dim = (uint32_t)v->shape[0];
    head_dim = (uint32_t)kn->shape[0];
    n_kv = kv_dim / head_dim;
    n_heads = (uint32_t)q->shape[0] / head_dim;
}

static void teardown(void) { st_close(&st); }

static double get(const char *name, uint64_t i)
{
    const struct st_tensor *t = st_find(&st, name);
    ck_assert_msg(t != NULL, "no %s", name);
    return st_get_f32(t, i);
}

/* layer 0's attention input for a token, from the tensors: RMSNorm of the
 * embedding row times the gain */
static void attn_input(uint32_t token, double *xn)
{
    double ss = 0;
    for (uint32_t i = 0; i < hidden; i++) {
        xn[i] = get("model.embed_tokens.weight", (uint64_t)token * hidden + i);
        ss += xn[i] * xn[i];
    }
    double inv = 1 / sqrt(ss / hidden + 1e-6);
    for (uint32_t i = 0; i < hidden; i++)
        xn[i] *= inv * get("model.layers.0.input_layernorm.weight", i);
}

static void near(double got, double want, const char *what, uint32_t i)
{
    ck_assert_msg(fabs(got - want) <= 1e-9 * fmax(1, fabs(want)), "%s[%u]: %.12g, expected %.12g", what, i, got,
                  want);
}

/* Positions 0 and 1: q/k/v's input is the normed embedding at both; at
 * position 0 attention reads one position, so o_proj's input is that
 * token's V (each query head its KV head's). */
START_TEST(ref_inputs_match_tensors)
{
    qp_err err = {{0}};
    struct ref_model *m;
    ck_assert_msg(ref_open(&m, MODEL, 8, &err) == 0, "%s", err.msg);
    ck_assert(ref_input_sumsq(m, REF_IN_ATTN, 0, &(uint64_t){0}) == NULL);
    ck_assert_msg(ref_collect_inputs(m, &err) == 0, "%s", err.msg);
    uint32_t tokens[2] = {17, 1234};
    ck_assert_msg(ref_forward(m, tokens[0], 0, NULL, &err) == 0, "%s", err.msg);
    uint64_t count;
    const double *o = ref_input_sumsq(m, REF_IN_O, 0, &count);
    ck_assert(o && count == 1);
    double *xn = calloc(hidden, sizeof *xn), *xn1 = calloc(hidden, sizeof *xn1);
    attn_input(tokens[0], xn);
    for (uint32_t h = 0; h < n_heads; h++)
        for (uint32_t i = 0; i < head_dim; i++) {
            uint32_t row = (h / (n_heads / n_kv)) * head_dim + i;
            double v = 0;
            for (uint32_t c = 0; c < hidden; c++)
                v += get("model.layers.0.self_attn.v_proj.weight", (uint64_t)row * hidden + c) * xn[c];
            near(o[h * head_dim + i], v * v, "o_proj input", h * head_dim + i);
        }
    ck_assert_msg(ref_forward(m, tokens[1], 1, NULL, &err) == 0, "%s", err.msg);
    const double *a = ref_input_sumsq(m, REF_IN_ATTN, 0, &count);
    ck_assert(a && count == 2);
    attn_input(tokens[1], xn1);
    for (uint32_t i = 0; i < hidden; i++)
        near(a[i], xn[i] * xn[i] + xn1[i] * xn1[i], "attention input", i);
    /* every input of every layer was collected, and nothing past them */
    ck_assert(ref_input_sumsq(m, REF_IN_DOWN, ref_config(m)->num_hidden_layers - 1, &count) != NULL);
    ck_assert(ref_input_sumsq(m, REF_IN_DOWN, ref_config(m)->num_hidden_layers, &count) == NULL);
    ck_assert(ref_input_sumsq(m, REF_IN_HEAD, 0, &count) != NULL);
    ck_assert(ref_input_sumsq(m, REF_IN_HEAD, 1, &count) == NULL);
    free(xn);
    free(xn1);
    ref_close(m);
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

static char *read_tokenizer(size_t *len)
{
    FILE *f = fopen(MODEL "/tokenizer.json", "rb");
    ck_assert(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    char *buf = malloc(*len);
    ck_assert(buf && fread(buf, 1, *len, f) == *len);
    fclose(f);
    return buf;
}

/* calib_run: the means over the first N tokens, one window, each role's
 * matrix reading its own input; the embedding and lm_head the final one */
/* a calib_progress_fn that checks it is told of each position in order */
struct progress_seen {
    uint64_t calls, last, total;
};
static void see_progress(void *arg, uint64_t done, uint64_t total)
{
    struct progress_seen *s = arg;
    ck_assert_uint_eq(done, s->last + 1);
    s->calls++;
    s->last = done;
    s->total = total;
}

START_TEST(calib_run_means_and_roles)
{
    char dir[] = "/tmp/qp-calib-XXXXXX", path[64];
    ck_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.txt", dir);
    write_file(path, "The package maintainer uploads the source package to the archive.");
    /* (its tokens, read below, are many more than the 3 run) */
    size_t tok_len;
    char *tok = read_tokenizer(&tok_len);
    struct calib c;
    qp_err err = {{0}};
    struct progress_seen seen = {0};
    ck_assert_msg(calib_run(&c, MODEL, tok, tok_len, path, 3, see_progress, &seen, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.tokens, 3);
    ck_assert_uint_eq(seen.calls, 3);
    ck_assert_uint_eq(seen.total, 3);
    ck_assert_uint_eq(c.windows, 1);
    ck_assert_uint_eq(c.window, 256);
    ck_assert_uint_eq(c.text_bytes, strlen("The package maintainer uploads the source package to the archive."));
    /* the same three tokens through the reference, summed by hand */
    struct ref_model *m;
    ck_assert(ref_open(&m, MODEL, 8, &err) == 0 && ref_collect_inputs(m, &err) == 0);
    qp_tok *t;
    qp_tok_ids ids = {0};
    const char *text = "The package maintainer uploads the source package to the archive.";
    ck_assert(qp_tok_load_buffer(&t, tok, tok_len, "tokenizer.json", &err) == 0);
    ck_assert(qp_tok_encode(t, text, strlen(text), &ids, &err) == 0 && ids.len > 3);
    for (uint32_t i = 0; i < 3; i++)
        ck_assert(ref_forward(m, (uint32_t)ids.v[i], i, NULL, &err) == 0);
    static const struct { unsigned role; enum ref_input in; } map[] = {
        {QPK_ROLE_Q, REF_IN_ATTN}, {QPK_ROLE_O, REF_IN_O}, {QPK_ROLE_UP, REF_IN_MLP}, {QPK_ROLE_DOWN, REF_IN_DOWN}};
    uint64_t count;
    for (unsigned k = 0; k < 4; k++)
        for (uint32_t l = 0; l < c.n_layers; l++) {
            const double *sum = ref_input_sumsq(m, map[k].in, l, &count), *mean = calib_mean_sq(&c, map[k].role, l);
            ck_assert(sum && mean && count == 3);
            for (uint32_t j = 0; j < c.widths[map[k].in]; j++)
                near(mean[j], sum[j] / 3, "mean square", j);
        }
    const double *head = ref_input_sumsq(m, REF_IN_HEAD, 0, &count);
    for (uint32_t j = 0; j < hidden; j++)
        near(calib_mean_sq(&c, QPK_ROLE_LM_HEAD, QPK_NO_LAYER)[j], head[j] / 3, "head mean square", j);
    qp_tok_free(t);
    qp_tok_ids_free(&ids);
    ck_assert(calib_mean_sq(&c, QPK_ROLE_Q, 1) == calib_mean_sq(&c, QPK_ROLE_V, 1));
    ck_assert(calib_mean_sq(&c, QPK_ROLE_GATE, 1) == calib_mean_sq(&c, QPK_ROLE_UP, 1));
    ck_assert(calib_mean_sq(&c, QPK_ROLE_EMBED, QPK_NO_LAYER) == calib_mean_sq(&c, QPK_ROLE_LM_HEAD, QPK_NO_LAYER));
    ck_assert(calib_mean_sq(&c, QPK_ROLE_ATTN_NORM, 0) == NULL);
    ck_assert(calib_mean_sq(&c, QPK_ROLE_DOWN, c.n_layers) == NULL);
    free(tok);
    ref_close(m);
    calib_free(&c);
    /* a text of one token is refused */
    write_file(path, "a");
    tok = read_tokenizer(&tok_len);
    ck_assert(calib_run(&c, MODEL, tok, tok_len, path, 100, NULL, NULL, &err) != 0);
    ck_assert_msg(strstr(err.msg, "calibration needs at least 2"), "%s", err.msg);
    free(tok);
    remove(path);
    rmdir(dir);
}
END_TEST

/* The crafted case: one column of a group carries 1000x the mean square of
 * the others (an outlier input channel). Calibrated, the searched INT4
 * group puts that column's value (nearly) on the grid, and the error the
 * model sees, weighted by the mean squares, falls well below the
 * unweighted choice's. */
START_TEST(calibration_moves_the_choice)
{
    enum { N = 32 };
    float x[N], w[N];
    uint32_t s = 12345;
    for (int j = 0; j < N; j++) {
        s = s * 1103515245u + 12345u;
        x[j] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.04f;
        w[j] = 1.0f;
    }
    x[5] = 0.00731f;  /* between grid points of the uniform fit */
    w[5] = 1000.0f;
    int E = qnt_tensor_exponent(0.02);
    uint8_t q0[N], q1[N];
    uint16_t d0, m0, d1, m1;
    qnt_i4_group(x, NULL, N, E, QNT_SEARCH, q0, &d0, &m0);
    qnt_i4_group(x, w, N, E, QNT_SEARCH, q1, &d1, &m1);
    double e0 = 0, e1 = 0;
    for (int j = 0; j < N; j++) {
        double r0 = x[j] - qnt_i4_value(q0[j], d0, m0, E), r1 = x[j] - qnt_i4_value(q1[j], d1, m1, E);
        e0 += w[j] * r0 * r0;
        e1 += w[j] * r1 * r1;
    }
    double c0 = fabs(x[5] - qnt_i4_value(q0[5], d0, m0, E)), c1 = fabs(x[5] - qnt_i4_value(q1[5], d1, m1, E));
    printf("outlier column error %.3g -> %.3g, weighted error %.3g -> %.3g\n", c0, c1, e0, e1);
    ck_assert(d0 != d1 || m0 != m1);
    ck_assert_msg(c1 < c0 / 4, "outlier column error %.3g -> %.3g", c0, c1);
    ck_assert_msg(e1 < e0 / 2, "weighted error %.3g -> %.3g", e0, e1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("calibrate");
    TCase *tc = tcase_create("calibrate");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ref_inputs_match_tensors);
    tcase_add_test(tc, calib_run_means_and_roles);
    tcase_add_test(tc, calibration_moves_the_choice);
    suite_add_tcase(s, tc);
    return qp_test_main(s);
}
