/* serve_openai_reply.c - OpenAI's response bodies for /v1/chat/completions,
 * /v1/completions and /v1/models, whole and as stream chunks, and the error
 * body: JSON built with cJSON, the reply's text escaped here. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "serve.h"

/* Each byte of s that does not start a well-formed UTF-8 character becomes
 * '?': an error message may quote what the client sent (a path, a field
 * name), and the error body must still be JSON. */
static void make_utf8(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) {
            s[i++] = '?';
            continue;
        }
        i += (size_t)k;
    }
}

/* ---- responses ----------------------------------------------------------- */

/* A JSON string of text[0..len): cJSON's strings end at a NUL byte, but a
 * model may generate one (the byte-level token for 0x00), so the reply's
 * text is escaped here and added as raw JSON. */
cJSON *serve_json_text(const char *text, size_t len)
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

char *serve_json_print(cJSON *root, bool ok)
{
    char *s = ok && root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

char *serve_error_json(const struct serve_error *e)
{
    char message[sizeof e->message], param[sizeof e->param];
    snprintf(message, sizeof message, "%s", e->message);
    snprintf(param, sizeof param, "%s", e->param);
    make_utf8(message);
    make_utf8(param);
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    bool ok = err && cJSON_AddStringToObject(err, "message", message) &&
              cJSON_AddStringToObject(err, "type", e->type) &&
              (param[0] ? cJSON_AddStringToObject(err, "param", param) : cJSON_AddNullToObject(err, "param")) &&
              (e->code ? cJSON_AddStringToObject(err, "code", e->code) : cJSON_AddNullToObject(err, "code"));
    return serve_json_print(root, ok);
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
    cJSON *o = cJSON_AddObjectToObject(root, "usage"), *d;
    return o && cJSON_AddNumberToObject(o, "prompt_tokens", u->prompt_tokens) &&
           cJSON_AddNumberToObject(o, "completion_tokens", u->completion_tokens) &&
           cJSON_AddNumberToObject(o, "total_tokens", (double)u->prompt_tokens + u->completion_tokens) &&
           (d = cJSON_AddObjectToObject(o, "prompt_tokens_details")) &&
           cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens);
}

static double per_second(uint32_t n, double ms) { return ms > 0 ? n * 1e3 / ms : 0; }

/* llama-server's timings: the prompt's tokens run (those not cached) and
 * the tokens generated, with their wall-clock times */
static bool add_timings(cJSON *root, const struct serve_usage *u)
{
    uint32_t run = u->prompt_tokens - u->cached_tokens;
    cJSON *o = cJSON_AddObjectToObject(root, "timings");
    return o && cJSON_AddNumberToObject(o, "cache_n", u->cached_tokens) &&
           cJSON_AddNumberToObject(o, "prompt_n", run) && cJSON_AddNumberToObject(o, "prompt_ms", u->prompt_ms) &&
           cJSON_AddNumberToObject(o, "prompt_per_second", per_second(run, u->prompt_ms)) &&
           cJSON_AddNumberToObject(o, "predicted_n", u->completion_tokens) &&
           cJSON_AddNumberToObject(o, "predicted_ms", u->predicted_ms) &&
           cJSON_AddNumberToObject(o, "predicted_per_second", per_second(u->completion_tokens, u->predicted_ms));
}

static bool add_finish(cJSON *choice, const char *finish)
{
    return finish ? cJSON_AddStringToObject(choice, "finish_reason", finish) != NULL
                  : cJSON_AddNullToObject(choice, "finish_reason") != NULL;
}

/* tool_calls: [ {[index,] id, type "function", function {name, arguments}} ]
 * (a streamed delta numbers its calls) */
