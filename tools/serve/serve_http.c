/* serve_http.c - the HTTP side of `qrun serve`, on libmicrohttpd.
 *
 * A few epoll threads (HTTP_THREADS) run every connection, so an idle or
 * slow one costs a socket, not a thread, and none of their callbacks
 * waits: a request parses its body, tokenizes the prompt and queues its
 * job, then is suspended while the job has nothing to send and parked in
 * serve_conn.c, whose watcher resumes it when text comes, cancels the job
 * of a client that hangs up, and closes a connection whose request does
 * not arrive whole within --timeout.
 *
 * Routes: POST /v1/chat/completions, POST /v1/completions, POST
 * /v1/responses (serve_responses.c shapes its replies), GET /v1/models,
 * GET /v1/models/ID, GET /health, GET /metrics, GET / (the chat page), and
 * llama-server's POST /tokenize, POST /detokenize, GET /props, GET /slots,
 * and Anthropic's POST /v1/messages and /v1/messages/count_tokens (in
 * serve_anthropic.c's bodies and events). Every error is OpenAI's JSON
 * error object with its HTTP status (Anthropic's on its routes). With an
 * API key, everything but / and /health needs "Authorization: Bearer KEY"
 * or "x-api-key: KEY".
 * Request bodies are JSON whatever their Content-Type says (curl -d sends
 * another); a browser request from another site's page is refused by its
 * Origin header instead (same_origin), and CORS is never granted. */
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"
#include "clock.h"
#include "think_text.h"

#define HTTP_THREADS 2          /* libmicrohttpd's epoll threads */
#define STREAM_BLOCK 16384
#define CLIENT_GONE 499         /* nginx's status for a client that closed its connection */

struct serve_http {
    struct serve_http_config cfg;
    struct MHD_Daemon *d;
    struct serve_conns *conns;
    uint32_t vocab, ctx;
    int32_t end_of_text;        /* <|endoftext|>, which ends an embedding's input; -1: none */
    bool has_sampling;
    qpack_sampler_params sampling[2];   /* the model's, without and with thinking */
    long long started;          /* unix seconds: the model's "created" */
    char log_line[512];         /* libmicrohttpd's last message, for a failed start */
    atomic_bool running;        /* started: messages go to stderr */
    atomic_uint active;         /* requests between their first call and their end */
};

struct stream;

/* one request (MHD's con_cls) */
/* one of a request's n replies: its job and the text taken from it */
struct choice {
    struct serve_job *job;
    char *text;                 /* with echo, the prompt's first */
    size_t text_len, text_cap;
};

struct request {
    enum serve_endpoint ep;
    bool one_model;             /* GET /v1/models/ID */
    size_t echo_len;            /* the prompt's text at each reply's start (echo) */
    char method[16], url[128];  /* for the log line */
    int status;
    bool responded;             /* a response is queued: discard the rest of the body */
    bool too_large;             /* the body passed SERVE_MAX_BODY: dropped */
    size_t dropped;
    char *body;
    size_t len, cap;
    double t0;
    struct serve_usage usage;
    struct serve_conn *conn;    /* its connection's deadline and parking */
    struct choice ch[SERVE_MAX_CHOICES];    /* a whole reply's (n of them), until it is sent */
    unsigned n_ch;
    struct serve_reply_meta meta;
    char id[48];
    struct stream *stream;      /* an SSE response still open */
    struct serve_embed_request embed;   /* /v1/embeddings: its inputs, until it is answered */
    struct serve_resp *resp;    /* /v1/responses: the response, until the reply or its stream takes it */
};

/* ---- responses ----------------------------------------------------------- */

static enum MHD_Result send_body(struct MHD_Connection *c, struct request *r, int status, char *body,
                                 const char *type, const char *header, const char *value)
{
    if (!body)
        return MHD_NO;          /* out of memory: drop the connection */
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    if (header)
        MHD_add_response_header(resp, header, value);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->responded = true;
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, struct request *r, int status, char *body)
{
    return send_body(c, r, status, body, "application/json", NULL, NULL);
}

static bool is_anthropic(enum serve_endpoint ep)
{
    return ep == SERVE_EP_MESSAGES || ep == SERVE_EP_COUNT_TOKENS;
}

/* the error body in the shape of the request's API */
static char *error_json(const struct request *r, const struct serve_error *e)
{
    return is_anthropic(r->ep) ? serve_anthropic_error_json(e) : serve_error_json(e);
}

