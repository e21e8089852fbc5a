/* gen_config.h - generation_config.json: the sampling its authors
 * recommend for a checkpoint (transformers' GenerationConfig), read
 * strictly and kept in the container. */
#ifndef QP_GEN_CONFIG_H
#define QP_GEN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define QWEN3_GEN_EOS_MAX 8     /* eos_token_id list entries kept */

struct qwen3_gen_config {
    bool do_sample;             /* false: greedy, and the sampling fields mean nothing */
    double temperature;         /* transformers' defaults when absent: 1 */
    uint32_t top_k;             /*   50 */
    double top_p;               /*   1 */
    double min_p;               /*   0 (none) */
    double repetition_penalty;  /*   1 (none) */
    int32_t eos[QWEN3_GEN_EOS_MAX];   /* eos_token_id, an id or a list */
    unsigned n_eos;
};

/* Parses generation_config.json text (name for messages): one JSON object,
 * no key twice, UTF-8; do_sample a boolean (absent: false, as transformers
 * reads it); temperature in [0, 100], top_k an integer in [0, vocab],
 * top_p in (0, 1], min_p in [0, 1], repetition_penalty in (0, 100], each
 * absent or null for its default; eos_token_id an id below vocab or a list
 * of up to QWEN3_GEN_EOS_MAX of them. Other keys are ignored. */
int gen_config_parse(const char *text, size_t len, const char *name, uint32_t vocab, struct qwen3_gen_config *out,
                     qp_err *err);

#endif
