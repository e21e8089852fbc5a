/* qpk_common.c - names, shapes and record encodings shared by the .qpk
 * reader and writer. */
#include "qpk.h"

#include "le.h"

static const char *const role_names[QPK_ROLE_MAX + 1] = {
    [QPK_ROLE_EMBED] = "embed", [QPK_ROLE_LM_HEAD] = "lm_head",
    [QPK_ROLE_FINAL_NORM] = "final_norm", [QPK_ROLE_ATTN_NORM] = "attn_norm",
    [QPK_ROLE_Q] = "q_proj", [QPK_ROLE_K] = "k_proj", [QPK_ROLE_V] = "v_proj",
    [QPK_ROLE_O] = "o_proj", [QPK_ROLE_Q_NORM] = "q_norm", [QPK_ROLE_K_NORM] = "k_norm",
    [QPK_ROLE_MLP_NORM] = "mlp_norm", [QPK_ROLE_GATE] = "gate_proj",
    [QPK_ROLE_UP] = "up_proj", [QPK_ROLE_DOWN] = "down_proj",
};

const char *qpk_role_name(unsigned role)
{
    return role >= 1 && role <= QPK_ROLE_MAX ? role_names[role] : "unknown";
}

const char *qpk_encoding_name(unsigned encoding)
{
    switch (encoding) {
    case QPK_ENC_Q24: return "q24";
    case QPK_ENC_I32S: return "i32s";
    case QPK_ENC_I8G: return "i8g";
    case QPK_ENC_I4G: return "i4g";
    case QPK_ENC_I6G: return "i6g";
    case QPK_ENC_I4K: return "i4k";
    default: return "unknown";
    }
}

const char *qpk_format_name(unsigned weight_format)
{
    switch (weight_format) {
    case QPK_FORMAT_Q24: return "q24";
    case QPK_FORMAT_INT8: return "int8";
    case QPK_FORMAT_INT4: return "int4";
    default: return "unknown";
    }
}

uint64_t qpk_block_bytes(unsigned encoding, uint32_t cols, uint32_t group)
{
    uint64_t c = cols, groups = group ? cols / group : 0;
    switch (encoding) {
    case QPK_ENC_I8G: return c * 4 + groups * 16;     /* 4 x (8-bit code), 4 x i32 D per group */
    case QPK_ENC_I4G: return c * 2 + groups * 16;     /* 4 x (4-bit code), 4 x (d, m) per group */
    case QPK_ENC_I6G: return c * 3 + groups * 8;      /* 4 x (6-bit code), 4 x pf16 d per group */
    case QPK_ENC_I4K: return c * 2 + groups / QPK_I4K_GROUPS * QPK_I4K_SUPER_BYTES;
    default: return 0;
    }
}

const char *qpk_section_name(unsigned kind)
{
    switch (kind) {
    case QPK_SEC_CONFIG: return "config";
    case QPK_SEC_TOKENIZER: return "tokenizer";
    case QPK_SEC_TOKENIZER_CONFIG: return "tokenizer_config";
    case QPK_SEC_CHAT_TEMPLATE: return "chat_template";
    case QPK_SEC_PROVENANCE: return "provenance";
    case QPK_SEC_GENERATION_CONFIG: return "generation_config";
    case QPK_SEC_POOLING: return "pooling";
    default: return "unknown";
    }
}

bool qpk_role_is_layer(unsigned role)
{
    return role >= QPK_ROLE_ATTN_NORM && role <= QPK_ROLE_MAX;
}

bool qpk_role_is_norm(unsigned role)
{
    return role == QPK_ROLE_FINAL_NORM || role == QPK_ROLE_ATTN_NORM || role == QPK_ROLE_MLP_NORM ||
           role == QPK_ROLE_Q_NORM || role == QPK_ROLE_K_NORM;
}

bool qpk_role_shape(const struct qpk_config *cfg, unsigned role, uint32_t *rows, uint32_t *cols)
{
    uint32_t q_dim = cfg->n_heads * cfg->head_dim;
    uint32_t kv_dim = cfg->n_kv_heads * cfg->head_dim;
    uint32_t r = 1, c;
    switch (role) {
    case QPK_ROLE_EMBED:
    case QPK_ROLE_LM_HEAD: r = cfg->vocab; c = cfg->hidden; break;
    case QPK_ROLE_FINAL_NORM:
    case QPK_ROLE_ATTN_NORM:
    case QPK_ROLE_MLP_NORM: c = cfg->hidden; break;
    case QPK_ROLE_Q_NORM:
    case QPK_ROLE_K_NORM: c = cfg->head_dim; break;
    case QPK_ROLE_Q: r = q_dim; c = cfg->hidden; break;
    case QPK_ROLE_K:
    case QPK_ROLE_V: r = kv_dim; c = cfg->hidden; break;
    case QPK_ROLE_O: r = cfg->hidden; c = q_dim; break;
    case QPK_ROLE_GATE:
    case QPK_ROLE_UP: r = cfg->intermediate; c = cfg->hidden; break;
    case QPK_ROLE_DOWN: r = cfg->hidden; c = cfg->intermediate; break;
    default: return false;
    }
    *rows = r;
    *cols = c;
    return true;
}

