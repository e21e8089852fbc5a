/* gen_checkpoint.c - qp-gen-checkpoint: writes a random Qwen3 checkpoint in
 * Hugging Face layout (config.json, model.safetensors or shards plus
 * model.safetensors.index.json, optionally the tokenizer files).
 *
 * Same arguments, same bytes: every tensor draws from its own random stream,
 * seeded from --seed and the tensor's name, so the values do not depend on
 * the file order or on sharding. Tensors are generated and written a chunk
 * at a time; the model is never held in memory.
 *
 * Reading order: options -> random numbers -> the tensor list -> values ->
 * files -> main.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli_suggest.h"
#include "bf16.h"
#include "stdout_policy.h"
#include "error.h"
#include "fsafe.h"
#include "hf_config.h"
#include "safetensors.h"
#include "safetensors_write.h"
#include "tokenizer.h"

#define PROG "qp-gen-checkpoint"

static const char usage[] =
    "usage: " PROG " OUT_DIR [--preset tiny|0.6b|1.7b|4b|8b|14b|32b] [--hidden N] [--intermediate N]\n"
    "       [--layers N] [--heads N] [--kv-heads N] [--head-dim N] [--vocab N] [--max-pos N]\n"
    "       [--seed S] [--shards N] [--untied] [--stress] [--tokenizer-dir DIR]\n"
    "       [--dtype bf16|f16|f32] [--init fixed|fan-in] [--pooling last|mean]\n"
    "       " PROG " --version\n"
    "Writes a random Qwen3 checkpoint (Hugging Face layout) into OUT_DIR.\n"
    "The preset (default tiny) is applied first; size flags override it wherever they are.\n"
    "4b, 8b, 14b and 32b are written in 3, 5, 8 and 17 shards (as published) unless --shards\n"
    "is given.\n"
    "Values: matrices N(0, 0.02), norm weights 1 + N(0, 0.1). --init fan-in draws each\n"
    "matrix from N(0, 0.02 * sqrt(1024 / its input width)) instead, so that every matrix\n"
    "product's output has the scale of 0.6B's q_proj at every width. --stress adds 4 massive\n"
    "hidden channels (x40 in the embedding columns and the o_proj/down_proj rows, /40 in\n"
    "the final norm), max(2, n/32) entries in [128, 400] in every norm (off the massive\n"
    "channels), and a final norm x8. Previous checkpoint files in OUT_DIR are replaced\n"
    "(one that is a directory, FIFO, device or symbolic link is refused, before any\n"
    "work); config.json is written last, so a failed run leaves none. With --tokenizer-dir\n"
    "the vocabulary must hold every id of its tokenizer.json (the Qwen3 tokenizer's need\n"
    "--vocab 151669 or more; Qwen3 pads to 151936): a smaller one is refused.\n"
    "--pooling makes it an embedding checkpoint as sentence-transformers lays one out\n"
    "(Qwen3-Embedding: last): 1_Pooling/config.json with that pooling mode.\n";

/* ------------------------------------------------------------------ options */


struct options {
    const char *out_dir;
    const char *preset;
    struct qwen3_config cfg;
    uint64_t seed;
    uint32_t shards;
    bool stress;
    bool fan_in_init;           /* --init fan-in: std 0.02 * sqrt(1024 / cols) */
    const char *tokenizer_dir;
    bool vocab_given;           /* --vocab, not the preset's */
    enum st_dtype dtype;
    const char *pooling;        /* --pooling: "last" or "mean"; NULL: a generator's checkpoint */
};


struct preset {
    const char *name;
    struct qwen3_config cfg;
    uint32_t shards;            /* files written unless --shards says otherwise */
};

/* Qwen3-0.6B to -14B as published (config.json), the big ones in as many
 * shards as the official repositories; tiny keeps the same proportions. */
