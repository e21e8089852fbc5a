/* serve_rerank.c - POST /v1/rerank and /rerank (serve.h): llama-server's
 * and Jina's request, each document's prompt as Qwen3-Reranker's model
 * card writes it, its score, and the response.
 *
 * A reranker judges one (query, document) pair per prompt: the chat turns
 * the model card gives, ending in an assistant turn with an empty think
 * block, after which the model's next token is "yes" or "no". The score
 * is P(yes) over those two tokens alone: the softmax of the last
 * position's two logits. The scheduler scores one document between two
 * steps of the other sessions, as it embeds (serve_sched.c); the prompts
 * share their start, so each document feeds only what follows the
 * previous one's common prefix. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_http.h"

#define BAD(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)

/* Qwen3-Reranker's model card, word for word */
static const char prompt_prefix[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
static const char prompt_suffix[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char default_instruction[] = "Given a web search query, retrieve relevant passages that answer the query";

struct ids {
    int32_t *v;
    uint32_t n, cap;
};

static int push_ids(struct ids *b, const int32_t *ids, size_t n, struct serve_error *e)
{
    /* the tokenizer's work is bounded too, whatever the documents' count */
    if (n > SERVE_MAX_RERANK_TOKENS - b->n)
        return BAD(e, "documents", "the documents' prompts hold more than %u tokens together", SERVE_MAX_RERANK_TOKENS);
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n)
            cap *= 2;
        if (cap > UINT32_MAX / sizeof *b->v)
            return BAD(e, "documents", "the documents are too long");
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v)
            return BAD(e, "documents", "out of memory");
        b->v = v, b->cap = (uint32_t)cap;
    }
    memcpy(b->v + b->n, ids, n * sizeof *ids);
    b->n += (uint32_t)n;
    return 0;
}

static int push_text(struct ids *b, const qpack_tokenizer *tok, const char *text, size_t len, const char *param,
                     struct serve_error *e)
{
    int32_t *ids;
    size_t n;
    qpack_error err;
    if (qpack_tokenize(tok, text, len, &ids, &n, &err))
        return BAD(e, param, "%s: %s", param, err.message);
    int rc = push_ids(b, ids, n, e);
    free(ids);
    return rc;
}

/* One document's prompt, its three parts tokenized apart as the model
 * card does (the fixed ones, fix, once for all); at most ctx tokens. */
static int push_prompt(struct ids *b, const struct ids fix[2], const qpack_tokenizer *tok, const char *instruction,
                       const char *query, const char *doc, uint32_t i, uint32_t ctx, struct serve_error *e)
{
    static const char *const fmt = "<Instruct>: %s\n<Query>: %s\n<Document>: %s";
    char param[32];
    snprintf(param, sizeof param, "documents[%u]", i);
    size_t len = strlen(fmt) + strlen(instruction) + strlen(query) + strlen(doc);
    char *pair = malloc(len + 1);
    if (!pair)
        return BAD(e, "documents", "out of memory");
    int n = snprintf(pair, len + 1, fmt, instruction, query, doc);
    uint32_t start = b->n;
    int rc = push_ids(b, fix[0].v, fix[0].n, e) || push_text(b, tok, pair, (size_t)n, param, e) ||
             push_ids(b, fix[1].v, fix[1].n, e);
    free(pair);
    if (!rc && b->n - start > ctx) {
        serve_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "documents",
                        "%s's prompt has %u tokens: the context holds %u", param, b->n - start, ctx);
        rc = -1;
    }
    return rc ? -1 : 0;
}

/* A document: a string, or Jina's and Cohere's object {"text": "..."}
 * (its other fields ignored, as a request's unknown fields are); NULL when
 * it is neither. */
static const char *document_text(const cJSON *d)
{
    if (cJSON_IsObject(d))
        d = cJSON_GetObjectItemCaseSensitive(d, "text");
    return cJSON_IsString(d) ? d->valuestring : NULL;
}

static int read_documents(const cJSON *docs, const qpack_tokenizer *tok, const char *instruction, const char *query,
                          uint32_t ctx, struct serve_rerank_request *req, struct serve_error *e)
{
    int n = cJSON_IsArray(docs) ? cJSON_GetArraySize(docs) : 0;
    if (n < 1 || n > SERVE_MAX_DOCUMENTS)
        return BAD(e, "documents", "'documents' must be a list of 1 to %d documents", SERVE_MAX_DOCUMENTS);
    if (!(req->ends = calloc((size_t)n, sizeof *req->ends)))
        return BAD(e, "documents", "out of memory");
    struct ids b = {0}, fix[2] = {{0}};
    int rc = push_text(&fix[0], tok, prompt_prefix, sizeof prompt_prefix - 1, "documents", e) ||
             push_text(&fix[1], tok, prompt_suffix, sizeof prompt_suffix - 1, "documents", e);
    for (const cJSON *d = docs->child; d && !rc; d = d->next) {
        const char *text = document_text(d);
        if (!text)
            rc = BAD(e, "documents", "documents[%u] must be a string or an object with a string 'text'", req->n_docs);
        else if (!(rc = push_prompt(&b, fix, tok, instruction, query, text, req->n_docs, ctx, e)))
            req->ends[req->n_docs++] = b.n;
    }
    free(fix[0].v);
    free(fix[1].v);
    req->ids = b.v;
    return rc;
}

