/* quant.h - group-scaled INT4 / INT8 weight quantisers.
 *
 * Independent of the container layout: everything here works on groups of
 * n consecutive values along a row (the input dimension of a matrix) and on
 * plain row-major [rows x cols] float matrices. The packer lays the codes and
 * parameters out for the kernels.
 *
 * ---- What the kernels reconstruct -------------------------------------
 *
 * One exponent E per tensor (the tensor entry's scale_exp). Per group:
 *
 *   INT4 (asymmetric):  w_j = (D * q_j - M) * 2^-E      q_j in 0..15
 *   INT8 (symmetric):   w_j = (D * q_j)     * 2^-E      q_j in -127..127
 *
 * where D = pf16_int(d) and M = pf16_int(m) are integers decoded
 * from the stored 16-bit parameters d, m (INT8 has no m). Every product and
 * sum the kernel forms is exact integer arithmetic; the quantisers measure
 * their error on exactly these reconstructed values.
 *
 * The parameters d, m are pf16 (formats/pf16.h).
 *
 * The search re-fits codes and parameters after rounding to pf16, so the
 * rounding costs next to nothing: on Gaussian groups the searched INT4
 * error is within 0.5 % of an exhaustive real-valued 2-D search.
 *
 * Bits per weight (codes + parameters): INT4 4 + 32/g (g32 5.0, g64 4.5,
 * g128 4.25); INT8 8 + 16/g (g32 8.5). qnt_bits_per_weight() computes it.
 *
 * ---- The dot product and what the packer precomputes ---------------------
 *
 * With an activation block quantised to 8 bits, x_j = S * (a_j - z)
 * (a_j in 0..255, z the block's zero point, e.g. 128 for a signed block
 * stored offset-binary for the unsigned SWAR multiply), one INT4 group gives
 *
 *   sum_j w_j x_j = S * 2^-E * ( D * (Σ q_j a_j - z * Σ q_j) - M * (Σ a_j - n z) )
 *
 * Σ q_j a_j is the SWAR product; Σ a_j is per activation block (computed
 * once per input vector, shared by all rows); Σ q_j (0..15n, fits u16) is a
 * weight constant per group: qnt_i4_code_sum() / qnt_tensor_code_sums().
 * When z = 0 (unsigned activations) Σ q_j is not needed. Folding instead
 * the whole per-group weight sum, Σ w_j = (D Σ q_j - n M) 2^-E, is an
 * alternative when the activation scale S is one per vector: then
 * z * Σ_groups (D Σq - n M) is one int64 constant per row.
 * INT8 likewise: S 2^-E D (Σ q_j a_j - z Σ q_j), Σ q_j in -127n..127n (i16
 * for n <= 256). SWAR with unsigned lanes would store q + 128 and use
 * Σ (q+128) a = Σ q a + 128 Σ a.
 *
 * Integer ranges: |D|, |M| <= 2^26; |Σ q a| <= 15 * 255 * n (< 2^19 for
 * n = 128); |D * Σ q a| < 2^45, so int64 accumulation over up to 2^17
 * groups per row cannot overflow (M * Σ a likewise). E is chosen per tensor
 * by qnt_tensor_exponent() so that every parameter fits pf16.
 *
 * ---- Quantisers ---------------------------------------------------------
 *
 * QNT_RTN: round to nearest with min/max range: INT4: d = (max - min) / 15,
 *   m = -min (asymmetric, the same storage as the search, so the comparison
 *   is of quantisers only); INT8: d = absmax / 127. (`qpack --quant minmax`;
 *   for INT8 it is also `--quant rtn`.)
 * QNT_ABSMAX (INT4 only): the naive baseline, symmetric absmax RTN as
 *   llama.cpp Q4_0: w = D (q - 8), D = -max_signed / 8 (the largest-magnitude
 *   value lands exactly on code 0; D may be negative), stored as M = 8 D. The
 *   variant known to break small Qwen models (`qpack --quant rtn`). A group
 *   that already lies on such a grid with another scale (a GGUF's Q4_0 made
 *   with an importance matrix) keeps it: zero error.
 * QNT_SEARCH: minimises the (weighted) squared reconstruction error
 *   Σ w_j (x_j - ŵ_j)^2 per group. INT4: 32 candidate lines at once (the
 *   range in 13, 13.25, ..., 16.75 steps, anchored at the minimum and at the
 *   maximum; llama.cpp make_qkx2-style), each ranked by the error of the
 *   weighted least-squares (scale, offset) fitted to its codes, computed in
 *   closed form from the code sums; the 3 best are refined (alternating
 *   code assignment and refit) until the codes stop changing. INT8: 16
 *   candidate scales (absmax / 120.5 .. 128), the best refined the same way.
 *   This real-valued stage runs in float, 8 lanes at a time. Then the
 *   parameters are rounded to pf16, the codes re-assigned to the rounded
 *   parameters and refitted in the integer domain, in double. Finally the
 *   RTN solutions (INT4: min/max and absmax) are evaluated the same way and
 *   kept if not worse, so err(SEARCH) <= err(RTN), err(ABSMAX) on every
 *   group, on the reconstructed values.
 *   How close this comes to an exhaustive search, what the alternatives
 *   (more refinement, an IQ4_NL-style codebook) cost and gave, and the
 *   quantisers' speed are in docs/QUANT.md (devtools/bench_quant.c
 *   measures them).
 *
 * The arithmetic is written on GCC/clang vector extensions with fixed lane
 * orders and built without FMA contraction, so the AVX2 clone picked at run
 * time and the generic code give the same bits.
 *
 * All functions are deterministic (no global state, no threads) and
 * re-entrant. Inputs must be finite.
 */
