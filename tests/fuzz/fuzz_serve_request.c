/* fuzz_serve_request.c - libFuzzer target: the bodies qrun serve parses.
 * The first byte, mod 10, picks the endpoint (0 chat, 1 completions, 2
 * /tokenize, 3 /detokenize, 5 /v1/embeddings, with the Qwen3 tokenizer, 6
 * /v1/responses, 7 Anthropic's /v1/messages, 8 its count_tokens, 9
 * /v1/rerank, whose request that parses answers with scores drawn from
 * the input, each result once, best first, top_n of them) or 4 a
 * reply whose <tool_call> blocks are read, whole and in pieces as it would
 * stream; the rest is
 * the body, not NUL-terminated. A refusal must come with a message; a
 * chat request that parses must render through the template; a request
 * with a response_format or a forced tool call feeds its own body to the
 * format's machine, and then draws a reply from the tokens the machine
 * allows (every byte a token, and the structure and stop strings clients
 * send), choices taken from the input, within its max_tokens, through the
 * request's stop strings as the scheduler runs them: the reply never
 * stops without a token to go on, a stop string never cuts it, it ends
 * with the end token whenever max_tokens leaves room for the shortest
 * value, and what it ends with parses (a call reads back as one call).
 * A Responses request that parses answers with the body as its reply's
 * text (its <tool_call> blocks its calls), whole and as the stream's
 * events, every one of which must be JSON. Every body's model is also
 * read as a server of several models reads it first (body_model). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve.h"
#include "stop_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const qpack_tokenizer *tokenizer(void)
{
    static qpack_tokenizer *tok;
    static int tried;
    if (!tried) {
        tried = 1;
        qpack_error err;
        const char *path = getenv("QP_FUZZ_TOKENIZER") ? getenv("QP_FUZZ_TOKENIZER") : QP_FUZZ_TOKENIZER_PATH;
        if (qpack_tokenizer_load(&tok, path, &err)) {
            fprintf(stderr, "fuzz_serve_request: %s\n", err.message);
            abort();
        }
    }
    return tok;
}

/* a reply's calls, whole and streamed in pieces of 7 bytes: the text shown
 * as it streams and the content at the end must add up to no more than
 * the reply */
static void read_reply(const char *text, size_t len)
{
    struct serve_tool_calls whole, streamed;
    if (serve_take_tool_calls(text, len, &whole))
        return;
    struct serve_tool_text t = {0};
    size_t shown = 0;
    for (size_t at = 0; at < len; at += 7) {
        char *out;
        size_t n;
        if (serve_tool_text_push(&t, text + at, len - at < 7 ? len - at : 7, &out, &n)) {
            serve_tool_text_free(&t);
            serve_tool_calls_clear(&whole);
            return;
        }
        shown += n;
        free(out);
    }
    if (!serve_tool_text_finish(&t, &streamed)) {
        if (shown + streamed.content_len > len || whole.content_len > len)
            abort();
        serve_tool_calls_clear(&streamed);
    }
    serve_tool_calls_clear(&whole);
}

/* token 0 the end, then every byte but NUL, then longer ones */
static const char *const longer[] = {"\"}", "}\n", "\",", ", \"", "\": ", "{\"", "}}", "]}", "true", "null", "  ", "\n\n",
                                     "<tool_call>", "</tool_call>", "\n</tool_call>", "<\\/", "\\u", "\\ud83d\\ude00"};
#define N_VOCAB (1 + 255 + sizeof longer / sizeof *longer)

static const struct serve_vocab *held_vocab(const char **toks)
{
    static struct serve_vocab *v;
    static char bytes[256][2];
    if (!v) {
        toks[0] = "<end>";
        for (int c = 1; c < 256; c++) {
            bytes[c][0] = (char)c;
            toks[c] = bytes[c];
        }
        for (size_t i = 0; i < sizeof longer / sizeof *longer; i++)
            toks[256 + i] = longer[i];
        if (!(v = serve_vocab_of(toks, N_VOCAB, 0)))
            abort();
    }
    return v;
}

