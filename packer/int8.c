/* int8.c - INT8 groups for the packer. One 4-row block at a time: each
 * row's groups are quantised (search or round-to-nearest), the codes go
 * into 4-row x 16-column tiles and the scales after them, the layout the
 * BPF kernel reads (formats/QPK.md, i8g). */
#include "int8.h"

#include <math.h>
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
                return qp_fail(err, "tensor %s[%u, %u] is not finite", src->name, (unsigned)(first / cols),
                               g0 + j);
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

int i8_write_matrix(struct qpk_writer *w, const struct st_tensor *src, uint32_t rows, uint32_t cols,
                    uint32_t group, int E, qnt_method method, struct i8_damage *dmg, qp_err *err)
{
    uint64_t bytes = i8_block_bytes(cols, group);
    uint8_t *block = malloc(bytes);
    if (!block)
        return qp_fail(err, "out of memory");
    int rc = 0;
    for (uint32_t r = 0; r < rows && !rc; r += TILE_ROWS) {
        for (uint32_t k = 0; k < TILE_ROWS && !rc; k++)
            rc = quantise_row(src, (uint64_t)(r + k) * cols, k, cols, group, E, method, block, dmg, err);
        if (!rc)
            rc = qpk_writer_write(w, block, bytes, err);
    }
    free(block);
    return rc;
}
