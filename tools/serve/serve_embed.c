/* serve_embed.c - POST /v1/embeddings (serve.h): OpenAI's request, read
 * into token ids, and its response. The scheduler embeds each input with
 * qpack_embed (serve_sched.c), one input between two steps of the others.
 *
 * input is a string, a list of strings, a list of token ids or a list of
 * such lists, as OpenAI takes it; each input ends with the model's
 * <|endoftext|> unless it does already, as Qwen3-Embedding's model card
 * asks. dimensions keeps the vector's first N values, scaled to unit length
 * again (Qwen3-Embedding is trained for it: MRL); encoding_format base64
 * sends the little-endian float32 values as base64, as the openai client
 * asks for by default. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "serve.h"

#define BAD(e, param, ...) (serve_error_set(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__), -1)

struct ids {
    struct qp_buf v;            /* the inputs' int32_t ids, one after another */
    uint32_t *ends;
    uint32_t n_inputs;
};

static uint32_t n_ids(const struct ids *b)
{
    return (uint32_t)(b->v.len / sizeof(int32_t));
}

static int push_ids(struct ids *b, const int32_t *ids, size_t n, struct serve_error *e)
{
    return qp_buf_add(&b->v, ids, n * sizeof *ids) ? BAD(e, "input", "out of memory") : 0;
}

/* the end of one input: its end token, its length checked */
static int end_input(struct ids *b, uint32_t start, int32_t end_id, uint32_t ctx, struct serve_error *e)
{
    if (n_ids(b) == start)
        return BAD(e, "input", "input[%u] is empty", b->n_inputs);
    int32_t last;
    memcpy(&last, b->v.s + b->v.len - sizeof last, sizeof last);
    if (end_id >= 0 && last != end_id && push_ids(b, &end_id, 1, e))
        return -1;
    uint32_t n = n_ids(b);
    if (n - start > ctx) {
        serve_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "input",
                        "input[%u] has %u tokens: the context holds %u", b->n_inputs, n - start, ctx);
        return -1;
    }
    b->ends[b->n_inputs++] = n;
    return 0;
}

static int text_input(struct ids *b, const char *s, const qpack_tokenizer *tok, struct serve_error *e)
{
    if (!tok)
        return BAD(e, "input", "the model carries no tokenizer: send token ids");
    int32_t *ids;
    size_t n;
    qpack_error err;
    if (qpack_tokenize(tok, s, strlen(s), &ids, &n, &err))
        return BAD(e, "input", "input[%u]: %s", b->n_inputs, err.message);
    int rc = push_ids(b, ids, n, e);
    free(ids);
    return rc;
}

static int id_input(struct ids *b, const cJSON *list, uint32_t vocab, struct serve_error *e)
{
    for (const cJSON *v = list->child; v; v = v->next) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble >= vocab)
            return BAD(e, "input", "input[%u] holds a value that is not a token id (0 to %u)", b->n_inputs, vocab - 1);
        int32_t id = (int32_t)v->valuedouble;
        if (push_ids(b, &id, 1, e))
            return -1;
    }
    return 0;
}

static int read_input(const cJSON *in, const struct serve_model_ref *model, const qpack_tokenizer *tok, int32_t end_id,
                      uint32_t ctx, struct ids *b, struct serve_error *e)
{
    bool one = cJSON_IsString(in) || (cJSON_IsArray(in) && in->child && cJSON_IsNumber(in->child));
    int n = one ? 1 : cJSON_GetArraySize(in);
    if (!(one || cJSON_IsArray(in)) || n < 1 || n > SERVE_MAX_INPUTS)
        return BAD(e, "input", "'input' must be a string, token ids or a list of 1 to %d of either", SERVE_MAX_INPUTS);
    if (!(b->ends = calloc((size_t)n, sizeof *b->ends)))
        return BAD(e, "input", "out of memory");
    for (const cJSON *v = one ? in : in->child; v; v = one ? NULL : v->next) {
        uint32_t start = n_ids(b);
        int rc = cJSON_IsString(v)  ? text_input(b, v->valuestring, tok, e)
                 : cJSON_IsArray(v) ? id_input(b, v, model->vocab, e)
                                    : BAD(e, "input", "input[%u] must be a string or a list of token ids", b->n_inputs);
        if (rc || end_input(b, start, end_id, ctx, e))
            return -1;
    }
    return 0;
}

