/* serve_sched.c - the sessions of `qrun serve`, batched.
 *
 * One scheduler thread owns the model's sessions (--parallel of them, each
 * with its own KV cache slot) and runs them together: every step gathers
 * the next token of each decoding request and a chunk of the waiting
 * prompts into one qpack_step_batch, so each weight is read once for all
 * of them ("continuous batching"). A request's logits are the same bits
 * whatever shares its steps, so a greedy reply is qrun's reply under any
 * load.
 *
 * A step holds every decoding request's next token (with --lookup, a
 * greedy one's lookup step: its token and a draft), then prompt tokens of
 * the requests still reading their prompt, oldest first, up to a budget:
 * a block of positions when nothing decodes, PREFILL_MIN or one per
 * decoding request beside decoders, so that a long prompt arriving does
 * not stall the streams already running (each step costs about a fixed
 * part plus a part per position). A request's first token is sampled from
 * its prompt's last logits in the step that computes them. A cancelled
 * request (its client gone) leaves before the next step.
 *
 * A session keeps its tokens between requests: a request goes to the free
 * session whose tokens start its prompt the longest way (the next turn of
 * a chat, a repeated system prompt), which rewinds to that prefix and
 * feeds only the rest (the same bits as a fresh feed). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "serve.h"
#include "serve_sched_int.h"

#define PREFILL_MIN 4           /* prompt tokens a step takes beside decoding requests, at least */

/* ---- the queue ----------------------------------------------------------- */

/* A request is taken while a session is free or fewer than --queue wait:
 * with --queue 0 only when a session is free. */
