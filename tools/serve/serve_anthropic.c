/* serve_anthropic.c - Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens): its request read into the chat request the
 * OpenAI side makes (serve.h), so the template, the tools, the forced
 * calls and the sampling are the same; its reply, events and errors.
 *
 * The field policy is serve_openai.c's: strict JSON, every field known
 * here checked for its type and range with a 400 naming it, unknown
 * fields ignored (in the body, the blocks, the tools), null for an absent
 * optional field. Content blocks are text, tool_use, tool_result,
 * thinking and redacted_thinking (dropped, as the template drops earlier
 * thinking); image, document and the other kinds are refused by name;
 * cache_control and citations are ignored. A user turn's tool_result
 * blocks become the template's tool turns, in their order. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "serve.h"

#define MAX_NEW_TOKENS (1u << 20)   /* as serve_openai.c's bound */
#define MIN_THINKING_BUDGET 1024    /* Anthropic's */

#define BAD(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)
#define BAD_NULL(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), NULL)

static const cJSON *field(const cJSON *o, const char *name) { return cJSON_GetObjectItemCaseSensitive(o, name); }

/* a field that may be absent: null is */
static const cJSON *given(const cJSON *o, const char *name)
{
    const cJSON *f = field(o, name);
    return cJSON_IsNull(f) ? NULL : f;
}

static bool is_type(const cJSON *block, const char *type)
{
    const cJSON *t = field(block, "type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, type);
}

/* ---- text joined from blocks ---------------------------------------------- */

/* the text, malloc'd ("" for none), or NULL when out of memory; t is emptied */
static char *text_take(struct qp_buf *t)
{
    char *s = t->oom ? NULL : t->s ? t->s : strdup("");
    if (t->oom)
        free(t->s);
    *t = (struct qp_buf){0};
    return s;
}

/* {"type": "text", "text": STRING} of a content or a system prompt; param:
 * the top-level field at fault, where: the place in it */
static int text_block(const cJSON *b, const char *param, const char *where, struct qp_buf *t, struct serve_error *e)
{
    const cJSON *s = field(b, "text");
    if (!cJSON_IsString(s))
        return BAD(e, param, "%s: a text block's 'text' must be a string", where);
    qp_buf_adds(t, s->valuestring);
    return 0;
}

/* a string, or an array of text blocks (a system prompt, a tool's result) */
static int read_text(const cJSON *v, const char *param, const char *where, struct qp_buf *t, struct serve_error *e)
{
    if (cJSON_IsString(v)) {
        qp_buf_adds(t, v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v))
        return BAD(e, param, "%s must be a string or an array of text blocks", where);
    for (const cJSON *b = v->child; b; b = b->next)
        if (!cJSON_IsObject(b) || !is_type(b, "text"))
            return BAD(e, param, "%s: only text blocks are supported here", where);
        else if (text_block(b, param, where, t, e))
            return -1;
    return 0;
}

/* ---- messages ------------------------------------------------------------- */

/* the chat messages being made, with room for every one */
struct conv {
    struct serve_request *r;
    char where[48];             /* "messages[I]" */
};

static qpack_chat_message *add_message(struct conv *c, const char *role, struct qp_buf *t, struct serve_error *e)
{
    qpack_chat_message *m = &c->r->msgs[c->r->n_msgs++];
    m->role = role;
    if (!(m->content = text_take(t)))
        return BAD_NULL(e, "messages", "out of memory");
    return m;
}

/* {"type": "tool_result", "tool_use_id", "content", "is_error"}: a tool turn */
static int tool_result(struct conv *c, const cJSON *b, struct serve_error *e)
{
    const cJSON *id = field(b, "tool_use_id"), *content = given(b, "content"), *err = given(b, "is_error");
    if (!cJSON_IsString(id))
        return BAD(e, "messages", "%s: a tool_result block's 'tool_use_id' must be a string", c->where);
    if (err && !cJSON_IsBool(err))
        return BAD(e, "messages", "%s: a tool_result block's 'is_error' must be true or false", c->where);
    struct qp_buf t = {0};
    if (content && read_text(content, "messages", c->where, &t, e)) {
        free(t.s);
        return -1;
    }
    return add_message(c, "tool", &t, e) ? 0 : -1;
}

/* {"type": "tool_use", "id", "name", "input"}: a call the assistant made */
static int tool_use(struct conv *c, qpack_tool_call *call, const cJSON *b, struct serve_error *e)
{
    const cJSON *id = field(b, "id"), *name = field(b, "name"), *input = field(b, "input");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !*name->valuestring || !cJSON_IsObject(input))
        return BAD(e, "messages", "%s: a tool_use block needs an 'id', a 'name' and an 'input' object", c->where);
    call->name = strdup(name->valuestring);
    call->arguments = serve_python_json(input);
    return call->name && call->arguments ? 0 : BAD(e, "messages", "out of memory");
}

