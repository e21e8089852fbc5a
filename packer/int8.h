/* int8.h - group-scaled INT8 matrices (`qpack pack --format int8`, and the
 * int8 tensors of an int4 container): the quantiser of formats/quant.h per
 * group, laid out as QPK_ENC_I8G. */
#ifndef QP_PACK_INT8_H
#define QP_PACK_INT8_H

#include <stdint.h>

#include "quant_jobs.h"

/* Bytes of one 4-row block: codes then the groups' int32 scales. */
uint64_t i8_block_bytes(uint32_t cols, uint32_t group);

/* Quantises m (cols % 16 == 0) group by group and writes it block by block
 * through w. */
int i8_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, const struct quant_progress *progress,
                    qnt_damage *dmg, qp_err *err);

#endif
