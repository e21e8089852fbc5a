/* forward.h - the forward pass of a block of positions as a schedule of kernel invocations:
 * small kernels run on the calling thread, matrix products and attention are
 * cut into invocations of bounded work and shared with a worker thread. */
#ifndef QP_FORWARD_H
#define QP_FORWARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

struct qp_forward;

#define QP_SLOW_CALL_MS 10.0    /* the bound on one invocation */

struct qp_forward_stats {
    uint64_t calls;              /* kernel invocations so far (one paused by the call budget counts once) */
    double max_call_ms;          /* longest single invocation */
    uint64_t slow_calls;         /* invocations over QP_SLOW_CALL_MS */
    double max_prog_ms;          /* longest program run as the kernel clocked it (bpf; 0 on emu) */
    uint64_t slow_progs;         /* program runs over QP_SLOW_CALL_MS by that clock */
    uint64_t paused_calls;       /* program runs that reached the call budget, leaving the rest to another */
    char max_call_kernel[32];
    char max_prog_kernel[32];    /* the kernel of the longest program run */
    double kernel_ms[QP_K_COUNT];   /* time inside each kernel, summed over threads */
    uint64_t kernel_calls[QP_K_COUNT];
};

/* threads: 1 or 2 (the calling thread plus a worker) */
int qp_forward_create(struct qp_forward **fw, struct qp_backend *b, const struct qp_plan *plan,
                      unsigned threads, qp_err *err);
void qp_forward_destroy(struct qp_forward *fw);

/* One position of a block: a token of the sequence in KV cache slot
 * kv_slot, at position pos of that sequence. */
struct qp_entry {
    uint32_t token, kv_slot, pos;
};

/* Runs entries e[0..n) as one block (1 <= n <= the block size): each
 * entry's token at its own position of its own sequence, every weight
 * row block read once for all of them. An entry attends to its own KV slot's
 * cache up to its position, so the entries of one sequence in a block
 * must be at consecutive positions right after what its cache holds; the
 * order of the entries in the block does not matter. The vocabulary
 * projection and argmax run for entries [first_logits, n) (n: none), read
 * with qp_forward_logits and qp_forward_argmax. An entry's results are the
 * same bits whatever else shares its block, where it sits, and however its
 * sequence was cut into blocks. */
int qp_forward_batch(struct qp_forward *fw, const struct qp_entry *e, uint32_t n, uint32_t first_logits,
                     qp_err *err);

/* which positions of a block get the vocabulary projection and argmax */
enum qp_logits { QP_LOGITS_NONE, QP_LOGITS_LAST, QP_LOGITS_ALL };

/* Runs tokens[0..n) at positions pos0..pos0 + n - 1 of the sequence in
 * KV cache slot kv_slot (below the plan's kv_slots; 1 <= n <= the block size,
 * positions in order, after pos0 - 1): entry b of the block is position
 * pos0 + b. Other KV slots' caches are neither read nor written, so
 * sequences in different KV slots interleave freely, one block at a time.
 * Every weight row block is read once for the whole block.
 * The logits and argmax of the entries `logits` asks for are then read
 * with qp_forward_logits and qp_forward_argmax. The results are the same
 * bits however a sequence is cut into blocks. */
int qp_forward_block(struct qp_forward *fw, uint32_t kv_slot, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                     enum qp_logits logits, qp_err *err);

/* --schedule kernel: the job list of a one-entry step (entry e, and with
 * logits the vocabulary projection and argmax) written into the
 * backend's `jobs`, not run; *n_jobs of them. qrun listen keeps them as
 * templates (docs/LISTEN.md). */
int qp_forward_record(struct qp_forward *fw, const struct qp_entry *e, bool logits, uint32_t *n_jobs, qp_err *err);

/* positions one block holds at most (the plan's) */
uint32_t qp_forward_block_size(const struct qp_forward *fw);

/* Matrices one product reads at most (q, k and v fused). */
#define QP_MAX_FUSED 3

/* Rows per job of a product of rows x cols over nb block entries a job,
 * the block cut in parts such parts, on threads threads (stream_fit:
 * --stream's rows per job at most, 0 resident): whole row blocks (4 rows) of
 * bounded work, and few enough jobs for the job list and the
 * amax slots (tests/engine/test_forward.c). */
uint32_t qp_matvec_rows_per_job(uint32_t rows, uint32_t cols, uint32_t nb, uint32_t parts, uint32_t threads,
                                uint32_t stream_fit);

/* Q32 logits [vocab] and the argmax of entry b of the last block */
const int64_t *qp_forward_logits(const struct qp_forward *fw, uint32_t b);
uint32_t qp_forward_argmax(const struct qp_forward *fw, uint32_t b);

/* Optional: while *flag is true every kernel invocation fails at once
 * (QP_E_INTERRUPTED), so a pass stops within one invocation; NULL: none. */
void qp_forward_set_interrupt(struct qp_forward *fw, const atomic_bool *flag);

/* Optional: called after each layer with the layer index (tracing). */
void qp_forward_on_layer(struct qp_forward *fw, void (*cb)(void *, uint32_t), void *arg);

const struct qp_forward_stats *qp_forward_stats(const struct qp_forward *fw);

#endif
