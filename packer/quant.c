/* quant.c - group-scaled INT4 / INT8 quantisers (see quant.h).
 *
 * Everything is computed in the tensor's integer units: X_j = x_j * 2^E
 * (exact in double), reconstructed values V_j = D q_j - M with integer D, M.
 * The real-valued search works on (s, b) with V = s q + b, in float, many
 * candidates at once; the final stage rounds to pf16 and works, in double, on
 * the integers the kernel will use, so the error it returns is exact to
 * double rounding.
 */
#include "quant.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int qnt_tensor_exponent(double max_abs)
{
    if (!(max_abs > 0))
        return 0;
    for (int e = QNT_E_MAX; e >= QNT_E_MIN; e--)
        if (2.0 * ldexp(max_abs, e) <= (double)PF16_INT_MAX)
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
    return ldexp((double)pf16_int(d) * q, -E);
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

/* ---- vectors ----
 *
 * The passes over a group run on GCC/clang vector extensions: 8 floats for
 * the real-valued search, 4 doubles for the integer domain. Every operation
 * is element-wise IEEE arithmetic and every sum keeps per-lane accumulators
 * added in a fixed order, so the results are the same bits whatever
 * instructions carry them: the AVX2 clone that x86-64 picks at run time
 * (HOT) and the generic code agree exactly. That needs no FMA contraction:
 * packer/CMakeLists.txt builds this file with -ffp-contract=off. */
typedef double v4d __attribute__((vector_size(32)));
typedef long long v4l __attribute__((vector_size(32)));
typedef int v4i __attribute__((vector_size(16)));
typedef float v4f __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));
typedef uint8_t v4u8 __attribute__((vector_size(4)));
typedef int8_t v4s8 __attribute__((vector_size(4)));

#define MAX_V4 (QNT_MAX_GROUP / 4)
#define MAX_V8 (QNT_MAX_GROUP / 8)

/* GCC only: clang refuses the inlined vector helpers inside a clone whose
 * target differs from theirs. QNT_NO_CLONES builds the generic code alone
 * (test_quant compares the two builds bit for bit). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(QNT_NO_CLONES)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

/* vectors are only passed to functions that are always inlined (so no
 * call has the AVX calling convention of one build and not of another) */
#define VINLINE static inline __attribute__((always_inline))

VINLINE v4d splat4(double v) { return (v4d){v, v, v, v}; }
VINLINE v8f splat8(float v) { return (v8f){v, v, v, v, v, v, v, v}; }

VINLINE v4d vsel4(v4l mask, v4d a, v4d b) { return (v4d)((mask & (v4l)a) | (~mask & (v4l)b)); }
VINLINE v8f vsel8(v8i mask, v8f a, v8f b) { return (v8f)((mask & (v8i)a) | (~mask & (v8i)b)); }

/* lo <= v <= hi; lo for a NaN, so the conversion to int that follows is
 * always defined */
VINLINE v4d vclamp4(v4d v, v4d lo, v4d hi)
{
    v = vsel4(v > lo, v, lo);
    return vsel4(v < hi, v, hi);
}
VINLINE v8f vclamp8(v8f v, v8f lo, v8f hi)
{
    v = vsel8(v > lo, v, lo);
    return vsel8(v < hi, v, hi);
}

