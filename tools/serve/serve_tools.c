/* serve_tools.c - OpenAI's tools for Qwen3's chat template (serve.h):
 * the request's `tools` and the history's assistant `tool_calls`, checked
 * and written as the template writes them. The template serialises with
 * transformers' tojson, Python's json.dumps(ensure_ascii=False): ", " and
 * ": " between items, keys in the order given, non-ASCII characters as
 * they are; a number that is an integer below 2^53 is written as one,
 * another as the shortest text that reads back the same (Python writes a
 * float such as 2.0 or 1e10 with its ".0", which the JSON parser here no
 * longer knows). And the other way: a reply's <tool_call> blocks become
 * OpenAI's tool_calls, whole or as the reply streams. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "serve.h"
#include "buf.h"

#define BAD(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)

static void string(struct qp_buf *o, const char *s)
{
    qp_buf_adds(o, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        switch (c) {
        case '"': qp_buf_adds(o, "\\\""); break;
        case '\\': qp_buf_adds(o, "\\\\"); break;
        case '\n': qp_buf_adds(o, "\\n"); break;
        case '\r': qp_buf_adds(o, "\\r"); break;
        case '\t': qp_buf_adds(o, "\\t"); break;
        case '\b': qp_buf_adds(o, "\\b"); break;
        case '\f': qp_buf_adds(o, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                qp_buf_adds(o, esc);
            } else {
                qp_buf_add(o, (const char *)&c, 1);
            }
        }
    }
    qp_buf_adds(o, "\"");
}

static void number(struct qp_buf *o, double x)
{
    char buf[40];
    if (isinf(x)) {
        snprintf(buf, sizeof buf, "%s", x > 0 ? "Infinity" : "-Infinity");
    } else if (x == floor(x) && fabs(x) < 9007199254740992.0) {
        snprintf(buf, sizeof buf, "%.0f", x == 0 ? 0.0 : x);    /* -0 was the integer 0 */
    } else {
        /* Python's repr: the fewest digits that read back the same */
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(buf, sizeof buf, "%.*g", digits, x);
            if (strtod(buf, NULL) == x)
                break;
        }
    }
    qp_buf_adds(o, buf);
}

static void value(struct qp_buf *o, const cJSON *v)
{
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        bool object = cJSON_IsObject(v);
        qp_buf_adds(o, object ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child)
                qp_buf_adds(o, ", ");
            if (object) {
                string(o, c->string);
                qp_buf_adds(o, ": ");
            }
            value(o, c);
        }
        qp_buf_adds(o, object ? "}" : "]");
    } else if (cJSON_IsString(v)) {
        string(o, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        number(o, v->valuedouble);
    } else if (cJSON_IsBool(v)) {
        qp_buf_adds(o, cJSON_IsTrue(v) ? "true" : "false");
    } else {
        qp_buf_adds(o, "null");
    }
}

char *serve_python_json(const cJSON *v)
{
    struct qp_buf o = {0};
    value(&o, v);
    if (o.oom) {
        free(o.s);
        return NULL;
    }
    return o.s;
}

static const cJSON *field(const cJSON *o, const char *name) { return cJSON_GetObjectItemCaseSensitive(o, name); }

