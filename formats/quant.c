/* quant.c - group-scaled INT4 / INT8 quantisers (see quant.h).
 *
 * Everything is computed in the tensor's integer units: X_j = x_j * 2^E
 * (exact in double), reconstructed values V_j = D q_j - M with integer D, M.
 * The real-valued search works on (s, b) with V = s q + b; the final stage
 * rounds to pf16 and works on the integers the kernel will use.
 */
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- pf16 ---- */

uint16_t qnt_param_encode(double y)
{
    /* |y| < 2^(ilogb+1): shifts below ilogb - 10 cannot fit 11 magnitude bits */
    int s0 = y != 0 ? ilogb(y) - 11 : 0;
    if (s0 < 0)
        s0 = 0;
    for (int s = s0; s <= QNT_PF16_SHIFT_MAX; s++) {
        double t = rint(ldexp(y, -s));
        if (t >= QNT_PF16_MANT_MIN && t <= QNT_PF16_MANT_MAX)
            return (uint16_t)((s << 12) | ((int)t & 0xfff));
    }
    int t = y > 0 ? QNT_PF16_MANT_MAX : QNT_PF16_MANT_MIN;
    return (uint16_t)((QNT_PF16_SHIFT_MAX << 12) | (t & 0xfff));
}

int qnt_tensor_exponent(double max_abs)
{
    if (!(max_abs > 0))
        return 0;
    for (int e = QNT_E_MAX; e >= QNT_E_MIN; e--)
        if (2.0 * ldexp(max_abs, e) <= (double)QNT_PF16_INT_MAX)
            return e;
    return QNT_E_MIN;
}

double qnt_bits_per_weight(int bits, int group)
{
    int params = bits == 4 ? 32 : 16;
    return bits + (double)params / group;
}

double qnt_i4_value(uint8_t q, uint16_t d, uint16_t m, int E)
{
    return ldexp((double)qnt_i4_int(q, d, m), -E);
}

double qnt_i8_value(int8_t q, uint16_t d, int E)
{
    return ldexp((double)qnt_param_int(d) * q, -E);
}

uint32_t qnt_i4_code_sum(const uint8_t *q, int n)
{
    uint32_t s = 0;
    for (int j = 0; j < n; j++)
        s += q[j];
    return s;
}

int32_t qnt_i8_code_sum(const int8_t *q, int n)
{
    int32_t s = 0;
    for (int j = 0; j < n; j++)
        s += q[j];
    return s;
}

/* ---- shared group state ---- */

typedef struct grp {
    int n;
    double X[QNT_MAX_GROUP]; /* x * 2^E */
    double w[QNT_MAX_GROUP]; /* weights, 1 when none given */
    double sw, sx;           /* Σ w, Σ w X */
    double min, max, amax, amax_signed;
} grp;

static void grp_init(grp *g, const float *x, const float *w, int n, int E)
{
    g->n = n;
    g->sw = g->sx = 0;
    int have_w = 0;
    if (w) {
        for (int j = 0; j < n; j++)
            if (w[j] > 0)
                have_w = 1;
    }
    double scale = ldexp(1.0, E);
    g->min = g->max = (double)x[0] * scale;
    g->amax = 0;
    g->amax_signed = 0;
    for (int j = 0; j < n; j++) {
        double X = (double)x[j] * scale;
        double wj = have_w ? (w[j] > 0 ? (double)w[j] : 0.0) : 1.0;
        g->X[j] = X;
        g->w[j] = wj;
        g->sw += wj;
        g->sx += wj * X;
        if (X < g->min)
            g->min = X;
        if (X > g->max)
            g->max = X;
        if (fabs(X) > g->amax) {
            g->amax = fabs(X);
            g->amax_signed = X;
        }
    }
}

static inline double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ======================= INT4 ======================= */

/* code sums for the least-squares refit, gathered while assigning */
typedef struct lsum {
    double sl, sll, slx;
} lsum;

