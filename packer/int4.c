/* int4.c - INT4 groups for the packer. One 4-row block at a time: each
 * row's groups are quantised (search or round-to-nearest) to codes 0..15
 * and pf16 parameters d, m; the codes of the 4 rows are interleaved into
 * u64 words, 4 columns x 4 rows each, for the SWAR kernel, and the groups'
 * parameters follow (formats/QPK.md, i4g). */
#include "int4.h"

#include "le.h"

#define COLS_PER_WORD 16  /* a u64 word: 16 columns of one row x 4 bits */
#define GROUP_BYTES 16    /* per group: u16 d[4], u16 m[4] */

uint64_t i4_block_bytes(uint32_t cols, uint32_t group)
{
    return qpk_i4g_block_bytes(cols, group);
}

/* One row (k of the block): its groups quantised, the codes packed two to a
 * byte into the row's words (word 4 (c / 16) + k holds columns c..c+15, the
 * low nibble of byte (c % 16) / 2 the even column), the parameters into the
 * groups' slots. */
static void quantise_row(const struct quant_matrix *m, const float *x, uint32_t k, uint8_t *block,
                         uint8_t *scratch, qnt_damage *dmg)
{
    uint32_t groups = m->cols / m->group;
    uint8_t *q = scratch;
    uint16_t *d = (uint16_t *)(scratch + m->cols), *mn = d + groups;
    qnt_i4_row(x, m->importance, m->cols, (int)m->group, m->E, m->method, q, d, mn, dmg);
    for (uint32_t c0 = 0; c0 < m->cols; c0 += COLS_PER_WORD) {
        uint8_t *word = block + ((uint64_t)(c0 / COLS_PER_WORD) * 4 + k) * 8;
        for (uint32_t i = 0; i < 8; i++)
            word[i] = (uint8_t)(q[c0 + 2 * i] | q[c0 + 2 * i + 1] << 4);
    }
    uint8_t *params = block + (uint64_t)m->cols * 2;
    for (uint32_t g = 0; g < groups; g++) {
        put16(params + (uint64_t)g * GROUP_BYTES + 2 * k, d[g]);
        put16(params + (uint64_t)g * GROUP_BYTES + 8 + 2 * k, mn[g]);
    }
}

int i4_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, const struct quant_progress *progress,
                    qnt_damage *dmg, qp_err *err)
{
    return quant_write_matrix(w, m, i4_block_bytes(m->cols, m->group), quantise_row, progress, dmg, err);
}
