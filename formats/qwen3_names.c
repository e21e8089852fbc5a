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

bool qwen3_tensor_name(char *buf, size_t len, unsigned role, unsigned layer)
{
    if (model_name(role))
        return (size_t)snprintf(buf, len, "%s", model_name(role)) < len;
    if (layer_suffix(role))
        return (size_t)snprintf(buf, len, "model.layers.%u.%s", layer, layer_suffix(role)) < len;
    return false;
}

bool qwen3_tensor_role(const char *name, unsigned *role, unsigned *layer)
{
    for (unsigned r = 1; r <= QPK_ROLE_MAX; r++) {
        if (model_name(r) && strcmp(name, model_name(r)) == 0) {
            *role = r;
            *layer = QPK_NO_LAYER;
            return true;
        }
    }
    const char *prefix = "model.layers.";
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
        if (layer_suffix(r) && strcmp(end + 1, layer_suffix(r)) == 0) {
            *role = r;
            *layer = (unsigned)l;
            return true;
        }
    }
    return false;
}