static int user_blocks(struct conv *c, const cJSON *content, struct serve_error *e)
{
    struct qp_buf t = {0};
    bool results = false;
    for (const cJSON *b = content->child; b; b = b->next) {
        int rc;
        if (is_type(b, "text")) {
            rc = text_block(b, "messages", c->where, &t, e);
        } else if (is_type(b, "tool_result")) {
            /* the text before a result is a user turn of its own */
            rc = t.len && !add_message(c, "user", &t, e) ? -1 : tool_result(c, b, e);
            results = true;
        } else {
            const cJSON *type = field(b, "type");
            rc = BAD(e, "messages", "%s: a user's '%.32s' block is not supported (text and tool_result are)",
                     c->where, cJSON_IsString(type) ? type->valuestring : "untyped");
        }
        if (rc) {
            free(t.s);
            return -1;
        }
    }
    if (results && !t.len && !t.oom) {
        free(t.s);
        return 0;
    }
    return add_message(c, "user", &t, e) ? 0 : -1;
}

static int assistant_blocks(struct conv *c, const cJSON *content, struct serve_error *e)
{
    struct qp_buf t = {0}, thought = {0};
    size_t n_calls = 0;
    for (const cJSON *b = content->child; b; b = b->next)
        n_calls += is_type(b, "tool_use");
    qpack_tool_call *calls = n_calls ? calloc(n_calls, sizeof *calls) : NULL;
    size_t made = 0;
    int rc = n_calls && !calls ? BAD(e, "messages", "out of memory") : 0;
    for (const cJSON *b = content->child; b && !rc; b = b->next) {
        const cJSON *th = field(b, "thinking");
        if (is_type(b, "text"))
            rc = text_block(b, "messages", c->where, &t, e);
        else if (is_type(b, "tool_use"))
            rc = tool_use(c, &calls[made++], b, e);
        else if (is_type(b, "thinking") && !cJSON_IsString(th))
            rc = BAD(e, "messages", "%s: a thinking block's 'thinking' must be a string", c->where);
        else if (is_type(b, "thinking"))
            qp_buf_adds(&thought, th->valuestring);
        else if (!is_type(b, "redacted_thinking")) {
            const cJSON *type = field(b, "type");
            rc = BAD(e, "messages", "%s: an assistant's '%.32s' block is not supported (text, tool_use and "
                     "thinking are)", c->where, cJSON_IsString(type) ? type->valuestring : "untyped");
        }
    }
    qpack_chat_message *m = rc ? NULL : add_message(c, "assistant", &t, e);
    if (m) {
        m->tool_calls = calls, m->n_tool_calls = made;
        if (thought.len && !(m->reasoning = text_take(&thought)))
            return BAD(e, "messages", "out of memory");
        free(thought.s);
        return 0;
    }
    free(t.s);
    free(thought.s);
    qpack_chat_message tmp = {.tool_calls = calls, .n_tool_calls = made};
    serve_tool_calls_free(&tmp);
    return -1;
}

