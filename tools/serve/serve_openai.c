/* serve_openai.c - OpenAI's request bodies for /v1/chat/completions and
 * /v1/completions, read into a serve_request; serve_openai_reply.c builds
 * the response bodies.
 *
 * The field policy, OpenAI's and llama-server's: one JSON object (a key
 * twice or an escaped NUL refused, common/json_strict.h); every field this
 * server knows checked for its type and range, a 400 naming it; the fields
 * clients send with neutral values (logprobs false, n 1,
 * response_format text, ...) accepted, and the same fields
 * asking for what is not supported yet refused by name; fields it does
 * not know ignored, in the body, in stream_options, chat_template_kwargs
 * and the messages. null stands for an absent optional field. A request
 * naming another model is served by the loaded one, unless --strict-model.
 * Sizes are bounded: the body by the HTTP layer, messages, stop strings,
 * prompt ids and logit biases here. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <utf8proc.h>

#include "buf.h"
#include "cli_sampling.h"
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

int serve_want_number(const cJSON *v, const char *name, double lo, double hi, double *out, struct serve_error *e)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(e, name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(e, name, "'%s' is %g: it must be from %g to %g", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

/* an integer that a double holds exactly (|x| <= 2^53) */
int serve_want_integer(const cJSON *v, const char *name, double lo, double hi, double *out, struct serve_error *e)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9007199254740992.0)
        return BAD(e, name, "'%s' must be an integer", name);
    return serve_want_number(v, name, lo, hi, out, e);
}

int serve_want_bool(const cJSON *v, const char *name, bool *out, struct serve_error *e)
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
    for (const cJSON *p = v->child; p; p = p->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text) || cJSON_GetArraySize(p) != 2)
            return BAD(e, "messages", "messages[%zu].content: only parts {\"type\": \"text\", \"text\": ...} "
                       "are supported", i);
    }
    return (*out = serve_join_texts(v)) ? 0 : BAD(e, "messages", "out of memory");
}

char *serve_join_texts(const cJSON *parts)
{
    struct qp_buf b = {0};
    for (const cJSON *p = parts->child; p; p = p->next)
        qp_buf_adds(&b, cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
    if (b.oom) {
        qp_buf_free(&b);
        return NULL;
    }
    return b.s ? b.s : strdup("");
}

/* "developer" is what OpenAI now calls the system role; "tool" is a
 * tool's response */
static const char *chat_role(const char *role)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    if (!strcmp(role, "developer"))
        return "system";
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(role, roles[i]))
            return roles[i];
    return NULL;
}

static int read_message(const cJSON *m, size_t i, qpack_chat_message *out, struct serve_error *e)
{
    if (!cJSON_IsObject(m))
        return BAD(e, "messages", "messages[%zu] must be an object", i);
    const cJSON *role = NULL, *content = NULL, *calls = NULL, *reasoning = NULL;
    for (const cJSON *f = m->child; f; f = f->next) {
        if (!strcmp(f->string, "role"))
            role = f;
        else if (!strcmp(f->string, "content"))
            content = f;
        else if (!strcmp(f->string, "tool_calls") && !cJSON_IsNull(f) &&
                 !(cJSON_IsArray(f) && cJSON_GetArraySize(f) == 0))
            calls = f;
        else if (!strcmp(f->string, "reasoning_content") && !cJSON_IsNull(f))
            reasoning = f;
        else if ((!strcmp(f->string, "name") || !strcmp(f->string, "tool_call_id")) && !cJSON_IsString(f) &&
                 !cJSON_IsNull(f))
            return BAD(e, "messages", "messages[%zu].%s must be a string", i, f->string);
    }
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "function"))
        return BAD(e, "messages", "messages[%zu]: \"function\" messages are OpenAI's old form: send \"tool\" ones", i);
    if (!cJSON_IsString(role) || !chat_role(role->valuestring))
        return BAD(e, "messages", "messages[%zu].role must be \"system\", \"developer\", \"user\", \"assistant\" "
                   "or \"tool\"", i);
    out->role = chat_role(role->valuestring);
    bool assistant = !strcmp(out->role, "assistant");
    if ((calls || reasoning) && !assistant)
        return BAD(e, "messages", "messages[%zu]: only an assistant message has %s", i,
                   calls ? "tool_calls" : "reasoning_content");
    if (reasoning && !cJSON_IsString(reasoning))
        return BAD(e, "messages", "messages[%zu].reasoning_content must be a string", i);
    if (reasoning && !(out->reasoning = strdup(reasoning->valuestring)))
        return BAD(e, "messages", "out of memory");
    if (calls && serve_read_tool_calls(calls, i, out, e))
        return -1;
    if (!content || cJSON_IsNull(content)) {
        /* an assistant turn that only called tools has no content */
        if (out->n_tool_calls)
            return (out->content = strdup("")) ? 0 : BAD(e, "messages", "out of memory");
        return BAD(e, "messages", "messages[%zu] has no content", i);
    }
    return read_content(content, i, (char **)&out->content, e);
}

