/* serve_sched.c - the sessions of `qrun serve`.
 *
 * A worker thread per session (qpack_model_params.max_sessions = parallel)
 * takes jobs from one bounded FIFO queue. The library runs the steps of all
 * sessions one at a time on the model's two threads; the workers take turns
 * (a ticket lock, first come first served) at the granularity the model
 * makes cheap:
 *   - every session with its own KV cache (qpack_model_kv_caches ==
 *     parallel): a turn is one feed (a prompt chunk or one token), so
 *     replies advance side by side;
 *   - sessions sharing a cache: a turn is a whole job, from its first feed
 *     to its last, since a switch would make the other session recompute
 *     its whole sequence before each of its steps.
 * Prompts are fed in chunks (CHUNK tokens), so a cancelled job stops, and a
 * waiting session gets its turn, within one chunk.
 *
 * A session keeps its tokens between jobs: a job whose prompt starts with
 * them (the next turn of a chat, a repeated system prompt) rewinds to the
 * common prefix and feeds only the rest (the bits are those of a fresh
 * feed: a sequence gives the same bits however it is cut into blocks). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"
#include "clock.h"

#define CHUNK 64                /* prompt tokens per feed */

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
    qpack_session *session;     /* while it runs: for an interrupt */
    char *out;                  /* text released and not yet taken */
    size_t out_len, out_cap;
    const char *finish;         /* "stop", "length"; NULL: err */
    qpack_error err;
    struct serve_usage usage;
};

struct worker {
    struct serve_sched *s;
    pthread_t thread;
    bool started;
    qpack_session *session;
    qpack_decoder *decoder;
    struct serve_job *job;      /* under s->mu */
};

struct serve_sched {
    qpack_model *m;
    uint32_t ctx;
    unsigned n_workers;
    struct worker *w;
    pthread_mutex_t mu;         /* the queue, stopping, each worker's job */
    pthread_cond_t cv;
    struct serve_job **q;       /* ring of queue_max */
    unsigned q_max, q_head, q_len;
    bool stopping;
    bool job_turns;             /* a turn is a whole job (sessions share a cache) */
    pthread_mutex_t turn_mu;
    pthread_cond_t turn_cv;
    uint64_t turn_next, turn_serving;
};

static unsigned long long micros(double seconds)
{
    return seconds > 0 ? (unsigned long long)(seconds * 1e6) : 0;
}

/* ---- turns --------------------------------------------------------------- */

static void turn_acquire(struct serve_sched *s)
{
    pthread_mutex_lock(&s->turn_mu);
    uint64_t ticket = s->turn_next++;
    while (ticket != s->turn_serving)
        pthread_cond_wait(&s->turn_cv, &s->turn_mu);
    pthread_mutex_unlock(&s->turn_mu);
}

static void turn_release(struct serve_sched *s)
{
    pthread_mutex_lock(&s->turn_mu);
    s->turn_serving++;
    pthread_cond_broadcast(&s->turn_cv);
    pthread_mutex_unlock(&s->turn_mu);
}

/* ---- jobs ---------------------------------------------------------------- */

