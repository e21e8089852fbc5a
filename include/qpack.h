/* qpack.h - run a packed Qwen3 model (.qpk) in eBPF, from C.
 *
 * qpack packs a Hugging Face Qwen3 checkpoint once into a .qpk container;
 * this library loads the container into BPF maps and computes every model
 * operation in BPF programs the kernel verifier accepts. The host keeps the
 * tokenizer, sampling and text. qrun, qeval and `qrun serve` are built on
 * this header alone.
 *
 * The objects, from the outside in:
 *
 *   qpack_model      a container loaded once: weights in BPF maps (or in the
 *                    host twin, "emu"; or the float64 reference, "ref", from
 *                    a checkpoint folder or GGUF), the tokenizer and chat
 *                    template it carries. Read-only once open; shared by its
 *                    sessions.
 *   qpack_session    one token sequence with its own KV cache: feed tokens,
 *                    read logits. A model holds up to max_sessions of them,
 *                    each cache a slot of the model's KV maps; a step of one
 *                    session after another's costs no recompute, and
 *                    qpack_feed_batch and qpack_step_batch compute several
 *                    sessions' next tokens in shared blocks of positions.
 *   qpack_sampler    picks the next token from a session's logits (greedy,
 *                    temperature, top-k, top-p, min-p, repeat penalty),
 *                    seeded so a run repeats exactly.
 *   qpack_tokenizer  text <-> ids, exactly as Hugging Face's tokenizer;
 *   qpack_decoder    ids -> text one token at a time, never cutting a
 *                    UTF-8 character.
 *
 * A minimal generator (examples/generate.c is the whole program):
 *
 *   qpack_model *m;  qpack_session *s;  qpack_error e;
 *   qpack_model_params mp = qpack_model_default_params();
 *   if (qpack_model_open(&m, "model.qpk", &mp, &e)) { puts(e.message); return 1; }
 *   qpack_session_new(&s, m, &e);
 *   int32_t *ids; size_t n;
 *   qpack_tokenize(qpack_model_tokenizer(m), "Hello", 5, &ids, &n, &e);
 *   qpack_feed(s, ids, n, &e);
 *   int32_t next = qpack_argmax(s);  ... feed it, decode it, repeat
 *
 * Conventions. Functions that can fail return 0 (QPACK_OK) or a non-zero
 * qpack_status and, when err is not NULL, fill *err with the same code and
 * one line of text naming what failed (a file, a field, a value). Nothing is
 * ever printed. Strings are UTF-8. Buffers the library returns through a
 * `char **` or `int32_t **` are malloc'd: free() them. A model and its
 * sessions may be used from several threads; one session, sampler or
 * decoder from one thread at a time.
 *
 * Privileges: the BPF backend needs root or CAP_BPF + CAP_PERFMON; the emu
 * and ref backends need none.
 */
#ifndef QPACK_H
#define QPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QPACK_VERSION_MAJOR 0
#define QPACK_VERSION_MINOR 2
#define QPACK_VERSION_PATCH 0

/* "0.2.0 (git 1a2b3c4)": the library's version and the commit it was built from. */
const char *qpack_version(void);

/* ---- errors -------------------------------------------------------------- */

typedef enum qpack_status {
    QPACK_OK = 0,
    QPACK_ERR_ARGUMENT = 1,     /* a bad argument: out of range, NULL, an unknown id */
    QPACK_ERR_IO = 2,           /* a file could not be opened, read or written */
    QPACK_ERR_FORMAT = 3,       /* a container, checkpoint or tokenizer is malformed or forged */
    QPACK_ERR_PRIVILEGE = 4,    /* loading BPF programs needs root or CAP_BPF + CAP_PERFMON */
    QPACK_ERR_MEMORY = 5,       /* out of memory, or the machine cannot hold the maps */
    QPACK_ERR_CONTEXT = 6,      /* the tokens do not fit the session's context */
    QPACK_ERR_RANGE = 7,        /* the model's activations left the range computed exactly */
    QPACK_ERR_BUSY = 8,         /* every session slot of the model is taken */
    QPACK_ERR_INTERRUPTED = 9,  /* qpack_session_interrupt() stopped the call */
    QPACK_ERR_KERNEL = 10,      /* the kernel refused a BPF program or map (verifier, limits) */
    QPACK_ERR_INTERNAL = 11,    /* a bug: please report it with the message */
} qpack_status;

typedef struct qpack_error {
    qpack_status code;
    char message[512];          /* one line, no trailing newline */
} qpack_error;

/* A short name for a status ("context", "format", ...). */
const char *qpack_status_name(qpack_status code);

/* ---- models -------------------------------------------------------------- */

typedef struct qpack_model qpack_model;

