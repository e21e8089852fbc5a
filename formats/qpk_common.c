/* qpk_common.c - names, shapes and record encodings shared by the .qpk
 * reader and writer. */
#include "qpk.h"

#include "le.h"

#include <stddef.h>
#include <string.h>

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
    case QPK_ENC_I7G: return "i7g";
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
    case QPK_ENC_I7G: return c * 7 / 2 + groups * 8;  /* 4 x (7-bit code), 4 x pf16 d per group */
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
    case QPK_SEC_TASK: return "task";
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

/* A record's fixed-width fields: where each lies in the record, how wide
 * it is and the struct member that holds it, listed once for the encoder
 * and the decoder. A member is copied bit for bit (a double's IEEE bits,
 * an int32_t's two's complement), little-endian in the file. */
struct field {
    uint16_t at;
    uint8_t width;
    uint16_t member;
};

#define FIELD(at, type, m) {(at), sizeof(((type *)0)->m), offsetof(type, m)}

static const struct field config_fields[] = {
    FIELD(QPK_CFG_HIDDEN, struct qpk_config, hidden),
    FIELD(QPK_CFG_INTERMEDIATE, struct qpk_config, intermediate),
    FIELD(QPK_CFG_N_LAYERS, struct qpk_config, n_layers),
    FIELD(QPK_CFG_N_HEADS, struct qpk_config, n_heads),
    FIELD(QPK_CFG_N_KV_HEADS, struct qpk_config, n_kv_heads),
    FIELD(QPK_CFG_HEAD_DIM, struct qpk_config, head_dim),
    FIELD(QPK_CFG_VOCAB, struct qpk_config, vocab),
    FIELD(QPK_CFG_MAX_POSITIONS, struct qpk_config, max_positions),
    FIELD(QPK_CFG_ROPE_THETA, struct qpk_config, rope_theta),
    FIELD(QPK_CFG_RMS_EPS, struct qpk_config, rms_eps),
    FIELD(QPK_CFG_FLAGS, struct qpk_config, flags),
    FIELD(QPK_CFG_BOS_ID, struct qpk_config, bos_id),
    FIELD(QPK_CFG_EOS_ID, struct qpk_config, eos_id),
    FIELD(QPK_CFG_WEIGHT_FORMAT, struct qpk_config, weight_format),
};

static const struct field section_fields[] = {
    FIELD(QPK_SE_KIND, struct qpk_section, kind),
    FIELD(QPK_SE_CODEC, struct qpk_section, codec),
    FIELD(QPK_SE_OFFSET, struct qpk_section, offset),
    FIELD(QPK_SE_STORED_SIZE, struct qpk_section, stored_size),
    FIELD(QPK_SE_RAW_SIZE, struct qpk_section, raw_size),
    FIELD(QPK_SE_XXH3, struct qpk_section, xxh3),
};

static const struct field tensor_fields[] = {
    FIELD(QPK_TE_ROLE, struct qpk_tensor, role),
    FIELD(QPK_TE_LAYER, struct qpk_tensor, layer),
    FIELD(QPK_TE_ENCODING, struct qpk_tensor, encoding),
    FIELD(QPK_TE_FLAGS, struct qpk_tensor, flags),
    FIELD(QPK_TE_ROWS, struct qpk_tensor, rows),
    FIELD(QPK_TE_COLS, struct qpk_tensor, cols),
    FIELD(QPK_TE_SCALE_EXP, struct qpk_tensor, scale_exp),
    FIELD(QPK_TE_GROUP_SIZE, struct qpk_tensor, group_size),
    FIELD(QPK_TE_ROW_STRIDE, struct qpk_tensor, row_stride),
    FIELD(QPK_TE_OFFSET, struct qpk_tensor, offset),
    FIELD(QPK_TE_NBYTES, struct qpk_tensor, nbytes),
    FIELD(QPK_TE_XXH3, struct qpk_tensor, xxh3),
    FIELD(QPK_TE_ROWS_PER_BLOCK, struct qpk_tensor, rows_per_block),
};

#define N_FIELDS(a) (sizeof(a) / sizeof(a)[0])

static void fields_encode(const struct field *f, size_t n, const void *from, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *m = (const uint8_t *)from + f[i].member;
        uint8_t *p = out + f[i].at;
        uint16_t v16;
        uint32_t v32;
        uint64_t v64;
        switch (f[i].width) {
        case 2: memcpy(&v16, m, 2); put16(p, v16); break;
        case 4: memcpy(&v32, m, 4); put32(p, v32); break;
        default: memcpy(&v64, m, 8); put64(p, v64); break;
        }
    }
}

static void fields_decode(const struct field *f, size_t n, const uint8_t *in, void *to)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *m = (uint8_t *)to + f[i].member;
        const uint8_t *p = in + f[i].at;
        uint16_t v16;
        uint32_t v32;
        uint64_t v64;
        switch (f[i].width) {
        case 2: v16 = le16(p); memcpy(m, &v16, 2); break;
        case 4: v32 = le32(p); memcpy(m, &v32, 4); break;
        default: v64 = le64(p); memcpy(m, &v64, 8); break;
        }
    }
}

void qpk_config_encode(const struct qpk_config *cfg, uint8_t out[QPK_CONFIG_SIZE])
{
    memset(out, 0, QPK_CONFIG_SIZE);
    fields_encode(config_fields, N_FIELDS(config_fields), cfg, out);
}

void qpk_config_decode(const uint8_t in[QPK_CONFIG_SIZE], struct qpk_config *cfg)
{
    fields_decode(config_fields, N_FIELDS(config_fields), in, cfg);
}

void qpk_section_encode(const struct qpk_section *s, uint8_t out[QPK_SECTION_SIZE])
{
    memset(out, 0, QPK_SECTION_SIZE);
    fields_encode(section_fields, N_FIELDS(section_fields), s, out);
}

void qpk_section_decode(const uint8_t in[QPK_SECTION_SIZE], struct qpk_section *s)
{
    fields_decode(section_fields, N_FIELDS(section_fields), in, s);
}

void qpk_tensor_encode(const struct qpk_tensor *t, uint8_t out[QPK_TENSOR_SIZE])
{
    memset(out, 0, QPK_TENSOR_SIZE);
    memcpy(out + QPK_TE_NAME, t->name, strnlen(t->name, QPK_NAME_MAX - 1));
    fields_encode(tensor_fields, N_FIELDS(tensor_fields), t, out);
}

void qpk_tensor_decode_fields(const uint8_t in[QPK_TENSOR_SIZE], struct qpk_tensor *t)
{
    fields_decode(tensor_fields, N_FIELDS(tensor_fields), in, t);
}
