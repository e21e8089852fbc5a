/* qpk_values.c - the value ranges the kernels' exactness proofs assume of a
 * tensor's stored integers (QPK.md, "Value ranges"). A container is
 * untrusted and its checksums only catch accidents: a forged file with
 * recomputed checksums must still be refused before any kernel reads it.
 * The checks run over whole row blocks, on the bytes the checksum pass has
 * just read (qpk_verify.c), so they cost one more look at data in cache. */
#include "qpk.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "le.h"
#include "q24.h"
#include "pf16.h"

_Static_assert(I32S_MAX_MAG == QPK_I32S_MAX_MAG, "the packer writes what the reader accepts");

/* |v| of an int32 as an unsigned value: INT32_MIN gives 2^31 */
static inline uint32_t abs32(int32_t v)
{
    uint32_t sign = (uint32_t)(v >> 31);
    return ((uint32_t)v ^ sign) - sign;
}

/* q24: every q > INT32_MIN (the range is open at -128), and each row's
 * sum of |q| < QPK_Q24_MAX_ROW_SUM, so that the product's int64 sum of
 * q x (|x| <= 2^24) cannot wrap. */
static int check_q24_block(const char *path, const struct qpk_tensor *t, const uint8_t *blk,
                           uint32_t row0, qp_err *err)
{
    uint64_t sum[4] = {0, 0, 0, 0};
    uint32_t any = 0;
    for (uint32_t c0 = 0; c0 < t->cols; c0 += QPK_Q24_TILE_COLS) {
        const uint8_t *tile = blk + (uint64_t)c0 * 4 * QPK_Q24_TILE_ROWS;
        for (int k = 0; k < 4; k++) {
            uint64_t s = 0;
            for (int j = 0; j < QPK_Q24_TILE_COLS; j++) {
                uint32_t a = abs32((int32_t)le32(tile + 4 * (k * QPK_Q24_TILE_COLS + j)));
                any |= a;
                s += a;
            }
            sum[k] += s;
        }
    }
    if (any >> 31)
        return qp_fail(err, "%s: tensor %s: rows %u..%u hold -2^31, outside q24's range (-128, 128)", path,
                       t->name, row0, row0 + 3);
    for (int k = 0; k < 4; k++)
        if (sum[k] >= QPK_Q24_MAX_ROW_SUM)
            return qp_fail(err, "%s: tensor %s: row %u: the sum of |w| is %.0f, over the %.0f a q24 product holds "
                           "exactly (pack this model as int8)", path, t->name, row0 + (uint32_t)k,
                           (double)sum[k] / (1 << 24), (double)QPK_Q24_MAX_ROW_SUM / (1 << 24));
    return 0;
}

/* i32s: |q| <= 2^30, and the row's padding zero */
static int check_i32s_row(const char *path, const struct qpk_tensor *t, const uint8_t *row, qp_err *err)
{
    for (uint32_t c = 0; c < t->cols; c++) {
        int32_t q = (int32_t)le32(row + 4 * (uint64_t)c);
        if (abs32(q) > QPK_I32S_MAX_MAG)
            return qp_fail(err, "%s: tensor %s: element %u is %" PRId32 ", outside i32s's range of +-2^30", path,
                           t->name, c, q);
    }
    for (uint64_t b = (uint64_t)t->cols * 4; b < t->row_stride; b++)
        if (row[b])
            return qp_fail(err, "%s: tensor %s: padding byte %" PRIu64 " is not zero", path, t->name, b);
    return 0;
}

/* i8g: codes in [-127, 127] (no -128) and |D| <= QPK_I8_MAX_SCALE; t may
 * be the i8g view of an i6g or i7g tensor (enc names the stored encoding) */
