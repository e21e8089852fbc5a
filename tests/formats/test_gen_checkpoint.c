/* test_gen_checkpoint.c - qp-gen-checkpoint, run as a program: the files it
 * writes are read back with the library's own reader. */
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bf16.h"
#include "hf_config.h"
#include "safetensors.h"
#include "qp_test.h"

/* ----------------------------------------------------------------- helpers */

/* Runs the generator into test_dir/out; returns its exit status. Its stdout
 * and stderr land in test_dir/stdout and test_dir/stderr. */
static int generate(const char *out, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s %s >%s/stdout 2>%s/stderr", QP_GEN_CHECKPOINT,
             path_of("%s", out), args, test_dir, test_dir);
    int status = system(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *data = slurp(from, &n);
    FILE *f = fopen(to, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", to);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    free(data);
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static int temp_files_in(const char *sub)
{
    int n = 0;
    DIR *d = opendir(path_of("%s", sub));
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp-") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void open_model(struct st_model *m, const char *sub)
{
    qp_err err = { "" };
    ck_assert_msg(st_open_dir(m, path_of("%s", sub), &err) == 0, "%s", err.msg);
}

static const struct st_tensor *tensor(const struct st_model *m, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    const struct st_tensor *t = st_find(m, name);
    ck_assert_msg(t != NULL, "tensor %s is missing", name);
    return t;
}

static void ck_assert_shape(const struct st_tensor *t, uint64_t rows, uint64_t cols)
{
    ck_assert_msg(cols ? t->ndim == 2 : t->ndim == 1, "%s has %u dims", t->name, t->ndim);
    ck_assert_msg(t->shape[0] == rows, "%s: %llu rows", t->name, (unsigned long long)t->shape[0]);
    if (cols)
        ck_assert_msg(t->shape[1] == cols, "%s: %llu cols", t->name,
                      (unsigned long long)t->shape[1]);
}

/* Root mean square of the values t[first + k * stride], k < n. */
static double rms(const struct st_tensor *t, uint64_t first, uint64_t stride, uint64_t n)
{
    double sum = 0;
    for (uint64_t k = 0; k < n; k++) {
        double v = st_get_f32(t, first + k * stride);
        sum += v * v;
    }
    return sqrt(sum / (double)n);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Channels whose row (or column) RMS is more than 10x the median, in order;
 * the ratio of each to the median goes to ratio. */
static int loud_channels(const struct st_tensor *t, int by_column, uint32_t *out, double *ratio)
{
    uint64_t rows = t->shape[0], cols = t->shape[1];
    uint64_t n = by_column ? cols : rows;
    double *r = malloc(n * sizeof(*r)), *sorted = malloc(n * sizeof(*r));
    for (uint64_t c = 0; c < n; c++)
        r[c] = by_column ? rms(t, c, cols, rows) : rms(t, c * cols, 1, cols);
    memcpy(sorted, r, n * sizeof(*r));
    qsort(sorted, n, sizeof(*sorted), cmp_double);
    double median = sorted[n / 2];
    int k = 0;
    for (uint64_t c = 0; c < n; c++)
        if (r[c] > 10 * median && k < 16) {
            ratio[k] = r[c] / median;
            out[k++] = (uint32_t)c;
        }
    free(r);
    free(sorted);
    return k;
}

/* ------------------------------------------------------------------- tests */

START_TEST(tiny_checkpoint_has_the_qwen3_names_and_shapes)
{
    ck_assert_int_eq(generate("m", "--preset tiny"), 0);
    struct st_model m;
    open_model(&m, "m");
    uint32_t layers = 2, hidden = 64, inter = 192, hd = 16, q = 4 * 16, kv = 2 * 16, vocab = 512;
    ck_assert_uint_eq(m.n_tensors, 3 + 11 * layers);
    ck_assert_shape(tensor(&m, "model.embed_tokens.weight"), vocab, hidden);
    ck_assert_shape(tensor(&m, "model.norm.weight"), hidden, 0);
    ck_assert_shape(tensor(&m, "lm_head.weight"), vocab, hidden);
    for (uint32_t l = 0; l < layers; l++) {
        ck_assert_shape(tensor(&m, "model.layers.%u.input_layernorm.weight", l), hidden, 0);
        ck_assert_shape(tensor(&m, "model.layers.%u.self_attn.q_proj.weight", l), q, hidden);
        ck_assert_shape(tensor(&m, "model.layers.%u.self_attn.k_proj.weight", l), kv, hidden);
        ck_assert_shape(tensor(&m, "model.layers.%u.self_attn.v_proj.weight", l), kv, hidden);
        ck_assert_shape(tensor(&m, "model.layers.%u.self_attn.o_proj.weight", l), hidden, q);
        ck_assert_shape(tensor(&m, "model.layers.%u.self_attn.q_norm.weight", l), hd, 0);
        ck_assert_shape(tensor(&m, "model.layers.%u.self_attn.k_norm.weight", l), hd, 0);
        ck_assert_shape(tensor(&m, "model.layers.%u.post_attention_layernorm.weight", l), hidden, 0);
        ck_assert_shape(tensor(&m, "model.layers.%u.mlp.gate_proj.weight", l), inter, hidden);
        ck_assert_shape(tensor(&m, "model.layers.%u.mlp.up_proj.weight", l), inter, hidden);
        ck_assert_shape(tensor(&m, "model.layers.%u.mlp.down_proj.weight", l), hidden, inter);
    }
    for (uint32_t i = 0; i < m.n_tensors; i++)
        ck_assert_int_eq(m.tensors[i].dtype, ST_BF16);
    st_close(&m);

    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_msg(hf_config_load(path_of("m/config.json"), &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.hidden_size, hidden);
    ck_assert_uint_eq(c.intermediate_size, inter);
    ck_assert_uint_eq(c.num_hidden_layers, layers);
    ck_assert_uint_eq(c.num_attention_heads, 4);
    ck_assert_uint_eq(c.num_key_value_heads, 2);
    ck_assert_uint_eq(c.head_dim, hd);
    ck_assert_uint_eq(c.vocab_size, vocab);
    ck_assert_uint_eq(c.max_position_embeddings, 2048);
    ck_assert(c.rope_theta == 1e6 && c.rms_norm_eps == 1e-6 && c.tie_word_embeddings);
    char *out = slurp(path_of("stdout"), NULL);
    ck_assert_msg(strstr(out, "qp-gen-checkpoint: wrote ") == out && strchr(out, '\n') ==
                  out + strlen(out) - 1, "summary is not one line: %s", out);
    free(out);
}
END_TEST

START_TEST(flags_override_the_preset_wherever_they_are)
{
    ck_assert_int_eq(generate("m", "--layers 1 --preset 0.6b --vocab 1000 --max-pos 4096"), 0);
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_msg(hf_config_load(path_of("m/config.json"), &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.hidden_size, 1024);
    ck_assert_uint_eq(c.intermediate_size, 3072);
    ck_assert_uint_eq(c.num_hidden_layers, 1);
    ck_assert_uint_eq(c.num_attention_heads, 16);
    ck_assert_uint_eq(c.num_key_value_heads, 8);
    ck_assert_uint_eq(c.head_dim, 128);
    ck_assert_uint_eq(c.vocab_size, 1000);
    ck_assert_uint_eq(c.max_position_embeddings, 4096);
    ck_assert_int_eq(c.bos_token_id, -1);                     /* 151643 is not below 1000 */
    struct st_model m;
    open_model(&m, "m");
    ck_assert_shape(tensor(&m, "model.layers.0.self_attn.q_proj.weight"), 2048, 1024);
    ck_assert_shape(tensor(&m, "model.layers.0.self_attn.k_proj.weight"), 1024, 1024);
    st_close(&m);
}
END_TEST

/* The published Qwen3-4B, -8B, -14B and -32B configs, shrunk to one layer
 * (two for 32B, whose 17 shards need more tensors than one layer has), a
 * 512-token vocabulary and a 64-wide MLP so the test stays small: the
 * heads, head size, tying, positions, RoPE and the shard count as published. */
START_TEST(big_presets_have_the_published_config_and_shards)
{
    static const struct { const char *name; uint32_t hidden, heads, shards, layers; bool tied; } want[] = {
        { "4b", 2560, 32, 3, 1, true }, { "8b", 4096, 32, 5, 1, false }, { "14b", 5120, 40, 8, 1, false },
        { "32b", 5120, 64, 17, 2, false },
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char args[128], sub[16], shard[64];
        snprintf(sub, sizeof sub, "m%s", want[i].name);
        snprintf(args, sizeof args, "--preset %s --layers %u --vocab 512 --intermediate 64", want[i].name,
                 want[i].layers);
        ck_assert_int_eq(generate(sub, args), 0);
        struct qwen3_config c;
        qp_err err = { "" };
        ck_assert_msg(hf_config_load(path_of("%s/config.json", sub), &c, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(c.hidden_size, want[i].hidden);
        ck_assert_uint_eq(c.num_attention_heads, want[i].heads);
        ck_assert_uint_eq(c.num_key_value_heads, 8);
        ck_assert_uint_eq(c.head_dim, 128);
        ck_assert_uint_eq(c.max_position_embeddings, 40960);
        ck_assert(c.rope_theta == 1e6 && c.rms_norm_eps == 1e-6);
        ck_assert(c.tie_word_embeddings == want[i].tied);
        snprintf(shard, sizeof shard, "%s/model-%05u-of-%05u.safetensors", sub, want[i].shards, want[i].shards);
        ck_assert_msg(exists(path_of("%s", shard)), "%s missing", shard);
        ck_assert(exists(path_of("%s/model.safetensors.index.json", sub)));
        struct st_model m;
        open_model(&m, sub);
        ck_assert_shape(tensor(&m, "model.layers.0.self_attn.q_proj.weight"), want[i].heads * 128, want[i].hidden);
        ck_assert_uint_eq(m.n_files, want[i].shards);
        ck_assert((st_find(&m, "lm_head.weight") != NULL));
        st_close(&m);
    }
    /* --shards still decides */
    ck_assert_int_eq(generate("one", "--preset 8b --layers 1 --vocab 512 --intermediate 64 --shards 1"), 0);
    ck_assert(exists(path_of("one/model.safetensors")));
}
END_TEST

START_TEST(same_arguments_give_byte_identical_files)
{
    ck_assert_int_eq(generate("a", "--seed 7 --stress --shards 3"), 0);
    ck_assert_int_eq(generate("b", "--stress --shards 3 --seed 7"), 0);
    ck_assert_int_eq(generate("c", "--stress --shards 3 --seed 8"), 0);
    const char *files[] = { "config.json", "model.safetensors.index.json",
                            "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors" };
    for (int i = 0; i < 5; i++)
        ck_assert_msg(same_file(path_of("a/%s", files[i]), path_of("b/%s", files[i])),
                      "%s differs between identical runs", files[i]);
    ck_assert(!same_file(path_of("a/%s", files[2]), path_of("c/%s", files[2])));
}
END_TEST

START_TEST(tied_lm_head_is_byte_identical_to_the_embedding)
{
    ck_assert_int_eq(generate("m", "--stress"), 0);
    struct st_model m;
    open_model(&m, "m");
    const struct st_tensor *e = tensor(&m, "model.embed_tokens.weight");
    const struct st_tensor *h = tensor(&m, "lm_head.weight");
    ck_assert_uint_eq(e->nbytes, h->nbytes);
    ck_assert_int_eq(memcmp(e->data, h->data, e->nbytes), 0);
    st_close(&m);
}
END_TEST

START_TEST(untied_lm_head_is_drawn_independently)
{
    ck_assert_int_eq(generate("m", "--untied"), 0);
    struct st_model m;
    open_model(&m, "m");
    const struct st_tensor *e = tensor(&m, "model.embed_tokens.weight");
    const struct st_tensor *h = tensor(&m, "lm_head.weight");
    ck_assert_uint_eq(e->nbytes, h->nbytes);
    uint64_t same = 0;
    for (uint64_t i = 0; i < e->numel; i++)
        same += st_get_f32(e, i) == st_get_f32(h, i);
    ck_assert_uint_lt(same, e->numel / 20);                   /* chance bf16 collisions only */
    st_close(&m);
    struct qwen3_config c;
    qp_err err = { "" };
    ck_assert_int_eq(hf_config_load(path_of("m/config.json"), &c, &err), 0);
    ck_assert(!c.tie_word_embeddings);
}
END_TEST

START_TEST(values_are_normal_with_the_requested_scale)
{
    ck_assert_int_eq(generate("m", "--hidden 256 --heads 4 --head-dim 64 --vocab 2048"), 0);
    struct st_model m;
    open_model(&m, "m");
    const struct st_tensor *e = tensor(&m, "model.embed_tokens.weight");
    double sum = 0, sum2 = 0, sum4 = 0;
    uint64_t within1 = 0, within2 = 0, n = e->numel;
    for (uint64_t i = 0; i < n; i++) {
        double z = st_get_f32(e, i) / 0.02;
        sum += z, sum2 += z * z, sum4 += z * z * z * z;
        within1 += fabs(z) < 1;
        within2 += fabs(z) < 2;
    }
    double mean = sum / n, var = sum2 / n;
    ck_assert_msg(fabs(mean) < 0.01, "mean %g", mean);
    ck_assert_msg(fabs(sqrt(var) - 1) < 0.01, "std %g x 0.02", sqrt(var));
    ck_assert_msg(fabs(sum4 / n / (var * var) - 3) < 0.1, "kurtosis %g", sum4 / n / (var * var));
    ck_assert_msg(fabs((double)within1 / n - 0.6827) < 0.01, "P(|z|<1) %g", (double)within1 / n);
    ck_assert_msg(fabs((double)within2 / n - 0.9545) < 0.005, "P(|z|<2) %g", (double)within2 / n);
    const struct st_tensor *norm = tensor(&m, "model.layers.0.input_layernorm.weight");
    double nsum = 0, nsum2 = 0;
    for (uint64_t i = 0; i < norm->numel; i++) {
        double v = st_get_f32(norm, i);
        nsum += v, nsum2 += v * v;
    }
    double nmean = nsum / norm->numel, nstd = sqrt(nsum2 / norm->numel - nmean * nmean);
    ck_assert_msg(fabs(nmean - 1) < 0.03 && fabs(nstd - 0.1) < 0.03, "norm %g +- %g", nmean, nstd);
    st_close(&m);
}
END_TEST

/* sqrt(mean of squares) of a tensor's values */
static double rms_of(const struct st_tensor *t)
{
    double sum2 = 0;
    for (uint64_t i = 0; i < t->numel; i++)
        sum2 += st_get_f32(t, i) * st_get_f32(t, i);
    return sqrt(sum2 / (double)t->numel);
}

/* --init fan-in: std 0.02 * sqrt(1024 / input width), so q_proj (input
 * 256) gets 0.04 and down_proj (input 768) 0.02 * sqrt(4/3). */
START_TEST(fan_in_init_scales_each_matrix_by_its_input_width)
{
    ck_assert_int_eq(generate("m", "--hidden 256 --intermediate 768 --heads 4 --head-dim 64 "
                              "--vocab 2048 --init fan-in"), 0);
    struct st_model m;
    open_model(&m, "m");
    double q = rms_of(tensor(&m, "model.layers.0.self_attn.q_proj.weight"));
    double down = rms_of(tensor(&m, "model.layers.0.mlp.down_proj.weight"));
    ck_assert_msg(fabs(q / 0.04 - 1) < 0.02, "q_proj std %g, want 0.04", q);
    ck_assert_msg(fabs(down / (0.02 * sqrt(1024.0 / 768)) - 1) < 0.02, "down_proj std %g", down);
    double norm = rms_of(tensor(&m, "model.layers.0.input_layernorm.weight"));
    ck_assert_msg(fabs(norm - 1) < 0.05, "norms keep 1 + N(0, 0.1): rms %g", norm);
    st_close(&m);
    char *out = slurp(path_of("stdout"), NULL);
    ck_assert_msg(strstr(out, ", fan-in init") != NULL, "summary: %s", out);
    free(out);
}
END_TEST

/* The massive channels the last run printed, in increasing order. */
static void printed_massive_channels(uint32_t ch[4])
{
    char *out = slurp(path_of("stdout"), NULL);
    const char *at = strstr(out, "massive channels ");
    ck_assert_msg(at != NULL, "no massive channels in: %s", out);
    ck_assert_int_eq(sscanf(at, "massive channels %u %u %u %u", &ch[0], &ch[1], &ch[2], &ch[3]), 4);
    free(out);
    qsort(ch, 4, sizeof(ch[0]), cmp_u32);
}

START_TEST(stress_adds_four_massive_channels)
{
    ck_assert_int_eq(generate("m", "--stress --seed 3 --hidden 128 --vocab 1024"), 0);
    uint32_t printed[4];
    printed_massive_channels(printed);
    struct st_model m;
    open_model(&m, "m");
    const char *names[] = { "model.embed_tokens.weight", "model.layers.0.self_attn.o_proj.weight",
                            "model.layers.1.mlp.down_proj.weight" };
    for (int k = 0; k < 3; k++) {
        uint32_t ch[16];
        double ratio[16];
        int n = loud_channels(tensor(&m, "%s", names[k]), k == 0, ch, ratio);
        ck_assert_msg(n == 4, "%s has %d loud channels", names[k], n);
        for (int i = 0; i < 4; i++) {
            ck_assert_uint_eq(ch[i], printed[i]);
            ck_assert_msg(ratio[i] > 32 && ratio[i] < 48, "%s channel %u is %gx the median RMS",
                          names[k], ch[i], ratio[i]);
        }
    }
    uint32_t ch[16];
    double ratio[16];
    ck_assert_int_eq(loud_channels(tensor(&m, "model.layers.0.mlp.up_proj.weight"), 0, ch, ratio), 0);
    st_close(&m);
}
END_TEST

static int is_massive(const uint32_t ch[4], uint64_t c)
{
    return c == ch[0] || c == ch[1] || c == ch[2] || c == ch[3];
}

START_TEST(stress_gives_every_norm_large_entries)
{
    ck_assert_int_eq(generate("m", "--stress --hidden 256 --head-dim 128 --heads 2 --kv-heads 1"), 0);
    uint32_t ch[4];
    printed_massive_channels(ch);
    struct st_model m;
    open_model(&m, "m");
    int norms = 0;
    for (uint32_t i = 0; i < m.n_tensors; i++) {
        const struct st_tensor *t = &m.tensors[i];
        if (t->ndim != 1)
            continue;
        norms++;
        int final = strcmp(t->name, "model.norm.weight") == 0;
        int over_hidden = strstr(t->name, "_norm.") == NULL;  /* not q_norm / k_norm */
        uint64_t want = t->numel / 32 > 2 ? t->numel / 32 : 2, big = 0, n_rest = 0;
        double rest = 0;
        for (uint64_t k = 0; k < t->numel; k++) {
            float v = st_get_f32(t, k);
            if (over_hidden && is_massive(ch, k)) {
                /* no large scale on a massive channel; the final norm damps them */
                ck_assert_msg(final ? v > 0.1f && v < 0.4f : v > 0 && v < 2, "%s[%llu] = %g",
                              t->name, (unsigned long long)k, v);
            } else if (v >= 128 && v <= 400) {
                big++;
            } else {
                ck_assert_msg(v > 0 && v < (final ? 8 * 2 : 2), "%s[%llu] = %g", t->name,
                              (unsigned long long)k, v);
                rest += v, n_rest++;
            }
        }
        ck_assert_msg(big == want, "%s has %llu entries in [128, 400], not %llu", t->name,
                      (unsigned long long)big, (unsigned long long)want);
        rest /= (double)n_rest;
        ck_assert_msg(fabs(rest - (final ? 8 : 1)) < (final ? 0.3 : 0.04), "%s mean %g",
                      t->name, rest);
    }
    ck_assert_int_eq(norms, 2 * 4 + 1);
    st_close(&m);
}
END_TEST

START_TEST(sharded_and_single_hold_identical_tensors)
{
    ck_assert_int_eq(generate("one", "--seed 5 --stress"), 0);
    ck_assert_int_eq(generate("many", "--seed 5 --stress --shards 4"), 0);
    ck_assert(!exists(path_of("one/model.safetensors.index.json")));
    ck_assert(!exists(path_of("many/model.safetensors")));
    struct st_model a, b;
    open_model(&a, "one");
    open_model(&b, "many");
    ck_assert_uint_eq(b.n_files, 4);
    ck_assert_uint_eq(a.n_tensors, b.n_tensors);
    uint64_t total = 0;
    for (uint32_t i = 0; i < a.n_tensors; i++) {
        ck_assert_str_eq(a.tensors[i].name, b.tensors[i].name);
        ck_assert_uint_eq(a.tensors[i].nbytes, b.tensors[i].nbytes);
        ck_assert_int_eq(memcmp(a.tensors[i].data, b.tensors[i].data, a.tensors[i].nbytes), 0);
        total += a.tensors[i].nbytes;
    }
    char *index = slurp(path_of("many/model.safetensors.index.json"), NULL);
    char want[64];
    snprintf(want, sizeof(want), "\"total_size\": %llu", (unsigned long long)total);
    ck_assert_msg(strstr(index, want) != NULL, "index lacks %s", want);
    free(index);
    st_close(&a);
    st_close(&b);
    ck_assert(same_file(path_of("one/config.json"), path_of("many/config.json")));
}
END_TEST

START_TEST(f16_and_f32_hold_the_same_values)
{
    ck_assert_int_eq(generate("bf", "--stress --seed 2"), 0);
    ck_assert_int_eq(generate("f32", "--stress --seed 2 --dtype f32"), 0);
    ck_assert_int_eq(generate("f16", "--stress --seed 2 --dtype f16"), 0);
    struct st_model bf, f32, f16;
    open_model(&bf, "bf");
    open_model(&f32, "f32");
    open_model(&f16, "f16");
    for (uint32_t i = 0; i < bf.n_tensors; i++) {
        const struct st_tensor *b = &bf.tensors[i], *s = &f32.tensors[i], *h = &f16.tensors[i];
        ck_assert_int_eq(s->dtype, ST_F32);
        ck_assert_int_eq(h->dtype, ST_F16);
        uint64_t bad = 0;                    /* counted: one Check assertion per value is slow */
        for (uint64_t k = 0; k < b->numel; k++) {
            float v = st_get_f32(s, k);
            bad += st_get_f32(b, k) != qp_bf16_to_f32(qp_f32_to_bf16(v));
            bad += st_get_f32(h, k) != qp_f16_to_f32(qp_f32_to_f16(v));
        }
        ck_assert_msg(bad == 0, "%s: %llu values differ", b->name, (unsigned long long)bad);
    }
    st_close(&bf);
    st_close(&f32);
    st_close(&f16);
    char *config = slurp(path_of("f16/config.json"), NULL);
    ck_assert_ptr_nonnull(strstr(config, "\"torch_dtype\": \"float16\""));
    free(config);
}
END_TEST

START_TEST(tokenizer_files_are_copied)
{
    mkdir(path_of("tok"), 0755);
    copy_file(QP_SOURCE_DIR "/tests/data/tiny-learned/model/tokenizer.json", path_of("tok/tokenizer.json"));
    FILE *f = fopen(path_of("tok/tokenizer_config.json"), "w");
    fputs("{\"eos_token\": \"<|im_end|>\"}\n", f);
    fclose(f);
    char args[128];
    snprintf(args, sizeof(args), "--vocab 2048 --tokenizer-dir %s", path_of("tok"));
    ck_assert_int_eq(generate("m", args), 0);
    ck_assert(same_file(path_of("tok/tokenizer.json"), path_of("m/tokenizer.json")));
    ck_assert(same_file(path_of("tok/tokenizer_config.json"), path_of("m/tokenizer_config.json")));
}
END_TEST

/* A vocabulary smaller than the tokenizer's ids is refused
 * before anything is written (the tiny preset's 512 beside 2,048 ids) */
START_TEST(vocabulary_too_small_for_the_tokenizer_is_refused)
{
    mkdir(path_of("tok"), 0755);
    copy_file(QP_SOURCE_DIR "/tests/data/tiny-learned/model/tokenizer.json", path_of("tok/tokenizer.json"));
    char args[128];
    snprintf(args, sizeof(args), "--tokenizer-dir %s", path_of("tok"));
    ck_assert_int_eq(generate("m", args), 1);
    char *err = slurp(path_of("stderr"), NULL);
    ck_assert_msg(strstr(err, "has ids up to 2047: a vocabulary of 512 (the preset's) cannot hold them; give "
                              "--vocab 2048 or more"), "stderr: %s", err);
    free(err);
    ck_assert(!exists(path_of("m/model.safetensors")));
    snprintf(args, sizeof(args), "--vocab 2047 --tokenizer-dir %s", path_of("tok"));
    ck_assert_int_eq(generate("m", args), 1);
    snprintf(args, sizeof(args), "--vocab 2048 --tokenizer-dir %s", path_of("tok"));
    ck_assert_int_eq(generate("m", args), 0);
}
END_TEST

START_TEST(missing_tokenizer_fails_before_writing)
{
    char args[128];
    snprintf(args, sizeof(args), "--tokenizer-dir %s", path_of("no-such-dir"));
    ck_assert_int_eq(generate("m", args), 1);
    char *err = slurp(path_of("stderr"), NULL);
    ck_assert_msg(strstr(err, "qp-gen-checkpoint: ") == err &&
                  strstr(err, "no-such-dir/tokenizer.json: No such file"), "stderr: %s", err);
    free(err);
    ck_assert(!exists(path_of("m/model.safetensors")));
}
END_TEST

START_TEST(failed_run_leaves_no_checkpoint_that_looks_complete)
{
    ck_assert_int_eq(generate("m", ""), 0);
    ck_assert(exists(path_of("m/config.json")));
    /* A tokenizer_config.json that is a folder passes the early checks (of
     * tokenizer.json), fails the copy. */
    mkdir(path_of("tok"), 0755);
    copy_file(QP_SOURCE_DIR "/tests/data/tiny-learned/model/tokenizer.json", path_of("tok/tokenizer.json"));
    mkdir(path_of("tok/tokenizer_config.json"), 0755);
    char args[128];
    snprintf(args, sizeof(args), "--vocab 2048 --tokenizer-dir %s", path_of("tok"));
    ck_assert_int_eq(generate("m", args), 1);                      /* fails after the weights */
    char *err = slurp(path_of("stderr"), NULL);
    ck_assert_msg(strstr(err, "qp-gen-checkpoint: ") == err && strstr(err, "tok/tokenizer_config.json"),
                  "stderr: %s", err);
    free(err);
    ck_assert(!exists(path_of("m/config.json")));
    ck_assert_int_eq(temp_files_in("m"), 0);
}
END_TEST

/* Bad arguments: exit 2, one message naming the problem, nothing written. */
static const struct {
    const char *args, *message;
} bad_args[] = {
    { "--bogus", "unknown option '--bogus'" },
    { "--heads 0", "--heads needs a positive integer, got '0'" },
    { "--heads x", "--heads needs a positive integer, got 'x'" },
    { "--hidden", "--hidden needs a positive integer, got ''" },
    { "--layers 99999999999", "--layers needs a positive integer" },
    { "--preset 7b", "unknown preset '7b'" },
    { "--kv-heads 3", "num_attention_heads 4 is not a multiple of num_key_value_heads 3" },
    { "--head-dim 15", "head_dim 15 is odd" },
    { "--dtype f8", "--dtype needs bf16, f16 or f32, got 'f8'" },
    { "--shards 0", "--shards needs a positive integer" },
    { "--seed -1", "--seed needs a non-negative integer" },
    { "other", "two output folders given" },
    { "--stress --hidden 8", "--stress needs at least 16 hidden channels" },
    { "--init xavier", "--init needs fixed or fan-in, got 'xavier'" },
};

START_TEST(bad_arguments_fail_with_a_message)
{
    ck_assert_int_eq(generate("m", bad_args[_i].args), 2);
    char *err = slurp(path_of("stderr"), NULL);
    ck_assert_msg(strstr(err, bad_args[_i].message) != NULL, "%s: stderr is %s",
                  bad_args[_i].args, err);
    free(err);
    ck_assert(!exists(path_of("m")));
}
END_TEST

START_TEST(more_shards_than_tensors_is_refused)
{
    ck_assert_int_eq(generate("m", "--shards 26"), 1);
    char *err = slurp(path_of("stderr"), NULL);
    ck_assert_ptr_nonnull(strstr(err, "--shards 26 is more than the 25 tensors"));
    free(err);
    ck_assert_int_eq(generate("m", "--shards 25"), 0);
    struct st_model m;
    open_model(&m, "m");
    ck_assert_uint_eq(m.n_files, 25);
    st_close(&m);
}
END_TEST

static Suite *gen_suite(void)
{
    Suite *s = suite_create("gen_checkpoint");
    TCase *tc = tcase_create("generate");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tiny_checkpoint_has_the_qwen3_names_and_shapes);
    tcase_add_test(tc, flags_override_the_preset_wherever_they_are);
    tcase_add_test(tc, big_presets_have_the_published_config_and_shards);
    tcase_add_test(tc, same_arguments_give_byte_identical_files);
    tcase_add_test(tc, tied_lm_head_is_byte_identical_to_the_embedding);
    tcase_add_test(tc, untied_lm_head_is_drawn_independently);
    tcase_add_test(tc, values_are_normal_with_the_requested_scale);
    tcase_add_test(tc, fan_in_init_scales_each_matrix_by_its_input_width);
    tcase_add_test(tc, stress_adds_four_massive_channels);
    tcase_add_test(tc, stress_gives_every_norm_large_entries);
    tcase_add_test(tc, sharded_and_single_hold_identical_tensors);
    tcase_add_test(tc, f16_and_f32_hold_the_same_values);
    tcase_add_test(tc, tokenizer_files_are_copied);
    tcase_add_test(tc, missing_tokenizer_fails_before_writing);
    tcase_add_test(tc, vocabulary_too_small_for_the_tokenizer_is_refused);
    tcase_add_test(tc, failed_run_leaves_no_checkpoint_that_looks_complete);
    tcase_add_loop_test(tc, bad_arguments_fail_with_a_message, 0,
                        (int)(sizeof(bad_args) / sizeof(bad_args[0])));
    tcase_add_test(tc, more_shards_than_tensors_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(gen_suite());
}