typedef enum qpack_backend {
    QPACK_BACKEND_BPF = 0,      /* the kernels in BPF (the product) */
    QPACK_BACKEND_EMU = 1,      /* their host twin, bit-identical, no privilege needed */
    QPACK_BACKEND_REF = 2,      /* the float64 reference from a Hugging Face folder or a GGUF file */
} qpack_backend;

/* Loading phases reported to a progress callback. */
typedef enum qpack_load_phase {
    QPACK_LOAD_CHECKSUMS = 0,   /* verifying the container's checksums and value ranges */
    QPACK_LOAD_MAPS = 1,        /* creating maps and loading the programs */
    QPACK_LOAD_WEIGHTS = 2,     /* copying the weights into the maps */
} qpack_load_phase;

/* How the KV cache stores K and V (qrun --kv-cache). */
typedef enum qpack_kv_cache {
    QPACK_KV_INT16 = 0,         /* 16-bit entries per layer exponent and head vector shift: the
                                   exact-first default (Qwen3-0.6B: 112 KiB per position) */
    QPACK_KV_INT8 = 1,          /* 8-bit codes with a shift per head vector: about half the
                                   memory (59.5 KiB) and faster attention at long contexts, at a
                                   small accuracy cost (docs/BENCHMARKS.md) */
} qpack_kv_cache;

/* Who orders a step's kernel invocations (qrun --schedule, docs/SCHEDULE.md). */
typedef enum qpack_schedule {
    QPACK_SCHEDULE_HOST = 0,    /* the default: the host runs each invocation (bpf_prog_test_run)
                                   from two threads */
    QPACK_SCHEDULE_KERNEL = 1,  /* the host lists the step's invocations once and the kernel runs
                                   them as chains of BPF work items, one per thread (`threads`),
                                   each on its own CPU; the same bits. bpf backend only, resident
                                   weights (not stream; a pinned model only when qpack load
                                   --schedule kernel loaded it) */
} qpack_schedule;

#define QPACK_DEFAULT_CALL_US 50    /* chosen by scripts/bench_latency.sh (docs/BENCHMARKS.md) */
#define QPACK_CALL_US_NONE UINT32_MAX

typedef struct qpack_model_params {
    qpack_backend backend;      /* default QPACK_BACKEND_BPF */
    uint32_t ctx;               /* positions per session; 0: the default rule (qpack_default_ctx) */
    uint32_t max_sessions;      /* sessions open at once, each with its own KV cache of
                                   ctx * kv_bytes_per_position bytes, allocated at open
                                   (nothing else grows with it); 0: 1 */
    unsigned threads;           /* threads that compute a step: 1 or 2; 0: 2 */
    qpack_kv_cache kv_cache;    /* default QPACK_KV_INT16; the ref backend keeps float64 */
    uint32_t call_us;           /* how long a kernel call may hold a core, in microseconds: a
                                   matrix product or attention call past it returns at its next
                                   4-row group or attention task and the rest runs in another
                                   call; per-position kernels take the positions that fit (one
                                   at least); the same bits at any budget. On a kernel without
                                   preemption that bounds how long a step keeps another task
                                   from the core. 0: the default,
                                   QPACK_DEFAULT_CALL_US; QPACK_CALL_US_NONE: bounded by work
                                   alone (about half a millisecond a call on a quiet core) */
    qpack_schedule schedule;    /* default QPACK_SCHEDULE_HOST */
    bool stream;                /* matrices read from the file per step into a 64 MiB work
                                   map instead of copied into BPF maps at load (saves the
                                   weights' map memory; slower) */
    bool no_verify;             /* skip the container's checksums and value-range checks
                                   (only for containers you made yourself) */
    bool skip_tokenizer;        /* leave the tokenizer the model carries unread (a caller that
                                   has it already: qpack_tokenizer_load_model); then
                                   qpack_model_tokenizer() is NULL and qpack_token_is_end()
                                   knows only the model's eos */
    uint32_t session_wait_ms;   /* "pin:NAME" whose sessions are all held by live processes: how
                                   long qpack_session_new waits for one to be freed (0: none,
                                   QPACK_ERR_BUSY at once) */
    /* Called from qpack_model_open's thread as loading advances (done of
     * total bytes in a phase); may be NULL. */
    void (*progress)(void *user, qpack_load_phase phase, uint64_t done, uint64_t total);
    void *progress_user;
} qpack_model_params;

qpack_model_params qpack_model_default_params(void);

