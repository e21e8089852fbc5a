/* chat_template.c - Qwen3's chat template (the chat_template of its
 * tokenizer_config.json) for include/qpack.h, written out in C for every
 * branch it has: a system message, tools, user turns, assistant turns with
 * their thinking and tool calls, tool responses, and the generation prompt.
 *
 *   [<|im_start|>system\nSYSTEM<|im_end|>\n]          or, with tools,
 *   <|im_start|>system\n[SYSTEM\n\n]# Tools ...<tools>\nTOOL...\n</tools>...<|im_end|>\n
 *   <|im_start|>user\nCONTENT<|im_end|>\n
 *   <|im_start|>assistant\n[<think>\nR\n</think>\n\n]CONTENT[\n<tool_call>\n{...}\n</tool_call>]<|im_end|>\n
 *   <|im_start|>user\n<tool_response>\nCONTENT\n</tool_response>[...]<|im_end|>\n
 *   <|im_start|>assistant\n[<think>\n\n</think>\n\n]
 *
 * An assistant turn keeps its thinking only after the last real user
 * query (a tool loop's steps), as the template does. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

/* a piece of a string: what the template's split and strip make */
struct span {
    const char *s;
    size_t n;
};

static struct span whole(const char *s) { return (struct span){s ? s : "", s ? strlen(s) : 0}; }

static bool starts_with(struct span a, const char *p) { return a.n >= strlen(p) && !memcmp(a.s, p, strlen(p)); }

static bool ends_with(struct span a, const char *p)
{
    size_t k = strlen(p);
    return a.n >= k && !memcmp(a.s + a.n - k, p, k);
}

static struct span lstrip_nl(struct span a)
{
    while (a.n && *a.s == '\n')
        a.s++, a.n--;
    return a;
}

static struct span rstrip_nl(struct span a)
{
    while (a.n && a.s[a.n - 1] == '\n')
        a.n--;
    return a;
}

/* the first or last place of p in a, or NULL */
static const char *find(struct span a, const char *p, bool last)
{
    size_t k = strlen(p);
    const char *hit = NULL;
    for (size_t i = 0; i + k <= a.n; i++)
        if (!memcmp(a.s + i, p, k)) {
            hit = a.s + i;
            if (!last)
                break;
        }
    return hit;
}

static bool is(const qpack_chat_message *m, const char *role) { return !strcmp(m->role, role); }

/* the template's last_query_index: the last user turn that is not a
 * wrapped tool response */
static size_t last_query(const qpack_chat_message *msgs, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        struct span c = whole(msgs[i].content);
        if (is(&msgs[i], "user") && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>")))
            return i;
    }
    return n ? n - 1 : 0;
}

static int put(qp_tok_text *out, struct span a) { return qp_tok_text_append(out, a.s, a.n); }

