/* int4.c - INT4 groups for the packer. One 4-row block at a time: each
 * row's groups are quantised (search or round-to-nearest) to codes 0..15
 * and pf16 parameters d, m; the codes of the 4 rows are interleaved into
 * u64 words, 4 columns x 4 rows each, for the SWAR kernel, and the groups'
 * parameters follow (formats/QPK.md, i4g), or their super-blocks' scales
 * and 6-bit multiples (i4k). */
#include "int4.h"

#include "le.h"

#define COLS_PER_WORD 16  /* a u64 word: 16 columns of one row x 4 bits */
#define GROUP_BYTES 16    /* per group: u16 d[4], u16 m[4] */

_Static_assert(QNT_I4K_GROUPS == QPK_I4K_GROUPS, "the quantiser's super-blocks are the container's");

/* the codes of row k packed two to a byte into the row's words (word 4 (c /
 * 16) + k holds columns c..c+15, the low nibble of byte (c % 16) / 2 the
 * even column) */
static void put_codes(const struct quant_matrix *m, const uint8_t *q, uint32_t k, uint8_t *block)
{
    for (uint32_t c0 = 0; c0 < m->cols; c0 += COLS_PER_WORD) {
        uint8_t *word = block + ((uint64_t)(c0 / COLS_PER_WORD) * 4 + k) * 8;
        for (uint32_t i = 0; i < 8; i++)
            word[i] = (uint8_t)(q[c0 + 2 * i] | q[c0 + 2 * i + 1] << 4);
    }
}

/* One row (k of the block): its groups quantised, the codes into the row's
 * words, the parameters into the groups' slots. */
static void quantise_row(const struct quant_matrix *m, const float *x, uint32_t k, uint8_t *block,
                         uint8_t *scratch, qnt_damage *dmg)
{
    uint32_t groups = m->cols / m->group;
    uint8_t *q = scratch;
    uint16_t *d = (uint16_t *)(scratch + m->cols), *mn = d + groups;
    qnt_i4_row(x, m->importance, m->cols, (int)m->group, m->E, m->method, q, d, mn, dmg);
    put_codes(m, q, k, block);
    uint8_t *params = block + (uint64_t)m->cols * 2;
    for (uint32_t g = 0; g < groups; g++) {
        put16(params + (uint64_t)g * GROUP_BYTES + 2 * k, d[g]);
        put16(params + (uint64_t)g * GROUP_BYTES + 8 + 2 * k, mn[g]);
    }
}

/* i4k: the same codes; per super-block the 4 rows' scales sd[4], sm[4],
 * then each row's 16 six-bit multiples (8 for d, 8 for m) in 12 bytes. */
static void quantise_row_k(const struct quant_matrix *m, const float *x, uint32_t k, uint8_t *block,
                           uint8_t *scratch, qnt_damage *dmg)
{
    uint32_t supers = m->cols / m->group / QPK_I4K_GROUPS;
    uint8_t *q = scratch, *sub = scratch + m->cols;
    uint16_t *sd = (uint16_t *)(sub + 16 * (uint64_t)supers), *sm = sd + supers;
    qnt_i4k_row(x, m->importance, m->cols, (int)m->group, m->E, m->method, q, sd, sm, sub, dmg);
    put_codes(m, q, k, block);
    for (uint32_t s = 0; s < supers; s++) {
        uint8_t *sb = block + (uint64_t)m->cols * 2 + (uint64_t)s * QPK_I4K_SUPER_BYTES;
        put16(sb + 2 * k, sd[s]);
        put16(sb + 8 + 2 * k, sm[s]);
        for (unsigned i = 0; i < 2 * QPK_I4K_GROUPS; i++)
            qpk_bits6_put(sb + 16 + 12 * k, i, sub[2 * QPK_I4K_GROUPS * s + i]);
    }
}

int i4_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, const struct quant_progress *progress,
                    qnt_damage *dmg, qp_err *err)
{
    return m->encoding == QPK_ENC_I4K
               ? quant_write_matrix(w, m, qpk_block_bytes(QPK_ENC_I4K, m->cols, m->group), quantise_row_k, progress,
                                    dmg, err)
               : quant_write_matrix(w, m, qpk_block_bytes(QPK_ENC_I4G, m->cols, m->group), quantise_row, progress,
                                    dmg, err);
}
