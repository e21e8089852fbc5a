/* bf16.h - bfloat16 and IEEE half <-> float32, header only.
 *
 * bf16 and f16 widen to float32 exactly (every value, subnormals, infinities
 * and NaNs included). float32 narrows with round-to-nearest-even, the
 * rounding PyTorch uses; a NaN stays a NaN (quiet), it never rounds to inf.
 */
#ifndef QP_BF16_H
#define QP_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t qp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float qp_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* bf16 is the top half of a float32. */
static inline float qp_bf16_to_f32(uint16_t h)
{
    return qp_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t qp_f32_to_bf16(float f)
{
    uint32_t u = qp_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);   /* NaN: set the quiet bit so it stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);              /* round half to even */
    return (uint16_t)(u >> 16);
}

/* f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static inline float qp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)                              /* inf or NaN */
        return qp_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {                               /* zero or subnormal: mant * 2^-24, exact */
        float mag = (float)mant * 0x1p-24f;
        return sign ? -mag : mag;
    }
    return qp_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t qp_f32_to_f16(float f)
{
    uint32_t u = qp_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t mag = u & 0x7fffffffu;

    if (mag > 0x7f800000u)                        /* NaN: keep it quiet and a NaN */
        return sign | 0x7e00u | (uint16_t)((mag >> 13) & 0x3ffu);
    if (mag >= 0x477ff000u)                       /* >= 65520 rounds to inf */
        return sign | 0x7c00u;
    if (mag < 0x38800000u) {                      /* below 2^-14: subnormal f16 */
        if (mag < 0x33000000u)                    /* below 2^-25: rounds to zero */
            return sign;
        uint32_t exp = mag >> 23;                 /* 102..112 */
        uint32_t m = (mag & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp;              /* to units of 2^-24: 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;                                  /* may carry into the smallest normal: correct */
        return sign | (uint16_t)r;
    }
    uint32_t v = mag - 0x38000000u;               /* rebias the exponent 127 -> 15 */
    v += 0xfffu + ((v >> 13) & 1u);               /* round half to even */
    return sign | (uint16_t)(v >> 13);
}

#endif