/* the lanes added in a fixed order */
VINLINE double hsum4(v4d v) { return (v[0] + v[1]) + (v[2] + v[3]); }
VINLINE double hsum8(v8f v)
{
    return (((double)v[0] + v[1]) + ((double)v[2] + v[3])) + (((double)v[4] + v[5]) + ((double)v[6] + v[7]));
}
VINLINE double hmax4(v4d v)
{
    double a = v[0] > v[1] ? v[0] : v[1], b = v[2] > v[3] ? v[2] : v[3];
    return a > b ? a : b;
}
VINLINE float hmax8(v8f v)
{
    float m = v[0];
    for (int i = 1; i < 8; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* 2^k for -1022 <= k <= 1023, exactly (ldexp(1, k) without the call) */
static inline double pow2(int k)
{
    uint64_t bits = (uint64_t)(k + 1023) << 52;
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* ---- shared group state ---- */

typedef struct grp {
    int n;                /* values */
    int n4, n8;           /* vectors of 4 and of 8 holding them; the padding has weight 0 */
    v4d X[MAX_V4];        /* x * 2^E */
    v4d w[MAX_V4];        /* weights, 1 when none given */
    v4l w4live[MAX_V4];   /* all ones on the n values, 0 on the padding */
    v8f Xf[MAX_V8];       /* the same in float, for the real-valued search */
    v8f wf[MAX_V8];
    double sw, sx, sxx;   /* Σ w, Σ w X, Σ w X^2 */
    double min, max, amax, amax_signed;
    double i8max;         /* INT8's largest code: 127, 63 for 7-bit codes (i7g), 31 for 6-bit (i6g) */
} grp;

/* min, max, largest |x| and the first value that has it */
VINLINE void grp_range(grp *g, const float *x, double scale)
{
    v8f mn = g->Xf[0], mx = g->Xf[0], amax = {0}, zero = {0};
    for (int k = 0; k < g->n8; k++) {
        v8f v = g->Xf[k], a = vsel8(v < zero, -v, v);
        mn = vsel8(v < mn, v, mn);
        mx = vsel8(v > mx, v, mx);
        amax = vsel8(a > amax, a, amax);
    }
    float top = hmax8(amax), top_signed = 0;
    for (int j = 0; top > 0 && j < g->n; j++)
        if (fabsf(x[j]) == top) {
            top_signed = x[j];
            break;
        }
    g->min = -hmax8(-mn) * scale;
    g->max = hmax8(mx) * scale;
    g->amax = top * scale;
    g->amax_signed = top_signed * scale;
}

HOT static void grp_init(grp *g, const float *x, const float *w, int n, int E)
{
    g->n = n;
    g->i8max = 127;
    g->n4 = (n + 3) / 4;
    g->n8 = (n + 7) / 8;
    bool have_w = false;
    for (int j = 0; w && j < n && !have_w; j++)
        have_w = w[j] > 0;
    /* padded to whole vectors: the padding repeats x[0] (so it cannot move
     * the range) with weight 0 (so it adds nothing to any sum) */
    float *Xf = (float *)g->Xf, *Wf = (float *)g->wf;
    memcpy(Xf, x, sizeof *x * (size_t)n);
    if (have_w)
        memcpy(Wf, w, sizeof *w * (size_t)n);
    for (int j = n; j < 8 * g->n8; j++) {
        Xf[j] = x[0];
        Wf[j] = 0;
    }
    for (int j = 0; !have_w && j < n; j++)
        Wf[j] = 1;
    /* weights as given where positive, else 0 */
    v8f zero = {0};
    for (int k = 0; have_w && k < g->n8; k++)
        g->wf[k] = vsel8(g->wf[k] > zero, g->wf[k], zero);
    /* X = x * 2^E is exact: E is within QNT_E_MIN..QNT_E_MAX */
    double scale = pow2(E);
    grp_range(g, x, scale);
    v4d sw = {0}, sx = {0}, sxx = {0};
    for (int k = 0; k < g->n4; k++) {
        v4f xv, wv;
        memcpy(&xv, Xf + 4 * k, sizeof xv);
        memcpy(&wv, Wf + 4 * k, sizeof wv);
        v4d X = __builtin_convertvector(xv, v4d) * scale, W = __builtin_convertvector(wv, v4d);
        g->X[k] = X;
        g->w[k] = W;
        g->w4live[k] = 4 * k + (v4l){0, 1, 2, 3} < n;
        sw += W;
        sx += W * X;
        sxx += W * X * X;
        xv = __builtin_convertvector(X, v4f);
        memcpy(Xf + 4 * k, &xv, sizeof xv);
    }
    for (int j = 4 * g->n4; j < 8 * g->n8; j++)
        Xf[j] = Xf[0];
    g->sw = hsum4(sw);
    g->sx = hsum4(sx);
    g->sxx = hsum4(sxx);
}

/* ======================= INT4 ======================= */

/* the sums of a set of codes, all a least-squares fit needs */
typedef struct lsum {
    double sl, sll, slx;  /* Σ w q, Σ w q^2, Σ w q X */
} lsum;

/* a least-squares line V = s q + b through a set of codes, and its error */
typedef struct fit {
    double s, b, e;
    lsum ls;
} fit;

/* The weighted least-squares (s, b) for the codes summed in ls and its error
 * Σ w (X - V)^2 = Σ w X^2 - s Σ w q X - b Σ w X (the residual of a
 * least-squares fit is orthogonal to q and to 1). False when degenerate or
 * the slope is not positive. */
static bool i4_fit(const grp *g, const lsum *ls, fit *f)
{
    if (!(g->sw > 0))
        return false;
    double det = g->sw * ls->sll - ls->sl * ls->sl;
    if (!(det > 1e-12 * g->sw * ls->sll))
        return false;
    double s = (g->sw * ls->slx - ls->sl * g->sx) / det;
    double b = (ls->sll * g->sx - ls->sl * ls->slx) / det;
    if (!(s > 0) || !isfinite(b))
        return false;
    *f = (fit){.s = s, .b = b, .e = g->sxx - s * ls->slx - b * g->sx, .ls = *ls};
    return true;
}

/* The sums of the nearest codes 0..15 for V = s q + b (s > 0), in float. */
HOT static void i4_code_sums(const grp *g, double s, double b, lsum *ls)
{
    v8f sl = {0}, sll = {0}, slx = {0};
    v8f vb = splat8((float)b), is = splat8((float)(1.0 / s)), zero = {0}, top = splat8(15), half = splat8(0.5f);
    for (int k = 0; k < g->n8; k++) {
        v8f v = vclamp8((g->Xf[k] - vb) * is, zero, top);
        v8f q = __builtin_convertvector(__builtin_convertvector(v + half, v8i), v8f), wq = g->wf[k] * q;
        sl += wq;
        sll += wq * q;
        slx += wq * g->Xf[k];
    }
    ls->sl = hsum8(sl);
    ls->sll = hsum8(sll);
    ls->slx = hsum8(slx);
}

/* Re-assigns the codes to f's line and refits while that helps: a round
 * cannot make the error worse (the nearest codes for a line are no worse
 * than the old ones, and the fit to them no worse than the line); stops
 * when the codes no longer change. */
static void i4_refine(const grp *g, fit *f, int rounds)
{
    for (int it = 0; it < rounds; it++) {
        lsum ls;
        fit nf;
        i4_code_sums(g, f->s, f->b, &ls);
        if (ls.sl == f->ls.sl && ls.sll == f->ls.sll && ls.slx == f->ls.slx)
            return;
        if (!i4_fit(g, &ls, &nf) || !(nf.e < f->e))
            return;
        *f = nf;
    }
}

/* integer domain: the nearest codes for D, M (into q, padded to whole
 * vectors), their sums and the error of the exact values */
HOT static double i4_assign_int(const grp *g, uint16_t d, uint16_t m, uint8_t *q, lsum *ls)
{
    double D = pf16_int(d), M = pf16_int(m);
    v4d vD = splat4(D), vM = splat4(M), iD = splat4(D != 0 ? 1.0 / D : 0);
    v4d e = {0}, sl = {0}, sll = {0}, slx = {0}, zero = {0}, top = splat4(15), half = splat4(0.5);
    for (int k = 0; k < g->n4; k++) {
        v4d v = vclamp4((g->X[k] + vM) * iD, zero, top);
        v4i qi = __builtin_convertvector(v + half, v4i);
        v4u8 qb = __builtin_convertvector(qi, v4u8);
        memcpy(q + 4 * k, &qb, sizeof qb);
        v4d qq = __builtin_convertvector(qi, v4d), wq = g->w[k] * qq;
        v4d r = g->X[k] - (vD * qq - vM);
        e += g->w[k] * r * r;
        sl += wq;
        sll += wq * qq;
        slx += wq * g->X[k];
    }
    if (ls) {
        ls->sl = hsum4(sl);
        ls->sll = hsum4(sll);
        ls->slx = hsum4(slx);
    }
    return hsum4(e);
}

static double i4_rtn(const grp *g, uint8_t *q, uint16_t *d, uint16_t *m)
{
    *d = pf16_encode((g->max - g->min) / 15.0);
    *m = pf16_encode(-g->min);
    return i4_assign_int(g, *d, *m, q, NULL);
}

/* Whether the group lies on a Q4_0 grid, X = D c with c in -8..7, that pf16
 * holds: llama.cpp's Q4_0 made with an importance matrix searches its scale,
 * so its largest value need not sit on c = -8. The grid's D is X_top / c
 * for one c; the first that puts every value exactly on a code wins. */
static bool i4_on_grid(const grp *g, uint16_t *d, uint16_t *m)
{
    const double *X = (const double *)g->X;
    for (int c = -8; c <= 7 && g->amax > 0; c++) {
        if (c == 0)
            continue;
        double D = g->amax_signed / c;
        uint16_t pd = pf16_encode(D), pm = pf16_encode(8.0 * D);
        if ((double)pf16_int(pd) != D || (double)pf16_int(pm) != 8.0 * D)
            continue;
        int j = 0;
        for (; j < g->n; j++) {
            double k = nearbyint(X[j] / D);
            if (k < -8 || k > 7 || k * D != X[j])
                break;
        }
        if (j == g->n) {
            *d = pd;
            *m = pm;
            return true;
        }
    }
    return false;
}

static double i4_absmax(const grp *g, uint8_t *q, uint16_t *d, uint16_t *m)
{
    /* llama.cpp Q4_0: w = D (q - 8), D = -max_signed / 8, so the extreme value
     * lands on code 0 exactly and the other side reaches 7 D; M = 8 D */
    *d = pf16_encode(-g->amax_signed / 8.0);
    *m = pf16_encode(8.0 * pf16_int(*d)); /* exact: 8 t << s */
    return i4_assign_int(g, *d, *m, q, NULL);
}

/* The search's candidates: the group's range in 13, 13.25, ..., 16.75 steps,
 * each anchored at the minimum (even lanes) and at the maximum (odd lanes),
 * 32 lines evaluated at once; the I4_TOP best fits are refined to
 * convergence (at most I4_ROUNDS rounds): refining them all buys little
 * error for much more work (docs/QUANT.md). */
#define I4_CAND_V8 4
#define I4_CANDS (8 * I4_CAND_V8)
#define I4_TOP 3
#define I4_ROUNDS 20

static const v8f i4_cand_steps[I4_CAND_V8] = {
    {13.0f, 13.0f, 13.25f, 13.25f, 13.5f, 13.5f, 13.75f, 13.75f},
    {14.0f, 14.0f, 14.25f, 14.25f, 14.5f, 14.5f, 14.75f, 14.75f},
    {15.0f, 15.0f, 15.25f, 15.25f, 15.5f, 15.5f, 15.75f, 15.75f},
    {16.0f, 16.0f, 16.25f, 16.25f, 16.5f, 16.5f, 16.75f, 16.75f},
};

/* The code sums of every candidate line, a candidate per lane: q =
 * round(clamp((X - b) * is)) with candidate c's range in steps[c] steps,
 * anchored at the minimum (even lanes) or at the maximum (odd lanes). The
 * hot loop of an int4 pack. */
HOT static void i4_candidate_sums(const grp *g, v8f *sl, v8f *sll, v8f *slx)
{
    const float *X = (const float *)g->Xf, *W = (const float *)g->wf;
    const v8i odd = {0, -1, 0, -1, 0, -1, 0, -1};
    float range = (float)(g->max - g->min), lo = (float)g->min, hi = (float)g->max;
    v8f zero = {0}, top = splat8(15), half = splat8(0.5f);
    for (int c = 0; c < I4_CAND_V8; c++) {
        v8f a = zero, aa = zero, ax = zero;
        v8f vb = vsel8(odd, hi - 15.0f * (range / i4_cand_steps[c]), splat8(lo)), vis = i4_cand_steps[c] / range;
        for (int j = 0; j < g->n; j++) {
            v8f v = vclamp8((X[j] - vb) * vis, zero, top);
            v8f q = __builtin_convertvector(__builtin_convertvector(v + half, v8i), v8f), wq = W[j] * q;
            a += wq;
            aa += wq * q;
            ax += wq * X[j];
        }
        sl[c] = a;
        sll[c] = aa;
        slx[c] = ax;
    }
}

VINLINE v4d widen(v8f v, int half)
{
    v4f h;
    memcpy(&h, (const char *)&v + sizeof h * half, sizeof h);
    return __builtin_convertvector(h, v4d);
}

/* The fitted error of every candidate as i4_fit computes it (+inf where it
 * fails), four at a time, to rank them: only the best few are fitted again. */
HOT static void i4_candidate_errors(const grp *g, const v8f *sl8, const v8f *sll8, const v8f *slx8, double *e)
{
    v4d sw = splat4(g->sw), sx = splat4(g->sx), sxx = splat4(g->sxx), inf = splat4(INFINITY), zero = {0};
    for (int k = 0; k < I4_CANDS / 4; k++) {
        v4d sl = widen(sl8[k / 2], k % 2), sll = widen(sll8[k / 2], k % 2), slx = widen(slx8[k / 2], k % 2);
        v4d det = sw * sll - sl * sl;
        v4d s = (sw * slx - sl * sx) / det, b = (sll * sx - sl * slx) / det;
        v4l ok = (det > 1e-12 * sw * sll) & (s > zero);
        v4d ek = vsel4(ok, sxx - s * slx - b * sx, inf);
        memcpy(e + 4 * k, &ek, sizeof ek);
    }
}

/* the indices of the I4_TOP lowest errors, lowest first (a tie keeps the
 * earlier); returns how many are finite */
static int i4_best_candidates(const double *e, int *best)
{
    double be[I4_TOP];
    int n = 0;
    for (int i = 0; i < I4_CANDS; i++) {
        if (!(e[i] < INFINITY) || (n == I4_TOP && !(e[i] < be[I4_TOP - 1])))
            continue;
        int k = n < I4_TOP ? n++ : I4_TOP - 1;
        for (; k > 0 && e[i] < be[k - 1]; k--) {
            be[k] = be[k - 1];
            best[k] = best[k - 1];
        }
        be[k] = e[i];
        best[k] = i;
    }
    return n;
}

/* the real-valued search: the line V = s q + b with the least error */
static void i4_search_real(const grp *g, double *best_s, double *best_b)
{
    double range = g->max - g->min;
    *best_s = range / 15.0;
    *best_b = g->min;
    if (!(range > 0))
        return;
    v8f sl[I4_CAND_V8], sll[I4_CAND_V8], slx[I4_CAND_V8];
    i4_candidate_sums(g, sl, sll, slx);
    double e[I4_CANDS];
    i4_candidate_errors(g, sl, sll, slx, e);
    const float *a = (const float *)sl, *aa = (const float *)sll, *ax = (const float *)slx;
    int idx[I4_TOP], n_idx = i4_best_candidates(e, idx), n_top = 0;
    fit top[I4_TOP];
    for (int k = 0; k < n_idx; k++) {
        lsum ls = {a[idx[k]], aa[idx[k]], ax[idx[k]]};
        n_top += i4_fit(g, &ls, &top[n_top]);
    }
    for (int i = 0; i < n_top; i++) {
        i4_refine(g, &top[i], I4_ROUNDS);
        if (i == 0 || top[i].e < top[0].e)
            top[0] = top[i];
    }
    if (n_top) {
        *best_s = top[0].s;
        *best_b = top[0].b;
    }
}

static double i4_search(const grp *g, uint8_t *q, uint16_t *d, uint16_t *m)
{
    uint8_t T[QNT_MAX_GROUP];
    lsum ls;
    double best_s, best_b;
    i4_search_real(g, &best_s, &best_b);

    /* to the integer domain: round, re-assign, refit while it helps */
    uint16_t bd = pf16_encode(best_s), bm = pf16_encode(-best_b);
    double be = i4_assign_int(g, bd, bm, q, &ls);
    for (int it = 0; it < 4; it++) {
        fit f;
        lsum nls;
        if (!i4_fit(g, &ls, &f))
            break;
        uint16_t nd = pf16_encode(f.s), nm = pf16_encode(-f.b);
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

static double i4_quantise(const grp *g, qnt_method method, uint8_t *q, uint16_t *d, uint16_t *m)
{
    switch (method) {
    case QNT_SEARCH: return i4_search(g, q, d, m);
    case QNT_ABSMAX: /* here only: in the search's fallbacks the test would cost every group */
        return i4_on_grid(g, d, m) ? i4_assign_int(g, *d, *m, q, NULL) : i4_absmax(g, q, d, m);
    default: return i4_rtn(g, q, d, m);
    }
}

double qnt_i4_group(const float *x, const float *w, int n, int E, qnt_method method,
                    uint8_t *q, uint16_t *d, uint16_t *m)
{
    grp g;
    uint8_t codes[QNT_MAX_GROUP];
    grp_init(&g, x, w, n, E);
    double e = i4_quantise(&g, method, codes, d, m);
    memcpy(q, codes, (size_t)n);
    return e * pow2(-2 * E);
}

/* the unweighted damage of codes q with parameters D, M (tensor units) */
HOT static void i4_damage(const grp *g, const uint8_t *q, uint16_t d, uint16_t m, double *sum_sq, double *max_err)
{
    v4d vD = splat4(pf16_int(d)), vM = splat4(pf16_int(m)), ss = {0}, mx = {0}, zero = {0};
    for (int k = 0; k < g->n4; k++) {
        v4u8 qb;
        memcpy(&qb, q + 4 * k, sizeof qb);
        v4d r = g->X[k] - (vD * __builtin_convertvector(qb, v4d) - vM);
        r = vsel4(g->w4live[k], r, zero);
        r = vsel4(r < zero, -r, r);
        ss += r * r;
        mx = vsel4(r > mx, r, mx);
    }
    *sum_sq = hsum4(ss);
    *max_err = hmax4(mx);
}

/* ======================= INT8 ======================= */

/* The search's candidates: scales amax / steps for steps 120.5, 121, ...,
 * 128 (scaled by i8max / 127 for 6- and 7-bit codes), 16 at once; the best fit is refined (at most I8_ROUNDS rounds). */
#define I8_CAND_V8 2
#define I8_CANDS (8 * I8_CAND_V8)
#define I8_ROUNDS 4

static const v8f i8_cand_steps[I8_CAND_V8] = {
    {120.5f, 121.0f, 121.5f, 122.0f, 122.5f, 123.0f, 123.5f, 124.0f},
    {124.5f, 125.0f, 125.5f, 126.0f, 126.5f, 127.0f, 127.5f, 128.0f},
};

/* v clamped to ±i8max (NaN to -i8max) and rounded half away from zero */
VINLINE v8f i8_round8(v8f v, v8f lo, v8f hi, v8f half)
{
    v = vclamp8(v, lo, hi);
    v8f r = v + vsel8(v >= half - half, half, -half);
    return __builtin_convertvector(__builtin_convertvector(r, v8i), v8f);
}

VINLINE v4i i8_round4(v4d v, v4d lo, v4d hi, v4d half)
{
    v = vclamp4(v, lo, hi);
    return __builtin_convertvector(v + vsel4(v >= half - half, half, -half), v4i);
}

/* Σ w q^2 and Σ w q X of the codes of V = s q for every candidate scale
 * s = amax / steps[c], a candidate per lane */
HOT static void i8_candidate_sums(const grp *g, v8f *sll, v8f *slx)
{
    const float *X = (const float *)g->Xf, *W = (const float *)g->wf;
    float top = (float)g->i8max;
    v8f zero = {0}, lo = splat8(-top), hi = splat8(top), half = splat8(0.5f);
    for (int c = 0; c < I8_CAND_V8; c++) {
        v8f aa = zero, ax = zero, vis = i8_cand_steps[c] * (top / 127.0f) / (float)g->amax;
        for (int j = 0; j < g->n; j++) {
            v8f q = i8_round8(X[j] * vis, lo, hi, half), wq = W[j] * q;
            aa += wq * q;
            ax += wq * X[j];
        }
        sll[c] = aa;
        slx[c] = ax;
    }
}

/* the same for one scale, a value per lane */
HOT static void i8_code_sums(const grp *g, double s, double *sll, double *slx)
{
    float top = (float)g->i8max;
    v8f aa = {0}, ax = {0}, is = splat8((float)(1.0 / s)), lo = splat8(-top), hi = splat8(top), half = splat8(0.5f);
    for (int k = 0; k < g->n8; k++) {
        v8f q = i8_round8(g->Xf[k] * is, lo, hi, half), wq = g->wf[k] * q;
        aa += wq * q;
        ax += wq * g->Xf[k];
    }
    *sll = hsum8(aa);
    *slx = hsum8(ax);
}

/* integer domain: the nearest codes for D (into q, padded to whole vectors)
 * and the error of the exact values */
HOT static double i8_assign_int(const grp *g, uint16_t d, int8_t *q)
{
    double D = pf16_int(d);
    v4d vD = splat4(D), iD = splat4(D > 0 ? 1.0 / D : 0), e = {0};
    v4d lo = splat4(-g->i8max), hi = splat4(g->i8max), half = splat4(0.5);
    for (int k = 0; k < g->n4; k++) {
        v4i qi = D > 0 ? i8_round4(g->X[k] * iD, lo, hi, half) : (v4i){0};
        v4s8 qb = __builtin_convertvector(qi, v4s8);
        memcpy(q + 4 * k, &qb, sizeof qb);
        v4d r = g->X[k] - vD * __builtin_convertvector(qi, v4d);
        e += g->w[k] * r * r;
    }
    return hsum4(e);
}

static double i8_rtn(const grp *g, int8_t *q, uint16_t *d)
{
    *d = pf16_encode(g->amax / g->i8max);
    return i8_assign_int(g, *d, q);
}

/* the real-valued search: the scale s of V = s q with the least error; the
 * least-squares scale of a set of codes is Σ w q X / Σ w q^2, with the
 * error Σ w X^2 - (Σ w q X)^2 / Σ w q^2 */
static double i8_search_real(const grp *g)
{
    if (!(g->amax > 0))
        return 0;
    v8f sll8[I8_CAND_V8], slx8[I8_CAND_V8];
    i8_candidate_sums(g, sll8, slx8);
    const float *aa = (const float *)sll8, *ax = (const float *)slx8;
    double best = INFINITY, sll = 0, slx = 0;
    for (int i = 0; i < I8_CANDS; i++) {
        if (!(aa[i] > 0) || !(ax[i] > 0))
            continue;
        double e = g->sxx - (double)ax[i] * ax[i] / aa[i];
        if (e < best) {
            best = e;
            sll = aa[i];
            slx = ax[i];
        }
    }
    if (best == INFINITY)
        return g->amax / g->i8max;
    for (int it = 0; it < I8_ROUNDS; it++) {
        double a, c;
        i8_code_sums(g, slx / sll, &a, &c);
        if ((a == sll && c == slx) || !(a > 0) || !(c > 0))
            break;
        double e = g->sxx - c * c / a;
        if (!(e < best))
            break;
        best = e;
        sll = a;
        slx = c;
    }
    return slx / sll;
}

static double i8_search(const grp *g, int8_t *q, uint16_t *d)
{
    int8_t T[QNT_MAX_GROUP];
    uint16_t bd = pf16_encode(i8_search_real(g)), rd;
    double be = i8_assign_int(g, bd, q);
    /* never worse than round-to-nearest on the reconstructed values */
    double re = i8_rtn(g, T, &rd);
    if (re <= be) {
        be = re;
        bd = rd;
        memcpy(q, T, (size_t)g->n);
    }
    *d = bd;
    return be;
}

static double i8_quantise(const grp *g, qnt_method method, int8_t *q, uint16_t *d)
{
    return method == QNT_SEARCH ? i8_search(g, q, d) : i8_rtn(g, q, d);
}

double qnt_i8_group(const float *x, const float *w, int n, int E, qnt_method method,
                    int8_t *q, uint16_t *d)
{
    grp g;
    int8_t codes[QNT_MAX_GROUP];
    grp_init(&g, x, w, n, E);
    double e = i8_quantise(&g, method, codes, d);
    memcpy(q, codes, (size_t)n);
    return e * pow2(-2 * E);
}

HOT static void i8_damage(const grp *g, const int8_t *q, uint16_t d, double *sum_sq, double *max_err)
{
    v4d vD = splat4(pf16_int(d)), ss = {0}, mx = {0}, zero = {0};
    for (int k = 0; k < g->n4; k++) {
        v4s8 qb;
        memcpy(&qb, q + 4 * k, sizeof qb);
        v4d r = g->X[k] - vD * __builtin_convertvector(qb, v4d);
        r = vsel4(g->w4live[k], r, zero);
        r = vsel4(r < zero, -r, r);
        ss += r * r;
        mx = vsel4(r > mx, r, mx);
    }
    *sum_sq = hsum4(ss);
    *max_err = hmax4(mx);
}

/* ======================= rows ======================= */

/* one group's damage, from tensor units to the source's */
static void damage_add(qnt_damage *dmg, const grp *g, double sum_sq, double max_err, int E)
{
    dmg->sum_sq += sum_sq * pow2(-2 * E);
    dmg->max_err = fmax(dmg->max_err, max_err * pow2(-E));
    dmg->max_abs = fmax(dmg->max_abs, g->amax * pow2(-E));
}

void qnt_i4_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                uint8_t *q, uint16_t *d, uint16_t *m, qnt_damage *dmg)
{
    grp g;
    uint8_t codes[QNT_MAX_GROUP];
    for (uint32_t g0 = 0, gi = 0; g0 < cols; g0 += (uint32_t)group, gi++) {
        double sum_sq, max_err;
        grp_init(&g, x + g0, w ? w + g0 : NULL, group, E);
        i4_quantise(&g, method, codes, &d[gi], &m[gi]);
        i4_damage(&g, codes, d[gi], m[gi], &sum_sq, &max_err);
        damage_add(dmg, &g, sum_sq, max_err, E);
        memcpy(q + g0, codes, (size_t)group);
    }
}

static void i8_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                   double i8max, int8_t *q, uint16_t *d, qnt_damage *dmg)
{
    grp g;
    int8_t codes[QNT_MAX_GROUP];
    for (uint32_t g0 = 0, gi = 0; g0 < cols; g0 += (uint32_t)group, gi++) {
        double sum_sq, max_err;
        grp_init(&g, x + g0, w ? w + g0 : NULL, group, E);
        g.i8max = i8max;
        i8_quantise(&g, method, codes, &d[gi]);
        i8_damage(&g, codes, d[gi], &sum_sq, &max_err);
        damage_add(dmg, &g, sum_sq, max_err, E);
        memcpy(q + g0, codes, (size_t)group);
    }
}

void qnt_i8_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                int8_t *q, uint16_t *d, qnt_damage *dmg)
{
    i8_row(x, w, cols, group, E, method, 127, q, d, dmg);
}

void qnt_i6_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                int8_t *q, uint16_t *d, qnt_damage *dmg)
{
    i8_row(x, w, cols, group, E, method, QNT_I6_MAX, q, d, dmg);
}

void qnt_i7_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                int8_t *q, uint16_t *d, qnt_damage *dmg)
{
    i8_row(x, w, cols, group, E, method, QNT_I7_MAX, q, d, dmg);
}

