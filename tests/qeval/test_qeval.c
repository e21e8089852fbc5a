/* test_qeval - qeval's metric functions (tools/qeval/qeval_metrics.c) on inputs
 * with hand-computed answers: KL divergence, NLL, argmax and top-k, top-5
 * overlap, common prefix, and the per-position accumulator. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "qeval.h"
#include "qp_test.h"

START_TEST(kl_identical_is_zero)
{
    const double a[5] = {1.5, -2, 0.25, 7, 3};
    ck_assert_double_eq(qe_kl(a, a, 5), 0);
    const double big[3] = {1000, 999, -1000}; /* no overflow: softmax is computed shifted */
    ck_assert_double_eq(qe_kl(big, big, 3), 0);
}
END_TEST

START_TEST(kl_known_values)
{
    /* p = softmax(log 1, log 2, log 3) = (1/6, 1/3, 1/2), q uniform (1/3 each):
     * KL = 1/6 ln(1/2) + 1/3 ln 1 + 1/2 ln(3/2) = 0.0872080239... */
    const double p[3] = {0, log(2), log(3)}, q[3] = {0, 0, 0};
    ck_assert_double_eq_tol(qe_kl(p, q, 3), 0.08720802396, 1e-10);
    /* invariant under adding a constant to either side's logits */
    const double p2[3] = {5, 5 + log(2), 5 + log(3)}, q2[3] = {-3, -3, -3};
    ck_assert_double_eq_tol(qe_kl(p2, q2, 3), 0.08720802396, 1e-10);
    /* p = softmax(1, 0, 0), q = softmax(0, 1, 0): KL = p0 * 1 + p1 * (-1) = (e - 1) / (e + 2) */
    const double a[3] = {1, 0, 0}, b[3] = {0, 1, 0};
    ck_assert_double_eq_tol(qe_kl(a, b, 3), (M_E - 1) / (M_E + 2), 1e-12);
    ck_assert_double_eq_tol(qe_kl(a, b, 3), 0.3641753271, 1e-9);
    /* not symmetric: KL(q || p) = 1/3 [ln 2 + ln 1 + ln(2/3)] = 1/3 ln(4/3) = 0.0958940241 */
    ck_assert_double_eq_tol(qe_kl(q, p, 3), log(4.0 / 3.0) / 3, 1e-12);
    ck_assert_double_eq_tol(qe_kl(q, p, 3), 0.0958940241, 1e-9);
}
END_TEST

START_TEST(nll_values)
{
    /* uniform distribution over V tokens: NLL = log V for any target */
    enum { V = 151936 };
    double *z = calloc(V, sizeof *z);
    ck_assert_ptr_nonnull(z);
    ck_assert_double_eq_tol(qe_nll(z, V, 0), log(V), 1e-9);
    ck_assert_double_eq_tol(qe_nll(z, V, V - 1), 11.931214, 1e-6);
    free(z);
    /* softmax(0, ln 3) = (1/4, 3/4) */
    const double l[2] = {0, log(3)};
    ck_assert_double_eq_tol(qe_nll(l, 2, 1), -log(0.75), 1e-12);
    ck_assert_double_eq_tol(qe_nll(l, 2, 0), log(4), 1e-12);
    ck_assert_double_eq_tol(qe_logsumexp(l, 2), log(4), 1e-12);
}
END_TEST

START_TEST(argmax_and_topk)
{
    const double x[6] = {1, 3, 3, 2, -5, 0};
    ck_assert_uint_eq(qe_argmax(x, 6), 1);            /* lowest index among equals */
    uint32_t idx[8];
    ck_assert_uint_eq(qe_topk(x, 6, 3, idx), 3);
    ck_assert_uint_eq(idx[0], 1);
    ck_assert_uint_eq(idx[1], 2);
    ck_assert_uint_eq(idx[2], 3);
    ck_assert_uint_eq(qe_topk(x, 6, 8, idx), 6);      /* k > n: all, sorted */
    const uint32_t want[6] = {1, 2, 3, 0, 5, 4};
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(idx[i], want[i]);
}
END_TEST

START_TEST(top5_overlap_permutations)
{
    double a[10], b[10];
    for (int i = 0; i < 10; i++)
        a[i] = i;                                     /* top 5: indices 9 8 7 6 5 */
    /* the top entries reordered among themselves: same set */
    for (int i = 0; i < 10; i++)
        b[i] = a[i];
    b[9] = 5, b[5] = 9, b[7] = 6, b[6] = 7;
    ck_assert_double_eq(qe_topk_overlap(a, b, 10, 5), 1.0);
    /* the largest swapped with the smallest: top 5 of b is 0 8 7 6 5 */
    for (int i = 0; i < 10; i++)
        b[i] = a[i];
    b[9] = 0, b[0] = 9;
    ck_assert_double_eq(qe_topk_overlap(a, b, 10, 5), 0.8);
    /* reversed: top 5 of b is 0 1 2 3 4, disjoint */
    for (int i = 0; i < 10; i++)
        b[i] = 9 - i;
    ck_assert_double_eq(qe_topk_overlap(a, b, 10, 5), 0.0);
    /* a shifted and scaled copy ranks the same */
    for (int i = 0; i < 10; i++)
        b[i] = 3 * a[i] - 100;
    ck_assert_double_eq(qe_topk_overlap(a, b, 10, 5), 1.0);
    const uint32_t s[5] = {1, 2, 3, 4, 5}, t[5] = {5, 9, 1, 7, 3};
    ck_assert_uint_eq(qe_overlap(s, t, 5), 3);
}
END_TEST

