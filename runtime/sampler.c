/* sampler.c - greedy, temperature, top-k and top-p sampling. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

int qp_sampler_init(struct qp_sampler *s, uint32_t vocab, double temperature, uint32_t top_k, double top_p,
                    uint64_t seed)
{
    *s = (struct qp_sampler){.temperature = temperature, .top_k = top_k, .top_p = top_p,
                             .rng = seed ? seed : 0x9e3779b97f4a7c15ull, .vocab = vocab};
    s->order = malloc(vocab * sizeof *s->order);
    s->prob = malloc(vocab * sizeof *s->prob);
    return s->order && s->prob ? 0 : -1;
}

void qp_sampler_free(struct qp_sampler *s)
{
    free(s->order);
    free(s->prob);
}

uint32_t qp_argmax(const double *logits, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

static double next_uniform(struct qp_sampler *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (double)((s->rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static const double *sort_prob;
static int by_prob_desc(const void *a, const void *b)
{
    double x = sort_prob[*(const uint32_t *)a], y = sort_prob[*(const uint32_t *)b];
    if (x != y)
        return x < y ? 1 : -1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

uint32_t qp_sample(struct qp_sampler *s, const double *logits)
{
    if (s->temperature <= 0)
        return qp_argmax(logits, s->vocab);
    double max = logits[qp_argmax(logits, s->vocab)], sum = 0;
    for (uint32_t i = 0; i < s->vocab; i++) {
        s->prob[i] = exp((logits[i] - max) / s->temperature);
        sum += s->prob[i];
        s->order[i] = i;
    }
    uint32_t n = s->vocab;
    if (s->top_k || s->top_p < 1) {
        sort_prob = s->prob;
        qsort(s->order, n, sizeof *s->order, by_prob_desc);
        if (s->top_k && s->top_k < n)
            n = s->top_k;
        double kept = 0;
        for (uint32_t i = 0; i < n; i++) {
            kept += s->prob[s->order[i]];
            if (kept >= s->top_p * sum) {
                n = i + 1;
                break;
            }
        }
        sum = 0;
        for (uint32_t i = 0; i < n; i++)
            sum += s->prob[s->order[i]];
    }
    double r = next_uniform(s) * sum, acc = 0;
    for (uint32_t i = 0; i < n; i++) {
        acc += s->prob[s->order[i]];
        if (r < acc)
            return s->order[i];
    }
    return s->order[n - 1];
}