/* Opens path (a .qpk; a Hugging Face folder or a .gguf for QPACK_BACKEND_REF),
 * checks it, and loads it. On failure *model is NULL and nothing is left
 * behind (no BPF object, no mapping). A folder for the other backends is
 * QPACK_ERR_ARGUMENT, the message saying how to pack it.
 *
 * path "pin:NAME" opens a model `qpack load` pinned (docs/RESIDENT.md):
 * its BPF objects, in milliseconds, with no privilege beyond the pinned
 * files' group; no checksum pass, no verifier, no copy, the same logits.
 * The context, sessions and KV cache are the loaded ones (params' ctx,
 * max_sessions, kv_cache, call_us, stream and no_verify do not apply;
 * backend must be QPACK_BACKEND_BPF). Each session claims one of the
 * loaded model's slots across processes (QPACK_ERR_BUSY when all are held
 * by live processes, after session_wait_ms; a dead owner's slot is reclaimed), and every step of
 * any process runs under the model's step lock. A manifest from another
 * build, a container changed since the load (QPACK_ERR_FORMAT) and a
 * refused permission (QPACK_ERR_PRIVILEGE) fail with one line. */
int qpack_model_open(qpack_model **model, const char *path, const qpack_model_params *params,
                     qpack_error *err);

/* Frees the model; its sessions must be freed first. NULL is ignored. */
void qpack_model_free(qpack_model *model);

#define QPACK_KERNELS_MAX 24

/* A loaded BPF program: its kernel and the verifier's count of processed
 * instructions (the kernel allows 1,000,000 per program). */
typedef struct qpack_program_info {
    char name[24];              /* "matvec_i4", "attention", ... */
    uint32_t verified_insns;
} qpack_program_info;

/* How an embedding checkpoint (Qwen3-Embedding) pools its token states
 * (its 1_Pooling/config.json, which qpack pack keeps). */
typedef enum qpack_pooling {
    QPACK_POOLING_NONE = 0,     /* a generator only: qpack_embed refuses it */
    QPACK_POOLING_LAST = 1,     /* the last token's (Qwen3-Embedding's) */
    QPACK_POOLING_MEAN = 2,     /* the mean over the tokens */
} qpack_pooling;

/* What a checkpoint is for beyond generating, when its weights alone do
 * not say (the container's task section, which qpack pack writes). */
typedef enum qpack_task {
    QPACK_TASK_NONE = 0,        /* a generator (an embedder too, by its pooling) */
    QPACK_TASK_RERANK = 1,      /* a reranker (Qwen3-Reranker): P("yes") over {"yes", "no"}
                                   after its prompt scores a (query, document) pair */
} qpack_task;

typedef struct qpack_model_info {
    uint32_t vocab;             /* rows of the vocabulary projection: ids 0 .. vocab - 1 */
    uint32_t hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim;
    uint32_t max_positions;     /* the model's (config.json's max_position_embeddings) */
    uint32_t ctx;               /* positions per session, as opened */
    uint32_t max_sessions;
    int32_t bos_id, eos_id;     /* -1: the model names none */
    double rope_theta, rms_eps;
    bool tied;                  /* the vocabulary projection is the embedding */
    const char *format;         /* "q24", "int8", "int4"; "float64" for ref */
    const char *backend;        /* "bpf", "emu", "ref" */
    const char *path;
    bool has_tokenizer;         /* the container carries tokenizer.json */
    qpack_pooling pooling;      /* an embedding model's pooling; NONE for a generator */
    qpack_task task;            /* ref: RERANK when the folder's path names Qwen3-Reranker */
    uint64_t file_bytes;        /* the container's size; ref: the safetensors files' and index's */
    double bits_per_weight;     /* bytes of the weight tensors * 8 / their parameters */
    uint32_t block_positions;   /* positions a step computes at once (bpf, emu; 1 for ref) */
    uint64_t weight_bytes;      /* bytes of the weights in BPF maps (0: emu, ref, --stream's
                                   weights stay in the file) */
    uint64_t map_bytes;         /* bytes of every BPF map (0 for emu, ref) */
    const char *kv_cache;       /* "int16", "int8"; "float64" for ref */
    uint64_t kv_bytes_per_position;  /* K and V of one position, all layers, one session
                                        (Qwen3-0.6B: 114,688 int16, 60,928 int8; 448 MiB per
                                        session at ctx 4096 with int16; ref: float64) */
    double load_ms, checksum_ms, maps_ms, copy_ms;   /* start-up and its parts (ref: the
                                   config only; each session loads its own weights) */
    uint32_t kernel_lanes;      /* QPACK_SCHEDULE_KERNEL: the lanes a step runs, one per CPU
                                   (docs/SCHEDULE.md); 0 for the host schedule */
    const char *lane_start;     /* two lanes: "xdp" when one system call starts both (an XDP test
                                   run redirected to the other CPU through a CPU map), "thread"
                                   when a thread on the other CPU starts the second; else NULL */
    uint32_t n_programs;        /* bpf: programs[0 .. n_programs), each kernel's BPF program */
    qpack_program_info programs[QPACK_KERNELS_MAX];  /* (0 for emu and ref) */
} qpack_model_info;