int serve_parse_embeddings(const char *body, size_t len, const struct serve_model_ref *model,
                           const qpack_tokenizer *tok, int32_t end_id, uint32_t ctx, uint32_t hidden,
                           struct serve_embed_request *req, struct serve_error *e)
{
    *req = (struct serve_embed_request){0};
    cJSON *root;
    if (serve_json_parse(body, len, &root, e))
        return -1;
    struct ids b = {0};
    int rc = cJSON_IsObject(root) ? 0 : BAD(e, NULL, "the request body must be a JSON object");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input"),
                *m = cJSON_GetObjectItemCaseSensitive(root, "model"),
                *dims = cJSON_GetObjectItemCaseSensitive(root, "dimensions"),
                *fmt = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    if (!rc && m && !cJSON_IsNull(m))
        rc = serve_read_model(m, model, e);
    if (!rc && !in)
        rc = BAD(e, "input", "'input' is required");
    if (!rc)
        rc = read_input(in, model, tok, end_id, ctx, &b, e);
    if (!rc && dims && !cJSON_IsNull(dims)) {
        if (!cJSON_IsNumber(dims) || dims->valuedouble != floor(dims->valuedouble) || dims->valuedouble < 1 ||
            dims->valuedouble > hidden)
            rc = BAD(e, "dimensions", "'dimensions' must be an integer from 1 to %u", hidden);
        else
            req->dimensions = (uint32_t)dims->valuedouble;
    }
    if (!rc && fmt && !cJSON_IsNull(fmt)) {
        if (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64")))
            rc = BAD(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        else
            req->base64 = !strcmp(fmt->valuestring, "base64");
    }
    cJSON_Delete(root);
    req->ids = (int32_t *)(void *)b.v.s;    /* malloc'd: aligned for the ids */
    req->ends = b.ends;
    req->n_inputs = b.n_inputs;
    if (rc)
        serve_embed_request_free(req);
    return rc;
}

void serve_embed_request_free(struct serve_embed_request *req)
{
    free(req->ids);
    free(req->ends);
    *req = (struct serve_embed_request){0};
}

/* RFC 4648 base64 of n bytes, NUL-terminated; malloc'd */
static char *base64(const uint8_t *p, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    for (size_t i = 0; out && i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = abc[v >> 18 & 63];
        *o++ = abc[v >> 12 & 63];
        *o++ = i + 1 < n ? abc[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? abc[v & 63] : '=';
    }
    if (out)
        *o = 0;
    return out;
}

/* one vector, its first dims values at unit length again when cut */
static cJSON *vector_json(const float *v, uint32_t dim, uint32_t dims, bool b64)
{
    double norm = 0;
    for (uint32_t i = 0; i < dims; i++)
        norm += (double)v[i] * v[i];
    double scale = dims < dim && norm > 0 ? 1 / sqrt(norm) : 1;
    float *cut = malloc(dims * sizeof *cut);
    if (!cut)
        return NULL;
    for (uint32_t i = 0; i < dims; i++)
        cut[i] = (float)(v[i] * scale);
    cJSON *out = NULL;
    if (b64) {
        uint8_t *le = malloc(dims * 4u);
        for (uint32_t i = 0; le && i < dims; i++) {
            uint32_t u;
            memcpy(&u, &cut[i], 4);
            le[4 * i] = (uint8_t)u, le[4 * i + 1] = (uint8_t)(u >> 8), le[4 * i + 2] = (uint8_t)(u >> 16),
            le[4 * i + 3] = (uint8_t)(u >> 24);
        }
        char *text = le ? base64(le, dims * 4u) : NULL;
        out = text ? cJSON_CreateString(text) : NULL;
        free(text);
        free(le);
    } else {
        out = cJSON_CreateFloatArray(cut, (int)dims);
    }
    free(cut);
    return out;
}

char *serve_embeddings_json(const float *emb, uint32_t n, uint32_t dim, const struct serve_embed_request *req,
                            const char *model, uint32_t prompt_tokens)
{
    uint32_t dims = req->dimensions ? req->dimensions : dim;
    cJSON *root = cJSON_CreateObject(), *data = cJSON_CreateArray();
    bool ok = root && data && cJSON_AddStringToObject(root, "object", "list") &&
              cJSON_AddItemToObject(root, "data", data);
    if (!ok)
        cJSON_Delete(data);
    for (uint32_t i = 0; ok && i < n; i++) {
        cJSON *item = cJSON_CreateObject();
        if (!item || !cJSON_AddItemToArray(data, item)) {     /* data owns it from here */
            cJSON_Delete(item);
            ok = false;
            break;
        }
        cJSON *vec = vector_json(emb + (size_t)i * dim, dim, dims, req->base64);
        ok = vec && cJSON_AddStringToObject(item, "object", "embedding") && cJSON_AddNumberToObject(item, "index", i) &&
             cJSON_AddItemToObject(item, "embedding", vec);
        if (!ok)
            cJSON_Delete(vec);
    }
    cJSON *usage = ok ? cJSON_AddObjectToObject(root, "usage") : NULL;
    ok = ok && cJSON_AddStringToObject(root, "model", model) && usage &&
         cJSON_AddNumberToObject(usage, "prompt_tokens", prompt_tokens) &&
         cJSON_AddNumberToObject(usage, "total_tokens", prompt_tokens);
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}