static int read_options(const cJSON *root, struct serve_rerank_request *req, struct serve_error *e)
{
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, "top_n"),
                *ret = cJSON_GetObjectItemCaseSensitive(root, "return_documents");
    req->top_n = req->n_docs;
    if (top && !cJSON_IsNull(top)) {
        if (!cJSON_IsNumber(top) || top->valuedouble != floor(top->valuedouble) || top->valuedouble < 1)
            return BAD(e, "top_n", "'top_n' must be a positive integer");
        if (top->valuedouble < req->n_docs)
            req->top_n = (uint32_t)top->valuedouble;
    }
    if (ret && !cJSON_IsNull(ret) && !cJSON_IsBool(ret))
        return BAD(e, "return_documents", "'return_documents' must be true or false");
    req->return_documents = cJSON_IsTrue(ret);
    return 0;
}

/* root's string key into *out: dflt when absent or null, required when dflt is NULL */
static int read_string(const cJSON *root, const char *key, const char *dflt, const char **out, struct serve_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = dflt;
    if (!v || (dflt && cJSON_IsNull(v)))
        return dflt ? 0 : BAD(e, key, "'%s' is required", key);
    if (!cJSON_IsString(v))
        return BAD(e, key, "'%s' must be a string", key);
    *out = v->valuestring;
    return 0;
}

static int read_request(const cJSON *root, const struct serve_model_ref *model, const qpack_tokenizer *tok,
                        uint32_t ctx, struct serve_rerank_request *req, struct serve_error *e)
{
    if (!cJSON_IsObject(root))
        return BAD(e, NULL, "the request body must be a JSON object");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model"),
                *docs = cJSON_GetObjectItemCaseSensitive(root, "documents");
    const char *query, *instruction;
    if ((m && !cJSON_IsNull(m) && serve_read_model(m, model, e)) || read_string(root, "query", NULL, &query, e) ||
        read_string(root, "instruction", default_instruction, &instruction, e))
        return -1;
    if (!docs)
        return BAD(e, "documents", "'documents' is required");
    if (!tok)
        return BAD(e, "documents", "the model carries no tokenizer: a reranker needs one");
    return read_documents(docs, tok, instruction, query, ctx, req, e) || read_options(root, req, e) ? -1 : 0;
}

int serve_parse_rerank(const char *body, size_t len, const struct serve_model_ref *model, const qpack_tokenizer *tok,
                       uint32_t ctx, struct serve_rerank_request *req, struct serve_error *e)
{
    *req = (struct serve_rerank_request){0};
    if (serve_json_parse(body, len, &req->body, e))
        return -1;
    if (read_request(req->body, model, tok, ctx, req, e)) {
        serve_rerank_request_free(req);
        return -1;
    }
    return 0;
}

void serve_rerank_request_free(struct serve_rerank_request *req)
{
    cJSON_Delete(req->body);
    free(req->ids);
    free(req->ends);
    *req = (struct serve_rerank_request){0};
}

int serve_rerank_tokens(const qpack_tokenizer *tok, int32_t *yes, int32_t *no)
{
    const char *words[2] = {"yes", "no"};
    int32_t *out[2] = {yes, no};
    for (int k = 0; k < 2; k++) {
        int32_t *ids;
        size_t n;
        qpack_error err;
        if (!tok || qpack_tokenize(tok, words[k], strlen(words[k]), &ids, &n, &err))
            return -1;
        *out[k] = n == 1 ? ids[0] : -1;
        free(ids);
        if (*out[k] < 0)
            return -1;
    }
    return 0;
}

int serve_rerank_score(qpack_session *s, const int32_t *tokens, size_t n, int32_t yes, int32_t no, float *score,
                       qpack_error *err)
{
    /* the start the session already holds is kept, but for the last token,
     * whose logits the score needs */
    uint32_t held = qpack_session_pos(s), keep = 0;
    const int32_t *had = qpack_session_tokens(s);
    while (keep < held && keep + 1 < n && had[keep] == tokens[keep])
        keep++;
    if (qpack_session_rewind(s, keep, err) || qpack_feed(s, tokens + keep, n - keep, err))
        return -1;
    const double *logits = qpack_logits(s);
    /* P(yes) of softmax(yes, no), written so that neither exp overflows */
    *score = (float)(1 / (1 + exp(logits[no] - logits[yes])));
    return 0;
}

