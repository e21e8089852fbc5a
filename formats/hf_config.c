/* hf_config.c - the Qwen3 hyperparameters of a Hugging Face config.json.
 *
 * Fields and defaults (absent or null means default):
 *   required: hidden_size, intermediate_size, num_hidden_layers,
 *             num_attention_heads, vocab_size - they fix the tensor shapes,
 *             so a guessed default would only move the error elsewhere;
 *   num_key_value_heads = num_attention_heads, head_dim = hidden / heads,
 *   max_position_embeddings = 32768, rope_theta = 10000, rms_norm_eps = 1e-6,
 *   tie_word_embeddings = false (transformers' Qwen3Config defaults),
 *   bos_token_id / eos_token_id = -1 (a list of ids gives its first).
 * Refused because qpack would compute something else: model_type other
 * than "qwen3", rope_scaling not null, use_sliding_window true,
 * attention_bias true, hidden_act other than "silu"; and because Hugging
 * Face would read the file differently: a key twice in one object (Python
 * keeps the last value, cJSON finds the first), an escaped NUL.
 */
#include "hf_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsafe.h"
#include "json_strict.h"

/* Real config.json files are a few KiB. */
#define HF_CONFIG_MAX_BYTES (16u << 20)

/* ----------------------------------------------------------------- reading */

static const char *kind(const cJSON *v)
{
    return cJSON_IsString(v) ? "a string" : cJSON_IsBool(v) ? "a boolean"
         : cJSON_IsNumber(v) ? "a number"
         : cJSON_IsArray(v) ? "an array" : cJSON_IsObject(v) ? "an object" : "null";
}

