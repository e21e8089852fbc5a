/* session.c - qpack_session: a token sequence with its own KV cache on
 * a shared model: a slot of the engine's KV cache maps (bpf, emu) or a
 * reference of its own. Steps of all sessions run one at a time on the
 * model's engine (its two threads already share every step); switching
 * from one session to another costs nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "qmath.h"
#include "clock.h"

/* how often a session waiting for a loaded model's slot looks again */
#define SLOT_POLL_NS 20000000L

/* Claims a slot of a loaded model in its owner table, across processes,
 * waiting params.session_wait_ms at most for one to be freed. */
static bool claim_pinned_slot(qpack_model *m, uint32_t *slot, qpack_error *err)
{
    double until = qp_now_ms() + m->params.session_wait_ms;
    qp_err e = {{0}};
    for (;;) {
        pthread_mutex_lock(&m->sessions_mu);
        bool found = qp_pin_claim(m->engine.pin, slot, &e) == 0;
        if (found) {
            m->slot_taken[*slot] = true;
            m->n_sessions++;
        }
        pthread_mutex_unlock(&m->sessions_mu);
        if (found)
            return true;
        if (e.code != QP_E_BUSY || qp_now_ms() >= until)
            break;
        nanosleep(&(struct timespec){.tv_nsec = SLOT_POLL_NS}, NULL);
    }
    qp_lib_error(err, &e, QPACK_ERR_BUSY);
    return false;
}

/* Takes a free KV cache slot of the model into *slot; false when every
 * one is taken. */
static bool take_slot(qpack_model *m, uint32_t *slot, qpack_error *err)
{
    if (m->engine.pin)
        return claim_pinned_slot(m, slot, err);
    bool found = false;
    pthread_mutex_lock(&m->sessions_mu);
    for (uint32_t i = 0; i < m->info.max_sessions && !found; i++)
        if (!m->slot_taken[i]) {
            m->slot_taken[i] = found = true;
            *slot = i;
            m->n_sessions++;
        }
    pthread_mutex_unlock(&m->sessions_mu);
    return found;
}

static void give_slot(qpack_model *m, uint32_t slot)
{
    pthread_mutex_lock(&m->sessions_mu);
    if (m->engine.pin)
        qp_pin_release(m->engine.pin, slot);
    m->slot_taken[slot] = false;
    m->n_sessions--;
    pthread_mutex_unlock(&m->sessions_mu);
}

int qpack_session_new(qpack_session **out, qpack_model *m, qpack_error *err)
{
    *out = NULL;
    uint32_t slot;
    if (!take_slot(m, &slot, err))
        return m->engine.pin ? err ? err->code : QPACK_ERR_BUSY
                             : qp_lib_fail(err, QPACK_ERR_BUSY, "all %u sessions of the model are in use",
                                           m->info.max_sessions);
    qpack_session *s = calloc(1, sizeof *s);
    if (!s) {
        give_slot(m, slot);
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    }
    s->m = m;
    s->slot = slot;
    s->lookup_len = UINT32_MAX;             /* no draft yet: max_draft decides */
    int rc = QPACK_OK;
    if (!(s->tokens = malloc((size_t)m->info.ctx * sizeof *s->tokens)) ||
        !(s->logits = malloc((size_t)m->info.vocab * sizeof *s->logits)))
        rc = qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    if (!rc && m->params.backend == QPACK_BACKEND_REF) {
        qp_err e = {{0}};
        if (ref_open(&s->ref, m->path, m->info.ctx, &e))
            rc = qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    }
    if (rc) {
        qpack_session_free(s);
        return rc;
    }
    *out = s;
    return QPACK_OK;
}

/* A freed slot's cache keeps its stale rows: the next session there
 * starts at position 0 and overwrites each row before attention reads it. */
void qpack_session_free(qpack_session *s)
{
    if (!s)
        return;
    give_slot(s->m, s->slot);
    ref_close(s->ref);
    free(s->tokens);
    free(s->logits);
    free(s);
}

uint32_t qpack_session_pos(const qpack_session *s)
{
    return s->pos;
}

const int32_t *qpack_session_tokens(const qpack_session *s)
{
    return s->tokens;
}