/* ---- the response ---------------------------------------------------------- */

struct ranked {
    uint32_t index;
    float score;
};

/* best first; equal scores in the documents' order */
static int by_score(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static bool add_result(cJSON *results, const struct ranked *r, const cJSON *doc)
{
    cJSON *item = cJSON_CreateObject();
    if (!item || !cJSON_AddItemToArray(results, item)) {
        cJSON_Delete(item);
        return false;
    }
    if (!cJSON_AddNumberToObject(item, "index", r->index) ||
        !cJSON_AddNumberToObject(item, "relevance_score", r->score))
        return false;
    cJSON *d = doc ? cJSON_AddObjectToObject(item, "document") : NULL;
    return !doc || (d && cJSON_AddStringToObject(d, "text", document_text(doc)));
}

char *serve_rerank_json(const float *scores, const struct serve_rerank_request *req, const char *model,
                        uint32_t prompt_tokens)
{
    struct ranked *r = malloc(req->n_docs * sizeof *r);
    if (!r)
        return NULL;
    for (uint32_t i = 0; i < req->n_docs; i++)
        r[i] = (struct ranked){i, scores[i]};
    qsort(r, req->n_docs, sizeof *r, by_score);
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(req->body, "documents");
    cJSON *root = cJSON_CreateObject(), *results = NULL, *usage = NULL;
    bool ok = root && cJSON_AddStringToObject(root, "model", model) && cJSON_AddStringToObject(root, "object", "list") &&
              (results = cJSON_AddArrayToObject(root, "results"));
    for (uint32_t k = 0; ok && k < req->top_n; k++)
        ok = add_result(results, &r[k], req->return_documents ? cJSON_GetArrayItem(docs, (int)r[k].index) : NULL);
    free(r);
    ok = ok && (usage = cJSON_AddObjectToObject(root, "usage")) &&
         cJSON_AddNumberToObject(usage, "prompt_tokens", prompt_tokens) &&
         cJSON_AddNumberToObject(usage, "total_tokens", prompt_tokens);
    return serve_json_print(root, ok);
}

/* ---- the endpoint ---------------------------------------------------------- */

/* every document scored: the answer */
enum MHD_Result reply_rerank(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    bool done;
    enum MHD_Result waiting = reply_await_jobs(h, c, r, &done);
    if (!done)
        return waiting;
    const float *scores = serve_job_embeddings(r->ch[0].job);
    struct serve_usage usage;
    qpack_error err = {0};
    if (!serve_job_result(r->ch[0].job, &usage, &err) || !scores) {
        struct serve_error e;
        reply_job_failure(&err, &e);
        return http_send_error(c, r, &e);
    }
    r->usage.prompt_tokens = r->rerank.ends[r->rerank.n_docs - 1];
    char *json = serve_rerank_json(scores, &r->rerank, r->m->id, r->usage.prompt_tokens);
    return json ? http_send_json(c, r, 200, json) : http_fail(c, r, 500, "server_error", NULL, NULL, "out of memory");
}

enum MHD_Result serve_rerank(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    const qpack_model_info *info = qpack_model_get_info(r->m->model);
    const qpack_tokenizer *tok = qpack_model_tokenizer(r->m->model);
    int32_t yes, no;
    if (info->task != QPACK_TASK_RERANK)
        return http_fail(c, r, 400, "invalid_request_error", "model_not_reranker", NULL,
                         "The model '%s' is not a reranker (its container records no task rerank: pack a "
                         "Qwen3-Reranker checkpoint, or another with qpack pack --task rerank)", r->m->id);
    if (serve_rerank_tokens(tok, &yes, &no))
        return http_fail(c, r, 400, "invalid_request_error", "model_not_reranker", NULL,
                         "The model '%s' cannot rerank: its tokenizer has no single tokens \"yes\" and \"no\"",
                         r->m->id);
    struct serve_model_ref model = http_model_ref(r->m);
    struct serve_error e;
    if (serve_parse_rerank(r->body ? r->body : "", r->len, &model, tok, r->m->ctx, &r->rerank, &e))
        return http_send_error(c, r, &e);
    struct http_inputs in = {&r->rerank.ids, r->rerank.ends, r->rerank.n_docs, 1, yes, no};
    return http_submit_inputs(h, c, r, &in, reply_rerank);
}