static int read_messages(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n < 1 || n > SERVE_MAX_MESSAGES)
        return BAD(e, "messages", "'messages' must be an array of 1 to %d messages", SERVE_MAX_MESSAGES);
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs)))
        return BAD(e, "messages", "out of memory");
    /* counted before it is read: a message refused halfway is freed too */
    for (const cJSON *m = v->child; m; m = m->next) {
        size_t i = r->n_msgs++;
        if (read_message(m, i, &r->msgs[i], e))
            return -1;
    }
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
        if (serve_want_integer(c, "prompt", 0, INT32_MAX, &id, e))
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
        if (!strcmp(f->string, "include_usage") && !cJSON_IsNull(f) &&
            serve_want_bool(f, "stream_options.include_usage", &r->include_usage, e))
            return -1;
    return 0;
}

/* llama.cpp's extension: {"enable_thinking": false} */
static int read_template_kwargs(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    if (!cJSON_IsObject(v))
        return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const cJSON *f = v->child; f; f = f->next)
        if (!strcmp(f->string, "enable_thinking") && !cJSON_IsNull(f) &&
            serve_want_bool(f, "chat_template_kwargs.enable_thinking", &r->think, e))
            return -1;
    return 0;
}

int serve_read_model(const cJSON *v, const struct serve_model_ref *model, struct serve_error *e)
{
    if (!cJSON_IsString(v))
        return BAD(e, "model", "'model' must be a string");
    if (model->strict && strcmp(v->valuestring, model->id)) {
        serve_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.200s' does not exist: this server has '%.200s' (GET /v1/models)",
                        v->valuestring, model->id);
        return -1;
    }
    return 0;
}

int serve_body_model(const char *body, size_t len, cJSON **root, const char **name, struct serve_error *e)
{
    *name = NULL;
    if (serve_json_parse(body, len, root, e))
        return -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(*root, "model");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
        return BAD(e, "model", "'model' must be a string");
    *name = cJSON_IsString(v) ? v->valuestring : NULL;
    return 0;
}

/* OpenAI's {"ID": bias, ...} or llama-server's [[ID, bias], ...]; a bias
 * of false bans the token (llama-server's) */
#define MAX_LOGIT_BIAS 1024

static int add_bias(struct serve_request *r, double id, const cJSON *bias, uint32_t vocab, struct serve_error *e)
{
    double b;
    if (cJSON_IsFalse(bias))
        b = -100;
    else if (serve_want_number(bias, "logit_bias", -100, 100, &b, e))
        return -1;
    if (!(id >= 0 && id < vocab && id == floor(id)))
        return BAD(e, "logit_bias", "logit_bias: token %.0f is not an id of the vocabulary (0 to %u)", id, vocab - 1);
    r->bias[r->n_bias++] = (qpack_logit_bias){(int32_t)id, b};
    return 0;
}

static int read_logit_bias(const cJSON *v, struct serve_request *r, uint32_t vocab, struct serve_error *e)
{
    int n = cJSON_GetArraySize(v);
    if ((!cJSON_IsObject(v) && !cJSON_IsArray(v)) || n > MAX_LOGIT_BIAS)
        return BAD(e, "logit_bias", "'logit_bias' must map at most %d token ids to biases from -100 to 100",
                   MAX_LOGIT_BIAS);
    if (n && !(r->bias = calloc((size_t)n, sizeof *r->bias)))
        return BAD(e, "logit_bias", "out of memory");
    for (const cJSON *f = v->child; f; f = f->next) {
        if (cJSON_IsObject(v)) {
            char *end;
            double id = strtod(f->string, &end);
            if (!*f->string || *end)
                return BAD(e, "logit_bias", "logit_bias: '%.32s' is not a token id", f->string);
            if (add_bias(r, id, f, vocab, e))
                return -1;
        } else if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) != 2 || !cJSON_IsNumber(f->child)) {
            return BAD(e, "logit_bias", "logit_bias: each entry must be [token id, bias]");
        } else if (add_bias(r, f->child->valuedouble, f->child->next, vocab, e)) {
            return -1;
        }
    }
    r->sampling.logit_bias = r->bias;
    r->sampling.n_logit_bias = r->n_bias;
    return 0;
}