int serve_sched_submit(struct serve_sched *s, struct serve_job *const *jobs, unsigned n)
{
    pthread_mutex_lock(&s->mu);
    bool full = s->stopping || s->q_len + n > s->q_max + (s->n_slots - s->running);
    for (unsigned i = 0; i < n && !full; i++) {
        struct serve_job *j = jobs[i];
        serve_job_ref(j);
        j->sched = s;
        j->queued = true;
        j->t_submit = qp_now_s();
        s->q[(s->q_head + s->q_len++) % s->q_cap] = j;
    }
    if (!full) {
        sched_show_gauges(s);
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return full ? -1 : 0;
}

/* under s->mu: takes job j out of the queue */
static void dequeue(struct serve_sched *s, struct serve_job *j)
{
    for (unsigned i = 0; i < s->q_len; i++) {
        unsigned at = (s->q_head + i) % s->q_cap;
        if (s->q[at] != j)
            continue;
        for (unsigned k = i; k + 1 < s->q_len; k++)
            s->q[(s->q_head + k) % s->q_cap] = s->q[(s->q_head + k + 1) % s->q_cap];
        s->q_len--;
        j->queued = false;
        sched_show_gauges(s);
        return;
    }
}

/* A queued job ends at once; a running one leaves before the next step
 * (the scheduler sees the flag), without interrupting the step it shares
 * with others. */
void serve_job_cancel(struct serve_job *j)
{
    atomic_store(&j->cancel, true);
    struct serve_sched *s = j->sched;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    bool was_queued = j->queued;
    if (was_queued)
        dequeue(s, j);
    pthread_mutex_unlock(&s->mu);
    if (was_queued) {
        job_done_cancelled(j, "cancelled before it started");
        serve_job_unref(j);
    }
}

/* ---- the steps ----------------------------------------------------------- */

/* under s->mu: the free slot whose session starts j's prompt the longest
 * way, or NULL */
static struct slot *free_slot_for(struct serve_sched *s, const struct serve_job *j)
{
    struct slot *best = NULL;
    uint32_t best_len = 0;
    for (unsigned i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        uint32_t len = sl->job ? 0 : job_reusable_prefix(sl->session, j);
        if (!sl->job && (!best || len > best_len))
            best = sl, best_len = len;
    }
    return best;
}

/* under s->mu: waiting jobs into free slots, oldest first */
static void admit(struct serve_sched *s, struct slot **started, unsigned *n_started)
{
    while (s->q_len && s->running < s->n_slots) {
        struct serve_job *j = s->q[s->q_head];
        struct slot *sl = free_slot_for(s, j);
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        j->queued = false;
        sl->job = j;
        sl->order = s->admitted++;
        s->running++;
        pthread_mutex_lock(&j->mu);
        j->state = SERVE_JOB_RUNNING;
        pthread_mutex_unlock(&j->mu);
        started[(*n_started)++] = sl;
    }
    sched_show_gauges(s);
}

/* Before a job's first prompt chunk: the longest start of its prompt any
 * other session holds is copied rather than fed again (another choice of
 * the same request, another client's same system prompt). */
static void copy_best_prefix(struct serve_sched *s, struct slot *sl)
{
    struct serve_job *j = sl->job;
    struct slot *best = NULL;
    uint32_t best_len = sl->fed;
    for (unsigned i = 0; i < s->n_slots; i++) {
        struct slot *o = &s->slots[i];
        uint32_t len = o == sl ? 0 : job_reusable_prefix(o->session, j);
        if (len > best_len)
            best = o, best_len = len;
    }
    qpack_error err;
    if (!best || qpack_session_copy(sl->session, best->session, best_len, &err))
        return;     /* nothing better, or feed it after all */
    atomic_fetch_add(&serve_metrics.cached_tokens, best_len - sl->fed);
    atomic_fetch_add(&serve_metrics.copied_tokens, best_len - sl->fed);
    sl->fed = best_len;
    j->usage.cached_tokens = best_len;
    atomic_store(&sl->held, best_len);
}

/* a choice waits while its leader's prompt is still being fed */
static bool waits(const struct serve_job *j)
{
    return j->leader && !atomic_load(&j->leader->prompt_in);
}

/* An embedding or rerank job's next input, between two steps of the
 * others: the job ends with its last */
static void embed_next(struct serve_sched *s, struct slot *sl)
{
    struct serve_job *j = sl->job;
    qpack_error err = {0};
    uint32_t start = j->embedded ? j->input_ends[j->embedded - 1] : 0, end = j->input_ends[j->embedded];
    float *out = j->embeddings + (size_t)j->embedded * j->dim;
    if (j->yes >= 0 ? serve_rerank_score(sl->session, j->prompt + start, end - start, j->yes, j->no, out, &err)
                    : qpack_embed(sl->session, j->prompt + start, end - start, out, &err)) {
        job_finish(s, sl, NULL, &err);
        return;
    }
    atomic_fetch_add(&serve_metrics.prompt_tokens, end - start);
    atomic_store(&sl->held, qpack_session_pos(sl->session));
    if (++j->embedded == j->n_inputs) {
        j->usage.prompt_ms = (qp_now_s() - sl->t_start) * 1e3;
        job_finish(s, sl, "stop", &err);
    }
}

/* a step's items: what to feed and the lookup steps, each with its slot */
struct step_items {
    qpack_batch_item *feed;
    struct slot **feed_slot;
    size_t n_feed;
    qpack_lookup_item *look;
    struct slot **look_slot;
    size_t n_look;
};

/* a drafting reply's lookup step: its pending token and a draft that ends
 * by its max_tokens */
static void add_lookup(struct serve_sched *s, struct step_items *st, struct slot *sl)
{
    uint32_t left = sl->job->max_new - sl->job->usage.completion_tokens;
    uint32_t draft = left > 1 ? left - 1 : 0;
    st->look[st->n_look] = (qpack_lookup_item){.session = sl->session, .pending = sl->next,
                                                .max_draft = draft < s->lookup ? draft : s->lookup,
                                                .out = sl->looked_up};
    st->look_slot[st->n_look++] = sl;
}

/* was the slot given a feed in this step? (a lookup step's slot decodes:
 * no prompt chunk is looked for there) */
static bool fed_in_step(const struct step_items *st, const struct slot *sl)
{
    for (size_t k = 0; k < st->n_feed; k++)
        if (st->feed_slot[k] == sl)
            return true;
    return false;
}

/* The next step's items: every decoding session's token (or lookup
 * step), then prompt chunks of the others, oldest first, within the
 * budget. */
static void gather(struct serve_sched *s, struct step_items *st)
{
    size_t n = 0;
    uint32_t decoding = 0;
    qpack_batch_item *items = st->feed;
    struct slot **in = st->feed_slot;
    st->n_look = 0;
    for (unsigned i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->job && sl->decoding && job_drafts(s, sl)) {
            add_lookup(s, st, sl);
            decoding++;
        } else if (sl->job && sl->decoding) {
            items[n] = (qpack_batch_item){sl->session, &sl->next, 1};
            in[n++] = sl;
            decoding++;
        }
    }
    st->n_feed = n;
    uint32_t budget = decoding ? (decoding > PREFILL_MIN ? decoding : PREFILL_MIN) : s->block;
    while (budget) {
        struct slot *oldest = NULL;
        for (unsigned i = 0; i < s->n_slots; i++) {
            struct slot *sl = &s->slots[i];
            if (sl->job && !sl->job->n_inputs && !sl->decoding && !fed_in_step(st, sl) && !waits(sl->job) &&
                (!oldest || sl->order < oldest->order))
                oldest = sl;
        }
        if (!oldest)
            break;
        if (!oldest->looked) {
            oldest->looked = true;
            pthread_mutex_lock(&s->mu);     /* the free sessions stay as they are (serve_sched_slot_act) */
            copy_best_prefix(s, oldest);
            pthread_mutex_unlock(&s->mu);
        }
        uint32_t left = oldest->job->n_prompt - oldest->fed, take = left < budget ? left : budget;
        items[n] = (qpack_batch_item){oldest->session, oldest->job->prompt + oldest->fed, take};
        in[n++] = oldest;
        st->n_feed = n;
        budget -= take;
    }
}

