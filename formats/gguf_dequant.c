/* gguf_dequant.c - ggml's block types (gguf.h) and their values: the
 * layouts of ggml-common.h and the float operations of ggml's reference
 * dequantize_row_* functions, in their order (compiled without
 * multiply-add contraction, so d1 * q - m1 rounds twice as the reference
 * written in C does). */
#include "gguf.h"

#include <stdio.h>
#include <string.h>

#include "bf16.h"
#include "le.h"

#define QK 32       /* elements of a Q4_0, Q4_1 or Q8_0 block */
#define QK_K 256    /* elements of a k-quant super-block */

struct type_info {
    uint32_t type;
    const char *name;
    uint32_t block, bytes;
};

static const struct type_info types[] = {
    {GGUF_F32, "F32", 1, 4},       {GGUF_F16, "F16", 1, 2},        {GGUF_BF16, "BF16", 1, 2},
    {GGUF_Q8_0, "Q8_0", QK, 34},   {GGUF_Q4_0, "Q4_0", QK, 18},    {GGUF_Q4_1, "Q4_1", QK, 20},
    {GGUF_Q4_K, "Q4_K", QK_K, 144}, {GGUF_Q5_K, "Q5_K", QK_K, 176}, {GGUF_Q6_K, "Q6_K", QK_K, 210},
};

static const struct type_info *info(uint32_t type)
{
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (types[i].type == type)
            return &types[i];
    return NULL;
}

bool gguf_type_known(uint32_t type) { return info(type) != NULL; }
uint32_t gguf_type_block(uint32_t type) { return info(type) ? info(type)->block : 1; }
uint32_t gguf_type_block_bytes(uint32_t type) { return info(type) ? info(type)->bytes : 0; }

const char *gguf_type_name(uint32_t type)
{
    /* the names of the other ggml types, so a refusal says which it met */
    static const char *const others[] = {
        [4] = "Q4_2", [5] = "Q4_3", [6] = "Q5_0", [7] = "Q5_1", [9] = "Q8_1", [10] = "Q2_K", [11] = "Q3_K",
        [15] = "Q8_K", [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL",
        [21] = "IQ3_S", [22] = "IQ2_S", [23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32", [27] = "I64",
        [28] = "F64", [29] = "IQ1_M", [34] = "TQ1_0", [35] = "TQ2_0", [39] = "MXFP4",
    };
    if (info(type))
        return info(type)->name;
    if (type < sizeof others / sizeof *others && others[type])
        return others[type];
    static _Thread_local char unknown[24];
    snprintf(unknown, sizeof unknown, "type %u", type);
    return unknown;
}

static float half(const uint8_t *p) { return qp_f16_to_f32(le16(p)); }

static void q8_0(const uint8_t *b, float *y)
{
    const float d = half(b);
    for (int j = 0; j < QK; j++)
        y[j] = (int8_t)b[2 + j] * d;
}

static void q4_0(const uint8_t *b, float *y)
{
    const float d = half(b);
    for (int j = 0; j < QK / 2; j++) {
        y[j] = ((b[2 + j] & 0x0F) - 8) * d;
        y[j + QK / 2] = ((b[2 + j] >> 4) - 8) * d;
    }
}

static void q4_1(const uint8_t *b, float *y)
{
    const float d = half(b), m = half(b + 2);
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (b[4 + j] & 0x0F) * d + m;
        y[j + QK / 2] = (b[4 + j] >> 4) * d + m;
    }
}

/* the 6-bit scale and minimum of sub-block j of a Q4_K or Q5_K block */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K: d, dmin, scales[12], qs[128]; Q5_K: the same with qh[32] before
 * qs, the fifth bit of element l of sub-block pair p in bit 2p (low nibbles)
 * or 2p + 1 (high) of qh[l]. */
static void q45_k(const uint8_t *b, float *y, bool five)
{
    const float d = half(b), min = half(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *q = five ? b + 48 : b + 16;
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
        scale_min_k4(is, scales, &sc, &m);
        const float d1 = d * sc, m1 = min * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = min * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * ((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * ((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

/* Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (one
 * per 16 elements), d */
static void q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = half(b + 208);
    for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
}

void gguf_dequantize(uint32_t type, const uint8_t *src, uint64_t n, float *out)
{
    const struct type_info *t = info(type);
    if (!t)
        return;
    for (uint64_t i = 0; i < n / t->block; i++, src += t->bytes, out += t->block) {
        switch (type) {
        case GGUF_F32: memcpy(out, src, 4); break;
        case GGUF_F16: *out = half(src); break;
        case GGUF_BF16: *out = qp_bf16_to_f32(le16(src)); break;
        case GGUF_Q8_0: q8_0(src, out); break;
        case GGUF_Q4_0: q4_0(src, out); break;
        case GGUF_Q4_1: q4_1(src, out); break;
        case GGUF_Q4_K: q45_k(src, out, false); break;
        case GGUF_Q5_K: q45_k(src, out, true); break;
        case GGUF_Q6_K: q6_k(src, out); break;
        }
    }
}