#ifndef QP_QUANT_H
#define QP_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "pf16.h"

#define QNT_MAX_GROUP 256

typedef enum qnt_method {
    QNT_RTN = 0,
    QNT_SEARCH = 1,
    QNT_ABSMAX = 2, /* INT4 only: symmetric absmax RTN, for comparison */
} qnt_method;

/* ---- per-tensor exponent ---- */

/* E covers every finite float: 2^-149 (the smallest subnormal) still gets
 * 2^25 units, FLT_MAX (< 2^128) still fits */
#define QNT_E_MIN (-128)
#define QNT_E_MAX 180

/* The exponent E for a tensor whose largest |value| is max_abs: the largest
 * E in [QNT_E_MIN, QNT_E_MAX] with 2 * max_abs * 2^E <= PF16_INT_MAX (parameters
 * reach at most ~1.1 max_abs; the factor 2 is margin). 0 when max_abs is 0. */
int qnt_tensor_exponent(double max_abs);

/* ---- one group ---- */

/* INT4 group: x[0..n), optional importance weights w (NULL = uniform; must
 * be >= 0), n in 1..QNT_MAX_GROUP. Writes q[0..n) in 0..15 and *d, *m.
 * Returns the weighted squared error Σ w_j (x_j - ŵ_j)^2 of the values
 * the kernel reconstructs (w = 1 when NULL). */
double qnt_i4_group(const float *x, const float *w, int n, int E, qnt_method method,
                    uint8_t *q, uint16_t *d, uint16_t *m);

/* INT8 group: q in -127..127, *d; method QNT_RTN or QNT_SEARCH. */
double qnt_i8_group(const float *x, const float *w, int n, int E, qnt_method method,
                    int8_t *q, uint16_t *d);

/* The reconstructed values (exact in double). */
static inline int64_t qnt_i4_int(uint8_t q, uint16_t d, uint16_t m)
{
    return (int64_t)pf16_int(d) * q - pf16_int(m);
}
double qnt_i4_value(uint8_t q, uint16_t d, uint16_t m, int E);
double qnt_i8_value(int8_t q, uint16_t d, int E);

/* Σ q_j over one group (what the zero-point correction needs). */
uint32_t qnt_i4_code_sum(const uint8_t *q, int n);
int32_t qnt_i8_code_sum(const int8_t *q, int n);

/* ---- whole rows (what the packer calls) ---- */

/* What quantising cost against the source values, unweighted: Σ (x - ŵ)^2,
 * max |x - ŵ| and max |x|. */
typedef struct qnt_damage {
    double sum_sq, max_err, max_abs;
} qnt_damage;

