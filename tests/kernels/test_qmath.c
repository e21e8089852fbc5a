/* test_qmath.c - qmath.h: every function's BPF build equals its host build
 * bit for bit on edge and random inputs, and the approximations stay within
 * their stated error of float64 math. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "qmath_test.h"
#include "qmath_test.skel.h"
#include "qp_test.h"

static struct qmath_test *skel;
static struct qmt_case *io;     /* the mmapped map */

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void setup(void)
{
    skel = qmath_test__open_and_load();
    ck_assert_msg(skel, "cannot load qmath_test.bpf.o (needs root)");
    io = mmap(NULL, sizeof(struct qmt_case) * QMT_BATCH, PROT_READ | PROT_WRITE, MAP_SHARED,
              bpf_map__fd(skel->maps.io), 0);
    ck_assert(io != MAP_FAILED);
}

static void teardown(void)
{
    munmap(io, sizeof(struct qmt_case) * QMT_BATCH);
    qmath_test__destroy(skel);
}

static void run_bpf(uint32_t fn, uint32_t n)
{
    uint8_t data[14 + 8] = {0};
    uint32_t args[2] = {fn, n};
    memcpy(data + 14, args, sizeof args);
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = data, .data_size_in = sizeof data, .repeat = 1);
    ck_assert_int_eq(bpf_prog_test_run_opts(bpf_program__fd(skel->progs.qmath_eval), &o), 0);
    ck_assert_int_eq(o.retval, 0);
}

/* inputs for fn: edge values first, then random ones shaped to its domain */
static void fill_inputs(uint32_t fn, struct qmt_case *c, uint32_t n)
{
    static const int64_t edges[] = {0, 1, -1, 2, -2, 3, (1ll << 24), -(1ll << 24), INT32_MAX, INT32_MIN,
                                    (1ll << 62), -(1ll << 62), INT64_MAX, INT64_MIN + 1};
    for (uint32_t i = 0; i < n; i++) {
        uint64_t r = next_u64();
        int64_t a = i < 14 ? edges[i] : (int64_t)(r >> (next_u64() % 64));
        if (next_u64() & 1)
            a = -a;
        memset(&c[i], 0, sizeof c[i]);
        c[i].a = a;
        switch (fn) {
        case QMT_RSHIFT_ROUND: c[i].b = (int64_t)(next_u64() % 64); break;
        case QMT_SCALE_POW2:
            c[i].a = a >> 20;
            c[i].b = (int64_t)(next_u64() % 80) - 60;
            break;
        case QMT_MUL_Q30: c[i].b = (int64_t)(next_u64() % (1ull << 31)); break;
        case QMT_SF_MAKE: c[i].b = (int64_t)(next_u64() % 200) - 100; break;
        case QMT_SF_MUL:
        case QMT_SF_ADD:
        case QMT_LOG2_ARG:
        case QMT_LIN_ARG:
        case QMT_SF_RSQRT:
            if (fn != QMT_LOG2_ARG && fn != QMT_LIN_ARG)
                c[i].a = i == 0 ? 0 : (int64_t)((1ull << 31) | (next_u64() >> 33));
            c[i].b = (int64_t)(next_u64() % 120) - 60;
            c[i].c = (int64_t)((1ull << 31) | (next_u64() >> 33));
            c[i].d = (int64_t)(next_u64() % 120) - 60;
            if (fn == QMT_LOG2_ARG || fn == QMT_LIN_ARG)
                c[i].a = (int64_t)(next_u64() >> (next_u64() % 64));
            break;
        case QMT_EXP2_NEG: c[i].a = (int64_t)(next_u64() % (40ull << 24)); break;
        case QMT_ACC_TO_Q32:
            c[i].a = a >> 8;
            c[i].b = (int64_t)(next_u64() % 60) - 40;
            break;
        case QMT_CACHE16:
            c[i].a = a >> 30;
            c[i].b = (int64_t)(next_u64() % 60) - 40;
            c[i].c = (int64_t)(next_u64() % 60) - 40;
            c[i].d = (int64_t)(next_u64() % 16);
            break;
        case QMT_V_STRETCH: c[i].a = (int64_t)(next_u64() % (1u << 16)); break;
        case QMT_SCALE_CHECKED:
            c[i].a = (int64_t)next_u64() >> (1 + next_u64() % 63);
            c[i].b = (int64_t)(next_u64() % 140) - 70;
            break;
        case QMT_V_WEIGHT:
            c[i].a = (int64_t)(next_u64() % ((1ull << 30) + 1));
            c[i].b = (int64_t)(next_u64() % 16);
            c[i].c = (int64_t)(next_u64() % 16);
            break;
        default: break;
        }
    }
}