const qpack_model_info *qpack_model_get_info(const qpack_model *model);

/* What qpack_model_open would load, read from the container's header (a
 * checkpoint folder's config.json and safetensors headers, or a GGUF's, for
 * QPACK_BACKEND_REF) without checking its checksums or loading anything:
 * for checks before the slow part (a context past max_positions, a prompt
 * past the context). Fills the shape, ids, format, has_tokenizer,
 * file_bytes and bits_per_weight; ctx is the default context, path the
 * caller's string; the rest is 0. */
int qpack_model_inspect(const char *path, qpack_backend backend, qpack_model_info *info, qpack_error *err);

/* Whether this process may load BPF programs (root, or CAP_BPF +
 * CAP_PERFMON, and no seccomp or LSM rule against it): a two-instruction
 * probe program, loaded and freed. */
bool qpack_bpf_permitted(void);

/* The context a model gets at most when params.ctx is 0: min(max_positions,
 * QPACK_DEFAULT_CTX). A container (bpf, emu) gets it lowered in steps of 256 positions
 * until its maps fit the memory available (README: memory); the context
 * chosen is qpack_model_get_info's ctx. */
#define QPACK_DEFAULT_CTX 4096
uint32_t qpack_default_ctx(uint32_t max_positions);

/* KV caches the model keeps for its sessions: max_sessions, one per
 * session (bpf, emu: a slot of the engine's KV cache maps; the reference:
 * a cache of its own), so switching between sessions recomputes nothing. */
uint32_t qpack_model_kv_caches(const qpack_model *model);

/* ---- sessions ------------------------------------------------------------ */

typedef struct qpack_session qpack_session;

/* A new, empty sequence (position 0) on model: QPACK_ERR_BUSY when
 * max_sessions are already open. */
int qpack_session_new(qpack_session **session, qpack_model *model, qpack_error *err);
void qpack_session_free(qpack_session *session);

/* Saves the session (bpf, emu) to the file path: its tokens, its last
 * logits and its KV cache, as rows copied out of the engine's maps, with
 * the container's checksum, the cache type and an XXH3-64 of the whole
 * (docs/ENGINE.md, "Saved sessions"). The file is written beside path and
 * renamed over it whole. Not during a feed of the session. */
int qpack_session_save(qpack_session *session, const char *path, qpack_error *err);

/* Replaces the session's tokens, logits and KV cache with the file's
 * (qpack_session_save); *n_restored (may be NULL) gets its token count.
 * The session then goes on with the same bits as the session saved would
 * have: qpack_session_rewind to a shorter prefix, then feed. A file of
 * another model (container checksum) or cache type (QPACK_ERR_ARGUMENT),
 * with more tokens than the session's context (QPACK_ERR_CONTEXT), or
 * truncated or corrupted (QPACK_ERR_FORMAT: checksum, size, fields) is
 * refused with one line and the session is left as it was. */
int qpack_session_restore(qpack_session *session, const char *path, uint32_t *n_restored, qpack_error *err);

/* Tokens in the session's KV cache (the next position). */
uint32_t qpack_session_pos(const qpack_session *session);

/* The tokens in the cache, pos of them. */
const int32_t *qpack_session_tokens(const qpack_session *session);

/* dst takes src's first pos tokens (pos <= qpack_session_pos(src)) with
 * their KV cache, copied, not computed again: what feeding them would
 * have left, the same bits; with pos the whole of src, its logits too.
 * Both sessions of one model, bpf or emu; not during a feed of either.
 * Several replies to one prompt feed it once. */
int qpack_session_copy(qpack_session *dst, const qpack_session *src, uint32_t pos, qpack_error *err);

/* Forgets every token from position pos on (pos <= qpack_session_pos);
 * 0 starts the sequence over. The logits are those of position pos - 1
 * only after the next qpack_feed. */
int qpack_session_rewind(qpack_session *session, uint32_t pos, qpack_error *err);

/* Computes tokens[0..n) at the next n positions, in blocks of positions
 * (each weight is read once per block). Afterwards the session's logits are
 * those of the last one (the distribution of the token after it).
 * QPACK_ERR_CONTEXT before any compute when they do not fit; ids are
 * checked against the vocabulary first (QPACK_ERR_ARGUMENT). A failed or
 * interrupted feed leaves the session as it was (the reference backend
 * keeps the positions it finished). */
int qpack_feed(qpack_session *session, const int32_t *tokens, size_t n, qpack_error *err);

/* As qpack_feed, and writes every position's logits to logits[n * vocab]
 * (row i: the distribution after tokens[i]). */
