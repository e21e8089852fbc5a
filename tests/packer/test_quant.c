/* test_quant.c - packer/quant.h: the pf16 parameter encoding, the INT4 /
 * INT8 group quantisers (search never worse than RTN on the reconstructed
 * values, exact on grids, edge groups), the whole-tensor helpers, and a
 * measurement over 1M Gaussian weights with outliers (printed). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "qp_test.h"

static uint64_t rng;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double uniform(void) { return ((next_u64() >> 11) + 0.5) * 0x1p-53; }
static double gauss(void) { return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()); }
static double student_t(int dof)
{
    double c = 0;
    for (int i = 0; i < dof; i++) {
        double g = gauss();
        c += g * g;
    }
    return gauss() / sqrt(c / dof);
}

enum { D_NORMAL, D_STUDENT, D_OUTLIER, D_POSITIVE, D_UNIFORM, D_SPARSE, D_KINDS };

static void fill_group(float *x, int n, int kind, double scale)
{
    for (int j = 0; j < n; j++) {
        double v;
        switch (kind) {
        case D_STUDENT: v = student_t(2); break;
        case D_POSITIVE: v = 3 + fabs(gauss()); break;
        case D_UNIFORM: v = 2 * uniform() - 1; break;
        case D_SPARSE: v = next_u64() % 4 ? 0 : gauss(); break;
        default: v = gauss(); break;
        }
        x[j] = (float)(v * scale);
    }
    if (kind == D_OUTLIER)
        x[next_u64() % n] = (float)((next_u64() & 1 ? 1 : -1) * scale * (10 + 40 * uniform()));
}

/* the error of codes + parameters recomputed independently, in long double */
static long double i4_err(const float *x, const float *w, int n, int E, const uint8_t *q, uint16_t d,
                          uint16_t m, double *max_err)
{
    long double e = 0;
    *max_err = 0;
    for (int j = 0; j < n; j++) {
        ck_assert_uint_le(q[j], 15);
        long double v = ldexpl((long double)pf16_int(d) * q[j] - pf16_int(m), -E);
        long double r = (long double)x[j] - v;
        e += (w ? w[j] : 1.0L) * r * r;
        if (fabsl(r) > *max_err)
            *max_err = (double)fabsl(r);
    }
    return e;
}

static long double i8_err(const float *x, const float *w, int n, int E, const int8_t *q, uint16_t d,
                          double *max_err)
{
    long double e = 0;
    *max_err = 0;
    for (int j = 0; j < n; j++) {
        ck_assert_int_ge(q[j], -127);
        long double v = ldexpl((long double)pf16_int(d) * q[j], -E);
        long double r = (long double)x[j] - v;
        e += (w ? w[j] : 1.0L) * r * r;
        if (fabsl(r) > *max_err)
            *max_err = (double)fabsl(r);
    }
    return e;
}

static int group_E(const float *x, int n)
{
    double a = 0;
    for (int j = 0; j < n; j++)
        a = fmax(a, fabs(x[j]));
    return qnt_tensor_exponent(a);
}

static void close_enough(double got, long double want)
{
    double tol = 1e-9 * (double)want + 1e-300;
    ck_assert_msg(fabs(got - (double)want) <= tol, "returned error %.17g, recomputed %.17Lg", got, want);
}

/* ---- pf16 ---- */

START_TEST(pf16_round_trip)
{
    for (uint32_t v = 0; v < 65536; v++) {
        int32_t P = pf16_int((uint16_t)v);
        uint16_t c = pf16_encode(P);
        ck_assert_int_eq(pf16_int(c), P);
        ck_assert_uint_eq(pf16_encode(pf16_int(c)), c); /* canonical form is a fixed point */
        int t = (int)(int16_t)(uint16_t)(v << 4) >> 4, s = (int)(v >> 12);
        ck_assert_int_eq(P, t * (1 << s));
    }
    ck_assert_int_eq(pf16_int(pf16_encode(1e30)), PF16_INT_MAX);
    ck_assert_int_eq(pf16_int(pf16_encode(-1e30)), -2048 * 32768);
    ck_assert_int_eq(pf16_int(pf16_encode(0.49)), 0);
    ck_assert_int_eq(pf16_int(pf16_encode(2047.4)), 2047);
    ck_assert_int_eq(pf16_int(pf16_encode(2047.6)), 2048);
    ck_assert_int_eq(pf16_int(pf16_encode(-2048.4)), -2048);
    rng = 1;
    for (int i = 0; i < 200000; i++) {
        double y = ldexp(2 * uniform() - 1, (int)(next_u64() % 26));
        uint16_t c = pf16_encode(y);
        int s = c >> 12;
        double err = fabs(pf16_int(c) - y);
        ck_assert_msg(err <= ldexp(0.5, s), "y %.17g -> %d (shift %d)", y, pf16_int(c), s);
        /* 11 significant bits whenever |y| >= 1024 */
        if (fabs(y) >= 1024)
            ck_assert_msg(err <= fabs(y) * 0x1p-11, "y %.17g rel err %g", y, err / fabs(y));
    }
}
END_TEST

