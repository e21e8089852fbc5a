/* task.h - the container's task section: what a checkpoint was trained
 * for beyond generating text, when its weights alone do not say. A
 * reranker (Qwen3-Reranker) is a generator's shape whose answer "yes" or
 * "no" after a fixed prompt scores a (query, document) pair. */
#ifndef QP_TASK_H
#define QP_TASK_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

enum qp_task {
    QP_TASK_NONE = 0,           /* no section: a generator (an embedder too when it has pooling) */
    QP_TASK_RERANK = 1,         /* a reranker: P("yes") after Qwen3-Reranker's prompt */
};

/* Parses the section's text (name for messages): one JSON object, no key
 * twice, its "task" a known task's name ("rerank"). Other keys are
 * refused, so that a later field is not silently ignored. */
int task_parse(const char *text, size_t len, const char *name, enum qp_task *out, qp_err *err);

/* The section's text for t (not QP_TASK_NONE): static. */
const char *task_json(enum qp_task t);

const char *task_name(enum qp_task t);      /* "none", "rerank" */

/* QP_TASK_RERANK when a component of path names a Qwen3-Reranker
 * checkpoint (Qwen3-Reranker-0.6B, models--Qwen--Qwen3-Reranker-4B, any
 * case), else QP_TASK_NONE. */
enum qp_task task_of_path(const char *path);

#endif
