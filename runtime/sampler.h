/* sampler.h - picks the next token from logits: greedy, or temperature with
 * top-k and top-p (nucleus) filtering, from a seeded generator so a run can
 * be repeated exactly. */
#ifndef QP_SAMPLER_H
#define QP_SAMPLER_H

#include <stdint.h>

struct qp_sampler {
    double temperature;   /* 0: greedy */
    uint32_t top_k;       /* 0: no limit */
    double top_p;         /* 1: no limit */
    uint64_t rng;         /* xorshift64* state */
    uint32_t *order;      /* scratch: vocab indices */
    double *prob;         /* scratch: vocab probabilities */
    uint32_t vocab;
};

int qp_sampler_init(struct qp_sampler *s, uint32_t vocab, double temperature, uint32_t top_k, double top_p,
                    uint64_t seed);
void qp_sampler_free(struct qp_sampler *s);

/* Index of the largest logit, lowest index on ties. */
uint32_t qp_argmax(const double *logits, uint32_t n);

/* The next token from n logits. */
uint32_t qp_sample(struct qp_sampler *s, const double *logits);

#endif
