/* embed.c - qpack_embed: an embedding model's vector for a text, as
 * sentence-transformers computes Qwen3-Embedding's (Transformer, Pooling,
 * Normalize): the final norm's output pooled over the tokens, then scaled
 * to unit length.
 *
 * bpf and emu give the residual stream after the last layer exactly
 * (qpack_feed_hidden); the final norm is applied here in double, with the
 * container's scales. At the last token alone its 1 / rms factor is one
 * positive number, which the unit length takes out again, so only the
 * scales matter; the mean needs each token's own factor. The reference
 * gives its final-normed state itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* the final norm's output for the state just fed, into v[hidden] */
static void final_normed(const qpack_session *s, const double *resid, bool with_rms, double *v)
{
    const qpack_model *m = s->m;
    uint32_t n = m->info.hidden;
    if (s->ref) {
        memcpy(v, ref_hidden_after(s->ref, m->info.n_layers), n * sizeof *v);
        return;
    }
    double ss = 0;
    for (uint32_t i = 0; with_rms && i < n; i++)
        ss += resid[i] * resid[i];
    double inv = with_rms ? 1 / sqrt(ss / n + m->info.rms_eps) : 1;
    for (uint32_t i = 0; i < n; i++)
        v[i] = resid[i] * inv * m->final_norm[i];
}

int qpack_embed(qpack_session *s, const int32_t *tokens, size_t n, float *out, qpack_error *err)
{
    const qpack_model_info *info = &s->m->info;
    if (info->pooling == QPACK_POOLING_NONE)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "%s is not an embedding model (its container has no pooling)",
                           info->path);
    if (!tokens || !n || !out)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no tokens to embed, or no buffer for the embedding");
    if (qpack_session_rewind(s, 0, err) || qp_lib_check_feed(s, tokens, n, err))
        return -1;
    uint32_t h = info->hidden;
    double *hidden = malloc((size_t)info->n_layers * h * sizeof *hidden), *v = malloc(h * sizeof *v),
           *sum = calloc(h, sizeof *sum);
    int rc = hidden && v && sum ? 0 : qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    bool mean = info->pooling == QPACK_POOLING_MEAN;
    /* the last token's pooling feeds the others in blocks; the mean, each alone */
    size_t first = mean ? 0 : n - 1;
    if (!rc && first)
        rc = qpack_feed(s, tokens, first, err);
    const double *last = hidden ? hidden + (size_t)(info->n_layers - 1) * h : NULL;
    for (size_t t = first; !rc && t < n; t++) {
        rc = qpack_feed_hidden(s, tokens[t], hidden, err);
        if (rc)
            break;
        final_normed(s, last, mean, v);
        for (uint32_t i = 0; i < h; i++)
            sum[i] += v[i];
    }
    double norm = 0;
    for (uint32_t i = 0; !rc && i < h; i++)
        norm += sum[i] * sum[i];
    norm = sqrt(norm);
    for (uint32_t i = 0; !rc && i < h; i++)
        out[i] = (float)(norm > 0 ? sum[i] / norm : 0);
    free(hidden);
    free(v);
    free(sum);
    return rc;
}