/* ======================= INT4 super-blocks (i4k) ======================= */

/* the multiple of scale S nearest to P, in 0..63 */
static unsigned i4k_multiple(double P, double S)
{
    double a = S != 0 ? round(P / S) : 0;
    return (unsigned)(a < 0 ? 0 : a > QNT_I4K_SUB_MAX ? QNT_I4K_SUB_MAX : a);
}

/* Writes n pf16 parameters p as 6-bit multiples sub[i] of one scale, the
 * k-quants' way: the scale near the largest |P| / 63 with its sign, so
 * sub[i] = round(P_i / S) lands in 0..63 (a P of the other sign gets 0),
 * and p[i] becomes what a reader expands: pf16_i4k_param(S, sub[i]). The
 * scale's mantissa has 6 bits, so of its neighbours at the same shift the
 * one whose multiples come closest to the p (squared error) is taken. */
static void i4k_fit_scale(uint16_t *p, int n, uint16_t *scale, uint8_t *sub)
{
    double big = 0;
    for (int i = 0; i < n; i++)
        if (fabs((double)pf16_int(p[i])) > fabs(big))
            big = pf16_int(p[i]);
    uint16_t base = pf16_i4k_scale_encode(big / QNT_I4K_SUB_MAX);
    int32_t t0 = (int32_t)(int16_t)(uint16_t)(base << 4) >> 4;
    double best = INFINITY;
    *scale = base;
    for (int32_t t = t0 - 1; t <= t0 + 2; t++) {
        if (t < PF16_I4K_MANT_MIN || t > PF16_I4K_MANT_MAX)
            continue;
        uint16_t cand = (uint16_t)((base & 0xf000u) | ((uint32_t)t & 0xfffu));
        double S = pf16_int(cand), e = 0;
        for (int i = 0; i < n; i++) {
            double r = pf16_int(p[i]) - S * i4k_multiple(pf16_int(p[i]), S);
            e += r * r;
        }
        if (e < best) {
            best = e;
            *scale = cand;
        }
    }
    double S = pf16_int(*scale);
    for (int i = 0; i < n; i++) {
        sub[i] = (uint8_t)i4k_multiple(pf16_int(p[i]), S);
        p[i] = pf16_i4k_param(*scale, sub[i]);
    }
}

