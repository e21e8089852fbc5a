/* batch.c - qpack_step_batch and qpack_feed_batch: the next tokens of
 * several sessions computed together, in blocks that hold positions of
 * every session, so that each weight is read once for all of them
 * (engine.h, qp_engine_feed_batch). A fed session keeps its last
 * position's logits, the rest of its positions only fill its KV cache; a
 * lookup step's positions each give a greedy choice, checked against its
 * draft in order (lookup.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "internal.h"
#include "qmath.h"

/* a session's part of the step */
struct part {
    qpack_session *s;
    const int32_t *tokens;      /* a feed's, or a lookup's block: [pending, draft...] */
    uint32_t n;
    uint32_t first;             /* its first entry in the step */
    qpack_lookup_item *lookup;  /* NULL: a feed */
    int32_t *block;             /* a lookup's tokens, owned */
    struct qp_lib_verify verify;
    double *logits;             /* [vocab]: what the session keeps, until the step succeeds */
};

struct batch {
    struct part *parts;
    size_t n;
    uint32_t *part_of;          /* [entries]: the part an entry belongs to */
    uint32_t vocab;
};

static void to_double(double *dst, const int64_t *q32, uint32_t n)
{
    for (uint32_t v = 0; v < n; v++)
        dst[v] = ldexp((double)q32[v], -QM_RESID_FRAC);
}

/* a wanted entry's logits: a feed's last, or a lookup's positions in order
 * (the engine gives an item's wanted entries in their order) */
static int take_logits(void *arg, uint32_t index, const int64_t *q32, uint32_t argmax, qp_err *err)
{
    (void)err;
    struct batch *b = arg;
    struct part *p = &b->parts[b->part_of[index]];
    if (!p->lookup || qp_lib_verify_next(&p->verify, index - p->first, (int32_t)argmax))
        to_double(p->logits, q32, b->vocab);
    return 0;
}

/* a lookup item's block, drafted before any compute */
static int draft_part(struct part *p, qpack_lookup_item *it, qpack_error *err)
{
    const qpack_model_info *info = &it->session->m->info;
    if (it->session->pos >= info->ctx)
        return qp_lib_fail(err, QPACK_ERR_CONTEXT, "the session holds all %u positions of its context", info->ctx);
    if (!it->out)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no buffer for the tokens");
    uint32_t room = it->max_draft < info->ctx ? it->max_draft : info->ctx;
    if (!(p->block = malloc(((size_t)room + 1) * sizeof *p->block)))
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    int rc = qp_lib_lookup_block(it->session, it->pending, room, p->block, &p->n, err);
    p->tokens = p->block;
    p->verify = (struct qp_lib_verify){p->block + 1, p->n - 1, it->out, 0, true};
    return rc;
}

/* The parts of every item, checked before any compute: one model, each
 * session once, some tokens, ids and context. */
static int make_parts(struct batch *b, const qpack_batch_item *feeds, size_t n_feeds, qpack_lookup_item *lookups,
                      size_t n_lookups, qpack_error *err)
{
    for (size_t i = 0; i < n_feeds + n_lookups; i++) {
        struct part *p = &b->parts[i];
        qpack_lookup_item *look = i < n_feeds ? NULL : &lookups[i - n_feeds];
        p->s = look ? look->session : feeds[i].session;
        p->lookup = look;
        const char *kind = look ? "lookup item" : "batch item";
        size_t at = look ? i - n_feeds : i;
        if (!p->s || (!look && (!feeds[i].tokens || feeds[i].n == 0)))
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "%s %zu: no session or no tokens", kind, at);
        if (p->s->m != b->parts[0].s->m)
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "%s %zu: a session of another model", kind, at);
        for (size_t k = 0; k < i; k++)
            if (b->parts[k].s == p->s)
                return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "%s %zu: a session given twice", kind, at);
        qpack_error why;
        int rc = QPACK_OK;
        if (look) {
            rc = draft_part(p, look, &why);
        } else {
            p->tokens = feeds[i].tokens;
            p->n = feeds[i].n > p->s->m->info.ctx ? p->s->m->info.ctx + 1 : (uint32_t)feeds[i].n;
        }
        if (!rc)
            rc = qp_lib_check_feed(p->s, p->tokens, look ? p->n : feeds[i].n, &why);
        if (rc)
            return qp_lib_fail(err, rc, "%s %zu: %s", kind, at, why.message);
    }
    return QPACK_OK;
}

/* the engine's entries of every part, in part order: a feed's last token
 * and every token of a lookup want their logits */
static int run_entries(qpack_model *m, struct batch *b, qp_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < b->n; i++)
        total += b->parts[i].n;
    struct qp_entry *ent = malloc(total * sizeof *ent);
    bool *want = malloc(total * sizeof *want);
    b->part_of = malloc(total * sizeof *b->part_of);
    int rc = -1;
    if (!ent || !want || !b->part_of) {
        qp_fail_code(err, QP_E_MEMORY, "out of memory");
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct part *p = &b->parts[i];
        p->first = (uint32_t)k;
        for (uint32_t t = 0; t < p->n; t++, k++) {
            ent[k] = (struct qp_entry){.token = (uint32_t)p->tokens[t], .kv_slot = p->s->slot, .pos = p->s->pos + t};
            want[k] = p->lookup || t + 1 == p->n;
            b->part_of[k] = (uint32_t)i;
        }
    }
    rc = qp_engine_feed_batch(&m->engine, ent, want, (uint32_t)total, take_logits, b, err);