int serve_read_tools(const cJSON *v, struct serve_request *r, struct serve_error *e)
{
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n > SERVE_MAX_TOOLS)
        return BAD(e, "tools", "'tools' must be an array of at most %d tools", SERVE_MAX_TOOLS);
    if (n && !(r->tools = calloc((size_t)n, sizeof *r->tools)))
        return BAD(e, "tools", "out of memory");
    for (const cJSON *t = v->child; t; t = t->next) {
        size_t i = r->n_tools;
        const cJSON *type = field(t, "type"), *fn = field(t, "function"), *name = field(fn, "name");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return BAD(e, "tools", "tools[%zu] must be an object of type \"function\"", i);
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !*name->valuestring)
            return BAD(e, "tools", "tools[%zu].function must be an object with a name", i);
        /* OpenAI's rule: the arguments are an object, so the parameters are
         * an object's schema; a forced call of anything else could not
         * come back as a call */
        const cJSON *params = field(fn, "parameters"), *ptype = field(params, "type");
        if (params && !cJSON_IsNull(params) &&
            (!cJSON_IsObject(params) || (ptype && (!cJSON_IsString(ptype) || strcmp(ptype->valuestring, "object")))))
            return BAD(e, "tools", "tools[%zu] '%.64s': function.parameters must be an object's schema "
                       "({\"type\": \"object\", ...})", i, name->valuestring);
        if (!(r->tools[i] = serve_python_json(t)))
            return BAD(e, "tools", "out of memory");
        r->n_tools++;
    }
    return 0;
}

int serve_read_tool_calls(const cJSON *v, size_t i, qpack_chat_message *m, struct serve_error *e)
{
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n > SERVE_MAX_TOOLS)
        return BAD(e, "messages", "messages[%zu].tool_calls must be an array of at most %d calls", i,
                   SERVE_MAX_TOOLS);
    qpack_tool_call *calls = n ? calloc((size_t)n, sizeof *calls) : NULL;
    if (n && !calls)
        return BAD(e, "messages", "out of memory");
    m->tool_calls = calls;
    for (const cJSON *c = v->child; c; c = c->next) {
        size_t j = m->n_tool_calls;
        const cJSON *fn = field(c, "function"), *name = field(fn, "name"), *args = field(fn, "arguments");
        if (!cJSON_IsObject(c) || !cJSON_IsObject(fn) || !cJSON_IsString(name))
            return BAD(e, "messages", "messages[%zu].tool_calls[%zu] must have a function with a name", i, j);
        /* the template writes a string as it is and anything else as JSON
         * (null too); none at all, which it would fail on, as {} */
        if (!args)
            calls[j].arguments = strdup("{}");
        else
            calls[j].arguments = cJSON_IsString(args) ? strdup(args->valuestring) : serve_python_json(args);
        calls[j].name = strdup(name->valuestring);
        m->n_tool_calls++;
        if (!calls[j].name || !calls[j].arguments)
            return BAD(e, "messages", "out of memory");
    }
    return 0;
}

void serve_tool_calls_free(qpack_chat_message *m)
{
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        free((char *)m->tool_calls[j].name);
        free((char *)m->tool_calls[j].arguments);
    }
    free((qpack_tool_call *)m->tool_calls);
    m->tool_calls = NULL;
    m->n_tool_calls = 0;
}

/* ---- a reply's <tool_call> blocks ---------------------------------------- */

static const char call_open[] = "<tool_call>", call_close[] = "</tool_call>";

static const char *find_in(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, p, k))
            return s + i;
    return NULL;
}

static bool blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void serve_random_id(const char *prefix, char *out, size_t cap)
{
    unsigned char r[12] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        memset(r, 0, sizeof r);
    int at = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && at >= 0 && (size_t)at < cap; i++)
        at += snprintf(out + at, cap - (size_t)at, "%02x", r[i]);
}

/* {"name": STRING, "arguments": OBJECT or STRING} into a call; false when
 * the block is not that */
static bool read_call(const char *s, size_t n, struct serve_tool_call *call)
{
    cJSON *j = cJSON_ParseWithLength(s, n);
    const cJSON *name = field(j, "name"), *args = field(j, "arguments");
    bool ok = cJSON_IsObject(j) && cJSON_IsString(name) && *name->valuestring &&
              (cJSON_IsObject(args) || cJSON_IsString(args));
    if (ok) {
        call->name = strdup(name->valuestring);
        call->arguments = cJSON_IsString(args) ? strdup(args->valuestring) : cJSON_PrintUnformatted(args);
        serve_random_id("call_", call->id, sizeof call->id);
        ok = call->name && call->arguments;
    }
    cJSON_Delete(j);
    return ok;
}

