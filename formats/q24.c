/* q24.c - BF16/float -> Q24 and I32S conversions. */
#include "q24.h"

#include <math.h>
#include <pthread.h>

/* Q24 of every BF16 pattern; valid bit set where it fits */
static int32_t q24_table[65536];
static uint8_t q24_valid[65536];
static pthread_once_t q24_once = PTHREAD_ONCE_INIT;

/* Rounds m / 2^k to the nearest integer, ties to even (m >= 0, k >= 1). */
static uint64_t shift_round_even(uint64_t m, unsigned k)
{
    if (k >= 64)
        return 0;
    uint64_t q = m >> k, rem = m & ((1ull << k) - 1), half = 1ull << (k - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return q;
}

/* value = (-1)^s * M * 2^(E - 134) with M = 128 + mantissa for normal
 * numbers (E = biased exponent) and M = mantissa, E = 1 for subnormals;
 * Q24 = M * 2^(E - 110). */
static void build_entry(uint32_t bits)
{
    uint32_t sign = bits >> 15, exponent = (bits >> 7) & 0xff, mantissa = bits & 0x7f;
    if (exponent == 0xff)
        return; /* inf, NaN */
    uint64_t m = exponent ? 128 + mantissa : mantissa;
    int shift = (int)(exponent ? exponent : 1) - 110;
    uint64_t mag;
    if (shift >= 0) {
        if (shift > 31 || (m << shift) > 0x7fffffffull)
            return;
        mag = m << shift;
    } else {
        mag = shift_round_even(m, (unsigned)-shift);
        if (mag > 0x7fffffffull)
            return;
    }
    q24_table[bits] = sign ? -(int32_t)mag : (int32_t)mag;
    q24_valid[bits] = 1;
}

static void build_table(void)
{
    for (uint32_t bits = 0; bits < 65536; bits++)
        build_entry(bits);
}

bool q24_from_bf16(uint16_t bf16, int32_t *q)
{
    pthread_once(&q24_once, build_table);
    *q = q24_table[bf16];
    return q24_valid[bf16];
}

bool q24_from_float(float v, int32_t *q)
{
    if (!isfinite(v))
        return false;
    double r = nearbyint(ldexp((double)v, Q24_FRAC_BITS));
    if (fabs(r) > 2147483647.0)
        return false;
    *q = (int32_t)r;
    return true;
}

int i32s_exponent(double max_abs)
{
    if (!(max_abs > 0))
        return 30; /* an all-zero vector: any exponent holds it */
    for (int e = 62; e >= 0; e--)
        if (ldexp(max_abs, e) <= (double)I32S_MAX_MAG)
            return e;
    return -1;
}

int32_t i32s_encode(double v, int e)
{
    return (int32_t)nearbyint(ldexp(v, e));
}