static int read_message(struct conv *c, const cJSON *m, size_t i, struct serve_error *e)
{
    snprintf(c->where, sizeof c->where, "messages[%zu]", i);
    const cJSON *role = field(m, "role"), *content = field(m, "content");
    if (!cJSON_IsObject(m))
        return BAD(e, "messages", "%s must be an object", c->where);
    bool user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
    if (!user && !(cJSON_IsString(role) && !strcmp(role->valuestring, "assistant")))
        return BAD(e, "messages", "%s.role must be \"user\" or \"assistant\" (the system prompt is 'system')",
                   c->where);
    if (cJSON_IsString(content)) {
        struct qp_buf t = {0};
        qp_buf_adds(&t, content->valuestring);
        return add_message(c, user ? "user" : "assistant", &t, e) ? 0 : -1;
    }
    if (!cJSON_IsArray(content))
        return BAD(e, "messages", "%s.content must be a string or an array of content blocks", c->where);
    for (const cJSON *b = content->child; b; b = b->next)
        if (!cJSON_IsObject(b) || !cJSON_IsString(field(b, "type")))
            return BAD(e, "messages", "%s.content: each block must be an object with a 'type'", c->where);
    return user ? user_blocks(c, content, e) : assistant_blocks(c, content, e);
}

/* the system prompt first, then each message as one or more chat turns */
static int read_messages(const cJSON *system, const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n < 1 || n > SERVE_MAX_MESSAGES)
        return BAD(e, "messages", "'messages' must be an array of 1 to %d messages", SERVE_MAX_MESSAGES);
    size_t room = 1;
    for (const cJSON *m = v->child; m; m = m->next)
        room += 1 + 2 * (size_t)cJSON_GetArraySize(field(m, "content"));    /* a result may split the text */
    if (!(r->msgs = calloc(room, sizeof *r->msgs)))
        return BAD(e, "messages", "out of memory");
    struct conv c = {.r = r};
    if (system) {
        struct qp_buf t = {0};
        if (read_text(system, "system", "system", &t, e)) {
            free(t.s);
            return -1;
        }
        if (!add_message(&c, "system", &t, e))
            return -1;
    }
    size_t i = 0;
    for (const cJSON *m = v->child; m; m = m->next, i++)
        if (read_message(&c, m, i, e))
            return -1;
    /* a last assistant turn is Anthropic's prefill, which the template
     * would close as a whole turn instead of continuing it */
    if (!strcmp(r->msgs[r->n_msgs - 1].role, "assistant"))
        return BAD(e, "messages", "the last message is the assistant's: continuing it (prefill) is not supported");
    return 0;
}

/* ---- tools ---------------------------------------------------------------- */

/* {name, description, input_schema} as the OpenAI tool the template writes */
static cJSON *openai_tool(const cJSON *t, size_t i, struct serve_error *e)
{
    const cJSON *type = given(t, "type"), *name = field(t, "name"), *desc = given(t, "description"),
                *schema = field(t, "input_schema"), *stype = field(schema, "type");
    if (!cJSON_IsObject(t))
        return BAD_NULL(e, "tools", "tools[%zu] must be an object", i);
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "custom")))
        return BAD_NULL(e, "tools", "tools[%zu]: only client tools (no 'type', or \"custom\") are supported", i);
    if (!cJSON_IsString(name) || !*name->valuestring)
        return BAD_NULL(e, "tools", "tools[%zu].name must be a non-empty string", i);
    if (desc && !cJSON_IsString(desc))
        return BAD_NULL(e, "tools", "tools[%zu].description must be a string", i);
    if (!cJSON_IsObject(schema) || !cJSON_IsString(stype) || strcmp(stype->valuestring, "object"))
        return BAD_NULL(e, "tools", "tools[%zu].input_schema must be an object's schema ({\"type\": \"object\", ...})",
                   i);
    cJSON *o = cJSON_CreateObject(), *fn = NULL, *params = cJSON_Duplicate(schema, true);
    bool ok = o && params && cJSON_AddStringToObject(o, "type", "function") &&
              (fn = cJSON_AddObjectToObject(o, "function")) && cJSON_AddStringToObject(fn, "name", name->valuestring) &&
              (!desc || cJSON_AddStringToObject(fn, "description", desc->valuestring)) &&
              cJSON_AddItemToObject(fn, "parameters", params);
    if (!ok) {
        if (!fn || !cJSON_GetObjectItemCaseSensitive(fn, "parameters"))
            cJSON_Delete(params);
        cJSON_Delete(o);
        return BAD_NULL(e, "tools", "out of memory");
    }
    return o;
}

