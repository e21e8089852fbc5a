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

#define PREFILL_MIN 4           /* prompt tokens a step takes beside decoding requests, at least */

struct serve_job {
    /* the request, fixed once queued */
    int32_t *prompt;
    uint32_t n_prompt, max_new;
    qpack_sampler_params sp;
    struct serve_stops stops;
    double t_submit;
    struct serve_sched *sched;
    atomic_bool cancel;
    /* the rest under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    enum serve_job_state state;
    bool queued;
    char *out;                  /* text released and not yet taken */
    size_t out_len, out_cap;
    const char *finish;         /* "stop", "length"; NULL: err */
    int stop_hit;               /* the stop string that ended the reply; -1: none did */
    qpack_error err;
    struct serve_usage usage;
    void (*watch)(void *);      /* told of new text and of the end */
    void *watch_arg;
    struct serve_job *leader;   /* another choice of the same request, whose prompt this one copies */
    atomic_bool prompt_in;      /* the whole prompt has been fed (or the job ended) */
    int logprobs;               /* alternatives per token, -1: no log probabilities */
    struct serve_logprob *lp;   /* released and not yet taken */
    size_t lp_len, lp_cap;
    struct serve_format *format;    /* response_format's constraint; NULL: none */
    bool format_think;              /* the format begins after the reply's thinking */
    uint32_t *input_ends;           /* an embedding job: its inputs' ends in prompt, */
    uint32_t n_inputs, embedded;    /*   how many, how many done */
    float *embeddings;              /*   [n_inputs][dim] */
    uint32_t dim;
};

/* a session and the request it runs */
struct slot {
    qpack_session *session;
    qpack_decoder *decoder;
    struct serve_job *job;      /* NULL: free (under s->mu) */
    uint64_t order;             /* when the job was admitted: the oldest prompt goes first */
    qpack_sampler *sampler;
    struct serve_format_state *format;  /* the reply's place in its job's format */
    struct stop_text stops;
    uint32_t fed;               /* prompt tokens the session holds */
    bool decoding;              /* the prompt is in: `next` is the token to feed */
    bool looked;                /* another session's copy of the prompt's start looked for */
    int32_t next;
    int32_t *looked_up;         /* --lookup: [lookup + 1], a lookup step's tokens */
    double t_start, t_first;    /* seconds: admitted, its first token */
    /* for /slots, read by other threads */
    atomic_uint held;           /* positions in the session */
    atomic_uint prompt, decoded;    /* the job's prompt tokens and tokens generated */
};

struct serve_sched {
    qpack_model *m;
    uint32_t ctx, block;
    uint32_t lookup;            /* a greedy reply's draft, at most (0: no lookup decoding) */
    unsigned n_slots;
    struct slot *slots;
    struct serve_vocab *vocab;  /* for formats: made at the first that needs it */
    pthread_mutex_t mu;         /* the queue, stopping, which slots hold a job */
    pthread_cond_t cv;
    struct serve_job **q;       /* ring of q_max + n_slots: waiting for a free session */
    unsigned q_cap, q_max, q_head, q_len;
    unsigned running;           /* slots holding a job */
    uint64_t admitted;
    bool stopping;
    pthread_t thread;
    bool started;
};

static unsigned long long micros(double seconds)
{
    return seconds > 0 ? (unsigned long long)(seconds * 1e6) : 0;
}

/* ---- jobs ---------------------------------------------------------------- */

