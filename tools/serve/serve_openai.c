/* serve_openai.c - OpenAI's request and response bodies for
 * /v1/chat/completions, /v1/completions and /v1/models.
 *
 * Requests are read strictly: one JSON object (a key twice or an escaped
 * NUL refused, common/json_strict.h), each field of its type and range,
 * and a field this server does not know refused by name, as OpenAI does
 * ("unrecognized request argument"), rather than silently ignored. null
 * stands for an absent optional field. Sizes are bounded: the body by the
 * HTTP layer, messages, stop strings and prompt ids here. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <utf8proc.h>

#include "json_strict.h"
#include "serve.h"

#define MAX_NEW_TOKENS (1u << 20)   /* max_tokens above it is surely a mistake */
#define COMPLETION_DEFAULT_NEW 16   /* OpenAI's default for /v1/completions */

void serve_error_set(struct serve_error *e, int http, const char *type, const char *code, const char *param,
                     const char *fmt, ...)
{
    e->http = http;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* a 400 about one field */
#define BAD(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)

static bool is_utf8(const char *s, size_t n)
{
    utf8proc_int32_t c;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0)
            return false;
        i += (size_t)k;
    }
    return true;
}

/* ---- fields -------------------------------------------------------------- */

static int want_number(const cJSON *v, const char *name, double lo, double hi, double *out, struct serve_error *e)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(e, name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(e, name, "'%s' is %g: it must be from %g to %g", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

/* an integer that a double holds exactly (|x| <= 2^53) */
static int want_integer(const cJSON *v, const char *name, double lo, double hi, double *out, struct serve_error *e)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9007199254740992.0)
        return BAD(e, name, "'%s' must be an integer", name);
    return want_number(v, name, lo, hi, out, e);
}

static int want_bool(const cJSON *v, const char *name, bool *out, struct serve_error *e)
{
    if (!cJSON_IsBool(v))
        return BAD(e, name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int add_stop(struct serve_stops *st, const cJSON *v, struct serve_error *e)
{
    if (!cJSON_IsString(v))
        return BAD(e, "stop", "'stop' must be a string or an array of strings");
    size_t n = strlen(v->valuestring);
    if (n == 0 || n > SERVE_MAX_STOP_LEN)
        return BAD(e, "stop", "a stop string must have 1 to %d bytes", SERVE_MAX_STOP_LEN);
    if (!is_utf8(v->valuestring, n))
        return BAD(e, "stop", "a stop string is not valid UTF-8");
    if (!(st->s[st->n] = strdup(v->valuestring)))
        return BAD(e, "stop", "out of memory");
    st->len[st->n++] = n;
    return 0;
}

static int read_stops(const cJSON *v, struct serve_stops *st, struct serve_error *e)
{
    if (!cJSON_IsArray(v))
        return add_stop(st, v, e);
    if (cJSON_GetArraySize(v) > SERVE_MAX_STOPS)
        return BAD(e, "stop", "'stop' has %d strings: at most %d", cJSON_GetArraySize(v), SERVE_MAX_STOPS);
    for (const cJSON *c = v->child; c; c = c->next)
        if (add_stop(st, c, e))
            return -1;
    return 0;
}

/* content: a string, or OpenAI's array of parts of which only text ones
 * are supported; *out malloc'd */
static int read_content(const cJSON *v, size_t i, char **out, struct serve_error *e)
{
    if (cJSON_IsString(v))
        return (*out = strdup(v->valuestring)) ? 0 : BAD(e, "messages", "out of memory");
    if (!cJSON_IsArray(v))
        return BAD(e, "messages", "messages[%zu].content must be a string or an array of text parts", i);
    size_t len = 0;
    for (const cJSON *p = v->child; p; p = p->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text) || cJSON_GetArraySize(p) != 2)
            return BAD(e, "messages", "messages[%zu].content: only parts {\"type\": \"text\", \"text\": ...} "
                       "are supported", i);
        len += strlen(text->valuestring);
    }
    if (!(*out = malloc(len + 1)))
        return BAD(e, "messages", "out of memory");
    len = 0;
    for (const cJSON *p = v->child; p; p = p->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        memcpy(*out + len, t, strlen(t));
        len += strlen(t);
    }
    (*out)[len] = 0;
    return 0;
}

/* "developer" is what OpenAI now calls the system role */
static const char *chat_role(const char *role)
{
    static const char *const roles[] = {"system", "user", "assistant"};
    if (!strcmp(role, "developer"))
        return "system";
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(role, roles[i]))
            return roles[i];
    return NULL;
}