int qpack_session_rewind(qpack_session *s, uint32_t pos, qpack_error *err)
{
    if (pos > s->pos)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "cannot rewind to position %u: the session holds %u tokens",
                           pos, s->pos);
    s->pos = pos;
    s->have_logits = false;
    s->lookup_len = UINT32_MAX;         /* the next text drafts afresh */
    return QPACK_OK;
}

int qpack_session_copy(qpack_session *dst, const qpack_session *src, uint32_t pos, qpack_error *err)
{
    qpack_model *m = dst->m;
    if (src->m != m)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "the sessions belong to different models");
    if (m->params.backend == QPACK_BACKEND_REF)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "the reference backend cannot copy a session");
    if (pos > src->pos)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "cannot copy %u positions: the session holds %u tokens", pos,
                           src->pos);
    if (dst == src)
        return qpack_session_rewind(dst, pos, err);
    qp_err e = {{0}};
    pthread_mutex_lock(&m->step_mu);    /* no step writes either cache meanwhile */
    int rc = qp_engine_copy_slot(&m->engine, dst->slot, src->slot, pos, &e);
    pthread_mutex_unlock(&m->step_mu);
    if (rc)
        return qp_lib_error(err, &e, QPACK_ERR_ARGUMENT);
    memcpy(dst->tokens, src->tokens, (size_t)pos * sizeof *dst->tokens);
    dst->pos = pos;
    dst->have_logits = pos == src->pos && src->have_logits;
    dst->lookup_len = UINT32_MAX;
    if (dst->have_logits)
        memcpy(dst->logits, src->logits, (size_t)m->info.vocab * sizeof *dst->logits);
    return QPACK_OK;
}

void qpack_session_interrupt(qpack_session *s)
{
    atomic_store(&s->interrupt, true);
    if (atomic_load(&s->in_batch))
        atomic_store(&s->m->batch_interrupt, true);
}

void qpack_session_set_progress(qpack_session *s, void (*progress)(void *user, size_t done, size_t total),
                                void *user)
{
    s->progress = progress;
    s->progress_user = user;
}

static void report_progress(const qpack_session *s, size_t done, size_t total)
{
    if (s->progress)
        s->progress(s->progress_user, done, total);
}

static int32_t argmax_of(const double *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return (int32_t)best;
}

/* --- the reference: one position at a time, its own cache per session --- */

static int run_reference(qpack_session *s, const struct qp_lib_feed *req, qp_err *err)
{
    const qpack_model_info *info = &s->m->info;
    for (size_t i = 0; i < req->n; i++) {
        if (atomic_load(&s->interrupt))
            return qp_fail_code(err, QP_E_INTERRUPTED, "interrupted");
        if (ref_forward(s->ref, (uint32_t)req->tokens[i], s->pos, s->logits, err))
            return -1;
        s->tokens[s->pos++] = req->tokens[i];
        if (req->all)
            for (uint32_t v = 0; v < info->vocab; v++)
                req->all[i * info->vocab + v] = (float)s->logits[v];
        for (uint32_t l = 0; req->hidden && l < info->n_layers; l++)
            memcpy(req->hidden + (size_t)l * info->hidden, ref_hidden_after(s->ref, l),
                   info->hidden * sizeof *req->hidden);
        if (req->on_position &&
            req->on_position(req->arg, i, s->logits, argmax_of(s->logits, info->vocab), err))
            return -1;
        report_progress(s, i + 1, req->n);
    }
    return 0;
}

/* --- bpf and emu: blocks of positions on the model's engine ------------ */

struct row_sink {
    const struct qp_engine *e;
    const struct qp_lib_feed *req;
    uint32_t pos0;              /* the position of req->tokens[0] */
};

/* qp_engine_feed's callback: position pos's logits, row pos - pos0 */
static int take_row(void *arg, uint32_t pos, qp_err *err)
{
    struct row_sink *k = arg;
    size_t i = pos - k->pos0;
    if (k->req->all) {
        float *row = k->req->all + i * k->e->vocab;
        for (uint32_t v = 0; v < k->e->vocab; v++)
            row[v] = (float)k->e->logits[v];
    }
    return k->req->on_position ? k->req->on_position(k->req->arg, i, k->e->logits, (int32_t)k->e->argmax, err) : 0;
}

