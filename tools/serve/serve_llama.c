/* serve_llama.c - llama-server's own endpoints, in its shapes, so that its
 * tools and web clients find what they look for:
 *
 *   POST /tokenize    {"content": TEXT, "with_pieces": false} -> {"tokens": [ID, ...]}
 *                     (with pieces: [{"id": ID, "piece": TEXT}, ...])
 *   POST /detokenize  {"tokens": [ID, ...]} -> {"content": TEXT}
 *   GET  /props       the served model and the request defaults
 *   GET  /slots       each session: running or free, positions held
 *   POST /apply-template  a chat request -> {"prompt": TEXT}: its messages
 *                     through the chat template (the prompt a chat would feed)
 *
 * Bodies follow the field policy of serve_openai.c: strict JSON, known
 * fields checked, unknown ones ignored. Qwen3's tokenizer adds no special
 * tokens, so add_special changes nothing; special tokens written in the
 * text always become their ids (parse_special false is refused). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "stdout_policy.h"

#define BAD(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)

/* {"content": ..., "add_special", "parse_special", "with_pieces"} */
static int read_tokenize(const cJSON *root, const char **content, bool *pieces, struct serve_error *e)
{
    if (!cJSON_IsObject(root))
        return BAD(e, NULL, "the request body must be a JSON object");
    *content = NULL;
    *pieces = false;
    bool flag;
    for (const cJSON *f = root->child; f; f = f->next) {
        if (cJSON_IsNull(f))
            continue;
        if (!strcmp(f->string, "content")) {
            if (!cJSON_IsString(f))
                return BAD(e, "content", "'content' must be a string");
            *content = f->valuestring;
        } else if (!strcmp(f->string, "with_pieces")) {
            if (serve_want_bool(f, "with_pieces", pieces, e))
                return -1;
        } else if (!strcmp(f->string, "add_special")) {
            if (serve_want_bool(f, "add_special", &flag, e))
                return -1;
        } else if (!strcmp(f->string, "parse_special")) {
            if (serve_want_bool(f, "parse_special", &flag, e))
                return -1;
            if (!flag)
                return BAD(e, "parse_special", "'parse_special': false is not supported: special tokens written "
                           "in the text always become their ids");
        }
    }
    if (!*content)
        return BAD(e, "content", "'content' is required");
    return 0;
}

/* {"id": ID, "piece": TEXT}: the token's text alone (a piece of a character
 * shows as U+FFFD) */
static cJSON *piece_of(const qpack_tokenizer *tok, int32_t id)
{
    char *text = NULL;
    size_t len = 0;
    qpack_error err;
    cJSON *p = cJSON_CreateObject(), *t;
    if (!p || !cJSON_AddNumberToObject(p, "id", id) || qpack_detokenize(tok, &id, 1, false, &text, &len, &err))
        goto fail;
    if (!(t = serve_json_text(text, len)) || !cJSON_AddItemToObject(p, "piece", t)) {
        cJSON_Delete(t);
        goto fail;
    }
    free(text);
    return p;
fail:
    free(text);
    cJSON_Delete(p);
    return NULL;
}

int serve_tokenize_reply(const qpack_tokenizer *tok, const char *body, size_t len, char **out,
                         struct serve_error *e)
{
    *out = NULL;
    cJSON *root;
    if (serve_json_parse(body, len, &root, e))
        return -1;
    const char *content;
    bool pieces;
    int32_t *ids = NULL;
    size_t n = 0;
    qpack_error err;
    if (read_tokenize(root, &content, &pieces, e) ||
        (qpack_tokenize(tok, content, strlen(content), &ids, &n, &err) && BAD(e, "content", "%s", err.message))) {
        cJSON_Delete(root);
        return -1;
    }
    cJSON *reply = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(reply, "tokens");
    bool ok = tokens != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *item = pieces ? piece_of(tok, ids[i]) : cJSON_CreateNumber(ids[i]);
        ok = item && cJSON_AddItemToArray(tokens, item);
    }
    free(ids);
    cJSON_Delete(root);
    *out = serve_json_print(reply, ok);
    return 0;
}

int serve_detokenize_reply(const qpack_tokenizer *tok, uint32_t vocab, const char *body, size_t len, char **out,
                           struct serve_error *e)
{
    *out = NULL;
    cJSON *root;
    if (serve_json_parse(body, len, &root, e))
        return -1;
    const cJSON *tokens = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "tokens") : NULL;
    int rc = 0;
    if (!cJSON_IsObject(root))
        rc = BAD(e, NULL, "the request body must be a JSON object");
    else if (!cJSON_IsArray(tokens))
        rc = BAD(e, "tokens", "'tokens' must be an array of token ids");
    int n = rc ? 0 : cJSON_GetArraySize(tokens);
    if (!rc && n > SERVE_MAX_PROMPT_IDS)
        rc = BAD(e, "tokens", "'tokens' has %d ids: at most %d", n, SERVE_MAX_PROMPT_IDS);
    int32_t *ids = rc ? NULL : malloc(((size_t)n + 1) * sizeof *ids);
    if (!rc && !ids)
        rc = BAD(e, NULL, "out of memory");
    int i = 0;
    for (const cJSON *t = rc ? NULL : tokens->child; t; t = t->next, i++) {
        double v = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (v < 0 || v >= vocab || v != (double)(int32_t)v) {
            rc = BAD(e, "tokens", "tokens[%d] is not a token id (0 to %u)", i, vocab - 1);
            break;
        }
        ids[i] = (int32_t)v;
    }
    cJSON_Delete(root);
    char *text = NULL;
    size_t tlen = 0;
    qpack_error err;
    if (!rc && qpack_detokenize(tok, ids, (size_t)n, false, &text, &tlen, &err))
        rc = BAD(e, "tokens", "%s", err.message);
    free(ids);
    if (!rc) {
        cJSON *reply = cJSON_CreateObject(), *t = serve_json_text(text, tlen);
        bool ok = reply && t && cJSON_AddItemToObject(reply, "content", t);
        if (!ok)
            cJSON_Delete(t);
        *out = serve_json_print(reply, ok);
    }
    free(text);
    return rc;
}