/* a field clients send with a neutral value: accepted when it has it, a
 * 400 naming it when it asks for what this server does not do yet */
static int neutral(const cJSON *f, bool ok, const char *what, struct serve_error *e)
{
    return ok ? 0 : BAD(e, f->string, "'%s': %s is not supported yet", f->string, what);
}

static bool is_empty_array(const cJSON *f)
{
    return cJSON_IsArray(f) && cJSON_GetArraySize(f) == 0;
}

/* the sampling fields, llama-server's names beside OpenAI's; 1 when f is
 * none of them */
static int read_sampling(const cJSON *f, struct serve_request *r, uint32_t vocab, struct serve_error *e)
{
    const char *k = f->string;
    qpack_sampler_params *sp = &r->sampling;
    double x;
    if (!strcmp(k, "temperature")) {
        r->given |= SERVE_GIVEN_TEMPERATURE;
        return serve_want_number(f, k, 0, 2, &sp->temperature, e);
    }
    if (!strcmp(k, "top_p")) {
        r->given |= SERVE_GIVEN_TOP_P;
        return serve_want_number(f, k, 0, 1, &sp->top_p, e);
    }
    if (!strcmp(k, "top_k")) {
        r->given |= SERVE_GIVEN_TOP_K;
        if (serve_want_integer(f, k, -1, INT32_MAX, &x, e))
            return -1;
        sp->top_k = x > 0 ? (uint32_t)x : 0;
        return 0;
    }
    if (!strcmp(k, "min_p")) {
        r->given |= SERVE_GIVEN_MIN_P;
        return serve_want_number(f, k, 0, 1, &sp->min_p, e);
    }
    if (!strcmp(k, "repeat_penalty") || !strcmp(k, "repetition_penalty")) {
        r->given |= SERVE_GIVEN_REPEAT_PENALTY;
        if (serve_want_number(f, k, 0, 100, &x, e))
            return -1;
        return x > 0 ? (sp->repeat_penalty = x, 0) : BAD(e, k, "'%s' must be above 0", k);
    }
    if (!strcmp(k, "repeat_last_n")) {
        if (serve_want_integer(f, k, -1, INT32_MAX, &x, e))
            return -1;
        sp->repeat_last_n = x < 0 ? UINT32_MAX : (uint32_t)x;
        return 0;
    }
    if (!strcmp(k, "presence_penalty"))
        return serve_want_number(f, k, -2, 2, &sp->presence_penalty, e);
    if (!strcmp(k, "frequency_penalty"))
        return serve_want_number(f, k, -2, 2, &sp->frequency_penalty, e);
    if (!strcmp(k, "logit_bias"))
        return read_logit_bias(f, r, vocab, e);
    if (!strcmp(k, "seed")) {
        if (serve_want_integer(f, k, -9007199254740992.0, 9007199254740992.0, &x, e))
            return -1;
        r->has_seed = true;
        sp->seed = (uint64_t)(int64_t)x;
        return 0;
    }
    return 1;
}

/* tool_choice: "none" (the tools are not offered), "auto", "required" or
 * {"type": "function", "function": {"name": NAME}} (a call is forced:
 * read_body makes the format once the tools are known) */
static int read_tool_choice(const cJSON *f, struct serve_request *r, struct serve_error *e)
{
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "function"),
                *name = cJSON_GetObjectItemCaseSensitive(fn, "name"),
                *type = cJSON_GetObjectItemCaseSensitive(f, "type");
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "none")) {
        r->no_tools = true;
        return 0;
    }
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "auto"))
        return 0;
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "required")) {
        r->tool_required = true;
        return 0;
    }
    if (cJSON_IsObject(f) && cJSON_IsString(type) && !strcmp(type->valuestring, "function") && cJSON_IsString(name)) {
        free(r->tool_name);
        if (!(r->tool_name = strdup(name->valuestring)))
            return BAD(e, "tool_choice", "out of memory");
        return 0;
    }
    return BAD(e, "tool_choice",
               "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
               "\"function\": {\"name\": ...}}");
}

