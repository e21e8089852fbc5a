/* test_kv8.c - the 8-bit KV cache's arithmetic (kernels/qk_kv8.h) against
 * plain integer sums: the lane-packed scores and values give the exact dot
 * products and weighted sums the kernels need, at the edges of their
 * bounds too; codes and weights round as stated. The kernels that use it
 * are checked against their host twin in test_kernels and against the
 * float reference in test_forward. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "qk_kv8.h"
#include "qp_test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* a value in [-lim, lim]; the extremes often */
static int64_t pick(int64_t lim, int mode)
{
    uint64_t r = next_u64();
    if (mode == 1)
        return r & 1 ? lim : -lim;
    if (mode == 2)
        return lim;
    return (int64_t)(r % (uint64_t)(2 * lim + 1)) - lim;
}

/* the score sum the kernel forms: K code words (8 biased codes each)
 * shifted and masked, times the query's packed words (qk_rotate_query8's
 * order: word g/2 + t for entries g + t and g + t + 4) */
static int64_t lane_dot(const int64_t *a, const int64_t *c, uint32_t d)
{
    uint64_t s = 0;
    int64_t a_sum = 0;
    for (uint32_t g = 0; g < d; g += 8) {
        uint64_t x = 0;
        for (int b = 0; b < 8; b++)
            x |= (uint64_t)(uint8_t)(c[g + b] + QK_KV8_BIAS) << (8 * b);
        for (uint32_t t = 0; t < 4; t++) {
            s += ((x >> (8 * t)) & QK_KV8_LANES) * qk_kv8_query_word(a[g + t], a[g + t + 4]);
            a_sum += a[g + t] + a[g + t + 4];
        }
    }
    return qk_kv8_dot(s, a_sum);
}

START_TEST(score_lanes_give_the_exact_dot_product)
{
    const uint32_t dims[] = {16, 64, 128, 256};
    for (int k = 0; k < 4; k++) {
        uint32_t d = dims[k];
        int64_t lim = ((int64_t)1 << qk_kv8_query_bits(d)) - 1, a[256], c[256];
        for (int trial = 0; trial < 3000; trial++) {
            int mode = trial % 3;   /* random, extremes of mixed sign, all largest */
            int64_t want = 0;
            for (uint32_t i = 0; i < d; i++) {
                a[i] = pick(lim, mode);
                c[i] = mode == 2 ? (trial & 1 ? 127 : -127) : pick(127, mode);
                want += a[i] * c[i];
            }
            ck_assert_msg(lane_dot(a, c, d) == want, "head_dim %u, trial %d: lanes give %lld, the sum is %lld", d,
                          trial, (long long)lane_dot(a, c, d), (long long)want);
        }
    }
}
END_TEST

/* the query width is the most the lanes hold: one bit more and the
 * largest sums leave them */
START_TEST(score_lanes_need_the_stated_query_bound)
{
    uint32_t d = 128;
    int64_t lim = ((int64_t)1 << (qk_kv8_query_bits(d) + 1)) - 1, a[128], c[128], want = 0;
    for (uint32_t i = 0; i < d; i++) {
        a[i] = lim;
        c[i] = 127;
        want += a[i] * c[i];
    }
    ck_assert_int_ne(lane_dot(a, c, d), want);
}
END_TEST

/* the value lanes over a chunk of positions, each weight at most 2^16:
 * qk_kv8_value_acc gives (sum of w c) * 2^(30 - min_sh) exactly */
START_TEST(value_lanes_give_the_exact_weighted_sums)
{
    for (int trial = 0; trial < 200; trial++) {
        int mode = trial % 3;
        uint64_t lanes = 0, w_sum = 0;
        int64_t want_lo = 0, want_hi = 0;
        for (int j = 0; j < 256; j++) {
            uint64_t w = mode == 2 ? 1u << 16 : next_u64() % ((1u << 16) + 1);
            int64_t c0 = mode ? (trial & 1 ? 127 : -127) : pick(127, 0), c4 = pick(127, mode == 2 ? 2 : mode);
            uint64_t x = (uint64_t)(uint8_t)(c0 + QK_KV8_BIAS) | (uint64_t)(uint8_t)(c4 + QK_KV8_BIAS) << 32;
            lanes += (x & QK_KV8_LANES) * w;
            w_sum += w;
            want_lo += (int64_t)w * c0;
            want_hi += (int64_t)w * c4;
        }
        for (uint32_t min_sh = 0; min_sh <= QM_CACHE_SH_MAX; min_sh += 5) {
            int64_t lo = qk_kv8_value_acc(lanes & 0xffffffffu, w_sum, min_sh);
            int64_t hi = qk_kv8_value_acc(lanes >> 32, w_sum, min_sh);
            ck_assert_msg(lo == want_lo * ((int64_t)1 << (30 - min_sh)) &&
                              hi == want_hi * ((int64_t)1 << (30 - min_sh)),
                          "trial %d, min_sh %u: lanes give %lld %lld", trial, min_sh, (long long)lo, (long long)hi);
        }
    }
}
END_TEST