/* codes for V = s q + b (s > 0), returns Σ w (X - V)^2 and the code sums */
static double i4_assign(const grp *g, double s, double b, uint8_t *L, lsum *ls)
{
    double e0 = 0, e1 = 0, sl = 0, sll = 0, slx = 0;
    double is = s > 0 ? 1.0 / s : 0;
    int j = 0;
    for (; j < g->n; j++) {
        double v = clampd((g->X[j] - b) * is, 0, 15);
        int qi = (int)(v + 0.5);
        double q = qi, w = g->w[j];
        L[j] = (uint8_t)qi;
        double r = g->X[j] - (s * q + b);
        if (j & 1)
            e1 += w * r * r;
        else
            e0 += w * r * r;
        sl += w * q;
        sll += w * q * q;
        slx += w * q * g->X[j];
    }
    ls->sl = sl;
    ls->sll = sll;
    ls->slx = slx;
    return e0 + e1;
}

/* weighted least squares (s, b) for the codes summed in ls; false when
 * degenerate or the slope is not positive */
static int i4_fit(const grp *g, const lsum *ls, double *s, double *b)
{
    if (!(g->sw > 0))
        return 0;
    double det = g->sw * ls->sll - ls->sl * ls->sl;
    if (!(det > 1e-12 * g->sw * ls->sll))
        return 0;
    double ss = (g->sw * ls->slx - ls->sl * g->sx) / det;
    double bb = (ls->sll * g->sx - ls->sl * ls->slx) / det;
    if (!(ss > 0))
        return 0;
    *s = ss;
    *b = bb;
    return 1;
}

/* alternate fit / re-assign from the codes in L (sums ls); keeps improvements */
static void i4_refine(const grp *g, uint8_t *L, lsum *ls, double *s, double *b, double *err, int iters)
{
    uint8_t T[QNT_MAX_GROUP];
    for (int it = 0; it < iters; it++) {
        double ns, nb;
        lsum nls;
        if (!i4_fit(g, ls, &ns, &nb))
            return;
        double e = i4_assign(g, ns, nb, T, &nls);
        if (!(e < *err))
            return;
        *err = e;
        *s = ns;
        *b = nb;
        *ls = nls;
        memcpy(L, T, (size_t)g->n);
    }
}

/* integer domain: the nearest codes for D, M and the error (exact values) */
static double i4_assign_int(const grp *g, uint16_t d, uint16_t m, uint8_t *q, lsum *ls)
{
    double D = qnt_param_int(d), M = qnt_param_int(m);
    double iD = D != 0 ? 1.0 / D : 0;
    double e = 0, sl = 0, sll = 0, slx = 0;
    for (int j = 0; j < g->n; j++) {
        double v = clampd((g->X[j] + M) * iD, 0, 15);
        int qi = (int)(v + 0.5);
        double qq = qi, w = g->w[j];
        q[j] = (uint8_t)qi;
        double r = g->X[j] - (D * qq - M);
        e += w * r * r;
        sl += w * qq;
        sll += w * qq * qq;
        slx += w * qq * g->X[j];
    }
    if (ls) {
        ls->sl = sl;
        ls->sll = sll;
        ls->slx = slx;
    }
    return e;
}

/* the pf16 one unit-in-the-last-place away from v (dir = +1 / -1) */
static uint16_t pf16_step(uint16_t v, int dir)
{
    int32_t P = qnt_param_int(v);
    int s = v >> 12;
    return qnt_param_encode((double)P + dir * ldexp(1.0, s));
}

static double i4_rtn(const grp *g, uint8_t *q, uint16_t *d, uint16_t *m)
{
    *d = qnt_param_encode((g->max - g->min) / 15.0);
    *m = qnt_param_encode(-g->min);
    return i4_assign_int(g, *d, *m, q, NULL);
}

static double i4_absmax(const grp *g, uint8_t *q, uint16_t *d, uint16_t *m)
{
    /* llama.cpp Q4_0: w = D (q - 8), D = -max_signed / 8, so the extreme value
     * lands on code 0 exactly and the other side reaches 7 D; M = 8 D */
    *d = qnt_param_encode(-g->amax_signed / 8.0);
    *m = qnt_param_encode(8.0 * qnt_param_int(*d)); /* exact: 8 t << s */
    return i4_assign_int(g, *d, *m, q, NULL);
}