int qpack_feed_all_logits(qpack_session *session, const int32_t *tokens, size_t n, float *logits,
                          qpack_error *err);

/* The logits after the last token fed (vocab values), NULL before any. */
const double *qpack_logits(const qpack_session *session);

/* The id of the largest logit (lowest id on ties), -1 before any feed. */
int32_t qpack_argmax(const qpack_session *session);

/* As qpack_feed, calling each(user, i, logits) with every position's
 * logits in order (row i: the distribution after tokens[i]; vocab values,
 * valid during the call): scoring a text without a [n x vocab] buffer. A
 * non-zero return from each stops the feed with QPACK_ERR_INTERRUPTED,
 * the session as it was. */
int qpack_feed_each(qpack_session *session, const int32_t *tokens, size_t n,
                    int (*each)(void *user, size_t i, const double *logits), void *user, qpack_error *err);

/* As qpack_feed for one token, and writes the residual stream after each
 * layer to hidden[layer * hidden + i] (n_layers * hidden values; bpf and
 * emu: their Q32 values, exactly): how far each layer drifts from the
 * reference. */
int qpack_feed_hidden(qpack_session *session, int32_t token, double *hidden, qpack_error *err);

/* The embedding of tokens[0..n) (n >= 1), as sentence-transformers
 * computes Qwen3-Embedding's: the session starts over (rewound to 0), the
 * tokens are fed, and out[0..hidden) gets the final norm's output at the
 * last token (QPACK_POOLING_LAST) or its mean over the tokens (MEAN, fed a
 * token at a time), L2-normalised. QPACK_ERR_ARGUMENT for a model without
 * pooling. The caller adds what the model wants at the end (Qwen3-Embedding:
 * <|endoftext|>). The session then holds the tokens. */
int qpack_embed(qpack_session *session, const int32_t *tokens, size_t n, float *out, qpack_error *err);

/* Called from the feeding thread while a qpack_feed* computes: done of
 * total positions of this call, after each block of positions (each
 * position for ref). NULL stops the reports. */
void qpack_session_set_progress(qpack_session *session, void (*progress)(void *user, size_t done, size_t total),
                                void *user);

/* Greedy lookup decoding, exact: the next tokens are drafted from the
 * latest earlier occurrence of the text's last 4..1 tokens (the session's
 * tokens and `pending`), and one block pass computes `pending` and the
 * draft of up to max_draft tokens together; the draft's longest prefix the
 * model itself would choose greedily is kept, with the model's token after
 * it. out[0 .. *count) receives those greedy tokens (1 <= *count <=
 * max_draft + 1, out has room for max_draft + 1): the same tokens, and the
 * same logits, as *count plain steps of the argmax. Afterwards the session
 * holds pending and out[0 .. *count - 1); out[*count - 1] is the new
 * pending token, not yet fed. The draft is cut to the context's room and
 * adapts to the session's text: its length doubles (up to max_draft) after
 * a draft kept whole and falls to the part kept after one refused (none
 * after a draft refused at its first token, then 1), because a drafted
 * position costs a good part of a plain step. A continuation that runs past
 * the text repeats the period found; a rewind or copy of the session
 * starts the length afresh. QPACK_ERR_CONTEXT when not even
 * pending fits. */
int qpack_lookup_step(qpack_session *session, int32_t pending, uint32_t max_draft, int32_t *out, uint32_t *count,
                      qpack_error *err);

/* One session's part of a batch: its next tokens[0..n), n >= 1. */
typedef struct qpack_batch_item {
    qpack_session *session;
    const int32_t *tokens;
    size_t n;
} qpack_batch_item;

/* Feeds several sessions of one model at once: as qpack_feed on each
 * item's session, but in shared blocks of positions, so that each weight
 * is read once for the positions of every session in the block (bpf and
 * emu: a block of several sessions costs less than a step of each; the
 * reference feeds them one after another). Afterwards each session's
 * logits are those after its last token, the same bits qpack_feed alone
 * gives them, whatever else shares the batch and however it is cut into
 * blocks. A session appears at most once and every session must be of the
 * same model. Every item is checked before any compute (ids, context:
 * QPACK_ERR_ARGUMENT or QPACK_ERR_CONTEXT naming the item); a batch that
 * fails or is interrupted (qpack_session_interrupt of any of its sessions)
 * leaves every session as it was (on bpf and emu; the reference's items
 * before a failure stay fed). Batches and single feeds of one model run
 * one at a time, in any mix; a batch's kernel statistics count in each of
 * its sessions (qpack_session_get_stats). */
int qpack_feed_batch(const qpack_batch_item *items, size_t n, qpack_error *err);

/* One session's lookup step in a batch: qpack_lookup_step's arguments,
 * and its result in count. */