/* the definition in quant.h, with the library calls: the smallest shift s
 * whose rint(y / 2^s) fits the 12-bit mantissa, saturating */
static uint16_t pf16_reference(double y)
{
    for (int s = 0; s <= PF16_SHIFT_MAX; s++) {
        double t = rint(ldexp(y, -s));
        if (t >= PF16_MANT_MIN && t <= PF16_MANT_MAX)
            return (uint16_t)((s << 12) | ((int)t & 0xfff));
    }
    return (uint16_t)((PF16_SHIFT_MAX << 12) | ((y > 0 ? PF16_MANT_MAX : PF16_MANT_MIN) & 0xfff));
}

START_TEST(pf16_encode_matches_definition)
{
    rng = 3;
    for (int i = 0; i < 1000000; i++) {
        double y;
        switch (i % 4) {
        case 0: y = ldexp(2 * uniform() - 1, (int)(next_u64() % 60) - 20); break;
        case 1: y = ldexp((double)(int)(next_u64() % 8192) - 4096 + 0.5 * (next_u64() % 3), (int)(next_u64() % 17));
                break; /* ties at every shift */
        case 2: y = ldexp(uniform(), -1060 + (int)(next_u64() % 60)); break; /* subnormal and tiny */
        default: y = (next_u64() & 1 ? 1 : -1) * ldexp(uniform(), (int)(next_u64() % 40)); break;
        }
        ck_assert_msg(pf16_encode(y) == pf16_reference(y), "y %a: %04x, definition %04x", y,
                      pf16_encode(y), pf16_reference(y));
    }
}
END_TEST

START_TEST(tensor_exponent)
{
    ck_assert_int_eq(qnt_tensor_exponent(0), 0);
    for (double a = 1e-44; a < 3e38; a *= 7.3) {
        int E = qnt_tensor_exponent(a);
        ck_assert(2 * ldexp(a, E) <= PF16_INT_MAX);
        ck_assert(E > QNT_E_MIN && E < QNT_E_MAX);
        if (E < QNT_E_MAX)
            ck_assert(2 * ldexp(a, E + 1) > PF16_INT_MAX);
    }
}
END_TEST

/* ---- groups ---- */

static const int sizes[] = {32, 64, 128, 7};

START_TEST(search_never_worse_i4)
{
    rng = 0x1234567ull + (uint64_t)_i;
    int n = sizes[_i];
    long double tot_rtn = 0, tot_search = 0;
    for (int it = 0; it < 3000; it++) {
        float x[QNT_MAX_GROUP], w[QNT_MAX_GROUP];
        int kind = it % D_KINDS;
        double scale = ldexp(1.0, (int)(next_u64() % 40) - 30);
        fill_group(x, n, kind, scale);
        int weighted = (it / D_KINDS) % 3 == 1;
        for (int j = 0; j < n; j++)
            w[j] = (float)(0.1 + uniform() * uniform() * 4);
        const float *wp = weighted ? w : NULL;
        int E = group_E(x, n);
        uint8_t qr[QNT_MAX_GROUP], qs[QNT_MAX_GROUP], qa[QNT_MAX_GROUP];
        uint16_t dr, mr, ds, ms, da, ma;
        double er = qnt_i4_group(x, wp, n, E, QNT_RTN, qr, &dr, &mr);
        double es = qnt_i4_group(x, wp, n, E, QNT_SEARCH, qs, &ds, &ms);
        double ea = qnt_i4_group(x, wp, n, E, QNT_ABSMAX, qa, &da, &ma);
        double mx_r, mx_s, mx_a;
        long double Er = i4_err(x, wp, n, E, qr, dr, mr, &mx_r);
        long double Es = i4_err(x, wp, n, E, qs, ds, ms, &mx_s);
        long double Ea = i4_err(x, wp, n, E, qa, da, ma, &mx_a);
        close_enough(er, Er);
        close_enough(es, Es);
        close_enough(ea, Ea);
        ck_assert_msg(Es <= Er, "group %d kind %d: search %.9Lg > rtn %.9Lg", it, kind, Es, Er);
        /* RTN's bound: half a step plus the parameters' rounding */
        double mn = x[0], mxv = x[0];
        for (int j = 0; j < n; j++) {
            mn = fmin(mn, x[j]);
            mxv = fmax(mxv, x[j]);
        }
        double bound = (mxv - mn) / 30 * (1 + 0x1p-9) + fmax(fabs(mn), fabs(mxv)) * 0x1p-10 + ldexp(1, -E);
        ck_assert_msg(mx_r <= bound, "rtn max err %g > %g", mx_r, bound);
        if (!weighted) {
            ck_assert(sqrt((double)Es) <= sqrt((double)Er) * (1 + 1e-12)); /* so max_s <= sqrt(SSE_rtn) */
            ck_assert(mx_s <= sqrt((double)Er) * (1 + 1e-9) + 1e-300);
            tot_rtn += Er / (scale * scale);
            tot_search += Es / (scale * scale);
        }
    }
    printf("INT4 n=%d: search/rtn squared error over random groups %.3f\n", n,
           (double)(tot_search / tot_rtn));
}
END_TEST