START_TEST(common_prefix)
{
    const uint32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 9, 4}, c[4] = {7, 2, 3, 4};
    ck_assert_uint_eq(qe_common_prefix(a, 4, b, 4), 2);
    ck_assert_uint_eq(qe_common_prefix(a, 4, a, 4), 4);
    ck_assert_uint_eq(qe_common_prefix(a, 4, a, 3), 3);
    ck_assert_uint_eq(qe_common_prefix(a, 4, c, 4), 0);
    ck_assert_uint_eq(qe_common_prefix(a, 0, a, 4), 0);
}
END_TEST

START_TEST(accumulator)
{
    const double ref[4] = {1, 2, 3, 4}, same[4] = {1, 2, 3, 4}, shifted[4] = {1.5, 2.5, 3.5, 4.5},
                 off[4] = {1, 2, 3.5, 3}; /* errors 0 0 0.5 1, argmax moves to 2 */
    struct qe_acc a = {0};
    qe_acc_add(&a, ref, same, 4);
    ck_assert_double_eq(a.max_err, 0);
    ck_assert_double_eq(a.sum_kl, 0);
    ck_assert_uint_eq(a.top1, 1);
    ck_assert_double_eq(qe_acc_top5(&a), 1.0);
    struct qe_acc s = {0};
    qe_acc_add(&s, ref, shifted, 4);                  /* a constant shift: same softmax */
    ck_assert_double_eq_tol(s.max_err, 0.5, 1e-15);
    ck_assert_double_eq_tol(qe_acc_rms(&s), 0.5, 1e-15);
    ck_assert_double_eq_tol(qe_acc_mae(&s), 0.5, 1e-15);
    ck_assert_double_eq_tol(s.max_kl, 0, 1e-15);
    ck_assert_uint_eq(s.top1, 1);
    qe_acc_add(&a, ref, off, 4);
    ck_assert_uint_eq(a.positions, 2);
    ck_assert_uint_eq(a.top1, 1);
    ck_assert_double_eq_tol(qe_acc_top1_pct(&a), 50.0, 1e-12);
    ck_assert_double_eq_tol(a.max_err, 1.0, 1e-15);
    /* rms over 8 logits: sqrt((0.25 + 1) / 8) */
    ck_assert_double_eq_tol(qe_acc_rms(&a), sqrt(1.25 / 8), 1e-15);
    /* mean abs over 8 logits: (0.5 + 1) / 8 */
    ck_assert_double_eq_tol(qe_acc_mae(&a), 1.5 / 8, 1e-15);
    ck_assert_double_eq_tol(a.max_kl, qe_kl(ref, off, 4), 1e-15);
    ck_assert_double_eq_tol(qe_acc_kl_mean(&a), qe_kl(ref, off, 4) / 2, 1e-15);
    ck_assert(a.max_kl > 0);
    /* spreads: {1,2,3,4} has SD sqrt(1.25); {1,2,3.5,3} mean 2.375, SD sqrt(0.921875) */
    ck_assert_double_eq_tol(qe_sd(ref, 4), sqrt(1.25), 1e-15);
    ck_assert_double_eq_tol(qe_acc_ref_sd(&a), sqrt(1.25), 1e-15);
    ck_assert_double_eq_tol(qe_acc_sd(&a), (sqrt(1.25) + sqrt(0.921875)) / 2, 1e-15);
    ck_assert_double_eq_tol(qe_acc_sd(&s), sqrt(1.25), 1e-15);   /* a shift keeps the spread */
    ck_assert_double_eq_tol(qe_acc_rel_rms(&s), 0.5 / sqrt(1.25), 1e-15);
    struct qe_acc none = {0};
    ck_assert_double_eq(qe_acc_rel_rms(&none), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qeval");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, kl_identical_is_zero);
    tcase_add_test(tc, kl_known_values);
    tcase_add_test(tc, nll_values);
    tcase_add_test(tc, argmax_and_topk);
    tcase_add_test(tc, top5_overlap_permutations);
    tcase_add_test(tc, common_prefix);
    tcase_add_test(tc, accumulator);
    suite_add_tcase(s, tc);
    return qp_test_main(s);
}