struct serve_job *serve_job_new(int32_t *prompt, uint32_t n, uint32_t max_new, const qpack_sampler_params *sp,
                                const struct serve_stops *stops)
{
    struct serve_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    *j = (struct serve_job){.prompt = prompt, .n_prompt = n, .max_new = max_new, .sp = *sp, .refs = 1};
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
    free(j->prompt);
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
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* the end of a job: finish NULL with err for a failure */
static void job_done(struct serve_job *j, const char *finish, const qpack_error *err)
{
    pthread_mutex_lock(&j->mu);
    j->state = SERVE_JOB_DONE;
    j->finish = finish;
    if (!finish)
        j->err = *err;
    j->session = NULL;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
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

int serve_sched_submit(struct serve_sched *s, struct serve_job *j)
{
    pthread_mutex_lock(&s->mu);
    bool full = s->stopping || s->q_len == s->q_max;
    if (!full) {
        serve_job_ref(j);
        j->sched = s;
        j->queued = true;
        j->t_submit = qp_now_s();
        s->q[(s->q_head + s->q_len++) % s->q_max] = j;
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
        unsigned at = (s->q_head + i) % s->q_max;
        if (s->q[at] != j)
            continue;
        for (unsigned k = i; k + 1 < s->q_len; k++)
            s->q[(s->q_head + k) % s->q_max] = s->q[(s->q_head + k + 1) % s->q_max];
        s->q_len--;
        j->queued = false;
        atomic_store(&serve_metrics.waiting, s->q_len);
        return;
    }
}

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
    pthread_mutex_lock(&j->mu);
    if (j->session)
        qpack_session_interrupt(j->session);
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_unlock(&s->mu);
    if (was_queued) {
        job_done_cancelled(j, "cancelled before it started");
        serve_job_unref(j);
    }
}

/* ---- a job on a session -------------------------------------------------- */

/* one feed, in its own turn unless the job holds the turn throughout */
static int feed(struct worker *w, struct serve_job *j, const int32_t *ids, size_t n, qpack_error *err)
{
    if (atomic_load(&j->cancel)) {
        err->code = QPACK_ERR_INTERRUPTED;
        snprintf(err->message, sizeof err->message, "cancelled");
        return err->code;
    }
    if (!w->s->job_turns)
        turn_acquire(w->s);
    int rc = qpack_feed(w->session, ids, n, err);
    if (!w->s->job_turns)
        turn_release(w->s);
    return rc;
}

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

static int feed_prompt(struct worker *w, struct serve_job *j, qpack_error *err)
{
    uint32_t keep = reusable_prefix(w->session, j);
    if (qpack_session_rewind(w->session, keep, err))
        return -1;
    atomic_fetch_add(&serve_metrics.cached_tokens, keep);
    double t0 = qp_now_s();
    for (uint32_t at = keep; at < j->n_prompt; at += CHUNK) {
        uint32_t n = j->n_prompt - at < CHUNK ? j->n_prompt - at : CHUNK;
        if (feed(w, j, j->prompt + at, n, err))
            return -1;
    }
    atomic_fetch_add(&serve_metrics.prompt_tokens, j->n_prompt);
    atomic_fetch_add(&serve_metrics.prompt_us, micros(qp_now_s() - t0));
    return 0;
}

/* text of a token through the stop strings; 1 when a stop string ended the reply */
static int emit(struct serve_job *j, struct stop_text *sm, const char *piece, size_t n, qpack_error *err)
{
    const char *out;
    size_t len;
    int hit = stop_text_push(sm, piece, n, &out, &len);
    if (hit < 0 || job_release_text(j, out, len)) {
        err->code = QPACK_ERR_MEMORY;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    return hit;
}

/* the decode loop; returns the finish reason, NULL with err on failure */
static const char *decode(struct worker *w, struct serve_job *j, qpack_sampler *smp, struct stop_text *sm,
                          qpack_error *err)
{
    const qpack_model *m = w->s->m;
    for (;;) {
        int32_t id = qpack_sample(smp, w->session);
        if (j->usage.completion_tokens++ == 0) {
            atomic_fetch_add(&serve_metrics.first_token_us, micros(qp_now_s() - j->t_submit));
            atomic_fetch_add(&serve_metrics.first_tokens, 1);
        }
        if (qpack_token_is_end(m, id))
            return "stop";
        size_t n;
        const char *piece = qpack_decoder_push(w->decoder, id, &n);
        int hit = emit(j, sm, piece, n, err);
        if (hit)
            return hit > 0 ? "stop" : NULL;
        if (j->usage.completion_tokens >= j->max_new || qpack_session_pos(w->session) >= w->s->ctx)
            return "length";
        if (feed(w, j, &id, 1, err))
            return NULL;
    }
}

/* what the decoder and the matcher still hold, at the end of a reply */
static int flush_text(struct worker *w, struct serve_job *j, struct stop_text *sm, const char *finish,
                      qpack_error *err)
{
    size_t n;
    const char *tail = qpack_decoder_finish(w->decoder, true, &n);
    if (!finish || sm->stopped)
        return 0;
    int hit = emit(j, sm, tail, n, err);
    if (hit < 0)
        return -1;
    const char *out;
    stop_text_finish(sm, &out, &n);
    if (!hit && job_release_text(j, out, n)) {
        err->code = QPACK_ERR_MEMORY;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    return 0;
}

static void run_job(struct worker *w, struct serve_job *j)
{
    qpack_error err = {0};
    const char *finish = NULL;
    qpack_sampler *smp = NULL;
    struct stop_text sm;
    stop_text_init(&sm, (const char *const *)j->stops.s, (int)j->stops.n);
    j->usage.prompt_tokens = j->n_prompt;
    if (w->s->job_turns)
        turn_acquire(w->s);
    if (!feed_prompt(w, j, &err) && !qpack_sampler_new(&smp, w->s->m, &j->sp, &err)) {
        double t0 = qp_now_s();
        finish = decode(w, j, smp, &sm, &err);
        atomic_fetch_add(&serve_metrics.decode_us, micros(qp_now_s() - t0));
        atomic_fetch_add(&serve_metrics.completion_tokens, j->usage.completion_tokens);
    }
    if (w->s->job_turns)
        turn_release(w->s);
    if (flush_text(w, j, &sm, finish, &err))
        finish = NULL;
    qpack_sampler_free(smp);
    stop_text_free(&sm);
    if (!finish && err.code == QPACK_ERR_INTERRUPTED)
        atomic_fetch_add(&serve_metrics.cancelled, 1);
    job_done(j, finish, &err);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct serve_sched *s = w->s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->q_len && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        struct serve_job *j = s->q[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_max;
        s->q_len--;
        atomic_store(&serve_metrics.waiting, s->q_len);
        j->queued = false;
        w->job = j;
        pthread_mutex_lock(&j->mu);
        j->state = SERVE_JOB_RUNNING;
        j->session = w->session;
        pthread_mutex_unlock(&j->mu);
        pthread_mutex_unlock(&s->mu);

        atomic_fetch_add(&serve_metrics.busy, 1);
        run_job(w, j);
        atomic_fetch_sub(&serve_metrics.busy, 1);

        pthread_mutex_lock(&s->mu);
        w->job = NULL;
        pthread_mutex_unlock(&s->mu);
        serve_job_unref(j);
    }
}

/* ---- the scheduler ------------------------------------------------------- */

static int open_workers(struct serve_sched *s, qpack_error *err)
{
    const qpack_tokenizer *tok = qpack_model_tokenizer(s->m);
    for (unsigned i = 0; i < s->n_workers; i++) {
        struct worker *w = &s->w[i];
        w->s = s;
        if (qpack_session_new(&w->session, s->m, err) || qpack_decoder_new(&w->decoder, tok, true, err))
            return -1;
    }
    for (unsigned i = 0; i < s->n_workers; i++) {
        int e = pthread_create(&s->w[i].thread, NULL, worker_main, &s->w[i]);
        if (e) {
            err->code = QPACK_ERR_MEMORY;
            snprintf(err->message, sizeof err->message, "cannot start a worker thread: %s", strerror(e));
            return -1;
        }
        s->w[i].started = true;
    }
    return 0;
}

int serve_sched_new(struct serve_sched **out, qpack_model *m, unsigned parallel, unsigned queue_max,
                    qpack_error *err)
{
    *out = NULL;
    struct serve_sched *s = calloc(1, sizeof *s);
    if (!s || !(s->w = calloc(parallel, sizeof *s->w)) || !(s->q = calloc(queue_max ? queue_max : 1, sizeof *s->q))) {
        if (s)
            free(s->w);
        free(s);
        err->code = QPACK_ERR_MEMORY;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    s->m = m;
    s->ctx = qpack_model_get_info(m)->ctx;
    s->n_workers = parallel;
    s->q_max = queue_max;
    s->job_turns = qpack_model_kv_caches(m) < parallel;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->turn_mu, NULL);
    pthread_cond_init(&s->turn_cv, NULL);
    serve_metrics.parallel = parallel;
    serve_metrics.queue_max = queue_max;
    if (open_workers(s, err)) {
        serve_sched_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

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
    for (unsigned i = 0; i < s->n_workers; i++)
        if (s->w[i].job) {
            atomic_store(&s->w[i].job->cancel, true);
            qpack_session_interrupt(s->w[i].session);
        }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (unsigned i = 0; i < s->n_workers; i++)
        if (s->w[i].started) {
            pthread_join(s->w[i].thread, NULL);
            s->w[i].started = false;
        }
}

void serve_sched_free(struct serve_sched *s)
{
    if (!s)
        return;
    serve_sched_stop(s);
    for (unsigned i = 0; i < s->n_workers; i++) {
        qpack_decoder_free(s->w[i].decoder);
        qpack_session_free(s->w[i].session);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->turn_mu);
    pthread_cond_destroy(&s->turn_cv);
    free(s->q);
    free(s->w);
    free(s);
}