static int check_i8g_block(const char *path, const struct qpk_tensor *t, const char *enc, const uint8_t *blk,
                           uint32_t row0, qp_err *err)
{
    uint64_t n_codes = (uint64_t)t->cols * 4;
    const uint8_t *bad = memchr(blk, 0x80, n_codes);
    if (bad) {
        uint64_t i = (uint64_t)(bad - blk);
        return qp_fail(err, "%s: tensor %s: row %u, column %" PRIu64 ": code -128, outside %s's [-127, 127]",
                       path, t->name, row0 + (uint32_t)(i / 16 % 4), i / 64 * 16 + i % 16, enc);
    }
    const uint8_t *scales = blk + n_codes;
    for (uint32_t i = 0; i < t->cols / t->group_size * 4; i++) {
        int32_t d = (int32_t)le32(scales + 4 * i);
        if (abs32(d) > QPK_I8_MAX_SCALE)
            return qp_fail(err, "%s: tensor %s: row %u, group %u: scale %" PRId32 ", outside %s's +-2^20", path,
                           t->name, row0 + i % 4, i / 4, d, enc);
    }
    return 0;
}

/* The embedding feeds the residual stream directly: each value must be
 * below 2^29 (QM_Q32_LIMIT_BITS in Q32), or the first token of a prompt
 * already leaves the range the kernels compute exactly. q24 values are
 * below 128; i8g and i4g hold any magnitude their exponent allows. */
#define EMBED_MAX_MAG 536870912.0   /* 2^29 */

static int embed_too_large(const char *path, const struct qpk_tensor *t, uint32_t row, double mag, qp_err *err)
{
    return qp_fail(err, "%s: tensor %s: row %u holds a value of magnitude %.3g, past the %.3g the residual stream "
                   "holds", path, t->name, row, mag, EMBED_MAX_MAG);
}

static int check_embed_block(const char *path, const struct qpk_tensor *t, const uint8_t *blk, uint32_t row0,
                             qp_err *err)
{
    uint32_t groups = t->cols / t->group_size;
    for (uint32_t k = 0; k < 4; k++)
        for (uint32_t g = 0; g < groups; g++) {
            double mag;
            if (t->encoding == QPK_ENC_I8G) {
                int32_t d = (int32_t)le32(blk + (uint64_t)t->cols * 4 + 4 * ((uint64_t)g * 4 + k));
                int max_q = 0;
                for (uint32_t c = g * t->group_size; c < (g + 1) * t->group_size; c++) {
                    int q = (int8_t)blk[(uint64_t)c / 16 * 64 + k * 16 + c % 16];
                    max_q = abs(q) > max_q ? abs(q) : max_q;
                }
                mag = fabs((double)d) * max_q;
            } else {
                /* |D q - M| over q in 0..15 is largest at an end */
                const uint8_t *dm = blk + 2 * (uint64_t)t->cols + 16 * (uint64_t)g;
                double d = pf16_int((uint16_t)le16(dm + 2 * k)), m = pf16_int((uint16_t)le16(dm + 8 + 2 * k));
                mag = fmax(fabs(m), fabs(15 * d - m));
            }
            mag = ldexp(mag, -t->scale_exp);
            if (mag >= EMBED_MAX_MAG)
                return embed_too_large(path, t, row0 + k, mag, err);
        }
    return 0;
}

/* i6g and i7g, on the stored bytes: the scales as i8g's (|D| <= 2^20);
 * sets *embed_near when an embedding's group could reach the residual
 * stream's bound (|D| x 32 or 64, the largest |q|), which the expanded
 * block then decides */
static int check_packed_i8g_block(const char *path, const struct qpk_tensor *t, const uint8_t *blk, uint32_t row0,
                                  bool *embed_near, qp_err *err)
{
    bool seven = t->encoding == QPK_ENC_I7G;
    const uint8_t *params = blk + (seven ? (uint64_t)t->cols * 7 / 2 : (uint64_t)t->cols * 3);
    double max_q = seven ? 64.0 : 32.0;
    *embed_near = false;
    for (uint32_t i = 0; i < t->cols / t->group_size * 4; i++) {
        int32_t d = pf16_int((uint16_t)le16(params + 2 * i));
        if (abs32(d) > QPK_I8_MAX_SCALE)
            return qp_fail(err, "%s: tensor %s: row %u, group %u: scale %" PRId32 ", outside %s's +-2^20", path,
                           t->name, row0 + i % 4, i / 4, d, qpk_encoding_name(t->encoding));
        *embed_near |= t->role == QPK_ROLE_EMBED && ldexp(max_q * abs32(d), -t->scale_exp) >= EMBED_MAX_MAG;
    }
    return 0;
}

