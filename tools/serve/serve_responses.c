/* serve_responses.c - OpenAI's Responses API, POST /v1/responses: the
 * request read into a chat request, the reply shaped as a response object
 * or as the Responses stream's events, and the responses kept for
 * previous_response_id.
 *
 * A request is checked field by field here (the policy of serve_openai.c:
 * a known field of the wrong type or asking for what is not supported is
 * a 400 naming it, an unknown one ignored) and written as the Chat
 * Completions body that says the same: the input items as messages, the
 * instructions as the first system message, the flat function tools in
 * the chat's nested shape, text.format as response_format. That body
 * then goes through serve_parse_request, so the template, the tools, the
 * sampling defaults and the format machine are the chat's own, and a
 * response is the chat completion of the same conversation.
 *
 * The store: each stored response keeps its conversation (the input items
 * of its whole chain, without instructions, which OpenAI does not carry
 * over, then its output items) as JSON text, so a continuation needs no
 * other entry. At most STORE_MAX responses and STORE_BYTES bytes of them;
 * past either, the least recently used goes. store: false keeps nothing. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "serve.h"

#define BAD(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)

#define STORE_MAX 256                   /* responses kept */
#define STORE_BYTES (64u << 20)         /* bytes of their conversations */

struct serve_resp {
    char id[48];                /* resp_... */
    char msg_id[48];            /* the reply's message item */
    cJSON *head;                /* the response object's fields but status, output and usage */
    cJSON *items;               /* the conversation so far, normalized (what the store keeps) */
    bool store;
    /* streaming */
    unsigned seq;
    cJSON *output;              /* the output items closed so far */
    bool msg_open;
    struct qp_buf text;         /* the message item's text so far */
};

static const cJSON *field(const cJSON *o, const char *name) { return cJSON_GetObjectItemCaseSensitive(o, name); }

/* ---- the store ----------------------------------------------------------- */

struct stored {
    char id[48];
    char *json;                 /* the conversation's items */
    size_t bytes;
    struct stored *prev, *next; /* most recently used first */
};

static struct {
    pthread_mutex_t lock;
    struct stored *first, *last;
    unsigned n;
    size_t bytes;
} store = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0};

static void unlink_entry(struct stored *s)
{
    *(s->prev ? &s->prev->next : &store.first) = s->next;
    *(s->next ? &s->next->prev : &store.last) = s->prev;
    s->prev = s->next = NULL;
}

static void push_front(struct stored *s)
{
    s->next = store.first;
    if (store.first)
        store.first->prev = s;
    store.first = s;
    if (!store.last)
        store.last = s;
}

/* keeps id's conversation (takes json); one too large for the store is dropped */
static void store_put(const char *id, char *json)
{
    size_t bytes = strlen(json);
    struct stored *s = bytes <= STORE_BYTES ? calloc(1, sizeof *s) : NULL;
    if (!s) {
        free(json);
        return;
    }
    snprintf(s->id, sizeof s->id, "%s", id);
    s->json = json, s->bytes = bytes;
    pthread_mutex_lock(&store.lock);
    while (store.last && (store.n >= STORE_MAX || store.bytes + bytes > STORE_BYTES)) {
        struct stored *old = store.last;
        unlink_entry(old);
        store.n--, store.bytes -= old->bytes;
        free(old->json);
        free(old);
    }
    push_front(s);
    store.n++, store.bytes += bytes;
    pthread_mutex_unlock(&store.lock);
}

/* id's conversation as items (a new array), NULL when it is not kept */
static cJSON *store_get(const char *id)
{
    cJSON *items = NULL;
    pthread_mutex_lock(&store.lock);
    for (struct stored *s = store.first; s; s = s->next)
        if (!strcmp(s->id, id)) {
            unlink_entry(s);
            push_front(s);
            items = cJSON_Parse(s->json);
            break;
        }
    pthread_mutex_unlock(&store.lock);
    return items;
}

/* ---- input items --------------------------------------------------------- */

/* text as a string, or parts of the given types (input_text, or output_text
 * in an assistant's message) joined; *out malloc'd */
static int read_text(const cJSON *v, const char *where, bool output, char **out, struct serve_error *e)
{
    if (cJSON_IsString(v))
        return (*out = strdup(v->valuestring)) ? 0 : BAD(e, "input", "out of memory");
    if (!cJSON_IsArray(v))
        return BAD(e, "input", "%s must be a string or an array of text parts", where);
    for (const cJSON *p = v->child; p; p = p->next) {
        const cJSON *type = field(p, "type"), *text = field(p, "text");
        bool text_type = cJSON_IsString(type) && (!strcmp(type->valuestring, "input_text") ||
                                                  (output && !strcmp(type->valuestring, "output_text")));
        if (!cJSON_IsObject(p) || !text_type || !cJSON_IsString(text))
            return BAD(e, "input", "%s: only text parts ({\"type\": \"%s\", \"text\": ...}) are supported", where,
                       output ? "output_text" : "input_text");
    }
    return (*out = serve_join_texts(v)) ? 0 : BAD(e, "input", "out of memory");
}