START_TEST(every_function_matches_its_host_build)
{
    static struct qmt_case want[QMT_BATCH];
    for (uint32_t fn = 0; fn < QMT_COUNT; fn++) {
        for (int round = 0; round < 4; round++) {
            fill_inputs(fn, want, QMT_BATCH);
            memcpy(io, want, sizeof want);
            run_bpf(fn, QMT_BATCH);
            for (uint32_t i = 0; i < QMT_BATCH; i++) {
                qmt_eval(fn, &want[i]);
                ck_assert_msg(want[i].r0 == io[i].r0 && want[i].r1 == io[i].r1,
                              "fn %u case %u (a=%lld b=%lld c=%lld d=%lld): host %lld/%lld, bpf %lld/%lld", fn, i,
                              (long long)want[i].a, (long long)want[i].b, (long long)want[i].c,
                              (long long)want[i].d, (long long)want[i].r0, (long long)want[i].r1,
                              (long long)io[i].r0, (long long)io[i].r1);
            }
        }
    }
}
END_TEST

/* A stretched cache entry is the value times (16 + st) / 16 at the cache
 * exponent, rounded once, saturating at 32767; the attention weight that
 * undoes it and the vector's shift sh is p 2^(12 - sh) / (16 + st)
 * rounded once; the stretch qm_v_stretch
 * picks is the largest that keeps every value up to max16 + 1 in range
 * (none at all for max16 = 32767, which the shift never leaves). */
START_TEST(v_stretch_is_exact)
{
    for (int i = 0; i < 200000; i++) {
        int64_t m = (int64_t)(next_u64() % (1ull << 40)) - (1ll << 39);
        int32_t m_exp = -(int32_t)(next_u64() % 40), c_exp = m_exp + (int32_t)(next_u64() % 40) - 10;
        uint32_t st = (uint32_t)(next_u64() % 16), l, r;
        qm_cache_shifts(m_exp, c_exp, &l, &r);
        double exact = ldexp((double)m, m_exp - c_exp) * (16 + st) / 16;
        if (fabs(exact - trunc(exact)) == 0.5)
            continue;   /* ties: the kernels round half up, nearbyint to even */
        double want = fmax(-32767, fmin(32767, nearbyint(exact)));
        ck_assert_msg(qm_to_cache16(m, l, r, st) == want, "m %lld at 2^%d to 2^%d, st %u: %d, want %g",
                      (long long)m, m_exp, c_exp, st, qm_to_cache16(m, l, r, st), want);
    }
    for (uint64_t p = 0; p <= (1u << 30); p += 4099)
        for (uint32_t st = 0; st < 16; st++)
            for (uint32_t sh = 0; sh < 16; sh += 5) {
                double exact = ldexp((double)p, 12 - (int)sh) / (16 + st);
                if (fabs(exact - trunc(exact)) != 0.5)
                    ck_assert_int_eq(qm_v_weight(p, st, sh), (int64_t)nearbyint(exact));
            }
    /* and the same bits as the division it replaces, for every st and sh
     * over p = 0 .. 2^30: the first 2^13 values, then a stride */
    for (uint64_t p = 0; p <= (1u << 30); p += p < (1u << 13) ? 1 : 131071)
        for (uint32_t st = 0; st < 16; st++)
            for (uint32_t sh = 0; sh < 16; sh++) {
                uint64_t d = (16ull + st) << sh;
                ck_assert_int_eq(qm_v_weight(p, st, sh), (int64_t)(((p << 12) + d / 2) / d));
            }
    for (uint32_t st = 0; st < 16; st++)
        for (uint32_t sh = 0; sh < 16; sh++) {
            uint64_t p = 1u << 30, d = (16ull + st) << sh;
            ck_assert_int_eq(qm_v_weight(p, st, sh), (int64_t)(((p << 12) + d / 2) / d));
        }
    for (uint64_t max16 = 0; max16 < (1u << 15); max16++) {
        uint32_t st = qm_v_stretch(max16);
        ck_assert(st == 0 || (max16 + 1) * (16 + st) <= 32767u * 16);
        ck_assert(st == 15 || (max16 + 1) * (17 + st) > 32767u * 16);
    }
}
END_TEST