/* one top-level field; unknown ones are ignored */
static int read_field(const cJSON *f, enum serve_kind kind, const struct serve_model_ref *model,
                      struct serve_request *r, struct serve_error *e)
{
    const char *k = f->string;
    double x;
    bool chat = kind == SERVE_CHAT, b;
    int rc = read_sampling(f, r, model->vocab, e);
    if (rc <= 0)
        return rc;
    if (!strcmp(k, "model"))
        return serve_read_model(f, model, e);
    if (!strcmp(k, "messages"))
        return chat ? read_messages(f, r, e) : BAD(e, k, "'messages' belongs to /v1/chat/completions");
    if (!strcmp(k, "prompt"))
        return !chat ? read_prompt(f, r, e) : BAD(e, k, "'prompt' belongs to /v1/completions");
    if (!strcmp(k, "max_tokens") || (chat && !strcmp(k, "max_completion_tokens")) || !strcmp(k, "n_predict")) {
        if (serve_want_integer(f, k, 1, MAX_NEW_TOKENS, &x, e))
            return -1;
        r->has_max_tokens = true;
        r->max_tokens = (uint32_t)x;
        return 0;
    }
    if (!strcmp(k, "stop"))
        return read_stops(f, &r->stops, e);
    if (!strcmp(k, "stream"))
        return serve_want_bool(f, k, &r->stream, e);
    if (!strcmp(k, "stream_options"))
        return read_stream_options(f, r, e);
    if (chat && !strcmp(k, "chat_template_kwargs"))
        return read_template_kwargs(f, r, e);
    if (!strcmp(k, "cache_prompt") || !strcmp(k, "parallel_tool_calls") || !strcmp(k, "store"))
        return serve_want_bool(f, k, &b, e);
    if (!strcmp(k, "user"))
        return cJSON_IsString(f) ? 0 : BAD(e, k, "'user' must be a string");
    if (!strcmp(k, "n")) {
        if (serve_want_integer(f, k, 1, SERVE_MAX_CHOICES, &x, e))
            return -1;
        r->n_choices = (unsigned)x;
        return 0;
    }
    if (!strcmp(k, "best_of"))
        return serve_want_integer(f, k, 1, 128, &x, e) ? -1 : neutral(f, x == 1, "best_of above 1", e);
    /* chat: logprobs true, top_logprobs alternatives; completions:
     * logprobs N, the chosen token's and N alternatives */
    if (!strcmp(k, "logprobs") && chat) {
        if (serve_want_bool(f, k, &b, e))
            return -1;
        r->logprobs = b;
        return 0;
    }
    if (!strcmp(k, "logprobs") || (chat && !strcmp(k, "top_logprobs"))) {
        if (serve_want_integer(f, k, 0, SERVE_MAX_TOP_LOGPROBS, &x, e))
            return -1;
        r->top_logprobs = (unsigned)x;
        r->logprobs = r->logprobs || !chat;
        return 0;
    }
    if (!strcmp(k, "echo") && !chat)
        return serve_want_bool(f, k, &r->echo, e);
    if (!strcmp(k, "suffix") && !chat)
        return neutral(f, cJSON_IsString(f) && !*f->valuestring, "a suffix", e);
    if (!strcmp(k, "tools") && chat)
        return serve_read_tools(f, r, e);
    if (!strcmp(k, "tools") || !strcmp(k, "functions"))
        return neutral(f, is_empty_array(f), "tool calling", e);
    if (!strcmp(k, "tool_choice") && chat)
        return read_tool_choice(f, r, e);
    if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call"))
        return neutral(f, cJSON_IsString(f) && (!strcmp(f->valuestring, "none") || !strcmp(f->valuestring, "auto")),
                       "a forced tool call", e);
    if (!strcmp(k, "response_format")) {
        serve_format_unref(r->format);
        return serve_format_read(f, &r->format, e);
    }
    return 0;
}

/* a seed from the system's entropy when the request gives none */
static uint64_t random_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s)
        s = 0x9e3779b97f4a7c15ull;
    return s;
}

/* the model's sampling for each field the request leaves out */
static void take_model_sampling(struct serve_request *r, const qpack_sampler_params *d)
{
    qpack_sampler_params *sp = &r->sampling;
    if (!(r->given & SERVE_GIVEN_TEMPERATURE))
        sp->temperature = d->temperature;
    if (!(r->given & SERVE_GIVEN_TOP_K))
        sp->top_k = d->top_k;
    if (!(r->given & SERVE_GIVEN_TOP_P))
        sp->top_p = d->top_p;
    if (!(r->given & SERVE_GIVEN_MIN_P))
        sp->min_p = d->min_p;
    if (!(r->given & SERVE_GIVEN_REPEAT_PENALTY))
        sp->repeat_penalty = d->repeat_penalty;
}

