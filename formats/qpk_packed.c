/* qpk_packed.c - the packed encodings, i6g, i7g and i4k, and their
 * expansion to the i8g and i4g blocks the kernels read (QPK.md, "Packed
 * encodings").
 *
 * They exist to make the file smaller where bits are scarce: i6g holds a
 * vocabulary matrix at 6.25 bits per weight instead of 8.5 (groups of
 * 64), i7g at 7.25 with half i6g's error, i4k spends 0.5 bits per weight on an int4 matrix's parameters
 * instead of 1.0 (at groups of 32). The BPF kernels stay as they are: qrun rewrites each block
 * as it fills a map (or stages a --stream block), so nothing is converted
 * per token. Every expanded value is the one the packer measured its error
 * on: an i4k parameter is its scale times its multiple, exactly
 * (pf16_i4k_param). */
#include "qpk.h"

#include <string.h>

#include "le.h"
#include "pf16.h"

unsigned qpk_kernel_encoding(unsigned encoding)
{
    switch (encoding) {
    case QPK_ENC_I6G:
    case QPK_ENC_I7G: return QPK_ENC_I8G;
    case QPK_ENC_I4K: return QPK_ENC_I4G;
    default: return encoding;
    }
}

bool qpk_encoding_packed(unsigned encoding)
{
    return encoding == QPK_ENC_I6G || encoding == QPK_ENC_I7G || encoding == QPK_ENC_I4K;
}

uint64_t qpk_kernel_stride(const struct qpk_tensor *t)
{
    return qpk_encoding_packed(t->encoding) ? qpk_block_bytes(qpk_kernel_encoding(t->encoding), t->cols, t->group_size)
                                            : t->row_stride;
}

unsigned qpk_bits6_get(const uint8_t *stream, uint64_t i)
{
    const uint8_t *p = stream + 3 * (i / 4);
    uint32_t word = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    return (word >> (6 * (i % 4))) & 63;
}

void qpk_bits6_put(uint8_t *stream, uint64_t i, unsigned v)
{
    uint8_t *p = stream + 3 * (i / 4);
    uint32_t shift = 6 * (i % 4);
    uint32_t word = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    word = (word & ~(63u << shift)) | (v & 63) << shift;
    p[0] = (uint8_t)word;
    p[1] = (uint8_t)(word >> 8);
    p[2] = (uint8_t)(word >> 16);
}

unsigned qpk_bits7_get(const uint8_t *stream, uint64_t i)
{
    const uint8_t *p = stream + 7 * (i / 8);
    uint64_t word = le32(p) | (uint64_t)le16(p + 4) << 32 | (uint64_t)p[6] << 48;
    return (unsigned)(word >> (7 * (i % 8))) & 127;
}

void qpk_bits7_put(uint8_t *stream, uint64_t i, unsigned v)
{
    uint8_t *p = stream + 7 * (i / 8);
    uint32_t shift = 7 * (i % 8);
    uint64_t word = le32(p) | (uint64_t)le16(p + 4) << 32 | (uint64_t)p[6] << 48;
    word = (word & ~(127ull << shift)) | (uint64_t)(v & 127) << shift;
    for (unsigned b = 0; b < 7; b++)
        p[b] = (uint8_t)(word >> (8 * b));
}

/* Eight 6-bit two's-complement fields of a 48-bit little-endian word as
 * eight bytes of int8: the fields spread to their bytes in three halvings
 * (24-bit halves to 32-bit lanes, 12-bit to 16-bit, 6-bit to 8-bit), then
 * per byte (v ^ 32) - 32 with no carry across bytes (v ^ 32 < 64: adding
 * 0x60 stays in the byte, and flipping bit 7 then subtracts or adds the
 * remaining 0x80). */
static uint64_t sext6_x8(uint64_t fields)
{
    uint64_t x = (fields & 0xffffffull) | (fields & 0xffffff000000ull) << 8;
    x = (x & 0x00000fff00000fffull) | (x & 0x00fff00000fff000ull) << 4;
    x = (x & 0x003f003f003f003full) | (x & 0x0fc00fc00fc00fc0ull) << 2;
    uint64_t bytes = x ^ 0x2020202020202020ull;
    return (bytes + 0x6060606060606060ull) ^ 0x8080808080808080ull;
}

