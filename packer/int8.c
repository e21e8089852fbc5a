/* int8.c - INT8 groups for the packer. One 4-row block at a time: each
 * row's groups are quantised (search or round-to-nearest), the codes go
 * into 4-row x 16-column tiles and the scales after them, the layout the
 * BPF kernel reads (formats/QPK.md, i8g). */
#include "int8.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define TILE_ROWS 4
#define TILE_COLS 16

int i8_tensor_exponent(const struct st_tensor *src)
{
    double max_abs = 0;
    for (uint64_t i = 0; i < src->numel; i++)
        max_abs = fmax(max_abs, fabs((double)st_get_f32(src, i)));
    return qnt_tensor_exponent(max_abs);
}

uint64_t i8_block_bytes(uint32_t cols, uint32_t group)
{
    return (uint64_t)cols * TILE_ROWS + (uint64_t)(cols / group) * TILE_ROWS * 4;
}

/* one row of a block: quantise its groups, place codes and scales */
static int quantise_row(const struct st_tensor *src, uint64_t first, uint32_t k, uint32_t cols, uint32_t group,
                        int E, qnt_method method, uint8_t *block, struct i8_damage *dmg, qp_err *err)
{
    float x[QNT_MAX_GROUP];
    int8_t q[QNT_MAX_GROUP];
    int32_t *scales = (int32_t *)(block + (uint64_t)cols * TILE_ROWS);
    for (uint32_t g0 = 0; g0 < cols; g0 += group) {
        for (uint32_t j = 0; j < group; j++) {
            x[j] = st_get_f32(src, first + g0 + j);
            if (!isfinite(x[j]))
                return qp_fail(err, "tensor %s[%u, %u] = %g does not fit int8 (not finite)", src->name,
                               (unsigned)(first / cols), g0 + j, (double)x[j]);
        }
        uint16_t d;
        qnt_i8_group(x, NULL, (int)group, E, method, q, &d);
        scales[(g0 / group) * TILE_ROWS + k] = qnt_param_int(d);
        for (uint32_t j = 0; j < group; j++) {
            uint32_t c = g0 + j;
            block[(uint64_t)(c / TILE_COLS) * TILE_ROWS * TILE_COLS + k * TILE_COLS + c % TILE_COLS] = (uint8_t)q[j];
            double e = fabs((double)x[j] - qnt_i8_value(q[j], d, E));
            dmg->sum_sq_err += e * e;
            dmg->max_err = fmax(dmg->max_err, e);
            dmg->max_abs = fmax(dmg->max_abs, fabs((double)x[j]));
        }
    }
    return 0;
}

/* half of a tensor's blocks, quantised by one thread */
struct i8_job {
    const struct st_tensor *src;
    uint32_t first_block, n_blocks, cols, group;
    int E;
    qnt_method method;
    uint8_t *out;           /* n_blocks blocks */
    struct i8_damage dmg;
    int rc;
    qp_err err;
};

static void *i8_job_run(void *arg)
{
    struct i8_job *j = arg;
    uint64_t bytes = i8_block_bytes(j->cols, j->group);
    for (uint32_t b = 0; b < j->n_blocks && !j->rc; b++) {
        uint32_t r = (j->first_block + b) * TILE_ROWS;
        for (uint32_t k = 0; k < TILE_ROWS && !j->rc; k++)
            j->rc = quantise_row(j->src, (uint64_t)(r + k) * j->cols, k, j->cols, j->group, j->E, j->method,
                                 j->out + b * bytes, &j->dmg, &j->err);
    }
    return NULL;
}

/* The searched quantiser costs ~0.5 us a weight: a tensor is quantised by
 * two threads, each half of its blocks into memory, then written in order.
 * The split is fixed, so the bytes and the error sums are the same every run. */
int i8_write_matrix(struct qpk_writer *w, const struct st_tensor *src, uint32_t rows, uint32_t cols,
                    uint32_t group, int E, qnt_method method, struct i8_damage *dmg, qp_err *err)
{
    uint64_t bytes = i8_block_bytes(cols, group);
    uint32_t blocks = rows / TILE_ROWS, half = blocks / 2;
    uint8_t *buf = malloc(bytes * blocks);
    if (!buf)
        return qp_fail(err, "out of memory for %u int8 blocks", blocks);
    struct i8_job jobs[2] = {
        {.src = src, .first_block = 0, .n_blocks = half, .cols = cols, .group = group, .E = E, .method = method,
         .out = buf},
        {.src = src, .first_block = half, .n_blocks = blocks - half, .cols = cols, .group = group, .E = E,
         .method = method, .out = buf + bytes * half},
    };
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, i8_job_run, &jobs[1]) == 0;
    i8_job_run(&jobs[0]);
    if (threaded)
        pthread_join(th, NULL);
    else
        i8_job_run(&jobs[1]);
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
        rc = qpk_writer_write(w, buf, bytes * blocks, err);
    free(buf);
    return rc;
}