static bool is_role(const char *r)
{
    return !strcmp(r, "user") || !strcmp(r, "assistant") || !strcmp(r, "system") || !strcmp(r, "developer");
}

static bool add_str(cJSON *o, const char *k, const char *v) { return cJSON_AddStringToObject(o, k, v) != NULL; }

/* item appended to array, or deleted; false when it could not be */
static bool append(cJSON *array, cJSON *item)
{
    if (item && cJSON_AddItemToArray(array, item))
        return true;
    cJSON_Delete(item);
    return false;
}

/* a string field of item i, required */
static int want_str(const cJSON *it, size_t i, const char *k, const char **out, struct serve_error *e)
{
    const cJSON *v = field(it, k);
    if (!cJSON_IsString(v))
        return BAD(e, "input", "input[%zu].%s must be a string", i, k);
    *out = v->valuestring;
    return 0;
}

/* One input item into its normalized form, appended to items: a message
 * {type, role, content: TEXT}, a function_call {type, call_id, name,
 * arguments} or a function_call_output {type, call_id, output: TEXT}. */
static int read_item(const cJSON *it, size_t i, cJSON *items, struct serve_error *e)
{
    if (!cJSON_IsObject(it))
        return BAD(e, "input", "input[%zu] must be an object", i);
    const cJSON *type = field(it, "type");
    if (type && !cJSON_IsString(type))
        return BAD(e, "input", "input[%zu].type must be a string", i);
    const char *t = type ? type->valuestring : "message";   /* an easy input message has no type */
    cJSON *n = cJSON_CreateObject();
    char *text = NULL;
    int rc = -1;
    const char *a, *b, *c;
    if (!n)
        return BAD(e, "input", "out of memory");
    if (!strcmp(t, "message")) {
        const cJSON *role = field(it, "role");
        char where[48];
        snprintf(where, sizeof where, "input[%zu].content", i);
        if (!cJSON_IsString(role) || !is_role(role->valuestring))
            rc = BAD(e, "input", "input[%zu].role must be \"user\", \"assistant\", \"system\" or \"developer\"", i);
        else if (!read_text(field(it, "content"), where, !strcmp(role->valuestring, "assistant"), &text, e))
            rc = add_str(n, "type", "message") && add_str(n, "role", role->valuestring) &&
                 add_str(n, "content", text) ? 0 : BAD(e, "input", "out of memory");
    } else if (!strcmp(t, "function_call")) {
        if (!want_str(it, i, "call_id", &a, e) && !want_str(it, i, "name", &b, e) &&
            !want_str(it, i, "arguments", &c, e))
            rc = add_str(n, "type", t) && add_str(n, "call_id", a) && add_str(n, "name", b) &&
                 add_str(n, "arguments", c) ? 0 : BAD(e, "input", "out of memory");
    } else if (!strcmp(t, "function_call_output")) {
        char where[48];
        snprintf(where, sizeof where, "input[%zu].output", i);
        if (!want_str(it, i, "call_id", &a, e) && !read_text(field(it, "output"), where, false, &text, e))
            rc = add_str(n, "type", t) && add_str(n, "call_id", a) && add_str(n, "output", text)
                     ? 0 : BAD(e, "input", "out of memory");
    } else {
        rc = BAD(e, "input", "input[%zu]: items of type \"%.40s\" are not supported (messages, function_call and "
            "function_call_output are)", i, t);
    }
    free(text);
    if (rc || !append(items, n))
        return rc ? (cJSON_Delete(n), -1) : BAD(e, "input", "out of memory");
    return 0;
}

static int read_input(const cJSON *v, cJSON *items, struct serve_error *e)
{
    if (cJSON_IsString(v)) {
        cJSON *n = cJSON_CreateObject();
        bool ok = n && add_str(n, "type", "message") && add_str(n, "role", "user") &&
                  add_str(n, "content", v->valuestring);
        return ok && append(items, n) ? 0 : (cJSON_Delete(ok ? NULL : n), BAD(e, "input", "out of memory"));
    }
    int count = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || count > SERVE_MAX_MESSAGES)
        return BAD(e, "input", "'input' must be a string or an array of at most %d items", SERVE_MAX_MESSAGES);
    size_t i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++)
        if (read_item(it, i, items, e))
            return -1;
    return 0;
}

/* the conversation's items as Chat Completions messages, after the
 * instructions (a system message): function_call items become the
 * tool_calls of the assistant message before them (or of a new one),
 * function_call_output items tool messages */