struct serve_job *serve_job_new(int32_t *prompt, uint32_t n, uint32_t max_new, const qpack_sampler_params *sp,
                                const struct serve_stops *stops)
{
    struct serve_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    *j = (struct serve_job){.prompt = prompt, .n_prompt = n, .max_new = max_new, .sp = *sp, .refs = 1,
                            .logprobs = -1, .stop_hit = -1};
    if (sp->n_logit_bias) {    /* the request's array goes before the job does */
        qpack_logit_bias *bias = malloc(sp->n_logit_bias * sizeof *bias);
        if (!bias) {
            free(j);
            return NULL;
        }
        memcpy(bias, sp->logit_bias, sp->n_logit_bias * sizeof *bias);
        j->sp.logit_bias = bias;
    }
    for (unsigned i = 0; stops && i < stops->n; i++) {
        if (!(j->stops.s[i] = strdup(stops->s[i]))) {
            j->prompt = NULL;
            serve_job_unref(j);
            return NULL;
        }
        j->stops.len[i] = stops->len[i];
        j->stops.n++;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    return j;
}

void serve_job_unref(struct serve_job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    for (unsigned i = 0; i < j->stops.n; i++)
        free(j->stops.s[i]);
    free((void *)j->sp.logit_bias);
    serve_format_unref(j->format);
    free(j->input_ends);
    free(j->embeddings);
    free(j->prompt);
    if (j->leader)
        serve_job_unref(j->leader);
    free(j->lp);
    free(j->out);
    free(j);
}

void serve_job_ref(struct serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

/* appends released text for the reader */
void serve_job_follow(struct serve_job *j, struct serve_job *leader)
{
    serve_job_ref(leader);
    j->leader = leader;
}

void serve_job_want_logprobs(struct serve_job *j, unsigned top)
{
    j->logprobs = (int)(top > SERVE_MAX_TOP_LOGPROBS ? SERVE_MAX_TOP_LOGPROBS : top);
}

void serve_job_want_format(struct serve_job *j, struct serve_format *format, bool think)
{
    j->format = serve_format_ref(format);
    j->format_think = think;
}

int serve_job_want_embeddings(struct serve_job *j, const uint32_t *ends, uint32_t n_inputs, uint32_t dim)
{
    if (!n_inputs || !(j->input_ends = malloc(n_inputs * sizeof *ends)) ||
        !(j->embeddings = calloc((size_t)n_inputs * dim, sizeof *j->embeddings)))
        return -1;
    memcpy(j->input_ends, ends, n_inputs * sizeof *ends);
    j->n_inputs = n_inputs;
    j->dim = dim;
    return 0;
}

const float *serve_job_embeddings(struct serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool done = j->state == SERVE_JOB_DONE;
    pthread_mutex_unlock(&j->mu);
    return done ? j->embeddings : NULL;
}

static int job_release_logprob(struct serve_job *j, const struct serve_logprob *lp)
{
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    if (j->lp_len == j->lp_cap) {
        size_t cap = j->lp_cap ? j->lp_cap * 2 : 64;
        struct serve_logprob *v = realloc(j->lp, cap * sizeof *v);
        if (v)
            j->lp = v, j->lp_cap = cap;
        else
            rc = -1;
    }
    if (!rc)
        j->lp[j->lp_len++] = *lp;
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int serve_job_take_logprobs(struct serve_job *j, struct serve_logprob **buf, size_t *len, size_t *cap)
{
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    if (*len + j->lp_len > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + j->lp_len)
            c *= 2;
        struct serve_logprob *v = realloc(*buf, c * sizeof *v);
        if (v)
            *buf = v, *cap = c;
        else
            rc = -1;
    }
    if (!rc && j->lp_len) {
        memcpy(*buf + *len, j->lp, j->lp_len * sizeof *j->lp);
        *len += j->lp_len;
        j->lp_len = 0;
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

static int job_release_text(struct serve_job *j, const char *p, size_t n)
{
    if (!n)
        return 0;
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    if (j->out_len + n > j->out_cap) {
        size_t cap = j->out_cap ? j->out_cap * 2 : 1024;
        while (cap < j->out_len + n)
            cap *= 2;
        char *o = realloc(j->out, cap);
        if (o)
            j->out = o, j->out_cap = cap;
        else
            rc = -1;
    }
    if (!rc) {
        memcpy(j->out + j->out_len, p, n);
        j->out_len += n;
        pthread_cond_broadcast(&j->cv);
        if (j->watch)
            j->watch(j->watch_arg);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* the end of a job: finish NULL with err for a failure */
static void job_done(struct serve_job *j, const char *finish, const qpack_error *err)
{
    atomic_store(&j->prompt_in, true);      /* no choice waits for it any longer */
    pthread_mutex_lock(&j->mu);
    j->state = SERVE_JOB_DONE;
    j->finish = finish;
    if (!finish)
        j->err = *err;
    pthread_cond_broadcast(&j->cv);
    if (j->watch)
        j->watch(j->watch_arg);
    pthread_mutex_unlock(&j->mu);
}

void serve_job_watch(struct serve_job *j, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&j->mu);
    j->watch = fn;
    j->watch_arg = arg;
    pthread_mutex_unlock(&j->mu);
}

bool serve_job_ready(struct serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool ready = j->out_len || j->state == SERVE_JOB_DONE;
    pthread_mutex_unlock(&j->mu);
    return ready;
}

static void job_done_cancelled(struct serve_job *j, const char *why)
{
    qpack_error e = {.code = QPACK_ERR_INTERRUPTED};
    snprintf(e.message, sizeof e.message, "%s", why);
    job_done(j, NULL, &e);
}

int serve_job_take(struct serve_job *j, int timeout_ms, char **buf, size_t *len, size_t *cap)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&j->mu);
    while (!j->out_len && j->state != SERVE_JOB_DONE)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT)
            break;
    int rc = j->state;
    if (j->out_len && *len + j->out_len + 1 > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (c < *len + j->out_len + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (b)
            *buf = b, *cap = c;
        else
            rc = -1;
    }
    if (rc >= 0 && j->out_len) {
        memcpy(*buf + *len, j->out, j->out_len);
        *len += j->out_len;
        (*buf)[*len] = 0;
        j->out_len = 0;
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

const char *serve_job_stop_string(struct serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    const char *s = j->state == SERVE_JOB_DONE && j->stop_hit >= 0 ? j->stops.s[j->stop_hit] : NULL;
    pthread_mutex_unlock(&j->mu);
    return s;
}

const char *serve_job_result(struct serve_job *j, struct serve_usage *u, qpack_error *err)
{
    pthread_mutex_lock(&j->mu);
    const char *finish = j->finish;
    *u = j->usage;
    if (!finish && err)
        *err = j->err;
    pthread_mutex_unlock(&j->mu);
    return finish;
}

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
        atomic_store(&serve_metrics.waiting, s->q_len);
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
        atomic_store(&serve_metrics.waiting, s->q_len);
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

/* ---- a request on a session ---------------------------------------------- */

/* tokens the session holds that start the prompt, leaving at least one
 * prompt token to feed (its logits give the first new token) */
static uint32_t reusable_prefix(const qpack_session *ses, const struct serve_job *j)
{
    const int32_t *had = qpack_session_tokens(ses);
    uint32_t n = qpack_session_pos(ses), k = 0;
    while (k < n && k + 1 < j->n_prompt && had[k] == j->prompt[k])
        k++;
    return k;
}

/* under s->mu: the free slot whose session starts j's prompt the longest
 * way, or NULL */
static struct slot *free_slot_for(struct serve_sched *s, const struct serve_job *j)
{
    struct slot *best = NULL;
    uint32_t best_len = 0;
    for (unsigned i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        uint32_t len = sl->job ? 0 : reusable_prefix(sl->session, j);
        if (!sl->job && (!best || len > best_len))
            best = sl, best_len = len;
    }
    return best;
}

/* Whatever a reply left in its slot is dropped: its sampler, its place in
 * the format, the stop matcher's held text, the decoder's partial
 * character. A reply that ends normally has flushed the text first; a
 * cancelled or failed one has not, and nothing of it may reach the next
 * reply, which may be another client's. */
static void clear_reply(struct slot *sl)
{
    size_t n;
    qpack_decoder_finish(sl->decoder, false, &n);
    qpack_sampler_free(sl->sampler);
    sl->sampler = NULL;
    serve_format_end(sl->format);
    sl->format = NULL;
    stop_text_free(&sl->stops);
    stop_text_init(&sl->stops, NULL, 0);
    sl->decoding = false;
    sl->looked = false;
    sl->next = -1;
}

/* the end of the slot's job; finish NULL with err for a failure */
static void finish(struct serve_sched *s, struct slot *sl, const char *finish, const qpack_error *err)
{
    struct serve_job *j = sl->job;
    clear_reply(sl);
    if (!finish && err->code == QPACK_ERR_INTERRUPTED)
        atomic_fetch_add(&serve_metrics.cancelled, 1);
    atomic_fetch_add(&serve_metrics.completion_tokens, j->usage.completion_tokens);
    if (j->usage.completion_tokens) {
        double decode = qp_now_s() - sl->t_first;
        j->usage.predicted_ms = decode * 1e3;
        atomic_fetch_add(&serve_metrics.decode_us, micros(decode));
    }
    job_done(j, finish, err);
    pthread_mutex_lock(&s->mu);
    sl->job = NULL;
    s->running--;
    atomic_store(&serve_metrics.busy, s->running);
    pthread_mutex_unlock(&s->mu);
    serve_job_unref(j);
}

/* a job starts on its slot: every state of the last reply cleared, the
 * session rewound to what it shares with the prompt, a sampler, the stop
 * strings */
static void start(struct serve_sched *s, struct slot *sl)
{
    struct serve_job *j = sl->job;
    qpack_error err = {0};
    clear_reply(sl);
    sl->t_start = qp_now_s();
    atomic_fetch_add(&serve_metrics.queue_us, micros(sl->t_start - j->t_submit));
    sl->fed = reusable_prefix(sl->session, j);
    atomic_fetch_add(&serve_metrics.cached_tokens, sl->fed);
    j->usage.prompt_tokens = j->n_prompt;
    j->usage.cached_tokens = sl->fed;
    atomic_store(&sl->prompt, j->n_prompt);
    atomic_store(&sl->decoded, 0);
    atomic_store(&sl->held, sl->fed);
    stop_text_init(&sl->stops, (const char *const *)j->stops.s, (int)j->stops.n);
    qpack_sampler_params sp = j->sp;
    if (j->format) {
        if (!s->vocab)
            s->vocab = serve_vocab_new(s->m);
        if (!s->vocab || !(sl->format = serve_format_start(j->format, s->vocab, j->format_think))) {
            err.code = QPACK_ERR_MEMORY;
            snprintf(err.message, sizeof err.message, "out of memory for the response format");
            finish(s, sl, NULL, &err);
            return;
        }
        /* the tokens the reply may have: max_tokens, or up to the context's end */
        uint32_t room = j->n_prompt < s->ctx ? s->ctx - j->n_prompt + 1 : 1;
        serve_format_budget(sl->format, j->max_new < room ? j->max_new : room);
        sp.allow = serve_format_allows;
        sp.allow_user = sl->format;
    }
    /* an embedding job samples nothing */
    if (qpack_session_rewind(sl->session, sl->fed, &err) ||
        (!j->n_inputs && qpack_sampler_new(&sl->sampler, s->m, &sp, &err)))
        finish(s, sl, NULL, &err);
}

/* text of a token through the stop strings; 1 when a stop string ended the reply */
static int emit(struct slot *sl, const char *piece, size_t n, qpack_error *err)
{
    const char *out;
    size_t len;
    int hit = stop_text_push(&sl->stops, piece, n, &out, &len);
    if (hit < 0 || job_release_text(sl->job, out, len)) {
        err->code = QPACK_ERR_MEMORY;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    return hit;
}

/* what the decoder and the matcher still hold, at the end of a reply */
static int flush_text(struct slot *sl, qpack_error *err)
{
    size_t n;
    const char *tail = qpack_decoder_finish(sl->decoder, true, &n);
    if (sl->stops.stopped)
        return 0;
    int hit = emit(sl, tail, n, err);
    if (hit < 0)
        return -1;
    const char *out;
    stop_text_finish(&sl->stops, &out, &n);
    if (!hit && job_release_text(sl->job, out, n)) {
        err->code = QPACK_ERR_MEMORY;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    return 0;
}

/* the log probability of the token just sampled, from the session's logits */
static int release_logprob(struct serve_sched *s, struct slot *sl, int32_t id, qpack_error *err)
{
    struct serve_logprob lp;
    serve_logprob_of(qpack_logits(sl->session), qpack_model_get_info(s->m)->vocab, id, (unsigned)sl->job->logprobs,
                     &lp);
    if (!job_release_logprob(sl->job, &lp))
        return 0;
    err->code = QPACK_ERR_MEMORY;
    snprintf(err->message, sizeof err->message, "out of memory");
    return -1;
}

/* The reply's next token id, chosen when the session held `held`
 * positions: its text, and whether the reply ends here (then the slot's
 * job is NULL). */
static void take_id(struct serve_sched *s, struct slot *sl, int32_t id, uint32_t held)
{
    struct serve_job *j = sl->job;
    qpack_error err = {0};
    if (sl->format && serve_format_take(sl->format, id)) {
        err.code = QPACK_ERR_INTERNAL;
        snprintf(err.message, sizeof err.message, "token %d leaves the response format", id);
        finish(s, sl, NULL, &err);
        return;
    }
    atomic_store(&sl->decoded, j->usage.completion_tokens + 1);
    if (j->usage.completion_tokens++ == 0) {
        sl->t_first = qp_now_s();
        atomic_fetch_add(&serve_metrics.first_token_us, micros(sl->t_first - j->t_submit));
        atomic_fetch_add(&serve_metrics.first_tokens, 1);
        j->usage.prompt_ms = (sl->t_first - sl->t_start) * 1e3;
        atomic_fetch_add(&serve_metrics.prompt_us, micros(sl->t_first - sl->t_start));
        atomic_fetch_add(&serve_metrics.prompt_tokens, j->n_prompt);
    }
    const char *end = NULL;
    if (qpack_token_is_end(s->m, id)) {
        end = "stop";
    } else if (j->logprobs >= 0 && release_logprob(s, sl, id, &err)) {
        finish(s, sl, NULL, &err);
        return;
    } else {
        size_t n;
        const char *piece = qpack_decoder_push(sl->decoder, id, &n);
        int hit = emit(sl, piece, n, &err);
        if (hit > 0)
            j->stop_hit = sl->stops.hit;
        if (hit)
            end = hit > 0 ? "stop" : NULL;
        else if (j->usage.completion_tokens >= j->max_new || held >= s->ctx)
            end = "length";
    }
    if (!end && !err.code) {
        sl->decoding = true;
        sl->next = id;
        return;
    }
    if (end && flush_text(sl, &err))
        end = NULL;
    finish(s, sl, end, &err);
}

/* After a step that gave the slot's session new logits: the next token */
static void take_token(struct serve_sched *s, struct slot *sl)
{
    take_id(s, sl, qpack_sample(sl->sampler, sl->session), qpack_session_pos(sl->session));
}

/* A reply whose every token is the argmax of the model's logits (no
 * penalty, bias, format or log probabilities) decodes by lookup when the
 * server drafts: the same tokens in fewer steps. */
static bool drafts(const struct serve_sched *s, const struct slot *sl)
{
    const qpack_sampler_params *p = &sl->job->sp;
    return s->lookup && sl->decoding && p->temperature <= 0 && !p->n_logit_bias && p->repeat_penalty == 1 &&
           p->presence_penalty == 0 && p->frequency_penalty == 0 && !sl->format && sl->job->logprobs < 0;
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

/* ---- the steps ----------------------------------------------------------- */

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
    atomic_store(&serve_metrics.waiting, s->q_len);
    atomic_store(&serve_metrics.busy, s->running);
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
        uint32_t len = o == sl ? 0 : reusable_prefix(o->session, j);
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

/* An embedding job's next input, between two steps of the others: the
 * job ends with its last */
static void embed_next(struct serve_sched *s, struct slot *sl)
{
    struct serve_job *j = sl->job;
    qpack_error err = {0};
    uint32_t start = j->embedded ? j->input_ends[j->embedded - 1] : 0, end = j->input_ends[j->embedded];
    if (qpack_embed(sl->session, j->prompt + start, end - start, j->embeddings + (size_t)j->embedded * j->dim, &err)) {
        finish(s, sl, NULL, &err);
        return;
    }
    atomic_fetch_add(&serve_metrics.prompt_tokens, end - start);
    atomic_store(&sl->held, end - start);
    if (++j->embedded == j->n_inputs) {
        j->usage.prompt_ms = (qp_now_s() - sl->t_start) * 1e3;
        finish(s, sl, "stop", &err);
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
        if (sl->job && sl->decoding && drafts(s, sl)) {
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
            copy_best_prefix(s, oldest);
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
        take_id(s, sl, it->out[k], held + k);
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
            finish(s, sl, NULL, &err);
        else
            take_looked_up(s, sl, &st->look[i]);
    }
    for (size_t i = 0; i < st->n_feed; i++) {
        struct slot *sl = st->feed_slot[i];
        atomic_store(&sl->held, qpack_session_pos(sl->session));
        if (rc) {
            finish(s, sl, NULL, &err);
            continue;
        }
        if (!sl->decoding && (sl->fed += (uint32_t)st->feed[i].n) == sl->job->n_prompt)
            atomic_store(&sl->job->prompt_in, true);
        if (sl->decoding || sl->fed == sl->job->n_prompt)
            take_token(s, sl);
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
            start(s, started[i]);
        qpack_error gone = {.code = QPACK_ERR_INTERRUPTED};
        snprintf(gone.message, sizeof gone.message, stopping ? "the server is shutting down" : "cancelled");
        for (unsigned i = 0; i < s->n_slots; i++)
            if (s->slots[i].job && (stopping || atomic_load(&s->slots[i].job->cancel)))
                finish(s, &s->slots[i], NULL, &gone);
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
