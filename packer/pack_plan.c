/* pack_plan.c - which tensors a container holds: every Qwen3 tensor of the
 * checkpoint with its role, shape, source and encoding, the tokenizer
 * files, and lm_head tied or not (packer.h). */
#include "packer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "fsafe.h"
#include "gen_config.h"
#include "pooling.h"
#include "int8.h"
#include "json_strict.h"
#include "q24.h"
#include "qwen3_names.h"
#include "tokenizer.h"

/* The largest tokenizer.json or tokenizer_config.json read (the Qwen3
 * tokenizer.json is 11 MB). */
#define TOKENIZER_FILE_MAX (64u << 20)

/* Reads dir/name whole; a missing optional file leaves *buf NULL. */
static int read_text(const char *dir, const char *name, bool required, char **buf, size_t *len, qp_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *buf = NULL;
    *len = 0;
    if (!required && access(path, F_OK) != 0 && errno == ENOENT)
        return 0;
    return fs_read_input(path, TOKENIZER_FILE_MAX, buf, len, err);
}

/* tokenizer.json must load in qrun's own tokenizer (the message is the
 * loader's); the chat template is lifted out of tokenizer_config.json so the
 * runtime need not parse that file, whose keys must be unique (Hugging Face
 * would read the last of two). */
int pack_load_tokenizer_files(struct packer *p, qp_err *err)
{
    char path[4096];
    if (read_text(p->opt.src, "tokenizer.json", false, &p->tokenizer, &p->tokenizer_len, err) ||
        read_text(p->opt.src, "tokenizer_config.json", false, &p->tokenizer_config,
                  &p->tokenizer_config_len, err) ||
        read_text(p->opt.src, "generation_config.json", false, &p->generation_config,
                  &p->generation_config_len, err) ||
        read_text(p->opt.src, "1_Pooling/config.json", false, &p->pooling, &p->pooling_len, err))
        return -1;
    if (p->generation_config) {
        struct qwen3_gen_config g;
        snprintf(path, sizeof path, "%s/generation_config.json", p->opt.src);
        if (gen_config_parse(p->generation_config, p->generation_config_len, path, p->hf.vocab_size, &g, err))
            return -1;
    }
    if (p->pooling) {
        enum qp_pooling mode;
        snprintf(path, sizeof path, "%s/1_Pooling/config.json", p->opt.src);
        if (pooling_parse(p->pooling, p->pooling_len, path, p->hf.hidden_size, &mode, err))
            return -1;
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", p->opt.src);
    if (p->tokenizer && pack_check_tokenizer(p, path, err))
        return -1;
    if (p->tokenizer_config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", p->opt.src);
        cJSON *j = json_parse_object(p->tokenizer_config, p->tokenizer_config_len, path, err);
        int rc = j ? 0 : -1;
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
        if (!rc && cJSON_IsString(tpl) && !(p->chat_template = strdup(tpl->valuestring)))
            rc = qp_fail(err, "out of memory");
        cJSON_Delete(j);
        if (rc)
            return -1;
    }
    return 0;
}

int pack_check_tokenizer(const struct packer *p, const char *name, qp_err *err)
{
    qp_tok *tok;
    if (qp_tok_load_buffer(&tok, p->tokenizer, p->tokenizer_len, name, err))
        return -1;
    /* every id the tokenizer can give must be a row of the model's
     * vocabulary, or the container runs only some texts */
    int32_t ids = qp_tok_vocab_size(tok);
    qp_tok_free(tok);
    if ((uint32_t)ids > p->hf.vocab_size)
        return qp_fail(err, "%s has ids up to %d, past the model's vocab_size of %u: text with those tokens "
                       "could not run", name, ids - 1, p->hf.vocab_size);
    return 0;
}

static int check_source(const struct packer *p, const struct st_tensor *s, uint32_t rows, uint32_t cols,
                        bool vector, qp_err *err)
{
    bool ok = vector ? (s->ndim == 1 && s->shape[0] == cols)
                     : (s->ndim == 2 && s->shape[0] == rows && s->shape[1] == cols);
    if (!ok) {
        char shape[128] = "";
        for (uint32_t d = 0; d < s->ndim && d < 4; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRIu64, d ? ", " : "",
                     s->shape[d]);
        if (vector)
            return qp_fail(err, "%s: tensor %s has shape [%s], config.json implies [%u]", p->opt.src, s->name,
                           shape, cols);
        return qp_fail(err, "%s: tensor %s has shape [%s], config.json implies [%u, %u]", p->opt.src,
                       s->name, shape, rows, cols);
    }
    return 0;
}

/* The embedding and lm_head are stored once when they are the same bytes. */
int pack_resolve_tie(struct packer *p, qp_err *err)
{
    const struct st_tensor *embed = st_find(&p->model, "model.embed_tokens.weight");
    const struct st_tensor *head = st_find(&p->model, "lm_head.weight");
    bool same = embed && head && embed->dtype == head->dtype && embed->nbytes == head->nbytes;
    /* compared in pieces, each released once compared, so the two 300 MB
     * tensors (Qwen3-0.6B) never become resident together */
    for (uint64_t at = 0; same && at < embed->nbytes; at += RELEASE_BYTES) {
        uint64_t n = embed->nbytes - at < RELEASE_BYTES ? embed->nbytes - at : RELEASE_BYTES;
        size_t elem = st_dtype_size(embed->dtype); /* 0 for a GGUF's blocks: let go of below */
        same = memcmp(embed->data + at, head->data + at, n) == 0;
        if (elem) {
            st_release_part(&p->model, embed, at / elem, n / elem);
            st_release_part(&p->model, head, at / elem, n / elem);
        }
    }
    if (head) {
        st_release(&p->model, head);
        if (embed)
            st_release(&p->model, embed);
    }
    if (p->hf.tie_word_embeddings && head && !same)
        return qp_fail(err, "%s: config.json ties the embeddings but lm_head.weight differs from "
                            "model.embed_tokens.weight", p->opt.src);
    if (!p->hf.tie_word_embeddings && !head)
        return qp_fail(err, "%s: config.json does not tie the embeddings and there is no lm_head.weight",
                       p->opt.src);
    p->deduped_lm_head = head && same;
    if (same || !head)
        p->cfg.flags |= QPK_CONFIG_TIED;
    return 0;
}

static int plan_one(struct packer *p, unsigned role, unsigned layer, qp_err *err)
{
    struct planned *pl = &p->plan[p->n_plan];
    struct qpk_tensor *t = &pl->t;
    memset(pl, 0, sizeof *pl);
    if (!qwen3_tensor_name(t->name, sizeof t->name, role, layer))
        return qp_fail(err, "internal: no name for role %u", role);
    pl->src = st_find(&p->model, t->name);
    if (!pl->src)
        return qp_fail(err, "%s: missing tensor %s", p->opt.src, t->name);
    t->role = (uint16_t)role;
    t->layer = (uint16_t)(qpk_role_is_layer(role) ? layer : QPK_NO_LAYER);
    qpk_role_shape(&p->cfg, role, &t->rows, &t->cols);
    bool norm = qpk_role_is_norm(role);
    if (check_source(p, pl->src, t->rows, t->cols, norm, err))
        return -1;
    /* quantised matrices get their group, stride and exponent in pack_settle_matrices() */
    t->encoding = norm                ? QPK_ENC_I32S
                  : p->by_source_type ? pack_gguf_encoding(p, pl->src)
                                      : precision_encoding(&p->opt.prec, t->name, role, layer, p->cfg.n_layers);
    if (t->encoding == QPK_ENC_Q24 && st_dtype_block(pl->src->dtype) > 1)
        return qp_fail(err, "%s: tensor %s is %s: --format q24 is for float checkpoints (pack it int8 or int4)",
                       p->opt.src, t->name, st_dtype_name(pl->src->dtype));
    t->scale_exp = Q24_FRAC_BITS; /* norms: set from their values when written */
    t->rows_per_block = norm ? 1 : QPK_Q24_TILE_ROWS;
    t->row_stride = norm ? ((uint64_t)t->cols * 4 + 7) / 8 * 8 : (uint64_t)t->cols * 4 * QPK_Q24_TILE_ROWS;
    if (!norm && (t->rows % QPK_Q24_TILE_ROWS || t->cols % QPK_Q24_TILE_COLS))
        return qp_fail(err, "%s: tensor %s is [%u, %u]; the kernels' %u-row blocks need rows divisible by %u "
                       "and columns by %u", p->opt.src, t->name, t->rows, t->cols, QPK_Q24_TILE_ROWS,
                       QPK_Q24_TILE_ROWS, QPK_Q24_TILE_COLS);
    p->n_plan++;
    return 0;
}

/* The group of every i8g, i6g and i7g matrix: --group for --format int8; in an
 * int4 container PRECISION_INT8_GROUP, halved while it does not divide some
 * such matrix's columns (small test models; every matrix's columns are a
 * multiple of 16, so it stops at QPK_GROUP_MIN at the latest). */
static uint32_t choose_int8_group(const struct packer *p)
{
    if (p->opt.prec.format == PACK_INT8 || p->by_source_type)
        return p->opt.group; /* a GGUF's: 32, the blocks of Q8_0 and (twice) of Q6_K's scales */
    uint32_t g = PRECISION_INT8_GROUP;
    for (uint32_t i = 0; i < p->n_plan; i++)
        while (qpk_kernel_encoding(p->plan[i].t.encoding) == QPK_ENC_I8G && g > QPK_GROUP_MIN && p->plan[i].t.cols % g)
            g /= 2;
    return g;
}

/* Group, stride and exponent of one quantised matrix (the exponent takes a
 * pass over the source, which is then let go until it is written). The
 * int4 preset's i4g matrices take super-blocks (i4k) where the columns
 * hold whole ones. */
static int settle_quantised(struct packer *p, struct planned *pl, qp_err *err)
{
    struct qpk_tensor *t = &pl->t;
    bool int8 = qpk_kernel_encoding(t->encoding) == QPK_ENC_I8G;
    t->group_size = int8 ? p->i8_group : p->opt.group;
    if (t->cols % t->group_size)
        return qp_fail(err, "%s: tensor %s has %u columns, not a multiple of the %s group %u", p->opt.src, t->name,
                       t->cols, int8 ? "int8" : "int4", t->group_size);
    /* a GGUF's Q4_0 and Q4_1 stay groups of their own (i4g holds them exactly), its Q4_K super-blocks */
    bool supers = p->by_source_type ? pl->src->dtype == ST_Q4_K : p->opt.prec.format == PACK_INT4;
    if (t->encoding == QPK_ENC_I4G && supers && t->cols % (t->group_size * QPK_I4K_GROUPS) == 0)
        t->encoding = QPK_ENC_I4K;
    t->row_stride = qpk_block_bytes(t->encoding, t->cols, t->group_size);
    t->scale_exp = quant_tensor_exponent(&p->model, pl->src);
    st_release(&p->model, pl->src);
    return 0;
}

/* llama.cpp's use_more_bits: the layers whose attn_v and ffn_down Q4_K_M
 * keeps at 6 bits (the first and last eighth, every third between). */
static bool q4_k_m_more_bits(unsigned layer, unsigned n_layers)
{
    unsigned eighth = n_layers / 8;
    return layer < eighth || layer >= 7 * n_layers / 8 || (layer - eighth) % 3 == 2;
}

/* The bytes llama.cpp's Q4_K_M gives a tied model's matrices: Q6_K (210
 * bytes per 256 weights) for the embedding, which is the vocabulary
 * projection, and for v_proj and down_proj where use_more_bits says so,
 * Q4_K (144 bytes per 256) for the rest. */
static uint64_t q4_k_m_bytes(const struct packer *p)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < p->n_plan; i++) {
        const struct qpk_tensor *t = &p->plan[i].t;
        if (t->encoding == QPK_ENC_I32S)
            continue;
        bool six = t->role == QPK_ROLE_EMBED ||
                   ((t->role == QPK_ROLE_V || t->role == QPK_ROLE_DOWN) && q4_k_m_more_bits(t->layer, p->cfg.n_layers));
        bytes += (uint64_t)t->rows * t->cols * (six ? 210 : 144) / 256;
    }
    return bytes;
}