static bool add_tool_calls(cJSON *m, const struct serve_reply_text *t, bool numbered)
{
    cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
    for (size_t i = 0; calls && i < t->n_calls; i++) {
        cJSON *c = cJSON_CreateObject(), *fn;
        if (!c || !cJSON_AddItemToArray(calls, c) || (numbered && !cJSON_AddNumberToObject(c, "index", (double)i)) ||
            !cJSON_AddStringToObject(c, "id", t->calls[i].id) || !cJSON_AddStringToObject(c, "type", "function") ||
            !(fn = cJSON_AddObjectToObject(c, "function")) ||
            !cJSON_AddStringToObject(fn, "name", t->calls[i].name) ||
            !cJSON_AddStringToObject(fn, "arguments", t->calls[i].arguments))
            return false;
    }
    return calls != NULL;
}

/* A token's text for its logprobs entry: its bytes (*bytes, *n), a part
 * of a character among them shown as U+FFFD (a JSON string is whole
 * UTF-8); malloc'd, NUL-terminated, *len long */
static char *token_text(const qpack_tokenizer *tok, int32_t id, const char **bytes, size_t *n, size_t *len)
{
    *bytes = tok ? qpack_token_bytes(tok, id, n) : NULL;
    if (!*bytes)
        *bytes = "", *n = 0;
    char *s = malloc(*n * 3 + 1), *o = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < *n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)*bytes + i, (utf8proc_ssize_t)(*n - i), &c);
        if (k <= 0) {
            memcpy(o, "\xef\xbf\xbd", 3), o += 3, i++;
            continue;
        }
        memcpy(o, *bytes + i, (size_t)k), o += k, i += (size_t)k;
    }
    *o = 0;
    *len = (size_t)(o - s);
    return s;
}

static cJSON *token_json(const qpack_tokenizer *tok, int32_t id, const char **bytes, size_t *n)
{
    size_t len;
    char *s = token_text(tok, id, bytes, n, &len);
    cJSON *j = s ? serve_json_text(s, len) : NULL;
    free(s);
    return j;
}

/* item appended to array, or deleted */
static bool append(cJSON *array, cJSON *item)
{
    if (item && array && cJSON_AddItemToArray(array, item))
        return true;
    cJSON_Delete(item);
    return false;
}

/* {token, logprob, bytes} of a chat's logprobs */
static cJSON *chat_token(const qpack_tokenizer *tok, int32_t id, double logprob)
{
    const char *bytes;
    size_t n;
    cJSON *o = cJSON_CreateObject(), *t = token_json(tok, id, &bytes, &n), *b = NULL;
    bool ok = o && t && cJSON_AddItemToObject(o, "token", t);
    if (!ok)
        cJSON_Delete(t);
    ok = ok && cJSON_AddNumberToObject(o, "logprob", logprob) && (b = cJSON_AddArrayToObject(o, "bytes"));
    for (size_t i = 0; ok && i < n; i++)
        ok = append(b, cJSON_CreateNumber((unsigned char)bytes[i]));
    if (!ok)
        cJSON_Delete(o);
    return ok ? o : NULL;
}

/* a chat's logprobs: {content: [{token, logprob, bytes, top_logprobs}], refusal} */
static bool add_chat_logprobs(cJSON *c, const struct serve_reply_meta *meta, const struct serve_reply_text *t)
{
    cJSON *lp = cJSON_AddObjectToObject(c, "logprobs"), *content = lp ? cJSON_AddArrayToObject(lp, "content") : NULL;
    if (!content || !cJSON_AddNullToObject(lp, "refusal"))
        return false;
    for (size_t i = 0; t && i < t->n_lps; i++) {
        const struct serve_logprob *p = &t->lps[i];
        cJSON *e = chat_token(meta->tok, p->id, p->logprob), *top;
        if (!append(content, e) || !(top = cJSON_AddArrayToObject(e, "top_logprobs")))
            return false;
        for (unsigned k = 0; k < p->n_top; k++)
            if (!append(top, chat_token(meta->tok, p->top_id[k], p->top_logprob[k])))
                return false;
    }
    return true;
}

