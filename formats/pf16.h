/* pf16.h - the 16-bit parameter encoding of the i8g, i6g, i4g and i4k
 * matrices (formats/QPK.md): a group's scale (and minimum) as an integer
 * relative to its tensor's 2^-scale_exp.
 *
 *   bits 15..12: s, shift 0..15;  bits 11..0: t, two's-complement -2048..2047
 *   integer value P = t << s      (|P| <= 2048 * 2^15 = 2^26)
 *
 * A float-like number without an implicit bit, so decoding is
 * `((int32_t)(int16_t)(v << 4) >> 4) << (v >> 12)` - a handful of ALU ops - and
 * the result is a plain integer mantissa relative to the tensor's 2^-E.
 * The encoder picks the smallest shift whose rounded mantissa fits, so every
 * parameter within 2^15 of the tensor's largest keeps 11 significant bits
 * (relative rounding <= 2^-11); smaller ones degrade gracefully instead of
 * flushing to zero. Why not the alternatives:
 *  - int32 mantissas per tensor exponent: 2 x 32 bits per group is 2 bits
 *    per weight at g32 - the INT4 model would not fit the 0.40 GB budget;
 *  - int16 fixed point per tensor exponent: a group 100x smaller than the
 *    tensor's largest keeps only ~9 bits and a 1000x one ~5, which costs real
 *    error on the small groups (parameter error of 2^-5 on D moves q=15 by
 *    half a step);
 *  - IEEE half: needs a float decode (or a table) in BPF and its range is
 *    absolute, not relative to the tensor.
 *
 * i4k's super-block scales are pf16 with a 6-bit mantissa, so that a scale
 * times a 6-bit multiple is again an exact pf16 (pf16_i4k_param).
 */
#ifndef QP_PF16_H
#define QP_PF16_H

#include <stdint.h>

#define PF16_MANT_MAX 2047
#define PF16_MANT_MIN (-2048)
#define PF16_SHIFT_MAX 15
/* the largest integer a pf16 holds: 2047 << 15 */
#define PF16_INT_MAX (2047 * 32768)

/* The integer a pf16 encodes: t << s. */
static inline int32_t pf16_int(uint16_t v)
{
    int32_t t = (int32_t)(int16_t)(uint16_t)(v << 4) >> 4;
    return (int32_t)((uint32_t)t << (v >> 12));
}

/* The pf16 nearest to y (ties to even), smallest shift first; saturates at
 * ±(2047 << 15) / -2048 << 15. y finite. */
uint16_t pf16_encode(double y);

/* The super-block scales of i4k: pf16 with a 6-bit mantissa t in -32..31,
 * so that a scale times a 6-bit multiple a (0..63) is the pf16 of the same
 * shift and mantissa t a (|t a| <= 2016): exact, and a multiply to expand. */
#define PF16_I4K_MANT_MIN (-32)
#define PF16_I4K_MANT_MAX 31

/* The nearest such scale to y (ties to even), smallest shift first;
 * saturates at 31 << 15 / -32 << 15. y finite. */
uint16_t pf16_i4k_scale_encode(double y);

static inline int pf16_i4k_scale_valid(uint16_t scale)
{
    int32_t t = (int32_t)(int16_t)(uint16_t)(scale << 4) >> 4;
    return t >= PF16_I4K_MANT_MIN && t <= PF16_I4K_MANT_MAX;
}

/* pf(scale) * a as a pf16, for a valid scale and a in 0..63 */
static inline uint16_t pf16_i4k_param(uint16_t scale, unsigned a)
{
    int32_t t = (int32_t)(int16_t)(uint16_t)(scale << 4) >> 4;
    return (uint16_t)((scale & 0xf000u) | ((uint32_t)(t * (int32_t)a) & 0xfffu));
}

#endif
