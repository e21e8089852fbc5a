/* gen_config.c - generation_config.json, strictly (gen_config.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "gen_config.h"
#include "json_strict.h"

static int number(const cJSON *root, const char *key, double lo, bool lo_open, double hi, const char *name,
                  double *out, qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return qp_fail(err, "%s: \"%s\" must be a number", name, key);
    double x = v->valuedouble;
    if (x < lo || (lo_open && x == lo) || x > hi)
        return qp_fail(err, "%s: \"%s\" is %g: it must be in %c%g, %g]", name, key, x, lo_open ? '(' : '[', lo, hi);
    *out = x;
    return 0;
}

static int token_id(const cJSON *v, const char *name, uint32_t vocab, int32_t *out, qp_err *err)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= vocab ||
        v->valuedouble != floor(v->valuedouble))
        return qp_fail(err, "%s: \"eos_token_id\" holds %s: not a token id (0 to %u)", name,
                       cJSON_IsNumber(v) ? "a number out of range" : "a value that is not a number", vocab - 1);
    *out = (int32_t)v->valuedouble;
    return 0;
}

static int eos_ids(const cJSON *root, const char *name, uint32_t vocab, struct qwen3_gen_config *g, qp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsArray(v)) {
        g->n_eos = 1;
        return token_id(v, name, vocab, &g->eos[0], err);
    }
    if (cJSON_GetArraySize(v) > QWEN3_GEN_EOS_MAX)
        return qp_fail(err, "%s: \"eos_token_id\" lists %d ids: at most %d", name, cJSON_GetArraySize(v),
                       QWEN3_GEN_EOS_MAX);
    for (const cJSON *e = v->child; e; e = e->next)
        if (token_id(e, name, vocab, &g->eos[g->n_eos++], err))
            return -1;
    return 0;
}

static int read_fields(const cJSON *root, const char *name, uint32_t vocab, struct qwen3_gen_config *g, qp_err *err)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "do_sample");
    if (s && !cJSON_IsNull(s) && !cJSON_IsBool(s))
        return qp_fail(err, "%s: \"do_sample\" must be true or false", name);
    g->do_sample = cJSON_IsTrue(s);
    double top_k = g->top_k;
    if (number(root, "temperature", 0, false, 100, name, &g->temperature, err) ||
        number(root, "top_k", 0, false, vocab, name, &top_k, err) ||
        number(root, "top_p", 0, true, 1, name, &g->top_p, err) ||
        number(root, "min_p", 0, false, 1, name, &g->min_p, err) ||
        number(root, "repetition_penalty", 0, true, 100, name, &g->repetition_penalty, err))
        return -1;
    if (top_k != floor(top_k))
        return qp_fail(err, "%s: \"top_k\" is %g: it must be a whole number", name, top_k);
    g->top_k = (uint32_t)top_k;
    return eos_ids(root, name, vocab, g, err);
}

int gen_config_parse(const char *text, size_t len, const char *name, uint32_t vocab, struct qwen3_gen_config *out,
                     qp_err *err)
{
    *out = (struct qwen3_gen_config){.temperature = 1, .top_k = 50, .top_p = 1, .repetition_penalty = 1};
    cJSON *root = json_parse_object(text, len, name, err);
    int rc = root ? read_fields(root, name, vocab, out, err) : -1;
    cJSON_Delete(root);
    return rc ? -1 : 0;
}