/* a lookup step's tokens, each as if sampled alone, until the reply ends */
static void take_looked_up(struct serve_sched *s, struct slot *sl, const qpack_lookup_item *it)
{
    uint32_t held = qpack_session_pos(sl->session) - it->count + 1;     /* when out[0] was chosen */
    uint32_t k = 0;
    for (; k < it->count && sl->job; k++)
        job_take_id(s, sl, it->out[k], held + k);
    atomic_fetch_add(&serve_metrics.lookup_drafted, it->drafted);
    atomic_fetch_add(&serve_metrics.lookup_kept, k - 1);    /* the tokens the reply took beyond the first */
}

/* one step: the items fed together, then each session's next token where
 * its prompt is in */
static void step(struct serve_sched *s, const struct step_items *st)
{
    qpack_error err = {0};
    uint64_t positions = 0;
    for (size_t i = 0; i < st->n_feed; i++)
        positions += st->feed[i].n;
    int rc = qpack_step_batch(st->feed, st->n_feed, st->look, st->n_look, &err);
    for (size_t i = 0; !rc && i < st->n_look; i++)
        positions += 1 + st->look[i].drafted;
    atomic_fetch_add(&serve_metrics.steps, 1);
    atomic_fetch_add(&serve_metrics.step_sessions, st->n_feed + st->n_look);
    atomic_fetch_add(&serve_metrics.step_positions, positions);
    for (size_t i = 0; i < st->n_look; i++) {
        struct slot *sl = st->look_slot[i];
        atomic_store(&sl->held, qpack_session_pos(sl->session));
        if (rc)
            job_finish(s, sl, NULL, &err);
        else
            take_looked_up(s, sl, &st->look[i]);
    }
    for (size_t i = 0; i < st->n_feed; i++) {
        struct slot *sl = st->feed_slot[i];
        atomic_store(&sl->held, qpack_session_pos(sl->session));
        if (rc) {
            job_finish(s, sl, NULL, &err);
            continue;
        }
        if (!sl->decoding && (sl->fed += (uint32_t)st->feed[i].n) == sl->job->n_prompt)
            atomic_store(&sl->job->prompt_in, true);
        if (sl->decoding || sl->fed == sl->job->n_prompt)
            job_take_token(s, sl);
    }
}

static void *sched_main(void *arg)
{
    struct serve_sched *s = arg;
    size_t cap = 2 * s->n_slots;
    struct step_items st = {.feed = calloc(cap, sizeof *st.feed), .feed_slot = calloc(cap, sizeof *st.feed_slot),
                            .look = calloc(s->n_slots, sizeof *st.look),
                            .look_slot = calloc(s->n_slots, sizeof *st.look_slot)};
    struct slot **started = calloc(s->n_slots, sizeof *started);
    bool ready = st.feed && st.feed_slot && st.look && st.look_slot && started;
    for (;;) {
        unsigned n_started = 0;
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !s->running && !s->q_len)
            pthread_cond_wait(&s->cv, &s->mu);
        bool stopping = s->stopping;
        if (!stopping)
            admit(s, started, &n_started);
        pthread_mutex_unlock(&s->mu);
        for (unsigned i = 0; i < n_started; i++)
            job_start(s, started[i]);
        qpack_error gone = {.code = QPACK_ERR_INTERRUPTED};
        snprintf(gone.message, sizeof gone.message, stopping ? "the server is shutting down" : "cancelled");
        for (unsigned i = 0; i < s->n_slots; i++)
            if (s->slots[i].job && (stopping || atomic_load(&s->slots[i].job->cancel)))
                job_finish(s, &s->slots[i], NULL, &gone);
        if (stopping)
            break;
        for (unsigned i = 0; i < s->n_slots; i++)
            if (s->slots[i].job && s->slots[i].job->n_inputs)
                embed_next(s, &s->slots[i]);
        if (ready)
            gather(s, &st);
        if (ready && st.n_feed + st.n_look)
            step(s, &st);
    }
    free(st.feed);
    free(st.feed_slot);
    free(st.look);
    free(st.look_slot);
    free(started);
    return NULL;
}

