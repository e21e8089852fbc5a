/* serve_logprobs.c - a token's log probability and the most likely
 * alternatives, from the exact logits the model gave (before the
 * sampler's temperature, penalties and biases, as OpenAI and vLLM report
 * them): log softmax in double, summed in id order so that the same logits
 * give the same bits. */
#include <math.h>

#include "serve.h"

void serve_logprob_of(const double *logits, uint32_t vocab, int32_t id, unsigned top, struct serve_logprob *out)
{
    double max = -INFINITY;
    for (uint32_t v = 0; v < vocab; v++)
        max = logits[v] > max ? logits[v] : max;
    double sum = 0;
    for (uint32_t v = 0; v < vocab; v++)
        sum += exp(logits[v] - max);
    double lse = max + log(sum);
    out->id = id;
    out->logprob = (uint32_t)id < vocab ? logits[id] - lse : -INFINITY;
    /* the top ones by insertion, the lower id first among equals */
    top = top > SERVE_MAX_TOP_LOGPROBS ? SERVE_MAX_TOP_LOGPROBS : top;
    out->n_top = 0;
    for (uint32_t v = 0; v < vocab && top; v++) {
        if (out->n_top == top && logits[v] <= logits[out->top_id[top - 1]])
            continue;
        unsigned at = out->n_top < top ? out->n_top++ : top - 1;
        while (at > 0 && logits[v] > logits[out->top_id[at - 1]]) {
            out->top_id[at] = out->top_id[at - 1];
            at--;
        }
        out->top_id[at] = (int32_t)v;
    }
    for (unsigned k = 0; k < out->n_top; k++)
        out->top_logprob[k] = logits[out->top_id[k]] - lse;
}