typedef struct qpack_lookup_item {
    qpack_session *session;
    int32_t pending;            /* the token to feed, not yet fed */
    uint32_t max_draft;
    int32_t *out;               /* room for max_draft + 1 tokens */
    uint32_t count;             /* set by the call: the greedy tokens in out */
    uint32_t drafted;           /* set by the call: the draft's tokens computed beside pending */
} qpack_lookup_item;

/* One step of several sessions: the feeds as qpack_feed_batch, and for each
 * lookup item a qpack_lookup_step (its pending token and draft), all in
 * shared blocks of positions. Each session gets the bits it gets alone:
 * a fed session's logits are qpack_feed's, a lookup item's tokens, count
 * and logits are qpack_lookup_step's (so those of plain greedy steps).
 * The checks, the failure and interruption rules and the statistics are
 * qpack_feed_batch's; a session appears once in both lists together.
 * qpack_feed_batch(items, n) is qpack_step_batch(items, n, NULL, 0); either
 * list may be empty, not both. */
int qpack_step_batch(const qpack_batch_item *feeds, size_t n_feeds, qpack_lookup_item *lookups, size_t n_lookups,
                     qpack_error *err);

/* Makes a running qpack_feed of this session return QPACK_ERR_INTERRUPTED
 * within one kernel invocation (milliseconds; one position for the
 * reference), and a qpack_lookup_step, qpack_feed_batch or qpack_step_batch
 * holding it likewise. Async-signal-safe
 * and callable from any thread; the next qpack_feed clears it. */
void qpack_session_interrupt(qpack_session *session);

typedef struct qpack_kernel_stats {
    char name[24];              /* "matvec_i4", "attention", ... */
    uint64_t calls;
    double ms;                  /* time inside it, summed over the threads */
} qpack_kernel_stats;

/* Kernel statistics of everything the session ran. */
typedef struct qpack_session_stats {
    uint64_t calls;             /* kernel invocations (bpf: BPF program runs; emu: calls of
                                   their host twin; 0 for ref); one that call_us paused counts
                                   once, its further runs in paused_calls */
    uint64_t slow_calls;        /* invocations over 10 ms */
    uint64_t paused_calls;      /* program runs that reached call_us and left the rest of their
                                   invocation to another run */
    double max_call_ms;         /* the longest one */
    char max_call_kernel[32];   /* and its kernel */
    double feed_ms;             /* time inside qpack_feed*, qpack_lookup_step and qpack_step_batch */
    uint64_t tokens;            /* tokens fed */
    uint32_t n_kernels;         /* kernels[0 .. n_kernels): the kernels called, in the */
    qpack_kernel_stats kernels[QPACK_KERNELS_MAX];   /* engine's order (0 for ref) */
    uint64_t lookup_passes;     /* lookup steps (alone or in a batch): block passes, */
    uint64_t lookup_drafted, lookup_kept;   /* draft tokens proposed, and kept */
    /* bpf: the programs' own run time as the kernel clocks it, from start
     * to end (a call's time above also counts the system call around the
     * run and any wait for the core before or after it; a preemption
     * inside the run counts in both); 0 for emu and ref */
    double max_run_ms;          /* the longest program run */
    char max_run_kernel[32];    /* and its kernel */
    uint64_t slow_runs;         /* program runs over 10 ms */
} qpack_session_stats;

void qpack_session_get_stats(const qpack_session *session, qpack_session_stats *stats);

/* ---- sampling ------------------------------------------------------------ */

typedef struct qpack_sampler qpack_sampler;

/* A fixed amount added to one token's logit before sampling (OpenAI's
 * logit_bias): -100 bans it in effect, +100 all but forces it. */
typedef struct qpack_logit_bias {
    int32_t token;
    double bias;                /* -100 .. 100 */
} qpack_logit_bias;

typedef struct qpack_sampler_params {
    double temperature;         /* 0: greedy (the argmax after the biases and penalties;
                                   top_k, top_p, min_p and seed ignored) */
    uint32_t top_k;             /* keep the k most likely; 0: all */
    double top_p;               /* keep the smallest set with probability >= p; 1: all */
    double min_p;               /* drop tokens below min_p times the most likely; 0: none */
    double repeat_penalty;      /* llama.cpp's: logits of recent tokens divided (positive)
                                   or multiplied (negative) by it; 1: none */
    uint32_t repeat_last_n;     /* recent = the session's last n tokens; 0: none */
    double presence_penalty;    /* OpenAI's, -2 .. 2: subtracted from the logit of every token
                                   among the recent ones; 0: none */
    double frequency_penalty;   /* OpenAI's, -2 .. 2: subtracted once per time a token occurs
                                   among the recent ones; 0: none */
    const qpack_logit_bias *logit_bias;   /* n_logit_bias of them, added to the logits first
                                             (copied by qpack_sampler_new); NULL: none */
    size_t n_logit_bias;
    uint64_t seed;
    /* A constraint on the next token (structured output): a token for which
     * allow(allow_user, token) is false is never picked, whatever its logit;
     * the constraint must allow at least one. It is asked about every token
     * at each qpack_sample. NULL: every token may be picked. */
    bool (*allow)(void *allow_user, int32_t token);
    void *allow_user;
} qpack_sampler_params;