/* a reply held to r's format, as the scheduler samples and releases it */
static void hold_reply(const struct serve_request *r, bool call, const uint8_t *choice, size_t n_choice)
{
    static const char *toks[N_VOCAB];
    const struct serve_vocab *v = held_vocab(toks);
    uint32_t budget = r->has_max_tokens && r->max_tokens < 64 ? r->max_tokens : 64;
    struct serve_format_state *st = serve_format_start(r->format, v, false);
    struct stop_text stops;
    stop_text_init(&stops, (const char *const *)r->stops.s, (int)r->stops.n);
    if (!st)
        abort();
    serve_format_budget(st, budget);
    char text[64 * 16 + 1];
    size_t len = 0;
    bool ended = false;
    for (uint32_t step = 0; step < budget && !ended; step++) {
        static uint32_t allowed[N_VOCAB];
        uint32_t k = 0;
        for (uint32_t id = 0; id < N_VOCAB; id++)
            if (serve_format_allows(st, (int32_t)id))
                allowed[k++] = id;
        if (!k)
            abort();            /* a reply with no token to go on */
        uint8_t c = n_choice ? choice[step % n_choice] : 0;
        uint32_t id = allowed[0] == 0 && c & 1 ? 0 : allowed[(c >> 1) % k];
        if (serve_format_take(st, (int32_t)id))
            abort();
        if ((ended = id == 0))
            break;
        const char *out;
        size_t n;
        int hit = stop_text_push(&stops, toks[id], strlen(toks[id]), &out, &n);
        if (hit < 0) {
            stop_text_free(&stops);
            serve_format_end(st);
            return;
        }
        if (hit)
            abort();            /* a stop string cut a held reply */
        memcpy(text + len, out, n);
        len += n;
    }
    if (!ended && budget > serve_format_shortest(r->format))
        abort();                /* room to close, and it did not */
    if (ended) {
        const char *out;
        size_t n;
        stop_text_finish(&stops, &out, &n);
        memcpy(text + len, out, n);
        len += n;
        if (call) {
            struct serve_tool_calls calls;
            if (!serve_take_tool_calls(text, len, &calls)) {
                if (calls.n != 1 || calls.content_len)
                    abort();    /* a call that does not read back as one */
                serve_tool_calls_clear(&calls);
            }
        } else {
            cJSON *j = cJSON_ParseWithLength(text, len);
            if (!j)
                abort();        /* a held reply that does not parse */
            cJSON_Delete(j);
        }
    }
    stop_text_free(&stops);
    serve_format_end(st);
}

/* every "data: " line of events is JSON */
static void check_events(char *events)
{
    if (!events)
        return;                 /* out of memory */
    for (char *line = strstr(events, "data: "); line; line = strstr(line + 1, "\ndata: ")) {
        line += line[0] == '\n';
        char *end = strchr(line, '\n');
        cJSON *j = end ? cJSON_ParseWithLength(line + 6, (size_t)(end - line - 6)) : NULL;
        if (!j)
            abort();
        cJSON_Delete(j);
    }
    free(events);
}

/* the body as a Responses reply: the response object, then the stream of
 * it in pieces of 7 bytes, its calls held as serve_http.c holds them */
static void respond(struct serve_resp *resp, const char *text, size_t len, bool cut)
{
    struct serve_tool_calls calls;
    if (serve_take_tool_calls(text, len, &calls))
        return;
    struct serve_reply_text t = {.content = calls.content, .content_len = calls.content_len, .calls = calls.v,
                                 .n_calls = calls.n};
    struct serve_usage u = {3, 4, 1, 0, 0};
    const char *finish = cut ? "length" : "stop";
    char *whole = serve_resp_json(resp, &t, finish, &u);
    cJSON *j = whole ? cJSON_Parse(whole) : NULL;
    if (whole && !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "output")))
        abort();
    cJSON_Delete(j);
    free(whole);
    serve_tool_calls_clear(&calls);
    check_events(serve_resp_stream_start(resp));
    struct serve_tool_text held = {0};
    for (size_t at = 0; at < len; at += 7) {
        char *shown;
        size_t n;
        if (serve_tool_text_push(&held, text + at, len - at < 7 ? len - at : 7, &shown, &n))
            break;
        struct serve_reply_text piece = {.content = shown, .content_len = n};
        check_events(serve_resp_stream_text(resp, &piece));
        free(shown);
    }
    if (!serve_tool_text_finish(&held, &calls)) {
        t = (struct serve_reply_text){.content = calls.content, .content_len = calls.content_len, .calls = calls.v,
                                      .n_calls = calls.n};
        check_events(serve_resp_stream_text(resp, &t));
        serve_tool_calls_clear(&calls);
    }
    check_events(serve_resp_stream_end(resp, finish, &u));
}

/* a rerank request that parses: its prompts within the context, and its
 * answer, with a score per document drawn from the input, JSON that holds
 * top_n results, each document at most once, best first */
static void rerank(const struct serve_rerank_request *q, const uint8_t *data, size_t size)
{
    if (!q->n_docs || !q->top_n || q->top_n > q->n_docs)
        abort();
    float *scores = malloc(q->n_docs * sizeof *scores);
    bool *seen = calloc(q->n_docs, 1);
    if (!scores || !seen)
        abort();
    for (uint32_t i = 0; i < q->n_docs; i++) {
        uint32_t start = i ? q->ends[i - 1] : 0;
        if (q->ends[i] <= start || q->ends[i] - start > 4096)
            abort();
        scores[i] = (float)data[i % size] / 255;
    }
    char *json = serve_rerank_json(scores, q, "M", q->ends[q->n_docs - 1]);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(root, "results"), *r;
    if (!root || cJSON_GetArraySize(results) != (int)q->top_n)
        abort();
    double last = 2;
    cJSON_ArrayForEach(r, results) {
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(r, "index"),
                    *score = cJSON_GetObjectItemCaseSensitive(r, "relevance_score");
        if (!cJSON_IsNumber(index) || index->valueint < 0 || (uint32_t)index->valueint >= q->n_docs ||
            seen[index->valueint] || !cJSON_IsNumber(score) || score->valuedouble > last ||
            (float)score->valuedouble != scores[index->valueint] ||
            q->return_documents != (cJSON_GetObjectItemCaseSensitive(r, "document") != NULL))
            abort();
        seen[index->valueint] = true;
        last = score->valuedouble;
    }
    cJSON_Delete(root);
    free(json);
    free(seen);
    free(scores);
}