START_TEST(search_never_worse_i8)
{
    rng = 0x7654321ull + (uint64_t)_i;
    int n = sizes[_i];
    for (int it = 0; it < 2000; it++) {
        float x[QNT_MAX_GROUP], w[QNT_MAX_GROUP];
        int kind = it % D_KINDS;
        fill_group(x, n, kind, ldexp(1.0, (int)(next_u64() % 40) - 30));
        for (int j = 0; j < n; j++)
            w[j] = (float)(0.1 + uniform() * 3);
        const float *wp = it % 2 ? w : NULL;
        int E = group_E(x, n);
        int8_t qr[QNT_MAX_GROUP], qs[QNT_MAX_GROUP];
        uint16_t dr, ds;
        double er = qnt_i8_group(x, wp, n, E, QNT_RTN, qr, &dr);
        double es = qnt_i8_group(x, wp, n, E, QNT_SEARCH, qs, &ds);
        double mr, ms;
        long double Er = i8_err(x, wp, n, E, qr, dr, &mr), Es = i8_err(x, wp, n, E, qs, ds, &ms);
        close_enough(er, Er);
        close_enough(es, Es);
        ck_assert_msg(Es <= Er, "group %d: search %.9Lg > rtn %.9Lg", it, Es, Er);
        double amax = 0;
        for (int j = 0; j < n; j++)
            amax = fmax(amax, fabs(x[j]));
        ck_assert(mr <= amax / 254 * (1 + 0x1p-9) + ldexp(1, -E));
    }
}
END_TEST

START_TEST(edge_groups)
{
    const int n = 32, E = 20;
    float x[32];
    uint8_t q[32];
    int8_t q8[32];
    uint16_t d, m;
    for (int method = 0; method < 3; method++) {
        /* all zero: exact */
        memset(x, 0, sizeof x);
        ck_assert(qnt_i4_group(x, NULL, n, 0, method, q, &d, &m) == 0);
        ck_assert_int_eq(pf16_int(d) * 0 + pf16_int(m), 0);
        if (method != QNT_ABSMAX)
            ck_assert(qnt_i8_group(x, NULL, n, 0, method, q8, &d) == 0);
        /* constant: within the parameter rounding (2^-11 relative) */
        for (int j = 0; j < n; j++)
            x[j] = -0.3f;
        int Ec = group_E(x, n);
        double e = qnt_i4_group(x, NULL, n, Ec, method, q, &d, &m);
        ck_assert_msg(e <= n * pow(0.3 * 0x1p-11, 2), "constant group error %g", e);
        /* tiny values: the exponent adapts, the relative error is as for normal ones */
        double big_e = 0, tiny_e = 0;
        rng = 99;
        fill_group(x, n, D_NORMAL, 1.0);
        big_e = qnt_i4_group(x, NULL, n, group_E(x, n), method, q, &d, &m);
        for (int j = 0; j < n; j++)
            x[j] = (float)ldexp(x[j], -100);
        tiny_e = qnt_i4_group(x, NULL, n, group_E(x, n), method, q, &d, &m);
        ck_assert_msg(fabs(ldexp(tiny_e, 200) - big_e) <= 1e-9 * big_e, "tiny %g big %g", tiny_e, big_e);
    }
    /* values on an INT4 grid (both ends used): exact */
    for (int k = 0; k < 50; k++) {
        int D = 1 + (int)(next_u64() % 2047), M = (int)(next_u64() % 4001) - 2000;
        for (int j = 0; j < n; j++) {
            int qq = j < 16 ? j : (int)(next_u64() % 16);
            x[j] = (float)ldexp((double)D * qq - M, -E);
        }
        for (int method = 0; method < 2; method++) {
            double e = qnt_i4_group(x, NULL, n, E, method, q, &d, &m);
            ck_assert_msg(e == 0, "grid D %d M %d method %d: error %g", D, M, method, e);
            for (int j = 0; j < n; j++)
                ck_assert(qnt_i4_value(q[j], d, m, E) == x[j]);
        }
        /* INT8 grid */
        for (int j = 0; j < n; j++) {
            int qq = j == 0 ? 127 : j == 1 ? -127 : (int)(next_u64() % 255) - 127;
            x[j] = (float)ldexp((double)D * qq, -E);
        }
        for (int method = 0; method < 2; method++) {
            double e = qnt_i8_group(x, NULL, n, E, method, q8, &d);
            ck_assert_msg(e == 0, "int8 grid D %d method %d: error %g", D, method, e);
            for (int j = 0; j < n; j++)
                ck_assert(qnt_i8_value(q8[j], d, E) == x[j]);
        }
    }
    /* a single outlier: search clearly better than RTN */
    rng = 5;
    double sr = 0, ss = 0;
    for (int k = 0; k < 500; k++) {
        fill_group(x, n, D_OUTLIER, 0.02);
        int Eg = group_E(x, n);
        sr += qnt_i4_group(x, NULL, n, Eg, QNT_RTN, q, &d, &m);
        ss += qnt_i4_group(x, NULL, n, Eg, QNT_SEARCH, q, &d, &m);
    }
    printf("INT4 g32 one outlier per group: search/rtn squared error %.3f\n", ss / sr);
    ck_assert(ss < 0.9 * sr);
}
END_TEST

