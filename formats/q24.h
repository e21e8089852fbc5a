/* q24.h - the fixed-point encodings of weights.
 *
 * Q24: int32 q = round(v * 2^24), ties to even; fits when |q| <= 2^31 - 1,
 * i.e. |v| < 128. BF16 sources go through a 65,536-entry table built once
 * with integer arithmetic from the bit pattern (tests check every entry
 * against an independent floating-point computation).
 *
 * I32S: int32 q = round(v * 2^e) with one exponent e per tensor, the
 * largest in [0, 62] that keeps every |q| <= 2^30. Used for norm scales,
 * whose real values can exceed Q24's range.
 */
#ifndef QP_Q24_H
#define QP_Q24_H

#include <stdbool.h>
#include <stdint.h>

#define Q24_FRAC_BITS 24
#define I32S_MAX_MAG (1 << 30)

/* BF16 bits -> Q24; false when the value is NaN, infinite or |v| >= 128. */
bool q24_from_bf16(uint16_t bf16, int32_t *q);

/* Any float -> Q24 (F16 and F32 sources); same rounding and range. */
bool q24_from_float(float v, int32_t *q);

/* The I32S exponent for a tensor whose largest magnitude is max_abs (finite);
 * -1 when even e = 0 cannot hold it. */
int i32s_exponent(double max_abs);

/* v -> round(v * 2^e), ties to even; v finite and |v| * 2^e <= 2^30. */
int32_t i32s_encode(double v, int e);

#endif
