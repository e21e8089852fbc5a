/* gguf_model.h - a Qwen3 GGUF as a checkpoint the packer reads like a
 * Hugging Face folder: the config from its metadata, the tensors under
 * their Hugging Face names, and the tokenizer and chat template
 * (gguf_tokenizer.c). */
#ifndef QP_GGUF_MODEL_H
#define QP_GGUF_MODEL_H

#include <stddef.h>

#include "gguf.h"
#include "hf_config.h"
#include "safetensors.h"

/* The hyperparameters of a dense Qwen3 GGUF (general.architecture
 * "qwen3"): qwen3.embedding_length, feed_forward_length, block_count,
 * attention.head_count are required; attention.head_count_kv, key_length,
 * context_length, rope.freq_base, attention.layer_norm_rms_epsilon take
 * Qwen3Config's defaults; rope scaling is refused, and so is a
 * rope.dimension_count other than the head size (partial RoPE); vocab_size
 * is token_embd.weight's rows, bos/eos from tokenizer.ggml.*_token_id
 * (rows of it), the embeddings tied when there is no output.weight.
 * Checked as config.json is (hf_config_validate). */
int gguf_config(const struct gguf *g, struct qwen3_config *c, qp_err *err);

/* Every tensor of g as an st_tensor of m: Hugging Face names (llama.cpp's
 * for the Qwen3 ones, the GGUF's own for others), shapes [rows, cols]
 * without trailing dimensions of 1 (ggml reads [64, 1] as [64]), the
 * ggml block types as the st_dtype block types. The maps move from g to m:
 * close m after g. */
int gguf_checkpoint(struct gguf *g, struct st_model *m, qp_err *err);

/* tokenizer.json text (malloc'd) equal in behaviour to the one the GGUF was
 * converted from: tokenizer.ggml.model "gpt2" with the "qwen2"
 * pre-tokenizer; tokens, token types and merges (none is legal). Every
 * token keeps its row as its id: a CONTROL token becomes a special added
 * token, a USER_DEFINED one a non-special added token, an UNUSED one
 * (padding rows) a hole. Two rows of one text are refused, and so is
 * tokenizer.ggml.add_bos_token or add_eos_token true (llama.cpp would add
 * that token to every text; Qwen3's tokenizer adds none). */
int gguf_tokenizer_json(const struct gguf *g, char **json, size_t *len, qp_err *err);

/* tokenizer.chat_template as a malloc'd string, or NULL when there is none;
 * it must be UTF-8 without NUL. */
int gguf_chat_template(const struct gguf *g, char **tpl, qp_err *err);

#endif