static int read_tools(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > SERVE_MAX_TOOLS)
        return BAD(e, "tools", "'tools' must be an array of at most %d tools", SERVE_MAX_TOOLS);
    cJSON *all = cJSON_CreateArray();
    if (!all)
        return BAD(e, "tools", "out of memory");
    size_t i = 0;
    for (const cJSON *t = v->child; t; t = t->next, i++) {
        cJSON *o = openai_tool(t, i, e);
        if (!o || !cJSON_AddItemToArray(all, o)) {
            cJSON_Delete(o);
            cJSON_Delete(all);
            return o ? BAD(e, "tools", "out of memory") : -1;
        }
    }
    int rc = serve_read_tools(all, r, e);
    cJSON_Delete(all);
    return rc;
}

/* {"type": "auto" | "any" | "none"} or {"type": "tool", "name": NAME};
 * disable_parallel_tool_use is what Qwen3 does anyway */
static int read_tool_choice(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    const cJSON *type = field(v, "type"), *name = given(v, "name"), *one = given(v, "disable_parallel_tool_use");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!cJSON_IsObject(v) || (strcmp(t, "auto") && strcmp(t, "any") && strcmp(t, "none") && strcmp(t, "tool")))
        return BAD(e, "tool_choice", "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": "
                   "\"none\"} or {\"type\": \"tool\", \"name\": ...}");
    if (one && !cJSON_IsBool(one))
        return BAD(e, "tool_choice", "tool_choice.disable_parallel_tool_use must be true or false");
    if (!strcmp(t, "tool")) {
        if (!cJSON_IsString(name))
            return BAD(e, "tool_choice", "tool_choice.name must name the tool");
        if (!(r->tool_name = strdup(name->valuestring)))
            return BAD(e, "tool_choice", "out of memory");
    }
    r->tool_required = !strcmp(t, "any");
    r->no_tools = !strcmp(t, "none");
    return 0;
}

/* ---- the body ------------------------------------------------------------- */

/* {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}; the
 * budget is checked as Anthropic checks it, and max_tokens bounds the
 * reply's thinking and answer together */
static int read_thinking(const cJSON *v, bool count, struct serve_request *r, struct serve_error *e)
{
    const cJSON *type = field(v, "type"), *budget = given(v, "budget_tokens");
    if (cJSON_IsObject(v) && is_type(v, "disabled")) {
        r->think = false;
        return 0;
    }
    if (!cJSON_IsObject(v) || !cJSON_IsString(type) || strcmp(type->valuestring, "enabled"))
        return BAD(e, "thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or "
                   "{\"type\": \"disabled\"}");
    double x, hi = count || !r->has_max_tokens ? MAX_NEW_TOKENS : r->max_tokens - 1.0;
    if (!budget)
        return BAD(e, "thinking", "thinking.budget_tokens is required");
    if (serve_want_integer(budget, "thinking.budget_tokens", MIN_THINKING_BUDGET, hi, &x, e))
        return hi < MIN_THINKING_BUDGET ? BAD(e, "thinking", "thinking.budget_tokens must be below max_tokens, which "
                                              "must then be above %d", MIN_THINKING_BUDGET) : -1;
    r->think = true;
    return 0;
}