struct layer_sink {
    const struct qp_engine *e;
    double *hidden;             /* [n_layers][hidden] */
};

/* after each layer: entry 0's residual (the only position), Q32 */
static void take_layer(void *arg, uint32_t layer)
{
    struct layer_sink *k = arg;
    const int64_t *h = k->e->b->h;
    double *dst = k->hidden + (size_t)layer * k->e->hidden;
    for (uint32_t i = 0; i < k->e->hidden; i++)
        dst[i] = ldexp((double)h[i], -QM_RESID_FRAC);
}

/* req's tokens a block at a time (the progress comes between blocks); only
 * the last block computes logits unless every position's are asked for */
static int run_blocks(qpack_session *s, const struct qp_lib_feed *req, qp_err *err)
{
    struct qp_engine *e = &s->m->engine;
    struct row_sink sink = {e, req, s->pos};
    bool each = req->all || req->on_position;
    size_t block = qp_forward_block_size(e->fw);
    for (size_t at = 0; at < req->n; at += block) {
        uint32_t len = (uint32_t)(req->n - at < block ? req->n - at : block);
        enum qp_logits want = each ? QP_LOGITS_ALL : at + len == req->n ? QP_LOGITS_LAST : QP_LOGITS_NONE;
        if (qp_engine_feed(e, s->slot, (const uint32_t *)req->tokens + at, len, s->pos + (uint32_t)at,
                                 want, each ? take_row : NULL, &sink, NULL, err))
            return -1;
        report_progress(s, at + len, req->n);
    }
    return 0;
}

static int run_engine(qpack_session *s, const struct qp_lib_feed *req, qp_err *err)
{
    struct qp_engine *e = &s->m->engine;
    struct layer_sink layers = {e, req->hidden};
    if (req->hidden)
        qp_forward_on_layer(e->fw, take_layer, &layers);
    int rc = run_blocks(s, req, err);
    if (req->hidden)
        qp_forward_on_layer(e->fw, NULL, NULL);
    if (rc)
        return -1;
    memcpy(s->tokens + s->pos, req->tokens, req->n * sizeof *req->tokens);
    s->pos += (uint32_t)req->n;
    memcpy(s->logits, e->logits, (size_t)s->m->info.vocab * sizeof *s->logits);
    return 0;
}

static int run_tokens(qpack_session *s, const struct qp_lib_feed *req, qp_err *err)
{
    return s->ref ? run_reference(s, req, err) : run_engine(s, req, err);
}

/* Checks before any compute: the ids against the vocabulary, the count
 * against the context. */
int qp_lib_check_feed(const qpack_session *s, const int32_t *tokens, size_t n, qpack_error *err)
{
    const qpack_model_info *i = &s->m->info;
    for (size_t k = 0; k < n; k++)
        if (tokens[k] < 0 || (uint32_t)tokens[k] >= i->vocab)
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "token id %d is outside the vocabulary (0 to %u)",
                               tokens[k], i->vocab - 1);
    if ((uint64_t)s->pos + n > i->ctx)
        return qp_lib_fail(err, QPACK_ERR_CONTEXT,
                           "%zu more tokens do not fit: the session holds %u of its context of %u", n, s->pos,
                           i->ctx);
    return QPACK_OK;
}