static const struct preset presets[] = {
    { "tiny", { .hidden_size = 64, .intermediate_size = 192, .num_hidden_layers = 2,
                .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 16,
                .vocab_size = 512, .max_position_embeddings = 2048, .rope_theta = 1e6,
                .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
                .bos_token_id = -1, .eos_token_id = -1 }, 1 },
    { "0.6b", { .hidden_size = 1024, .intermediate_size = 3072, .num_hidden_layers = 28,
                .num_attention_heads = 16, .num_key_value_heads = 8, .head_dim = 128,
                .vocab_size = 151936, .max_position_embeddings = 40960, .rope_theta = 1e6,
                .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
                .bos_token_id = 151643, .eos_token_id = 151645 }, 1 },
    { "1.7b", { .hidden_size = 2048, .intermediate_size = 6144, .num_hidden_layers = 28,
                .num_attention_heads = 16, .num_key_value_heads = 8, .head_dim = 128,
                .vocab_size = 151936, .max_position_embeddings = 40960, .rope_theta = 1e6,
                .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
                .bos_token_id = 151643, .eos_token_id = 151645 }, 1 },
    { "4b", { .hidden_size = 2560, .intermediate_size = 9728, .num_hidden_layers = 36,
              .num_attention_heads = 32, .num_key_value_heads = 8, .head_dim = 128,
              .vocab_size = 151936, .max_position_embeddings = 40960, .rope_theta = 1e6,
              .rms_norm_eps = 1e-6, .tie_word_embeddings = true,
              .bos_token_id = 151643, .eos_token_id = 151645 }, 3 },
    { "8b", { .hidden_size = 4096, .intermediate_size = 12288, .num_hidden_layers = 36,
              .num_attention_heads = 32, .num_key_value_heads = 8, .head_dim = 128,
              .vocab_size = 151936, .max_position_embeddings = 40960, .rope_theta = 1e6,
              .rms_norm_eps = 1e-6, .tie_word_embeddings = false,
              .bos_token_id = 151643, .eos_token_id = 151645 }, 5 },
    { "14b", { .hidden_size = 5120, .intermediate_size = 17408, .num_hidden_layers = 40,
               .num_attention_heads = 40, .num_key_value_heads = 8, .head_dim = 128,
               .vocab_size = 151936, .max_position_embeddings = 40960, .rope_theta = 1e6,
               .rms_norm_eps = 1e-6, .tie_word_embeddings = false,
               .bos_token_id = 151643, .eos_token_id = 151645 }, 8 },
    { "32b", { .hidden_size = 5120, .intermediate_size = 25600, .num_hidden_layers = 64,
               .num_attention_heads = 64, .num_key_value_heads = 8, .head_dim = 128,
               .vocab_size = 151936, .max_position_embeddings = 40960, .rope_theta = 1e6,
               .rms_norm_eps = 1e-6, .tie_word_embeddings = false,
               .bos_token_id = 151643, .eos_token_id = 151645 }, 17 },
};

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* The value of a size flag: a positive 32-bit integer. */
static int parse_size(const char *flag, const char *s, uint32_t *out, qp_err *err)
{
    uint64_t v;
    if (parse_u64(s, &v) || v == 0 || v > UINT32_MAX)
        return qp_fail(err, "%s needs a positive integer, got '%s'", flag, s ? s : "");
    *out = (uint32_t)v;
    return 0;
}

static int apply_preset(struct options *o, const char *name, qp_err *err)
{
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
        if (strcmp(presets[i].name, name) == 0) {
            o->cfg = presets[i].cfg;
            o->preset = presets[i].name;
            o->shards = presets[i].shards;
            return 0;
        }
    }
    return qp_fail(err, "unknown preset '%s' (tiny, 0.6b, 1.7b, 4b, 8b, 14b, 32b)", name);
}

static int parse_dtype(const char *s, enum st_dtype *dt, qp_err *err)
{
    if (s && strcmp(s, "bf16") == 0)
        *dt = ST_BF16;
    else if (s && strcmp(s, "f16") == 0)
        *dt = ST_F16;
    else if (s && strcmp(s, "f32") == 0)
        *dt = ST_F32;
    else
        return qp_fail(err, "--dtype needs bf16, f16 or f32, got '%s'", s ? s : "");
    return 0;
}

/* One flag (and its value, *i advanced past it). */
static int parse_flag(struct options *o, int argc, char **argv, int *i, qp_err *err)
{
    static const struct { const char *flag; size_t offset; } sizes[] = {
        { "--hidden", offsetof(struct qwen3_config, hidden_size) },
        { "--intermediate", offsetof(struct qwen3_config, intermediate_size) },
        { "--layers", offsetof(struct qwen3_config, num_hidden_layers) },
        { "--heads", offsetof(struct qwen3_config, num_attention_heads) },
        { "--kv-heads", offsetof(struct qwen3_config, num_key_value_heads) },
        { "--head-dim", offsetof(struct qwen3_config, head_dim) },
        { "--vocab", offsetof(struct qwen3_config, vocab_size) },
        { "--max-pos", offsetof(struct qwen3_config, max_position_embeddings) },
    };
    const char *flag = argv[*i];
    const char *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        if (strcmp(flag, sizes[k].flag) == 0) {
            o->vocab_given |= sizes[k].offset == offsetof(struct qwen3_config, vocab_size);
            ++*i;
            return parse_size(flag, value, (uint32_t *)((char *)&o->cfg + sizes[k].offset), err);
        }
    }
    if (strcmp(flag, "--untied") == 0)
        o->cfg.tie_word_embeddings = false;
    else if (strcmp(flag, "--stress") == 0)
        o->stress = true;
    else if (strcmp(flag, "--preset") == 0)
        ++*i;                                         /* applied before all other flags */
    else if (strcmp(flag, "--seed") == 0) {
        if (parse_u64(value, &o->seed))
            return qp_fail(err, "--seed needs a non-negative integer, got '%s'",
                           value ? value : "");
        ++*i;
    } else if (strcmp(flag, "--shards") == 0) {
        ++*i;
        return parse_size(flag, value, &o->shards, err);
    } else if (strcmp(flag, "--tokenizer-dir") == 0) {
        if (!value)
            return qp_fail(err, "--tokenizer-dir needs a folder");
        o->tokenizer_dir = value;
        ++*i;
    } else if (strcmp(flag, "--dtype") == 0) {
        ++*i;
        return parse_dtype(value, &o->dtype, err);
    } else if (strcmp(flag, "--pooling") == 0) {
        if (!value || (strcmp(value, "last") && strcmp(value, "mean")))
            return qp_fail(err, "--pooling needs last or mean, got '%s'", value ? value : "");
        o->pooling = value;
        ++*i;
    } else if (strcmp(flag, "--init") == 0) {
        if (!value || (strcmp(value, "fixed") && strcmp(value, "fan-in")))
            return qp_fail(err, "--init needs fixed or fan-in, got '%s'", value ? value : "");
        o->fan_in_init = strcmp(value, "fan-in") == 0;
        ++*i;
    } else if (flag[0] == '-') {
        static const char *const known[] = {"--hidden", "--intermediate", "--layers", "--heads", "--kv-heads",
                                            "--head-dim", "--vocab", "--max-pos", "--untied", "--stress",
                                            "--preset", "--seed", "--shards", "--tokenizer-dir", "--dtype",
                                            "--init", "--pooling", "--help", "--version"};
        const char *guess = qp_cli_closest(flag, known, sizeof known / sizeof *known);
        if (guess)
            return qp_fail(err, "unknown option '%s': did you mean %s?", flag, guess);
        return qp_fail(err, "unknown option '%s'", flag);
    }
    else if (o->out_dir)
        return qp_fail(err, "two output folders given: '%s' and '%s'", o->out_dir, flag);
    else
        o->out_dir = flag;
    return 0;
}

