/* int4.h - group-quantised INT4 matrices (`qpack pack --format int4` and
 * int4-pure): the asymmetric quantiser of formats/quant.h per group, laid
 * out as QPK_ENC_I4G. */
#ifndef QP_PACK_INT4_H
#define QP_PACK_INT4_H

#include <stdint.h>

#include "quant_jobs.h"

/* Bytes of one 4-row block: 2 * cols of codes, then 16 per group (d[4], m[4]). */
uint64_t i4_block_bytes(uint32_t cols, uint32_t group);

/* Quantises m (cols % group == 0, group 16..256) group by group and writes
 * it block by block through w. */
int i4_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, const struct quant_progress *progress,
                    qnt_damage *dmg, qp_err *err);

#endif