qpack_sampler_params qpack_sampler_default_params(void);   /* greedy, seed 1 */

/* The sampling the model's authors recommend, from the checkpoint's
 * generation_config.json (which qpack pack keeps): true with temperature,
 * top_k, top_p, min_p and repeat_penalty of *params set (the rest left as
 * they are), false when the model has none (*params untouched). do_sample
 * false gives greedy (temperature 0). Without thinking, a file holding
 * Qwen3's thinking values (temperature 0.6, top_p 0.95, top_k 20) gives the
 * model card's non-thinking ones instead (0.7, 0.8, 20). */
bool qpack_model_sampling(const qpack_model *model, bool thinking, qpack_sampler_params *params);

int qpack_sampler_new(qpack_sampler **sampler, const qpack_model *model, const qpack_sampler_params *params,
                      qpack_error *err);
void qpack_sampler_free(qpack_sampler *sampler);

/* The next token from the session's logits (and its recent tokens for the
 * repeat penalty); -1 before any feed. */
int32_t qpack_sample(qpack_sampler *sampler, const qpack_session *session);

/* ---- tokens and text ----------------------------------------------------- */

typedef struct qpack_tokenizer qpack_tokenizer;

/* The tokenizer the container carries (NULL when none): owned by the model. */
const qpack_tokenizer *qpack_model_tokenizer(const qpack_model *model);

/* The tokenizer a model carries, without loading the model: a container's
 * tokenizer section, or a checkpoint folder's tokenizer.json or a GGUF's
 * tokenizer (backend QPACK_BACKEND_REF). QPACK_OK with *tokenizer NULL when it carries none;
 * QPACK_ERR_FORMAT when it carries one that does not load. */
int qpack_tokenizer_load_model(qpack_tokenizer **tokenizer, const char *path, qpack_backend backend,
                               qpack_error *err);

/* A tokenizer from a tokenizer.json file. */
int qpack_tokenizer_load(qpack_tokenizer **tokenizer, const char *path, qpack_error *err);
void qpack_tokenizer_free(qpack_tokenizer *tokenizer);

/* The byte offset of the first byte of text[0..len) that is not
 * well-formed UTF-8, or len when all of it is; *why (may be NULL) gets a
 * short reason ("unexpected continuation byte", ...). For checking text
 * before qpack_tokenize, which refuses it. */
size_t qpack_utf8_check(const char *text, size_t len, const char **why);

/* Ids of text[0..len), well-formed UTF-8 (special tokens written in the
 * text become their ids). *ids is malloc'd. Thread-safe. */
int qpack_tokenize(const qpack_tokenizer *tokenizer, const char *text, size_t len, int32_t **ids,
                   size_t *n, qpack_error *err);

/* Text of ids[0..n), NUL-terminated (*len without it); ill-formed UTF-8
 * becomes U+FFFD. Ids without a token (a model's padding ids) give no text. */
int qpack_detokenize(const qpack_tokenizer *tokenizer, const int32_t *ids, size_t n, bool skip_special,
                     char **text, size_t *len, qpack_error *err);

/* The bytes token id stands for (*len of them, not NUL-terminated: a
 * byte-level token may hold part of a UTF-8 character), as
 * qpack_detokenize joins them; NULL for an id without a token. */
const char *qpack_token_bytes(const qpack_tokenizer *tokenizer, int32_t id, size_t *len);

/* Tokens that end a reply: <|im_end|> and <|endoftext|> when the tokenizer
 * has them, the model's eos, and the eos ids of its generation config. */
bool qpack_token_is_end(const qpack_model *model, int32_t id);

typedef struct qpack_decoder qpack_decoder;

/* A streaming detokenizer: only whole characters come out. */
int qpack_decoder_new(qpack_decoder **decoder, const qpack_tokenizer *tokenizer, bool skip_special,
                      qpack_error *err);
void qpack_decoder_free(qpack_decoder *decoder);

/* The text token id completes (maybe ""), valid until the next call. */
const char *qpack_decoder_push(qpack_decoder *decoder, int32_t id, size_t *len);

/* The end: a held incomplete character becomes U+FFFD (with replace) or is
 * dropped; returns what is left, valid until the next call. The decoder
 * can then start a new text. */
