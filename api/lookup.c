/* lookup.c - qpack_lookup_step: exact lookup decoding on a session.
 * The draft comes from engine/draft.c (the latest earlier occurrence of
 * the text's last 4..1 tokens); one feed computes the pending token and the
 * draft together, and the longest prefix of the draft that the model itself
 * chooses greedily is kept. A block gives the same bits as one position at
 * a time, so the tokens and their logits are those of plain greedy steps. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "draft.h"

struct verify_feed {
    struct qp_lib_verify v;
    double *logits;             /* the last kept position's */
    uint32_t vocab;
};

bool qp_lib_verify_next(struct qp_lib_verify *v, size_t i, int32_t argmax)
{
    if (!v->agreeing)
        return false;
    v->out[v->count++] = argmax;
    v->agreeing = i < v->n_draft && v->draft[i] == argmax;
    return true;
}

/* qp_lib_feed's callback: each position in turn; the kept ones' logits */
static int verify_position(void *arg, size_t i, const double *logits, int32_t argmax, qp_err *err)
{
    (void)err;
    struct verify_feed *f = arg;
    if (qp_lib_verify_next(&f->v, i, argmax))
        memcpy(f->logits, logits, f->vocab * sizeof *logits);
    return 0;
}

int qp_lib_lookup_block(const qpack_session *s, int32_t pending, uint32_t max_draft, int32_t *block, uint32_t *n,
                        qpack_error *err)
{
    uint32_t room = s->pos < s->m->info.ctx ? s->m->info.ctx - s->pos - 1 : 0;
    max_draft = max_draft < room ? max_draft : room;
    max_draft = max_draft < s->lookup_len ? max_draft : s->lookup_len;
    uint32_t *hist = malloc((s->pos + 1) * sizeof *hist);
    if (!hist)
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    for (uint32_t i = 0; i < s->pos; i++)
        hist[i] = (uint32_t)s->tokens[i];
    hist[s->pos] = (uint32_t)pending;
    block[0] = pending;
    *n = 1 + qp_draft(hist, s->pos + 1, max_draft, (uint32_t *)block + 1);
    free(hist);
    return QPACK_OK;
}

/* The next draft's length after a pass that drafted `drafted` tokens and
 * kept `kept`: doubled after a draft kept whole, cut to the part kept after
 * one refused (0: the next step drafts nothing, the one after 1 token). A
 * drafted position costs a good part of a plain step (docs/ENGINE.md), so
 * a text that stops repeating soon stops paying for long drafts. */
static void adapt_draft_len(qpack_session *s, uint32_t drafted, uint32_t kept)
{
    if (drafted > 0)
        s->lookup_len = kept == drafted ? 2 * drafted : kept;
    else if (s->lookup_len == 0)
        s->lookup_len = 1;                /* after a step that drafted nothing on purpose */
}

void qp_lib_lookup_done(qpack_session *s, uint32_t n, uint32_t count)
{
    s->stats.lookup_passes++;
    s->stats.lookup_drafted += n - 1;
    s->stats.lookup_kept += count - 1;
    adapt_draft_len(s, n - 1, count - 1);
}

int qpack_lookup_step(qpack_session *s, int32_t pending, uint32_t max_draft, int32_t *out, uint32_t *count,
                      qpack_error *err)
{
    const qpack_model_info *info = &s->m->info;
    *count = 0;
    if (s->pos >= info->ctx)
        return qp_lib_fail(err, QPACK_ERR_CONTEXT, "the session holds all %u positions of its context", info->ctx);
    max_draft = max_draft < info->ctx ? max_draft : info->ctx;
    int32_t *block = malloc(((size_t)max_draft + 1) * sizeof *block);
    double *last = malloc(info->vocab * sizeof *last);
    uint32_t n = 0, pos0 = s->pos;
    int rc = block && last ? qp_lib_lookup_block(s, pending, max_draft, block, &n, err)
                           : (int)qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    struct verify_feed f = {{block + 1, n - 1, out, 0, true}, last, info->vocab};
    if (!rc)
        rc = qp_lib_feed(s, &(struct qp_lib_feed){.tokens = block, .n = n, .on_position = verify_position,
                                                  .arg = &f}, err);
    if (rc && s->pos != pos0) {    /* the reference fed some before it failed */
        s->pos = pos0;
        s->have_logits = false;
    }
    if (!rc) {
        /* the refused part of the draft leaves the session */
        s->pos = pos0 + f.v.count;
        memcpy(s->logits, last, info->vocab * sizeof *last);
        *count = f.v.count;
        s->stats.tokens -= n - f.v.count;
        qp_lib_lookup_done(s, n, f.v.count);
    }
    free(block);
    free(last);
    return rc;
}
