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
    put32(out + 0, cfg->hidden);
    put32(out + 4, cfg->intermediate);
    put32(out + 8, cfg->n_layers);
    put32(out + 12, cfg->n_heads);
    put32(out + 16, cfg->n_kv_heads);
    put32(out + 20, cfg->head_dim);
    put32(out + 24, cfg->vocab);
    put32(out + 28, cfg->max_positions);
    putf64(out + 32, cfg->rope_theta);
    putf64(out + 40, cfg->rms_eps);
    put32(out + 48, cfg->flags);
    put32(out + 52, (uint32_t)cfg->bos_id);
    put32(out + 56, (uint32_t)cfg->eos_id);
    put32(out + 60, cfg->weight_format);
}

void qpk_config_decode(const uint8_t in[QPK_CONFIG_SIZE], struct qpk_config *cfg)
{
    cfg->hidden = le32(in + 0);
    cfg->intermediate = le32(in + 4);
    cfg->n_layers = le32(in + 8);
    cfg->n_heads = le32(in + 12);
    cfg->n_kv_heads = le32(in + 16);
    cfg->head_dim = le32(in + 20);
    cfg->vocab = le32(in + 24);
    cfg->max_positions = le32(in + 28);
    cfg->rope_theta = lef64(in + 32);
    cfg->rms_eps = lef64(in + 40);
    cfg->flags = le32(in + 48);
    cfg->bos_id = (int32_t)le32(in + 52);
    cfg->eos_id = (int32_t)le32(in + 56);
    cfg->weight_format = le32(in + 60);
}

void qpk_section_encode(const struct qpk_section *s, uint8_t out[QPK_SECTION_SIZE])
{
    memset(out, 0, QPK_SECTION_SIZE);
    put32(out + 0, s->kind);
    put32(out + 4, s->codec);
    put64(out + 8, s->offset);
    put64(out + 16, s->stored_size);
    put64(out + 24, s->raw_size);
    put64(out + 32, s->xxh3);
}

void qpk_tensor_encode(const struct qpk_tensor *t, uint8_t out[QPK_TENSOR_SIZE])
{
    memset(out, 0, QPK_TENSOR_SIZE);
    memcpy(out, t->name, strnlen(t->name, QPK_NAME_MAX - 1));
    put16(out + 64, t->role);
    put16(out + 66, t->layer);
    put16(out + 68, t->encoding);
    put16(out + 70, t->flags);
    put32(out + 72, t->rows);
    put32(out + 76, t->cols);
    put32(out + 80, (uint32_t)t->scale_exp);
    put32(out + 84, t->group_size);
    put64(out + 88, t->row_stride);
    put64(out + 96, t->offset);
    put64(out + 104, t->nbytes);
    put64(out + 112, t->xxh3);
    put32(out + 120, t->rows_per_block);
}
