/* int8.c - INT8 groups for the packer. One 4-row block at a time: each
 * row's groups are quantised (search or round-to-nearest), the codes go
 * into 4-row x 16-column tiles and the scales after them, the layout the
 * BPF kernel reads (formats/QPK.md, i8g). */
#include "int8.h"

#include "le.h"

#define TILE_COLS 16

uint64_t i8_block_bytes(uint32_t cols, uint32_t group)
{
    return (uint64_t)cols * QUANT_BLOCK_ROWS + (uint64_t)(cols / group) * QUANT_BLOCK_ROWS * 4;
}

/* one row (k of the block) of a block: quantise its groups, place codes and scales */
static int quantise_row(const struct quant_matrix *m, uint32_t r, uint32_t k, uint8_t *block,
                        struct quant_damage *dmg, qp_err *err)
{
    float x[QNT_MAX_GROUP];
    int8_t q[QNT_MAX_GROUP];
    uint8_t *scales = block + (uint64_t)m->cols * QUANT_BLOCK_ROWS;
    for (uint32_t g0 = 0; g0 < m->cols; g0 += m->group) {
        if (quant_load_group(m, r, g0, x, "int8", err))
            return -1;
        uint16_t d;
        qnt_i8_group(x, m->importance ? m->importance + g0 : NULL, (int)m->group, m->E, m->method, q, &d);
        put32(scales + ((g0 / m->group) * QUANT_BLOCK_ROWS + k) * 4, (uint32_t)qnt_param_int(d));
        for (uint32_t j = 0; j < m->group; j++) {
            uint32_t c = g0 + j;
            block[(uint64_t)(c / TILE_COLS) * QUANT_BLOCK_ROWS * TILE_COLS + k * TILE_COLS + c % TILE_COLS] =
                (uint8_t)q[j];
            quant_damage_note(dmg, x[j], qnt_i8_value(q[j], d, m->E));
        }
    }
    return 0;
}

int i8_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, struct quant_damage *dmg, qp_err *err)
{
    return quant_write_matrix(w, m, i8_block_bytes(m->cols, m->group), quantise_row, dmg, err);
}
