/* quant_jobs.c - two threads over the blocks of a matrix, and the error
 * bookkeeping, for the int8 and int4 packers. */
#include "quant_jobs.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

int quant_tensor_exponent(const struct st_tensor *src)
{
    double max_abs = 0;
    for (uint64_t i = 0; i < src->numel; i++)
        max_abs = fmax(max_abs, fabs((double)st_get_f32(src, i)));
    return qnt_tensor_exponent(max_abs);
}

int quant_load_group(const struct quant_matrix *m, uint32_t r, uint32_t g0, float *x, const char *format,
                     qp_err *err)
{
    uint64_t first = (uint64_t)r * m->cols + g0;
    for (uint32_t j = 0; j < m->group; j++) {
        x[j] = st_get_f32(m->src, first + j);
        if (!isfinite(x[j]))
            return qp_fail(err, "tensor %s[%u, %u] = %g does not fit %s (not finite)", m->src->name, r, g0 + j,
                           (double)x[j], format);
    }
    return 0;
}

void quant_damage_note(struct quant_damage *dmg, double x, double back)
{
    double e = fabs(x - back);
    dmg->sum_sq_err += e * e;
    dmg->max_err = fmax(dmg->max_err, e);
    dmg->max_abs = fmax(dmg->max_abs, fabs(x));
}

/* half of a tensor's blocks, quantised by one thread */
struct quant_job {
    const struct quant_matrix *m;
    quant_row_fn fill;
    uint32_t first_block, n_blocks;
    uint64_t block_bytes;
    uint8_t *out;             /* n_blocks blocks */
    struct quant_damage dmg;
    int rc;
    qp_err err;
};

static void *quant_job_run(void *arg)
{
    struct quant_job *j = arg;
    for (uint32_t b = 0; b < j->n_blocks && !j->rc; b++)
        for (uint32_t k = 0; k < QUANT_BLOCK_ROWS && !j->rc; k++)
            j->rc = j->fill(j->m, (j->first_block + b) * QUANT_BLOCK_ROWS + k, k, j->out + b * j->block_bytes,
                            &j->dmg, &j->err);
    return NULL;
}

/* The searched quantiser costs ~0.5 us a weight: a tensor is quantised by
 * two threads, each half of its blocks into memory, then written in order.
 * The split is fixed, so the bytes and the error sums are the same every run. */
int quant_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, uint64_t block_bytes,
                       quant_row_fn fill, struct quant_damage *dmg, qp_err *err)
{
    uint32_t blocks = m->rows / QUANT_BLOCK_ROWS, half = blocks / 2;
    uint8_t *buf = calloc(blocks ? blocks : 1, block_bytes);
    if (!buf)
        return qp_fail(err, "out of memory for %u blocks of %s", blocks, m->src->name);
    struct quant_job jobs[2] = {
        {.m = m, .fill = fill, .first_block = 0, .n_blocks = half, .block_bytes = block_bytes, .out = buf},
        {.m = m, .fill = fill, .first_block = half, .n_blocks = blocks - half, .block_bytes = block_bytes,
         .out = buf + block_bytes * half},
    };
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, quant_job_run, &jobs[1]) == 0;
    quant_job_run(&jobs[0]);
    if (threaded)
        pthread_join(th, NULL);
    else
        quant_job_run(&jobs[1]);
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        if (jobs[k].rc) {
            *err = jobs[k].err;
            rc = -1;
        }
        dmg->sum_sq_err += jobs[k].dmg.sum_sq_err;
        dmg->max_err = fmax(dmg->max_err, jobs[k].dmg.max_err);
        dmg->max_abs = fmax(dmg->max_abs, jobs[k].dmg.max_abs);
    }
    if (!rc)
        rc = qpk_writer_write(w, buf, block_bytes * blocks, err);
    free(buf);
    return rc;
}