/* Search: range steps 15 + k for k in [LO, HI] by STEP, each anchored at the
 * minimum and at the maximum, each refined by up to CAND_ITERS least-squares
 * / re-assignment rounds; the best is refined to convergence. A denser grid
 * (0.125, 6 rounds) gains < 0.2 % MSE for 2.3x the time; an exhaustive 2-D
 * grid over both ends of the range is within 0.5 % (see the report). */
#define I4_CAND_LO (-2.0)
#define I4_CAND_HI (1.0)
#define I4_CAND_STEP (0.25)
#define I4_CAND_ITERS 3
#define I4_FINAL_ITERS 20

static double i4_search(const grp *g, uint8_t *q, uint16_t *d, uint16_t *m)
{
    uint8_t L[QNT_MAX_GROUP], best_L[QNT_MAX_GROUP], T[QNT_MAX_GROUP];
    lsum ls, best_ls;
    double range = g->max - g->min;
    double best_s = range / 15.0, best_b = g->min;
    double best = i4_assign(g, best_s, best_b, best_L, &best_ls);
    if (range > 0) {
        int nk = (int)((I4_CAND_HI - I4_CAND_LO) / I4_CAND_STEP + 0.5);
        for (int k = 0; k <= nk; k++) {
            double steps = 15.0 + I4_CAND_LO + k * I4_CAND_STEP;
            for (int anchor = 0; anchor < 2; anchor++) {
                double s = range / steps;
                double b = anchor == 0 ? g->min : g->max - 15.0 * s;
                double e = i4_assign(g, s, b, L, &ls);
                i4_refine(g, L, &ls, &s, &b, &e, I4_CAND_ITERS);
                if (e < best) {
                    best = e;
                    best_s = s;
                    best_b = b;
                    best_ls = ls;
                    memcpy(best_L, L, (size_t)g->n);
                }
            }
        }
        i4_refine(g, best_L, &best_ls, &best_s, &best_b, &best, I4_FINAL_ITERS);
    }

    /* to the integer domain: round, re-assign, refit while it helps */
    uint16_t bd = qnt_param_encode(best_s), bm = qnt_param_encode(-best_b);
    double be = i4_assign_int(g, bd, bm, q, &ls);
    for (int it = 0; it < 4; it++) {
        double s, b;
        lsum nls;
        if (!i4_fit(g, &ls, &s, &b))
            break;
        uint16_t nd = qnt_param_encode(s), nm = qnt_param_encode(-b);
        if (nd == bd && nm == bm)
            break;
        double e = i4_assign_int(g, nd, nm, T, &nls);
        if (!(e < be))
            break;
        be = e;
        bd = nd;
        bm = nm;
        ls = nls;
        memcpy(q, T, (size_t)g->n);
    }
    /* the one-ulp neighbourhood of the rounded parameters */
    uint16_t cd = bd, cm = bm;
    for (int dd = -1; dd <= 1; dd++) {
        for (int dm = -1; dm <= 1; dm++) {
            if (!dd && !dm)
                continue;
            uint16_t nd = dd ? pf16_step(cd, dd) : cd, nm = dm ? pf16_step(cm, dm) : cm;
            if (qnt_param_int(nd) <= 0)
                continue;
            double e = i4_assign_int(g, nd, nm, T, NULL);
            if (e < be) {
                be = e;
                bd = nd;
                bm = nm;
                memcpy(q, T, (size_t)g->n);
            }
        }
    }
    /* never worse than either round-to-nearest (min/max, absmax) on the
     * reconstructed values */
    for (int k = 0; k < 2; k++) {
        uint16_t rd, rm;
        double re = k == 0 ? i4_rtn(g, T, &rd, &rm) : i4_absmax(g, T, &rd, &rm);
        if (re <= be) {
            be = re;
            bd = rd;
            bm = rm;
            memcpy(q, T, (size_t)g->n);
        }
    }
    *d = bd;
    *m = bm;
    return be;
}

double qnt_i4_group(const float *x, const float *w, int n, int E, qnt_method method,
                    uint8_t *q, uint16_t *d, uint16_t *m)
{
    grp g;
    grp_init(&g, x, w, n, E);
    double e;
    switch (method) {
    case QNT_SEARCH:
        e = i4_search(&g, q, d, m);
        break;
    case QNT_ABSMAX:
        e = i4_absmax(&g, q, d, m);
        break;
    default:
        e = i4_rtn(&g, q, d, m);
        break;
    }
    return ldexp(e, -2 * E);
}

