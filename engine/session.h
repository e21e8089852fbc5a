/* session.h - a model ready to compute tokens, whichever backend runs it:
 * bpf or emu from a .qpk container, or the float reference from a Hugging
 * Face folder. qrun and qeval drive models only through this. */
#ifndef QP_SESSION_H
#define QP_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "forward.h"
#include "plan.h"
#include "qpk.h"
#include "ref.h"

enum qp_backend_kind { QP_BACKEND_BPF, QP_BACKEND_EMU, QP_BACKEND_REF };

struct qp_session_opts {
    const char *model;          /* .qpk (bpf, emu) or checkpoint folder (ref) */
    enum qp_backend_kind backend;
    uint32_t ctx;               /* 0: min(max positions, 4096), lowered until the maps fit
                                   the memory available (qp_mem_default_ctx; ref: not lowered) */
    uint32_t slots;             /* sequences with a KV cache each (bpf, emu); 0: 1 */
    unsigned threads;           /* 1 or 2 */
    bool no_verify;             /* skip checksums of the container's tensors */
    bool stream;                /* matrices staged per job, not resident */
    uint32_t block;             /* positions per forward block; 0: QP_BLOCK_DEFAULT */
    /* loading progress (may be NULL): phase QP_LOAD_*, done of total bytes */
    void (*progress)(void *user, int phase, uint64_t done, uint64_t total);
    void *progress_user;
};

enum { QP_LOAD_CHECKSUMS = 0, QP_LOAD_MAPS = 1, QP_LOAD_WEIGHTS = 2 };

struct qp_session {
    enum qp_backend_kind kind;
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
};

int qp_session_open(struct qp_session *s, const struct qp_session_opts *o, qp_err *err);
void qp_session_close(struct qp_session *s);

/* Computes token at pos of slot 0; with want_logits fills s->logits and
 * *next (argmax). A block of one position (qp_session_feed). */
int qp_session_step(struct qp_session *s, uint32_t token, uint32_t pos, bool want_logits, uint32_t *next,
                    qp_err *err);

/* Called with each position's logits (in s->logits, and s->logits_q32)
 * when qp_session_feed is asked for all of them; non-zero stops the feed. */
typedef int (*qp_session_logits_fn)(void *arg, uint32_t pos, qp_err *err);

/* Computes tokens[0..n) at positions pos0.. of the sequence in KV cache
 * slot `slot` (below opts.slots; the reference has slot 0 only), in blocks
 * of the plan's block size: prompts at block speed, with the same bits as
 * one step per token. Sequences in different slots do not touch each
 * other's caches: they interleave call by call with no recompute.
 * want: QP_LOGITS_NONE; QP_LOGITS_LAST (s->logits and *next of the last
 * position); QP_LOGITS_ALL (as LAST, and on_logits(arg, pos) for every
 * position in order). next may be NULL. */
int qp_session_feed_slot(struct qp_session *s, uint32_t slot, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                         enum qp_logits want, qp_session_logits_fn on_logits, void *arg, uint32_t *next,
                         qp_err *err);

/* qp_session_feed_slot on slot 0: a single sequence */
int qp_session_feed(struct qp_session *s, const uint32_t *tokens, uint32_t n, uint32_t pos0, enum qp_logits want,
                    qp_session_logits_fn on_logits, void *arg, uint32_t *next, qp_err *err);

const char *qp_backend_kind_name(enum qp_backend_kind k);

#endif
