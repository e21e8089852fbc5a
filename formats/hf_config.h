/* hf_config.h - the hyperparameters of a dense Qwen3 model, read from a
 * Hugging Face config.json (and written by the checkpoint generator).
 */
#ifndef QP_HF_CONFIG_H
#define QP_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

struct qwen3_config {
    uint32_t hidden_size;          /* d_model, e.g. 1024 for Qwen3-0.6B */
    uint32_t intermediate_size;    /* MLP width, e.g. 3072 */
    uint32_t num_hidden_layers;    /* e.g. 28 */
    uint32_t num_attention_heads;  /* query heads, e.g. 16 */
    uint32_t num_key_value_heads;  /* KV heads (GQA), e.g. 8 */
    uint32_t head_dim;             /* e.g. 128; may differ from hidden/heads */
    uint32_t vocab_size;           /* e.g. 151936 */
    uint32_t max_position_embeddings; /* e.g. 40960 */
    double rope_theta;             /* e.g. 1e6 */
    double rms_norm_eps;           /* e.g. 1e-6 */
    bool tie_word_embeddings;
    int32_t bos_token_id;          /* -1 when absent or null */
    int32_t eos_token_id;          /* -1 when absent or null */
};

/* Limits that keep every size product far inside 64 bits and every
 * per-row loop inside what the BPF verifier accepts. Real Qwen3 models
 * (0.6B..32B dense) are well inside them. */
#define QWEN3_MAX_HIDDEN        16384u
#define QWEN3_MAX_INTERMEDIATE  65536u
#define QWEN3_MAX_LAYERS        256u
#define QWEN3_MAX_HEADS         256u
#define QWEN3_MAX_HEAD_DIM      512u
#define QWEN3_MAX_VOCAB         (1u << 20)
#define QWEN3_MAX_POSITIONS     (1u << 20)

/* Parses config.json at path; checks types, ranges and consistency
 * (heads divisible by KV heads, head_dim even, ...).
 * Required: hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, vocab_size (they fix the tensor shapes). Absent or
 * null fields take transformers' Qwen3Config defaults:
 * num_key_value_heads = num_attention_heads, head_dim = hidden / heads,
 * max_position_embeddings 32768, rope_theta 10000, rms_norm_eps 1e-6,
 * tie_word_embeddings false; bos/eos_token_id -1 (a list gives its first).
 * Integers must be integral JSON numbers. Refused, because qpack would
 * compute a different model: model_type other than "qwen3" (absent is
 * fine), rope_scaling not null, use_sliding_window true, attention_bias
 * true, hidden_act other than "silu". Refused because Hugging Face would
 * read the file differently: a key twice in any object (Python keeps the
 * last value), an escaped NUL (\u0000). path must be a regular file (a FIFO
 * or device is refused at once, see fsafe.h). */
int hf_config_load(const char *path, struct qwen3_config *cfg, qp_err *err);

/* Parses config.json text already in memory; name is used in messages. */
int hf_config_parse(const char *json, size_t len, const char *name,
                    struct qwen3_config *cfg, qp_err *err);

/* Checks ranges and consistency of a config from any source. */
int hf_config_validate(const struct qwen3_config *cfg, const char *name, qp_err *err);

/* Writes a Hugging Face style config.json for cfg (used by the generator):
 * Qwen3ForCausalLM, torch_dtype "bfloat16"; atomic (fsafe.h: fs_write_file). */
int hf_config_write(const char *path, const struct qwen3_config *cfg, qp_err *err);

/* The same with torch_dtype "bfloat16", "float16" or "float32". */
int hf_config_write_dtype(const char *path, const struct qwen3_config *cfg,
                          const char *torch_dtype, qp_err *err);

#endif