static enum MHD_Result send_error(struct MHD_Connection *c, struct request *r, const struct serve_error *e)
{
    const char *header = NULL, *value = NULL;
    if (e->http == 401)
        header = "WWW-Authenticate", value = "Bearer";
    else if (e->http == 503)
        header = "Retry-After", value = "1";
    return send_body(c, r, e->http, error_json(r, e), "application/json", header, value);
}

static enum MHD_Result fail(struct MHD_Connection *c, struct request *r, int http, const char *type, const char *code,
                            const char *param, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static enum MHD_Result fail(struct MHD_Connection *c, struct request *r, int http, const char *type, const char *code,
                            const char *param, const char *fmt, ...)
{
    struct serve_error e;
    serve_error_set(&e, http, type, code, param, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return send_error(c, r, &e);
}

/* ---- routes and checks before the body ----------------------------------- */

static enum serve_endpoint route(const char *url, const char *model_id, bool *one_model)
{
    static const struct {
        const char *path;
        enum serve_endpoint ep;
    } routes[] = {
        {"/v1/chat/completions", SERVE_EP_CHAT}, {"/v1/completions", SERVE_EP_COMPLETIONS},
        {"/v1/models", SERVE_EP_MODELS}, {"/health", SERVE_EP_HEALTH}, {"/metrics", SERVE_EP_METRICS},
        {"/", SERVE_EP_PAGE}, {"/tokenize", SERVE_EP_TOKENIZE}, {"/detokenize", SERVE_EP_DETOKENIZE},
        {"/props", SERVE_EP_PROPS}, {"/slots", SERVE_EP_SLOTS}, {"/apply-template", SERVE_EP_APPLY_TEMPLATE},
        {"/v1/embeddings", SERVE_EP_EMBEDDINGS}, {"/v1/responses", SERVE_EP_RESPONSES},
        {"/v1/messages", SERVE_EP_MESSAGES}, {"/v1/messages/count_tokens", SERVE_EP_COUNT_TOKENS},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path))
            return routes[i].ep;
    *one_model = !strncmp(url, "/v1/models/", 11) && !strcmp(url + 11, model_id);
    if (*one_model)
        return SERVE_EP_MODELS;
    return SERVE_EP_OTHER;
}

static bool is_generation(enum serve_endpoint ep)
{
    return ep == SERVE_EP_CHAT || ep == SERVE_EP_COMPLETIONS || ep == SERVE_EP_RESPONSES || ep == SERVE_EP_MESSAGES;
}

static bool is_post(enum serve_endpoint ep)
{
    return is_generation(ep) || ep == SERVE_EP_TOKENIZE || ep == SERVE_EP_DETOKENIZE ||
           ep == SERVE_EP_APPLY_TEMPLATE || ep == SERVE_EP_EMBEDDINGS || ep == SERVE_EP_COUNT_TOKENS;
}

/* "Authorization: Bearer KEY", or Anthropic's "x-api-key: KEY"; constant
 * time in the key's length */
static bool authorized(const struct serve_http *h, struct MHD_Connection *c, enum serve_endpoint ep)
{
    if (!h->cfg.api_key || ep == SERVE_EP_PAGE || ep == SERVE_EP_HEALTH)
        return true;
    const char *got = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (got && !strncasecmp(got, "Bearer ", 7))
        got += 7;
    else if (!(got = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key")))
        return false;
    size_t n = strlen(h->cfg.api_key);
    if (strlen(got) != n)
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(got[i] ^ h->cfg.api_key[i]);
    return diff == 0;
}

/* the headers named `name` (any case) the request has */
struct header_count {
    const char *name;
    unsigned n;
};

static enum MHD_Result count_one(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind, (void)value;
    struct header_count *h = cls;
    h->n += key && !strcasecmp(key, h->name);
    return MHD_YES;
}

static unsigned count_header(struct MHD_Connection *c, const char *name)
{
    struct header_count h = {name, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_one, &h);
    return h.n;
}

/* A request without an Origin header (curl, the SDKs), or whose Origin is
 * this server itself (the chat page). A page of another site can make a
 * browser send a "simple" POST (a text/plain body) without asking first:
 * that Origin is refused, so bodies need no particular Content-Type. */
static bool same_origin(struct MHD_Connection *c)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (!origin)
        return true;
    if (!strncasecmp(origin, "http://", 7))
        origin += 7;
    else if (!strncasecmp(origin, "https://", 8))
        origin += 8;
    else
        return false;
    return host && !strcasecmp(origin, host);
}

/* the first call of a request: everything that does not need the body.
 * Returns MHD_YES to go on reading it (r->responded when answered). */
static enum MHD_Result check_head(struct serve_http *h, struct MHD_Connection *c, struct request *r,
                                  const char *url, const char *method)
{
    if (r->ep == SERVE_EP_OTHER)
        return fail(c, r, 404, "invalid_request_error", "not_found", NULL, "No route for %.16s %.200s", method, url);
    const char *want = is_post(r->ep) ? "POST" : "GET";
    if (strcmp(method, want) && !(strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0)) {
        struct serve_error e;
        serve_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%.200s takes %s, not %.16s",
                        url, want, method);
        return send_body(c, r, 405, error_json(r, &e), "application/json", "Allow", want);
    }
    if (!authorized(h, c, r->ep))
        return fail(c, r, 401, "invalid_request_error", "invalid_api_key", NULL,
                    "Missing or incorrect API key: send the header Authorization: Bearer KEY (or x-api-key: KEY)");
    if (!is_post(r->ep))
        return MHD_YES;
    /* a body two parsers could delimit differently (request smuggling, RFC
     * 9112 section 6.3): refused, and the connection closed after */
    unsigned lengths = count_header(c, "Content-Length");
    if (lengths > 1 || (lengths && count_header(c, "Transfer-Encoding"))) {
        struct serve_error e;
        serve_error_set(&e, 400, "invalid_request_error", "ambiguous_length", NULL,
                        "A request with %s: where its body ends is ambiguous",
                        lengths > 1 ? "two Content-Length headers" : "both Content-Length and Transfer-Encoding");
        return send_body(c, r, 400, error_json(r, &e), "application/json", "Connection", "close");
    }
    if (!same_origin(c))
        return fail(c, r, 403, "invalid_request_error", "cross_origin", NULL,
                    "A request from another site's page (its Origin header names another host) is refused");
    const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (length && strtoull(length, NULL, 10) > SERVE_MAX_BODY)
        return fail(c, r, 413, "invalid_request_error", "request_too_large", NULL,
                    "The body has %.24s bytes: at most %u", length, SERVE_MAX_BODY);
    return MHD_YES;
}

/* A body without a Content-Length (chunked) that grows past the limit:
 * libmicrohttpd takes a response only before the body or after all of
 * it, so the rest is read and dropped, and the 413 goes out at the end --
 * unless the client sends more than DISCARD_MAX, then the connection is
 * closed. */
#define DISCARD_MAX (16u * SERVE_MAX_BODY)

static enum MHD_Result take_body(struct request *r, const char *data, size_t n)
{
    if (r->too_large || r->len + n > SERVE_MAX_BODY) {
        r->too_large = true;
        r->dropped += n;
        return r->dropped > DISCARD_MAX ? MHD_NO : MHD_YES;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *b = realloc(r->body, cap);
        if (!b)
            return MHD_NO;
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = 0;
    return MHD_YES;
}

/* ---- GET endpoints ------------------------------------------------------- */

static enum MHD_Result serve_get(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    switch (r->ep) {
    case SERVE_EP_HEALTH:
        return send_json(c, r, 200, strdup("{\"status\":\"ok\"}"));
    case SERVE_EP_MODELS:
        return send_json(c, r, 200, serve_models_json(h->cfg.model_id, h->started, r->one_model, h->ctx,
                                                      qpack_model_get_info(h->cfg.model)->max_positions, h->vocab));
    case SERVE_EP_PROPS: {
        const qpack_model_info *i = qpack_model_get_info(h->cfg.model);
        struct serve_props p = {.model_id = h->cfg.model_id, .model_path = i->path, .format = i->format,
                                .backend = i->backend, .ctx = h->ctx, .ctx_train = i->max_positions,
                                .vocab = h->vocab, .parallel = serve_metrics.parallel,
                                .sampling = h->has_sampling ? &h->sampling[0] : NULL};
        return send_json(c, r, 200, serve_props_json(&p));
    }
    case SERVE_EP_SLOTS: {
        struct serve_slot_info slots[64];
        unsigned n = serve_sched_slots(h->cfg.sched, slots, 64);
        return send_json(c, r, 200, serve_slots_json(slots, n, h->ctx));
    }
    case SERVE_EP_METRICS:
        return send_body(c, r, 200, serve_metrics_text(h->cfg.model), "text/plain; version=0.0.4; charset=utf-8",
                         NULL, NULL);
    case SERVE_EP_PAGE: {
        char *page = malloc(serve_page_html_len + 1);
        if (page)
            memcpy(page, serve_page_html, serve_page_html_len + 1);
        return send_body(c, r, 200, page, "text/html; charset=utf-8", "Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                         "connect-src 'self'; img-src data:");
    }
    default:
        return MHD_NO;
    }
}

/* ---- llama-server's token endpoints -------------------------------------- */

static enum MHD_Result serve_tokens(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    const qpack_tokenizer *tok = qpack_model_tokenizer(h->cfg.model);
    if (!tok)
        return fail(c, r, 400, "invalid_request_error", NULL, NULL, "the model carries no tokenizer");
    struct serve_error e;
    char *out;
    const char *body = r->body ? r->body : "";
    int rc = r->ep == SERVE_EP_TOKENIZE ? serve_tokenize_reply(tok, body, r->len, &out, &e)
                                        : serve_detokenize_reply(tok, h->vocab, body, r->len, &out, &e);
    return rc ? send_error(c, r, &e) : send_json(c, r, 200, out);
}

/* ---- generation ---------------------------------------------------------- */

#define BAD_PROMPT(e, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, "prompt", __VA_ARGS__), -1)

/* ids given as such, checked against the vocabulary */
static int given_ids(const struct serve_http *h, const struct serve_request *q, int32_t **ids, size_t *n,
                     struct serve_error *e)
{
    for (size_t i = 0; i < q->n_prompt_ids; i++)
        if ((uint32_t)q->prompt_ids[i] >= h->vocab)
            return BAD_PROMPT(e, "token id %d is outside the vocabulary (0 to %u)", q->prompt_ids[i], h->vocab - 1);
    if (!(*ids = malloc(q->n_prompt_ids * sizeof **ids)))
        return BAD_PROMPT(e, "out of memory");
    memcpy(*ids, q->prompt_ids, q->n_prompt_ids * sizeof **ids);
    *n = q->n_prompt_ids;
    return 0;
}

/* the prompt's ids: the messages through Qwen3's chat template, or the
 * text, tokenized; or the ids given */
static int prompt_ids(const struct serve_http *h, const struct serve_request *q, int32_t **ids, size_t *n,
                      struct serve_error *e)
{
    *ids = NULL;
    *n = 0;
    if (q->prompt_ids)
        return given_ids(h, q, ids, n, e);
    const qpack_tokenizer *tok = qpack_model_tokenizer(h->cfg.model);
    if (!tok)
        return BAD_PROMPT(e, "the model carries no tokenizer: send the prompt as token ids to /v1/completions");
    qpack_error err;
    char *rendered = NULL;
    const char *text = q->prompt;
    size_t len = text ? strlen(text) : 0;
    if (q->kind == SERVE_CHAT) {
        if (qpack_chat_render_tools(q->msgs, q->n_msgs, (const char *const *)q->tools, q->n_tools, q->think,
                                    &rendered, &len, &err))
            return BAD_PROMPT(e, "%s", err.message);
        text = rendered;
    }
    int rc = qpack_tokenize(tok, text, len, ids, n, &err);
    free(rendered);
    if (rc)
        return BAD_PROMPT(e, "%s", err.message);
    if (*n == 0)
        return BAD_PROMPT(e, "the prompt has no tokens");
    return 0;
}

/* The prompt's text for echo: as given, or its ids detokenized; *text
 * malloc'd. -1 when out of memory. */
static int echo_text(const struct serve_http *h, const struct serve_request *q, const int32_t *ids, size_t n,
                     char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (q->prompt) {
        *len = strlen(q->prompt);
        return (*text = strdup(q->prompt)) ? 0 : -1;
    }
    qpack_error err;
    const qpack_tokenizer *tok = qpack_model_tokenizer(h->cfg.model);
    if (!tok)
        return (*text = strdup("")) ? 0 : -1;       /* ids without a tokenizer: no text to echo */
    return qpack_detokenize(tok, ids, n, false, text, len, &err) ? -1 : 0;
}

/* a job that ended without a reply: the server stopping, or a failure */
static void job_failure(const qpack_error *err, struct serve_error *e)
{
    if (err->code == QPACK_ERR_INTERRUPTED)
        serve_error_set(e, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down");
    else
        serve_error_set(e, 500, "server_error", qpack_status_name(err->code), NULL, "%s", err->message);
}

/* Appends p[0..n) to *buf, which holds *len of its *cap bytes, growing it
 * by doubling; -1 when out of memory (the buffer as it was). */
static int buf_append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n)
            c *= 2;
        char *t = realloc(*buf, c);
        if (!t)
            return -1;
        *buf = t;
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return 0;
}

/* A chat reply's text as its reasoning and its answer (think_text.h), as
 * it streams: split_push adds text, split_take hands out what has come. */
struct split_text {
    struct think_text think;
    char *buf[2];               /* [THINK_REASONING], [THINK_ANSWER] */
    size_t len[2], cap[2];
};

static int collect_part(void *arg, enum think_part part, const char *text, size_t n)
{
    struct split_text *sp = arg;
    return buf_append(&sp->buf[part], &sp->len[part], &sp->cap[part], text, n);
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
    struct serve_reply_text t = {.content = sp->len[THINK_ANSWER] ? sp->buf[THINK_ANSWER] : NULL,
                                 .content_len = sp->len[THINK_ANSWER], .reasoning = sp->len[THINK_REASONING] ? sp->buf[THINK_REASONING] : NULL,
                                 .reasoning_len = sp->len[THINK_REASONING]};
    sp->len[THINK_ANSWER] = sp->len[THINK_REASONING] = 0;
    return t;
}

static void split_free(struct split_text *sp)
{
    free(sp->buf[0]);
    free(sp->buf[1]);
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
    const char *text = ch->text ? ch->text : "";
    if (r->meta.kind != SERVE_CHAT) {
        o->t = (struct serve_reply_text){.content = text, .content_len = ch->text_len, .offset = r->echo_len};
    } else {
        if (split_push(&o->split, text, ch->text_len, true))
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
static enum MHD_Result await_jobs(struct serve_http *h, struct MHD_Connection *c, struct request *r, bool *done)
{
    *done = false;
    if (serve_conn_gone(h->conns, r->conn)) {
        r->status = CLIENT_GONE;
        return MHD_NO;
    }
    for (unsigned k = 0; k < r->n_ch; k++) {
        struct choice *ch = &r->ch[k];
        int state = serve_job_take(ch->job, 0, &ch->text, &ch->text_len, &ch->text_cap);
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

static enum MHD_Result reply_whole(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    bool done;
    enum MHD_Result waiting = await_jobs(h, c, r, &done);
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
        sent = fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
    } else if (failed >= 0) {
        struct serve_error e;
        job_failure(&out[failed].err, &e);
        sent = send_error(c, r, &e);
    } else if (r->resp) {
        sent = send_json(c, r, 200, serve_resp_json(r->resp, &t[0], finish[0], &r->usage));
    } else if (r->meta.anthropic) {
        sent = send_json(c, r, 200, serve_message_json(&r->meta, &t[0], finish[0], serve_job_stop_string(r->ch[0].job),
                                                       &r->usage));
    } else {
        sent = send_json(c, r, 200, serve_choices_json(&r->meta, t, finish, r->n_ch, &r->usage));
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
    char *text;                 /* taken from the job */
    size_t text_len, text_cap;
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
    char *out;                  /* event bytes to send */
    size_t out_len, out_off, out_cap;
    struct serve_resp *resp;    /* /v1/responses: its events instead of chunks */
};

static int add_bytes(struct stream *st, const char *p, size_t n)
{
    return buf_append(&st->out, &st->out_len, &st->out_cap, p, n);
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
            job_failure(&failed->err, &e);
        st->finished = true;
        return failed ? add_events(st, serve_resp_stream_failed(st->resp, &e)) : 0;
    }
    if (st->meta.anthropic) {   /* its end went out with the reply's: an error, or nothing */
        struct serve_error e;
        st->finished = true;
        if (failed)
            job_failure(&failed->err, &e);
        return failed ? add_events(st, serve_message_error_event(&e)) : 0;
    }
    if (failed) {
        struct serve_error e;
        job_failure(&failed->err, &e);
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
    int state = serve_job_take(sc->job, 0, &sc->text, &sc->text_len, &sc->text_cap);
    if (state < 0)
        return -1;
    if (sc->text_len) {
        struct serve_reply_text t = {.content = sc->text, .content_len = sc->text_len};
        int rc;
        if (st->meta.kind == SERVE_CHAT)
            rc = split_push(&sc->split, sc->text, sc->text_len, false) ||
                 send_chat_text(st, sc, split_take(&sc->split), false);
        else
            rc = send_chunk(st, sc, t, false);
        sc->text_len = 0;
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
    if (st->out_off == st->out_len) {
        if (st->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->out_off = st->out_len = 0;
        if (serve_conn_gone(st->h->conns, st->conn) || produce(st)) {
            cancel_stream(st);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (st->out_len == 0) {
            MHD_suspend_connection(st->c);
            serve_conn_park(st->h->conns, st->conn, st->c, running_job(st));
            return 0;
        }
    }
    size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;
    memcpy(buf, st->out + st->out_off, n);
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
        free(sc->text);
        split_free(&sc->split);
        serve_tool_text_free(&sc->tools);
        free(sc->lps);
    }
    free(st->out);
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
                                     .text_len = r->ch[k].text_len, .text_cap = r->ch[k].text_cap,
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
    if (!rc && serve_sched_submit(h->cfg.sched, jobs, r->n_ch)) {
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

static enum MHD_Result serve_generate(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    enum serve_kind kind = r->ep != SERVE_EP_COMPLETIONS ? SERVE_CHAT : SERVE_COMPLETION;
    struct serve_request q;
    struct serve_error e;
    struct serve_model_ref model = {h->cfg.model_id, h->cfg.strict_model, h->vocab};
    if (h->has_sampling)
        model.sampling[0] = &h->sampling[0], model.sampling[1] = &h->sampling[1];
    model.max_choices = serve_metrics.parallel + serve_metrics.queue_max;
    bool anthropic = r->ep == SERVE_EP_MESSAGES;
    const char *body = r->body ? r->body : "";
    if (r->ep == SERVE_EP_RESPONSES ? serve_parse_responses(body, r->len, &model, &q, &r->resp, &e)
        : anthropic                 ? serve_parse_messages(body, r->len, false, &model, &q, &e)
                                    : serve_parse_request(kind, body, r->len, &model, &q, &e))
        return send_error(c, r, &e);
    int32_t *ids;
    size_t n;
    if (prompt_ids(h, &q, &ids, &n, &e)) {
        serve_request_free(&q);
        return send_error(c, r, &e);
    }
    if (n > h->ctx) {
        free(ids);
        serve_request_free(&q);
        return fail(c, r, 400, "invalid_request_error", "context_length_exceeded",
                    r->resp ? "input" : kind == SERVE_CHAT ? "messages" : "prompt",
                    "This model's maximum context length is %u tokens, but the prompt has %zu tokens", h->ctx, n);
    }
    /* echo: each reply's text starts with the prompt's */
    unsigned n_ch = q.n_choices ? q.n_choices : 1;
    for (unsigned k = 0; k < n_ch && q.echo; k++) {
        struct choice *ch = &r->ch[k];
        ch->text = k ? malloc(r->ch[0].text_len + 1) : NULL;
        if (k ? !ch->text : echo_text(h, &q, ids, n, &ch->text, &ch->text_len)) {
            free(ids);
            serve_request_free(&q);
            return fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
        }
        if (k)      /* the others' copies of the first's */
            memcpy(ch->text, r->ch[0].text, r->ch[0].text_len + 1), ch->text_len = r->ch[0].text_len;
        ch->text_cap = ch->text_len + 1;
    }
    size_t echo_len = r->ch[0].text_len;
    bool stream = q.stream, include_usage = q.include_usage, tools = q.n_tools > 0, logprobs = q.logprobs;
    int rc = new_jobs(h, r, &q, ids, n, n_ch);
    serve_request_free(&q);
    if (rc)
        return rc < 0 ? fail(c, r, 500, "server_error", NULL, NULL, "out of memory")
                      : fail(c, r, 503, "server_error", "server_busy", NULL,
                             "The server is busy: %u requests are running and %u waiting; try again later",
                             serve_metrics.parallel, serve_metrics.queue_max);
    if (r->resp)
        snprintf(r->id, sizeof r->id, "%s", serve_resp_id(r->resp));
    else
        serve_random_id(anthropic ? "msg_" : kind == SERVE_CHAT ? "chatcmpl-" : "cmpl-", r->id, sizeof r->id);
    r->meta = (struct serve_reply_meta){.kind = kind, .tools = tools, .logprobs = logprobs,
                                        .tok = qpack_model_tokenizer(h->cfg.model), .id = r->id,
                                        .created = (long long)time(NULL), .model = h->cfg.model_id,
                                        .anthropic = anthropic, .prompt_tokens = (uint32_t)n};
    r->echo_len = echo_len;
    if (stream)
        return reply_stream(h, c, r, include_usage);
    return reply_whole(h, c, r);
}

/* POST /v1/embeddings: one job embeds every input; the answer when it ends */
static enum MHD_Result reply_embeddings(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    bool done;
    enum MHD_Result waiting = await_jobs(h, c, r, &done);
    if (!done)
        return waiting;
    struct choice *ch = &r->ch[0];
    const float *emb = serve_job_embeddings(ch->job);
    struct serve_usage usage;
    qpack_error err = {0};
    if (!serve_job_result(ch->job, &usage, &err) || !emb) {
        struct serve_error e;
        job_failure(&err, &e);
        return send_error(c, r, &e);
    }
    uint32_t dim = qpack_model_get_info(h->cfg.model)->hidden;
    r->usage.prompt_tokens = r->embed.n_inputs ? r->embed.ends[r->embed.n_inputs - 1] : 0;
    char *json = serve_embeddings_json(emb, r->embed.n_inputs, dim, &r->embed, h->cfg.model_id, r->usage.prompt_tokens);
    return json ? send_json(c, r, 200, json) : fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
}

static enum MHD_Result serve_embeddings(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    const qpack_model_info *info = qpack_model_get_info(h->cfg.model);
    if (info->pooling == QPACK_POOLING_NONE)
        return fail(c, r, 400, "invalid_request_error", "model_not_embedding", NULL,
                    "The model '%s' is not an embedding model (its container has no pooling section: pack an "
                    "embedding checkpoint such as Qwen3-Embedding)", h->cfg.model_id);
    struct serve_model_ref model = {h->cfg.model_id, h->cfg.strict_model, h->vocab};
    struct serve_error e;
    if (serve_parse_embeddings(r->body ? r->body : "", r->len, &model, qpack_model_tokenizer(h->cfg.model),
                               h->end_of_text, h->ctx, info->hidden, &r->embed, &e))
        return send_error(c, r, &e);
    uint32_t total = r->embed.ends[r->embed.n_inputs - 1];
    qpack_sampler_params sp = qpack_sampler_default_params();
    struct serve_job *j = serve_job_new(r->embed.ids, total, 0, &sp, NULL);
    if (j)
        r->embed.ids = NULL;    /* the job's now */
    if (!j || serve_job_want_embeddings(j, r->embed.ends, r->embed.n_inputs, info->hidden)) {
        serve_job_unref(j);
        return fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
    }
    serve_job_watch(j, serve_conns_wake, h->conns);
    r->ch[0].job = j;
    r->n_ch = 1;
    if (serve_sched_submit(h->cfg.sched, &j, 1)) {
        atomic_fetch_add(&serve_metrics.rejected, 1);
        return fail(c, r, 503, "server_error", "server_busy", NULL,
                    "The server is busy: %u requests are running and %u waiting; try again later",
                    serve_metrics.parallel, serve_metrics.queue_max);
    }
    return reply_embeddings(h, c, r);
}

/* Anthropic's POST /v1/messages/count_tokens: the rendered prompt's tokens */
static enum MHD_Result serve_count_tokens(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    struct serve_request q;
    struct serve_error e;
    struct serve_model_ref model = {h->cfg.model_id, h->cfg.strict_model, h->vocab};
    if (serve_parse_messages(r->body ? r->body : "", r->len, true, &model, &q, &e))
        return send_error(c, r, &e);
    int32_t *ids;
    size_t n;
    int rc = prompt_ids(h, &q, &ids, &n, &e);
    serve_request_free(&q);
    if (rc)
        return send_error(c, r, &e);
    free(ids);
    return send_json(c, r, 200, serve_count_tokens_json(n));
}

/* llama-server's POST /apply-template */
static enum MHD_Result serve_apply_template(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    struct serve_error e;
    struct serve_model_ref model = {h->cfg.model_id, h->cfg.strict_model, h->vocab};
    char *out;
    if (serve_apply_template_reply(&model, r->body ? r->body : "", r->len, &out, &e))
        return send_error(c, r, &e);
    return send_json(c, r, 200, out);
}

/* ---- libmicrohttpd's callbacks ------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls)
{
    (void)version;
    struct serve_http *h = cls;
    struct request *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        *con_cls = r;
        atomic_fetch_add(&h->active, 1);
        r->t0 = qp_now_s();
        r->ep = route(url, h->cfg.model_id, &r->one_model);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->url, sizeof r->url, "%s", url);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (!ci || !(r->conn = ci->socket_context))
            return MHD_NO;      /* out of memory when it was accepted */
        return check_head(h, c, r, url, method);
    }
    if (*data_size) {
        size_t n = *data_size;
        *data_size = 0;
        return r->responded ? MHD_YES : take_body(r, data, n);
    }
    serve_conn_answering(h->conns, r->conn);
    if (r->responded)
        return MHD_YES;
    if (r->n_ch)                /* resumed */
        return r->ep == SERVE_EP_EMBEDDINGS ? reply_embeddings(h, c, r) : reply_whole(h, c, r);
    if (r->too_large)
        return fail(c, r, 413, "invalid_request_error", "request_too_large", NULL, "The body is over %u bytes",
                    SERVE_MAX_BODY);
    if (is_generation(r->ep))
        return serve_generate(h, c, r);
    if (r->ep == SERVE_EP_APPLY_TEMPLATE)
        return serve_apply_template(h, c, r);
    if (r->ep == SERVE_EP_EMBEDDINGS)
        return serve_embeddings(h, c, r);
    if (r->ep == SERVE_EP_COUNT_TOKENS)
        return serve_count_tokens(h, c, r);
    return is_post(r->ep) ? serve_tokens(h, c, r) : serve_get(h, c, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c;
    struct serve_http *h = cls;
    struct request *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    if (r->stream)
        r->stream->r = NULL;
    for (unsigned k = 0; k < r->n_ch; k++) {
        serve_job_cancel(r->ch[k].job);     /* no effect once it has ended */
        serve_job_unref(r->ch[k].job);
    }
    serve_conn_answered(h->conns, r->conn);
    serve_metrics_count(r->ep, r->status);
    if (h->cfg.log) {
        char tokens[64] = "";
        if (r->usage.prompt_tokens)
            snprintf(tokens, sizeof tokens, ", %u + %u tokens", r->usage.prompt_tokens, r->usage.completion_tokens);
        fprintf(stderr, "qrun serve: %s %s %d (%.3f s%s)%s\n", r->method, r->url, r->status, qp_now_s() - r->t0, tokens,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : ", connection lost");
    }
    free(r->body);
    for (unsigned k = 0; k < SERVE_MAX_CHOICES; k++)
        free(r->ch[k].text);
    serve_embed_request_free(&r->embed);
    serve_resp_free(r->resp);
    free(r);
    atomic_fetch_sub(&h->active, 1);
}

/* every connection gets its serve_conn as libmicrohttpd's socket context */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct serve_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? serve_conn_open(h->conns, ci->connect_fd) : NULL;
    } else {
        serve_conn_close(h->conns, *socket_context);
        *socket_context = NULL;
    }
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    struct serve_http *h = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\r\n")] = 0;
    if (strstr(line, "Application reported internal error"))
        return;                 /* our own choice to close: the request's line says so */
    if (!atomic_load(&h->running))   /* starting: kept for the error line */
        snprintf(h->log_line, sizeof h->log_line, "%s", line);
    else if (h->cfg.log)
        fprintf(stderr, "qrun serve: http: %s\n", line);
}

/* ---- the daemon ---------------------------------------------------------- */

/* the id of <|endoftext|> in the model's tokenizer, -1 without one */
static int32_t end_of_text_id(const qpack_tokenizer *tok)
{
    int32_t *ids = NULL, id = -1;
    size_t n = 0;
    qpack_error err;
    if (tok && !qpack_tokenize(tok, "<|endoftext|>", 13, &ids, &n, &err) && n == 1)
        id = ids[0];
    free(ids);
    return id;
}

int serve_http_start(struct serve_http **out, const struct serve_http_config *cfg, char *msg, size_t msg_len)
{
    *out = NULL;
    struct serve_http *h = calloc(1, sizeof *h);
    if (!h)
        return snprintf(msg, msg_len, "out of memory"), -1;
    h->cfg = *cfg;
    h->vocab = qpack_model_get_info(cfg->model)->vocab;
    h->ctx = qpack_model_get_info(cfg->model)->ctx;
    h->end_of_text = end_of_text_id(qpack_model_tokenizer(cfg->model));
    h->started = (long long)time(NULL);
    for (int think = 0; think < 2; think++) {
        h->sampling[think] = serve_default_sampling();
        h->has_sampling = qpack_model_sampling(cfg->model, think, &h->sampling[think]);
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%u", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai) {
        snprintf(msg, msg_len, "cannot use --host %s: %s", cfg->host, gai_strerror(gai));
        free(h);
        return -1;
    }
    if (serve_conns_start(&h->conns, cfg->timeout_s, cfg->max_connections, msg, msg_len)) {
        freeaddrinfo(ai);
        free(h);
        return -1;
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections + SERVE_SPARE_CONNECTIONS,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_per_ip,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_log, h,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        snprintf(msg, msg_len, "cannot listen on %s port %u: %s", cfg->host, cfg->port,
                 h->log_line[0] ? h->log_line : "libmicrohttpd failed to start");
        serve_conns_stop(h->conns);
        free(h);
        return -1;
    }
    atomic_store(&h->running, true);
    *out = h;
    return 0;
}

unsigned serve_http_port(const struct serve_http *h)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : 0;
}

void serve_http_quiesce(struct serve_http *h)
{
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void serve_http_drain(struct serve_http *h, unsigned timeout_ms)
{
    for (unsigned waited = 0; atomic_load(&h->active) && waited < timeout_ms; waited += 10)
        usleep(10 * 1000);
}

void serve_http_stop(struct serve_http *h)
{
    if (!h)
        return;
    serve_conns_resume_all(h->conns);   /* libmicrohttpd stops no suspended connection */
    MHD_stop_daemon(h->d);
    serve_conns_stop(h->conns);
    free(h);
}
