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
    uint32_t ctx;               /* 0: min(max positions, 4096) */
    unsigned threads;           /* 1 or 2 */
    bool no_verify;             /* skip checksums of the container's tensors */
    bool stream;                /* matrices staged per job, not resident */
};

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
    double load_ms;
    double checksum_ms;         /* of load_ms: checking the container (0 with --no-verify) */
};

int qp_session_open(struct qp_session *s, const struct qp_session_opts *o, qp_err *err);
void qp_session_close(struct qp_session *s);

/* Computes token at pos; with want_logits fills s->logits and *next (argmax). */
int qp_session_step(struct qp_session *s, uint32_t token, uint32_t pos, bool want_logits, uint32_t *next,
                    qp_err *err);

const char *qp_backend_kind_name(enum qp_backend_kind k);

#endif