static int items_to_messages(const cJSON *items, const char *instructions, cJSON *msgs, struct serve_error *e)
{
    cJSON *m = NULL;
    if (instructions && (!(m = cJSON_CreateObject()) || !add_str(m, "role", "system") ||
                         !add_str(m, "content", instructions) || !append(msgs, m))) {
        cJSON_Delete(m);
        return BAD(e, "input", "out of memory");
    }
    cJSON *last = NULL;         /* the assistant message calls join */
    for (const cJSON *it = items->child; it; it = it->next) {
        const char *t = field(it, "type")->valuestring;
        bool ok = true;
        if (!strcmp(t, "message")) {
            ok = (m = cJSON_CreateObject()) && add_str(m, "role", field(it, "role")->valuestring) &&
                 add_str(m, "content", field(it, "content")->valuestring) && append(msgs, m);
            last = ok && !strcmp(field(it, "role")->valuestring, "assistant") ? m : NULL;
        } else if (!strcmp(t, "function_call")) {
            cJSON *calls = last ? cJSON_GetObjectItemCaseSensitive(last, "tool_calls") : NULL, *c, *fn;
            if (!last) {
                ok = (last = cJSON_CreateObject()) && add_str(last, "role", "assistant") &&
                     cJSON_AddNullToObject(last, "content") && append(msgs, last);
                if (!ok)
                    last = NULL;
            }
            if (ok && !calls)
                ok = (calls = cJSON_AddArrayToObject(last, "tool_calls")) != NULL;
            ok = ok && (c = cJSON_CreateObject()) && append(calls, c) &&
                 add_str(c, "id", field(it, "call_id")->valuestring) && add_str(c, "type", "function") &&
                 (fn = cJSON_AddObjectToObject(c, "function")) && add_str(fn, "name", field(it, "name")->valuestring) &&
                 add_str(fn, "arguments", field(it, "arguments")->valuestring);
        } else {
            ok = (m = cJSON_CreateObject()) && add_str(m, "role", "tool") &&
                 add_str(m, "tool_call_id", field(it, "call_id")->valuestring) &&
                 add_str(m, "content", field(it, "output")->valuestring) && append(msgs, m);
            last = NULL;
        }
        if (!ok)
            return BAD(e, "input", "out of memory");
    }
    if (cJSON_GetArraySize(msgs) == 0)
        return BAD(e, "input", "'input' is required (a string or at least one item)");
    if (cJSON_GetArraySize(msgs) > SERVE_MAX_MESSAGES)
        return BAD(e, "input", "the conversation has %d messages: at most %d", cJSON_GetArraySize(msgs),
                   SERVE_MAX_MESSAGES);
    return 0;
}

/* ---- the other fields ---------------------------------------------------- */

/* {type: "function", name, description, parameters, strict} as the chat's
 * {type: "function", function: {name, description, parameters, strict}} */
static int read_tools(const cJSON *v, cJSON *chat, struct serve_error *e)
{
    int count = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || count > SERVE_MAX_TOOLS)
        return BAD(e, "tools", "'tools' must be an array of at most %d tools", SERVE_MAX_TOOLS);
    cJSON *tools = cJSON_AddArrayToObject(chat, "tools");
    size_t i = 0;
    for (const cJSON *t = v->child; t; t = t->next, i++) {
        const cJSON *type = field(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type))
            return BAD(e, "tools", "tools[%zu] must be an object with a type", i);
        if (strcmp(type->valuestring, "function"))
            return BAD(e, "tools", "tools[%zu]: the tool type \"%.40s\" is not supported (built-in tools are "
                       "not: only function tools are)", i, type->valuestring);
        const cJSON *name = field(t, "name");
        if (!cJSON_IsString(name) || !*name->valuestring)
            return BAD(e, "tools", "tools[%zu] must have a name", i);
        cJSON *c = cJSON_CreateObject(), *fn = NULL;
        if (!append(tools, c) || !add_str(c, "type", "function") || !(fn = cJSON_AddObjectToObject(c, "function")))
            return BAD(e, "tools", "out of memory");
        /* the function's fields in the order given, as the template writes them */
        for (const cJSON *f = t->child; f; f = f->next) {
            if (!strcmp(f->string, "type"))
                continue;
            if (!strcmp(f->string, "description") && !cJSON_IsString(f) && !cJSON_IsNull(f))
                return BAD(e, "tools", "tools[%zu].description must be a string", i);
            if (!strcmp(f->string, "strict") && !cJSON_IsBool(f) && !cJSON_IsNull(f))
                return BAD(e, "tools", "tools[%zu].strict must be true or false", i);
            if (cJSON_IsNull(f) && strcmp(f->string, "parameters"))
                continue;
            if (!cJSON_AddItemToObject(fn, f->string, cJSON_Duplicate(f, true)))
                return BAD(e, "tools", "out of memory");
        }
    }
    return tools ? 0 : BAD(e, "tools", "out of memory");
}

/* "none", "auto", "required" or {type: "function", name} */
static int read_tool_choice(const cJSON *v, cJSON *chat, struct serve_error *e)
{
    const cJSON *type = field(v, "type"), *name = field(v, "name");
    if (cJSON_IsString(v) && (!strcmp(v->valuestring, "none") || !strcmp(v->valuestring, "auto") ||
                              !strcmp(v->valuestring, "required")))
        return cJSON_AddStringToObject(chat, "tool_choice", v->valuestring) ? 0 : BAD(e, "tool_choice", "out of memory");
    if (cJSON_IsObject(v) && cJSON_IsString(type) && !strcmp(type->valuestring, "function") && cJSON_IsString(name)) {
        cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice"), *fn;
        return c && add_str(c, "type", "function") && (fn = cJSON_AddObjectToObject(c, "function")) &&
               add_str(fn, "name", name->valuestring) ? 0 : BAD(e, "tool_choice", "out of memory");
    }
    return BAD(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
               "\"name\": ...}");
}

