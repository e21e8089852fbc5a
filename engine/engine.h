/* engine.h - a loaded model, whichever backend runs it: bpf or emu from a
 * .qpk container (the plan of its maps, the backend, the schedule), or the
 * float reference from a Hugging Face folder. It holds a KV cache slot for
 * every sequence the caller runs on it; the public qpack_model wraps one
 * engine, and each qpack_session is a slot of it (api/). devtools and
 * the engine's tests drive it directly. */
#ifndef QP_ENGINE_H
#define QP_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "forward.h"
#include "plan.h"
#include "qpack.h"
#include "qpk.h"
#include "ref.h"
#include "resident.h"

struct qp_engine {
    qpack_backend kind;
    struct qpk_file file;
    bool file_open;
    struct qp_plan plan;
    struct qp_backend *b;
    struct qp_forward *fw;
    struct ref_model *ref;
    uint32_t vocab, ctx, hidden, n_layers;
    double *logits;             /* vocab, after a step with logits */
    const int64_t *logits_q32;  /* bpf, emu: the same logits as the kernels left them (Q32) */
    uint32_t argmax;            /* of those logits (lowest index on ties) */
    double load_ms;
    double checksum_ms;         /* of load_ms: checking the container (0 with --no-verify) */
    struct qp_pin *pin;         /* a loaded model opened by name (pin:NAME), else NULL */
};

/* Opens path (a .qpk for bpf and emu, a checkpoint folder for ref, or
 * pin:NAME for a model qpack load pinned: its objects, no load, its own
 * context, slots and cache; every forward block under its step lock) as
 * qpack_model_open documents p's fields: backend, ctx (0: the default
 * rule, memory.h; ref: not lowered), max_sessions (the KV cache slots; 0:
 * 1), threads, kv_cache, stream, no_verify and progress. block: positions per forward
 * block (0: QP_BLOCK_DEFAULT, or QP_BLOCK from the environment). */
int qp_engine_open(struct qp_engine *e, const char *path, const qpack_model_params *p, uint32_t block,
                   qp_err *err);
void qp_engine_close(struct qp_engine *e);

/* Called with each position's logits (in e->logits, and e->logits_q32)
 * when qp_engine_feed is asked for all of them; non-zero stops the feed. */
typedef int (*qp_engine_logits_fn)(void *arg, uint32_t pos, qp_err *err);

/* Computes tokens[0..n) at positions pos0.. of the sequence in KV cache
 * slot `slot` (below max_sessions; the reference has slot 0 only), in
 * blocks of the plan's block size: prompts at block speed, with the same
 * bits as one step per token. Sequences in different slots do not touch
 * each other's caches: they interleave call by call with no recompute.
 * want: QP_LOGITS_NONE; QP_LOGITS_LAST (e->logits and *next of the last
 * position); QP_LOGITS_ALL (as LAST, and on_logits(arg, pos) for every
 * position in order). next may be NULL. */
int qp_engine_feed(struct qp_engine *e, uint32_t slot, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                   enum qp_logits want, qp_engine_logits_fn on_logits, void *arg, uint32_t *next, qp_err *err);

/* Called with the logits (Q32, as the kernels left them) and argmax of
 * each entry of a batch asked for them; index: the entry's place in the
 * caller's array. Valid during the call. */
typedef int (*qp_engine_batch_fn)(void *arg, uint32_t index, const int64_t *logits_q32, uint32_t argmax,
                                  qp_err *err);

/* Computes ent[0..n) (positions of any sequences, each sequence's at
 * consecutive positions after what its cache holds, in order) in blocks of
 * the plan's block size, several sequences to a block (bpf and emu). Within
 * each block the entries with want[i] set go last, so the vocabulary
 * projection runs for them alone, and on_logits sees each of them. Every
 * entry's logits are the same bits as feeding its sequence alone gives. */
int qp_engine_feed_batch(struct qp_engine *e, const struct qp_entry *ent, const bool *want, uint32_t n,
                         qp_engine_batch_fn on_logits, void *arg, qp_err *err);

/* Positions [0, n) of slot src's KV cache copied into slot dst (bpf,
 * emu): dst then holds what feeding src's first n tokens would have left
 * there, the same bits. */
int qp_engine_copy_slot(struct qp_engine *e, uint32_t dst, uint32_t src, uint32_t n, qp_err *err);

/* The KV cache's rows per position (a run per layer; the 8-bit cache per
 * layer and KV head) and bytes per row, the same for K and V. */
void qp_engine_kv_shape(const struct qp_engine *e, uint32_t *n_runs, uint32_t *row_bytes);

/* Positions [0, n) of kv_slot's K and V caches (bpf, emu) out to rows[0]
 * and rows[1], or back in from them with to_cache: each [n_runs][n]
 * [row_bytes] (qp_engine_kv_shape). Not during a step. */
int qp_engine_slot_rows(struct qp_engine *e, uint32_t kv_slot, uint32_t n, uint8_t *rows[2], bool to_cache,
                        qp_err *err);

/* One token at pos of slot 0; with want_logits fills e->logits and *next
 * (argmax). */
int qp_engine_step(struct qp_engine *e, uint32_t token, uint32_t pos, bool want_logits, uint32_t *next,
                   qp_err *err);

/* "bpf", "emu" or "ref" */
const char *qp_backend_name(qpack_backend k);

#endif
