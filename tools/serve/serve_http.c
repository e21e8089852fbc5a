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
 * serve_anthropic.c's bodies and events), and POST /v1/embeddings and
 * /v1/rerank (or /rerank), answered whole (serve_embed.c,
 * serve_rerank.c). Every error is OpenAI's JSON error object with its
 * HTTP status (Anthropic's on its routes). With an
 * API key, everything but / and /health needs "Authorization: Bearer KEY"
 * or "x-api-key: KEY".
 * A request for one model takes it from the table (serve_models.c) once
 * its body is in: with several, the one it names, its connection
 * suspended while that model loads.
 * Request bodies are JSON whatever their Content-Type says (curl -d sends
 * another); a browser request from another site's page is refused by its
 * Origin header instead (same_origin), and CORS is never granted. */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "serve_http.h"
#include "clock.h"
#include "think_text.h"

#define HTTP_THREADS 2          /* libmicrohttpd's epoll threads */


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

enum MHD_Result http_send_json(struct MHD_Connection *c, struct request *r, int status, char *body)
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

enum MHD_Result http_send_error(struct MHD_Connection *c, struct request *r, const struct serve_error *e)
{
    const char *header = NULL, *value = NULL;
    if (e->http == 401)
        header = "WWW-Authenticate", value = "Bearer";
    else if (e->http == 503)
        header = "Retry-After", value = "1";
    return send_body(c, r, e->http, error_json(r, e), "application/json", header, value);
}

enum MHD_Result http_fail(struct MHD_Connection *c, struct request *r, int http, const char *type, const char *code,
                          const char *param, const char *fmt, ...)
{
    struct serve_error e;
    serve_error_set(&e, http, type, code, param, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return http_send_error(c, r, &e);
}

/* ---- routes and checks before the body ----------------------------------- */

static enum serve_endpoint route(const char *url, const struct serve_models *models, int *one_model)
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
        {"/v1/rerank", SERVE_EP_RERANK}, {"/rerank", SERVE_EP_RERANK},
    };
    *one_model = -1;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path))
            return routes[i].ep;
    if (!strncmp(url, "/slots/", 7))
        return SERVE_EP_SLOT_ACTION;
    *one_model = strncmp(url, "/v1/models/", 11) ? -1 : serve_models_find(models, url + 11);
    if (*one_model >= 0)
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
           ep == SERVE_EP_APPLY_TEMPLATE || ep == SERVE_EP_EMBEDDINGS || ep == SERVE_EP_COUNT_TOKENS ||
           ep == SERVE_EP_RERANK || ep == SERVE_EP_SLOT_ACTION;
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
        return http_fail(c, r, 404, "invalid_request_error", "not_found", NULL, "No route for %.16s %.200s", method,
                         url);
    const char *want = is_post(r->ep) ? "POST" : "GET";
    if (strcmp(method, want) && !(strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0)) {
        struct serve_error e;
        serve_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%.200s takes %s, not %.16s",
                        url, want, method);
        return send_body(c, r, 405, error_json(r, &e), "application/json", "Allow", want);
    }
    if (!authorized(h, c, r->ep))
        return http_fail(c, r, 401, "invalid_request_error", "invalid_api_key", NULL,
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
        return http_fail(c, r, 403, "invalid_request_error", "cross_origin", NULL,
                         "A request from another site's page (its Origin header names another host) is refused");
    const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (length && strtoull(length, NULL, 10) > SERVE_MAX_BODY)
        return http_fail(c, r, 413, "invalid_request_error", "request_too_large", NULL,
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
        return http_send_json(c, r, 200, strdup("{\"status\":\"ok\"}"));
    case SERVE_EP_MODELS:
        return http_send_json(c, r, 200, serve_models_list(h->cfg.models, r->one_model));
    case SERVE_EP_PROPS: {
        const qpack_model_info *i = qpack_model_get_info(r->m->model);
        struct serve_props p = {.model_id = r->m->id, .model_path = i->path, .format = i->format,
                                .backend = i->backend, .ctx = r->m->ctx, .ctx_train = i->max_positions,
                                .vocab = r->m->vocab, .parallel = serve_metrics.parallel,
                                .sampling = r->m->has_sampling ? &r->m->sampling[0] : NULL};
        return http_send_json(c, r, 200, serve_props_json(&p));
    }
    case SERVE_EP_SLOTS: {
        struct serve_slot_info slots[64];
        unsigned n = serve_sched_slots(r->m->sched, slots, 64);
        return http_send_json(c, r, 200, serve_slots_json(slots, n, r->m->ctx));
    }
    case SERVE_EP_METRICS:
        return send_body(c, r, 200, serve_metrics_text(h->cfg.models), "text/plain; version=0.0.4; charset=utf-8",
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

static enum MHD_Result serve_tokens(struct MHD_Connection *c, struct request *r)
{
    const qpack_tokenizer *tok = qpack_model_tokenizer(r->m->model);
    if (!tok)
        return http_fail(c, r, 400, "invalid_request_error", NULL, NULL, "the model carries no tokenizer");
    struct serve_error e;
    char *out;
    const char *body = r->body ? r->body : "";
    int rc = r->ep == SERVE_EP_TOKENIZE ? serve_tokenize_reply(tok, body, r->len, &out, &e)
                                        : serve_detokenize_reply(tok, r->m->vocab, body, r->len, &out, &e);
    return rc ? http_send_error(c, r, &e) : http_send_json(c, r, 200, out);
}

/* ---- generation ---------------------------------------------------------- */

#define BAD_PROMPT(e, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, "prompt", __VA_ARGS__), -1)

/* ids given as such, checked against the vocabulary */
static int given_ids(const struct serve_model *m, const struct serve_request *q, int32_t **ids, size_t *n,
                     struct serve_error *e)
{
    for (size_t i = 0; i < q->n_prompt_ids; i++)
        if ((uint32_t)q->prompt_ids[i] >= m->vocab)
            return BAD_PROMPT(e, "token id %d is outside the vocabulary (0 to %u)", q->prompt_ids[i], m->vocab - 1);
    if (!(*ids = malloc(q->n_prompt_ids * sizeof **ids)))
        return BAD_PROMPT(e, "out of memory");
    memcpy(*ids, q->prompt_ids, q->n_prompt_ids * sizeof **ids);
    *n = q->n_prompt_ids;
    return 0;
}

/* the prompt's ids: the messages through Qwen3's chat template, or the
 * text, tokenized; or the ids given */
int http_prompt_ids(const struct serve_model *m, const struct serve_request *q, int32_t **ids, size_t *n,
                    struct serve_error *e)
{
    *ids = NULL;
    *n = 0;
    if (q->prompt_ids)
        return given_ids(m, q, ids, n, e);
    const qpack_tokenizer *tok = qpack_model_tokenizer(m->model);
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



/* POST /v1/embeddings: one job embeds every input; the answer when it ends */
static enum MHD_Result reply_embeddings(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    bool done;
    enum MHD_Result waiting = reply_await_jobs(h, c, r, &done);
    if (!done)
        return waiting;
    struct choice *ch = &r->ch[0];
    const float *emb = serve_job_embeddings(ch->job);
    struct serve_usage usage;
    qpack_error err = {0};
    if (!serve_job_result(ch->job, &usage, &err) || !emb) {
        struct serve_error e;
        reply_job_failure(&err, &e);
        return http_send_error(c, r, &e);
    }
    uint32_t dim = qpack_model_get_info(r->m->model)->hidden;
    r->usage.prompt_tokens = r->embed.n_inputs ? r->embed.ends[r->embed.n_inputs - 1] : 0;
    char *json = serve_embeddings_json(emb, r->embed.n_inputs, dim, &r->embed, r->m->id, r->usage.prompt_tokens);
    return json ? http_send_json(c, r, 200, json) : http_fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
}

static enum MHD_Result serve_embeddings(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    const qpack_model_info *info = qpack_model_get_info(r->m->model);
    if (info->pooling == QPACK_POOLING_NONE)
        return http_fail(c, r, 400, "invalid_request_error", "model_not_embedding", NULL,
                         "The model '%s' is not an embedding model (its container has no pooling section: pack an "
                         "embedding checkpoint such as Qwen3-Embedding)", r->m->id);
    struct serve_model_ref model = http_model_ref(r->m);
    struct serve_error e;
    if (serve_parse_embeddings(r->body ? r->body : "", r->len, &model, qpack_model_tokenizer(r->m->model),
                               r->m->end_of_text, r->m->ctx, info->hidden, &r->embed, &e))
        return http_send_error(c, r, &e);
    struct http_inputs in = {&r->embed.ids, r->embed.ends, r->embed.n_inputs, info->hidden, -1, -1};
    return http_submit_inputs(h, c, r, &in, reply_embeddings);
}

enum MHD_Result http_submit_inputs(struct serve_http *h, struct MHD_Connection *c, struct request *r,
                                   const struct http_inputs *in, http_reply_fn reply)
{
    qpack_sampler_params sp = qpack_sampler_default_params();
    struct serve_job *j = serve_job_new(*in->ids, in->ends[in->n - 1], 0, &sp, NULL);
    if (j)
        *in->ids = NULL;        /* the job's now */
    if (!j || (in->yes >= 0 ? serve_job_want_scores(j, in->ends, in->n, in->yes, in->no)
                            : serve_job_want_embeddings(j, in->ends, in->n, in->dim))) {
        serve_job_unref(j);
        return http_fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
    }
    serve_job_watch(j, serve_conns_wake, h->conns);
    r->ch[0].job = j;
    r->n_ch = 1;
    if (serve_sched_submit(r->m->sched, &j, 1)) {
        atomic_fetch_add(&serve_metrics.rejected, 1);
        return http_fail(c, r, 503, "server_error", "server_busy", NULL,
                         "The server is busy: %u requests are running and %u waiting; try again later",
                         serve_metrics.parallel, serve_metrics.queue_max);
    }
    return reply(h, c, r);
}

/* Anthropic's POST /v1/messages/count_tokens: the rendered prompt's tokens */
static enum MHD_Result serve_count_tokens(struct MHD_Connection *c, struct request *r)
{
    struct serve_request q;
    struct serve_error e;
    struct serve_model_ref model = http_model_ref(r->m);
    if (serve_parse_messages(r->body ? r->body : "", r->len, true, &model, &q, &e))
        return http_send_error(c, r, &e);
    int32_t *ids;
    size_t n;
    int rc = http_prompt_ids(r->m, &q, &ids, &n, &e);
    serve_request_free(&q);
    if (rc)
        return http_send_error(c, r, &e);
    free(ids);
    return http_send_json(c, r, 200, serve_count_tokens_json(n));
}

/* llama-server's POST /apply-template */
static enum MHD_Result serve_apply_template(struct MHD_Connection *c, struct request *r)
{
    struct serve_error e;
    struct serve_model_ref model = http_model_ref(r->m);
    char *out;
    if (serve_apply_template_reply(&model, r->body ? r->body : "", r->len, &out, &e))
        return http_send_error(c, r, &e);
    return http_send_json(c, r, 200, out);
}

/* ---- the request's model -------------------------------------------------- */

struct serve_model_ref http_model_ref(const struct serve_model *m)
{
    struct serve_model_ref ref = {m->id, m->strict, m->vocab};
    if (m->has_sampling)
        ref.sampling[0] = &m->sampling[0], ref.sampling[1] = &m->sampling[1];
    return ref;
}

/* the endpoints that answer for one model */
static bool needs_model(enum serve_endpoint ep)
{
    return ep != SERVE_EP_MODELS && ep != SERVE_EP_HEALTH && ep != SERVE_EP_METRICS && ep != SERVE_EP_PAGE &&
           ep != SERVE_EP_OTHER;
}

/* With several models, the index of the one a request names: its body's
 * "model", or ?model= for GET /props, GET /slots and POST /slots/ID, whose
 * bodies have none; -1 with *e filled (400 none named, 404 none of that
 * name) */
static int named_model(const struct serve_http *h, struct MHD_Connection *c, const struct request *r,
                       struct serve_error *e)
{
    const char *name;
    cJSON *root = NULL;
    if (r->ep == SERVE_EP_PROPS || r->ep == SERVE_EP_SLOTS || r->ep == SERVE_EP_SLOT_ACTION) {
        name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "model");
    } else if (serve_body_model(r->body ? r->body : "", r->len, &root, &name, e)) {
        cJSON_Delete(root);
        return -1;
    }
    int i = name ? serve_models_find(h->cfg.models, name) : -1;
    if (!name)
        serve_error_set(e, 400, "invalid_request_error", NULL, "model",
                        "'model' is required: this server has %u models (GET /v1/models)",
                        serve_models_count(h->cfg.models));
    else if (i < 0)
        serve_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.200s' does not exist: GET /v1/models lists this server's", name);
    cJSON_Delete(root);
    return i;
}

/* a waiting request's model is loaded, or cannot be: its answer goes on */
static void model_ready(struct serve_model_wait *w)
{
    struct request *r = (struct request *)((char *)w - offsetof(struct request, wait));
    MHD_resume_connection(r->c);
}

/* r->m: the request's model, held; when it is not loaded, the connection
 * is suspended until it is (r->m stays NULL, nothing is answered yet) */
static enum MHD_Result take_model(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    struct serve_error e;
    int i = serve_models_count(h->cfg.models) == 1 ? 0 : named_model(h, c, r, &e);
    if (i < 0)
        return http_send_error(c, r, &e);
    if (!serve_models_acquire(h->cfg.models, (unsigned)i, &r->m))
        return MHD_YES;
    r->c = c;
    r->wait.wake = model_ready;
    r->waited = true;
    MHD_suspend_connection(c);
    serve_models_wait(h->cfg.models, (unsigned)i, &r->wait);
    return MHD_YES;
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
        r->ep = route(url, h->cfg.models, &r->one_model);
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
        return r->ep == SERVE_EP_EMBEDDINGS ? reply_embeddings(h, c, r)
               : r->ep == SERVE_EP_RERANK   ? reply_rerank(h, c, r)
                                            : reply_whole(h, c, r);
    if (r->waited) {            /* resumed: its model is loaded, or cannot be */
        r->waited = false;
        if (!r->wait.got)
            return http_send_error(c, r, &r->wait.error);
        r->m = r->wait.got;
    }
    if (r->too_large)
        return http_fail(c, r, 413, "invalid_request_error", "request_too_large", NULL, "The body is over %u bytes",
                         SERVE_MAX_BODY);
    if (needs_model(r->ep) && !r->m) {
        enum MHD_Result ok = take_model(h, c, r);
        if (!r->m)
            return ok;
    }
    if (is_generation(r->ep))
        return serve_generate(h, c, r);
    if (r->ep == SERVE_EP_APPLY_TEMPLATE)
        return serve_apply_template(c, r);
    if (r->ep == SERVE_EP_EMBEDDINGS)
        return serve_embeddings(h, c, r);
    if (r->ep == SERVE_EP_COUNT_TOKENS)
        return serve_count_tokens(c, r);
    if (r->ep == SERVE_EP_RERANK)
        return serve_rerank(h, c, r);
    if (r->ep == SERVE_EP_SLOT_ACTION)
        return serve_slot_action(h, c, r);
    return is_post(r->ep) ? serve_tokens(c, r) : serve_get(h, c, r);
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
        stream_forget_request(r->stream);
    for (unsigned k = 0; k < r->n_ch; k++) {
        serve_job_cancel(r->ch[k].job);     /* no effect once it has ended */
        serve_job_unref(r->ch[k].job);
    }
    serve_conn_answered(h->conns, r->conn);
    serve_metrics_count(r->ep, r->status);
    /* a request resumed but not called again still holds what it was granted */
    serve_models_release(h->cfg.models, r->m ? r->m : r->waited ? r->wait.got : NULL, &r->usage);
    if (h->cfg.log) {
        char tokens[64] = "";
        if (r->usage.prompt_tokens)
            snprintf(tokens, sizeof tokens, ", %u + %u tokens", r->usage.prompt_tokens, r->usage.completion_tokens);
        fprintf(stderr, "qrun serve: %s %s %d (%.3f s%s)%s\n", r->method, r->url, r->status, qp_now_s() - r->t0, tokens,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : ", connection lost");
    }
    free(r->body);
    for (unsigned k = 0; k < SERVE_MAX_CHOICES; k++)
        qp_buf_free(&r->ch[k].text);
    serve_embed_request_free(&r->embed);
    serve_rerank_request_free(&r->rerank);
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

int serve_http_start(struct serve_http **out, const struct serve_http_config *cfg, char *msg, size_t msg_len)
{
    *out = NULL;
    struct serve_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    h->cfg = *cfg;
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