/* text: {format: {type: "text"} | {type: "json_object"} | {type:
 * "json_schema", name, schema, strict, description}} as the chat's
 * response_format */
static int read_text_field(const cJSON *v, cJSON *chat, struct serve_error *e)
{
    if (!cJSON_IsObject(v))
        return BAD(e, "text", "'text' must be an object");
    const cJSON *f = field(v, "format"), *type = field(f, "type");
    if (!f || cJSON_IsNull(f))
        return 0;
    if (!cJSON_IsObject(f) || !cJSON_IsString(type))
        return BAD(e, "text.format", "'text.format' must be an object with a type");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    if (!rf || !add_str(rf, "type", type->valuestring))
        return BAD(e, "text.format", "out of memory");
    if (strcmp(type->valuestring, "json_schema"))
        return 0;               /* text and json_object as they are; another type refused by the chat's reader */
    if (!cJSON_IsObject(field(f, "schema")))
        return BAD(e, "text.format", "'text.format' of type json_schema needs a \"schema\" object");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    for (const cJSON *k = f->child; js && k; k = k->next)
        if (strcmp(k->string, "type") && !cJSON_AddItemToObject(js, k->string, cJSON_Duplicate(k, true)))
            js = NULL;
    return js ? 0 : BAD(e, "text.format", "out of memory");
}

/* a field clients send with a neutral value: accepted when it has it */
static int neutral(const cJSON *f, bool ok, const char *what, struct serve_error *e)
{
    return ok ? 0 : BAD(e, f->string, "'%s': %s is not supported", f->string, what);
}

static bool copy_to(cJSON *o, const char *k, const cJSON *v)
{
    return cJSON_AddItemToObject(o, k, cJSON_Duplicate(v, true));
}

/* o's fields after the field k (item), where clients read it first: a new
 * object, o emptied and deleted; NULL when out of memory (both deleted) */
static cJSON *key_first(cJSON *o, const char *k, cJSON *item)
{
    cJSON *n = cJSON_CreateObject();
    bool ok = o && n && item && cJSON_AddItemToObject(n, k, item);
    if (!ok)
        cJSON_Delete(item);
    while (ok && o->child) {
        cJSON *f = cJSON_DetachItemViaPointer(o, o->child);
        cJSON_AddItemToArray(n, f);     /* keeps its key */
    }
    cJSON_Delete(o);
    return ok ? n : (cJSON_Delete(n), NULL);
}

/* the fields the response object repeats, as the request gave them */
static bool head_fields(cJSON *h, const cJSON *root)
{
    static const char *const echoed[] = {"instructions", "max_output_tokens", "previous_response_id", "tool_choice",
                                         "tools", "metadata", "user"};
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof echoed / sizeof *echoed; i++) {
        const cJSON *v = field(root, echoed[i]);
        ok = v && !cJSON_IsNull(v) ? copy_to(h, echoed[i], v) : cJSON_AddNullToObject(h, echoed[i]) != NULL;
    }
    const cJSON *text = field(root, "text"), *format = field(text, "format");
    cJSON *t = ok ? cJSON_AddObjectToObject(h, "text") : NULL, *f;
    if (!t)
        return false;
    if (format && !cJSON_IsNull(format))
        return copy_to(t, "format", format);
    return (f = cJSON_AddObjectToObject(t, "format")) && add_str(f, "type", "text");
}

/* One top-level field: checked, and what the chat request says for it
 * written to chat. */
static int read_field(const cJSON *f, const struct serve_model_ref *model, cJSON *chat, cJSON *items,
                      struct serve_resp *r, struct serve_error *e)
{
    const char *k = f->string;
    bool b;
    if (!strcmp(k, "model"))
        return serve_read_model(f, model, e);
    if (!strcmp(k, "input"))
        return read_input(f, items, e);
    if (!strcmp(k, "instructions"))
        return cJSON_IsString(f) ? 0 : BAD(e, k, "'instructions' must be a string");
    if (!strcmp(k, "previous_response_id"))
        return cJSON_IsString(f) ? 0 : BAD(e, k, "'previous_response_id' must be a string");
    /* the chat's reader checks these and names them */
    if (!strcmp(k, "temperature") || !strcmp(k, "top_p") || !strcmp(k, "parallel_tool_calls") ||
        !strcmp(k, "user") || !strcmp(k, "stream"))
        return copy_to(chat, k, f) ? 0 : BAD(e, k, "out of memory");
    if (!strcmp(k, "max_output_tokens"))
        return copy_to(chat, "max_tokens", f) ? 0 : BAD(e, k, "out of memory");
    if (!strcmp(k, "tools"))
        return read_tools(f, chat, e);
    if (!strcmp(k, "tool_choice"))
        return read_tool_choice(f, chat, e);
    if (!strcmp(k, "text"))
        return read_text_field(f, chat, e);
    if (!strcmp(k, "store"))
        return serve_want_bool(f, f->string, &r->store, e);
    if (!strcmp(k, "metadata"))
        return cJSON_IsObject(f) ? 0 : BAD(e, k, "'metadata' must be an object");
    if (!strcmp(k, "background"))
        return serve_want_bool(f, f->string, &b, e) ? -1 : neutral(f, !b, "background mode", e);
    if (!strcmp(k, "truncation"))
        return neutral(f, cJSON_IsString(f) && !strcmp(f->valuestring, "disabled"), "truncation other than "
                       "\"disabled\"", e);
    if (!strcmp(k, "include"))
        return neutral(f, cJSON_IsArray(f) && !cJSON_GetArraySize(f), "including more output", e);
    if (!strcmp(k, "top_logprobs"))
        return neutral(f, cJSON_IsNumber(f) && f->valuedouble == 0, "log probabilities", e);
    if (!strcmp(k, "reasoning"))
        return neutral(f, cJSON_IsObject(f) && !cJSON_GetArraySize(f), "reasoning (thinking)", e);
    if (!strcmp(k, "conversation") || !strcmp(k, "prompt"))
        return neutral(f, false, !strcmp(k, "prompt") ? "a stored prompt" : "a stored conversation", e);
    return 0;
}