/* A group on a Q4_0 grid whose largest value is not on code -8 (llama.cpp's
 * Q4_0 with an importance matrix: x = d c, d an f16, c in -8..7) is kept
 * exactly by absmax, whatever its extreme code; the values rebuilt from
 * the codes are the group's, bit for bit. */
START_TEST(q4_0_grids_are_kept_exactly)
{
    const int n = 32;
    float x[32];
    uint8_t q[32];
    uint16_t d, m;
    for (int it = 0; it < 2000; it++) {
        int top = 1 + (int)(next_u64() % 8), sign = next_u64() & 1 ? 1 : -1;  /* the extreme code */
        float scale = ldexpf(1 + (float)(next_u64() % 1024) / 1024, (int)(next_u64() % 30) - 20);
        for (int j = 0; j < n; j++) {
            int c = (int)(next_u64() % (2 * top + 1)) - top;
            x[j] = scale * (float)(c < -8 ? -8 : c > 7 ? 7 : c);
        }
        x[next_u64() % n] = scale * (float)(sign * top == 8 ? 7 : sign * top);
        int E = group_E(x, n);
        double e = qnt_i4_group(x, NULL, n, E, QNT_ABSMAX, q, &d, &m);
        ck_assert_msg(e == 0, "group %d (extreme code %d): error %g", it, sign * top, e);
        for (int j = 0; j < n; j++)
            ck_assert_msg(ldexp((double)((int64_t)pf16_int(d) * q[j] - pf16_int(m)), -E) == x[j],
                          "group %d value %d", it, j);
    }
}
END_TEST

START_TEST(code_sums)
{
    uint8_t q[5] = {0, 15, 3, 7, 15};
    int8_t q8[4] = {-127, 127, -5, 3};
    ck_assert_uint_eq(qnt_i4_code_sum(q, 5), 40);
    ck_assert_int_eq(qnt_i8_code_sum(q8, 4), -2);
    ck_assert(qnt_bits_per_weight(4, 32) == 5.0);
    ck_assert(qnt_bits_per_weight(4, 128) == 4.25);
    ck_assert(qnt_bits_per_weight(8, 32) == 8.5);
}
END_TEST

/* ---- the generic build: the same bits as the one in use ---- */

double qnt_generic_i4_group(const float *x, const float *w, int n, int E, qnt_method method, uint8_t *q,
                            uint16_t *d, uint16_t *m);
double qnt_generic_i8_group(const float *x, const float *w, int n, int E, qnt_method method, int8_t *q,
                            uint16_t *d);
void qnt_generic_i4_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                        uint8_t *q, uint16_t *d, uint16_t *m, qnt_damage *dmg);

static const int generic_sizes[] = {32, 64, 128, 256, 7, 1, 33};

START_TEST(generic_build_same_bits)
{
    rng = 0xfeedull + (uint64_t)_i;
    int n = generic_sizes[_i];
    for (int it = 0; it < 1500; it++) {
        float x[QNT_MAX_GROUP], w[QNT_MAX_GROUP];
        int kind = it % D_KINDS;
        fill_group(x, n, kind, ldexp(1.0, (int)(next_u64() % 40) - 30));
        for (int j = 0; j < n; j++)
            w[j] = (float)(next_u64() % 7 ? 0.1 + uniform() * uniform() * 400 : 0);
        const float *wp = it % 3 ? w : NULL;
        int E = group_E(x, n);
        qnt_method method = it % 5 == 0 ? QNT_RTN : it % 5 == 1 ? QNT_ABSMAX : QNT_SEARCH;
        uint8_t q[QNT_MAX_GROUP], qg[QNT_MAX_GROUP];
        uint16_t d, m, dg, mg;
        double e = qnt_i4_group(x, wp, n, E, method, q, &d, &m);
        double eg = qnt_generic_i4_group(x, wp, n, E, method, qg, &dg, &mg);
        ck_assert_msg(memcmp(&e, &eg, sizeof e) == 0 && d == dg && m == mg && memcmp(q, qg, (size_t)n) == 0,
                      "int4 group %d (n %d, kind %d, method %d): error %a vs %a, d %04x/%04x, m %04x/%04x", it,
                      n, kind, (int)method, e, eg, d, dg, m, mg);
        qnt_damage dr = {0}, drg = {0};
        qnt_i4_row(x, wp, (uint32_t)n, n, E, method, q, &d, &m, &dr);
        qnt_generic_i4_row(x, wp, (uint32_t)n, n, E, method, qg, &dg, &mg, &drg);
        ck_assert(memcmp(&dr, &drg, sizeof dr) == 0);
        if (method == QNT_ABSMAX)
            continue;
        e = qnt_i8_group(x, wp, n, E, method, (int8_t *)q, &d);
        eg = qnt_generic_i8_group(x, wp, n, E, method, (int8_t *)qg, &dg);
        ck_assert_msg(memcmp(&e, &eg, sizeof e) == 0 && d == dg && memcmp(q, qg, (size_t)n) == 0,
                      "int8 group %d (n %d, kind %d): error %a vs %a, d %04x/%04x", it, n, kind, e, eg, d, dg);
    }
}
END_TEST

