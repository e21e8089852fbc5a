/* pf16.c - the nearest pf16 to a real number (pf16.h). */
#include "pf16.h"

#include <string.h>

/* v rounded to the nearest integer, ties to even (rint in the default
 * rounding mode), for |v| < 2^51: adding 1.5 * 2^52 leaves no fraction bits,
 * subtracting it again is exact. */
static inline double round_even(double v)
{
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    return (v + magic) - magic;
}

/* The pf16 nearest to y (ties to even) whose mantissa lies in tmin..tmax
 * (mant_bits bits with the sign), smallest shift first, saturated when no
 * shift holds it. |y| < 2^(e+1) for the binary exponent e of a normal y:
 * shifts below e - mant_bits + 1 cannot fit its magnitude (a subnormal,
 * raw exponent -1023, starts at 0 like every small y). */
static uint16_t pf16_encode_in(double y, int mant_bits, int tmin, int tmax)
{
    uint64_t bits;
    memcpy(&bits, &y, sizeof bits);
    int s0 = y != 0 ? (int)((bits >> 52) & 0x7ff) - 1023 - (mant_bits - 1) : 0;
    if (s0 < 0)
        s0 = 0;
    for (int s = s0; s <= PF16_SHIFT_MAX; s++) {
        double t = round_even(y * (1.0 / (double)(1 << s)));
        if (t >= tmin && t <= tmax)
            return (uint16_t)((s << 12) | ((int)t & 0xfff));
    }
    int t = y > 0 ? tmax : tmin;
    return (uint16_t)((PF16_SHIFT_MAX << 12) | (t & 0xfff));
}

uint16_t pf16_encode(double y)
{
    return pf16_encode_in(y, 12, PF16_MANT_MIN, PF16_MANT_MAX);
}

uint16_t pf16_i4k_scale_encode(double y)
{
    return pf16_encode_in(y, 6, PF16_I4K_MANT_MIN, PF16_I4K_MANT_MAX);
}