/* the chat parser's 400 about one of its fields, named as this request
 * names it, in param and in the message */
static void rename_param(struct serve_error *e)
{
    static const char *const names[][2] = {{"messages", "input"}, {"max_tokens", "max_output_tokens"},
                                           {"response_format", "text.format"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (strcmp(e->param, names[i][0]))
            continue;
        snprintf(e->param, sizeof e->param, "%s", names[i][1]);
        char *at = strstr(e->message, names[i][0]), msg[sizeof e->message];
        if (at) {
            snprintf(msg, sizeof msg, "%.*s%s%s", (int)(at - e->message), e->message, names[i][1],
                     at + strlen(names[i][0]));
            memcpy(e->message, msg, sizeof msg);
        }
    }
}

static int read_request(const cJSON *root, const struct serve_model_ref *model, struct serve_request *req,
                        struct serve_resp *r, struct serve_error *e)
{
    if (!cJSON_IsObject(root))
        return BAD(e, NULL, "the request body must be a JSON object");
    cJSON *chat = cJSON_CreateObject(), *items = cJSON_CreateArray(), *msgs = NULL;
    int rc = chat && items ? 0 : BAD(e, NULL, "out of memory");
    for (const cJSON *f = root->child; f && !rc; f = f->next)
        if (!cJSON_IsNull(f))
            rc = read_field(f, model, chat, items, r, e);
    /* the previous response's conversation before this input */
    const cJSON *prev = field(root, "previous_response_id");
    if (!rc && cJSON_IsString(prev)) {
        cJSON *before = store_get(prev->valuestring);
        if (!before) {
            serve_error_set(e, 404, "invalid_request_error", "previous_response_not_found", "previous_response_id",
                            "Previous response with id '%.100s' not found (this server keeps the last %d responses "
                            "stored, up to %u MiB)", prev->valuestring, STORE_MAX, STORE_BYTES >> 20);
            rc = -1;
        } else {
            while (items->child) {
                cJSON *it = cJSON_DetachItemViaPointer(items, items->child);
                cJSON_AddItemToArray(before, it);
            }
            cJSON_Delete(items);
            items = before;
        }
    }
    const cJSON *instructions = field(root, "instructions");
    if (!rc && !((msgs = cJSON_AddArrayToObject(chat, "messages"))))
        rc = BAD(e, NULL, "out of memory");
    if (!rc)
        rc = items_to_messages(items, cJSON_IsString(instructions) ? instructions->valuestring : NULL, msgs, e);
    char *body = rc ? NULL : cJSON_PrintUnformatted(chat);
    if (!rc && !body)
        rc = BAD(e, NULL, "out of memory");
    if (!rc && serve_parse_request(SERVE_CHAT, body, strlen(body), model, req, e)) {
        rename_param(e);
        rc = -1;
    }
    free(body);
    cJSON_Delete(chat);
    if (rc) {
        cJSON_Delete(items);
        return -1;
    }
    r->items = items;
    /* the head: what every form of the response repeats */
    cJSON *h = r->head = cJSON_CreateObject(), *rs;
    bool ok = h && add_str(h, "id", r->id) && add_str(h, "object", "response") &&
              cJSON_AddNumberToObject(h, "created_at", (double)time(NULL)) && cJSON_AddFalseToObject(h, "background") &&
              cJSON_AddNullToObject(h, "error") && cJSON_AddNullToObject(h, "incomplete_details") &&
              add_str(h, "model", model->id) && head_fields(h, root) &&
              cJSON_AddBoolToObject(h, "parallel_tool_calls", true) &&
              (rs = cJSON_AddObjectToObject(h, "reasoning")) && cJSON_AddNullToObject(rs, "effort") &&
              cJSON_AddNullToObject(rs, "summary") && cJSON_AddBoolToObject(h, "store", r->store) &&
              cJSON_AddNumberToObject(h, "temperature", req->sampling.temperature) &&
              cJSON_AddNumberToObject(h, "top_p", req->sampling.top_p) &&
              add_str(h, "truncation", "disabled");
    if (ok && cJSON_IsNull(field(h, "tools")))
        ok = cJSON_ReplaceItemInObjectCaseSensitive(h, "tools", cJSON_CreateArray());
    if (ok && cJSON_IsNull(field(h, "tool_choice")))
        ok = cJSON_ReplaceItemInObjectCaseSensitive(h, "tool_choice", cJSON_CreateString("auto"));
    if (ok && cJSON_IsNull(field(h, "metadata")))
        ok = cJSON_ReplaceItemInObjectCaseSensitive(h, "metadata", cJSON_CreateObject());
    if (!ok) {
        serve_request_free(req);
        return BAD(e, NULL, "out of memory");
    }
    return 0;
}

int serve_parse_responses(const char *body, size_t len, const struct serve_model_ref *model,
                          struct serve_request *req, struct serve_resp **out, struct serve_error *e)
{
    *out = NULL;
    struct serve_resp *r = calloc(1, sizeof *r);
    if (!r)
        return BAD(e, NULL, "out of memory");
    r->store = true;
    serve_random_id("resp_", r->id, sizeof r->id);
    serve_random_id("msg_", r->msg_id, sizeof r->msg_id);
    cJSON *root;
    if (serve_json_parse(body, len, &root, e)) {
        free(r);
        return -1;
    }
    int rc = read_request(root, model, req, r, e);
    cJSON_Delete(root);
    if (rc || !(r->output = cJSON_CreateArray())) {
        if (!rc) {
            serve_request_free(req);
            rc = BAD(e, NULL, "out of memory");
        }
        serve_resp_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void serve_resp_free(struct serve_resp *r)
{
    if (!r)
        return;
    cJSON_Delete(r->head);
    cJSON_Delete(r->items);
    cJSON_Delete(r->output);
    qp_buf_free(&r->text);
    free(r);
}

const char *serve_resp_id(const struct serve_resp *r) { return r->id; }

/* ---- the response -------------------------------------------------------- */

static cJSON *text_part(const char *text, size_t len)
{
    cJSON *p = cJSON_CreateObject(), *t = serve_json_text(text, len);
    bool ok = p && add_str(p, "type", "output_text") && t && cJSON_AddItemToObject(p, "text", t);
    if (!ok)
        cJSON_Delete(t);
    ok = ok && cJSON_AddArrayToObject(p, "annotations") && cJSON_AddArrayToObject(p, "logprobs");
    return ok ? p : (cJSON_Delete(p), NULL);
}

/* the reply's message item; parts NULL: its content empty (in progress) */
static cJSON *message_item(const struct serve_resp *r, const char *text, size_t len, bool done)
{
    cJSON *m = cJSON_CreateObject(), *content;
    bool ok = m && add_str(m, "id", r->msg_id) && add_str(m, "type", "message") &&
              add_str(m, "status", done ? "completed" : "in_progress") && add_str(m, "role", "assistant") &&
              (content = cJSON_AddArrayToObject(m, "content")) && (!done || append(content, text_part(text, len)));
    return ok ? m : (cJSON_Delete(m), NULL);
}

static cJSON *call_item(const struct serve_tool_call *c, bool done)
{
    char id[48];
    serve_random_id("fc_", id, sizeof id);
    cJSON *f = cJSON_CreateObject();
    bool ok = f && add_str(f, "id", id) && add_str(f, "type", "function_call") &&
              add_str(f, "status", done ? "completed" : "in_progress") && add_str(f, "call_id", c->id) &&
              add_str(f, "name", c->name) && add_str(f, "arguments", done ? c->arguments : "");
    return ok ? f : (cJSON_Delete(f), NULL);
}

static bool add_usage(cJSON *o, const struct serve_usage *u)
{
    cJSON *us = cJSON_AddObjectToObject(o, "usage"), *d;
    return us && cJSON_AddNumberToObject(us, "input_tokens", u->prompt_tokens) &&
           (d = cJSON_AddObjectToObject(us, "input_tokens_details")) &&
           cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens) &&
           cJSON_AddNumberToObject(us, "output_tokens", u->completion_tokens) &&
           (d = cJSON_AddObjectToObject(us, "output_tokens_details")) &&
           cJSON_AddNumberToObject(d, "reasoning_tokens", 0) &&
           cJSON_AddNumberToObject(us, "total_tokens", (double)u->prompt_tokens + u->completion_tokens);
}

/* the response object: status "in_progress" (output empty, no usage) until
 * finish, then "completed", or "incomplete" at max_output_tokens */
static cJSON *response(const struct serve_resp *r, const cJSON *output, const char *finish, const struct serve_usage *u)
{
    cJSON *o = cJSON_Duplicate(r->head, true);
    bool cut = finish && !strcmp(finish, "length"), ok = o != NULL;
    const char *status = !finish ? "in_progress" : cut ? "incomplete" : "completed";
    ok = ok && cJSON_AddStringToObject(o, "status", status);
    if (ok && cut) {
        cJSON *d = cJSON_CreateObject();
        ok = d && add_str(d, "reason", "max_output_tokens") &&
             cJSON_ReplaceItemInObjectCaseSensitive(o, "incomplete_details", d);
        if (!ok)
            cJSON_Delete(d);
    }
    ok = ok && copy_to(o, "output", output);
    ok = ok && (u ? add_usage(o, u) : cJSON_AddNullToObject(o, "usage") != NULL);
    return ok ? o : (cJSON_Delete(o), NULL);
}

/* the conversation with the reply's output kept under the response's id */
static void keep(struct serve_resp *r, const cJSON *output)
{
    if (!r->store)
        return;
    for (const cJSON *it = output->child; it; it = it->next) {
        const char *t = field(it, "type")->valuestring;
        cJSON *n = cJSON_CreateObject();
        bool ok = n && add_str(n, "type", t);
        if (!strcmp(t, "message")) {
            /* the text is raw JSON (serve_json_text): read back, a NUL in it ends it */
            cJSON *text = cJSON_Parse(field(field(it, "content")->child, "text")->valuestring);
            ok = ok && add_str(n, "role", "assistant") && cJSON_IsString(text) &&
                 add_str(n, "content", text->valuestring);
            cJSON_Delete(text);
        } else {
            ok = ok && add_str(n, "call_id", field(it, "call_id")->valuestring) &&
                 add_str(n, "name", field(it, "name")->valuestring) &&
                 add_str(n, "arguments", field(it, "arguments")->valuestring);
        }
        if (!ok) {
            cJSON_Delete(n);
            return;
        }
        if (!append(r->items, n))
            return;
    }
    char *json = cJSON_PrintUnformatted(r->items);
    if (json)
        store_put(r->id, json);
}

/* the output items of a whole reply: its text as a message (when it has
 * text or no call), then its calls */
static cJSON *output_of(const struct serve_resp *r, const struct serve_reply_text *t)
{
    cJSON *out = cJSON_CreateArray();
    bool ok = out != NULL;
    if (ok && (t->content_len || !t->n_calls))
        ok = append(out, message_item(r, t->content ? t->content : "", t->content_len, true));
    for (size_t i = 0; ok && i < t->n_calls; i++)
        ok = append(out, call_item(&t->calls[i], true));
    return ok ? out : (cJSON_Delete(out), NULL);
}

char *serve_resp_json(struct serve_resp *r, const struct serve_reply_text *t, const char *finish,
                      const struct serve_usage *u)
{
    cJSON *out = output_of(r, t);
    cJSON *o = out ? response(r, out, finish, u) : NULL;
    if (o)
        keep(r, out);
    cJSON_Delete(out);
    return serve_json_print(o, o != NULL);
}

/* ---- streaming ----------------------------------------------------------- */

/* "event: TYPE\ndata: {type, sequence_number, ...}\n\n" appended to ev;
 * takes o. Out of memory (o NULL included) sets ev's oom. */
static void emit(struct serve_resp *r, struct qp_buf *ev, const char *type, cJSON *o)
{
    char *json = NULL;
    o = ev->oom ? (cJSON_Delete(o), NULL) : key_first(o, "type", cJSON_CreateString(type));
    if (o && cJSON_AddNumberToObject(o, "sequence_number", r->seq))
        json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json) {
        ev->oom = true;
        return;
    }
    qp_buf_adds(ev, "event: ");
    qp_buf_adds(ev, type);
    qp_buf_adds(ev, "\ndata: ");
    qp_buf_adds(ev, json);
    qp_buf_adds(ev, "\n\n");
    free(json);
    r->seq++;
}

/* the events, malloc'd; NULL when one could not be written */
static char *events_done(struct qp_buf *ev)
{
    if (ev->oom) {
        qp_buf_free(ev);
        return NULL;
    }
    return ev->s ? ev->s : strdup("");
}

static cJSON *with_response(cJSON *o, cJSON *response_obj)
{
    if (o && response_obj && cJSON_AddItemToObject(o, "response", response_obj))
        return o;
    cJSON_Delete(response_obj);
    cJSON_Delete(o);
    return NULL;
}

/* {item_id, output_index, content_index} of the message's text */
static cJSON *at_text(const struct serve_resp *r)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && add_str(o, "item_id", r->msg_id) &&
              cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(r->output)) &&
              cJSON_AddNumberToObject(o, "content_index", 0);
    return ok ? o : (cJSON_Delete(o), NULL);
}

