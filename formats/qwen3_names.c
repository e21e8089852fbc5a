#include "qwen3_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *layer_suffix(unsigned role)
{
    switch (role) {
    case QPK_ROLE_ATTN_NORM: return "input_layernorm.weight";
    case QPK_ROLE_Q: return "self_attn.q_proj.weight";
    case QPK_ROLE_K: return "self_attn.k_proj.weight";
    case QPK_ROLE_V: return "self_attn.v_proj.weight";
    case QPK_ROLE_O: return "self_attn.o_proj.weight";
    case QPK_ROLE_Q_NORM: return "self_attn.q_norm.weight";
    case QPK_ROLE_K_NORM: return "self_attn.k_norm.weight";
    case QPK_ROLE_MLP_NORM: return "post_attention_layernorm.weight";
    case QPK_ROLE_GATE: return "mlp.gate_proj.weight";
    case QPK_ROLE_UP: return "mlp.up_proj.weight";
    case QPK_ROLE_DOWN: return "mlp.down_proj.weight";
    default: return NULL;
    }
}

static const char *model_name(unsigned role)
{
    switch (role) {
    case QPK_ROLE_EMBED: return "model.embed_tokens.weight";
    case QPK_ROLE_LM_HEAD: return "lm_head.weight";
    case QPK_ROLE_FINAL_NORM: return "model.norm.weight";
    default: return NULL;
    }
}

/* llama.cpp's names for the same tensors (its LLM_ARCH_QWEN3 table) */
static const char *gguf_layer_suffix(unsigned role)
{
    switch (role) {
    case QPK_ROLE_ATTN_NORM: return "attn_norm.weight";
    case QPK_ROLE_Q: return "attn_q.weight";
    case QPK_ROLE_K: return "attn_k.weight";
    case QPK_ROLE_V: return "attn_v.weight";
    case QPK_ROLE_O: return "attn_output.weight";
    case QPK_ROLE_Q_NORM: return "attn_q_norm.weight";
    case QPK_ROLE_K_NORM: return "attn_k_norm.weight";
    case QPK_ROLE_MLP_NORM: return "ffn_norm.weight";
    case QPK_ROLE_GATE: return "ffn_gate.weight";
    case QPK_ROLE_UP: return "ffn_up.weight";
    case QPK_ROLE_DOWN: return "ffn_down.weight";
    default: return NULL;
    }
}

static const char *gguf_model_name(unsigned role)
{
    switch (role) {
    case QPK_ROLE_EMBED: return "token_embd.weight";
    case QPK_ROLE_LM_HEAD: return "output.weight";
    case QPK_ROLE_FINAL_NORM: return "output_norm.weight";
    default: return NULL;
    }
}

static bool format_name(char *buf, size_t len, const char *prefix, const char *(*model_of)(unsigned),
                        const char *(*suffix_of)(unsigned), unsigned role, unsigned layer)
{
    if (model_of(role))
        return (size_t)snprintf(buf, len, "%s", model_of(role)) < len;
    if (suffix_of(role))
        return (size_t)snprintf(buf, len, "%s%u.%s", prefix, layer, suffix_of(role)) < len;
    return false;
}

bool qwen3_tensor_name(char *buf, size_t len, unsigned role, unsigned layer)
{
    return format_name(buf, len, "model.layers.", model_name, layer_suffix, role, layer);
}

/* name as model_of's model-level name or prefix + layer + "." + suffix_of's */
static bool parse_name(const char *name, const char *prefix, const char *(*model_of)(unsigned),
                       const char *(*suffix_of)(unsigned), unsigned *role, unsigned *layer)
{
    for (unsigned r = 1; r <= QPK_ROLE_MAX; r++) {
        if (model_of(r) && strcmp(name, model_of(r)) == 0) {
            *role = r;
            *layer = QPK_NO_LAYER;
            return true;
        }
    }
    if (strncmp(name, prefix, strlen(prefix)) != 0)
        return false;
    const char *p = name + strlen(prefix);
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
        return false;
    char *end;
    unsigned long l = strtoul(p, &end, 10);
    if (*end != '.' || l >= QPK_NO_LAYER)
        return false;
    for (unsigned r = 1; r <= QPK_ROLE_MAX; r++) {
        if (suffix_of(r) && strcmp(end + 1, suffix_of(r)) == 0) {
            *role = r;
            *layer = (unsigned)l;
            return true;
        }
    }
    return false;
}

bool qwen3_tensor_role(const char *name, unsigned *role, unsigned *layer)
{
    return parse_name(name, "model.layers.", model_name, layer_suffix, role, layer);
}

bool qwen3_gguf_tensor_role(const char *name, unsigned *role, unsigned *layer)
{
    return parse_name(name, "blk.", gguf_model_name, gguf_layer_suffix, role, layer);
}

bool qwen3_gguf_tensor_name(char *buf, size_t len, unsigned role, unsigned layer)
{
    return format_name(buf, len, "blk.", gguf_model_name, gguf_layer_suffix, role, layer);
}
