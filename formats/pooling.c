/* pooling.c - 1_Pooling/config.json, strictly (pooling.h). */
#include "pooling.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "json_strict.h"

static const struct {
    const char *key;
    enum qp_pooling mode;       /* QP_POOLING_NONE: a mode qpack does not compute */
} modes[] = {
    {"pooling_mode_lasttoken", QP_POOLING_LAST},   {"pooling_mode_mean_tokens", QP_POOLING_MEAN},
    {"pooling_mode_cls_token", QP_POOLING_NONE},   {"pooling_mode_max_tokens", QP_POOLING_NONE},
    {"pooling_mode_mean_sqrt_len_tokens", QP_POOLING_NONE}, {"pooling_mode_weightedmean_tokens", QP_POOLING_NONE},
};

static int read_modes(const cJSON *root, const char *name, uint32_t hidden, enum qp_pooling *out, qp_err *err)
{
    const char *chosen = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, modes[i].key);
        if (v && !cJSON_IsBool(v))
            return qp_fail(err, "%s: \"%s\" must be true or false", name, modes[i].key);
        if (!cJSON_IsTrue(v))
            continue;
        if (chosen)
            return qp_fail(err, "%s: both \"%s\" and \"%s\" are true: one pooling at a time", name, chosen,
                           modes[i].key);
        chosen = modes[i].key;
        if (modes[i].mode == QP_POOLING_NONE)
            return qp_fail(err, "%s: \"%s\" is not supported (lasttoken and mean_tokens are)", name, modes[i].key);
        *out = modes[i].mode;
    }
    if (!chosen)
        return qp_fail(err, "%s: no pooling_mode_* is true", name);
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(root, "word_embedding_dimension");
    if (dim && !(cJSON_IsNumber(dim) && dim->valuedouble == (double)hidden))
        return qp_fail(err, "%s: \"word_embedding_dimension\" must be the hidden size, %u", name, hidden);
    return 0;
}

int pooling_parse(const char *text, size_t len, const char *name, uint32_t hidden, enum qp_pooling *out, qp_err *err)
{
    *out = QP_POOLING_NONE;
    cJSON *root = json_parse_object(text, len, name, err);
    int rc = root ? read_modes(root, name, hidden, out, err) : -1;
    cJSON_Delete(root);
    if (rc)
        *out = QP_POOLING_NONE;
    return rc;
}

const char *pooling_name(enum qp_pooling p)
{
    return p == QP_POOLING_LAST ? "last" : p == QP_POOLING_MEAN ? "mean" : "none";
}
