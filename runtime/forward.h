/* forward.h - one token's forward pass as a schedule of kernel invocations:
 * small kernels run on the calling thread, matrix products and attention are
 * cut into invocations of bounded work and shared with a worker thread. */
#ifndef QP_FORWARD_H
#define QP_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

struct qp_forward;

#define QP_SLOW_CALL_MS 10.0    /* the bound on one invocation */

struct qp_forward_stats {
    uint64_t calls;              /* kernel invocations so far */
    double max_call_ms;          /* longest single invocation */
    uint64_t slow_calls;         /* invocations over QP_SLOW_CALL_MS */
    char max_call_kernel[32];
    double kernel_ms[QP_K_COUNT];   /* time inside each kernel, summed over threads */
    uint64_t kernel_calls[QP_K_COUNT];
};

/* threads: 1 or 2 (the calling thread plus a worker) */
int qp_forward_create(struct qp_forward **fw, struct qp_backend *b, const struct qp_plan *plan,
                      unsigned threads, qp_err *err);
void qp_forward_destroy(struct qp_forward *fw);

/* Runs token at pos (0 <= pos < ctx, positions in order); with logits,
 * also computes the vocabulary projection and the argmax (*next). */
int qp_forward_token(struct qp_forward *fw, uint32_t token, uint32_t pos, bool logits, uint32_t *next,
                     qp_err *err);

/* Optional: called after each layer with the layer index (tracing). */
void qp_forward_on_layer(struct qp_forward *fw, void (*cb)(void *, uint32_t), void *arg);

const struct qp_forward_stats *qp_forward_stats(const struct qp_forward *fw);

#endif