/* one block in its kernel encoding (t: the kernel's view of the tensor) */
static int check_block(const char *path, const struct qpk_tensor *t, const char *enc, const uint8_t *blk,
                       uint32_t row0, qp_err *err)
{
    int rc = 0;
    switch (t->encoding) {
    case QPK_ENC_Q24: rc = check_q24_block(path, t, blk, row0, err); break;
    case QPK_ENC_I32S: rc = check_i32s_row(path, t, blk, err); break;
    case QPK_ENC_I8G: rc = check_i8g_block(path, t, enc, blk, row0, err); break;
    default: break;     /* i4g: every code and pf16 pair is in range by construction */
    }
    if (!rc && t->role == QPK_ROLE_EMBED && t->encoding != QPK_ENC_Q24)
        rc = check_embed_block(path, t, blk, row0, err);
    return rc;
}

/* i4k, on the stored bytes: every super-block scale has a 6-bit mantissa,
 * so that its products with the multiples are exact pf16 (QPK.md); an
 * embedding's block is then checked expanded (*expand) */
static int check_i4k_block(const char *path, const struct qpk_tensor *t, const uint8_t *blk, uint32_t row0,
                           bool *expand, qp_err *err)
{
    uint32_t supers = t->cols / t->group_size / QPK_I4K_GROUPS;
    for (uint32_t s = 0; s < supers; s++) {
        const uint8_t *sb = blk + 2 * (uint64_t)t->cols + (uint64_t)s * QPK_I4K_SUPER_BYTES;
        for (uint32_t i = 0; i < 8; i++)
            if (!pf16_i4k_scale_valid((uint16_t)le16(sb + 2 * i)))
                return qp_fail(err, "%s: tensor %s: row %u, super-block %u: %s scale %04x has a mantissa outside "
                               "i4k's -32..31", path, t->name, row0 + i % 4, s, i < 4 ? "d" : "m", le16(sb + 2 * i));
    }
    *expand = t->role == QPK_ROLE_EMBED;
    return 0;
}

/* A packed tensor (i6g, i7g, i4k) is checked as the kernels will read it:
 * its own rules on the stored bytes, and where more is to check (an
 * embedding; for i6g and i7g only one near the residual stream's bound)
 * each block expanded first, as qrun expands it. */
int qpk_check_values(const char *path, const struct qpk_tensor *t, uint64_t first_block,
                     const uint8_t *data, uint64_t n_blocks, qp_err *err)
{
    struct qpk_tensor view = *t;
    uint8_t *expanded = NULL;
    bool packed = qpk_encoding_packed(t->encoding);
    if (packed) {
        view.encoding = (uint16_t)qpk_kernel_encoding(t->encoding);
        view.row_stride = qpk_kernel_stride(t);
        /* only an embedding's blocks are ever expanded */
        if (t->role == QPK_ROLE_EMBED && !(expanded = malloc(view.row_stride)))
            return qp_fail(err, "%s: tensor %s: out of memory", path, t->name);
    }
    int rc = 0;
    for (uint64_t b = 0; b < n_blocks && !rc; b++) {
        const uint8_t *blk = data + b * t->row_stride;
        uint32_t row0 = (uint32_t)((first_block + b) * t->rows_per_block);
        bool expand = false;
        if (t->encoding == QPK_ENC_I6G || t->encoding == QPK_ENC_I7G)
            rc = check_packed_i8g_block(path, t, blk, row0, &expand, err);
        else if (t->encoding == QPK_ENC_I4K)
            rc = check_i4k_block(path, t, blk, row0, &expand, err);
        if (rc || (packed && !expand))
            continue;   /* packed and checked without expanding: the common case */
        if (packed) {
            qpk_expand_blocks(t, blk, 1, expanded);
            blk = expanded;
        }
        rc = check_block(path, &view, qpk_encoding_name(t->encoding), blk, row0, err);
    }
    free(expanded);
    return rc;
}