void qpk_config_encode(const struct qpk_config *cfg, uint8_t out[QPK_CONFIG_SIZE])
{
    memset(out, 0, QPK_CONFIG_SIZE);
    put32(out + QPK_CFG_HIDDEN, cfg->hidden);
    put32(out + QPK_CFG_INTERMEDIATE, cfg->intermediate);
    put32(out + QPK_CFG_N_LAYERS, cfg->n_layers);
    put32(out + QPK_CFG_N_HEADS, cfg->n_heads);
    put32(out + QPK_CFG_N_KV_HEADS, cfg->n_kv_heads);
    put32(out + QPK_CFG_HEAD_DIM, cfg->head_dim);
    put32(out + QPK_CFG_VOCAB, cfg->vocab);
    put32(out + QPK_CFG_MAX_POSITIONS, cfg->max_positions);
    putf64(out + QPK_CFG_ROPE_THETA, cfg->rope_theta);
    putf64(out + QPK_CFG_RMS_EPS, cfg->rms_eps);
    put32(out + QPK_CFG_FLAGS, cfg->flags);
    put32(out + QPK_CFG_BOS_ID, (uint32_t)cfg->bos_id);
    put32(out + QPK_CFG_EOS_ID, (uint32_t)cfg->eos_id);
    put32(out + QPK_CFG_WEIGHT_FORMAT, cfg->weight_format);
}

void qpk_config_decode(const uint8_t in[QPK_CONFIG_SIZE], struct qpk_config *cfg)
{
    cfg->hidden = le32(in + QPK_CFG_HIDDEN);
    cfg->intermediate = le32(in + QPK_CFG_INTERMEDIATE);
    cfg->n_layers = le32(in + QPK_CFG_N_LAYERS);
    cfg->n_heads = le32(in + QPK_CFG_N_HEADS);
    cfg->n_kv_heads = le32(in + QPK_CFG_N_KV_HEADS);
    cfg->head_dim = le32(in + QPK_CFG_HEAD_DIM);
    cfg->vocab = le32(in + QPK_CFG_VOCAB);
    cfg->max_positions = le32(in + QPK_CFG_MAX_POSITIONS);
    cfg->rope_theta = lef64(in + QPK_CFG_ROPE_THETA);
    cfg->rms_eps = lef64(in + QPK_CFG_RMS_EPS);
    cfg->flags = le32(in + QPK_CFG_FLAGS);
    cfg->bos_id = (int32_t)le32(in + QPK_CFG_BOS_ID);
    cfg->eos_id = (int32_t)le32(in + QPK_CFG_EOS_ID);
    cfg->weight_format = le32(in + QPK_CFG_WEIGHT_FORMAT);
}

void qpk_section_encode(const struct qpk_section *s, uint8_t out[QPK_SECTION_SIZE])
{
    memset(out, 0, QPK_SECTION_SIZE);
    put32(out + QPK_SE_KIND, s->kind);
    put32(out + QPK_SE_CODEC, s->codec);
    put64(out + QPK_SE_OFFSET, s->offset);
    put64(out + QPK_SE_STORED_SIZE, s->stored_size);
    put64(out + QPK_SE_RAW_SIZE, s->raw_size);
    put64(out + QPK_SE_XXH3, s->xxh3);
}

void qpk_tensor_encode(const struct qpk_tensor *t, uint8_t out[QPK_TENSOR_SIZE])
{
    memset(out, 0, QPK_TENSOR_SIZE);
    memcpy(out + QPK_TE_NAME, t->name, strnlen(t->name, QPK_NAME_MAX - 1));
    put16(out + QPK_TE_ROLE, t->role);
    put16(out + QPK_TE_LAYER, t->layer);
    put16(out + QPK_TE_ENCODING, t->encoding);
    put16(out + QPK_TE_FLAGS, t->flags);
    put32(out + QPK_TE_ROWS, t->rows);
    put32(out + QPK_TE_COLS, t->cols);
    put32(out + QPK_TE_SCALE_EXP, (uint32_t)t->scale_exp);
    put32(out + QPK_TE_GROUP_SIZE, t->group_size);
    put64(out + QPK_TE_ROW_STRIDE, t->row_stride);
    put64(out + QPK_TE_OFFSET, t->offset);
    put64(out + QPK_TE_NBYTES, t->nbytes);
    put64(out + QPK_TE_XXH3, t->xxh3);
    put32(out + QPK_TE_ROWS_PER_BLOCK, t->rows_per_block);
}