/* ---- rows ---- */

/* A row is its groups: the same codes and parameters as qnt_i4_group /
 * qnt_i8_group, and the damage recomputed independently (long double). */
START_TEST(rows_are_their_groups)
{
    rng = 77;
    const uint32_t cols = 512;
    float x[512], w[512];
    for (int it = 0; it < 40; it++) {
        int group = (int[]){32, 64, 128, 16}[it % 4];
        for (uint32_t j = 0; j < cols; j++) {
            x[j] = (float)(0.02 * gauss() * (it % 5 == 0 && j % 97 == 0 ? 30 : 1));
            w[j] = (float)(0.1 + uniform() * uniform() * 9);
        }
        const float *wp = it % 2 ? w : NULL;
        int E = group_E(x, (int)cols);
        qnt_method method = it % 3 == 0 ? QNT_RTN : QNT_SEARCH;
        uint8_t q4[512], g4[512];
        int8_t q8[512], g8[512];
        uint16_t d4[32], m4[32], d8[32];
        qnt_damage dmg4 = {0}, dmg8 = {0};
        qnt_i4_row(x, wp, cols, group, E, method, q4, d4, m4, &dmg4);
        qnt_i8_row(x, wp, cols, group, E, method, q8, d8, &dmg8);
        long double ss4 = 0, ss8 = 0;
        double mx4 = 0, mx8 = 0, amax = 0;
        for (uint32_t g0 = 0, gi = 0; g0 < cols; g0 += (uint32_t)group, gi++) {
            uint16_t d, m;
            qnt_i4_group(x + g0, wp ? wp + g0 : NULL, group, E, method, g4, &d, &m);
            ck_assert_msg(d == d4[gi] && m == m4[gi] && memcmp(g4, q4 + g0, (size_t)group) == 0, "it %d group %u: d %04x/%04x m %04x/%04x codes %d", it, gi, d, d4[gi], m, m4[gi], memcmp(g4, q4 + g0, (size_t)group));
            qnt_i8_group(x + g0, wp ? wp + g0 : NULL, group, E, method, g8, &d);
            ck_assert(d == d8[gi] && memcmp(g8, q8 + g0, (size_t)group) == 0);
            for (int j = 0; j < group; j++) {
                long double r4 = (long double)x[g0 + j] - ldexpl((long double)qnt_i4_int(g4[j], d4[gi], m4[gi]), -E);
                long double r8 = (long double)x[g0 + j] - ldexpl((long double)pf16_int(d) * g8[j], -E);
                ss4 += r4 * r4;
                ss8 += r8 * r8;
                mx4 = fmax(mx4, (double)fabsl(r4));
                mx8 = fmax(mx8, (double)fabsl(r8));
                amax = fmax(amax, fabs(x[g0 + j]));
            }
        }
        close_enough(dmg4.sum_sq, ss4);
        close_enough(dmg8.sum_sq, ss8);
        ck_assert(dmg4.max_err == mx4 && dmg8.max_err == mx8);
        ck_assert(dmg4.max_abs == amax && dmg8.max_abs == amax);
    }
}
END_TEST

/* i4k's scales: a scale times a multiple is the exact product, for every
 * valid scale and multiple; the encoder gives valid scales, the nearest
 * (ties to even) at the smallest shift that holds the value */
START_TEST(i4k_scales_multiply_exactly)
{
    for (uint32_t s = 0; s <= 15; s++)
        for (int t = PF16_I4K_MANT_MIN; t <= PF16_I4K_MANT_MAX; t++) {
            uint16_t scale = (uint16_t)(s << 12 | (t & 0xfff));
            ck_assert(pf16_i4k_scale_valid(scale));
            for (unsigned a = 0; a < 64; a++)
                ck_assert_int_eq(pf16_int(pf16_i4k_param(scale, a)), (int64_t)t * a * ((int64_t)1 << s));
        }
    ck_assert(!pf16_i4k_scale_valid(32) && !pf16_i4k_scale_valid(0xfff & -33) && !pf16_i4k_scale_valid(2047));
    rng = 5;
    for (int it = 0; it < 100000; it++) {
        double y = (uniform() - 0.5) * ldexp(1.0, (int)(next_u64() % 21));     /* below 31 x 2^15 */
        uint16_t e = pf16_i4k_scale_encode(y);
        ck_assert(pf16_i4k_scale_valid(e));
        int s = e >> 12;
        double step = ldexp(1.0, s), got = pf16_int(e);
        ck_assert_msg(fabs(got - y) <= step / 2, "%g -> %g (shift %d)", y, got, s);
        if (s > 0)  /* a smaller shift could not hold it */
            ck_assert(fabs(y) / ldexp(1.0, s - 1) > 31.5 || y / ldexp(1.0, s - 1) < -32.5);
    }
}
END_TEST

