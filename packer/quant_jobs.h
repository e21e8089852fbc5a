/* quant_jobs.h - what the int8 and int4 packers share: a matrix quantised
 * block by block on two threads (fixed split, so the same bytes every run),
 * written in order, and the damage it did to the source values. */
#ifndef QP_PACK_QUANT_JOBS_H
#define QP_PACK_QUANT_JOBS_H

#include <stdint.h>

#include "qpk_write.h"
#include "quant.h"
#include "safetensors.h"

#define QUANT_BLOCK_ROWS 4    /* rows per block, as the kernels read them */

/* what quantising one tensor cost, against the source values */
struct quant_damage {
    double max_abs, max_err, sum_sq_err;
};

/* one matrix and how it is quantised */
struct quant_matrix {
    const struct st_tensor *src;  /* [rows, cols], rows % 4 == 0 */
    uint32_t rows, cols;
    uint32_t group;               /* columns per group; divides cols */
    int E;                        /* value = ... * 2^-E */
    qnt_method method;
    const float *importance;      /* cols weights of the search's error, or NULL */
};

/* Quantises row r of m, row k of its block, into block (block_bytes,
 * zeroed). */
typedef int (*quant_row_fn)(const struct quant_matrix *m, uint32_t r, uint32_t k, uint8_t *block,
                            struct quant_damage *dmg, qp_err *err);

/* The tensor's exponent: the one formats/quant.h picks for its largest
 * magnitude, which keeps every parameter in pf16 (and |D| <= QPK_I8_MAX_SCALE). */
int quant_tensor_exponent(const struct st_tensor *src);

/* x[0..group) = row r's group starting at column g0; a non-finite value is
 * an error naming the tensor, index and format. */
int quant_load_group(const struct quant_matrix *m, uint32_t r, uint32_t g0, float *x, const char *format,
                     qp_err *err);

/* Adds one value's error to dmg. */
void quant_damage_note(struct quant_damage *dmg, double x, double back);

/* Quantises every block of m with fill (two threads, each half of the
 * blocks) and writes them in order through w; dmg accumulates. */
int quant_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, uint64_t block_bytes,
                       quant_row_fn fill, struct quant_damage *dmg, qp_err *err);

#endif
