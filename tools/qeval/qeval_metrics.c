/* qeval_metrics.c - how far one model's logits are from the reference's
 * (qeval.h; unit tested in tests/qeval/test_qeval.c). */
#include <math.h>

#include "qeval.h"

/* log(sum_i exp(x[i])), computed stably */
double qe_logsumexp(const double *x, uint32_t n)
{
    double m = x[0];
    for (uint32_t i = 1; i < n; i++)
        m = fmax(m, x[i]);
    double z = 0;
    for (uint32_t i = 0; i < n; i++)
        z += exp(x[i] - m);
    return m + log(z);
}

/* KL(p || q) of the softmaxes of two logit vectors (natural log), >= 0 */
double qe_kl(const double *p_logits, const double *q_logits, uint32_t n)
{
    double lzp = qe_logsumexp(p_logits, n), lzq = qe_logsumexp(q_logits, n), kl = 0;
    for (uint32_t i = 0; i < n; i++) {
        double lp = p_logits[i] - lzp, lq = q_logits[i] - lzq;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}

/* -log softmax(logits)[target] (natural log) */
double qe_nll(const double *logits, uint32_t n, uint32_t target)
{
    return qe_logsumexp(logits, n) - logits[target];
}

/* index of the largest value; the lowest index among equals */
uint32_t qe_argmax(const double *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The indices of the min(k, n) largest values into idx, largest first (the
 * lower index first among equals); returns how many. */
uint32_t qe_topk(const double *x, uint32_t n, uint32_t k, uint32_t *idx)
{
    uint32_t have = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (have == k && !(x[i] > x[idx[k - 1]]))
            continue;
        uint32_t j = have < k ? have++ : k - 1;
        while (j > 0 && x[i] > x[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    return have;
}

/* |a ∩ b| of two sets of k distinct indices */
uint32_t qe_overlap(const uint32_t *a, const uint32_t *b, uint32_t k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < k; i++)
        for (uint32_t j = 0; j < k; j++)
            if (a[i] == b[j]) {
                n++;
                break;
            }
    return n;
}

/* top-k overlap of two logit vectors, as a fraction: |topk(a) ∩ topk(b)| / k */
double qe_topk_overlap(const double *a, const double *b, uint32_t n, uint32_t k)
{
    uint32_t ia[16], ib[16];
    if (k > 16)
        k = 16;
    uint32_t m = qe_topk(a, n, k, ia);
    qe_topk(b, n, k, ib);
    return m ? (double)qe_overlap(ia, ib, m) / m : 0;
}

/* length of the common prefix of a[0..na) and b[0..nb) */
uint32_t qe_common_prefix(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb)
{
    uint32_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

/* the standard deviation of a logit vector: its spread, which sets what a
 * logit error means (an error of 0.3 matters more when the logits span 1) */
double qe_sd(const double *x, uint32_t n)
{
    double mean = 0, sq = 0;
    for (uint32_t i = 0; i < n; i++)
        mean += x[i];
    mean /= n;
    for (uint32_t i = 0; i < n; i++)
        sq += (x[i] - mean) * (x[i] - mean);
    return sqrt(sq / n);
}

void qe_acc_add(struct qe_acc *a, const double *ref, const double *ours, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        double e = fabs(ours[i] - ref[i]);
        a->max_err = fmax(a->max_err, e);
        a->sum_abs_err += e;
        a->sum_sq_err += e * e;
    }
    double kl = qe_kl(ref, ours, n);
    a->sum_kl += kl;
    a->max_kl = fmax(a->max_kl, kl);
    a->sum_top5 += qe_topk_overlap(ref, ours, n, QE_TOPK);
    a->top1 += qe_argmax(ref, n) == qe_argmax(ours, n);
    a->sum_sd += qe_sd(ours, n);
    a->sum_ref_sd += qe_sd(ref, n);
    a->logits += n;
    a->positions++;
}

double qe_acc_rms(const struct qe_acc *a) { return a->logits ? sqrt(a->sum_sq_err / (double)a->logits) : 0; }
double qe_acc_mae(const struct qe_acc *a) { return a->logits ? a->sum_abs_err / (double)a->logits : 0; }
double qe_acc_kl_mean(const struct qe_acc *a) { return a->positions ? a->sum_kl / (double)a->positions : 0; }
double qe_acc_top1_pct(const struct qe_acc *a) { return a->positions ? 100.0 * (double)a->top1 / (double)a->positions : 0; }
double qe_acc_top5(const struct qe_acc *a) { return a->positions ? a->sum_top5 / (double)a->positions : 0; }
double qe_acc_sd(const struct qe_acc *a) { return a->positions ? a->sum_sd / (double)a->positions : 0; }
double qe_acc_ref_sd(const struct qe_acc *a) { return a->positions ? a->sum_ref_sd / (double)a->positions : 0; }
double qe_acc_rel_rms(const struct qe_acc *a) { return a->sum_ref_sd > 0 ? qe_acc_rms(a) / qe_acc_ref_sd(a) : 0; }