static int read_message(const cJSON *m, size_t i, qpack_chat_message *out, struct serve_error *e)
{
    if (!cJSON_IsObject(m))
        return BAD(e, "messages", "messages[%zu] must be an object", i);
    const cJSON *role = NULL, *content = NULL;
    for (const cJSON *f = m->child; f; f = f->next) {
        if (!strcmp(f->string, "role"))
            role = f;
        else if (!strcmp(f->string, "content"))
            content = f;
        else if (strcmp(f->string, "name") || !cJSON_IsString(f))
            return BAD(e, "messages", "messages[%zu]: unsupported field '%.64s'", i, f->string);
    }
    if (!cJSON_IsString(role) || !chat_role(role->valuestring))
        return BAD(e, "messages", "messages[%zu].role must be \"system\", \"developer\", \"user\" or \"assistant\"",
                   i);
    out->role = chat_role(role->valuestring);
    if (!content || cJSON_IsNull(content))
        return BAD(e, "messages", "messages[%zu] has no content", i);
    return read_content(content, i, (char **)&out->content, e);
}

static int read_messages(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n < 1 || n > SERVE_MAX_MESSAGES)
        return BAD(e, "messages", "'messages' must be an array of 1 to %d messages", SERVE_MAX_MESSAGES);
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs)))
        return BAD(e, "messages", "out of memory");
    for (const cJSON *m = v->child; m; m = m->next)
        if (read_message(m, r->n_msgs, &r->msgs[r->n_msgs], e))
            return -1;
        else
            r->n_msgs++;
    return 0;
}

/* a string, an array of one string, or an array of token ids */
static int read_prompt(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child))
        v = v->child;
    if (cJSON_IsString(v))
        return (r->prompt = strdup(v->valuestring)) ? 0 : BAD(e, "prompt", "out of memory");
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n < 1 || n > SERVE_MAX_PROMPT_IDS)
        return BAD(e, "prompt", "'prompt' must be a string or an array of 1 to %d token ids (one prompt per "
                   "request)", SERVE_MAX_PROMPT_IDS);
    if (!(r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids)))
        return BAD(e, "prompt", "out of memory");
    for (const cJSON *c = v->child; c; c = c->next) {
        double id;
        if (want_integer(c, "prompt", 0, INT32_MAX, &id, e))
            return BAD(e, "prompt", "'prompt' must be a string or an array of token ids (integers from 0)");
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)id;
    }
    return 0;
}

static int read_stream_options(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    if (!cJSON_IsObject(v))
        return BAD(e, "stream_options", "'stream_options' must be an object");
    for (const cJSON *f = v->child; f; f = f->next)
        if (strcmp(f->string, "include_usage"))
            return BAD(e, "stream_options", "stream_options: unsupported field '%.64s'", f->string);
        else if (want_bool(f, "stream_options.include_usage", &r->include_usage, e))
            return -1;
    return 0;
}

/* llama.cpp's extension: {"enable_thinking": false} */
static int read_template_kwargs(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    if (!cJSON_IsObject(v))
        return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const cJSON *f = v->child; f; f = f->next)
        if (strcmp(f->string, "enable_thinking"))
            return BAD(e, "chat_template_kwargs", "chat_template_kwargs: unsupported field '%.64s'", f->string);
        else if (want_bool(f, "chat_template_kwargs.enable_thinking", &r->think, e))
            return -1;
    return 0;
}

static int read_model(const cJSON *v, const char *model_id, struct serve_error *e)
{
    if (!cJSON_IsString(v))
        return BAD(e, "model", "'model' must be a string");
    if (strcmp(v->valuestring, model_id)) {
        serve_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.200s' does not exist: this server has '%.200s' (GET /v1/models)",
                        v->valuestring, model_id);
        return -1;
    }
    return 0;
}