int serve_apply_template_reply(const struct serve_model_ref *model, const char *body, size_t len, char **out,
                               struct serve_error *e)
{
    struct serve_request q;
    if (serve_parse_request(SERVE_CHAT, body, len, model, &q, e))
        return -1;
    char *text = NULL;
    size_t n = 0;
    qpack_error err;
    int rc = qpack_chat_render_tools(q.msgs, q.n_msgs, (const char *const *)q.tools, q.n_tools, q.think, &text, &n,
                                     &err);
    serve_request_free(&q);
    if (rc)
        return BAD(e, "messages", "%s", err.message);
    cJSON *reply = cJSON_CreateObject(), *t = serve_json_text(text, n);
    free(text);
    bool ok = reply && t && cJSON_AddItemToObject(reply, "prompt", t);
    if (!ok)
        cJSON_Delete(t);
    *out = serve_json_print(reply, ok);
    return 0;
}

static bool add_params(cJSON *to, uint32_t ctx, const qpack_sampler_params *model)
{
    qpack_sampler_params p = model ? *model : serve_default_sampling();
    cJSON *o = cJSON_AddObjectToObject(to, "params");
    return o && cJSON_AddNumberToObject(o, "temperature", p.temperature) &&
           cJSON_AddNumberToObject(o, "top_k", p.top_k) && cJSON_AddNumberToObject(o, "top_p", p.top_p) &&
           cJSON_AddNumberToObject(o, "min_p", p.min_p) &&
           cJSON_AddNumberToObject(o, "repeat_penalty", p.repeat_penalty) &&
           cJSON_AddNumberToObject(o, "repeat_last_n", p.repeat_last_n) &&
           cJSON_AddNumberToObject(o, "presence_penalty", p.presence_penalty) &&
           cJSON_AddNumberToObject(o, "frequency_penalty", p.frequency_penalty) &&
           cJSON_AddNumberToObject(o, "n_predict", -1) && cJSON_AddNumberToObject(o, "n_ctx", ctx);
}

char *serve_props_json(const struct serve_props *p)
{
    cJSON *root = cJSON_CreateObject(), *gen = cJSON_AddObjectToObject(root, "default_generation_settings"), *mod;
    bool ok = gen && cJSON_AddNumberToObject(gen, "n_ctx", p->ctx) && add_params(gen, p->ctx, p->sampling) &&
              cJSON_AddNumberToObject(root, "total_slots", p->parallel) &&
              cJSON_AddStringToObject(root, "model_alias", p->model_id) &&
              cJSON_AddStringToObject(root, "model_path", p->model_path) &&
              (mod = cJSON_AddObjectToObject(root, "modalities")) && cJSON_AddFalseToObject(mod, "vision") &&
              cJSON_AddFalseToObject(mod, "audio") && cJSON_AddStringToObject(root, "build_info", qp_version()) &&
              cJSON_AddStringToObject(root, "format", p->format) &&
              cJSON_AddStringToObject(root, "backend", p->backend) &&
              cJSON_AddNumberToObject(root, "n_ctx_train", p->ctx_train) &&
              cJSON_AddNumberToObject(root, "n_vocab", p->vocab);
    return serve_json_print(root, ok);
}

char *serve_slots_json(const struct serve_slot_info *s, unsigned n, uint32_t ctx)
{
    cJSON *root = cJSON_CreateArray();
    bool ok = root != NULL;
    for (unsigned i = 0; ok && i < n; i++) {
        cJSON *o = cJSON_CreateObject(), *next = NULL;
        ok = o && cJSON_AddItemToArray(root, o) && cJSON_AddNumberToObject(o, "id", i) &&
             cJSON_AddNumberToObject(o, "n_ctx", ctx) && cJSON_AddBoolToObject(o, "is_processing", s[i].busy) &&
             cJSON_AddNumberToObject(o, "n_past", s[i].held) &&
             cJSON_AddNumberToObject(o, "n_prompt_tokens", s[i].prompt) &&
             (next = cJSON_AddObjectToObject(o, "next_token")) &&
             cJSON_AddBoolToObject(next, "has_next_token", s[i].busy) &&
             cJSON_AddNumberToObject(next, "n_decoded", s[i].decoded);
    }
    return serve_json_print(root, ok);
}
