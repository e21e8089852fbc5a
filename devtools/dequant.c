/* dequant.c - qp-dequant MODEL.qpk OUT.safetensors: every tensor of a
 * container as the kernels see it, written as float32 safetensors under its
 * Hugging Face name. A measuring aid, not a product path: with the source
 * checkpoint's config.json beside it, the float64 reference (qeval --ref)
 * runs the container's own weights, which splits a container's error
 * against the original into what its weights cost (reference on these
 * weights against the original) and what the integer kernels add on top
 * (the container against the reference on these weights).
 *
 * Decoding follows formats/QPK.md's layouts (a packed tensor, i6g, i7g
 * or i4k, through the i8g or i4g block qrun rewrites it to); the values are
 * the exact integers times 2^-scale_exp, rounded once to float. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qpk.h"
#include "quant.h"
#include "safetensors_write.h"

static int32_t get32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* the integer of element (r, c), to be scaled by 2^-scale_exp, from the
 * row block blk holding r in t's kernel encoding */
static double element(const struct qpk_tensor *t, const uint8_t *blk, uint32_t r, uint32_t c)
{
    uint32_t k = r % t->rows_per_block;
    switch (qpk_kernel_encoding(t->encoding)) {
    case QPK_ENC_Q24:
        return get32(blk + ((uint64_t)(c / 16) * 64 + k * 16 + c % 16) * 4);
    case QPK_ENC_I32S:
        return get32(blk + (uint64_t)c * 4);
    case QPK_ENC_I8G: {
        int8_t q = (int8_t)blk[(uint64_t)(c / 16) * 64 + k * 16 + c % 16];
        int32_t d = get32(blk + (uint64_t)t->cols * 4 + ((uint64_t)(c / t->group_size) * 4 + k) * 4);
        return (double)d * q;
    }
    case QPK_ENC_I4G: {
        uint8_t byte = blk[8 * (4 * (uint64_t)(c / 16) + k) + (c % 16) / 2];
        uint8_t q = c % 2 ? byte >> 4 : byte & 15;
        const uint8_t *par = blk + 2 * (uint64_t)t->cols + 16 * (uint64_t)(c / t->group_size);
        return (double)qnt_i4_int(q, get16(par + 2 * k), get16(par + 8 + 2 * k));
    }
    }
    return NAN;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: qp-dequant MODEL.qpk OUT.safetensors\n");
        return 2;
    }
    struct qpk_file f;
    qp_err err = {{0}};
    if (qpk_open(&f, argv[1], QPK_VERIFY, &err)) {
        fprintf(stderr, "qp-dequant: %s\n", err.msg);
        return 1;
    }
    struct stw_tensor *decl = calloc(f.n_tensors, sizeof *decl);
    size_t widest = 0, widest_block = 0;
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const struct qpk_tensor *t = &f.tensors[i];
        bool vector = qpk_role_is_norm(t->role);
        decl[i] = (struct stw_tensor){.name = t->name, .dtype = ST_F32, .ndim = vector ? 1 : 2,
                                      .shape = {vector ? t->cols : t->rows, t->cols}};
        widest = t->cols > widest ? t->cols : widest;
        widest_block = qpk_kernel_stride(t) > widest_block ? qpk_kernel_stride(t) : widest_block;
    }
    struct stw_writer *w = NULL;
    float *row = malloc(widest * sizeof *row);
    uint8_t *expanded = malloc(widest_block);
    int rc = !row || !expanded || stw_open(&w, argv[2], decl, f.n_tensors, &err);
    for (uint32_t i = 0; !rc && i < f.n_tensors; i++) {
        const struct qpk_tensor *t = &f.tensors[i];
        double scale = ldexp(1.0, -t->scale_exp);
        for (uint32_t r = 0; !rc && r < t->rows; r++) {
            const uint8_t *blk = t->data + (uint64_t)(r / t->rows_per_block) * t->row_stride;
            if (qpk_encoding_packed(t->encoding)) {
                if (r % t->rows_per_block == 0)
                    qpk_expand_blocks(t, blk, 1, expanded);
                blk = expanded;
            }
            for (uint32_t c = 0; c < t->cols; c++)
                row[c] = (float)(element(t, blk, r, c) * scale);
            rc = stw_write(w, row, (size_t)t->cols * sizeof *row, &err);
        }
    }
    if (!rc)
        rc = stw_finish(w, &err);
    else if (row && expanded)
        stw_abort(w);
    if (rc)
        fprintf(stderr, "qp-dequant: %s\n", row && expanded ? err.msg : "out of memory");
    free(row);
    free(expanded);
    free(decl);
    qpk_close(&f);
    return rc ? 1 : 0;
}
