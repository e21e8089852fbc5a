/* batch.c - qpack_feed_batch: the next tokens of several sessions computed
 * together, in blocks that hold positions of every session, so that each
 * weight is read once for all of them (engine.h, qp_engine_feed_batch). A
 * session's last position is the one whose logits it keeps; the rest of
 * its positions only fill its KV cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "internal.h"
#include "qmath.h"

struct batch {
    const qpack_batch_item *items;
    size_t n;
    uint32_t *item_of;          /* [entries]: the item an entry belongs to */
    double *logits;             /* [n][vocab]: each item's last logits, kept until the batch succeeds */
    uint32_t vocab;
};

/* an item's last entry: its logits, converted as qpack_logits gives them */
static int take_logits(void *arg, uint32_t index, const int64_t *q32, uint32_t argmax, qp_err *err)
{
    (void)argmax, (void)err;
    struct batch *b = arg;
    double *dst = b->logits + (size_t)b->item_of[index] * b->vocab;
    for (uint32_t v = 0; v < b->vocab; v++)
        dst[v] = ldexp((double)q32[v], -QM_RESID_FRAC);
    return 0;
}

/* Every item checked before any compute: one model, each session once,
 * some tokens, ids and context. */
static int check_items(const qpack_batch_item *items, size_t n, qpack_error *err)
{
    if (!items || n == 0)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "an empty batch");
    for (size_t i = 0; i < n; i++) {
        const qpack_session *s = items[i].session;
        if (!s || !items[i].tokens || items[i].n == 0)
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "batch item %zu: no session or no tokens", i);
        if (s->m != items[0].session->m)
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "batch item %zu: a session of another model", i);
        for (size_t k = 0; k < i; k++)
            if (items[k].session == s)
                return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "batch item %zu: the session of item %zu again", i, k);
        qpack_error why;
        int rc = qp_lib_check_feed(s, items[i].tokens, items[i].n, &why);
        if (rc)
            return qp_lib_fail(err, rc, "batch item %zu: %s", i, why.message);
    }
    return QPACK_OK;
}

/* the engine's entries of every item, in item order; an item's last token
 * is the one whose logits are wanted */
static int run_entries(qpack_model *m, struct batch *b, qp_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < b->n; i++)
        total += b->items[i].n;
    struct qp_entry *ent = malloc(total * sizeof *ent);
    bool *want = malloc(total * sizeof *want);
    b->item_of = malloc(total * sizeof *b->item_of);
    int rc = -1;
    if (!ent || !want || !b->item_of) {
        qp_fail_code(err, QP_E_MEMORY, "out of memory");
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++) {
        const qpack_batch_item *it = &b->items[i];
        for (size_t t = 0; t < it->n; t++, k++) {
            ent[k] = (struct qp_entry){.token = (uint32_t)it->tokens[t], .slot = it->session->slot,
                                       .pos = it->session->pos + (uint32_t)t};
            want[k] = t + 1 == it->n;
            b->item_of[k] = (uint32_t)i;
        }
    }
    rc = qp_engine_feed_batch(&m->engine, ent, want, (uint32_t)total, take_logits, b, err);
out:
    free(ent);
    free(want);
    return rc;
}

/* the reference keeps a cache per session: one feed after another */
static int run_reference(const qpack_batch_item *items, size_t n, qpack_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = qpack_feed(items[i].session, items[i].tokens, items[i].n, err);
        if (rc)
            return rc;
    }
    return QPACK_OK;
}

/* the batch succeeded: every session holds its tokens and its logits */
static void commit(struct batch *b, double ms)
{
    for (size_t i = 0; i < b->n; i++) {
        qpack_session *s = b->items[i].session;
        memcpy(s->tokens + s->pos, b->items[i].tokens, b->items[i].n * sizeof *s->tokens);
        s->pos += (uint32_t)b->items[i].n;
        memcpy(s->logits, b->logits + i * b->vocab, b->vocab * sizeof *s->logits);
        s->have_logits = true;
        s->stats.tokens += b->items[i].n;
        s->stats.feed_ms += ms;
    }
}

int qpack_feed_batch(const qpack_batch_item *items, size_t n, qpack_error *err)
{
    int rc = check_items(items, n, err);
    if (rc)
        return rc;
    qpack_model *m = items[0].session->m;
    if (m->params.backend == QPACK_BACKEND_REF)
        return run_reference(items, n, err);
    struct batch b = {.items = items, .n = n, .vocab = m->info.vocab};
    if (!(b.logits = malloc(n * (size_t)b.vocab * sizeof *b.logits)))
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    double t0 = qp_now_ms();
    pthread_mutex_lock(&m->step_mu);
    atomic_store(&m->batch_interrupt, false);
    for (size_t i = 0; i < n; i++) {
        atomic_store(&items[i].session->interrupt, false);
        atomic_store(&items[i].session->in_batch, true);
    }
    struct qp_forward_stats before = *qp_forward_stats(m->engine.fw);
    qp_forward_set_interrupt(m->engine.fw, &m->batch_interrupt);
    qp_err e = {{0}};
    bool bad = run_entries(m, &b, &e) != 0;
    qp_forward_set_interrupt(m->engine.fw, NULL);
    const struct qp_forward_stats *after = qp_forward_stats(m->engine.fw);
    for (size_t i = 0; i < n; i++) {
        atomic_store(&items[i].session->in_batch, false);
        qp_lib_add_call_stats(items[i].session, &before, after);
    }
    if (!bad)
        commit(&b, qp_now_ms() - t0);
    pthread_mutex_unlock(&m->step_mu);
    free(b.logits);
    free(b.item_of);
    return bad ? qp_lib_error(err, &e, QPACK_ERR_INTERNAL) : QPACK_OK;
}