void qp_lib_add_call_stats(qpack_session *s, const struct qp_forward_stats *before,
                           const struct qp_forward_stats *after)
{
    qpack_session_stats *st = &s->stats;
    st->calls += after->calls - before->calls;
    st->slow_calls += after->slow_calls - before->slow_calls;
    st->paused_calls += after->paused_calls - before->paused_calls;
    st->slow_runs += after->slow_progs - before->slow_progs;
    if (after->max_prog_ms > st->max_run_ms && after->max_prog_ms > before->max_prog_ms) {
        st->max_run_ms = after->max_prog_ms;
        memcpy(st->max_run_kernel, after->max_prog_kernel, sizeof st->max_run_kernel);
    }
    if (after->max_call_ms > st->max_call_ms && after->max_call_ms > before->max_call_ms) {
        st->max_call_ms = after->max_call_ms;
        memcpy(st->max_call_kernel, after->max_call_kernel, sizeof st->max_call_kernel);
    }
    _Static_assert(QP_K_COUNT <= QPACK_KERNELS_MAX, "every kernel has its entry");
    for (int k = 0; k < QP_K_COUNT; k++) {
        uint64_t calls = after->kernel_calls[k] - before->kernel_calls[k];
        if (!calls)
            continue;
        const char *name = qp_kernel_name(k);
        uint32_t i = 0;
        while (i < st->n_kernels && strcmp(st->kernels[i].name, name))
            i++;
        if (i == st->n_kernels)
            snprintf(st->kernels[st->n_kernels++].name, sizeof st->kernels[i].name, "%s", name);
        st->kernels[i].calls += calls;
        st->kernels[i].ms += after->kernel_ms[k] - before->kernel_ms[k];
    }
}

int qp_lib_feed(qpack_session *s, const struct qp_lib_feed *req, qpack_error *err)
{
    int rc = qp_lib_check_feed(s, req->tokens, req->n, err);
    if (rc)
        return rc;
    atomic_store(&s->interrupt, false);
    qpack_model *m = s->m;
    double t0 = qp_now_ms();
    qp_err e = {{0}};
    pthread_mutex_lock(&m->step_mu);
    struct qp_forward_stats before = {0};
    if (m->engine.fw) {
        before = *qp_forward_stats(m->engine.fw);
        qp_forward_set_interrupt(m->engine.fw, &s->interrupt);
    }
    int bad = req->n > 0 && run_tokens(s, req, &e);
    if (!bad) {
        s->have_logits = s->have_logits || req->n > 0;
        s->stats.tokens += req->n;
    }
    if (m->engine.fw) {
        qp_lib_add_call_stats(s, &before, qp_forward_stats(m->engine.fw));
        qp_forward_set_interrupt(m->engine.fw, NULL);
    }
    pthread_mutex_unlock(&m->step_mu);
    s->stats.feed_ms += qp_now_ms() - t0;
    return bad ? qp_lib_error(err, &e, QPACK_ERR_INTERNAL) : QPACK_OK;
}

int qpack_feed(qpack_session *s, const int32_t *tokens, size_t n, qpack_error *err)
{
    return qp_lib_feed(s, &(struct qp_lib_feed){.tokens = tokens, .n = n}, err);
}

int qpack_feed_all_logits(qpack_session *s, const int32_t *tokens, size_t n, float *logits, qpack_error *err)
{
    if (!logits)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no logits buffer");
    return qp_lib_feed(s, &(struct qp_lib_feed){.tokens = tokens, .n = n, .all = logits}, err);
}

struct each_call {
    int (*each)(void *user, size_t i, const double *logits);
    void *user;
};

static int call_each(void *arg, size_t i, const double *logits, int32_t argmax, qp_err *err)
{
    (void)argmax;
    struct each_call *c = arg;
    return c->each(c->user, i, logits) ? qp_fail_code(err, QP_E_INTERRUPTED, "stopped by the caller") : 0;
}

int qpack_feed_each(qpack_session *s, const int32_t *tokens, size_t n,
                    int (*each)(void *user, size_t i, const double *logits), void *user, qpack_error *err)
{
    if (!each)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no function for the logits");
    struct each_call c = {each, user};
    return qp_lib_feed(s, &(struct qp_lib_feed){.tokens = tokens, .n = n, .on_position = call_each, .arg = &c},
                       err);
}

int qpack_feed_hidden(qpack_session *s, int32_t token, double *hidden, qpack_error *err)
{
    if (!hidden)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no buffer for the hidden states");
    return qp_lib_feed(s, &(struct qp_lib_feed){.tokens = &token, .n = 1, .hidden = hidden}, err);
}

const double *qpack_logits(const qpack_session *s)
{
    return s->have_logits ? s->logits : NULL;
}

int32_t qpack_argmax(const qpack_session *s)
{
    return s->have_logits ? argmax_of(s->logits, s->m->info.vocab) : -1;
}

void qpack_session_get_stats(const qpack_session *s, qpack_session_stats *out)
{
    *out = s->stats;
}