/* ======================= INT8 ======================= */

static inline double round_half_away(double v)
{
    return (double)(int32_t)(v + (v >= 0 ? 0.5 : -0.5));
}

static double i8_assign_int(const grp *g, uint16_t d, int8_t *q)
{
    double D = qnt_param_int(d), iD = D > 0 ? 1.0 / D : 0;
    double e = 0;
    for (int j = 0; j < g->n; j++) {
        double qq = D > 0 ? round_half_away(clampd(g->X[j] * iD, -127, 127)) : 0;
        q[j] = (int8_t)qq;
        double r = g->X[j] - D * qq;
        e += g->w[j] * r * r;
    }
    return e;
}

static double i8_assign(const grp *g, double s, int8_t *L)
{
    double e = 0, is = s > 0 ? 1.0 / s : 0;
    for (int j = 0; j < g->n; j++) {
        double qq = round_half_away(clampd(g->X[j] * is, -127, 127));
        L[j] = (int8_t)qq;
        double r = g->X[j] - s * qq;
        e += g->w[j] * r * r;
    }
    return e;
}

static int i8_fit(const grp *g, const int8_t *L, double *s)
{
    double sll = 0, slx = 0;
    for (int j = 0; j < g->n; j++) {
        sll += g->w[j] * L[j] * L[j];
        slx += g->w[j] * L[j] * g->X[j];
    }
    if (!(sll > 0) || !(slx > 0))
        return 0;
    *s = slx / sll;
    return 1;
}

static double i8_rtn(const grp *g, int8_t *q, uint16_t *d)
{
    *d = qnt_param_encode(g->amax / 127.0);
    return i8_assign_int(g, *d, q);
}

static double i8_search(const grp *g, int8_t *q, uint16_t *d)
{
    int8_t L[QNT_MAX_GROUP], T[QNT_MAX_GROUP];
    double best_s = g->amax / 127.0;
    double best = i8_assign(g, best_s, L);
    if (g->amax > 0) {
        for (int k = 0; k <= 10; k++) {
            double s = g->amax / (123.0 + 0.5 * k);
            double e = i8_assign(g, s, T);
            for (int it = 0; it < 3; it++) {
                double ns;
                if (!i8_fit(g, T, &ns))
                    break;
                int8_t U[QNT_MAX_GROUP];
                double ne = i8_assign(g, ns, U);
                if (!(ne < e))
                    break;
                e = ne;
                s = ns;
                memcpy(T, U, (size_t)g->n);
            }
            if (e < best) {
                best = e;
                best_s = s;
            }
        }
    }
    uint16_t bd = qnt_param_encode(best_s);
    double be = i8_assign_int(g, bd, q);
    for (int dd = -2; dd <= 2; dd++) {
        if (!dd)
            continue;
        uint16_t nd = bd;
        for (int k = 0; k < abs(dd); k++)
            nd = pf16_step(nd, dd > 0 ? 1 : -1);
        if (qnt_param_int(nd) < 0)
            continue;
        double e = i8_assign_int(g, nd, T);
        if (e < be) {
            be = e;
            bd = nd;
            memcpy(q, T, (size_t)g->n);
        }
    }
    uint16_t rd;
    double re = i8_rtn(g, T, &rd);
    if (re <= be) {
        be = re;
        bd = rd;
        memcpy(q, T, (size_t)g->n);
    }
    *d = bd;
    return be;
}

double qnt_i8_group(const float *x, const float *w, int n, int E, qnt_method method,
                    int8_t *q, uint16_t *d)
{
    grp g;
    grp_init(&g, x, w, n, E);
    double e = method == QNT_SEARCH ? i8_search(&g, q, d) : i8_rtn(&g, q, d);
    return ldexp(e, -2 * E);
}

/* ======================= tensors ======================= */

void qnt_tensor_free(qnt_tensor *t)
{
    free(t->codes);
    free(t->d);
    free(t->m);
    memset(t, 0, sizeof *t);
}