/* ---- the scheduler ------------------------------------------------------- */

static int open_slots(struct serve_sched *s, qpack_error *err)
{
    const qpack_tokenizer *tok = qpack_model_tokenizer(s->m);
    for (unsigned i = 0; i < s->n_slots; i++)
        if (qpack_session_new(&s->slots[i].session, s->m, err) ||
            qpack_decoder_new(&s->slots[i].decoder, tok, true, err))
            return -1;
    for (unsigned i = 0; s->lookup && i < s->n_slots; i++)
        if (!(s->slots[i].looked_up = malloc((s->lookup + 1) * sizeof *s->slots[i].looked_up))) {
            err->code = QPACK_ERR_MEMORY;
            snprintf(err->message, sizeof err->message, "out of memory");
            return -1;
        }
    int e = pthread_create(&s->thread, NULL, sched_main, s);
    if (e) {
        err->code = QPACK_ERR_MEMORY;
        snprintf(err->message, sizeof err->message, "cannot start the scheduler thread: %s", strerror(e));
        return -1;
    }
    s->started = true;
    return 0;
}

int serve_sched_new(struct serve_sched **out, qpack_model *m, unsigned parallel, unsigned queue_max,
                    uint32_t lookup, qpack_error *err)
{
    *out = NULL;
    struct serve_sched *s = calloc(1, sizeof *s);
    unsigned q_cap = queue_max + parallel;
    if (!s || !(s->slots = calloc(parallel, sizeof *s->slots)) || !(s->q = calloc(q_cap, sizeof *s->q))) {
        if (s)
            free(s->slots);
        free(s);
        err->code = QPACK_ERR_MEMORY;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    s->m = m;
    s->ctx = qpack_model_get_info(m)->ctx;
    s->block = qpack_model_get_info(m)->block_positions;
    s->n_slots = parallel;
    s->lookup = lookup;
    s->q_cap = q_cap;
    s->q_max = queue_max;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    serve_metrics.parallel = parallel;
    serve_metrics.queue_max = queue_max;
    if (open_slots(s, err)) {
        serve_sched_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* Waiting jobs end as cancelled; running ones end before the next step,
 * the step in progress interrupted; the thread is joined. */
void serve_sched_stop(struct serve_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    while (s->q_len) {
        struct serve_job *j = s->q[s->q_head];
        dequeue(s, j);
        job_done_cancelled(j, "the server is shutting down");
        serve_job_unref(j);
    }
    for (unsigned i = 0; i < s->n_slots; i++)
        if (s->slots[i].job)
            qpack_session_interrupt(s->slots[i].session);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started) {
        pthread_join(s->thread, NULL);
        s->started = false;
    }
}

void serve_sched_free(struct serve_sched *s)
{
    if (!s)
        return;
    serve_sched_stop(s);
    atomic_fetch_sub(&serve_metrics.waiting, s->shown_waiting);
    atomic_fetch_sub(&serve_metrics.busy, s->shown_busy);
    for (unsigned i = 0; i < s->n_slots; i++) {
        qpack_decoder_free(s->slots[i].decoder);
        free(s->slots[i].looked_up);
        qpack_session_free(s->slots[i].session);
    }
    serve_vocab_free(s->vocab);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->q);
    free(s->slots);
    free(s);
}

unsigned serve_sched_slots(struct serve_sched *s, struct serve_slot_info *out, unsigned max)
{
    pthread_mutex_lock(&s->mu);
    unsigned n = s->n_slots < max ? s->n_slots : max;
    for (unsigned i = 0; i < n; i++) {
        const struct slot *sl = &s->slots[i];
        out[i] = (struct serve_slot_info){.busy = sl->job != NULL, .held = atomic_load(&sl->held),
                                          .prompt = atomic_load(&sl->prompt), .decoded = atomic_load(&sl->decoded)};
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

int serve_sched_slot_act(struct serve_sched *s, unsigned id, int (*act)(void *arg, qpack_session *ses), void *arg)
{
    pthread_mutex_lock(&s->mu);
    int rc = id >= s->n_slots ? SERVE_SLOT_NONE : s->slots[id].job ? SERVE_SLOT_BUSY : act(arg, s->slots[id].session);
    if (rc != SERVE_SLOT_NONE)
        atomic_store(&s->slots[id].held, qpack_session_pos(s->slots[id].session));
    pthread_mutex_unlock(&s->mu);
    return rc;
}
