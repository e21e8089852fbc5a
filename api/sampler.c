/* sampler.c - qpack_sampler: the next token from a session's logits.
 *
 * Order: the logit biases and the constraint (a token it does not allow
 * gets -inf, and is no candidate), then the penalties on the raw logits over the
 * last repeat_last_n tokens (llama.cpp's repeat penalty: a recent token's
 * logit is divided by it when positive, multiplied when negative; then
 * OpenAI's presence and frequency penalties, subtracted), min-p on them (keep a token when its probability at
 * temperature 1 is at least min_p times the largest: llama.cpp applies
 * min-p before the temperature), then the temperature, top-k and top-p
 * (qrun's order since its first version), and a draw from a seeded
 * xorshift64* generator. Temperature 0 is the argmax of the penalised
 * logits. Each sampler owns its scratch: samplers of different sessions
 * run in parallel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct qpack_sampler {
    qpack_sampler_params p;
    uint32_t vocab;
    uint64_t rng;
    double *logit;              /* [vocab] scratch: penalised logits */
    uint32_t *count;            /* [vocab] scratch: occurrences among the recent tokens, zero between calls */
    qpack_logit_bias *bias;     /* p.n_logit_bias, the caller's copied */
    double *prob;               /* [vocab] scratch: weights */
    uint32_t *order;            /* [vocab] scratch: candidate ids */
};

qpack_sampler_params qpack_sampler_default_params(void)
{
    return (qpack_sampler_params){.temperature = 0, .top_p = 1, .repeat_penalty = 1, .seed = 1};
}

int qpack_sampler_new(qpack_sampler **out, const qpack_model *m, const qpack_sampler_params *params,
                      qpack_error *err)
{
    *out = NULL;
    qpack_sampler_params p = params ? *params : qpack_sampler_default_params();
    if (!(p.temperature >= 0 && p.temperature <= 100) || !(p.top_p > 0 && p.top_p <= 1) ||
        !(p.min_p >= 0 && p.min_p <= 1) || !(p.repeat_penalty > 0 && p.repeat_penalty <= 100) ||
        !(p.presence_penalty >= -2 && p.presence_penalty <= 2) || !(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT,
                           "sampler parameters out of range (temperature %g in [0, 100], top_p %g in (0, 1], min_p "
                           "%g in [0, 1], repeat_penalty %g in (0, 100], presence_penalty %g and frequency_penalty "
                           "%g in [-2, 2])",
                           p.temperature, p.top_p, p.min_p, p.repeat_penalty, p.presence_penalty, p.frequency_penalty);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    if (p.n_logit_bias && !p.logit_bias)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "%zu logit biases and no array", p.n_logit_bias);
    for (size_t i = 0; i < p.n_logit_bias; i++)
        if (p.logit_bias[i].token < 0 || (uint32_t)p.logit_bias[i].token >= vocab ||
            !(p.logit_bias[i].bias >= -100 && p.logit_bias[i].bias <= 100))
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "logit bias %zu: token %d (0 to %u), bias %g (-100 to 100)", i,
                               p.logit_bias[i].token, vocab - 1, p.logit_bias[i].bias);
    qpack_sampler *s = calloc(1, sizeof *s);
    if (!s || !(s->logit = malloc(vocab * sizeof *s->logit)) || !(s->prob = malloc(vocab * sizeof *s->prob)) ||
        !(s->order = malloc(vocab * sizeof *s->order)) || !(s->count = calloc(vocab, sizeof *s->count)) ||
        (p.n_logit_bias && !(s->bias = malloc(p.n_logit_bias * sizeof *s->bias)))) {
        qpack_sampler_free(s);
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    }
    if (p.n_logit_bias)
        memcpy(s->bias, p.logit_bias, p.n_logit_bias * sizeof *s->bias);
    p.logit_bias = s->bias;
    s->p = p;
    s->vocab = vocab;
    s->rng = p.seed ? p.seed : 0x9e3779b97f4a7c15ull;
    *out = s;
    return QPACK_OK;
}

void qpack_sampler_free(qpack_sampler *s)
{
    if (!s)
        return;
    free(s->logit);
    free(s->prob);
    free(s->order);
    free(s->count);
    free(s->bias);
    free(s);
}