/* a completion's logprobs: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}; the
 * offsets count bytes of the UTF-8 text, and of two alternatives with the
 * same text (two parts of characters, both U+FFFD) the likelier keeps the key */
static bool add_completion_logprobs(cJSON *c, const struct serve_reply_meta *meta, const struct serve_reply_text *t)
{
    cJSON *lp = cJSON_AddObjectToObject(c, "logprobs"), *tokens, *lps, *tops, *offsets;
    if (!lp || !(tokens = cJSON_AddArrayToObject(lp, "tokens")) || !(lps = cJSON_AddArrayToObject(lp, "token_logprobs")) ||
        !(tops = cJSON_AddArrayToObject(lp, "top_logprobs")) || !(offsets = cJSON_AddArrayToObject(lp, "text_offset")))
        return false;
    size_t at = t ? t->offset : 0;
    for (size_t i = 0; t && i < t->n_lps; i++) {
        const struct serve_logprob *p = &t->lps[i];
        const char *bytes;
        size_t n;
        cJSON *top = cJSON_CreateObject();
        if (!append(tokens, token_json(meta->tok, p->id, &bytes, &n)) || !append(lps, cJSON_CreateNumber(p->logprob)) ||
            !append(tops, top) || !append(offsets, cJSON_CreateNumber((double)at)))
            return false;
        at += n;
        for (unsigned k = 0; k < p->n_top; k++) {
            const char *b;
            size_t bn, len;
            char *key = token_text(meta->tok, p->top_id[k], &b, &bn, &len);
            bool ok = key && (cJSON_GetObjectItemCaseSensitive(top, key) ||
                              cJSON_AddNumberToObject(top, key, p->top_logprob[k]));
            free(key);
            if (!ok)
                return false;
        }
    }
    return true;
}

static bool add_logprobs(cJSON *c, const struct serve_reply_meta *meta, const struct serve_reply_text *t)
{
    return meta->kind == SERVE_CHAT ? add_chat_logprobs(c, meta, t) : add_completion_logprobs(c, meta, t);
}

/* a choice of choices: {index, message|delta|text, logprobs, finish_reason};
 * a message or delta holds content when t->content is set, and
 * reasoning_content when t has reasoning */
static bool add_choice(cJSON *choices, const struct serve_reply_meta *meta, unsigned index, const char *holder,
                       const struct serve_reply_text *t, bool role, const char *finish)
{
    enum serve_kind kind = meta->kind;
    cJSON *c = cJSON_CreateObject();
    if (!choices || !c || !cJSON_AddItemToArray(choices, c)) {
        cJSON_Delete(c);
        return false;
    }
    if (!cJSON_AddNumberToObject(c, "index", index))
        return false;
    cJSON *text = t && t->content ? serve_json_text(t->content, t->content_len) : NULL;
    if (t && t->content && !text)
        return false;
    if (kind == SERVE_COMPLETION) {
        if (!cJSON_AddItemToObject(c, "text", text))
            return false;
    } else {
        cJSON *m = cJSON_AddObjectToObject(c, holder), *r = NULL;
        if (!m || (role && !cJSON_AddStringToObject(m, "role", "assistant")) ||
            (text && !cJSON_AddItemToObject(m, "content", text)))
            return false;
        if (t && t->reasoning && t->reasoning_len &&
            (!(r = serve_json_text(t->reasoning, t->reasoning_len)) || !cJSON_AddItemToObject(m, "reasoning_content", r))) {
            cJSON_Delete(r);
            return false;
        }
        bool whole = !strcmp(holder, "message");
        if (t && t->n_calls && ((whole && !text && !cJSON_AddNullToObject(m, "content")) ||
                                !add_tool_calls(m, t, !whole)))
            return false;
    }
    bool ok = meta->logprobs ? add_logprobs(c, meta, t) : cJSON_AddNullToObject(c, "logprobs") != NULL;
    return ok && add_finish(c, finish);
}