/* A group with D < 0 (an absmax solution) as the same line with D > 0:
 * D q - M = (-D) (15 - q) - (M - 15 D), the codes reversed (they are
 * assigned again later). The multiples of d's scale are unsigned, so a
 * negative D would become 0 or take its whole super-block's scale. */
static void i4k_positive(uint16_t *d, uint16_t *m)
{
    int64_t D = pf16_int(*d), M = pf16_int(*m);
    if (D >= 0)
        return;
    *d = pf16_encode((double)-D);
    *m = pf16_encode((double)(M - 15 * D));
}

/* With d fixed (its rounding to a 6-bit multiple is done), the offset m
 * that fits the group's codes best: M = Σ w (D q - X) / Σ w, alternated
 * with the codes' assignment (three rounds). */
static void i4k_refit_m(const grp *g, uint16_t d, uint16_t *m, uint8_t *q)
{
    for (int it = 0; it < 3 && g->sw > 0; it++) {
        lsum ls;
        i4_assign_int(g, d, *m, q, &ls);
        *m = pf16_encode(((double)pf16_int(d) * ls.sl - g->sx) / g->sw);
    }
}

void qnt_i4k_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                 uint8_t *q, uint16_t *sd, uint16_t *sm, uint8_t *sub, qnt_damage *dmg)
{
    static __thread grp g[QNT_I4K_GROUPS];     /* 8 KB each: not on a thread's stack */
    uint8_t codes[QNT_MAX_GROUP];
    uint32_t span = (uint32_t)group * QNT_I4K_GROUPS;
    for (uint32_t s0 = 0, si = 0; s0 < cols; s0 += span, si++) {
        uint16_t d[QNT_I4K_GROUPS], m[QNT_I4K_GROUPS];
        uint8_t *a = sub + 2 * QNT_I4K_GROUPS * si, *b = a + QNT_I4K_GROUPS;
        for (int i = 0; i < QNT_I4K_GROUPS; i++) {
            uint32_t g0 = s0 + (uint32_t)(i * group);
            grp_init(&g[i], x + g0, w ? w + g0 : NULL, group, E);
            i4_quantise(&g[i], method, codes, &d[i], &m[i]);
            i4k_positive(&d[i], &m[i]);
        }
        i4k_fit_scale(d, QNT_I4K_GROUPS, &sd[si], a);
        for (int i = 0; i < QNT_I4K_GROUPS; i++)
            i4k_refit_m(&g[i], d[i], &m[i], codes);
        i4k_fit_scale(m, QNT_I4K_GROUPS, &sm[si], b);
        for (int i = 0; i < QNT_I4K_GROUPS; i++) {
            double sum_sq, max_err;
            i4_assign_int(&g[i], d[i], m[i], codes, NULL);
            i4_damage(&g[i], codes, d[i], m[i], &sum_sq, &max_err);
            damage_add(dmg, &g[i], sum_sq, max_err, E);
            memcpy(q + s0 + (uint32_t)(i * group), codes, (size_t)group);
        }
    }
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
    return (double)pf16_int(t->d[gi]) * (int8_t)t->codes[i] * unit;
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
