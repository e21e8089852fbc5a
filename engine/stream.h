/* stream.h - --stream: the weights stay in the container, and each matrix
 * product's job reads its own row blocks (4 rows each) into the work map
 * just before it runs, so that one thread reads while the other computes.
 * Row blocks are read with preadv, not copied from the mapping: the model
 * stays out of this process's memory, and no page faults are taken (on
 * this VM they cost more than the copy). Packed tensors (i6g, i7g, i4k)
 * are expanded into the kernels' layout as they are read. */
#ifndef QP_STREAM_H
#define QP_STREAM_H

#include <stdint.h>

#include "error.h"
#include "plan.h"

/* Reads row blocks [first, first + n) of weight map `map` into the work map's
 * keys [key, key + n) (work: the work map's memory). A file truncated or
 * changed meanwhile is an error naming it. */
int qp_stream_stage(const struct qp_plan *plan, uint8_t *work, enum qp_map_id map, uint32_t first, uint32_t n,
                    uint32_t key, qp_err *err);

#endif