const char *qpack_decoder_finish(qpack_decoder *decoder, bool replace, size_t *len);

/* ---- chat ---------------------------------------------------------------- */

/* A call an assistant turn made, as the template writes it back. */
typedef struct qpack_tool_call {
    const char *name;
    const char *arguments;      /* a JSON object's text, written as given */
} qpack_tool_call;

typedef struct qpack_chat_message {
    const char *role;           /* "system", "user", "assistant" or "tool" (a tool's response) */
    const char *content;        /* NULL: empty */
    /* assistant turns only (zero otherwise): */
    const char *reasoning;      /* its thinking; NULL: a <think> block in content is */
    const qpack_tool_call *tool_calls;
    size_t n_tool_calls;
} qpack_chat_message;

/* The text Qwen3's chat template makes of msgs[0..n) followed by the
 * assistant's turn (add_generation_prompt), with thinking off unless think
 * (an empty think block, enable_thinking=false). As the template does, an
 * assistant turn before the last user query keeps only what follows its
 * think block, and one after it (a step of a tool loop) keeps its thinking.
 * *text is malloc'd. */
int qpack_chat_render(const qpack_chat_message *msgs, size_t n, bool think, char **text, size_t *len,
                      qpack_error *err);

/* The same with tools[0..n_tools) offered to the model, each the text the
 * template writes for one ("tool | tojson": transformers' JSON, ", " and
 * ": " between items, non-ASCII characters as they are), under a system
 * turn that tells the model to answer with <tool_call> blocks. */
int qpack_chat_render_tools(const qpack_chat_message *msgs, size_t n, const char *const *tools, size_t n_tools,
                            bool think, char **text, size_t *len, qpack_error *err);

/* A conversation that keeps its session goes on after a reply whose
 * generation stopped at an end token, which was not fed: the text to feed
 * next closes that reply as the template does ("<|im_end|>\n") and renders
 * msgs[0..n) as qpack_chat_render does. The session then holds what the
 * model saw, which differs from rendering the whole history again in one
 * way: the template drops earlier replies' think blocks. */
int qpack_chat_render_next(const qpack_chat_message *msgs, size_t n, bool think, char **text, size_t *len,
                           qpack_error *err);

/* ---- provenance ---------------------------------------------------------- */

typedef struct qpack_source_file {
    char name[256];             /* relative to the checkpoint folder */
    uint64_t size;
    uint64_t xxh3;              /* XXH3-64 of the whole file */
} qpack_source_file;

/* The files `qpack pack` reads from a checkpoint folder (config.json, and
 * tokenizer.json, tokenizer_config.json and model.safetensors.index.json
 * when present, then every safetensors file), or of a GGUF file (its
 * parts), each hashed: what a container's provenance records of its
 * source. *files is malloc'd. */
int qpack_checkpoint_sources(const char *folder, qpack_source_file **files, size_t *n, qpack_error *err);

/* The source files a container's provenance records (*n 0 when it records
 * none). *files is malloc'd. */
int qpack_container_sources(const char *path, qpack_source_file **files, size_t *n, qpack_error *err);

/* Inference from a packet (docs/LISTEN.md): a model opened with
 * schedule QPACK_SCHEDULE_KERNEL answers UDP requests on an interface
 * entirely in the kernel: an XDP program takes each packet (token ids
 * in), the kernel schedule runs the steps of a greedy continuation, and
 * the tokens leave on the client's poll, turned round by XDP. The
 * listener holds every session of the model (none may be open; for a
 * loaded model, pin:NAME, every slot of its owner table, so no other
 * process steps it) until qpack_listen_close. */
typedef struct qpack_listen qpack_listen;

typedef struct qpack_listen_params {
    const char *dev;            /* the interface; NULL: "lo" (generic XDP there, native elsewhere) */
    uint16_t port;              /* the UDP port (1..65535) */
} qpack_listen_params;

typedef struct qpack_listen_stats {
    uint32_t requests;          /* step requests accepted */
    uint32_t answered;          /* ... whose tokens (or failure) are there */
    uint32_t lanes;             /* lanes a request's steps run on: 2 when the step packet starts the
                                   second on the other CPU (the model's lane_start "xdp"), else 1 */
    uint32_t joined;            /* steps the second lane joined */
} qpack_listen_stats;

int qpack_listen_open(qpack_listen **out, qpack_model *m, const qpack_listen_params *p, qpack_error *err);
void qpack_listen_get_stats(const qpack_listen *l, qpack_listen_stats *out);
/* Detaches the XDP program (a request that runs is waited for) and gives
 * the sessions back. */
void qpack_listen_close(qpack_listen *l);

#ifdef __cplusplus
}
#endif

#endif
