/* internal.h - what the files behind include/qpack.h share: the
 * structures of the public handles and the error conversion. Nothing here
 * is part of the public interface. */
#ifndef QP_LIB_INTERNAL_H
#define QP_LIB_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "qpack.h"
#include "ref.h"
#include "engine.h"
#include "gen_config.h"
#include "tokenizer.h"

struct qpack_tokenizer {
    qp_tok *tok;
    pthread_mutex_t encode_mu;  /* qp_tok_encode uses the tokenizer's caches */
};

struct qpack_model {
    qpack_model_info info;
    qpack_model_params params;
    char *path;
    char format[16];
    /* bpf and emu: the container, its maps and threads, with a KV cache
     * slot per session; the sessions' steps run on it one at a time
     * (step_mu) */
    struct qp_engine engine;
    bool engine_open;
    pthread_mutex_t step_mu;
    atomic_bool batch_interrupt;        /* a session of the running batch (batch.c) was interrupted */
    /* ref: each session opens its own reference from the folder */
    struct qpack_tokenizer *tokenizer;  /* NULL when the model carries none */
    int32_t end_ids[3 + QWEN3_GEN_EOS_MAX];
    int n_end;
    bool has_gen;               /* the checkpoint's generation_config.json */
    struct qwen3_gen_config gen;
    double *final_norm;         /* bpf, emu with pooling: the final norm's scales [hidden] */
    pthread_mutex_t sessions_mu;
    uint32_t n_sessions;
    bool *slot_taken;           /* [max_sessions]: the engine's KV cache slots in use */
};

struct qpack_session {
    qpack_model *m;
    uint32_t slot;              /* bpf, emu: its KV cache in the engine's maps */
    int32_t *tokens;            /* [ctx]: the cache's tokens, pos of them */
    uint32_t pos;
    double *logits;             /* [vocab] after a feed */
    bool have_logits;
    struct ref_model *ref;      /* ref backend: this session's own reference */
    atomic_bool interrupt;
    atomic_bool in_batch;       /* a batch holding this session runs (batch.c) */
    qpack_session_stats stats;
    uint32_t lookup_len;        /* qpack_lookup_step: the next draft's length at most (lookup.c) */
    void (*progress)(void *user, size_t done, size_t total);
    void *progress_user;
};

/* What one feed asks for besides the last position's logits (session.c):
 * every position's logits as float rows, every position's argmax, or (one
 * token) the residual after each layer. on_position, when set, sees each
 * position's logits and argmax in order; non-zero stops the feed. */
struct qp_lib_feed {
    const int32_t *tokens;
    size_t n;
    float *all;                 /* [n][vocab] or NULL */
    double *hidden;             /* [n_layers][hidden] (n == 1) or NULL */
    int (*on_position)(void *arg, size_t i, const double *logits, int32_t argmax, qp_err *err);
    void *arg;
};

/* Checks, then computes req's tokens at the session's next positions. */
int qp_lib_feed(qpack_session *s, const struct qp_lib_feed *req, qpack_error *err);

/* The checks of a feed before any compute: the ids against the
 * vocabulary, the count against the session's context. */
int qp_lib_check_feed(const qpack_session *s, const int32_t *tokens, size_t n, qpack_error *err);

/* Lookup decoding (lookup.c). A step's block is [pending, draft...]: the
 * draft from the session's tokens and pending, cut to the context's room
 * and the session's adapted length; *n (1 + the draft) tokens into block,
 * which has room for max_draft + 1. */
int qp_lib_lookup_block(const qpack_session *s, int32_t pending, uint32_t max_draft, int32_t *block, uint32_t *n,
                        qpack_error *err);

/* The check of a block's positions in order: position i holds the model's
 * greedy choice after pending and draft[0..i), kept while the draft agrees;
 * the first choice that disagrees (or follows the whole draft) is the last
 * kept. */
struct qp_lib_verify {
    const int32_t *draft;       /* the block's tokens after pending */
    uint32_t n_draft;
    int32_t *out;               /* the kept choices, count of them */
    uint32_t count;
    bool agreeing;              /* every draft token so far was the model's: start true */
};

/* Whether position i is kept: then its argmax joins out, and its logits
 * are the session's if it is the last. */
bool qp_lib_verify_next(struct qp_lib_verify *v, size_t i, int32_t argmax);

/* After a pass of a block of n tokens that kept count: the session's
 * lookup statistics and its next draft's length. */
void qp_lib_lookup_done(qpack_session *s, uint32_t n, uint32_t count);

/* Adds the kernel statistics between two snapshots of the engine's to s. */
void qp_lib_add_call_stats(qpack_session *s, const struct qp_forward_stats *before,
                           const struct qp_forward_stats *after);

/* Fills a public error from an internal one; `fallback` classifies a
 * failure the failing code did not (qp_err.code 0). Returns the code. */
qpack_status qp_lib_error(qpack_error *out, const qp_err *in, qpack_status fallback);

/* Whether path names a loaded model (pin:NAME, engine/resident.h). */
bool qp_lib_is_pinned(const char *path);
/* A loaded model's container path, context and slots, from its manifest. */
int qp_lib_pinned_container(const char *path, char *container, size_t cap, uint32_t *ctx, uint32_t *slots,
                            qp_err *err);

/* Fills a public error from a format string. */
/* A folder where a container goes: fails saying what it is and what to do
 * (pack a Hugging Face folder first); QPACK_OK for anything else. */
qpack_status qp_lib_refuse_folder(const char *path, qpack_error *err);

qpack_status qp_lib_fail(qpack_error *out, qpack_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* qpack_model_info of a container (no backend fields) or of a checkpoint
 * folder (inspect.c). */
void qp_lib_info_from_container(const struct qpk_file *f, qpack_model_info *info);
int qp_lib_info_from_folder(const char *dir, qpack_model_info *info, qp_err *err);
/* The tokenizer of a reference checkpoint, a folder's tokenizer.json or a
 * GGUF's; *tok NULL when it has none. */
int qp_lib_reference_tokenizer(const char *path, qp_tok **tok, qp_err *err);

/* The tokenizer a container carries; *tok NULL when none. */
int qp_lib_container_tokenizer(const struct qpk_file *f, const char *path, qp_tok **tok, qp_err *err);

/* The tokenizer handle of an internal tokenizer (takes ownership). */
struct qpack_tokenizer *qp_lib_tokenizer_wrap(qp_tok *tok);

#endif