/* An integral JSON number in [lo, hi]. */
static int number_to_int(const cJSON *v, const char *name, const char *key, double lo,
                         double hi, double *out, qp_err *err)
{
    if (!cJSON_IsNumber(v))
        return qp_fail(err, "%s: %s must be an integer, got %s", name, key, kind(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return qp_fail(err, "%s: %s must be an integer, got %.17g", name, key, d);
    if (d < lo || d > hi)
        return qp_fail(err, "%s: %s is %.17g, outside [%.0f, %.0f]", name, key, d, lo, hi);
    *out = d;
    return 0;
}

static int get_u32(const cJSON *root, const char *key, int required, uint32_t dflt,
                   uint32_t *out, const char *name, qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    double d;
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return qp_fail(err, "%s: %s is %s", name, key, v ? "null" : "missing");
        *out = dflt;
        return 0;
    }
    if (number_to_int(v, name, key, 0, UINT32_MAX, &d, err))
        return -1;
    *out = (uint32_t)d;
    return 0;
}

static int get_double(const cJSON *root, const char *key, double dflt, double *out,
                      const char *name, qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return qp_fail(err, "%s: %s must be a number, got %s", name, key, kind(v));
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *root, const char *key, bool dflt, bool *out,
                    const char *name, qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return qp_fail(err, "%s: %s must be true or false, got %s", name, key, kind(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A token id: absent, null or an empty list is -1; a list gives its first. */
static int get_token_id(const cJSON *root, const char *key, int32_t *out, const char *name,
                        qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    double d;
    if (cJSON_IsArray(v))
        v = v->child;
    if (!v || cJSON_IsNull(v)) {
        *out = -1;
        return 0;
    }
    if (number_to_int(v, name, key, 0, INT32_MAX, &d, err))
        return -1;
    *out = (int32_t)d;
    return 0;
}

/* Settings that would make the model compute something qpack does not. */
static int check_unsupported(const cJSON *root, const char *name, qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (v && !(cJSON_IsString(v) && strcmp(v->valuestring, "qwen3") == 0))
        return qp_fail(err, "%s: model_type is %s%.40s%s, not \"qwen3\"", name,
                       cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : kind(v),
                       cJSON_IsString(v) ? "\"" : "");
    v = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (v && !cJSON_IsNull(v))
        return qp_fail(err, "%s: rope_scaling is set; qpack does not implement RoPE scaling "
                       "(it must be null or absent)", name);
    v = cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window");
    if (cJSON_IsTrue(v))
        return qp_fail(err, "%s: use_sliding_window is true; qpack implements full attention "
                       "only", name);
    v = cJSON_GetObjectItemCaseSensitive(root, "attention_bias");
    if (cJSON_IsTrue(v))
        return qp_fail(err, "%s: attention_bias is true; Qwen3 as qpack implements it has no "
                       "attention biases", name);
    v = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (v && !(cJSON_IsString(v) && strcmp(v->valuestring, "silu") == 0))
        return qp_fail(err, "%s: hidden_act is not \"silu\"; qpack implements the SiLU MLP only",
                       name);
    return 0;
}

static int read_fields(const cJSON *root, const char *name, struct qwen3_config *c, qp_err *err)
{
    if (get_u32(root, "hidden_size", 1, 0, &c->hidden_size, name, err) ||
        get_u32(root, "intermediate_size", 1, 0, &c->intermediate_size, name, err) ||
        get_u32(root, "num_hidden_layers", 1, 0, &c->num_hidden_layers, name, err) ||
        get_u32(root, "num_attention_heads", 1, 0, &c->num_attention_heads, name, err) ||
        get_u32(root, "vocab_size", 1, 0, &c->vocab_size, name, err) ||
        get_u32(root, "num_key_value_heads", 0, c->num_attention_heads,
                &c->num_key_value_heads, name, err) ||
        get_u32(root, "max_position_embeddings", 0, 32768, &c->max_position_embeddings,
                name, err) ||
        get_double(root, "rope_theta", 10000.0, &c->rope_theta, name, err) ||
        get_double(root, "rms_norm_eps", 1e-6, &c->rms_norm_eps, name, err) ||
        get_bool(root, "tie_word_embeddings", false, &c->tie_word_embeddings, name, err) ||
        get_token_id(root, "bos_token_id", &c->bos_token_id, name, err) ||
        get_token_id(root, "eos_token_id", &c->eos_token_id, name, err))
        return -1;
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(root, "head_dim");
    if (hd && !cJSON_IsNull(hd))
        return get_u32(root, "head_dim", 1, 0, &c->head_dim, name, err);
    if (c->num_attention_heads && c->hidden_size % c->num_attention_heads)
        return qp_fail(err, "%s: head_dim is absent and hidden_size %u is not a multiple of "
                       "num_attention_heads %u", name, c->hidden_size, c->num_attention_heads);
    c->head_dim = c->num_attention_heads ? c->hidden_size / c->num_attention_heads : 0;
    return 0;
}

int hf_config_parse(const char *json, size_t len, const char *name,
                    struct qwen3_config *cfg, qp_err *err)
{
    memset(cfg, 0, sizeof(*cfg));
    if (memchr(json, 0, len))
        return qp_fail(err, "%s: contains a NUL byte", name);
    char *text = malloc(len + 1);
    if (!text)
        return qp_fail(err, "%s: out of memory", name);
    memcpy(text, json, len);
    text[len] = 0;
    /* Strict: the terminating NUL must follow the value, no trailing bytes. */
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, NULL, 1);
    free(text);
    int rc;
    if (!root)
        rc = qp_fail(err, "%s: not valid JSON", name);
    else if (!cJSON_IsObject(root))
        rc = qp_fail(err, "%s: not a JSON object", name);
    else if (json_refuse_ambiguous(root, json, len, name, err))
        rc = -1;
    else
        rc = check_unsupported(root, name, err) || read_fields(root, name, cfg, err) ||
             hf_config_validate(cfg, name, err) ? -1 : 0;
    cJSON_Delete(root);
    return rc;
}

int hf_config_load(const char *path, struct qwen3_config *cfg, qp_err *err)
{
    char *text;
    size_t size;
    memset(cfg, 0, sizeof(*cfg));
    if (fs_read_input(path, HF_CONFIG_MAX_BYTES, &text, &size, err))
        return -1;
    int rc = hf_config_parse(text, size, path, cfg, err);
    free(text);
    return rc;
}

/* -------------------------------------------------------------- validation */

static int check_size(uint32_t value, uint32_t max, const char *key, const char *name,
                      qp_err *err)
{
    if (value == 0)
        return qp_fail(err, "%s: %s is 0; it must be at least 1", name, key);
    if (value > max)
        return qp_fail(err, "%s: %s is %u, above the limit %u", name, key, value, max);
    return 0;
}

static int check_token(int32_t id, uint32_t vocab, const char *key, const char *name,
                       qp_err *err)
{
    if (id < -1 || (id >= 0 && (uint32_t)id >= vocab))
        return qp_fail(err, "%s: %s %d is outside the vocabulary (vocab_size %u)", name, key,
                       id, vocab);
    return 0;
}

int hf_config_validate(const struct qwen3_config *c, const char *name, qp_err *err)
{
    if (check_size(c->hidden_size, QWEN3_MAX_HIDDEN, "hidden_size", name, err) ||
        check_size(c->intermediate_size, QWEN3_MAX_INTERMEDIATE, "intermediate_size", name, err) ||
        check_size(c->num_hidden_layers, QWEN3_MAX_LAYERS, "num_hidden_layers", name, err) ||
        check_size(c->num_attention_heads, QWEN3_MAX_HEADS, "num_attention_heads", name, err) ||
        check_size(c->num_key_value_heads, QWEN3_MAX_HEADS, "num_key_value_heads", name, err) ||
        check_size(c->head_dim, QWEN3_MAX_HEAD_DIM, "head_dim", name, err) ||
        check_size(c->vocab_size, QWEN3_MAX_VOCAB, "vocab_size", name, err) ||
        check_size(c->max_position_embeddings, QWEN3_MAX_POSITIONS, "max_position_embeddings",
                   name, err))
        return -1;
    if (c->num_attention_heads % c->num_key_value_heads)
        return qp_fail(err, "%s: num_attention_heads %u is not a multiple of "
                       "num_key_value_heads %u", name, c->num_attention_heads,
                       c->num_key_value_heads);
    if (c->head_dim % 2)
        return qp_fail(err, "%s: head_dim %u is odd; RoPE rotates pairs of dimensions", name,
                       c->head_dim);
    if (!(isfinite(c->rope_theta) && c->rope_theta > 0))
        return qp_fail(err, "%s: rope_theta is %g; it must be finite and above 0", name,
                       c->rope_theta);
    if (!(isfinite(c->rms_norm_eps) && c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return qp_fail(err, "%s: rms_norm_eps is %g; it must be in (0, 1)", name,
                       c->rms_norm_eps);
    return check_token(c->bos_token_id, c->vocab_size, "bos_token_id", name, err) ||
           check_token(c->eos_token_id, c->vocab_size, "eos_token_id", name, err) ? -1 : 0;
}

/* ----------------------------------------------------------------- writing */

/* The shortest text that reads back as v; whole numbers without exponent,
 * like Hugging Face's files ("rope_theta": 1000000, "rms_norm_eps": 1e-06). */
static void format_double(double v, char out[40])
{
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, 40, "%.0f", v);
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(out, 40, "%.*g", digits, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static void format_token(int32_t id, char out[16])
{
    if (id < 0)
        snprintf(out, 16, "null");
    else
        snprintf(out, 16, "%d", id);
}

static int print_config(FILE *f, const struct qwen3_config *c, const char *torch_dtype)
{
    char theta[40], eps[40], bos[16], eos[16];
    format_double(c->rope_theta, theta);
    format_double(c->rms_norm_eps, eps);
    format_token(c->bos_token_id, bos);
    format_token(c->eos_token_id, eos);
    return fprintf(f,
        "{\n"
        "  \"architectures\": [\n    \"Qwen3ForCausalLM\"\n  ],\n"
        "  \"attention_bias\": false,\n"
        "  \"attention_dropout\": 0.0,\n"
        "  \"bos_token_id\": %s,\n"
        "  \"eos_token_id\": %s,\n"
        "  \"head_dim\": %u,\n"
        "  \"hidden_act\": \"silu\",\n"
        "  \"hidden_size\": %u,\n"
        "  \"initializer_range\": 0.02,\n"
        "  \"intermediate_size\": %u,\n"
        "  \"max_position_embeddings\": %u,\n"
        "  \"max_window_layers\": %u,\n"
        "  \"model_type\": \"qwen3\",\n"
        "  \"num_attention_heads\": %u,\n"
        "  \"num_hidden_layers\": %u,\n"
        "  \"num_key_value_heads\": %u,\n"
        "  \"rms_norm_eps\": %s,\n"
        "  \"rope_scaling\": null,\n"
        "  \"rope_theta\": %s,\n"
        "  \"sliding_window\": null,\n"
        "  \"tie_word_embeddings\": %s,\n"
        "  \"torch_dtype\": \"%s\",\n"
        "  \"transformers_version\": \"4.51.0\",\n"
        "  \"use_cache\": true,\n"
        "  \"use_sliding_window\": false,\n"
        "  \"vocab_size\": %u\n"
        "}\n",
        bos, eos, c->head_dim, c->hidden_size, c->intermediate_size,
        c->max_position_embeddings, c->num_hidden_layers, c->num_attention_heads,
        c->num_hidden_layers, c->num_key_value_heads, eps, theta,
        c->tie_word_embeddings ? "true" : "false", torch_dtype, c->vocab_size) < 0 ? -1 : 0;
}

int hf_config_write_dtype(const char *path, const struct qwen3_config *cfg,
                          const char *torch_dtype, qp_err *err)
{
    if (strcmp(torch_dtype, "bfloat16") && strcmp(torch_dtype, "float16") &&
        strcmp(torch_dtype, "float32"))
        return qp_fail(err, "%s: torch_dtype \"%.40s\" is not bfloat16, float16 or float32",
                       path, torch_dtype);
    if (hf_config_validate(cfg, path, err))
        return -1;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return qp_fail(err, "%s: out of memory", path);
    int printed = print_config(f, cfg, torch_dtype);
    int rc = fclose(f) || printed ? qp_fail(err, "%s: out of memory", path)
                                  : fs_write_file(path, text, len, NULL, err);
    free(text);
    return rc;
}

int hf_config_write(const char *path, const struct qwen3_config *cfg, qp_err *err)
{
    return hf_config_write_dtype(path, cfg, "bfloat16", err);
}