static int assistant(qp_tok_text *out, const qpack_chat_message *m, bool keep_thinking, bool is_last)
{
    struct span content = whole(m->content), reasoning = whole(NULL);
    if (m->reasoning) {
        reasoning = whole(m->reasoning);
    } else if (find(content, "</think>", false)) {
        /* content.split('</think>')[-1].lstrip('\n'), and
         * content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        const char *first = find(content, "</think>", false), *last = find(content, "</think>", true);
        struct span before = rstrip_nl((struct span){content.s, (size_t)(first - content.s)});
        const char *open = find(before, "<think>", true);
        if (open)
            before = (struct span){open + 7, before.n - (size_t)(open + 7 - before.s)};
        reasoning = lstrip_nl(before);
        content = lstrip_nl((struct span){last + 8, content.n - (size_t)(last + 8 - content.s)});
    }
    int rc = qp_tok_text_appends(out, "<|im_start|>assistant\n");
    if (keep_thinking && (is_last || reasoning.n))
        rc = rc || qp_tok_text_appends(out, "<think>\n") || put(out, rstrip_nl(lstrip_nl(reasoning))) ||
             qp_tok_text_appends(out, "\n</think>\n\n") || put(out, lstrip_nl(content));
    else
        rc = rc || put(out, content);
    for (size_t j = 0; j < m->n_tool_calls && !rc; j++)
        rc = ((j || content.n) && qp_tok_text_appends(out, "\n")) ||
             qp_tok_text_appends(out, "<tool_call>\n{\"name\": \"") ||
             qp_tok_text_appends(out, m->tool_calls[j].name) || qp_tok_text_appends(out, "\", \"arguments\": ") ||
             qp_tok_text_appends(out, m->tool_calls[j].arguments) || qp_tok_text_appends(out, "}\n</tool_call>");
    return rc || qp_tok_text_appends(out, "<|im_end|>\n");
}

static int turn(qp_tok_text *out, const qpack_chat_message *msgs, size_t n, size_t i, size_t query)
{
    const qpack_chat_message *m = &msgs[i];
    if (is(m, "user") || (is(m, "system") && i > 0))
        return qp_tok_text_appends(out, "<|im_start|>") || qp_tok_text_appends(out, m->role) ||
               qp_tok_text_appends(out, "\n") || put(out, whole(m->content)) ||
               qp_tok_text_appends(out, "<|im_end|>\n");
    if (is(m, "assistant"))
        return assistant(out, m, i > query, i + 1 == n);
    if (is(m, "tool"))
        return ((i == 0 || !is(&msgs[i - 1], "tool")) && qp_tok_text_appends(out, "<|im_start|>user")) ||
               qp_tok_text_appends(out, "\n<tool_response>\n") || put(out, whole(m->content)) ||
               qp_tok_text_appends(out, "\n</tool_response>") ||
               ((i + 1 == n || !is(&msgs[i + 1], "tool")) && qp_tok_text_appends(out, "<|im_end|>\n"));
    return 0;                   /* the first message, a system one: in the head */
}

static int check(const qpack_chat_message *msgs, size_t n, const char *const *tools, size_t n_tools,
                 qpack_error *err)
{
    for (size_t i = 0; i < n; i++) {
        const qpack_chat_message *m = &msgs[i];
        if (!m->role || (!is(m, "system") && !is(m, "user") && !is(m, "assistant") && !is(m, "tool")))
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "message %zu: role must be system, user, assistant or tool", i);
        if (m->n_tool_calls && !is(m, "assistant"))
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "message %zu: only an assistant message makes tool calls", i);
        for (size_t j = 0; j < m->n_tool_calls; j++)
            if (!m->tool_calls[j].name || !m->tool_calls[j].arguments)
                return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "message %zu: tool call %zu needs a name and arguments",
                                   i, j);
    }
    for (size_t t = 0; t < n_tools; t++)
        if (!tools[t])
            return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "tool %zu is NULL", t);
    return QPACK_OK;
}

static int render(const qpack_chat_message *msgs, size_t n, const char *const *tools, size_t n_tools, bool think,
                  bool next, char **text, size_t *len, qpack_error *err)
{
    *text = NULL;
    *len = 0;
    int rc = check(msgs, n, tools, n_tools, err);
    if (rc)
        return rc;
    qp_tok_text out = {0};
    bool system = n && is(&msgs[0], "system");
    rc = next && qp_tok_text_appends(&out, "<|im_end|>\n");
    if (n_tools) {
        rc = rc || qp_tok_text_appends(&out, "<|im_start|>system\n") ||
             (system && (put(&out, whole(msgs[0].content)) || qp_tok_text_appends(&out, "\n\n"))) ||
             qp_tok_text_appends(&out, tools_head);
        for (size_t t = 0; t < n_tools && !rc; t++)
            rc = qp_tok_text_appends(&out, "\n") || qp_tok_text_appends(&out, tools[t]);
        rc = rc || qp_tok_text_appends(&out, tools_tail);
    } else if (system) {
        rc = rc || qp_tok_text_appends(&out, "<|im_start|>system\n") || put(&out, whole(msgs[0].content)) ||
             qp_tok_text_appends(&out, "<|im_end|>\n");
    }
    size_t query = last_query(msgs, n);
    for (size_t i = 0; i < n && !rc; i++)
        rc = turn(&out, msgs, n, i, query);
    rc = rc || qp_tok_text_appends(&out, "<|im_start|>assistant\n") ||
         (!think && qp_tok_text_appends(&out, "<think>\n\n</think>\n\n")) || qp_tok_text_append(&out, "", 0);
    if (rc) {
        qp_tok_text_free(&out);
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    }
    *text = out.s;
    *len = out.len;
    return QPACK_OK;
}

int qpack_chat_render(const qpack_chat_message *msgs, size_t n, bool think, char **text, size_t *len,
                      qpack_error *err)
{
    return render(msgs, n, NULL, 0, think, false, text, len, err);
}

int qpack_chat_render_tools(const qpack_chat_message *msgs, size_t n, const char *const *tools, size_t n_tools,
                            bool think, char **text, size_t *len, qpack_error *err)
{
    return render(msgs, n, tools, n_tools, think, false, text, len, err);
}

int qpack_chat_render_next(const qpack_chat_message *msgs, size_t n, bool think, char **text, size_t *len,
                           qpack_error *err)
{
    return render(msgs, n, NULL, 0, think, true, text, len, err);
}