/* Quantises one row of cols values group by group, exactly as
 * qnt_i4_group / qnt_i8_group would (w: cols weights, or NULL), into
 * q[0..cols) and the parameters d (and m) [0..cols / group); adds the row's
 * damage to *dmg, group after group. group in 1..QNT_MAX_GROUP divides cols;
 * the values must be finite. */
void qnt_i4_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                uint8_t *q, uint16_t *d, uint16_t *m, qnt_damage *dmg);
void qnt_i8_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                int8_t *q, uint16_t *d, qnt_damage *dmg);

/* The same with codes in -31..31 (6 bits; the i6g encoding): the search's
 * candidates and the rounding of qnt_i8_row scaled to the smaller range. */
#define QNT_I6_MAX 31
void qnt_i6_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                int8_t *q, uint16_t *d, qnt_damage *dmg);

/* And with codes in -63..63 (7 bits; the i7g encoding). */
#define QNT_I7_MAX 63
void qnt_i7_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                int8_t *q, uint16_t *d, qnt_damage *dmg);

/* INT4 with the parameters in super-blocks of QNT_I4K_GROUPS groups (the
 * i4k encoding, after llama.cpp's k-quants): per super-block si, scales
 * sd[si] and sm[si] (pf16 with 6-bit mantissas) and 6-bit multiples
 * sub[16 si + i] (d) and sub[16 si + 8 + i] (m) for its groups i = 0..7;
 * group i's parameters are pf16_i4k_param(sd, sub) and likewise for m. Each
 * group is first quantised as qnt_i4_row would; then d is rounded to its
 * multiple, m refitted to the rounded d and rounded to its multiple, and
 * the codes assigned to the final pair, which the damage measures. cols a
 * multiple of QNT_I4K_GROUPS * group. */
#define QNT_I4K_GROUPS 8
#define QNT_I4K_SUB_MAX 63
void qnt_i4k_row(const float *x, const float *w, uint32_t cols, int group, int E, qnt_method method,
                 uint8_t *q, uint16_t *sd, uint16_t *sm, uint8_t *sub, qnt_damage *dmg);

/* ---- whole tensors ---- */

typedef struct qnt_tensor {
    int bits;             /* 4 or 8 */
    int group;            /* group size along a row */
    uint32_t rows, cols;  /* cols % group == 0 */
    int E;                /* per-tensor exponent */
    uint8_t *codes;       /* rows*cols, row-major; INT4 0..15, INT8 int8_t bit patterns */
    uint16_t *d;          /* rows * (cols/group), row-major */
    uint16_t *m;          /* INT4 only, same shape as d; NULL for INT8 */
} qnt_tensor;

typedef struct qnt_stats {
    double max_abs;        /* largest |x| */
    double max_err;        /* largest |x - ŵ| */
    double rms_err;        /* sqrt(mean (x - ŵ)^2) */
    double sse;            /* Σ (x - ŵ)^2 (unweighted) */
    double bits_per_weight;
} qnt_stats;

/* Bits per weight of codes + parameters. */
double qnt_bits_per_weight(int bits, int group);

/* Quantises a row-major [rows x cols] matrix; w (optional, same shape)
 * weights the per-group search. Allocates t's arrays (qnt_tensor_free).
 * Fails on bits not 4/8, group not in 1..QNT_MAX_GROUP or not dividing cols,
 * ABSMAX with 8 bits, or a non-finite value (named by index). */
int qnt_quantize_tensor(const float *x, const float *w, uint32_t rows, uint32_t cols, int bits,
                        int group, qnt_method method, qnt_tensor *t, qnt_stats *st, qp_err *err);

/* The reconstructed matrix (rows*cols floats; the exact values rounded to
 * float). */
void qnt_dequantize_tensor(const qnt_tensor *t, float *out);

/* Error statistics of t against x. */
void qnt_tensor_stats(const qnt_tensor *t, const float *x, qnt_stats *st);

/* Σ q per group, rows * (cols/group) entries, row-major (INT4: 0..15n,
 * INT8: -127n..127n, stored as int32). */
void qnt_tensor_code_sums(const qnt_tensor *t, int32_t *sums);

void qnt_tensor_free(qnt_tensor *t);

#endif
