/* pooling.h - 1_Pooling/config.json (sentence-transformers): how an
 * embedding checkpoint (Qwen3-Embedding) pools its token states into one
 * vector, read strictly and kept in the container. */
#ifndef QP_POOLING_H
#define QP_POOLING_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

enum qp_pooling {
    QP_POOLING_NONE = 0,        /* not an embedding checkpoint */
    QP_POOLING_LAST = 1,        /* pooling_mode_lasttoken: the last token's state (Qwen3-Embedding) */
    QP_POOLING_MEAN = 2,        /* pooling_mode_mean_tokens: the mean over the tokens */
};

/* Parses 1_Pooling/config.json text (name for messages): one JSON object,
 * no key twice; exactly one pooling_mode_* true, and that one lasttoken or
 * mean_tokens (cls, max, mean_sqrt_len and weightedmean are refused by
 * name); word_embedding_dimension, when given, equal to hidden. Other keys
 * (include_prompt) are ignored. */
int pooling_parse(const char *text, size_t len, const char *name, uint32_t hidden, enum qp_pooling *out, qp_err *err);

const char *pooling_name(enum qp_pooling p);   /* "none", "last", "mean" */

#endif