int qnt_quantize_tensor(const float *x, const float *w, uint32_t rows, uint32_t cols, int bits,
                        int group, qnt_method method, qnt_tensor *t, qnt_stats *st, qp_err *err)
{
    memset(t, 0, sizeof *t);
    if (bits != 4 && bits != 8)
        return qp_fail(err, "quantise: %d bits (4 or 8)", bits);
    if (group < 1 || group > QNT_MAX_GROUP || cols % (uint32_t)group)
        return qp_fail(err, "quantise: group %d does not divide %u columns (or is not in 1..%d)",
                       group, cols, QNT_MAX_GROUP);
    if (method != QNT_RTN && method != QNT_SEARCH && !(method == QNT_ABSMAX && bits == 4))
        return qp_fail(err, "quantise: method %d not available for %d bits", (int)method, bits);
    size_t count = (size_t)rows * cols, ngroups = count / (size_t)group;
    double max_abs = 0;
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(x[i]))
            return qp_fail(err, "quantise: value %zu (row %zu, col %zu) is not finite", i,
                           i / cols, i % cols);
        if (fabs(x[i]) > max_abs)
            max_abs = fabs(x[i]);
        if (w && !(w[i] >= 0 && isfinite(w[i])))
            return qp_fail(err, "quantise: weight %zu is negative or not finite", i);
    }
    t->bits = bits;
    t->group = group;
    t->rows = rows;
    t->cols = cols;
    t->E = qnt_tensor_exponent(max_abs);
    t->codes = malloc(count ? count : 1);
    t->d = malloc((ngroups ? ngroups : 1) * sizeof *t->d);
    if (bits == 4)
        t->m = malloc((ngroups ? ngroups : 1) * sizeof *t->m);
    if (!t->codes || !t->d || (bits == 4 && !t->m)) {
        qnt_tensor_free(t);
        return qp_fail(err, "quantise: out of memory for %zu values", count);
    }
    for (size_t gi = 0; gi < ngroups; gi++) {
        const float *xg = x + gi * (size_t)group;
        const float *wg = w ? w + gi * (size_t)group : NULL;
        if (bits == 4)
            qnt_i4_group(xg, wg, group, t->E, method, t->codes + gi * (size_t)group, &t->d[gi],
                         &t->m[gi]);
        else
            qnt_i8_group(xg, wg, group, t->E, method, (int8_t *)(t->codes + gi * (size_t)group),
                         &t->d[gi]);
    }
    if (st)
        qnt_tensor_stats(t, x, st);
    return 0;
}

static double tensor_value(const qnt_tensor *t, size_t i, double unit)
{
    size_t gi = i / (size_t)t->group;
    if (t->bits == 4)
        return (double)qnt_i4_int(t->codes[i], t->d[gi], t->m[gi]) * unit;
    return (double)qnt_param_int(t->d[gi]) * (int8_t)t->codes[i] * unit;
}

void qnt_dequantize_tensor(const qnt_tensor *t, float *out)
{
    size_t count = (size_t)t->rows * t->cols;
    double unit = ldexp(1.0, -t->E);
    for (size_t i = 0; i < count; i++)
        out[i] = (float)tensor_value(t, i, unit);
}

void qnt_tensor_stats(const qnt_tensor *t, const float *x, qnt_stats *st)
{
    size_t count = (size_t)t->rows * t->cols;
    memset(st, 0, sizeof *st);
    double unit = ldexp(1.0, -t->E);
    for (size_t i = 0; i < count; i++) {
        double r = fabs((double)x[i] - tensor_value(t, i, unit));
        if (fabs(x[i]) > st->max_abs)
            st->max_abs = fabs(x[i]);
        if (r > st->max_err)
            st->max_err = r;
        st->sse += r * r;
    }
    st->rms_err = count ? sqrt(st->sse / (double)count) : 0;
    st->bits_per_weight = qnt_bits_per_weight(t->bits, t->group);
}

void qnt_tensor_code_sums(const qnt_tensor *t, int32_t *sums)
{
    size_t ngroups = (size_t)t->rows * t->cols / (size_t)t->group;
    for (size_t gi = 0; gi < ngroups; gi++) {
        const uint8_t *c = t->codes + gi * (size_t)t->group;
        sums[gi] = t->bits == 4 ? (int32_t)qnt_i4_code_sum(c, t->group)
                                : qnt_i8_code_sum((const int8_t *)c, t->group);
    }
}