out:
    free(ent);
    free(want);
    return rc;
}

/* the reference keeps a cache per session: one after another */
static int run_reference(const qpack_batch_item *feeds, size_t n_feeds, qpack_lookup_item *lookups, size_t n_lookups,
                         qpack_error *err)
{
    for (size_t i = 0; i < n_feeds; i++) {
        int rc = qpack_feed(feeds[i].session, feeds[i].tokens, feeds[i].n, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < n_lookups; i++) {
        qpack_lookup_item *it = &lookups[i];
        qpack_session_stats before, after;
        qpack_session_get_stats(it->session, &before);
        int rc = qpack_lookup_step(it->session, it->pending, it->max_draft, it->out, &it->count, err);
        if (rc)
            return rc;
        qpack_session_get_stats(it->session, &after);
        it->drafted = (uint32_t)(after.lookup_drafted - before.lookup_drafted);
    }
    return QPACK_OK;
}

/* the step succeeded: every session holds its kept tokens and their
 * logits (a lookup's refused draft leaves it) */
static void commit(struct batch *b, double ms)
{
    for (size_t i = 0; i < b->n; i++) {
        struct part *p = &b->parts[i];
        qpack_session *s = p->s;
        uint32_t kept = p->lookup ? p->verify.count : p->n;
        memcpy(s->tokens + s->pos, p->tokens, kept * sizeof *s->tokens);
        s->pos += kept;
        memcpy(s->logits, p->logits, b->vocab * sizeof *s->logits);
        s->have_logits = true;
        s->stats.tokens += kept;
        s->stats.feed_ms += ms;
        if (p->lookup) {
            p->lookup->count = kept;
            p->lookup->drafted = p->n - 1;
            qp_lib_lookup_done(s, p->n, kept);
        }
    }
}

/* the parts on the engine, under the model's step lock; the sessions'
 * interrupts stop it */
static int run_parts(qpack_model *m, struct batch *b, qpack_error *err)
{
    double t0 = qp_now_ms();
    pthread_mutex_lock(&m->step_mu);
    atomic_store(&m->batch_interrupt, false);
    for (size_t i = 0; i < b->n; i++) {
        atomic_store(&b->parts[i].s->interrupt, false);
        atomic_store(&b->parts[i].s->in_batch, true);
    }
    struct qp_forward_stats before = *qp_forward_stats(m->engine.fw);
    qp_forward_set_interrupt(m->engine.fw, &m->batch_interrupt);
    qp_err e = {{0}};
    bool bad = run_entries(m, b, &e) != 0;
    qp_forward_set_interrupt(m->engine.fw, NULL);
    const struct qp_forward_stats *after = qp_forward_stats(m->engine.fw);
    for (size_t i = 0; i < b->n; i++) {
        atomic_store(&b->parts[i].s->in_batch, false);
        qp_lib_add_call_stats(b->parts[i].s, &before, after);
    }
    if (!bad)
        commit(b, qp_now_ms() - t0);
    pthread_mutex_unlock(&m->step_mu);
    return bad ? qp_lib_error(err, &e, QPACK_ERR_INTERNAL) : QPACK_OK;
}

int qpack_step_batch(const qpack_batch_item *feeds, size_t n_feeds, qpack_lookup_item *lookups, size_t n_lookups,
                     qpack_error *err)
{
    size_t n = n_feeds + n_lookups;
    if (n == 0 || (n_feeds && !feeds) || (n_lookups && !lookups))
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "an empty batch");
    for (size_t i = 0; i < n_lookups; i++)
        lookups[i].count = lookups[i].drafted = 0;
    struct batch b = {.n = n, .parts = calloc(n, sizeof *b.parts)};
    if (!b.parts)
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    int rc = make_parts(&b, feeds, n_feeds, lookups, n_lookups, err);
    qpack_model *m = b.parts[0].s ? b.parts[0].s->m : NULL;
    if (!rc && m->params.backend == QPACK_BACKEND_REF) {
        rc = run_reference(feeds, n_feeds, lookups, n_lookups, err);
    } else if (!rc) {
        b.vocab = m->info.vocab;
        for (size_t i = 0; i < n && !rc; i++)
            if (!(b.parts[i].logits = malloc(b.vocab * sizeof *b.parts[i].logits)))
                rc = qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
        if (!rc)
            rc = run_parts(m, &b, err);
    }
    for (size_t i = 0; i < n; i++) {
        free(b.parts[i].block);
        free(b.parts[i].logits);
    }
    free(b.parts);
    free(b.part_of);
    return rc;
}

int qpack_feed_batch(const qpack_batch_item *items, size_t n, qpack_error *err)
{
    return qpack_step_batch(items, n, NULL, 0, err);
}