/* The int4 preset's embedding: i6g, or i7g where it holds most of the
 * matrices' weights (a tied model with a vocabulary large for its layers)
 * or where the matrices stay within the bytes Q4_K_M gives them with it
 * (a small model, whose few layers get none of the preset's int8
 * down_proj). There the embedding carries the largest logit errors and
 * its seventh bit halves them; Qwen3's own models (0.6B: the embedding a
 * quarter of the weights, with seven bits the matrices 22 MB over Q4_K_M's)
 * keep i6g and its faster vocabulary projection. A --keep rule for the
 * embedding decides alone. */
static void settle_int4_embedding(struct packer *p)
{
    if (p->opt.prec.format != PACK_INT4 || p->by_source_type)
        return;
    struct planned *embed = NULL;
    uint64_t weights = 0, bytes = 0;
    for (uint32_t i = 0; i < p->n_plan; i++) {
        struct planned *pl = &p->plan[i];
        if (pl->t.encoding == QPK_ENC_I32S)
            continue;
        if (pl->t.role == QPK_ROLE_LM_HEAD)
            return;
        if (pl->t.role == QPK_ROLE_EMBED)
            embed = pl;
        weights += (uint64_t)pl->t.rows * pl->t.cols;
        bytes += (uint64_t)(pl->t.rows / pl->t.rows_per_block) * pl->t.row_stride;
    }
    if (!embed || embed->t.encoding != QPK_ENC_I6G || precision_kept(&p->opt.prec, embed->t.name))
        return;
    uint64_t blocks = embed->t.rows / embed->t.rows_per_block;
    uint64_t stride = qpk_block_bytes(QPK_ENC_I7G, embed->t.cols, embed->t.group_size);
    bool most = 2 * (uint64_t)embed->t.rows * embed->t.cols > weights;
    if (!most && bytes + blocks * (stride - embed->t.row_stride) > q4_k_m_bytes(p))
        return;
    embed->t.encoding = QPK_ENC_I7G;
    embed->t.row_stride = stride;
}

