/* bench_quant.c - reconstruction error and speed of the INT4/INT8 quantisers
 * (packer/quant.h) on synthetic weights: Gaussian std 0.02 with a sprinkle
 * of outliers, and the same with Student-t (3 dof) tails. Also measures an
 * IQ4_NL-style non-uniform 4-bit codebook for comparison (not in the
 * library: its codes need a table look-up the SWAR kernel cannot do).
 *
 *   qp-bench-quant [rows cols]      (default 1024 x 1024)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double uniform(void) { return ((next_u64() >> 11) + 0.5) * 0x1p-53; }
static double gauss(void) { return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()); }
static double student_t3(void)
{
    double z = gauss(), c = 0;
    for (int i = 0; i < 3; i++) {
        double g = gauss();
        c += g * g;
    }
    return z / sqrt(c / 3);
}

/* Gaussian std 0.02; one weight in 500 is an outlier of 4..16 sigma */
static void fill(float *x, size_t n, int tails)
{
    for (size_t i = 0; i < n; i++) {
        double v = 0.02 * (tails ? student_t3() / sqrt(3.0) : gauss());
        if (next_u64() % 500 == 0)
            v = (next_u64() & 1 ? 1 : -1) * 0.02 * (4 + 12 * uniform());
        x[i] = (float)v;
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU time: the machine is shared */
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* IQ4_NL-style: w = D * kv[q] * 2^-E; scale search with least-squares refit */
static const int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static int nearest_kv(double a)
{
    int best = 0;
    double bd = INFINITY;
    for (int k = 0; k < 16; k++) {
        double dd = fabs(a - kv[k]);
        if (dd < bd) {
            bd = dd;
            best = k;
        }
    }
    return best;
}
static double nl_group(const float *x, int n, int E)
{
    double X[QNT_MAX_GROUP], amax = 0, mx = 0;
    for (int j = 0; j < n; j++) {
        X[j] = ldexp(x[j], E);
        if (fabs(X[j]) > amax) {
            amax = fabs(X[j]);
            mx = X[j];
        }
    }
    if (amax == 0)
        return 0;
    double best_d = mx / kv[0], best = INFINITY;
    for (int sgn = -1; sgn <= 1; sgn += 2) {
        for (int it = -10; it <= 10; it++) {
            double d = sgn * mx / (kv[0] + it), sqx = 0, sqq = 0;
            for (int j = 0; j < n; j++) {
                double k = kv[nearest_kv(X[j] / d)];
                sqx += k * X[j];
                sqq += k * k;
            }
            if (sqq <= 0)
                continue;
            d = sqx / sqq;
            double e = 0;
            for (int j = 0; j < n; j++) {
                double r = X[j] - d * kv[nearest_kv(X[j] / d)];
                e += r * r;
            }
            if (e < best) {
                best = e;
                best_d = d;
            }
        }
    }
    double D = pf16_int(pf16_encode(best_d)), e = 0;
    for (int j = 0; j < n; j++) {
        double r = X[j] - D * kv[nearest_kv(X[j] / D)];
        e += r * r;
    }
    return ldexp(e, -2 * E);
}

int main(int argc, char **argv)
{
    uint32_t rows = argc > 2 ? (uint32_t)atoi(argv[1]) : 1024, cols = argc > 2 ? (uint32_t)atoi(argv[2]) : 1024;
    size_t n = (size_t)rows * cols;
    float *x = malloc(n * sizeof *x);
    for (int tails = 0; tails < 2; tails++) {
        fill(x, n, tails);
        double ss = 0;
        for (size_t i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        printf("%s weights, %u x %u, rms %.5f\n", tails ? "Student-t(3)" : "Gaussian", rows, cols,
               sqrt(ss / n));
        printf("%-5s %-5s %-8s %10s %10s %8s %7s %9s\n", "bits", "group", "method", "rms_err", "max_err",
               "mse/rtn", "bpw", "cpu ns/w");
        static const struct { int bits, group; } cfg[] = {{4, 32}, {4, 64}, {4, 128}, {8, 32}};
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            double rtn_mse = 0;
            for (int method = 0; method < 3; method++) {
                static const int order[] = {QNT_RTN, QNT_ABSMAX, QNT_SEARCH};
                static const char *name[] = {"rtn", "search", "absmax"};
                int mth = order[method];
                if (mth == QNT_ABSMAX && cfg[c].bits != 4)
                    continue;
                qnt_tensor t;
                qnt_stats st;
                qp_err err;
                double t0 = now();
                if (qnt_quantize_tensor(x, NULL, rows, cols, cfg[c].bits, cfg[c].group, mth, &t, &st, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                double dt = now() - t0;
                double mse = st.sse / n;
                if (mth == QNT_RTN)
                    rtn_mse = mse;
                printf("%-5d %-5d %-8s %10.3e %10.3e %8.3f %7.3f %9.1f\n", cfg[c].bits, cfg[c].group,
                       name[mth], st.rms_err, st.max_err, mse / rtn_mse, st.bits_per_weight, dt / n * 1e9);
                qnt_tensor_free(&t);
            }
            if (cfg[c].bits == 4) {
                double mx = 0;
                for (size_t i = 0; i < n; i++)
                    mx = fmax(mx, fabs(x[i]));
                int E = qnt_tensor_exponent(mx);
                double sse = 0, t0 = now();
                for (size_t g = 0; g < n / cfg[c].group; g++)
                    sse += nl_group(x + g * cfg[c].group, cfg[c].group, E);
                double dt = now() - t0;
                printf("%-5d %-5d %-8s %10.3e %10s %8.3f %7.3f %9.1f\n", 4, cfg[c].group, "iq4nl",
                       sqrt(sse / n), "-", sse / n / rtn_mse, 4 + 16.0 / cfg[c].group, dt / n * 1e9);
            }
        }
        printf("\n");
    }
    free(x);
    return 0;
}
