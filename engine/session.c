/* session.c - opening a model for any backend and stepping it. */
#include "session.h"

#include "memory.h"
#include "clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

const char *qp_backend_kind_name(enum qp_backend_kind k)
{
    return k == QP_BACKEND_BPF ? "bpf" : k == QP_BACKEND_EMU ? "emu" : "ref";
}

static uint32_t pick_ctx(uint32_t asked, uint32_t max_positions)
{
    if (asked)
        return asked;
    return max_positions < QP_DEFAULT_CTX ? max_positions : QP_DEFAULT_CTX;
}

/* QP_BLOCK=N sets the block size when the caller leaves it open: for
 * benchmarks that compare block sizes (scripts/bench_prompt.sh) */
static uint32_t pick_block(uint32_t asked)
{
    const char *env = getenv("QP_BLOCK");
    if (asked)
        return asked;
    return env && atoi(env) > 0 ? (uint32_t)atoi(env) : QP_BLOCK_DEFAULT;
}

static void checksum_progress(void *arg, uint64_t done, uint64_t total)
{
    const struct qp_session_opts *o = arg;
    o->progress(o->progress_user, QP_LOAD_CHECKSUMS, done, total);
}

static void report(const struct qp_session_opts *o, int phase, uint64_t done, uint64_t total)
{
    if (o->progress)
        o->progress(o->progress_user, phase, done, total);
}

/* The context (the asked one, or the default rule's for this host's
 * memory) and the check that the maps fit, before the checksum pass and
 * before any map exists: a model too big for the host is refused at once,
 * with the figures (memory.h). */
static int size_for_memory(struct qp_session *s, const struct qp_session_opts *o, uint32_t slots, uint32_t block,
                           qp_err *err)
{
    bool bpf = o->backend == QP_BACKEND_BPF;
    uint64_t avail;
    if (qp_mem_available(&avail, err))
        return -1;
    s->ctx = o->ctx ? o->ctx : qp_mem_default_ctx(&s->file, slots, block, o->stream, bpf, avail);
    if (qp_plan_layout(&s->plan, &s->file, s->ctx, slots, block, o->stream, err))
        return -1;
    return qp_mem_check(&s->plan, bpf, avail, err);
}

static int open_container(struct qp_session *s, const struct qp_session_opts *o, qp_err *err)
{
    double t0 = qp_now_ms();
    if (qpk_open(&s->file, o->model, 0, err))
        return -1;
    s->file_open = true;
    uint32_t slots = o->slots ? o->slots : 1, block = pick_block(o->block);
    if (size_for_memory(s, o, slots, block, err))
        return -1;
    if (!o->no_verify &&
        qpk_verify_all_progress(&s->file, o->progress ? checksum_progress : NULL, (void *)o, err))
        return -1;
    s->checksum_ms = o->no_verify ? 0 : qp_now_ms() - t0;
    const struct qpk_config *c = &s->file.cfg;
    s->vocab = c->vocab;
    s->hidden = c->hidden;
    s->n_layers = c->n_layers;
    if (qp_plan_build(&s->plan, &s->file, s->ctx, slots, block, o->stream, err))
        return -1;
    report(o, QP_LOAD_MAPS, 0, s->plan.weight_bytes);
    int rc = o->backend == QP_BACKEND_BPF ? qp_bpf_create(&s->b, &s->plan, err)
                                          : qp_emu_create(&s->b, &s->plan, err);
    if (!rc)
        report(o, QP_LOAD_WEIGHTS, s->plan.weight_bytes, s->plan.weight_bytes);
    /* the BPF maps hold their own copy: the container's pages the plan read
     * leave this process (the host twin keeps reading them) */
    if (!rc && o->backend == QP_BACKEND_BPF)
        madvise(s->file.map, s->file.size, MADV_DONTNEED);
    return rc || qp_forward_create(&s->fw, s->b, &s->plan, o->threads, err);
}

static int open_reference(struct qp_session *s, const struct qp_session_opts *o, qp_err *err)
{
    struct qwen3_config probe;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->model);
    if (hf_config_load(path, &probe, err))
        return -1;
    s->ctx = pick_ctx(o->ctx, probe.max_position_embeddings);
    if (s->ctx > probe.max_position_embeddings)
        return qp_fail(err, "context %u is past the model's %u positions", s->ctx, probe.max_position_embeddings);
    if (ref_open(&s->ref, o->model, s->ctx, err))
        return -1;
    s->vocab = probe.vocab_size;
    s->hidden = probe.hidden_size;
    s->n_layers = probe.num_hidden_layers;
    return 0;
}