static int read_stops(const cJSON *v, struct serve_stops *st, struct serve_error *e)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > SERVE_MAX_STOPS)
        return BAD(e, "stop_sequences", "'stop_sequences' must be an array of at most %d strings", SERVE_MAX_STOPS);
    for (const cJSON *s = v->child; s; s = s->next) {
        size_t n = cJSON_IsString(s) ? strlen(s->valuestring) : 0;
        if (n == 0 || n > SERVE_MAX_STOP_LEN)
            return BAD(e, "stop_sequences", "a stop sequence must be a string of 1 to %d bytes", SERVE_MAX_STOP_LEN);
        if (!(st->s[st->n] = strdup(s->valuestring)))
            return BAD(e, "stop_sequences", "out of memory");
        st->len[st->n++] = n;
    }
    return 0;
}

/* max_tokens, the stop sequences and the sampling: what a count ignores */
static int read_generation(const cJSON *root, struct serve_request *r, struct serve_error *e)
{
    const cJSON *f;
    double x;
    qpack_sampler_params *sp = &r->sampling;
    if (!(f = given(root, "max_tokens")))
        return BAD(e, "max_tokens", "'max_tokens' is required");
    if (serve_want_integer(f, "max_tokens", 1, MAX_NEW_TOKENS, &x, e))
        return -1;
    r->has_max_tokens = true, r->max_tokens = (uint32_t)x;
    if ((f = given(root, "stop_sequences")) && read_stops(f, &r->stops, e))
        return -1;
    if ((f = given(root, "stream")) && !cJSON_IsBool(f))
        return BAD(e, "stream", "'stream' must be true or false");
    r->stream = cJSON_IsTrue(f);
    if ((f = given(root, "temperature"))) {
        r->given |= SERVE_GIVEN_TEMPERATURE;
        if (serve_want_number(f, "temperature", 0, 1, &sp->temperature, e))
            return -1;
    }
    if ((f = given(root, "top_p"))) {
        r->given |= SERVE_GIVEN_TOP_P;
        if (serve_want_number(f, "top_p", 0, 1, &sp->top_p, e))
            return -1;
    }
    if ((f = given(root, "top_k"))) {
        r->given |= SERVE_GIVEN_TOP_K;
        if (serve_want_integer(f, "top_k", 0, INT32_MAX, &x, e))
            return -1;
        sp->top_k = (uint32_t)x;
    }
    return 0;
}

static int read_body(const cJSON *root, bool count, const struct serve_model_ref *model, struct serve_request *r,
                     struct serve_error *e)
{
    if (!cJSON_IsObject(root))
        return BAD(e, NULL, "the request body must be a JSON object");
    const cJSON *f;
    if ((f = given(root, "model")) && serve_read_model(f, model, e))
        return -1;
    if (!count && read_generation(root, r, e))
        return -1;
    if ((f = given(root, "metadata")) && !cJSON_IsObject(f))
        return BAD(e, "metadata", "'metadata' must be an object");
    if ((f = given(root, "thinking")) && read_thinking(f, count, r, e))
        return -1;
    if ((f = given(root, "tools")) && read_tools(f, r, e))
        return -1;
    if ((f = given(root, "tool_choice")) && read_tool_choice(f, r, e))
        return -1;
    const cJSON *system = given(root, "system"), *messages = given(root, "messages");
    if (!messages)
        return BAD(e, "messages", "'messages' is required");
    if (read_messages(system, messages, r, e))
        return -1;
    return serve_request_settle(model, r, e);
}

int serve_parse_messages(const char *body, size_t len, bool count, const struct serve_model_ref *model,
                         struct serve_request *r, struct serve_error *e)
{
    *r = (struct serve_request){.kind = SERVE_CHAT, .sampling = serve_default_sampling()};
    cJSON *root;
    if (serve_json_parse(body, len, &root, e))
        return -1;
    int rc = read_body(root, count, model, r, e);
    cJSON_Delete(root);
    if (rc)
        serve_request_free(r);
    return rc;
}