/* After planning: every --keep rule matched, and every quantised matrix
 * has its layout. */
int pack_settle_matrices(struct packer *p, qp_err *err)
{
    const struct keep_rule *unmatched = precision_unmatched(&p->opt.prec);
    if (unmatched)
        return qp_fail(err, "%s: --keep '%s': no matrix matches '%s'", p->opt.src, unmatched->arg,
                       unmatched->pattern);
    p->i8_group = choose_int8_group(p);
    for (uint32_t i = 0; i < p->n_plan; i++) {
        unsigned enc = qpk_kernel_encoding(p->plan[i].t.encoding);
        if ((enc == QPK_ENC_I8G || enc == QPK_ENC_I4G) && settle_quantised(p, &p->plan[i], err))
            return -1;
    }
    settle_int4_embedding(p);
    return 0;
}

int pack_plan_tensors(struct packer *p, qp_err *err)
{
    uint32_t max = 3 + 11 * p->cfg.n_layers;
    p->plan = calloc(max, sizeof *p->plan);
    if (!p->plan)
        return qp_fail(err, "out of memory");
    static const unsigned layer_roles[] = {
        QPK_ROLE_ATTN_NORM, QPK_ROLE_Q, QPK_ROLE_K, QPK_ROLE_V, QPK_ROLE_Q_NORM, QPK_ROLE_K_NORM,
        QPK_ROLE_O, QPK_ROLE_MLP_NORM, QPK_ROLE_GATE, QPK_ROLE_UP, QPK_ROLE_DOWN,
    };
    if (plan_one(p, QPK_ROLE_EMBED, QPK_NO_LAYER, err))
        return -1;
    for (uint32_t l = 0; l < p->cfg.n_layers; l++)
        for (size_t r = 0; r < sizeof layer_roles / sizeof *layer_roles; r++)
            if (plan_one(p, layer_roles[r], l, err))
                return -1;
    if (plan_one(p, QPK_ROLE_FINAL_NORM, QPK_NO_LAYER, err))
        return -1;
    if (!(p->cfg.flags & QPK_CONFIG_TIED) && plan_one(p, QPK_ROLE_LM_HEAD, QPK_NO_LAYER, err))
        return -1;
    return 0;
}

/* Tensors in the checkpoint that a Qwen3 forward pass does not use. */
void pack_warn_unused(const struct packer *p)
{
    uint32_t unused = 0;
    const char *first = NULL;
    for (uint32_t i = 0; i < p->model.n_tensors; i++) {
        unsigned role, layer;
        const char *name = p->model.tensors[i].name;
        if (!qwen3_tensor_role(name, &role, &layer) || (layer != QPK_NO_LAYER && layer >= p->cfg.n_layers)) {
            unused++;
            first = first ? first : name;
        }
    }
    if (unused && !p->opt.quiet)
        fprintf(stderr, "qpack: warning: %u tensor(s) not used by Qwen3 are left out (first: %s)\n", unused, first);
}