/* The same for eight 7-bit fields of a 56-bit word (28-bit halves, 14-bit,
 * 7-bit), then per byte (v ^ 64) - 64: v ^ 64 < 128, so adding 0x40 stays
 * in the byte and flipping bit 7 does the rest. */
static uint64_t sext7_x8(uint64_t fields)
{
    uint64_t x = (fields & 0xfffffffull) | (fields & 0xfffffff0000000ull) << 4;
    x = (x & 0x00003fff00003fffull) | (x & 0x0fffc0000fffc000ull) << 2;
    x = (x & 0x007f007f007f007full) | (x & 0x3f803f803f803f80ull) << 1;
    uint64_t bytes = x ^ 0x4040404040404040ull;
    return (bytes + 0x4040404040404040ull) ^ 0x8080808080808080ull;
}

/* i6g, i7g -> i8g: the codes sign-extended to bytes in the same order
 * (eight from each 6 or 7 bytes), each pf16 d as the int32 D it encodes */
static void expand_packed_i8g(const struct qpk_tensor *t, const uint8_t *src, uint8_t *dst)
{
    bool seven = t->encoding == QPK_ENC_I7G;
    uint64_t n_codes = (uint64_t)t->cols * 4, n_params = (uint64_t)t->cols / t->group_size * 4;
    for (uint64_t n = 0; n < n_codes; n += 8, src += seven ? 7 : 6)
        put64(dst + n, seven ? sext7_x8(le32(src) | (uint64_t)le16(src + 4) << 32 | (uint64_t)src[6] << 48)
                             : sext6_x8(le32(src) | (uint64_t)le16(src + 4) << 32));
    for (uint64_t i = 0; i < n_params; i++)
        put32(dst + n_codes + 4 * i, (uint32_t)pf16_int((uint16_t)le16(src + 2 * i)));
}

/* i4k -> i4g: the codes as they are, then each group's d and m from its
 * super-block's scales and its 6-bit multiples */
static void expand_i4k(const struct qpk_tensor *t, const uint8_t *src, uint8_t *dst)
{
    uint64_t code_bytes = (uint64_t)t->cols * 2;
    uint32_t supers = t->cols / t->group_size / QPK_I4K_GROUPS;
    memcpy(dst, src, code_bytes);
    for (uint32_t s = 0; s < supers; s++) {
        const uint8_t *sb = src + code_bytes + (uint64_t)s * QPK_I4K_SUPER_BYTES;
        uint8_t *dm = dst + code_bytes + 16 * (uint64_t)s * QPK_I4K_GROUPS;
        for (unsigned k = 0; k < 4; k++) {
            uint16_t sd = (uint16_t)le16(sb + 2 * k), sm = (uint16_t)le16(sb + 8 + 2 * k);
            const uint8_t *subs = sb + 16 + 12 * k;     /* a[0..7] for d, then b[0..7] for m */
            for (unsigned w = 0; w < 4; w++) {          /* four 3-byte words of four fields */
                uint32_t word = subs[3 * w] | (uint32_t)subs[3 * w + 1] << 8 | (uint32_t)subs[3 * w + 2] << 16;
                for (unsigned j = 0; j < 4; j++) {
                    unsigned field = 4 * w + j, group = field % QPK_I4K_GROUPS;
                    uint16_t p = pf16_i4k_param(field < QPK_I4K_GROUPS ? sd : sm, (word >> (6 * j)) & 63);
                    put16(dm + 16 * group + (field < QPK_I4K_GROUPS ? 0 : 8) + 2 * k, p);
                }
            }
        }
    }
}

void qpk_expand_blocks(const struct qpk_tensor *t, const uint8_t *src, uint64_t n_blocks, uint8_t *dst)
{
    uint64_t out = qpk_kernel_stride(t);
    for (uint64_t b = 0; b < n_blocks; b++, src += t->row_stride, dst += out) {
        if (t->encoding == QPK_ENC_I6G || t->encoding == QPK_ENC_I7G)
            expand_packed_i8g(t, src, dst);
        else if (t->encoding == QPK_ENC_I4K)
            expand_i4k(t, src, dst);
        else
            memcpy(dst, src, out);
    }
}
