/* int8.c - INT8 groups for the packer. One 4-row block at a time: each
 * row's groups are quantised (search or round-to-nearest), the codes go
 * into 4-row x 16-column tiles and the scales after them, the layout the
 * BPF kernel reads (formats/QPK.md, i8g). */
#include "int8.h"

#include <string.h>

#include "le.h"

#define TILE_COLS 16

/* One row (k of the block): its groups quantised, the codes into row k of
 * every tile, the scales after the tiles, group-major. */
static void quantise_row(const struct quant_matrix *m, const float *x, uint32_t k, uint8_t *block,
                         uint8_t *scratch, qnt_damage *dmg)
{
    int8_t *q = (int8_t *)scratch;
    uint16_t *d = (uint16_t *)(scratch + m->cols);
    qnt_i8_row(x, m->importance, m->cols, (int)m->group, m->E, m->method, q, d, dmg);
    for (uint32_t c0 = 0; c0 < m->cols; c0 += TILE_COLS)
        memcpy(block + (uint64_t)(c0 / TILE_COLS) * QUANT_BLOCK_ROWS * TILE_COLS + k * TILE_COLS, q + c0, TILE_COLS);
    uint8_t *scales = block + (uint64_t)m->cols * QUANT_BLOCK_ROWS;
    for (uint32_t g = 0; g < m->cols / m->group; g++)
        put32(scales + ((uint64_t)g * QUANT_BLOCK_ROWS + k) * 4, (uint32_t)pf16_int(d[g]));
}

/* i6g and i7g: the codes in the same order as 6- or 7-bit fields, then
 * each group's 4 pf16 d */
static void quantise_row_packed(const struct quant_matrix *m, const float *x, uint32_t k, uint8_t *block,
                                uint8_t *scratch, qnt_damage *dmg)
{
    int8_t *q = (int8_t *)scratch;
    uint16_t *d = (uint16_t *)(scratch + m->cols);
    bool seven = m->encoding == QPK_ENC_I7G;
    if (seven)
        qnt_i7_row(x, m->importance, m->cols, (int)m->group, m->E, m->method, q, d, dmg);
    else
        qnt_i6_row(x, m->importance, m->cols, (int)m->group, m->E, m->method, q, d, dmg);
    for (uint32_t c = 0; c < m->cols; c++) {
        uint64_t n = (uint64_t)(c / TILE_COLS) * QUANT_BLOCK_ROWS * TILE_COLS + k * TILE_COLS + c % TILE_COLS;
        if (seven)
            qpk_bits7_put(block, n, (unsigned)q[c] & 127);
        else
            qpk_bits6_put(block, n, (unsigned)q[c] & 63);
    }
    uint8_t *params = block + (seven ? (uint64_t)m->cols * 7 / 2 : (uint64_t)m->cols * 3);
    for (uint32_t g = 0; g < m->cols / m->group; g++)
        put16(params + ((uint64_t)g * QUANT_BLOCK_ROWS + k) * 2, d[g]);
}

int i8_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, const struct quant_progress *progress,
                    qnt_damage *dmg, qp_err *err)
{
    if (m->encoding == QPK_ENC_I6G || m->encoding == QPK_ENC_I7G)
        return quant_write_matrix(w, m, qpk_block_bytes(m->encoding, m->cols, m->group), quantise_row_packed,
                                  progress, dmg, err);
    return quant_write_matrix(w, m, qpk_block_bytes(QPK_ENC_I8G, m->cols, m->group), quantise_row, progress, dmg, err);
}
