/* int4.h - group-quantised INT4 matrices (`qpack pack --format int4` and
 * int4-pure): the asymmetric quantiser of packer/quant.h per group, laid
 * out as QPK_ENC_I4G or QPK_ENC_I4K. */
#ifndef QP_PACK_INT4_H
#define QP_PACK_INT4_H

#include <stdint.h>

#include "quant_jobs.h"

/* Quantises m (cols % group == 0, group 16..256) group by group and writes
 * it block by block through w: as i4g, or as i4k (parameters in
 * super-blocks; cols % (8 group) == 0) when m->encoding says so. */
int i4_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, const struct quant_progress *progress,
                    qnt_damage *dmg, qp_err *err);

#endif