static int parse_options(struct options *o, int argc, char **argv, qp_err *err)
{
    memset(o, 0, sizeof(*o));
    o->shards = 1;
    o->dtype = ST_BF16;
    const char *preset = "tiny";
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--preset") == 0) {
            if (i + 1 >= argc)
                return qp_fail(err, "--preset needs tiny, 0.6b, 1.7b, 4b, 8b, 14b or 32b");
            preset = argv[++i];
        }
    if (apply_preset(o, preset, err))
        return -1;
    for (int i = 1; i < argc; i++)
        if (parse_flag(o, argc, argv, &i, err))
            return -1;
    if (!o->out_dir)
        return qp_fail(err, "no output folder given");
    struct qwen3_config *c = &o->cfg;
    if (c->bos_token_id >= (int64_t)c->vocab_size)   /* a smaller --vocab drops the ids */
        c->bos_token_id = -1;
    if (c->eos_token_id >= (int64_t)c->vocab_size)
        c->eos_token_id = -1;
    if (hf_config_validate(c, "the requested shape", err))
        return -1;
    if (o->stress && c->hidden_size < 16)
        return qp_fail(err, "--stress needs at least 16 hidden channels");
    return 0;
}

/* ----------------------------------------------------------- random numbers */

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
struct rng {
    uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A stream of its own for each name: values do not depend on file order. */
static void rng_seed(struct rng *r, uint64_t seed, const char *stream)
{
    uint64_t x = XXH3_64bits_withSeed(stream, strlen(stream), seed);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in (0, 1]: never 0, so its log is finite. */
static double rng_unit(struct rng *r)
{
    return (double)((rng_next(r) >> 11) + 1) * 0x1p-53;
}

static uint32_t rng_below(struct rng *r, uint32_t n)
{
    return (uint32_t)(((rng_next(r) >> 32) * n) >> 32);
}

/* Normal numbers by inverse CDF: |z| is tabulated at NORMAL_KNOTS
 * equal-probability knots and interpolated linearly between them; the last
 * interval, the tail beyond ~3.7, is sampled exactly (Marsaglia 1964).
 * ~1 ns per value where Box-Muller takes ~8: the 0.6B shape needs 750 M. */
#define NORMAL_KNOTS_LOG2 12
#define NORMAL_KNOTS (1u << NORMAL_KNOTS_LOG2)
static float normal_knot[NORMAL_KNOTS];          /* P(|Z| < knot[i]) = i / NORMAL_KNOTS */

static void normal_init(void)
{
    double x = 0;
    for (uint32_t i = 1; i < NORMAL_KNOTS; i++) {
        double p = (double)i / NORMAL_KNOTS;
        /* Newton on erf(x/sqrt2) = p from the previous knot: the function is
         * concave and increasing there, so the steps approach from below. */
        for (int it = 0; it < 100; it++) {
            double step = (erf(x * M_SQRT1_2) - p) / (M_SQRT2 / sqrt(M_PI) * exp(-x * x / 2));
            x -= step;
            if (fabs(step) < 1e-15)
                break;
        }
        normal_knot[i] = (float)x;
    }
}

static double normal_tail(struct rng *r, double from)
{
    double x, y;
    do {
        x = -log(rng_unit(r)) / from;
        y = -log(rng_unit(r));
    } while (2 * y < x * x);
    return from + x;
}

/* One normal from 32 random bits: 1 sign, 12 knot, 19 between knots. */
static inline float normal_from_bits(struct rng *r, uint32_t bits)
{
    uint32_t knot = (bits >> 19) & (NORMAL_KNOTS - 1);
    float z;
    if (knot == NORMAL_KNOTS - 1)
        z = (float)normal_tail(r, normal_knot[NORMAL_KNOTS - 1]);
    else {
        float frac = (float)(bits & 0x7ffff) * 0x1p-19f;
        z = normal_knot[knot] + frac * (normal_knot[knot + 1] - normal_knot[knot]);
    }
    /* The sign goes in without a branch: a random one is mispredicted half the time. */
    return qp_f32_from_bits(qp_f32_bits(z) ^ (bits & 0x80000000u));
}

static void fill_normal(struct rng *r, float *out, size_t n, float mean, float std)
{
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {                      /* most of the time is spent here */
        uint64_t bits = rng_next(r);
        out[i] = mean + std * normal_from_bits(r, (uint32_t)bits);
        out[i + 1] = mean + std * normal_from_bits(r, (uint32_t)(bits >> 32));
    }
    if (i < n)
        out[i] = mean + std * normal_from_bits(r, (uint32_t)rng_next(r));
}

/* k distinct indices below n into out; chosen (n bytes, zeroed) marks them. */
static void pick_distinct(struct rng *r, uint32_t n, uint32_t k, uint8_t *chosen, uint32_t *out)
{
    for (uint32_t i = 0; i < k;) {
        uint32_t c = rng_below(r, n);
        if (!chosen[c]) {
            chosen[c] = 1;
            out[i++] = c;
        }
    }
}

/* ------------------------------------------------------------- the tensors */

enum fill { FILL_MATRIX, FILL_NORM, FILL_FINAL_NORM };
/* Which massive channels a matrix carries under --stress. */
enum boost { BOOST_NONE, BOOST_COLUMNS, BOOST_ROWS };

struct gen_tensor {
    char name[80];
    char stream[80];            /* random stream: a tied lm_head replays the embedding's */
    uint32_t ndim;              /* 1 for norm weights, 2 for matrices */
    uint64_t rows, cols;        /* rows is 1 for a vector */
    enum fill fill;
    enum boost boost;
    bool over_hidden;           /* a norm over the hidden channels (not q/k norm) */
};

#define MASSIVE_CHANNELS 4
#define MASSIVE_GAIN 40.0f
#define FINAL_NORM_GAIN 8.0f

struct stress {
    bool on;
    uint32_t channel[MASSIVE_CHANNELS];
    uint8_t *is_massive;        /* hidden_size flags */
};

static void add_tensor(struct gen_tensor *t, uint32_t *n, const char *name, uint64_t rows,
                       uint64_t cols, enum fill fill, enum boost boost)
{
    struct gen_tensor *g = &t[(*n)++];
    snprintf(g->name, sizeof(g->name), "%s", name);
    snprintf(g->stream, sizeof(g->stream), "%s", name);
    g->ndim = fill == FILL_MATRIX ? 2 : 1;
    g->rows = rows;
    g->cols = cols;
    g->fill = fill;
    g->boost = boost;
    g->over_hidden = fill != FILL_MATRIX && strstr(name, "_norm.") == NULL;
}

/* Names and shapes exactly as Hugging Face's Qwen3ForCausalLM. */
static struct gen_tensor *tensor_list(const struct qwen3_config *c, uint32_t *n)
{
    uint64_t hidden = c->hidden_size, inter = c->intermediate_size, hd = c->head_dim;
    uint64_t q_rows = (uint64_t)c->num_attention_heads * hd;
    uint64_t kv_rows = (uint64_t)c->num_key_value_heads * hd;
    struct gen_tensor *t = calloc(3 + 11 * (size_t)c->num_hidden_layers, sizeof(*t));
    char name[80];
    *n = 0;
    if (!t)
        return NULL;
    add_tensor(t, n, "model.embed_tokens.weight", c->vocab_size, hidden, FILL_MATRIX,
               BOOST_COLUMNS);
    for (uint32_t l = 0; l < c->num_hidden_layers; l++) {
        static const struct { const char *part; int rows, cols; enum fill fill;
                              enum boost boost; } layer[] = {
            /* rows/cols: 0 = 1, 1 = hidden, 2 = q_rows, 3 = kv_rows, 4 = inter, 5 = head_dim */
            { "input_layernorm", 0, 1, FILL_NORM, BOOST_NONE },
            { "self_attn.q_proj", 2, 1, FILL_MATRIX, BOOST_NONE },
            { "self_attn.k_proj", 3, 1, FILL_MATRIX, BOOST_NONE },
            { "self_attn.v_proj", 3, 1, FILL_MATRIX, BOOST_NONE },
            { "self_attn.o_proj", 1, 2, FILL_MATRIX, BOOST_ROWS },
            { "self_attn.q_norm", 0, 5, FILL_NORM, BOOST_NONE },
            { "self_attn.k_norm", 0, 5, FILL_NORM, BOOST_NONE },
            { "post_attention_layernorm", 0, 1, FILL_NORM, BOOST_NONE },
            { "mlp.gate_proj", 4, 1, FILL_MATRIX, BOOST_NONE },
            { "mlp.up_proj", 4, 1, FILL_MATRIX, BOOST_NONE },
            { "mlp.down_proj", 1, 4, FILL_MATRIX, BOOST_ROWS },
        };
        const uint64_t dim[] = { 1, hidden, q_rows, kv_rows, inter, hd };
        for (size_t k = 0; k < sizeof(layer) / sizeof(layer[0]); k++) {
            snprintf(name, sizeof(name), "model.layers.%u.%s.weight", l, layer[k].part);
            add_tensor(t, n, name, dim[layer[k].rows], dim[layer[k].cols], layer[k].fill,
                       layer[k].boost);
        }
    }
    add_tensor(t, n, "model.norm.weight", 1, hidden, FILL_FINAL_NORM, BOOST_NONE);
    /* Always stored, as in the official files; tied means byte-identical. */
    add_tensor(t, n, "lm_head.weight", c->vocab_size, hidden, FILL_MATRIX, BOOST_NONE);
    if (c->tie_word_embeddings) {
        t[*n - 1].boost = BOOST_COLUMNS;
        memcpy(t[*n - 1].stream, t[0].stream, sizeof(t[0].stream));
    }
    return t;
}

static struct stw_tensor declare(const struct gen_tensor *g, enum st_dtype dtype)
{
    struct stw_tensor d = { .name = g->name, .dtype = dtype, .ndim = g->ndim };
    if (g->ndim == 1)
        d.shape[0] = g->cols;
    else
        d.shape[0] = g->rows, d.shape[1] = g->cols;
    return d;
}

/* ------------------------------------------------------------------ values */

/* Floats are made a chunk at a time (whole rows), then narrowed and written. */
#define CHUNK_VALUES (1u << 18)

struct scratch {
    float *values;              /* CHUNK_VALUES */
    uint8_t *bytes;             /* CHUNK_VALUES * 4 */
    uint8_t *chosen;            /* QWEN3_MAX_HIDDEN flags, for picking norm outliers */
    uint32_t *picked;
};

static int emit_values(struct stw_writer *w, const float *v, size_t n, enum st_dtype dtype,
                       uint8_t *bytes, qp_err *err)
{
    if (dtype == ST_F32)
        return stw_write(w, v, n * sizeof(float), err);  /* little-endian host */
    uint16_t *h = (uint16_t *)bytes;
    if (dtype == ST_BF16)
        for (size_t i = 0; i < n; i++)
            h[i] = qp_f32_to_bf16(v[i]);
    else
        for (size_t i = 0; i < n; i++)
            h[i] = qp_f32_to_f16(v[i]);
    return stw_write(w, h, n * sizeof(uint16_t), err);
}

/* 1 + N(0, 0.1). Under --stress, max(2, n/32) entries are drawn uniform in
 * [128, 400], the scales real Qwen3 norms reach, and the final norm is
 * scaled by 8 for peaked logits. Norms over the hidden channels keep their
 * large entries off the massive channels, and the final norm damps those
 * (/40), as trained models' norms do: a large scale on a channel that is
 * already massive makes the MLP grow it quadratically, layer after layer,
 * and the final norm would pass it (x40 again in a tied lm_head) into
 * logits in the hundreds. */
static void make_norm(struct rng *r, const struct gen_tensor *g, const struct stress *s,
                      struct scratch *sc)
{
    uint32_t n = (uint32_t)g->cols;
    int final = g->fill == FILL_FINAL_NORM, over_hidden = g->over_hidden;
    fill_normal(r, sc->values, n, 1.0f, 0.1f);
    if (!s->on)
        return;
    memset(sc->chosen, 0, n);
    for (int k = 0; k < MASSIVE_CHANNELS && over_hidden; k++)
        sc->chosen[s->channel[k]] = 1;
    if (final) {
        for (uint32_t i = 0; i < n; i++)
            sc->values[i] *= FINAL_NORM_GAIN;
        for (int k = 0; k < MASSIVE_CHANNELS; k++)
            sc->values[s->channel[k]] /= MASSIVE_GAIN;
    }
    uint32_t free_entries = over_hidden ? n - MASSIVE_CHANNELS : n;
    uint32_t k = n / 32 > 2 ? n / 32 : 2;
    k = k < free_entries ? k : free_entries;
    pick_distinct(r, n, k, sc->chosen, sc->picked);
    for (uint32_t i = 0; i < k; i++)
        sc->values[sc->picked[i]] = (float)(128.0 + 272.0 * rng_unit(r));
}

/* The massive channels: embedding columns, o_proj/down_proj rows. */
static void boost_rows(float *v, uint64_t first_row, uint64_t rows, uint64_t cols,
                       const struct gen_tensor *g, const struct stress *s)
{
    for (uint64_t r = 0; r < rows; r++) {
        float *row = v + r * cols;
        if (g->boost == BOOST_COLUMNS)
            for (int k = 0; k < MASSIVE_CHANNELS; k++)
                row[s->channel[k]] *= MASSIVE_GAIN;
        else if (g->boost == BOOST_ROWS && s->is_massive[first_row + r])
            for (uint64_t c = 0; c < cols; c++)
                row[c] *= MASSIVE_GAIN;
    }
}

static int write_tensor(struct stw_writer *w, const struct gen_tensor *g, const struct options *o,
                        const struct stress *s, struct scratch *sc, qp_err *err)
{
    struct rng r;
    rng_seed(&r, o->seed, g->stream);
    if (g->fill != FILL_MATRIX) {
        make_norm(&r, g, s, sc);
        return emit_values(w, sc->values, g->cols, o->dtype, sc->bytes, err);
    }
    uint64_t step = CHUNK_VALUES / g->cols;           /* rows per chunk, at least 1 */
    /* A fixed std makes a wider model's products (and logits) larger: its
     * output's scale grows as sqrt(cols). fan-in keeps 0.6B's scale. */
    float std = o->fan_in_init ? 0.02f * sqrtf(1024.0f / (float)g->cols) : 0.02f;
    for (uint64_t row = 0; row < g->rows; row += step) {
        uint64_t rows = g->rows - row < step ? g->rows - row : step;
        fill_normal(&r, sc->values, rows * g->cols, 0.0f, std);
        if (s->on && g->boost != BOOST_NONE)
            boost_rows(sc->values, row, rows, g->cols, g, s);
        if (emit_values(w, sc->values, rows * g->cols, o->dtype, sc->bytes, err))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------- files */

static char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int make_dirs(const char *dir, qp_err *err)
{
    char *p = strdup(dir);
    int rc = p ? 0 : qp_fail(err, "%s: out of memory", dir);
    for (char *s = p ? p + 1 : NULL; s && rc == 0; s++) {
        bool last = *s == 0;
        if (*s != '/' && !last)
            continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            rc = qp_fail(err, "%s: cannot create folder: %s", p, strerror(errno));
        if (last)
            break;
        *s = '/';
    }
    free(p);
    return rc;
}

/* The largest tokenizer file copied (the Qwen3 tokenizer.json is 11 MB). */
#define COPY_MAX (256u << 20)

/* The vocabulary must hold every id of the tokenizer the checkpoint gets:
 * a smaller one makes a checkpoint that only some texts can run. */
static int check_tokenizer_vocab(const struct options *o, qp_err *err)
{
    char *path = path_in(o->tokenizer_dir, "tokenizer.json");
    qp_tok *tok = NULL;
    int rc = !path ? qp_fail(err, "out of memory") : qp_tok_load_file(&tok, path, err);
    int32_t ids = rc ? 0 : qp_tok_vocab_size(tok);
    if (!rc && (uint32_t)ids > o->cfg.vocab_size)
        rc = qp_fail(err, "%s has ids up to %d: a vocabulary of %u (%s) cannot hold them; give --vocab %d or more",
                     path, ids - 1, o->cfg.vocab_size, o->vocab_given ? "--vocab" : "the preset's", ids);
    qp_tok_free(tok);
    free(path);
    return rc ? -1 : 0;
}

static int tokenizer_present(const struct options *o, qp_err *err)
{
    char *src = path_in(o->tokenizer_dir, "tokenizer.json");
    int rc = !src ? qp_fail(err, "out of memory")
           : access(src, R_OK) != 0 ? qp_fail(err, "%s: %s", src, strerror(errno)) : 0;
    free(src);
    return rc || check_tokenizer_vocab(o, err) ? -1 : 0;
}

/* tokenizer.json is required, tokenizer_config.json copied when present. */
static int copy_tokenizer(const char *from, const char *to, qp_err *err)
{
    static const char *const names[] = { "tokenizer.json", "tokenizer_config.json" };
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        char *src = path_in(from, names[i]), *dst = path_in(to, names[i]);
        char *data = NULL;
        size_t len = 0;
        if (!src || !dst)
            rc = qp_fail(err, "out of memory");
        else if (i == 1 && access(src, F_OK) != 0)
            rc = 0;
        else
            rc = fs_read_input(src, COPY_MAX, &data, &len, err) || fs_write_file(dst, data, len, NULL, err);
        free(data);
        free(src);
        free(dst);
    }
    return rc ? -1 : 0;
}

/* 1_Pooling/config.json as sentence-transformers writes it */
static int write_pooling(const struct options *o, qp_err *err)
{
    char *dir = path_in(o->out_dir, "1_Pooling"), *path = path_in(o->out_dir, "1_Pooling/config.json");
    char text[512];
    bool last = strcmp(o->pooling, "last") == 0;
    int n = snprintf(text, sizeof text,
                     "{\n  \"word_embedding_dimension\": %u,\n  \"pooling_mode_cls_token\": false,\n"
                     "  \"pooling_mode_mean_tokens\": %s,\n  \"pooling_mode_max_tokens\": false,\n"
                     "  \"pooling_mode_mean_sqrt_len_tokens\": false,\n  \"pooling_mode_weightedmean_tokens\": false,\n"
                     "  \"pooling_mode_lasttoken\": %s,\n  \"include_prompt\": true\n}",
                     o->cfg.hidden_size, last ? "false" : "true", last ? "true" : "false");
    int rc = !dir || !path ? qp_fail(err, "out of memory")
             : mkdir(dir, 0755) && errno != EEXIST ? qp_fail(err, "%s: %s", dir, strerror(errno))
                                                   : fs_write_file(path, text, (size_t)n, NULL, err);
    free(dir);
    free(path);
    return rc ? -1 : 0;
}

/* Shard of each tensor: contiguous runs of roughly total/shards bytes,
 * none empty (needs shards <= n). */
static void assign_shards(const struct gen_tensor *t, uint32_t n, uint32_t shards,
                          enum st_dtype dtype, uint32_t *shard_of)
{
    uint64_t total = 0, before = 0;
    for (uint32_t i = 0; i < n; i++)
        total += t[i].rows * t[i].cols * st_dtype_size(dtype);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t prev = i ? shard_of[i - 1] : 0;
        uint64_t want = (uint64_t)((double)before / (double)total * shards);
        uint64_t lo = shards > n - i ? shards - (n - i) : 0;  /* enough left for the rest */
        lo = lo > prev ? lo : prev;
        uint64_t hi = i ? prev + 1 : 0;                        /* never skip a shard */
        shard_of[i] = (uint32_t)(want < lo ? lo : want > hi ? hi : want);
        before += t[i].rows * t[i].cols * st_dtype_size(dtype);
    }
}

static void shard_name(char *out, size_t cap, uint32_t k, uint32_t shards)
{
    if (shards == 1)
        snprintf(out, cap, "model.safetensors");
    else
        snprintf(out, cap, "model-%05u-of-%05u.safetensors", k + 1, shards);
}

static int write_shard(const struct options *o, const struct gen_tensor *t, uint32_t n,
                       const uint32_t *shard_of, uint32_t k, const struct stress *s,
                       struct scratch *sc, qp_err *err)
{
    char name[64];
    struct stw_tensor *decl = calloc(n, sizeof(*decl));
    uint32_t m = 0;
    shard_name(name, sizeof(name), k, o->shards);
    char *path = path_in(o->out_dir, name);
    if (!decl || !path) {
        free(decl);
        free(path);
        return qp_fail(err, "out of memory");
    }
    for (uint32_t i = 0; i < n; i++)
        if (shard_of[i] == k)
            decl[m++] = declare(&t[i], o->dtype);
    struct stw_writer *w;
    int rc = stw_open(&w, path, decl, m, err);
    for (uint32_t i = 0; i < n && rc == 0; i++)
        if (shard_of[i] == k && write_tensor(w, &t[i], o, s, sc, err))
            rc = -1;
    if (rc == 0)
        rc = stw_finish(w, err);
    else if (w)
        stw_abort(w);
    free(decl);
    free(path);
    return rc;
}

static int cmp_tensor_by_name(const void *a, const void *b)
{
    return strcmp((*(const struct gen_tensor *const *)a)->name,
                  (*(const struct gen_tensor *const *)b)->name);
}

/* model.safetensors.index.json as transformers writes it: names sorted. */
static int write_index(const struct options *o, const struct gen_tensor *t, uint32_t n,
                       const uint32_t *shard_of, uint64_t total_size, qp_err *err)
{
    const struct gen_tensor **sorted = malloc(n * sizeof(*sorted));
    size_t cap = 256 + (size_t)n * 160, len = 0;
    char *text = malloc(cap), shard[64];
    char *path = path_in(o->out_dir, "model.safetensors.index.json");
    int rc = sorted && text && path ? 0 : qp_fail(err, "out of memory");
    if (rc == 0) {
        for (uint32_t i = 0; i < n; i++)
            sorted[i] = &t[i];
        qsort(sorted, n, sizeof(*sorted), cmp_tensor_by_name);
        len += (size_t)snprintf(text + len, cap - len, "{\n  \"metadata\": {\n    "
                                "\"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                                (unsigned long long)total_size);
        for (uint32_t i = 0; i < n; i++) {
            shard_name(shard, sizeof(shard), shard_of[sorted[i] - t], o->shards);
            len += (size_t)snprintf(text + len, cap - len, "    \"%s\": \"%s\"%s\n",
                                    sorted[i]->name, shard, i + 1 < n ? "," : "");
        }
        len += (size_t)snprintf(text + len, cap - len, "  }\n}\n");
        rc = fs_write_file(path, text, len, NULL, err);
    }
    free(sorted);
    free(text);
    free(path);
    return rc;
}

/* Every file this run writes, before any is touched: absent or a regular
 * file, never a directory, FIFO, device or symbolic link (replacing it would
 * destroy it), nor one of the tokenizer files it copies. */
static int check_outputs(const struct options *o, qp_err *err)
{
    static const char *const fixed[] = { "config.json", "model.safetensors.index.json",
                                         "tokenizer.json", "tokenizer_config.json" };
    const char *inputs[] = { o->tokenizer_dir, NULL };
    uint32_t n_fixed = o->tokenizer_dir ? 4 : 2;
    int rc = 0;
    for (uint32_t i = 0; i < n_fixed + o->shards && rc == 0; i++) {
        char shard[64];
        if (i >= n_fixed)
            shard_name(shard, sizeof(shard), i - n_fixed, o->shards);
        char *p = path_in(o->out_dir, i < n_fixed ? fixed[i] : shard);
        rc = p ? fs_out_check(p, inputs, err) : qp_fail(err, "out of memory");
        free(p);
    }
    return rc;
}

/* Removes what a previous run left, so that a failed run leaves no
 * checkpoint that looks complete (config.json is written last). */
static int remove_previous(const char *dir, qp_err *err)
{
    static const char *const names[] = { "config.json", "model.safetensors.index.json",
                                         "model.safetensors" };
    for (int i = 0; i < 3; i++) {
        char *p = path_in(dir, names[i]);
        int rc = p && (unlink(p) == 0 || errno == ENOENT) ? 0
               : qp_fail(err, "%s: cannot remove the previous file: %s", p ? p : dir,
                         strerror(errno));
        free(p);
        if (rc)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------- main */

static int plan_stress(struct stress *s, const struct options *o, qp_err *err)
{
    memset(s, 0, sizeof(*s));
    s->on = o->stress;
    s->is_massive = calloc(o->cfg.hidden_size, 1);
    if (!s->is_massive)
        return qp_fail(err, "out of memory");
    if (s->on) {
        struct rng r;
        rng_seed(&r, o->seed, "massive channels");
        pick_distinct(&r, o->cfg.hidden_size, MASSIVE_CHANNELS, s->is_massive, s->channel);
    }
    return 0;
}

static void print_summary(const struct options *o, const struct gen_tensor *t, uint32_t n,
                          const struct stress *s, uint64_t bytes, double seconds)
{
    uint64_t params = 0;
    for (uint32_t i = 0; i < n; i++)
        params += t[i].rows * t[i].cols;
    char stress[96] = "";
    if (s->on)
        snprintf(stress, sizeof(stress), ", stress (massive channels %u %u %u %u)",
                 s->channel[0], s->channel[1], s->channel[2], s->channel[3]);
    printf("%s: wrote %s: qwen3 (preset %s), %u tensors, %.1f M parameters, %.1f MB %s in %u "
           "file%s, seed %llu, %s%s%s, %.1f s\n", PROG, o->out_dir, o->preset, n, params / 1e6,
           bytes / 1e6, st_dtype_name(o->dtype), o->shards, o->shards > 1 ? "s" : "",
           (unsigned long long)o->seed, o->cfg.tie_word_embeddings ? "tied" : "untied",
           o->fan_in_init ? ", fan-in init" : "", stress, seconds);
}

static int generate(const struct options *o, qp_err *err)
{
    static const char *const torch_dtype[] = { [ST_BF16] = "bfloat16", [ST_F16] = "float16",
                                               [ST_F32] = "float32" };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint32_t n;
    struct gen_tensor *t = tensor_list(&o->cfg, &n);
    uint32_t *shard_of = calloc(n + 1, sizeof(*shard_of));
    struct scratch sc = { malloc(CHUNK_VALUES * sizeof(float)), malloc(CHUNK_VALUES * 4),
                          malloc(QWEN3_MAX_HIDDEN), malloc(QWEN3_MAX_HIDDEN * 4) };
    struct stress s = { 0 };
    uint64_t total = 0;
    int rc = t && shard_of && sc.values && sc.bytes && sc.chosen && sc.picked ? 0
           : qp_fail(err, "out of memory");
    if (rc == 0 && o->shards > n)
        rc = qp_fail(err, "--shards %u is more than the %u tensors", o->shards, n);
    if (rc == 0 && o->tokenizer_dir)                  /* fail before writing, not after */
        rc = tokenizer_present(o, err);
    if (rc == 0)
        rc = plan_stress(&s, o, err) || make_dirs(o->out_dir, err) || check_outputs(o, err) ||
             remove_previous(o->out_dir, err);
    if (rc == 0) {
        normal_init();
        assign_shards(t, n, o->shards, o->dtype, shard_of);
        for (uint32_t i = 0; i < n; i++)
            total += t[i].rows * t[i].cols * st_dtype_size(o->dtype);
    }
    for (uint32_t k = 0; k < o->shards && rc == 0; k++)
        rc = write_shard(o, t, n, shard_of, k, &s, &sc, err);
    if (rc == 0 && o->shards > 1)
        rc = write_index(o, t, n, shard_of, total, err);
    if (rc == 0 && o->tokenizer_dir)
        rc = copy_tokenizer(o->tokenizer_dir, o->out_dir, err);
    if (rc == 0 && o->pooling)
        rc = write_pooling(o, err);
    if (rc == 0) {
        char *config = path_in(o->out_dir, "config.json");
        rc = config ? hf_config_write_dtype(config, &o->cfg, torch_dtype[o->dtype], err)
                    : qp_fail(err, "out of memory");
        free(config);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0)
        print_summary(o, t, n, &s, total,
                      (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    free(s.is_massive);
    free(sc.values), free(sc.bytes), free(sc.chosen), free(sc.picked);
    free(shard_of);
    free(t);
    return rc;
}

int main(int argc, char **argv)
{
    struct options o;
    qp_err err = { "" };
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0)
            return qp_print_version(PROG);
    }
    if (parse_options(&o, argc, argv, &err)) {
        fprintf(stderr, "%s: %s (see --help)\n", PROG, err.msg);
        return 2;
    }
    if (generate(&o, &err)) {
        fprintf(stderr, "%s: %s\n", PROG, err.msg);
        return 1;
    }
    return 0;
}