/* ---- replies -------------------------------------------------------------- */

char *serve_anthropic_error_json(const struct serve_error *e)
{
    const char *type;
    switch (e->http) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: type = e->http >= 500 ? "api_error" : "invalid_request_error";
    }
    /* the OpenAI body's message, already made valid UTF-8 there */
    cJSON *openai = NULL;
    char *s = serve_error_json(e);
    if (s)
        openai = cJSON_Parse(s);
    free(s);
    const cJSON *msg = field(field(openai, "error"), "message");
    cJSON *root = cJSON_CreateObject(), *err;
    bool ok = cJSON_IsString(msg) && root && cJSON_AddStringToObject(root, "type", "error") &&
              (err = cJSON_AddObjectToObject(root, "error")) && cJSON_AddStringToObject(err, "type", type) &&
              cJSON_AddStringToObject(err, "message", msg->valuestring);
    cJSON_Delete(openai);
    return serve_json_print(root, ok);
}

char *serve_count_tokens_json(size_t n)
{
    cJSON *root = cJSON_CreateObject();
    return serve_json_print(root, root && cJSON_AddNumberToObject(root, "input_tokens", (double)n));
}

static const char *stop_reason(const char *finish, const char *stop_string)
{
    if (!strcmp(finish, "tool_calls"))
        return "tool_use";
    if (!strcmp(finish, "length"))
        return "max_tokens";
    return stop_string ? "stop_sequence" : "end_turn";
}

static bool add_string_or_null(cJSON *o, const char *name, const char *s)
{
    return s ? cJSON_AddStringToObject(o, name, s) != NULL : cJSON_AddNullToObject(o, name) != NULL;
}

/* text[0..len) as o's field name (it may hold NUL bytes) */
static bool add_text(cJSON *o, const char *name, const char *text, size_t len)
{
    cJSON *s = serve_json_text(text, len);
    if (s && cJSON_AddItemToObject(o, name, s))
        return true;
    cJSON_Delete(s);
    return false;
}

/* a call's id as Anthropic writes them, toolu_ and the call's random digits */
static void tool_use_id(const struct serve_tool_call *call, char *out, size_t cap)
{
    const char *digits = strncmp(call->id, "call_", 5) ? call->id : call->id + 5;
    snprintf(out, cap, "toolu_%s", digits);
}

/* a call's arguments as the input object (text that is not one: {}) */
static cJSON *tool_input(const struct serve_tool_call *call)
{
    cJSON *in = cJSON_Parse(call->arguments);
    if (cJSON_IsObject(in))
        return in;
    cJSON_Delete(in);
    return cJSON_CreateObject();
}

