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

/* Code q of block row k, column c, into the block's zeroed code words:
 * bits [4(c % 16), +4) of little-endian word 4 (c / 16) + k, i.e. byte
 * (c % 16) / 2 of it, the low nibble for even c. */
static void put_code(uint8_t *codes, uint32_t k, uint32_t c, uint8_t q)
{
    uint64_t word = (uint64_t)(c / COLS_PER_WORD) * 4 + k;
    codes[word * 8 + (c % COLS_PER_WORD) / 2] |= (uint8_t)(q << (4 * (c % 2)));
}

/* one row (k of the block): quantise its groups, place codes and parameters */
static int quantise_row(const struct quant_matrix *m, uint32_t r, uint32_t k, uint8_t *block,
                        struct quant_damage *dmg, qp_err *err)
{
    float x[QNT_MAX_GROUP];
    uint8_t q[QNT_MAX_GROUP];
    uint8_t *params = block + (uint64_t)m->cols * 2;
    for (uint32_t g0 = 0; g0 < m->cols; g0 += m->group) {
        if (quant_load_group(m, r, g0, x, "int4", err))
            return -1;
        uint16_t d, mn;
        qnt_i4_group(x, m->importance ? m->importance + g0 : NULL, (int)m->group, m->E, m->method, q, &d, &mn);
        uint8_t *gp = params + (uint64_t)(g0 / m->group) * GROUP_BYTES;
        put16(gp + 2 * k, d);
        put16(gp + 8 + 2 * k, mn);
        for (uint32_t j = 0; j < m->group; j++) {
            put_code(block, k, g0 + j, q[j]);
            quant_damage_note(dmg, x[j], qnt_i4_value(q[j], d, mn, m->E));
        }
    }
    return 0;
}

int i4_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, struct quant_damage *dmg, qp_err *err)
{
    return quant_write_matrix(w, m, i4_block_bytes(m->cols, m->group), quantise_row, dmg, err);
}
