/* int8.h - group-scaled INT8 matrices (`qpack pack --format int8`, and the
 * int8 tensors of an int4 container): the quantiser of packer/quant.h per
 * group, laid out as QPK_ENC_I8G, or QPK_ENC_I6G / QPK_ENC_I7G with 6- or
 * 7-bit codes. */
#ifndef QP_PACK_INT8_H
#define QP_PACK_INT8_H

#include <stdint.h>

#include "quant_jobs.h"

/* Quantises m (cols % 16 == 0) group by group and writes it block by block
 * through w: as i8g, or as i6g or i7g (6- or 7-bit codes) when
 * m->encoding says so. */
int i8_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, const struct quant_progress *progress,
                    qnt_damage *dmg, qp_err *err);

#endif