/* {"type": "tool_use", "id", "name", "input"}; input NULL: {} */
static cJSON *tool_use_block(const struct serve_tool_call *call, bool whole)
{
    char id[64];
    tool_use_id(call, id, sizeof id);
    cJSON *b = cJSON_CreateObject(), *in = whole ? tool_input(call) : cJSON_CreateObject();
    bool ok = b && in && cJSON_AddStringToObject(b, "type", "tool_use") && cJSON_AddStringToObject(b, "id", id) &&
              cJSON_AddStringToObject(b, "name", call->name) && cJSON_AddItemToObject(b, "input", in);
    if (!ok) {
        if (!b || !field(b, "input"))
            cJSON_Delete(in);
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

static bool append(cJSON *array, cJSON *item)
{
    if (item && cJSON_AddItemToArray(array, item))
        return true;
    cJSON_Delete(item);
    return false;
}

/* {"type": TYPE, FIELD: text} */
static cJSON *text_block_json(const char *type, const char *name, const char *text, size_t len)
{
    cJSON *b = cJSON_CreateObject();
    bool ok = b && cJSON_AddStringToObject(b, "type", type) && add_text(b, name, text, len) &&
              (strcmp(type, "thinking") || cJSON_AddStringToObject(b, "signature", ""));
    if (!ok)
        cJSON_Delete(b), b = NULL;
    return b;
}

static bool add_usage(cJSON *o, uint32_t input, uint32_t output)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    return u && cJSON_AddNumberToObject(u, "input_tokens", input) && cJSON_AddNumberToObject(u, "output_tokens", output);
}

/* {id, type, role, model, content, stop_reason, stop_sequence, usage} */
static cJSON *message(const struct serve_reply_meta *r, const char *reason, const char *stop_string,
                      uint32_t input, uint32_t output)
{
    cJSON *m = cJSON_CreateObject();
    bool ok = m && cJSON_AddStringToObject(m, "id", r->id) && cJSON_AddStringToObject(m, "type", "message") &&
              cJSON_AddStringToObject(m, "role", "assistant") && cJSON_AddStringToObject(m, "model", r->model) &&
              cJSON_AddArrayToObject(m, "content") && add_string_or_null(m, "stop_reason", reason) &&
              add_string_or_null(m, "stop_sequence", stop_string) && add_usage(m, input, output);
    if (!ok)
        cJSON_Delete(m), m = NULL;
    return m;
}

char *serve_message_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, const char *finish,
                         const char *stop_string, const struct serve_usage *u)
{
    cJSON *m = message(r, stop_reason(finish, stop_string), stop_string, u->prompt_tokens, u->completion_tokens);
    cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    bool ok = m != NULL;
    if (ok && t->reasoning_len)
        ok = append(content, text_block_json("thinking", "thinking", t->reasoning, t->reasoning_len));
    if (ok && t->content_len)
        ok = append(content, text_block_json("text", "text", t->content, t->content_len));
    for (size_t i = 0; ok && i < t->n_calls; i++)
        ok = append(content, tool_use_block(&t->calls[i], true));
    return serve_json_print(m, ok);
}

/* ---- events --------------------------------------------------------------- */

/* "event: TYPE\ndata: JSON\n\n" appended to *t; takes data */
static void event(struct qp_buf *t, cJSON *data)
{
    const cJSON *type = field(data, "type");
    char *json = cJSON_IsString(type) ? cJSON_PrintUnformatted(data) : NULL;
    if (!json) {
        t->oom = true;
    } else {
        qp_buf_adds(t, "event: ");
        qp_buf_adds(t, type->valuestring);
        qp_buf_adds(t, "\ndata: ");
        qp_buf_adds(t, json);
        qp_buf_adds(t, "\n\n");
    }
    free(json);
    cJSON_Delete(data);
}

/* {"type": TYPE, "index": I} and what else the caller adds */
static cJSON *indexed(const char *type, unsigned index)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "type", type) || !cJSON_AddNumberToObject(o, "index", index))
        cJSON_Delete(o), o = NULL;
    return o;
}

static void block_start(struct qp_buf *t, unsigned index, cJSON *block)
{
    cJSON *o = indexed("content_block_start", index);
    if (!block || !o || !cJSON_AddItemToObject(o, "content_block", block)) {
        cJSON_Delete(block);
        cJSON_Delete(o);
        t->oom = true;
        return;
    }
    event(t, o);
}

static void block_stop(struct qp_buf *t, struct serve_message_events *ev)
{
    if (!ev->open)
        return;
    event(t, indexed("content_block_stop", ev->index++));
    ev->open = 0;
}

/* a delta {"type": TYPE, NAME: VALUE} of the open block */
static void block_delta(struct qp_buf *t, unsigned index, const char *type, const char *name, const char *value,
                        size_t len)
{
    cJSON *o = indexed("content_block_delta", index), *d = NULL;
    bool ok = o && (d = cJSON_AddObjectToObject(o, "delta")) && cJSON_AddStringToObject(d, "type", type) &&
              add_text(d, name, value, len);
    if (!ok) {
        cJSON_Delete(o);
        t->oom = true;
        return;
    }
    event(t, o);
}

