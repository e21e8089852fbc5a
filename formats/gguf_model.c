/* gguf_model.c - a Qwen3 GGUF seen as a checkpoint (gguf_model.h): its
 * hyperparameters from the qwen3.* keys, its tensors under their Hugging
 * Face names with Hugging Face shapes, read in place from the GGUF's maps. */
#include "gguf_model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen3_names.h"

static int arch_is_qwen3(const struct gguf *g, const char *name, qp_err *err)
{
    const char *arch;
    size_t n;
    if (gguf_get_name(g, "general.architecture", false, &arch, &n, err))
        return -1;
    if (n != 5 || memcmp(arch, "qwen3", 5))
        return qp_fail(err, "%s: general.architecture is \"%.*s\"; qpack packs dense Qwen3 (\"qwen3\")", name,
                       (int)(n > 64 ? 64 : n), arch);
    const char *rope;
    if (gguf_get_name(g, "qwen3.rope.scaling.type", true, &rope, &n, err) < 0)
        return -1;
    if (gguf_find_kv(g, "qwen3.rope.scaling.type") && !(n == 4 && !memcmp(rope, "none", 4)))
        return qp_fail(err, "%s: qwen3.rope.scaling.type is \"%.*s\": qpack runs RoPE unscaled", name,
                       (int)(n > 64 ? 64 : n), rope);
    return 0;
}

/* the dimensions without trailing ones: ggml reads [64, 1] as [64] */
static uint32_t dims_of(const struct gguf_tensor *t)
{
    uint32_t n = t->n_dims;
    while (n > 1 && t->ne[n - 1] == 1)
        n--;
    return n;
}

/* a token id key: absent is -1; refused here with its own value when not
 * a row of the embedding (an int32 could not carry it to the check) */
static int token_id(const struct gguf *g, const char *key, uint32_t vocab_size, int32_t *id, qp_err *err)
{
    uint32_t v = 0;
    int rc = gguf_get_u32(g, key, true, &v, err);
    if (rc < 0)
        return -1;
    if (!rc && (v >= vocab_size || v > INT32_MAX))
        return qp_fail(err, "%s: %s %u is outside the vocabulary (token_embd.weight has %u rows)", g->name, key, v,
                       vocab_size);
    *id = rc ? -1 : (int32_t)v;
    return 0;
}

int gguf_config(const struct gguf *g, struct qwen3_config *c, qp_err *err)
{
    const char *name = g->name;
    memset(c, 0, sizeof *c);
    if (arch_is_qwen3(g, name, err) || gguf_get_u32(g, "qwen3.embedding_length", false, &c->hidden_size, err) ||
        gguf_get_u32(g, "qwen3.feed_forward_length", false, &c->intermediate_size, err) ||
        gguf_get_u32(g, "qwen3.block_count", false, &c->num_hidden_layers, err) ||
        gguf_get_u32(g, "qwen3.attention.head_count", false, &c->num_attention_heads, err))
        return -1;
    c->num_key_value_heads = c->num_attention_heads;
    c->head_dim = c->num_attention_heads ? c->hidden_size / c->num_attention_heads : 0;
    c->max_position_embeddings = 32768;
    c->rope_theta = 10000;
    c->rms_norm_eps = 1e-6;
    uint32_t value_length = 0;
    if (gguf_get_u32(g, "qwen3.attention.head_count_kv", true, &c->num_key_value_heads, err) < 0 ||
        gguf_get_u32(g, "qwen3.attention.key_length", true, &c->head_dim, err) < 0 ||
        gguf_get_u32(g, "qwen3.attention.value_length", true, &value_length, err) < 0 ||
        gguf_get_u32(g, "qwen3.context_length", true, &c->max_position_embeddings, err) < 0 ||
        gguf_get_f64(g, "qwen3.rope.freq_base", true, &c->rope_theta, err) < 0 ||
        gguf_get_f64(g, "qwen3.attention.layer_norm_rms_epsilon", true, &c->rms_norm_eps, err) < 0)
        return -1;
    if (value_length && value_length != c->head_dim)
        return qp_fail(err, "%s: qwen3.attention.value_length %u differs from key_length %u", name, value_length,
                       c->head_dim);
    uint32_t rope_dims = c->head_dim;
    if (gguf_get_u32(g, "qwen3.rope.dimension_count", true, &rope_dims, err) < 0)
        return -1;
    if (rope_dims != c->head_dim)
        return qp_fail(err, "%s: qwen3.rope.dimension_count %u is not the head size %u: qpack rotates whole heads "
                       "(partial RoPE is not implemented)", name, rope_dims, c->head_dim);
    const struct gguf_tensor *embed = gguf_find_tensor(g, "token_embd.weight");
    if (!embed || dims_of(embed) != 2)
        return qp_fail(err, "%s: no 2-dimensional tensor token_embd.weight", name);
    if (embed->ne[1] > UINT32_MAX)
        return qp_fail(err, "%s: token_embd.weight has %" PRIu64 " rows", name, embed->ne[1]);
    c->vocab_size = (uint32_t)embed->ne[1];
    if (token_id(g, "tokenizer.ggml.bos_token_id", c->vocab_size, &c->bos_token_id, err) ||
        token_id(g, "tokenizer.ggml.eos_token_id", c->vocab_size, &c->eos_token_id, err))
        return -1;
    c->tie_word_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    return hf_config_validate(c, name, err);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

/* one GGUF tensor under its Hugging Face name and shape */
static int view_tensor(const struct gguf *g, const struct gguf_tensor *s, struct st_tensor *t, qp_err *err)
{
    char hf[96];
    unsigned role, layer;
    bool known = qwen3_gguf_tensor_role(s->name, &role, &layer) && qwen3_tensor_name(hf, sizeof hf, role, layer);
    if (!st_dtype_from_ggml(s->type, &t->dtype))
        return qp_fail(err, "%s: tensor %s has type %s", g->name, s->name, gguf_type_name(s->type));
    if (!(t->name = strdup(known ? hf : s->name)))
        return qp_fail(err, "out of memory");
    t->ndim = dims_of(s);
    for (uint32_t d = 0; d < t->ndim; d++)
        t->shape[d] = s->ne[t->ndim - 1 - d];
    t->numel = s->numel;
    t->data = s->data;
    t->nbytes = s->nbytes;
    t->file_index = s->file;
    return 0;
}

int gguf_checkpoint(struct gguf *g, struct st_model *m, qp_err *err)
{
    memset(m, 0, sizeof *m);
    m->tensors = calloc(g->n_tensors + 1, sizeof *m->tensors);
    if (!m->tensors)
        return qp_fail(err, "out of memory");
    for (uint32_t i = 0; i < g->n_tensors; i++, m->n_tensors++)
        if (view_tensor(g, &g->tensors[i], &m->tensors[i], err)) {
            st_close(m);
            return -1;
        }
    qsort(m->tensors, m->n_tensors, sizeof *m->tensors, cmp_name);
    for (uint32_t i = 1; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, m->tensors[i - 1].name)) {
            int rc = qp_fail(err, "%s: two tensors are named %s", g->name, m->tensors[i].name);
            st_close(m);
            return rc;
        }
    /* the maps move to the model, which unmaps them when closed */
    m->files = g->files;
    m->n_files = g->n_files;
    g->files = NULL;
    g->n_files = 0;
    return 0;
}