void qnt_generic_i6_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                        int8_t *q, uint16_t *d, qnt_damage *dmg);
void qnt_generic_i7_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                        int8_t *q, uint16_t *d, qnt_damage *dmg);
void qnt_generic_i4k_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                         uint8_t *q, uint16_t *sd, uint16_t *sm, uint8_t *sub, qnt_damage *dmg);

/* 6- and 7-bit codes (i6g, i7g) and super-block parameters (i4k) on
 * Gaussian rows: the codes in range, the damage what the codes and
 * (expanded) parameters give, recomputed in long double; the error about
 * what the fewer bits cost with the search: i6 ~ (127 / 31)^2 x i8's
 * squared error, i7 ~ (31 / 63)^2 x i6's (half its RMS error), i4k within
 * 5 % of i4g's; and the generic build gives the same bits. */
START_TEST(packed_rows)
{
    rng = 91;
    const uint32_t cols = 512;
    float x[512], w[512];
    long double ss6 = 0, ss7 = 0, ss8 = 0, ssk = 0, ss4 = 0;
    for (int it = 0; it < 40; it++) {
        int group = (int[]){32, 64}[it % 2];
        for (uint32_t j = 0; j < cols; j++) {
            x[j] = (float)(0.02 * gauss() * (it % 5 == 0 && j % 97 == 0 ? 30 : 1));
            w[j] = (float)(0.1 + uniform() * uniform() * 9);
        }
        const float *wp = it % 2 ? w : NULL;
        int E = group_E(x, (int)cols);
        qnt_method method = it % 3 == 0 ? QNT_RTN : it % 3 == 1 ? QNT_ABSMAX : QNT_SEARCH;
        int8_t q6[512], q7[512], q8[512], g6[512], g7[512];
        uint8_t qk[512], q4[512], gk[512], sub[32], gsub[32];
        uint16_t d6[16], d7[16], d8[16], d4[16], m4[16], sd[2], sm[2], gd[16], gd7[16], gsd[2], gsm[2];
        qnt_damage dmg6 = {0}, dmg7 = {0}, dmg8 = {0}, dmgk = {0}, dmg4 = {0}, g6d = {0}, g7d = {0}, gkd = {0};
        qnt_i6_row(x, wp, cols, group, E, method == QNT_ABSMAX ? QNT_RTN : method, q6, d6, &dmg6);
        qnt_i7_row(x, wp, cols, group, E, method == QNT_ABSMAX ? QNT_RTN : method, q7, d7, &dmg7);
        qnt_i8_row(x, wp, cols, group, E, method == QNT_ABSMAX ? QNT_RTN : method, q8, d8, &dmg8);
        qnt_i4k_row(x, wp, cols, group, E, method, qk, sd, sm, sub, &dmgk);
        qnt_i4_row(x, wp, cols, group, E, method, q4, d4, m4, &dmg4);
        qnt_generic_i6_row(x, wp, cols, group, E, method == QNT_ABSMAX ? QNT_RTN : method, g6, gd, &g6d);
        qnt_generic_i7_row(x, wp, cols, group, E, method == QNT_ABSMAX ? QNT_RTN : method, g7, gd7, &g7d);
        qnt_generic_i4k_row(x, wp, cols, group, E, method, gk, gsd, gsm, gsub, &gkd);
        ck_assert(memcmp(q6, g6, cols) == 0 && memcmp(d6, gd, sizeof d6) == 0 && memcmp(&dmg6, &g6d, sizeof g6d) == 0);
        ck_assert(memcmp(q7, g7, cols) == 0 && memcmp(d7, gd7, sizeof d7) == 0 && memcmp(&dmg7, &g7d, sizeof g7d) == 0);
        ck_assert(memcmp(qk, gk, cols) == 0 && memcmp(sub, gsub, sizeof sub) == 0 && memcmp(sd, gsd, sizeof sd) == 0 &&
                  memcmp(sm, gsm, sizeof sm) == 0 && memcmp(&dmgk, &gkd, sizeof gkd) == 0);
        long double r6 = 0, r7 = 0, rk = 0;
        double mx6 = 0, mx7 = 0, mxk = 0;
        int top7 = 0;
        uint32_t span = (uint32_t)group * QNT_I4K_GROUPS;
        for (uint32_t j = 0; j < cols; j++) {
            uint32_t gi = j / (uint32_t)group, si = j / span, i = gi % QNT_I4K_GROUPS;
            ck_assert_int_le(abs(q6[j]), 31);
            ck_assert_int_le(abs(q7[j]), 63);
            top7 = abs(q7[j]) > top7 ? abs(q7[j]) : top7;
            ck_assert_uint_le(qk[j], 15);
            ck_assert_uint_le(sub[16 * si + i], 63);
            ck_assert_uint_le(sub[16 * si + 8 + i], 63);
            ck_assert(pf16_i4k_scale_valid(sd[si]) && pf16_i4k_scale_valid(sm[si]));
            uint16_t d = pf16_i4k_param(sd[si], sub[16 * si + i]), m = pf16_i4k_param(sm[si], sub[16 * si + 8 + i]);
            long double e6 = (long double)x[j] - ldexpl((long double)pf16_int(d6[gi]) * q6[j], -E);
            long double e7 = (long double)x[j] - ldexpl((long double)pf16_int(d7[gi]) * q7[j], -E);
            long double ek = (long double)x[j] - ldexpl((long double)qnt_i4_int(qk[j], d, m), -E);
            r6 += e6 * e6;
            r7 += e7 * e7;
            mx7 = fmax(mx7, (double)fabsl(e7));
            rk += ek * ek;
            mx6 = fmax(mx6, (double)fabsl(e6));
            mxk = fmax(mxk, (double)fabsl(ek));
        }
        close_enough(dmg6.sum_sq, r6);
        close_enough(dmg7.sum_sq, r7);
        close_enough(dmgk.sum_sq, rk);
        ck_assert(dmg6.max_err == mx6 && dmg7.max_err == mx7 && dmgk.max_err == mxk);
        ck_assert_int_gt(top7, 31);     /* the codes use the seventh bit */
        if (method != QNT_SEARCH)
            continue;   /* i4k refits m, which makes up for much of rtn's error: compare the search */
        ss6 += dmg6.sum_sq;
        ss7 += dmg7.sum_sq;
        ss8 += dmg8.sum_sq;
        ssk += dmgk.sum_sq;
        ss4 += dmg4.sum_sq;
    }
    double r68 = (double)(ss6 / ss8), r76 = (double)(ss7 / ss6), rk4 = (double)(ssk / ss4);
    printf("squared error: i6 / i8 %.2f, i7 / i6 %.3f, i4k / i4g %.4f\n", r68, r76, rk4);
    ck_assert_msg(r68 > 12 && r68 < 22, "i6 / i8 %g", r68);
    ck_assert_msg(r76 > 0.18 && r76 < 0.32, "i7 / i6 %g", r76);
    ck_assert_msg(rk4 >= 0.99 && rk4 < 1.05, "i4k / i4g %g", rk4);
}
END_TEST