/* A value headed into Q32 storage (|x| < 2^62, as every accumulator) is
 * flagged exactly when x * 2^s, exact (s >= 0) or rounded half up
 * (s < 0), lies outside [-2^61, 2^61); an unflagged result is that value. */
START_TEST(scale_checked_flags_exactly_the_values_out_of_range)
{
    for (int i = 0; i < 400000; i++) {
        int64_t x = (int64_t)next_u64() >> (2 + next_u64() % 62);   /* |x| < 2^62 */
        int32_t s = (int32_t)(next_u64() % 140) - 70;
        if (i % 4 == 0)     /* near the edge: |x| * 2^s close to 2^61 */
            s = 61 - (int32_t)(64 - __builtin_clzll((uint64_t)(x < 0 ? -(x + 1) : x) | 1)) + (int32_t)(next_u64() % 3) - 1;
        __int128 exact;
        if (s >= 0)
            exact = s > 62 ? (x ? (__int128)1 << 100 : 0) : (__int128)x * ((__int128)1 << s);
        else if (s < -62)
            exact = 0;
        else
            exact = ((__int128)x + (((__int128)1 << -s) >> 1)) >> -s;
        bool outside = exact < -((__int128)1 << 61) || exact >= ((__int128)1 << 61);
        uint64_t bad = 0;
        int64_t got = qm_scale_pow2_checked(x, s, &bad);
        ck_assert_msg((bad != 0) == outside, "x %lld s %d: flag %d, want %d", (long long)x, s, bad != 0, outside);
        ck_assert_msg(outside || got == (int64_t)exact, "x %lld s %d: %lld, want %lld", (long long)x, s,
                      (long long)got, (long long)exact);
    }
}
END_TEST

/* attention's per-head form of qm_log2_arg_q24: below t_cut, u is the
 * exact t c 2^(e+24) rounded down, or one less (the dropped low bits of t
 * are worth under 1/4); at t_cut the exact value has reached the exp2
 * cutoff and one below it has not; and it follows qm_log2_arg_q24 (which
 * rounds t and the product to 32 bits) within its rounding */
START_TEST(lin_arg_is_the_exact_product)
{
    const long double cut = (long double)QM_EXP2_CUTOFF * (1 << 24);
    for (int i = 0; i < 400000; i++) {
        struct qm_sf c = {(1ull << 31) | (next_u64() >> 33), (int32_t)(next_u64() % 40) - 60};
        int32_t e = (int32_t)(next_u64() % 60) - 40;
        uint64_t t = next_u64() >> (next_u64() % 64);
        struct qm_lin l = qm_lin_make(e, c);
        long double f = ldexpl((long double)c.m, c.e + e + 24), exact = (long double)t * f;
        if (t < l.t_cut) {
            uint64_t u = qm_lin_arg_q24(&l, t);
            ck_assert_msg(exact < cut + 1, "t %llu below t_cut %llu: exact %Lg", (unsigned long long)t,
                          (unsigned long long)l.t_cut, exact);
            ck_assert_msg((long double)u <= exact && (long double)u > exact - 2, "t %llu e %d: u %llu, exact %Lg",
                          (unsigned long long)t, e, (unsigned long long)u, exact);
            uint64_t old = qm_log2_arg_q24(t, e, c);
            ck_assert_msg(fabsl((long double)old - (long double)u) <= 2 + exact * 0x1p-30L,
                          "t %llu e %d: %llu against qm_log2_arg_q24's %llu", (unsigned long long)t, e,
                          (unsigned long long)u, (unsigned long long)old);
        }
        if (l.t_cut != ~0ull) {
            ck_assert_msg((long double)l.t_cut * f >= cut - 0.25L, "t_cut %llu: exact %Lg below the cutoff",
                          (unsigned long long)l.t_cut, (long double)l.t_cut * f);
            if (l.t_cut > 0)
                ck_assert((long double)qm_lin_arg_q24(&l, l.t_cut - 1) < cut);
        }
    }
}
END_TEST