static double next_uniform(qpack_sampler *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (double)((s->rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

/* by weight, descending; lower id first on ties */
static int by_weight_desc(const void *a, const void *b, void *arg)
{
    const double *w = arg;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    if (w[i] != w[j])
        return w[i] < w[j] ? 1 : -1;
    return i < j ? -1 : 1;
}

static void swap_ids(uint32_t *a, uint32_t *b)
{
    uint32_t t = *a;
    *a = *b;
    *b = t;
}

static bool before(uint32_t i, uint32_t j, const double *w)
{
    return by_weight_desc(&i, &j, (void *)w) < 0;
}

/* Puts the k best of order[0..n) first, sorted: the prefix a sort of all n
 * gives (by_weight_desc is a total order), found by quickselect in O(n)
 * rather than sorting 151,936 candidates for the 20 that top-k keeps. */
static void sort_best(uint32_t *order, uint32_t n, uint32_t k, const double *w)
{
    uint32_t lo = 0, hi = n;
    while (lo < k && k < hi) {
        uint32_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* the median of three as the pivot, kept at `last` */
        if (before(order[mid], order[lo], w))
            swap_ids(&order[mid], &order[lo]);
        if (before(order[last], order[lo], w))
            swap_ids(&order[last], &order[lo]);
        if (before(order[mid], order[last], w))
            swap_ids(&order[mid], &order[last]);
        uint32_t at = lo;
        for (uint32_t i = lo; i < last; i++)
            if (before(order[i], order[last], w))
                swap_ids(&order[i], &order[at++]);
        swap_ids(&order[at], &order[last]);
        if (at < k)
            lo = at + 1;
        else
            hi = at;
    }
    qsort_r(order, k, sizeof *order, by_weight_desc, (void *)w);
}

/* top-k and top-p: the candidates order[0..n) cut to the best ones in
 * order, their weights' sum returned. Only as many are sorted as the cut
 * needs: a first guess of 64, eight times more until top_p's share is
 * reached. */
static uint32_t keep_top(qpack_sampler *s, uint32_t n, double *sum)
{
    uint32_t limit = s->p.top_k && s->p.top_k < n ? s->p.top_k : n;
    uint32_t sorted = s->p.top_p < 1 && limit > 64 ? 64 : limit;
    for (;;) {
        sort_best(s->order, n, sorted, s->prob);
        double kept = 0;
        for (uint32_t i = 0; i < sorted; i++) {
            kept += s->prob[s->order[i]];
            if (kept >= s->p.top_p * *sum) {
                sorted = i + 1;
                goto cut;
            }
        }
        if (sorted == limit)
            break;
        sorted = limit / 8 < sorted ? limit : sorted * 8;
    }
cut:
    *sum = 0;
    for (uint32_t i = 0; i < sorted; i++)
        *sum += s->prob[s->order[i]];
    return sorted;
}

static uint32_t argmax(const double *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* s->logit = the session's logits with the biases added and the
 * penalties applied once to each distinct id among its last repeat_last_n
 * tokens */
static void penalise(qpack_sampler *s, const qpack_session *session, const double *logits)
{
    memcpy(s->logit, logits, s->vocab * sizeof *s->logit);
    for (size_t i = 0; i < s->p.n_logit_bias; i++)
        s->logit[s->bias[i].token] += s->bias[i].bias;
    for (uint32_t i = 0; s->p.allow && i < s->vocab; i++)
        if (!s->p.allow(s->p.allow_user, (int32_t)i))
            s->logit[i] = -INFINITY;
    bool any = s->p.repeat_penalty != 1 || s->p.presence_penalty != 0 || s->p.frequency_penalty != 0;
    if (!any || !s->p.repeat_last_n)
        return;
    uint32_t pos = qpack_session_pos(session), n = s->p.repeat_last_n < pos ? s->p.repeat_last_n : pos;
    const int32_t *recent = qpack_session_tokens(session) + (pos - n);
    for (uint32_t i = 0; i < n; i++)
        if (recent[i] >= 0 && (uint32_t)recent[i] < s->vocab)
            s->count[recent[i]]++;
    for (uint32_t i = 0; i < n; i++) {
        if (recent[i] < 0 || (uint32_t)recent[i] >= s->vocab || !s->count[recent[i]])
            continue;   /* outside, or an id met before */
        uint32_t c = s->count[recent[i]];
        double *l = &s->logit[recent[i]];
        *l = *l > 0 ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
        *l -= s->p.presence_penalty + s->p.frequency_penalty * c;
        s->count[recent[i]] = 0;
    }
}

int32_t qpack_sample(qpack_sampler *s, const qpack_session *session)
{
    const double *logits = qpack_logits(session);
    if (!logits)
        return -1;
    penalise(s, session, logits);
    uint32_t best = argmax(s->logit, s->vocab);
    if (s->p.temperature <= 0)
        return (int32_t)best;
    double max = s->logit[best], floor = s->p.min_p > 0 ? max + log(s->p.min_p) : -INFINITY, sum = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->vocab; i++) {
        if (s->logit[i] < floor || s->logit[i] == -INFINITY)
            continue;
        s->prob[i] = exp((s->logit[i] - max) / s->p.temperature);
        sum += s->prob[i];
        s->order[n++] = i;
    }
    if (s->p.top_k || s->p.top_p < 1)
        n = keep_top(s, n, &sum);
    double r = next_uniform(s) * sum, acc = 0;
    for (uint32_t i = 0; i < n; i++) {
        acc += s->prob[s->order[i]];
        if (r < acc)
            return (int32_t)s->order[i];
    }
    return (int32_t)s->order[n - 1];
}