/* ---- tensors ---- */

static float *gen_matrix(size_t n, uint64_t seed, int outliers)
{
    float *x = malloc(n * sizeof *x);
    rng = seed;
    for (size_t i = 0; i < n; i++) {
        double v = 0.02 * gauss();
        if (outliers && next_u64() % 500 == 0)
            v = (next_u64() & 1 ? 1 : -1) * 0.02 * (4 + 12 * uniform());
        x[i] = (float)v;
    }
    return x;
}

START_TEST(tensor_round_trip)
{
    const uint32_t rows = 24, cols = 256;
    size_t n = (size_t)rows * cols;
    float *x = gen_matrix(n, 11, 1), *y = malloc(n * sizeof *y);
    qp_err err;
    for (int bits = 4; bits <= 8; bits += 4) {
        for (int g = 32; g <= 128; g *= 2) {
            qnt_tensor t, t2;
            qnt_stats st;
            ck_assert_int_eq(qnt_quantize_tensor(x, NULL, rows, cols, bits, g, QNT_SEARCH, &t, &st, &err), 0);
            /* deterministic: a second run gives the same bytes */
            ck_assert_int_eq(qnt_quantize_tensor(x, NULL, rows, cols, bits, g, QNT_SEARCH, &t2, NULL, &err), 0);
            size_t ng = n / g;
            ck_assert_int_eq(memcmp(t.codes, t2.codes, n), 0);
            ck_assert_int_eq(memcmp(t.d, t2.d, ng * 2), 0);
            if (bits == 4)
                ck_assert_int_eq(memcmp(t.m, t2.m, ng * 2), 0);
            else
                ck_assert_ptr_null(t.m);
            qnt_dequantize_tensor(&t, y);
            double sse = 0, mx = 0;
            for (size_t i = 0; i < n; i++) {
                double r = fabs((double)x[i] - y[i]);
                sse += r * r;
                mx = fmax(mx, r);
            }
            ck_assert(fabs(sqrt(sse / n) - st.rms_err) <= 1e-6 * st.rms_err);
            ck_assert(fabs(mx - st.max_err) <= 1e-6 * st.max_err);
            ck_assert(st.bits_per_weight == qnt_bits_per_weight(bits, g));
            /* each group agrees with the group API */
            int32_t *sums = malloc(ng * sizeof *sums);
            qnt_tensor_code_sums(&t, sums);
            for (size_t gi = 0; gi < ng; gi += 7) {
                uint8_t q[QNT_MAX_GROUP];
                uint16_t d, m = 0;
                if (bits == 4)
                    qnt_i4_group(x + gi * g, NULL, g, t.E, QNT_SEARCH, q, &d, &m);
                else
                    qnt_i8_group(x + gi * g, NULL, g, t.E, QNT_SEARCH, (int8_t *)q, &d);
                ck_assert_int_eq(memcmp(q, t.codes + gi * g, g), 0);
                ck_assert_uint_eq(d, t.d[gi]);
                int32_t s = bits == 4 ? (int32_t)qnt_i4_code_sum(q, g) : qnt_i8_code_sum((int8_t *)q, g);
                ck_assert_int_eq(s, sums[gi]);
            }
            free(sums);
            qnt_tensor_free(&t);
            qnt_tensor_free(&t2);
        }
    }
    free(x);
    free(y);
}
END_TEST