enum { OPEN_NONE, OPEN_THINKING, OPEN_TEXT };

/* text of the kind `open` goes to its block, started when another is open */
static void stream_text(struct qp_buf *t, struct serve_message_events *ev, int open, const char *s, size_t len)
{
    if (!len)
        return;
    bool thinking = open == OPEN_THINKING;
    if (ev->open != open) {
        block_stop(t, ev);
        block_start(t, ev->index, thinking ? text_block_json("thinking", "thinking", "", 0)
                                           : text_block_json("text", "text", "", 0));
        ev->open = open;
    }
    block_delta(t, ev->index, thinking ? "thinking_delta" : "text_delta", thinking ? "thinking" : "text", s, len);
}

char *serve_message_start_events(const struct serve_reply_meta *r)
{
    struct qp_buf t = {0};
    cJSON *o = cJSON_CreateObject(), *m = message(r, NULL, NULL, r->prompt_tokens, 0);
    if (!o || !m || !cJSON_AddStringToObject(o, "type", "message_start") || !cJSON_AddItemToObject(o, "message", m)) {
        if (!o || !field(o, "message"))
            cJSON_Delete(m);
        cJSON_Delete(o);
        return NULL;
    }
    event(&t, o);
    return text_take(&t);
}

char *serve_message_delta_events(struct serve_message_events *ev, const struct serve_reply_text *t)
{
    struct qp_buf out = {0};
    stream_text(&out, ev, OPEN_THINKING, t->reasoning, t->reasoning_len);
    stream_text(&out, ev, OPEN_TEXT, t->content, t->content_len);
    for (size_t i = 0; i < t->n_calls; i++) {
        block_stop(&out, ev);
        block_start(&out, ev->index, tool_use_block(&t->calls[i], false));
        cJSON *in = tool_input(&t->calls[i]);
        char *json = in ? cJSON_PrintUnformatted(in) : NULL;
        if (json)
            block_delta(&out, ev->index, "input_json_delta", "partial_json", json, strlen(json));
        else
            out.oom = true;
        free(json);
        cJSON_Delete(in);
        event(&out, indexed("content_block_stop", ev->index++));
    }
    return text_take(&out);
}

char *serve_message_end_events(struct serve_message_events *ev, const char *finish, const char *stop_string,
                               const struct serve_usage *u)
{
    struct qp_buf t = {0};
    block_stop(&t, ev);
    cJSON *o = cJSON_CreateObject(), *d, *usage;
    bool ok = o && cJSON_AddStringToObject(o, "type", "message_delta") && (d = cJSON_AddObjectToObject(o, "delta")) &&
              cJSON_AddStringToObject(d, "stop_reason", stop_reason(finish, stop_string)) &&
              add_string_or_null(d, "stop_sequence", stop_string) && (usage = cJSON_AddObjectToObject(o, "usage")) &&
              cJSON_AddNumberToObject(usage, "output_tokens", u->completion_tokens);
    if (!ok) {
        cJSON_Delete(o);
        t.oom = true;
    } else {
        event(&t, o);
    }
    cJSON *stop = cJSON_CreateObject();
    if (stop && cJSON_AddStringToObject(stop, "type", "message_stop"))
        event(&t, stop);
    else
        cJSON_Delete(stop), t.oom = true;
    return text_take(&t);
}

char *serve_message_error_event(const struct serve_error *e)
{
    char *json = serve_anthropic_error_json(e);
    struct qp_buf t = {0};
    if (!json)
        return NULL;
    qp_buf_adds(&t, "event: error\ndata: ");
    qp_buf_adds(&t, json);
    qp_buf_adds(&t, "\n\n");
    free(json);
    return text_take(&t);
}