static cJSON *with(cJSON *o, const char *k, cJSON *v)
{
    if (o && v && cJSON_AddItemToObject(o, k, v))
        return o;
    cJSON_Delete(v);
    cJSON_Delete(o);
    return NULL;
}

static cJSON *item_event(unsigned index, cJSON *item)
{
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddNumberToObject(o, "output_index", index))
        cJSON_Delete(o), o = NULL;
    return with(o, "item", item);
}

char *serve_resp_stream_start(struct serve_resp *r)
{
    struct qp_buf ev = {0};
    emit(r, &ev, "response.created", with_response(cJSON_CreateObject(), response(r, r->output, NULL, NULL)));
    emit(r, &ev, "response.in_progress", with_response(cJSON_CreateObject(), response(r, r->output, NULL, NULL)));
    return events_done(&ev);
}

static void open_message(struct serve_resp *r, struct qp_buf *ev)
{
    unsigned index = (unsigned)cJSON_GetArraySize(r->output);
    emit(r, ev, "response.output_item.added", item_event(index, message_item(r, NULL, 0, false)));
    emit(r, ev, "response.content_part.added", with(at_text(r), "part", text_part("", 0)));
    r->msg_open = true;
}

static void close_message(struct serve_resp *r, struct qp_buf *ev)
{
    const char *text = r->text.s ? r->text.s : "";
    emit(r, ev, "response.output_text.done",
         with(with(at_text(r), "text", serve_json_text(text, r->text.len)), "logprobs", cJSON_CreateArray()));
    emit(r, ev, "response.content_part.done", with(at_text(r), "part", text_part(text, r->text.len)));
    cJSON *item = message_item(r, text, r->text.len, true);
    emit(r, ev, "response.output_item.done",
         item_event((unsigned)cJSON_GetArraySize(r->output), cJSON_Duplicate(item, true)));
    if (!append(r->output, item))
        ev->oom = true;
    r->msg_open = false;
}