/* one top-level field; unknown ones are refused */
static int read_field(const cJSON *f, enum serve_kind kind, const char *model_id, struct serve_request *r,
                      struct serve_error *e)
{
    const char *k = f->string;
    double x;
    bool chat = kind == SERVE_CHAT;
    if (!strcmp(k, "model"))
        return read_model(f, model_id, e);
    if (chat && !strcmp(k, "messages"))
        return read_messages(f, r, e);
    if (!chat && !strcmp(k, "prompt"))
        return read_prompt(f, r, e);
    if (!strcmp(k, "max_tokens") || (chat && !strcmp(k, "max_completion_tokens"))) {
        if (want_integer(f, k, 1, MAX_NEW_TOKENS, &x, e))
            return -1;
        r->has_max_tokens = true;
        r->max_tokens = (uint32_t)x;
        return 0;
    }
    if (!strcmp(k, "temperature"))
        return want_number(f, k, 0, 2, &r->sampling.temperature, e);
    if (!strcmp(k, "top_p"))
        return want_number(f, k, 0, 1, &r->sampling.top_p, e);
    if (!strcmp(k, "seed")) {
        if (want_integer(f, k, -9007199254740992.0, 9007199254740992.0, &x, e))
            return -1;
        r->has_seed = true;
        r->sampling.seed = (uint64_t)(int64_t)x;
        return 0;
    }
    if (!strcmp(k, "stop"))
        return read_stops(f, &r->stops, e);
    if (!strcmp(k, "stream"))
        return want_bool(f, k, &r->stream, e);
    if (!strcmp(k, "stream_options"))
        return read_stream_options(f, r, e);
    if (chat && !strcmp(k, "chat_template_kwargs"))
        return read_template_kwargs(f, r, e);
    if (!strcmp(k, "n"))
        return want_integer(f, k, 1, 1, &x, e) ? BAD(e, k, "'n' must be 1: one choice per request") : 0;
    if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty"))
        return want_number(f, k, 0, 0, &x, e) ? BAD(e, k, "'%s' is not supported (only 0)", k) : 0;
    if (!strcmp(k, "user"))
        return cJSON_IsString(f) ? 0 : BAD(e, k, "'user' must be a string");
    return BAD(e, k, "Unrecognized request argument supplied: %.64s", k);
}

/* a seed from the system's entropy when the request gives none */
static uint64_t random_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s)
        s = 0x9e3779b97f4a7c15ull;
    return s;
}

static int read_body(const cJSON *root, enum serve_kind kind, const char *model_id, struct serve_request *r,
                     struct serve_error *e)
{
    if (!cJSON_IsObject(root))
        return BAD(e, NULL, "the request body must be a JSON object");
    for (const cJSON *f = root->child; f; f = f->next)
        if (!cJSON_IsNull(f) && read_field(f, kind, model_id, r, e))
            return -1;
    if (kind == SERVE_CHAT && !r->msgs)
        return BAD(e, "messages", "'messages' is required");
    if (kind == SERVE_COMPLETION && !r->prompt && !r->prompt_ids)
        return BAD(e, "prompt", "'prompt' is required");
    if (!r->has_max_tokens && kind == SERVE_COMPLETION)
        r->max_tokens = COMPLETION_DEFAULT_NEW, r->has_max_tokens = true;
    if (r->sampling.top_p == 0)     /* only the most likely token is left */
        r->sampling.temperature = 0, r->sampling.top_p = 1;
    if (!r->has_seed)
        r->sampling.seed = random_seed();
    return 0;
}

int serve_parse_request(enum serve_kind kind, const char *body, size_t len, const char *model_id,
                        struct serve_request *r, struct serve_error *e)
{
    *r = (struct serve_request){.kind = kind, .sampling = qpack_sampler_default_params()};
    r->sampling.temperature = 1;    /* OpenAI's default */
    if (memchr(body, 0, len))
        return BAD(e, NULL, "the request body holds a NUL byte");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    while (root && end < body + len && strchr(" \t\r\n", *end))
        end++;
    if (!root || end != body + len) {
        cJSON_Delete(root);
        return BAD(e, NULL, "the request body is not valid JSON (at byte %td of %zu)", end ? end - body : 0, len);
    }
    qp_err strict = {{0}};
    int rc = json_refuse_ambiguous(root, body, len, "request body", &strict);
    if (rc)
        serve_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", strict.msg);
    else
        rc = read_body(root, kind, model_id, r, e);
    cJSON_Delete(root);
    if (rc)
        serve_request_free(r);
    return rc;
}

void serve_request_free(struct serve_request *r)
{
    for (size_t i = 0; i < r->n_msgs; i++)
        free((char *)r->msgs[i].content);
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_ids);
    for (unsigned i = 0; i < r->stops.n; i++)
        free(r->stops.s[i]);
    *r = (struct serve_request){0};
}

/* ---- responses ----------------------------------------------------------- */

/* A JSON string of text[0..len): cJSON's strings end at a NUL byte, but a
 * model may generate one (the byte-level token for 0x00), so the reply's
 * text is escaped here and added as raw JSON. */
static cJSON *json_text(const char *text, size_t len)
{
    size_t cap = len * 6 + 3;
    char *out = malloc(cap), *o = out;
    if (!out)
        return NULL;
    *o++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\')
            *o++ = '\\', *o++ = (char)c;
        else if (c == '\n')
            *o++ = '\\', *o++ = 'n';
        else if (c < 0x20 || c == 0x7f)
            o += sprintf(o, "\\u%04x", c);
        else
            *o++ = (char)c;
    }
    *o++ = '"';
    *o = 0;
    cJSON *raw = cJSON_CreateRaw(out);
    free(out);
    return raw;
}

