/* serve_job.c - a reply's state: the job a request submits (its text and
 * log probabilities released to the reader, its end, read under its lock),
 * and the reply on its session: started, each token taken through the
 * format, the stop strings and the decoder, finished. serve_sched.c runs
 * the steps that feed it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "serve.h"
#include "serve_sched_int.h"

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
                            .logprobs = -1, .stop_hit = -1, .yes = -1, .no = -1};
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
    qp_buf_free(&j->out);
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

int serve_job_want_scores(struct serve_job *j, const uint32_t *ends, uint32_t n_inputs, int32_t yes, int32_t no)
{
    if (serve_job_want_embeddings(j, ends, n_inputs, 1))
        return -1;
    j->yes = yes;
    j->no = no;
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
    int rc = qp_buf_add(&j->out, p, n);
    if (!rc) {
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
    bool ready = j->out.len || j->state == SERVE_JOB_DONE;
    pthread_mutex_unlock(&j->mu);
    return ready;
}

void job_done_cancelled(struct serve_job *j, const char *why)
{
    qpack_error e = {.code = QPACK_ERR_INTERRUPTED};
    snprintf(e.message, sizeof e.message, "%s", why);
    job_done(j, NULL, &e);
}

int serve_job_take(struct serve_job *j, int timeout_ms, struct qp_buf *buf)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&j->mu);
    while (!j->out.len && j->state != SERVE_JOB_DONE)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT)
            break;
    int rc = j->state;
    if (j->out.len && qp_buf_add(buf, j->out.s, j->out.len))
        rc = -1;
    else
        j->out.len = 0;
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

/* ---- a request on a session ---------------------------------------------- */

/* tokens the session holds that start the prompt, leaving at least one
 * prompt token to feed (its logits give the first new token) */
uint32_t job_reusable_prefix(const qpack_session *ses, const struct serve_job *j)
{
    const int32_t *had = qpack_session_tokens(ses);
    uint32_t n = qpack_session_pos(ses), k = 0;
    while (k < n && k + 1 < j->n_prompt && had[k] == j->prompt[k])
        k++;
    return k;
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
void job_finish(struct serve_sched *s, struct slot *sl, const char *finish, const qpack_error *err)
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
    sched_show_gauges(s);
    pthread_mutex_unlock(&s->mu);
    serve_job_unref(j);
}

/* a job starts on its slot: every state of the last reply cleared, the
 * session rewound to what it shares with the prompt, a sampler, the stop
 * strings */
void job_start(struct serve_sched *s, struct slot *sl)
{
    struct serve_job *j = sl->job;
    qpack_error err = {0};
    clear_reply(sl);
    sl->t_start = qp_now_s();
    atomic_fetch_add(&serve_metrics.queue_us, micros(sl->t_start - j->t_submit));
    sl->fed = job_reusable_prefix(sl->session, j);
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
            job_finish(s, sl, NULL, &err);
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
        job_finish(s, sl, NULL, &err);
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
void job_take_id(struct serve_sched *s, struct slot *sl, int32_t id, uint32_t held)
{
    struct serve_job *j = sl->job;
    qpack_error err = {0};
    if (sl->format && serve_format_take(sl->format, id)) {
        err.code = QPACK_ERR_INTERNAL;
        snprintf(err.message, sizeof err.message, "token %d leaves the response format", id);
        job_finish(s, sl, NULL, &err);
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
        job_finish(s, sl, NULL, &err);
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
    job_finish(s, sl, end, &err);
}

/* After a step that gave the slot's session new logits: the next token */
void job_take_token(struct serve_sched *s, struct slot *sl)
{
    job_take_id(s, sl, qpack_sample(sl->sampler, sl->session), qpack_session_pos(sl->session));
}

/* A reply whose every token is the argmax of the model's logits (no
 * penalty, bias, format or log probabilities) decodes by lookup when the
 * server drafts: the same tokens in fewer steps. */
bool job_drafts(const struct serve_sched *s, const struct slot *sl)
{
    const qpack_sampler_params *p = &sl->job->sp;
    return s->lookup && sl->decoding && p->temperature <= 0 && !p->n_logit_bias && p->repeat_penalty == 1 &&
           p->presence_penalty == 0 && p->frequency_penalty == 0 && !sl->format && sl->job->logprobs < 0;
}
