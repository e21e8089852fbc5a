/* memory.h - the memory a model's maps take, against what the machine has.
 * Checked before any map is created, so that a model too big for the host
 * is refused with the figures rather than failing midway (BPF map memory
 * is kernel memory: it cannot be swapped or paged back to the file). Also
 * the rule for the default context. */
#ifndef QP_MEMORY_H
#define QP_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "plan.h"
#include "qpack.h"

/* memory left to everything else: the maps may take MemAvailable less this */
#define QP_MEM_RESERVE (512ull << 20)

/* MemAvailable of /proc/meminfo, in bytes. QP_MEM_AVAILABLE=BYTES sets it
 * instead (tests and benchmarks: what a smaller host would do). */
int qp_mem_available(uint64_t *bytes, qp_err *err);

/* Bytes the backend allocates for the plan's maps: with bpf every map,
 * each rounded up to whole pages; with emu the state maps and its expanded
 * copies of packed tensors only (the host twin reads the other weights
 * from the container's mapping, which the kernel can page out). */
uint64_t qp_mem_need(const struct qp_plan *p, bool bpf);

/* 0 when the plan's maps fit `avail` bytes less QP_MEM_RESERVE; otherwise
 * QP_E_MEMORY and one line naming what the maps need (weights, KV cache,
 * buffers), what is available, and the alternatives with their figures
 * (--stream, a smaller format, a smaller -c). */
int qp_mem_check(const struct qp_plan *p, bool bpf, uint64_t avail, qp_err *err);

/* The default context (the caller left it open): min(max_positions,
 * QPACK_DEFAULT_CTX), lowered in steps of QK_ATTN_CHUNK positions until every
 * map of the model - weights, the KV caches of all `slots` sessions, the
 * buffers - fits `avail` less QP_MEM_RESERVE; QK_ATTN_CHUNK at least
 * (when even that does not fit, qp_mem_check's error at that context). */
uint32_t qp_mem_default_ctx(const struct qpk_file *f, uint32_t slots, uint32_t block, bool stream, bool kv8, bool bpf,
                            uint64_t avail);

#endif