int qp_session_open(struct qp_session *s, const struct qp_session_opts *o, qp_err *err)
{
    memset(s, 0, sizeof *s);
    s->kind = o->backend;
    double t0 = qp_now_ms();
    int rc = o->backend == QP_BACKEND_REF ? open_reference(s, o, err) : open_container(s, o, err);
    if (!rc) {
        s->logits = malloc((size_t)s->vocab * sizeof *s->logits);
        rc = s->logits ? 0 : qp_fail(err, "out of memory");
    }
    if (rc) {
        qp_session_close(s);
        return -1;
    }
    s->load_ms = qp_now_ms() - t0;
    return 0;
}

void qp_session_close(struct qp_session *s)
{
    qp_forward_destroy(s->fw);
    if (s->b)
        s->b->destroy(s->b);
    qp_plan_free(&s->plan);
    if (s->file_open)
        qpk_close(&s->file);
    ref_close(s->ref);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

/* the largest of the reference's logits, lowest index on ties */
static uint32_t reference_argmax(const struct qp_session *s)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < s->vocab; i++)
        if (s->logits[i] > s->logits[best])
            best = i;
    return best;
}

/* the reference: one position at a time */
static int feed_reference(struct qp_session *s, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                          enum qp_logits want, qp_session_logits_fn on_logits, void *arg, uint32_t *next,
                          qp_err *err)
{
    for (uint32_t i = 0; i < n; i++) {
        if (ref_forward(s->ref, tokens[i], pos0 + i, s->logits, err))
            return -1;
        s->argmax = reference_argmax(s);
        if (want == QP_LOGITS_ALL && on_logits && on_logits(arg, pos0 + i, err))
            return -1;
    }
    if (want != QP_LOGITS_NONE && next)
        *next = s->argmax;
    return 0;
}

/* entry b of the last block's logits -> s->logits */
static void take_logits(struct qp_session *s, uint32_t b)
{
    s->logits_q32 = qp_forward_logits(s->fw, b);
    s->argmax = qp_forward_argmax(s->fw, b);
    for (uint32_t i = 0; i < s->vocab; i++)
        s->logits[i] = ldexp((double)s->logits_q32[i], -QM_RESID_FRAC);
}

int qp_session_feed_slot(struct qp_session *s, uint32_t slot, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                         enum qp_logits want, qp_session_logits_fn on_logits, void *arg, uint32_t *next,
                         qp_err *err)
{
    if (s->kind == QP_BACKEND_REF && slot != 0)
        return qp_fail_code(err, QP_E_ARGUMENT, "the reference holds one sequence (slot 0), not slot %u", slot);
    if (s->kind == QP_BACKEND_REF)
        return feed_reference(s, tokens, n, pos0, want, on_logits, arg, next, err);
    uint32_t block = qp_forward_block_size(s->fw);
    for (uint32_t at = 0; at < n; at += block) {
        uint32_t len = n - at < block ? n - at : block;
        bool last_block = at + len == n;
        enum qp_logits mode = want == QP_LOGITS_ALL ? QP_LOGITS_ALL
                              : want == QP_LOGITS_LAST && last_block ? QP_LOGITS_LAST : QP_LOGITS_NONE;
        if (qp_forward_block(s->fw, slot, tokens + at, len, pos0 + at, mode, err))
            return -1;
        for (uint32_t b = 0; mode == QP_LOGITS_ALL && b < len; b++) {
            take_logits(s, b);
            if (on_logits && on_logits(arg, pos0 + at + b, err))
                return -1;
        }
        if (mode == QP_LOGITS_LAST)
            take_logits(s, len - 1);
        if (mode != QP_LOGITS_NONE && last_block && next)
            *next = qp_forward_argmax(s->fw, len - 1);
    }
    return 0;
}

int qp_session_feed(struct qp_session *s, const uint32_t *tokens, uint32_t n, uint32_t pos0, enum qp_logits want,
                    qp_session_logits_fn on_logits, void *arg, uint32_t *next, qp_err *err)
{
    return qp_session_feed_slot(s, 0, tokens, n, pos0, want, on_logits, arg, next, err);
}

int qp_session_step(struct qp_session *s, uint32_t token, uint32_t pos, bool want_logits, uint32_t *next,
                    qp_err *err)
{
    return qp_session_feed(s, &token, 1, pos, want_logits ? QP_LOGITS_LAST : QP_LOGITS_NONE, NULL, NULL, next, err);
}
