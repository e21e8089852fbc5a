/* int8.h - group-scaled INT8 matrices (`qpack pack --format int8`): the
 * quantiser of formats/quant.h per group, laid out as QPK_ENC_I8G. */
#ifndef QP_PACK_INT8_H
#define QP_PACK_INT8_H

#include <stdint.h>

#include "qpk_write.h"
#include "quant.h"
#include "safetensors.h"

/* what quantising one tensor cost, against the source values */
struct i8_damage {
    double max_abs, max_err, sum_sq_err;
};

/* The tensor's exponent (value = D * q * 2^-E): the one formats/quant.h
 * picks for its largest magnitude, which keeps every |D| <= QPK_I8_MAX_SCALE. */
int i8_tensor_exponent(const struct st_tensor *src);

/* Bytes of one 4-row block: codes then the groups' scales. */
uint64_t i8_block_bytes(uint32_t cols, uint32_t group);

/* Quantises src [rows, cols] (rows % 4 == 0, cols % group == 0) group by
 * group and writes it block by block through w. */
int i8_write_matrix(struct qpk_writer *w, const struct st_tensor *src, uint32_t rows, uint32_t cols,
                    uint32_t group, int E, qnt_method method, struct i8_damage *dmg, qp_err *err);

#endif
