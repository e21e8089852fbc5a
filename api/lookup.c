/* draft.c - qpack_lookup_step: exact lookup decoding on a session.
 * The draft comes from engine/lookup.c (the latest earlier occurrence of
 * the text's last 4..1 tokens); one feed computes the pending token and the
 * draft together, and the longest prefix of the draft that the model itself
 * chooses greedily is kept. A block gives the same bits as one position at
 * a time, so the tokens and their logits are those of plain greedy steps. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "draft.h"

struct verify {
    const int32_t *draft;       /* block[1..] */
    uint32_t n_draft;
    int32_t *out;
    uint32_t count;
    bool agreeing;              /* every draft token so far was the model's */
    double *logits;             /* the last kept position's */
    uint32_t vocab;
};

/* Position i of the block holds the model's choice after the pending token
 * and draft[0..i): kept while the draft agrees; the first choice that
 * disagrees (or follows the whole draft) ends the pass. */
static int verify_position(void *arg, size_t i, const double *logits, int32_t argmax, qp_err *err)
{
    (void)err;
    struct verify *v = arg;
    if (!v->agreeing)
        return 0;
    v->out[v->count++] = argmax;
    memcpy(v->logits, logits, v->vocab * sizeof *logits);
    v->agreeing = i < v->n_draft && v->draft[i] == argmax;
    return 0;
}

/* [pending, draft...]: the draft from the session's tokens and pending */
static int make_block(const qpack_session *s, int32_t pending, uint32_t max_draft, int32_t *block, uint32_t *k,
                      qpack_error *err)
{
    uint32_t n = s->pos + 1;
    uint32_t *hist = malloc(n * sizeof *hist);
    if (!hist)
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    for (uint32_t i = 0; i < s->pos; i++)
        hist[i] = (uint32_t)s->tokens[i];
    hist[s->pos] = (uint32_t)pending;
    block[0] = pending;
    *k = qp_draft(hist, n, max_draft, (uint32_t *)block + 1);
    free(hist);
    return QPACK_OK;
}

/* The next draft's length after a pass that drafted `drafted` tokens and
 * kept `kept`: doubled after a draft kept whole, cut to the part kept after
 * one refused (0: the next step drafts nothing, the one after 1 token). A
 * drafted position costs about 0.6 of a plain step on int4 (README), so a
 * text that stops repeating soon stops paying for long drafts. */
static void adapt_draft_len(qpack_session *s, uint32_t drafted, uint32_t kept)
{
    if (drafted > 0)
        s->lookup_len = kept == drafted ? 2 * drafted : kept;
    else if (s->lookup_len == 0)
        s->lookup_len = 1;                /* after a step that drafted nothing on purpose */
}

int qpack_lookup_step(qpack_session *s, int32_t pending, uint32_t max_draft, int32_t *out, uint32_t *count,
                      qpack_error *err)
{
    const qpack_model_info *info = &s->m->info;
    *count = 0;
    if (s->pos >= info->ctx)
        return qp_lib_fail(err, QPACK_ERR_CONTEXT, "the session holds all %u positions of its context", info->ctx);
    uint32_t room = info->ctx - s->pos - 1;
    max_draft = max_draft < room ? max_draft : room;
    max_draft = max_draft < s->lookup_len ? max_draft : s->lookup_len;
    int32_t *block = malloc((max_draft + 1) * sizeof *block);
    double *last = malloc(info->vocab * sizeof *last);
    uint32_t k = 0, pos0 = s->pos;
    int rc = block && last ? make_block(s, pending, max_draft, block, &k, err)
                           : (int)qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    struct verify v = {block + 1, k, out, 0, true, last, info->vocab};
    if (!rc)
        rc = qp_lib_feed(s, &(struct qp_lib_feed){.tokens = block, .n = k + 1, .on_position = verify_position,
                                                  .arg = &v}, err);
    if (!rc) {
        /* the refused part of the draft leaves the session */
        s->pos = pos0 + v.count;
        memcpy(s->logits, last, info->vocab * sizeof *last);
        *count = v.count;
        s->stats.tokens -= k + 1 - v.count;
        s->stats.lookup_passes++;
        s->stats.lookup_drafted += k;
        s->stats.lookup_kept += v.count - 1;
        adapt_draft_len(s, k, v.count - 1);
    }
    free(block);
    free(last);
    return rc;
}