/* p 2^(min_sh - sh - 14), rounded, at most 2^16 */
START_TEST(value_weight_is_the_rounded_quotient)
{
    for (int trial = 0; trial < 100000; trial++) {
        uint64_t p = trial < 3 ? (uint64_t[]){0, 1u << 30, (1u << 30) - 1}[trial] : next_u64() % ((1u << 30) + 1);
        uint32_t min_sh = (uint32_t)(next_u64() % 16), sh = min_sh + (uint32_t)(next_u64() % (16 - min_sh));
        uint64_t w = qk_kv8_value_weight(p, sh, min_sh);
        double want = floor(ldexp((double)p, (int)min_sh - (int)sh - 14) + 0.5);
        ck_assert_msg((double)w == want, "p %llu, sh %u, min %u: %llu, want %.0f", (unsigned long long)p, sh, min_sh,
                      (unsigned long long)w, want);
        ck_assert_uint_le(w, 1u << 16);
    }
}
END_TEST

/* A head vector stored as codes: each code within half a step of its
 * value (saturating only where the largest rounds up to 128), and the
 * largest code at least 64 unless the shift is at its most. */
START_TEST(codes_keep_seven_bits_of_each_vector)
{
    for (int trial = 0; trial < 20000; trial++) {
        int32_t m_exp = -(int32_t)(next_u64() % 40), c_exp = (int32_t)(next_u64() % 16) - 20;
        uint32_t bits = 1 + (uint32_t)(next_u64() % 31);
        int64_t m[8];
        uint64_t max = 0;
        for (int i = 0; i < 8; i++) {
            m[i] = (int64_t)(next_u64() % (1ull << bits)) * (next_u64() & 1 ? 1 : -1);
            max = (uint64_t)llabs(m[i]) > max ? (uint64_t)llabs(m[i]) : max;
        }
        /* the layer's bound: its exponent keeps every value below 2^15 steps */
        if ((int32_t)qm_bitlen(max) + m_exp - c_exp > 15)
            continue;
        uint32_t sh = qk_kv8_shift(max, m_exp, c_exp), l, r, top = 0;
        qm_cache_shifts(m_exp, c_exp + 8 - (int32_t)sh, &l, &r);
        double step = ldexp(1, c_exp + 8 - (int32_t)sh);
        for (int i = 0; i < 8; i++) {
            int code = (int)qk_kv8_code(m[i], l, r) - QK_KV8_BIAS;
            double value = ldexp((double)m[i], m_exp), err = fabs(code * step - value);
            ck_assert_msg(err <= step / 2 || (abs(code) == 127 && err <= step), "trial %d: code %d for %g (step %g)",
                          trial, code, value, step);
            top = (uint32_t)abs(code) > top ? (uint32_t)abs(code) : top;
        }
        ck_assert_msg(top >= 64 || sh == QM_CACHE_SH_MAX || max == 0, "trial %d: largest code %u at shift %u", trial,
                      top, sh);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv8");
    TCase *tc = tcase_create("lanes");
    tcase_add_test(tc, score_lanes_give_the_exact_dot_product);
    tcase_add_test(tc, score_lanes_need_the_stated_query_bound);
    tcase_add_test(tc, value_lanes_give_the_exact_weighted_sums);
    tcase_add_test(tc, value_weight_is_the_rounded_quotient);
    tcase_add_test(tc, codes_keep_seven_bits_of_each_vector);
    suite_add_tcase(s, tc);
    return qp_test_main(s);
}