char *serve_choices_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, const char *const *finish,
                         unsigned n, const struct serve_usage *u)
{
    bool chat = r->kind == SERVE_CHAT;
    cJSON *root = reply_head(r, chat ? "chat.completion" : "text_completion");
    cJSON *choices = root ? cJSON_AddArrayToObject(root, "choices") : NULL;
    bool ok = choices != NULL;
    for (unsigned k = 0; ok && k < n; k++) {
        struct serve_reply_text whole = t[k];
        if (!whole.content && !whole.n_calls)
            whole.content = "";
        ok = add_choice(choices, r, k, "message", &whole, true, finish[k]);
    }
    ok = ok && add_usage(root, u) && add_timings(root, u);
    return serve_json_print(root, ok);
}

char *serve_completion_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, const char *finish,
                            const struct serve_usage *u)
{
    return serve_choices_json(r, t, &finish, 1, u);
}

/* a chunk's JSON for reply index, NULL when out of memory */
static cJSON *chunk(const struct serve_reply_meta *r, unsigned index, const struct serve_reply_text *t,
                    bool role_chunk, const char *finish)
{
    bool chat = r->kind == SERVE_CHAT;
    cJSON *root = reply_head(r, chat ? "chat.completion.chunk" : "text_completion");
    /* a chat's last chunk has an empty delta; a completion's an empty text;
     * a chat's first has an empty content beside its role */
    static const struct serve_reply_text empty = {.content = ""};
    if ((!t || (!chat && !t->content)) && (!chat || role_chunk))
        t = &empty;
    if (root && !add_choice(cJSON_AddArrayToObject(root, "choices"), r, index, "delta", t, role_chunk, finish))
        cJSON_Delete(root), root = NULL;
    return root;
}

char *serve_chunk_json(const struct serve_reply_meta *r, const struct serve_reply_text *t, bool role_chunk,
                       const char *finish)
{
    cJSON *root = chunk(r, t ? t->index : 0, t && (t->content || t->reasoning || t->n_calls || t->n_lps) ? t : NULL,
                        role_chunk, finish);
    return serve_json_print(root, root != NULL);
}

char *serve_final_chunk_json(const struct serve_reply_meta *r, unsigned index, const char *finish,
                             const struct serve_usage *u)
{
    cJSON *root = chunk(r, index, NULL, false, finish);
    return serve_json_print(root, root && add_timings(root, u));
}

char *serve_usage_chunk_json(const struct serve_reply_meta *r, const struct serve_usage *u)
{
    cJSON *root = reply_head(r, r->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
    bool ok = root && cJSON_AddArrayToObject(root, "choices") && add_usage(root, u);
    return serve_json_print(root, ok);
}

char *serve_models_json(const char *model_id, long long created, bool one, uint32_t ctx, uint32_t ctx_train,
                        uint32_t vocab)
{
    cJSON *m = cJSON_CreateObject(), *meta;
    bool ok = m && cJSON_AddStringToObject(m, "id", model_id) && cJSON_AddStringToObject(m, "object", "model") &&
              cJSON_AddNumberToObject(m, "created", (double)created) &&
              cJSON_AddStringToObject(m, "owned_by", "qpack") &&
              cJSON_AddNumberToObject(m, "max_model_len", ctx) &&
              (meta = cJSON_AddObjectToObject(m, "meta")) && cJSON_AddNumberToObject(meta, "n_ctx", ctx) &&
              cJSON_AddNumberToObject(meta, "n_ctx_train", ctx_train) &&
              cJSON_AddNumberToObject(meta, "n_vocab", vocab);
    if (one || !ok)
        return serve_json_print(m, ok);
    cJSON *root = cJSON_CreateObject(), *data = NULL;
    ok = root && cJSON_AddStringToObject(root, "object", "list") && (data = cJSON_AddArrayToObject(root, "data")) &&
         cJSON_AddItemToArray(data, m);
    if (!ok && !(data && data->child == m))
        cJSON_Delete(m);
    return serve_json_print(root, ok);
}