/* exp2's polynomial divides y^3 by 6 with a multiply and a shift: the
 * same quotient for every y^3 its argument's fraction can make (and up to
 * 2^15) */
START_TEST(exp2_sixth_is_a_division)
{
    for (uint64_t y3 = 0; y3 < (1u << 15); y3++)
        ck_assert_uint_eq((y3 * 10923) >> 16, y3 / 6);
    for (uint64_t r = 0; r < (1u << 18); r++) {
        uint64_t y = (r * QM_LN2_Q30) >> 24, y2 = (y * y) >> 30, y3 = (y2 * y) >> 30;
        ck_assert_uint_lt(y3, 1u << 15);
    }
}
END_TEST

/* 2^-u: on [0, 1) (no integer shift) relative error below 3e-9; over
 * [0, 31) within 4 Q30 steps */
START_TEST(exp2_neg_is_accurate)
{
    double worst_rel = 0, worst_abs = 0;
    for (uint64_t u = 0; u < (31ull << 24); u += 997) {
        double want = ldexp(pow(2.0, -ldexp((double)u, -24)), 30);
        double got = qm_exp2_neg_q30(u);
        if (u < (1u << 24))
            worst_rel = fmax(worst_rel, fabs(got - want) / want);
        worst_abs = fmax(worst_abs, fabs(got - want));
    }
    printf("qm_exp2_neg_q30: max relative error %.3g on [0,1), max absolute error %.3g Q30 steps\n",
           worst_rel, worst_abs);
    ck_assert_msg(worst_rel < 3e-9, "exp2 relative error %g", worst_rel);
    ck_assert_msg(worst_abs <= 4.0, "exp2 absolute error %g steps", worst_abs);
}
END_TEST

START_TEST(rsqrt_is_accurate)
{
    double worst = 0;
    for (int i = 0; i < 200000; i++) {
        struct qm_sf x = {(1ull << 31) | (next_u64() >> 33), (int32_t)(next_u64() % 100) - 80};
        struct qm_sf r = qm_sf_rsqrt(x);
        double want = 1.0 / sqrt(ldexp((double)x.m, x.e));
        worst = fmax(worst, fabs(ldexp((double)r.m, r.e) - want) / want);
    }
    printf("qm_sf_rsqrt: max relative error %.3g\n", worst);
    ck_assert_msg(worst < 4e-9, "rsqrt relative error %g", worst);
}
END_TEST

START_TEST(sigmoid_is_accurate)
{
    double worst = 0;
    for (int i = 0; i < 200000; i++) {
        int64_t x = (int64_t)(next_u64() % (40ull << 32)) - (20ll << 32);
        double want = 1.0 / (1.0 + exp(-ldexp((double)x, -32)));
        worst = fmax(worst, fabs(ldexp((double)qm_sigmoid_q30(x), -30) - want));
    }
    printf("qm_sigmoid_q30: max absolute error %.3g\n", worst);
    ck_assert_msg(worst < 5e-8, "sigmoid absolute error %g", worst);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qmath");
    TCase *bpf = tcase_create("bpf_equals_host");
    tcase_add_unchecked_fixture(bpf, setup, teardown);
    tcase_add_test(bpf, every_function_matches_its_host_build);
    suite_add_tcase(s, bpf);
    TCase *acc = tcase_create("accuracy");
    tcase_add_test(acc, v_stretch_is_exact);
    tcase_add_test(acc, scale_checked_flags_exactly_the_values_out_of_range);
    tcase_add_test(acc, lin_arg_is_the_exact_product);
    tcase_add_test(acc, exp2_sixth_is_a_division);
    tcase_add_test(acc, exp2_neg_is_accurate);
    tcase_add_test(acc, rsqrt_is_accurate);
    tcase_add_test(acc, sigmoid_is_accurate);
    suite_add_tcase(s, acc);
    return qp_test_main_nofork(s);
}
