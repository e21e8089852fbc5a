/* serve_reply.c - the OpenAI reply protocol of `qrun serve`: a generation
 * request's jobs submitted, then its replies sent whole (one JSON body once
 * every job has ended) or streamed as server-sent events; a chat's text
 * split into reasoning and answer, its tool calls read. serve_http.c
 * routes the request here once its body has come. */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_http.h"
#include "buf.h"
#include "think_text.h"

#define STREAM_BLOCK 16384


/* The prompt's text for echo, appended to text: as given, or its ids
 * detokenized. -1 when out of memory. */
static int echo_text(const struct serve_model *m, const struct serve_request *q, const int32_t *ids, size_t n,
                     struct qp_buf *text)
{
    if (q->prompt)
        return qp_buf_adds(text, q->prompt);
    qpack_error err;
    const qpack_tokenizer *tok = qpack_model_tokenizer(m->model);
    char *s = NULL;
    size_t len = 0;
    /* ids without a tokenizer: no text to echo */
    if (tok && qpack_detokenize(tok, ids, n, false, &s, &len, &err))
        return -1;
    int rc = qp_buf_add(text, s ? s : "", len);
    free(s);
    return rc;
}

/* a job that ended without a reply: the server stopping, or a failure */
void reply_job_failure(const qpack_error *err, struct serve_error *e)
{
    if (err->code == QPACK_ERR_INTERRUPTED)
        serve_error_set(e, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down");
    else
        serve_error_set(e, 500, "server_error", qpack_status_name(err->code), NULL, "%s", err->message);
}

/* A chat reply's text as its reasoning and its answer (think_text.h), as
 * it streams: split_push adds text, split_take hands out what has come. */
struct split_text {
    struct think_text think;
    struct qp_buf buf[2];       /* [THINK_REASONING], [THINK_ANSWER] */
};

static int collect_part(void *arg, enum think_part part, const char *text, size_t n)
{
    struct split_text *sp = arg;
    return qp_buf_add(&sp->buf[part], text, n);
}

static int split_push(struct split_text *sp, const char *text, size_t n, bool last)
{
    if (think_text_push(&sp->think, text, n, collect_part, sp))
        return -1;
    return last ? think_text_finish(&sp->think, collect_part, sp) : 0;
}

/* What was split since the last take (a part with none: NULL); the
 * buffers are then emptied. */
static struct serve_reply_text split_take(struct split_text *sp)
{
    const struct qp_buf *answer = &sp->buf[THINK_ANSWER], *reasoning = &sp->buf[THINK_REASONING];
    struct serve_reply_text t = {.content = answer->len ? answer->s : NULL, .content_len = answer->len,
                                 .reasoning = reasoning->len ? reasoning->s : NULL, .reasoning_len = reasoning->len};
    sp->buf[THINK_ANSWER].len = sp->buf[THINK_REASONING].len = 0;
    return t;
}

static void split_free(struct split_text *sp)
{
    qp_buf_free(&sp->buf[0]);
    qp_buf_free(&sp->buf[1]);
}

/* One whole reply as the response shows it: a chat's text split into
 * reasoning and answer, its tool calls read, its log probabilities taken;
 * what it holds is freed by choice_out_free. */
struct choice_out {
    struct split_text split;
    struct serve_tool_calls calls;
    struct serve_logprob *lps;
    size_t n_lps, lps_cap;
    struct serve_reply_text t;
    const char *finish;         /* NULL: the job failed (err) */
    qpack_error err;
    struct serve_usage usage;
};

static int choice_out(struct request *r, struct choice *ch, struct choice_out *o)
{
    *o = (struct choice_out){0};
    think_text_init(&o->split.think);
    o->finish = serve_job_result(ch->job, &o->usage, &o->err);
    if (!o->finish)
        return 0;
    if (r->meta.logprobs && serve_job_take_logprobs(ch->job, &o->lps, &o->n_lps, &o->lps_cap))
        return -1;
    const char *text = ch->text.s ? ch->text.s : "";
    if (r->meta.kind != SERVE_CHAT) {
        o->t = (struct serve_reply_text){.content = text, .content_len = ch->text.len, .offset = r->echo_len};
    } else {
        if (split_push(&o->split, text, ch->text.len, true))
            return -1;
        o->t = split_take(&o->split);
        if (r->meta.tools && serve_take_tool_calls(o->t.content ? o->t.content : "", o->t.content_len, &o->calls))
            return -1;
        if (o->calls.n) {
            o->t.content = o->calls.content_len ? o->calls.content : NULL, o->t.content_len = o->calls.content_len;
            o->t.calls = o->calls.v, o->t.n_calls = o->calls.n;
            if (!strcmp(o->finish, "stop"))     /* a reply cut at max_tokens stays "length" */
                o->finish = "tool_calls";
        }
    }
    o->t.lps = o->lps, o->t.n_lps = o->n_lps;
    return 0;
}

static void choice_out_free(struct choice_out *o)
{
    serve_tool_calls_clear(&o->calls);
    split_free(&o->split);
    free(o->lps);
}

/* A reply as one JSON body, its n choices in it: sent once every job has
 * ended; until then the request is suspended and parked on one that runs,
 * and this runs again when it resumes. */
/* Takes what the request's jobs released; *done once every one has ended.
 * Otherwise the answer to return now: MHD_NO when the client is gone (it
 * closes the connection; on_completed cancels the jobs) or out of memory,
 * MHD_YES with the connection parked until a job moves. */
enum MHD_Result reply_await_jobs(struct serve_http *h, struct MHD_Connection *c, struct request *r, bool *done)
{
    *done = false;
    if (serve_conn_gone(h->conns, r->conn)) {
        r->status = CLIENT_GONE;
        return MHD_NO;
    }
    for (unsigned k = 0; k < r->n_ch; k++) {
        struct choice *ch = &r->ch[k];
        int state = serve_job_take(ch->job, 0, &ch->text);
        if (state < 0)
            return MHD_NO;
        if (state != SERVE_JOB_DONE) {
            MHD_suspend_connection(c);
            serve_conn_park(h->conns, r->conn, c, ch->job);
            return MHD_YES;
        }
    }
    *done = true;
    return MHD_YES;
}

enum MHD_Result reply_whole(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    bool done;
    enum MHD_Result waiting = reply_await_jobs(h, c, r, &done);
    if (!done)
        return waiting;
    struct choice_out out[SERVE_MAX_CHOICES];
    struct serve_reply_text t[SERVE_MAX_CHOICES];
    const char *finish[SERVE_MAX_CHOICES];
    int failed = -1, rc = 0;
    unsigned made = 0;
    for (; made < r->n_ch && !rc; made++) {
        rc = choice_out(r, &r->ch[made], &out[made]);
        t[made] = out[made].t;
        finish[made] = out[made].finish;
        if (!rc && !finish[made] && failed < 0)
            failed = (int)made;
    }
    /* the usage of all: the prompt once, every choice's tokens; the
     * timings of the longest */
    r->usage = made ? out[0].usage : (struct serve_usage){0};
    for (unsigned k = 1; k < made; k++) {
        r->usage.completion_tokens += out[k].usage.completion_tokens;
        if (out[k].usage.predicted_ms > r->usage.predicted_ms)
            r->usage.predicted_ms = out[k].usage.predicted_ms;
    }
    enum MHD_Result sent;
    if (rc) {
        sent = http_fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
    } else if (failed >= 0) {
        struct serve_error e;
        reply_job_failure(&out[failed].err, &e);
        sent = http_send_error(c, r, &e);
    } else if (r->resp) {
        sent = http_send_json(c, r, 200, serve_resp_json(r->resp, &t[0], finish[0], &r->usage));
    } else if (r->meta.anthropic) {
        sent = http_send_json(c, r, 200, serve_message_json(&r->meta, &t[0], finish[0],
                                                            serve_job_stop_string(r->ch[0].job), &r->usage));
    } else {
        sent = http_send_json(c, r, 200, serve_choices_json(&r->meta, t, finish, r->n_ch, &r->usage));
    }
    for (unsigned k = 0; k < made; k++)
        choice_out_free(&out[k]);
    return sent;
}

/* ---- server-sent events -------------------------------------------------- */

/* one of a stream's n replies: its job and what is still to send of it */
struct stream_choice {
    unsigned index;
    struct serve_job *job;
    bool role_sent, ended;
    const char *finish;         /* once ended: NULL when the job failed (err) */
    qpack_error err;
    struct serve_usage usage;
    struct qp_buf text;         /* taken from the job */
    struct split_text split;    /* a chat's text: reasoning and answer */
    struct serve_tool_text tools;   /* with tools offered: the answer from a <tool_call> on */
    struct serve_logprob *lps;  /* with logprobs: those taken, not sent yet */
    size_t n_lps, lps_cap;
    size_t offset;              /* completions: the text_offset of the next token */
};

struct stream {
    struct serve_http *h;
    struct MHD_Connection *c;
    struct serve_conn *conn;
    struct request *r;          /* NULL once the request is gone */
    struct serve_reply_meta meta;
    char id[48];
    bool include_usage, finished;
    struct stream_choice ch[SERVE_MAX_CHOICES];
    unsigned n_ch;
    struct serve_message_events anthropic;  /* meta.anthropic: the content blocks sent */
    struct qp_buf out;          /* event bytes to send */
    size_t out_off;             /* of out.len, the bytes sent */
    struct serve_resp *resp;    /* /v1/responses: its events instead of chunks */
};

static int add_bytes(struct stream *st, const char *p, size_t n)
{
    return qp_buf_add(&st->out, p, n);
}

/* "data: JSON\n\n"; takes json */
static int add_event(struct stream *st, char *json)
{
    int rc = !json || add_bytes(st, "data: ", 6) || add_bytes(st, json, strlen(json)) || add_bytes(st, "\n\n", 2);
    free(json);
    return rc ? -1 : 0;
}

/* events (SSE text) already made (serve_responses.c's, Anthropic's); takes them */
static int add_events(struct stream *st, char *events)
{
    int rc = !events || add_bytes(st, events, strlen(events));
    free(events);
    return rc ? -1 : 0;
}

/* A chunk of t, with the log probabilities taken since the last (with
 * none, no chunk unless all: the reply's end) */
static int send_chunk(struct stream *st, struct stream_choice *sc, struct serve_reply_text t, bool all)
{
    if (st->resp)
        return t.content_len || t.n_calls ? add_events(st, serve_resp_stream_text(st->resp, &t)) : 0;
    if (st->meta.anthropic)
        return add_events(st, serve_message_delta_events(&st->anthropic, &t));
    if (st->meta.logprobs && serve_job_take_logprobs(sc->job, &sc->lps, &sc->n_lps, &sc->lps_cap))
        return -1;
    bool text = t.content_len || t.reasoning_len || t.n_calls;
    if (!text && !(all && sc->n_lps))
        return 0;
    if (st->meta.kind == SERVE_COMPLETION && !t.content)
        t.content = "";
    t.lps = sc->lps, t.n_lps = sc->n_lps, t.offset = sc->offset, t.index = sc->index;
    int rc = add_event(st, serve_chunk_json(&st->meta, &t, false, NULL));
    for (size_t i = 0; i < sc->n_lps; i++) {
        size_t n = 0;
        qpack_token_bytes(st->meta.tok, sc->lps[i].id, &n);
        sc->offset += n;
    }
    sc->n_lps = 0;
    return rc;
}

/* A chat's text as a chunk; with tools offered, the answer goes through
 * the tool-call holder first (what may be the start of a call is held) */
static int send_chat_text(struct stream *st, struct stream_choice *sc, struct serve_reply_text t, bool all)
{
    char *shown = NULL;
    if (st->meta.tools && t.content_len) {
        size_t n;
        if (serve_tool_text_push(&sc->tools, t.content, t.content_len, &shown, &n))
            return -1;
        t.content = shown, t.content_len = n;
    }
    int rc = send_chunk(st, sc, t, all);
    free(shown);
    return rc;
}

/* the calls held at the end of a reply that offered tools, as one chunk
 * (with what of the held text is not a call); its finish becomes tool_calls */
static int send_tool_calls(struct stream *st, struct stream_choice *sc)
{
    struct serve_tool_calls calls;
    if (serve_tool_text_finish(&sc->tools, &calls))
        return -1;
    struct serve_reply_text t = {.content = calls.content_len ? calls.content : NULL,
                                 .content_len = calls.content_len, .calls = calls.v, .n_calls = calls.n};
    int rc = send_chunk(st, sc, t, true);
    if (calls.n && !strcmp(sc->finish, "stop"))
        sc->finish = "tool_calls";
    serve_tool_calls_clear(&calls);
    return rc;
}

/* a reply's end: what the splitter and the tool-call holder still held,
 * then its chunk with the finish reason */
static int end_choice(struct stream *st, struct stream_choice *sc)
{
    sc->ended = true;
    sc->finish = serve_job_result(sc->job, &sc->usage, &sc->err);
    if (!sc->finish)
        return 0;
    int rc;
    if (st->meta.kind == SERVE_CHAT)
        rc = split_push(&sc->split, "", 0, true) || send_chat_text(st, sc, split_take(&sc->split), !st->meta.tools) ||
             (st->meta.tools && send_tool_calls(st, sc));
    else
        rc = send_chunk(st, sc, (struct serve_reply_text){0}, true);  /* log probabilities left */
    if (st->resp)
        return rc || add_events(st, serve_resp_stream_end(st->resp, sc->finish, &sc->usage));
    if (st->meta.anthropic)
        return rc || add_events(st, serve_message_end_events(&st->anthropic, sc->finish, serve_job_stop_string(sc->job),
                                                             &sc->usage));
    return rc || add_event(st, serve_final_chunk_json(&st->meta, sc->index, sc->finish, &sc->usage));
}

/* every reply has ended: the usage of all (the prompt once, every reply's
 * tokens), or the first failure's error, and [DONE] */
static int finish_stream(struct stream *st)
{
    struct serve_usage u = st->ch[0].usage;
    const struct stream_choice *failed = NULL;
    for (unsigned k = 0; k < st->n_ch; k++) {
        if (!st->ch[k].finish && !failed)
            failed = &st->ch[k];
        if (k) {
            u.completion_tokens += st->ch[k].usage.completion_tokens;
            if (st->ch[k].usage.predicted_ms > u.predicted_ms)
                u.predicted_ms = st->ch[k].usage.predicted_ms;
        }
    }
    if (st->r)
        st->r->usage = u;
    int rc = 0;
    if (st->resp) {             /* the Responses stream ends with its last event */
        struct serve_error e;
        if (failed)
            reply_job_failure(&failed->err, &e);
        st->finished = true;
        return failed ? add_events(st, serve_resp_stream_failed(st->resp, &e)) : 0;
    }
    if (st->meta.anthropic) {   /* its end went out with the reply's: an error, or nothing */
        struct serve_error e;
        st->finished = true;
        if (failed)
            reply_job_failure(&failed->err, &e);
        return failed ? add_events(st, serve_message_error_event(&e)) : 0;
    }
    if (failed) {
        struct serve_error e;
        reply_job_failure(&failed->err, &e);
        rc = add_event(st, serve_error_json(&e));
    } else if (st->include_usage) {
        rc = add_event(st, serve_usage_chunk_json(&st->meta, &u));
    }
    st->finished = true;
    return rc || add_bytes(st, "data: [DONE]\n\n", 14) ? -1 : 0;
}

static int produce_choice(struct stream *st, struct stream_choice *sc)
{
    if (!sc->role_sent) {
        sc->role_sent = true;
        if (st->resp) {
            if (add_events(st, serve_resp_stream_start(st->resp)))
                return -1;
        } else if (st->meta.anthropic) {
            if (add_events(st, serve_message_start_events(&st->meta)))
                return -1;
        } else if (st->meta.kind == SERVE_CHAT) {
            struct serve_reply_text t = {.index = sc->index};
            if (add_event(st, serve_chunk_json(&st->meta, &t, true, NULL)))
                return -1;
        }
    }
    int state = serve_job_take(sc->job, 0, &sc->text);
    if (state < 0)
        return -1;
    if (sc->text.len) {
        struct serve_reply_text t = {.content = sc->text.s, .content_len = sc->text.len};
        int rc;
        if (st->meta.kind == SERVE_CHAT)
            rc = split_push(&sc->split, sc->text.s, sc->text.len, false) ||
                 send_chat_text(st, sc, split_take(&sc->split), false);
        else
            rc = send_chunk(st, sc, t, false);
        sc->text.len = 0;
        if (rc)
            return -1;
    }
    return state == SERVE_JOB_DONE ? end_choice(st, sc) : 0;
}

/* what every reply has to send now; the stream's end once all have ended */
static int produce(struct stream *st)
{
    bool all_ended = true;
    for (unsigned k = 0; k < st->n_ch; k++) {
        struct stream_choice *sc = &st->ch[k];
        if (!sc->ended && produce_choice(st, sc))
            return -1;
        all_ended = all_ended && sc->ended;
    }
    return all_ended ? finish_stream(st) : 0;
}

/* a reply still running, to park the connection on */
static struct serve_job *running_job(const struct stream *st)
{
    for (unsigned k = 0; k < st->n_ch; k++)
        if (!st->ch[k].ended)
            return st->ch[k].job;
    return st->ch[0].job;
}

static void cancel_stream(struct stream *st)
{
    for (unsigned k = 0; k < st->n_ch; k++)
        serve_job_cancel(st->ch[k].job);
}

/* libmicrohttpd's content reader: with nothing to send, the connection is
 * suspended and parked until a running reply has more (0: nothing now) */
static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream *st = cls;
    if (st->out_off == st->out.len) {
        if (st->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->out_off = st->out.len = 0;
        if (serve_conn_gone(st->h->conns, st->conn) || produce(st)) {
            cancel_stream(st);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (st->out.len == 0) {
            MHD_suspend_connection(st->c);
            serve_conn_park(st->h->conns, st->conn, st->c, running_job(st));
            return 0;
        }
    }
    size_t n = st->out.len - st->out_off < max ? st->out.len - st->out_off : max;
    memcpy(buf, st->out.s + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

static void free_stream(void *cls)
{
    struct stream *st = cls;
    if (!st->finished)
        cancel_stream(st);      /* the client went away */
    if (st->r)
        st->r->stream = NULL;
    for (unsigned k = 0; k < st->n_ch; k++) {
        struct stream_choice *sc = &st->ch[k];
        serve_job_unref(sc->job);
        qp_buf_free(&sc->text);
        split_free(&sc->split);
        serve_tool_text_free(&sc->tools);
        free(sc->lps);
    }
    qp_buf_free(&st->out);
    serve_resp_free(st->resp);
    free(st);
}

/* The request's replies as server-sent events; the stream takes the jobs
 * (and an echo's text, its first chunk's) from r. */
static enum MHD_Result reply_stream(struct serve_http *h, struct MHD_Connection *c, struct request *r,
                                    bool include_usage)
{
    const struct serve_reply_meta *meta = &r->meta;
    struct stream *st = calloc(1, sizeof *st);
    if (!st)
        return MHD_NO;          /* on_completed cancels the jobs */
    *st = (struct stream){.h = h, .c = c, .conn = r->conn, .r = r, .meta = *meta, .include_usage = include_usage,
                          .n_ch = r->n_ch, .resp = r->resp};
    snprintf(st->id, sizeof st->id, "%s", meta->id);
    st->meta.id = st->id;
    for (unsigned k = 0; k < r->n_ch; k++) {
        struct stream_choice *sc = &st->ch[k];
        *sc = (struct stream_choice){.index = k, .job = r->ch[k].job, .text = r->ch[k].text,
                                     .offset = r->echo_len};
        think_text_init(&sc->split.think);
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, read_stream, st,
                                                                  free_stream);
    if (!resp) {
        free(st);
        return MHD_NO;
    }
    for (unsigned k = 0; k < r->n_ch; k++)
        r->ch[k] = (struct choice){0};
    r->n_ch = 0;
    r->resp = NULL;
    r->stream = st;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    r->status = 200;
    r->responded = true;
    return ok;
}

/* The request's n jobs, submitted: the first feeds the prompt (ids, which
 * it takes), the others wait and copy it, each with the next seed. 0, or
 * -1 when out of memory, 1 when the queue is full (nothing submitted). */
static int new_jobs(struct serve_http *h, struct request *r, const struct serve_request *q, int32_t *ids, size_t n,
                    unsigned n_ch)
{
    qpack_sampler_params sp = q->sampling;
    int rc = 0;
    for (unsigned k = 0; k < n_ch && !rc; k++) {
        int32_t *mine = k ? malloc(n * sizeof *ids) : ids;
        struct serve_job *j = mine ? serve_job_new(mine, (uint32_t)n, q->has_max_tokens ? q->max_tokens : UINT32_MAX,
                                                   &sp, &q->stops) : NULL;
        if (!j) {
            free(mine);
            rc = -1;
            break;
        }
        if (k) {
            memcpy(mine, ids, n * sizeof *ids);
            serve_job_follow(j, r->ch[0].job);
        }
        if (q->logprobs)
            serve_job_want_logprobs(j, q->top_logprobs);
        if (q->format)
            serve_job_want_format(j, q->format, q->think);
        serve_job_watch(j, serve_conns_wake, h->conns);
        r->ch[k].job = j;
        r->n_ch = k + 1;
        sp.seed++;
    }
    struct serve_job *jobs[SERVE_MAX_CHOICES];
    for (unsigned k = 0; k < r->n_ch; k++)
        jobs[k] = r->ch[k].job;
    if (!rc && serve_sched_submit(r->m->sched, jobs, r->n_ch)) {
        atomic_fetch_add(&serve_metrics.rejected, 1);
        rc = 1;
    }
    if (rc) {
        for (unsigned k = 0; k < r->n_ch; k++) {
            serve_job_unref(r->ch[k].job);
            r->ch[k].job = NULL;
        }
        r->n_ch = 0;
    }
    return rc;
}

enum MHD_Result serve_generate(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    enum serve_kind kind = r->ep != SERVE_EP_COMPLETIONS ? SERVE_CHAT : SERVE_COMPLETION;
    struct serve_request q;
    struct serve_error e;
    struct serve_model_ref model = http_model_ref(r->m);
    model.max_choices = serve_metrics.parallel + serve_metrics.queue_max;
    bool anthropic = r->ep == SERVE_EP_MESSAGES;
    const char *body = r->body ? r->body : "";
    if (r->ep == SERVE_EP_RESPONSES ? serve_parse_responses(body, r->len, &model, &q, &r->resp, &e)
        : anthropic                 ? serve_parse_messages(body, r->len, false, &model, &q, &e)
                                    : serve_parse_request(kind, body, r->len, &model, &q, &e))
        return http_send_error(c, r, &e);
    int32_t *ids;
    size_t n;
    if (http_prompt_ids(r->m, &q, &ids, &n, &e)) {
        serve_request_free(&q);
        return http_send_error(c, r, &e);
    }
    if (n > r->m->ctx) {
        free(ids);
        serve_request_free(&q);
        return http_fail(c, r, 400, "invalid_request_error", "context_length_exceeded",
                         r->resp ? "input" : kind == SERVE_CHAT ? "messages" : "prompt",
                         "This model's maximum context length is %u tokens, but the prompt has %zu tokens", r->m->ctx, n);
    }
    /* echo: each reply's text starts with the prompt's */
    unsigned n_ch = q.n_choices ? q.n_choices : 1;
    for (unsigned k = 0; k < n_ch && q.echo; k++) {
        struct choice *ch = &r->ch[k];
        /* the others' copies of the first's */
        if (k ? qp_buf_add(&ch->text, r->ch[0].text.s, r->ch[0].text.len) : echo_text(r->m, &q, ids, n, &ch->text)) {
            free(ids);
            serve_request_free(&q);
            return http_fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    size_t echo_len = r->ch[0].text.len;
    bool stream = q.stream, include_usage = q.include_usage, tools = q.n_tools > 0, logprobs = q.logprobs;
    int rc = new_jobs(h, r, &q, ids, n, n_ch);
    serve_request_free(&q);
    if (rc)
        return rc < 0 ? http_fail(c, r, 500, "server_error", NULL, NULL, "out of memory")
                      : http_fail(c, r, 503, "server_error", "server_busy", NULL,
                                  "The server is busy: %u requests are running and %u waiting; try again later",
                                  serve_metrics.parallel, serve_metrics.queue_max);
    if (r->resp)
        snprintf(r->id, sizeof r->id, "%s", serve_resp_id(r->resp));
    else
        serve_random_id(anthropic ? "msg_" : kind == SERVE_CHAT ? "chatcmpl-" : "cmpl-", r->id, sizeof r->id);
    r->meta = (struct serve_reply_meta){.kind = kind, .tools = tools, .logprobs = logprobs,
                                        .tok = qpack_model_tokenizer(r->m->model), .id = r->id,
                                        .created = (long long)time(NULL), .model = r->m->id,
                                        .anthropic = anthropic, .prompt_tokens = (uint32_t)n};
    r->echo_len = echo_len;
    if (stream)
        return reply_stream(h, c, r, include_usage);
    return reply_whole(h, c, r);
}

void stream_forget_request(struct stream *st)
{
    st->r = NULL;
}
