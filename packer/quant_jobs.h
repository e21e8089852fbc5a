/* quant_jobs.h - what the int8 and int4 packers share: a matrix quantised
 * a chunk of 4-row blocks at a time by every core, each block by whichever
 * thread takes it next, written in order, its source pages let go; and the
 * damage it did to the source values. Every block's bytes and damage depend
 * on that block alone and the damage is added up block by block in order,
 * so the output is the same bytes whatever the number of threads or their
 * timing. */
#ifndef QP_PACK_QUANT_JOBS_H
#define QP_PACK_QUANT_JOBS_H

#include <stdint.h>

#include "qpk_write.h"
#include "quant.h"
#include "safetensors.h"

#define QUANT_BLOCK_ROWS 4    /* rows per block, as the kernels read them */

/* Told after each chunk is written: bytes of this matrix written so far. */
struct quant_progress {
    void (*fn)(void *ctx, uint64_t bytes_done);
    void *ctx;
};

/* one matrix and how it is quantised */
struct quant_matrix {
    const struct st_model *model; /* the checkpoint src is in */
    const struct st_tensor *src;  /* [rows, cols], rows % 4 == 0 */
    uint32_t rows, cols;
    uint32_t group;               /* columns per group; divides cols */
    int E;                        /* value = ... * 2^-E */
    qnt_method method;
    const float *importance;      /* cols weights of the search's error, or NULL */
    const char *format;           /* "int4" or "int8", for error messages */
    unsigned encoding;            /* QPK_ENC_I8G, I6G, I7G, I4G or I4K */
};

/* Quantises the finite source row x of m into row k of its block (block_bytes,
 * zeroed); adds the row's damage to dmg. scratch: QUANT_SCRATCH_BYTES(cols),
 * the calling thread's own. */
typedef void (*quant_row_fn)(const struct quant_matrix *m, const float *x, uint32_t k, uint8_t *block,
                             uint8_t *scratch, qnt_damage *dmg);
#define QUANT_SCRATCH_BYTES(cols) ((size_t)(cols) * 4)

/* The threads a matrix is quantised on: QPACK_THREADS when set (1..64),
 * else the online CPUs (at most 64). */
unsigned quant_threads(void);

/* The tensor's exponent: the one packer/quant.h picks for its largest
 * magnitude, which keeps every parameter in pf16 (and |D| <= QPK_I8_MAX_SCALE). */
int quant_tensor_exponent(const struct st_model *model, const struct st_tensor *src);

/* Quantises every block of m with fill and writes them in order through w;
 * dmg accumulates. A non-finite source value is an error naming the tensor,
 * index and format. progress may be NULL. */
int quant_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, uint64_t block_bytes,
                       quant_row_fn fill, const struct quant_progress *progress, qnt_damage *dmg, qp_err *err);

#endif