START_TEST(tensor_errors)
{
    float x[64] = {0};
    qnt_tensor t;
    qp_err err;
    ck_assert_int_eq(qnt_quantize_tensor(x, NULL, 2, 32, 5, 32, QNT_RTN, &t, NULL, &err), -1);
    ck_assert_int_eq(qnt_quantize_tensor(x, NULL, 2, 32, 4, 64, QNT_RTN, &t, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "group 64"));
    ck_assert_int_eq(qnt_quantize_tensor(x, NULL, 2, 32, 8, 32, QNT_ABSMAX, &t, NULL, &err), -1);
    x[37] = NAN;
    ck_assert_int_eq(qnt_quantize_tensor(x, NULL, 2, 32, 4, 32, QNT_SEARCH, &t, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "row 1, col 5"));
    x[37] = 0;
    ck_assert_int_eq(qnt_quantize_tensor(x, NULL, 2, 32, 4, 32, QNT_SEARCH, &t, NULL, &err), 0);
    qnt_tensor_free(&t);
}
END_TEST

/* 1M Gaussian weights (std 0.02, one in 500 an outlier of 4..16 sigma) */
START_TEST(measure_1m)
{
    const uint32_t rows = 1024, cols = 1024;
    size_t n = (size_t)rows * cols;
    float *x = gen_matrix(n, 2024, 1);
    static const struct { int bits, group; double max_ratio; } cfg[] = {
        {4, 32, 0.85}, {4, 64, 0.87}, {4, 128, 0.87}, {8, 32, 0.95}};
    double rms[4][2];
    qp_err err;
    printf("1M Gaussian weights (std 0.02, outliers): rms error, rtn vs search\n");
    for (int c = 0; c < 4; c++) {
        for (int method = 0; method < 2; method++) {
            qnt_tensor t;
            qnt_stats st;
            ck_assert_int_eq(qnt_quantize_tensor(x, NULL, rows, cols, cfg[c].bits, cfg[c].group, method,
                                                 &t, &st, &err), 0);
            rms[c][method] = st.rms_err;
            qnt_tensor_free(&t);
        }
        double ratio = pow(rms[c][1] / rms[c][0], 2);
        printf("  INT%d g%-3d  %.3f bpw  rtn %.4e  search %.4e  mse ratio %.3f\n", cfg[c].bits, cfg[c].group,
               qnt_bits_per_weight(cfg[c].bits, cfg[c].group), rms[c][0], rms[c][1], ratio);
        ck_assert_msg(ratio <= cfg[c].max_ratio, "INT%d g%d: ratio %.3f", cfg[c].bits, cfg[c].group, ratio);
    }
    /* INT8 is far more precise than INT4 */
    ck_assert(rms[3][1] * 8 < rms[0][1]);
    fflush(stdout);
    free(x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("pf16");
    tcase_add_test(tc, pf16_round_trip);
    tcase_add_test(tc, pf16_encode_matches_definition);
    tcase_add_test(tc, tensor_exponent);
    tcase_add_test(tc, code_sums);
    suite_add_tcase(s, tc);
    tc = tcase_create("groups");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, search_never_worse_i4, 0, 4);
    tcase_add_loop_test(tc, search_never_worse_i8, 0, 4);
    tcase_add_test(tc, edge_groups);
    tcase_add_test(tc, q4_0_grids_are_kept_exactly);
    tcase_add_loop_test(tc, generic_build_same_bits, 0, (int)(sizeof generic_sizes / sizeof *generic_sizes));
    suite_add_tcase(s, tc);
    tc = tcase_create("tensors");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, rows_are_their_groups);
    tcase_add_test(tc, i4k_scales_multiply_exactly);
    tcase_add_test(tc, packed_rows);
    tcase_add_test(tc, tensor_round_trip);
    tcase_add_test(tc, tensor_errors);
    tcase_add_test(tc, measure_1m);
    suite_add_tcase(s, tc);
    return qp_test_main_nofork(s);
}