/* prints and frees root; NULL when any part failed */
static char *print(cJSON *root, bool ok)
{
    char *s = ok && root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

char *serve_error_json(const struct serve_error *e)
{
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    bool ok = err && cJSON_AddStringToObject(err, "message", e->message) &&
              cJSON_AddStringToObject(err, "type", e->type) &&
              (e->param[0] ? cJSON_AddStringToObject(err, "param", e->param) : cJSON_AddNullToObject(err, "param")) &&
              (e->code ? cJSON_AddStringToObject(err, "code", e->code) : cJSON_AddNullToObject(err, "code"));
    return print(root, ok);
}

static cJSON *reply_head(const struct serve_reply_meta *r, const char *object)
{
    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddStringToObject(root, "id", r->id) && cJSON_AddStringToObject(root, "object", object) &&
              cJSON_AddNumberToObject(root, "created", (double)r->created) &&
              cJSON_AddStringToObject(root, "model", r->model) &&
              cJSON_AddStringToObject(root, "system_fingerprint", "qpack");
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static bool add_usage(cJSON *root, const struct serve_usage *u)
{
    cJSON *o = cJSON_AddObjectToObject(root, "usage");
    return o && cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens) &&
           cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens) &&
           cJSON_AddNumberToObject(o, "total_tokens", (double)u->prompt_tokens + u->completion_tokens);
}

static bool add_finish(cJSON *choice, const char *finish)
{
    return finish ? cJSON_AddStringToObject(choice, "finish_reason", finish) != NULL
                  : cJSON_AddNullToObject(choice, "finish_reason") != NULL;
}

/* choices: [ {index 0, message|delta|text, logprobs null, finish_reason} ] */
static bool add_choice(cJSON *root, enum serve_kind kind, const char *holder, const char *text, size_t len,
                       bool role, const char *finish)
{
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    if (!choices || !c || !cJSON_AddItemToArray(choices, c) || !cJSON_AddNumberToObject(c, "index", 0))
        return false;
    cJSON *t = text ? json_text(text, len) : NULL;
    if (text && !t)
        return false;
    if (kind == SERVE_COMPLETION) {
        if (!cJSON_AddItemToObject(c, "text", t))
            return false;
    } else {
        cJSON *m = cJSON_AddObjectToObject(c, holder);
        if (!m || (role && !cJSON_AddStringToObject(m, "role", "assistant")) ||
            (t && !cJSON_AddItemToObject(m, "content", t)))
            return false;
    }
    return cJSON_AddNullToObject(c, "logprobs") && add_finish(c, finish);
}

char *serve_completion_json(const struct serve_reply_meta *r, const char *text, size_t len, const char *finish,
                            const struct serve_usage *u)
{
    bool chat = r->kind == SERVE_CHAT;
    cJSON *root = reply_head(r, chat ? "chat.completion" : "text_completion");
    bool ok = root && add_choice(root, r->kind, "message", text, len, true, finish) && add_usage(root, u);
    return print(root, ok);
}

char *serve_chunk_json(const struct serve_reply_meta *r, const char *text, size_t len, bool role_chunk,
                       const char *finish)
{
    bool chat = r->kind == SERVE_CHAT;
    cJSON *root = reply_head(r, chat ? "chat.completion.chunk" : "text_completion");
    /* a chat's last chunk has an empty delta; a completion's an empty text */
    const char *t = text ? text : (chat && !role_chunk ? NULL : "");
    bool ok = root && add_choice(root, r->kind, "delta", t, text ? len : 0, role_chunk, finish);
    return print(root, ok);
}

char *serve_usage_chunk_json(const struct serve_reply_meta *r, const struct serve_usage *u)
{
    cJSON *root = reply_head(r, r->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
    bool ok = root && cJSON_AddArrayToObject(root, "choices") && add_usage(root, u);
    return print(root, ok);
}

char *serve_models_json(const char *model_id, long long created, bool one)
{
    cJSON *m = cJSON_CreateObject();
    bool ok = m && cJSON_AddStringToObject(m, "id", model_id) && cJSON_AddStringToObject(m, "object", "model") &&
              cJSON_AddNumberToObject(m, "created", (double)created) &&
              cJSON_AddStringToObject(m, "owned_by", "qpack");
    if (one || !ok)
        return print(m, ok);
    cJSON *root = cJSON_CreateObject(), *data = NULL;
    ok = root && cJSON_AddStringToObject(root, "object", "list") && (data = cJSON_AddArrayToObject(root, "data")) &&
         cJSON_AddItemToArray(data, m);
    if (!ok && !(data && data->child == m))
        cJSON_Delete(m);
    return print(root, ok);
}