static void send_call(struct serve_resp *r, struct qp_buf *ev, const struct serve_tool_call *c)
{
    unsigned index = (unsigned)cJSON_GetArraySize(r->output);
    cJSON *item = call_item(c, true), *o;
    if (!item) {
        ev->oom = true;
        return;
    }
    cJSON *open = cJSON_Duplicate(item, true);
    if (open) {
        cJSON_ReplaceItemInObjectCaseSensitive(open, "status", cJSON_CreateString("in_progress"));
        cJSON_ReplaceItemInObjectCaseSensitive(open, "arguments", cJSON_CreateString(""));
    }
    emit(r, ev, "response.output_item.added", item_event(index, open));
    const char *id = field(item, "id")->valuestring;
    o = cJSON_CreateObject();
    if (o && !(add_str(o, "item_id", id) && cJSON_AddNumberToObject(o, "output_index", index) &&
               add_str(o, "delta", c->arguments)))
        cJSON_Delete(o), o = NULL;
    emit(r, ev, "response.function_call_arguments.delta", o);
    o = cJSON_CreateObject();
    if (o && !(add_str(o, "item_id", id) && add_str(o, "name", c->name) &&
               cJSON_AddNumberToObject(o, "output_index", index) && add_str(o, "arguments", c->arguments)))
        cJSON_Delete(o), o = NULL;
    emit(r, ev, "response.function_call_arguments.done", o);
    emit(r, ev, "response.output_item.done", item_event(index, cJSON_Duplicate(item, true)));
    if (!append(r->output, item))
        ev->oom = true;
}

