/* qwen3_names.h - Hugging Face tensor names of a Qwen3ForCausalLM checkpoint
 * and the container roles they map to. */
#ifndef QP_QWEN3_NAMES_H
#define QP_QWEN3_NAMES_H

#include <stddef.h>

#include "qpk.h"

/* Writes the Hugging Face name of (role, layer) into buf; layer is ignored
 * for model-level roles. Returns false for an unknown role. */
bool qwen3_tensor_name(char *buf, size_t len, unsigned role, unsigned layer);

/* Parses a Hugging Face name into (role, layer); false when it is not one
 * of Qwen3's (layer is QPK_NO_LAYER for model-level tensors). */
bool qwen3_tensor_role(const char *name, unsigned *role, unsigned *layer);

/* The same for llama.cpp's GGUF names (token_embd.weight,
 * blk.L.attn_q.weight, ...). */
bool qwen3_gguf_tensor_role(const char *name, unsigned *role, unsigned *layer);
bool qwen3_gguf_tensor_name(char *buf, size_t len, unsigned role, unsigned layer);

#endif
