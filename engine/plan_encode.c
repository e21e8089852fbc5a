/* plan_encode.c - what qrun rewrites as it fills a weight map: packed
 * tensors (i6g, i7g, i4k) expanded into the kernels' encodings, the embedding
 * or lm_head of an int4 container into i6 lanes, and every i4g block's
 * pf16 parameters widened to int32 (a load each in the kernels, not a
 * decode). */
#include "plan.h"

#include <string.h>

#include "pf16.h"

bool qp_tensor_widened(const struct qpk_tensor *t)
{
    return qpk_kernel_encoding(t->encoding) == QPK_ENC_I4G;
}

/* i8g code bytes of one block (4 rows x cols) rewritten as i6 lanes
 * (QK_I6_BYTE), 16 bytes at a time: in 16-bit units, the chunk's
 * [u0 u1 u2 u3 | v0 v1 v2 v3] become [u0 u2 v0 v2] and [u1 u3 v1 v3]. A
 * code q in -32..31 biased by 32 is its low 6 bits with bit 5 flipped: no
 * carry crosses a byte. Little-endian, as the kernels' maps. */
static void i6_lanes(uint8_t *blk, uint32_t cols)
{
    const uint64_t low6 = 0x3F3F3F3F3F3F3F3Full, bias = 0x2020202020202020ull;
    for (uint32_t at = 0; at < 4 * cols; at += 16) {
        uint64_t lo, hi;
        memcpy(&lo, blk + at, 8);
        memcpy(&hi, blk + at + 8, 8);
        lo = (lo & low6) ^ bias;
        hi = (hi & low6) ^ bias;
        uint64_t a = (lo & 0xFFFF) | ((lo >> 16) & 0xFFFF0000ull) | ((hi & 0xFFFF) << 32) |
                     ((hi << 16) & 0xFFFF000000000000ull);
        uint64_t b = ((lo >> 16) & 0xFFFF) | ((lo >> 32) & 0xFFFF0000ull) | ((hi << 16) & 0xFFFF00000000ull) |
                     (hi & 0xFFFF000000000000ull);
        memcpy(blk + at, &a, 8);
        memcpy(blk + at + 8, &b, 8);
    }
}

/* An i4g block's pf16 parameters (after its 2 * cols code bytes) as the
 * int32s they encode, in place: from the last to the first, so that each
 * int32 only covers parameters already read. Little-endian, as the
 * kernels' maps. */
static void widen_i4_params(uint8_t *blk, uint32_t cols, uint32_t group)
{
    uint8_t *par = blk + 2ull * cols;
    for (uint64_t i = 8ull * (cols / group); i-- > 0;) {
        uint16_t v;
        memcpy(&v, par + 2 * i, 2);
        int32_t d = pf16_int(v);
        memcpy(par + 4 * i, &d, 4);
    }
}

void qp_segment_expand(const struct qp_segment *seg, const uint8_t *src, uint64_t n, uint8_t *dst,
                       uint64_t value_size)
{
    const struct qpk_tensor *t = seg->packed;
    for (uint64_t b = 0; b < n; b++) {
        uint8_t *out = dst + b * value_size;
        qpk_expand_blocks(t, src + b * t->row_stride, 1, out);
        if (seg->lanes6)
            i6_lanes(out, t->cols);
        if (seg->widen4)
            widen_i4_params(out, t->cols, t->group_size);
    }
}