/* the model a body names, as a server of several models reads it before
 * the endpoint's parser: a refusal is a 400 with a message, and a chat or
 * completion request that names a model parses, checked strictly against
 * that name, without a 404 */
static void body_model(const char *body, size_t size, unsigned pick)
{
    cJSON *root = NULL;
    const char *name;
    struct serve_error e = {0};
    int rc = serve_body_model(body, size, &root, &name, &e);
    if (rc && (e.http != 400 || !e.message[0]))
        abort();
    if (!rc && name && pick < 2) {
        struct serve_model_ref ref = {name, true, 151936};
        struct serve_request r;
        struct serve_error pe = {0};
        if (!serve_parse_request(pick ? SERVE_COMPLETION : SERVE_CHAT, body, size, &ref, &r, &pe))
            serve_request_free(&r);
        else if (pe.http == 404)
            abort();
    }
    cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned pick = data[0] % 10;
    size--;
    char *body = malloc(size ? size : 1);   /* exact size: no terminator to lean on */
    if (!body)
        return 0;
    memcpy(body, data + 1, size);
    body_model(body, size, pick);
    struct serve_error e = {0};
    struct serve_model_ref model = {"M", false, 151936};
    int rc;
    char *out = NULL;
    if (pick == 4) {
        read_reply(body, size);
        free(body);
        return 0;
    }
    bool anthropic = pick == 7 || pick == 8;
    if (pick < 2 || (pick >= 6 && pick <= 8)) {
        struct serve_request r;
        struct serve_resp *resp = NULL;
        rc = pick == 6   ? serve_parse_responses(body, size, &model, &r, &resp, &e)
             : anthropic ? serve_parse_messages(body, size, pick == 8, &model, &r, &e)
                       : serve_parse_request(pick ? SERVE_COMPLETION : SERVE_CHAT, body, size, &model, &r, &e);
        if (!rc && r.format) {
            /* the body as a reply held to its own format: a byte at a time
             * until the machine refuses one */
            struct serve_format_state *st = serve_format_start(r.format, NULL, false);
            size_t i = 0;
            while (st && i < size && serve_format_feed_text(st, body + i, 1) == 0)
                i++;
            if (st)
                (void)serve_format_complete(st);
            serve_format_end(st);
            hold_reply(&r, (r.tool_required || r.tool_name) && !r.no_tools, data, size + 1);
        }
        if (!rc && pick != 1) {
            char *text;
            size_t len;
            qpack_error err;
            if (qpack_chat_render_tools(r.msgs, r.n_msgs, (const char *const *)r.tools, r.n_tools, r.think, &text,
                                        &len, &err))
                abort();
            free(text);
        }
        if (!rc && resp)
            respond(resp, body, size, data[0] / 10 & 1);
        serve_resp_free(resp);
        if (!rc)
            serve_request_free(&r);
    } else if (pick == 5) {
        struct serve_embed_request q;
        rc = serve_parse_embeddings(body, size, &model, tokenizer(), 151643, 4096, 1024, &q, &e);
        if (!rc) {
            if (!q.n_inputs || q.ends[q.n_inputs - 1] == 0)
                abort();
            serve_embed_request_free(&q);
        }
    } else if (pick == 9) {
        struct serve_rerank_request q;
        rc = serve_parse_rerank(body, size, &model, tokenizer(), 4096, &q, &e);
        if (!rc) {
            rerank(&q, data, size + 1);
            serve_rerank_request_free(&q);
        }
    } else if (pick == 2) {
        rc = serve_tokenize_reply(tokenizer(), body, size, &out, &e);
    } else {
        rc = serve_detokenize_reply(tokenizer(), 151936, body, size, &out, &e);
    }
    /* a previous_response_id not kept is a 404 */
    if (rc && ((e.http != 400 && !(pick == 6 && e.http == 404)) || !e.message[0]))
        abort();
    if (rc) {
        char *json = anthropic ? serve_anthropic_error_json(&e) : serve_error_json(&e);    /* the error body must build */
        if (!json)
            abort();
        free(json);
    }
    free(out);
    free(body);
    return 0;
}