int serve_take_tool_calls(const char *text, size_t len, struct serve_tool_calls *out)
{
    *out = (struct serve_tool_calls){0};
    struct qp_buf content = {0};
    const char *at = text, *end = text + len;
    while (at < end) {
        const char *open = find_in(at, (size_t)(end - at), call_open);
        const char *body = open ? open + strlen(call_open) : NULL;
        const char *close = open ? find_in(body, (size_t)(end - body), call_close) : NULL;
        struct serve_tool_call call = {0};
        if (!close || out->n == SERVE_MAX_TOOLS || !read_call(body, (size_t)(close - body), &call)) {
            free(call.name);
            free(call.arguments);
            /* text up to the next block, or all that is left */
            const char *upto = close ? close + strlen(call_close) : end;
            qp_buf_add(&content, at, (size_t)(upto - at));
            at = upto;
            continue;
        }
        struct serve_tool_call *v = realloc(out->v, (out->n + 1) * sizeof *v);
        if (!v) {
            free(call.name);
            free(call.arguments);
            content.oom = true;
            break;
        }
        out->v = v;
        out->v[out->n++] = call;
        qp_buf_add(&content, at, (size_t)(open - at));
        at = close + strlen(call_close);
    }
    qp_buf_add(&content, "", 0);
    if (content.oom) {
        free(content.s);
        serve_tool_calls_clear(out);
        return -1;
    }
    /* with calls, the text around them without its blank edges (none: null) */
    size_t a = 0, b = content.len;
    if (out->n) {
        while (a < b && blank(content.s[a]))
            a++;
        while (b > a && blank(content.s[b - 1]))
            b--;
    }
    memmove(content.s, content.s + a, b - a);
    content.s[b - a] = 0;
    out->content = content.s;
    out->content_len = b - a;
    return 0;
}

void serve_tool_calls_clear(struct serve_tool_calls *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].arguments);
    }
    free(c->v);
    free(c->content);
    *c = (struct serve_tool_calls){0};
}

/* ---- the same as a reply streams ----------------------------------------- */

int serve_tool_text_push(struct serve_tool_text *t, const char *text, size_t n, char **emit, size_t *emit_len)
{
    *emit = NULL;
    *emit_len = 0;
    struct qp_buf o = {.s = t->buf, .len = t->len, .cap = t->cap};
    qp_buf_add(&o, text, n);
    t->buf = o.s, t->cap = o.cap;
    if (o.oom)
        return -1;
    t->len = o.len;
    if (t->in_call)
        return 0;
    const char *open = find_in(t->buf, t->len, call_open);
    size_t keep;                /* bytes at the end held back */
    if (open) {
        t->in_call = true;
        keep = t->len - (size_t)(open - t->buf);
    } else {
        /* the longest tail that could still grow into "<tool_call>" */
        keep = 0;
        for (size_t k = strlen(call_open) - 1; k > 0 && !keep; k--)
            if (t->len >= k && !memcmp(t->buf + t->len - k, call_open, k))
                keep = k;
    }
    size_t out_len = t->len - keep;
    if (!out_len)
        return 0;
    if (!(*emit = malloc(out_len + 1)))
        return -1;
    memcpy(*emit, t->buf, out_len);
    (*emit)[out_len] = 0;
    *emit_len = out_len;
    memmove(t->buf, t->buf + out_len, keep);
    t->len = keep;
    return 0;
}

int serve_tool_text_finish(struct serve_tool_text *t, struct serve_tool_calls *calls)
{
    int rc = serve_take_tool_calls(t->buf ? t->buf : "", t->len, calls);
    free(t->buf);
    *t = (struct serve_tool_text){0};
    return rc;
}

void serve_tool_text_free(struct serve_tool_text *t)
{
    free(t->buf);
    *t = (struct serve_tool_text){0};
}
