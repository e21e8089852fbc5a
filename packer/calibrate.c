/* calibrate.c - per-input-column mean squares of every matrix, from the
 * float64 reference run over a calibration text (calibrate.h). */
#include "calibrate.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fsafe.h"
#include "qpk.h"
#include "tokenizer.h"

static int encode_text(const char *tokenizer_json, size_t tok_len, const char *text, size_t len,
                       const char *path, qp_tok_ids *ids, qp_err *err)
{
    qp_tok *tok;
    if (qp_tok_load_buffer(&tok, tokenizer_json, tok_len, "tokenizer.json", err))
        return -1;
    qp_err e = {{0}};
    int rc = qp_tok_encode(tok, text, len, ids, &e);
    qp_tok_free(tok);
    if (rc)
        return qp_fail(err, "%s: %s", path, e.msg);
    return 0;
}

/* Runs ids[0..n) through the reference, window by window, collecting. */
static int run_windows(struct calib *c, struct ref_model *m, const int32_t *ids, uint64_t n, const char *path,
                       calib_progress_fn *progress, void *arg, qp_err *err)
{
    uint32_t vocab = ref_config(m)->vocab_size;
    for (uint64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= vocab)
            return qp_fail(err, "%s: token %" PRIu64 " has id %d, outside the model's vocabulary of %u", path, i,
                           ids[i], vocab);
        if (i % c->window == 0)
            c->windows++;
        if (ref_forward(m, (uint32_t)ids[i], (uint32_t)(i % c->window), NULL, err))
            return -1;
        if (progress)
            progress(arg, i + 1, n);
    }
    return 0;
}

/* Copies the reference's sums into c as means. */
static int take_means(struct calib *c, const struct ref_model *m, qp_err *err)
{
    const struct qwen3_config *cfg = ref_config(m);
    c->n_layers = cfg->num_hidden_layers;
    c->widths[REF_IN_ATTN] = c->widths[REF_IN_MLP] = c->widths[REF_IN_HEAD] = cfg->hidden_size;
    c->widths[REF_IN_O] = cfg->num_attention_heads * cfg->head_dim;
    c->widths[REF_IN_DOWN] = cfg->intermediate_size;
    for (int in = 0; in < REF_N_INPUTS; in++) {
        uint32_t layers = in == REF_IN_HEAD ? 1 : c->n_layers;
        if (!(c->mean_sq[in] = malloc(sizeof(double) * layers * c->widths[in])))
            return qp_fail(err, "out of memory");
        for (uint32_t l = 0; l < layers; l++) {
            uint64_t count;
            const double *sum = ref_input_sumsq(m, in, l, &count);
            for (uint32_t j = 0; j < c->widths[in]; j++)
                c->mean_sq[in][(uint64_t)l * c->widths[in] + j] = sum[j] / (double)count;
        }
    }
    return 0;
}

int calib_run(struct calib *c, const char *model_dir, const char *tokenizer_json, size_t tok_len,
              const char *text_path, uint64_t max_tokens, calib_progress_fn *progress, void *arg, qp_err *err)
{
    memset(c, 0, sizeof *c);
    char *text = NULL;
    size_t len = 0;
    qp_tok_ids ids = {0};
    struct ref_model *m = NULL;
    int rc = fs_read_input(text_path, CALIB_TEXT_MAX, &text, &len, err);
    if (!rc) {
        c->text_bytes = len;
        c->text_xxh3 = XXH3_64bits(text, len);
        rc = encode_text(tokenizer_json, tok_len, text, len, text_path, &ids, err);
    }
    if (!rc && ids.len < 2)
        rc = qp_fail(err, "%s: %zu token(s); calibration needs at least 2", text_path, ids.len);
    if (!rc)
        rc = ref_open(&m, model_dir, 0, err);
    if (!rc) {
        uint32_t ctx = ref_config(m)->max_position_embeddings;
        c->window = ctx < CALIB_WINDOW ? ctx : CALIB_WINDOW;
        c->tokens = ids.len < max_tokens ? ids.len : max_tokens;
        ref_close(m);
        m = NULL;
        rc = ref_open(&m, model_dir, c->window, err) || ref_collect_inputs(m, err) ||
             run_windows(c, m, ids.v, c->tokens, text_path, progress, arg, err) || take_means(c, m, err);
    }
    ref_close(m);
    qp_tok_ids_free(&ids);
    free(text);
    if (rc)
        calib_free(c);
    return rc ? -1 : 0;
}

const double *calib_mean_sq(const struct calib *c, unsigned role, unsigned layer)
{
    enum ref_input in;
    switch (role) {
    case QPK_ROLE_Q: case QPK_ROLE_K: case QPK_ROLE_V: in = REF_IN_ATTN; break;
    case QPK_ROLE_O: in = REF_IN_O; break;
    case QPK_ROLE_GATE: case QPK_ROLE_UP: in = REF_IN_MLP; break;
    case QPK_ROLE_DOWN: in = REF_IN_DOWN; break;
    case QPK_ROLE_LM_HEAD: case QPK_ROLE_EMBED: return c->mean_sq[REF_IN_HEAD];
    default: return NULL;
    }
    if (!c->mean_sq[in] || layer >= c->n_layers)
        return NULL;
    return c->mean_sq[in] + (uint64_t)layer * c->widths[in];
}

void calib_free(struct calib *c)
{
    for (int in = 0; in < REF_N_INPUTS; in++)
        free(c->mean_sq[in]);
    memset(c, 0, sizeof *c);
}