static int read_body(const cJSON *root, enum serve_kind kind, const struct serve_model_ref *model,
                     struct serve_request *r, struct serve_error *e)
{
    if (!cJSON_IsObject(root))
        return BAD(e, NULL, "the request body must be a JSON object");
    for (const cJSON *f = root->child; f; f = f->next)
        if (!cJSON_IsNull(f) && read_field(f, kind, model, r, e))
            return -1;
    if (kind == SERVE_CHAT && !r->msgs)
        return BAD(e, "messages", "'messages' is required");
    if (kind == SERVE_CHAT && r->top_logprobs && !r->logprobs)
        return BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (kind == SERVE_COMPLETION && !r->prompt && !r->prompt_ids)
        return BAD(e, "prompt", "'prompt' is required");
    return serve_request_settle(model, r, e);
}

int serve_request_settle(const struct serve_model_ref *model, struct serve_request *r, struct serve_error *e)
{
    enum serve_kind kind = r->kind;
    /* the queue takes a request's replies together or not at all */
    if (model->max_choices && r->n_choices > model->max_choices)
        return BAD(e, "n", "'n' is %u, but this server holds at most %u replies at once (--parallel + --queue)",
                   r->n_choices, model->max_choices);
    if (r->no_tools) {
        for (size_t i = 0; i < r->n_tools; i++)
            free(r->tools[i]);
        r->n_tools = 0;
    }
    if ((r->tool_required || r->tool_name) && !r->no_tools) {
        if (r->format)
            return BAD(e, "tool_choice", "a forced tool call and a response_format cannot both hold the reply");
        if (serve_format_tool_call(r->tools, r->n_tools, r->tool_name, &r->format, e))
            return -1;
    }
    /* a held reply ends where its value does: a stop string would cut the
     * value inside (a '}' in a string, a blank between items) */
    if (r->format) {
        for (unsigned i = 0; i < r->stops.n; i++)
            free(r->stops.s[i]);
        r->stops = (struct serve_stops){0};
    }
    if (!r->has_max_tokens && kind == SERVE_COMPLETION)
        r->max_tokens = COMPLETION_DEFAULT_NEW, r->has_max_tokens = true;
    const qpack_sampler_params *d = model->sampling[kind == SERVE_COMPLETION || r->think];
    if (d)
        take_model_sampling(r, d);
    if (r->sampling.top_p == 0)     /* only the most likely token is left */
        r->sampling.temperature = 0, r->sampling.top_p = 1;
    if (!r->has_seed)
        r->sampling.seed = random_seed();
    return 0;
}

qpack_sampler_params serve_default_sampling(void)
{
    qpack_sampler_params p = qpack_sampler_default_params();
    cli_default_sampling(&p);   /* qrun's too */
    p.repeat_last_n = 64;       /* llama-server's window for the penalties */
    return p;
}

int serve_json_parse(const char *body, size_t len, cJSON **out, struct serve_error *e)
{
    *out = NULL;
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
    if (json_refuse_ambiguous(root, body, len, "request body", &strict)) {
        cJSON_Delete(root);
        serve_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", strict.msg);
        return -1;
    }
    *out = root;
    return 0;
}

int serve_parse_request(enum serve_kind kind, const char *body, size_t len, const struct serve_model_ref *model,
                        struct serve_request *r, struct serve_error *e)
{
    *r = (struct serve_request){.kind = kind, .sampling = serve_default_sampling()};
    cJSON *root;
    if (serve_json_parse(body, len, &root, e))
        return -1;
    int rc = read_body(root, kind, model, r, e);
    cJSON_Delete(root);
    if (rc)
        serve_request_free(r);
    return rc;
}

void serve_request_free(struct serve_request *r)
{
    for (size_t i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].content);
        free((char *)r->msgs[i].reasoning);
        serve_tool_calls_free(&r->msgs[i]);
    }
    free(r->msgs);
    for (size_t i = 0; i < r->n_tools; i++)
        free(r->tools[i]);
    free(r->tools);
    free(r->prompt);
    free(r->prompt_ids);
    for (unsigned i = 0; i < r->stops.n; i++)
        free(r->stops.s[i]);
    free(r->bias);
    free(r->tool_name);
    serve_format_unref(r->format);
    *r = (struct serve_request){0};
}