char *serve_resp_stream_text(struct serve_resp *r, const struct serve_reply_text *t)
{
    struct qp_buf ev = {0};
    if (t->content_len) {
        if (!r->msg_open)
            open_message(r, &ev);
        if (qp_buf_add(&r->text, t->content, t->content_len))
            ev.oom = true;
        emit(r, &ev, "response.output_text.delta",
             with(with(at_text(r), "delta", serve_json_text(t->content, t->content_len)), "logprobs",
                  cJSON_CreateArray()));
    }
    if (t->n_calls && r->msg_open)
        close_message(r, &ev);
    for (size_t i = 0; i < t->n_calls; i++)
        send_call(r, &ev, &t->calls[i]);
    return events_done(&ev);
}

char *serve_resp_stream_end(struct serve_resp *r, const char *finish, const struct serve_usage *u)
{
    struct qp_buf ev = {0};
    if (!r->msg_open && !cJSON_GetArraySize(r->output))
        open_message(r, &ev);   /* a reply of no text: an empty message, as the whole response has */
    if (r->msg_open)
        close_message(r, &ev);
    cJSON *o = response(r, r->output, finish, u);
    if (o)
        keep(r, r->output);
    emit(r, &ev, !strcmp(finish, "length") ? "response.incomplete" : "response.completed",
         with_response(cJSON_CreateObject(), o));
    return events_done(&ev);
}

char *serve_resp_stream_failed(struct serve_resp *r, const struct serve_error *e)
{
    struct qp_buf ev = {0};
    cJSON *o = response(r, r->output, NULL, NULL), *err = cJSON_CreateObject();
    bool ok = o && err && add_str(err, "code", e->code ? e->code : e->type) && add_str(err, "message", e->message) &&
              cJSON_ReplaceItemInObjectCaseSensitive(o, "error", err);
    if (!ok)
        cJSON_Delete(err);
    ok = ok && cJSON_ReplaceItemInObjectCaseSensitive(o, "status", cJSON_CreateString("failed"));
    emit(r, &ev, "response.failed", with_response(cJSON_CreateObject(), ok ? o : (cJSON_Delete(o), NULL)));
    return events_done(&ev);
}
