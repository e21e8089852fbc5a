/* fuzz_gguf.c - libFuzzer target: gguf_parse on arbitrary bytes (one whole
 * GGUF part in memory); what it accepts goes on as qpack reads it: the
 * config, the tokenizer rebuilt as tokenizer.json and loaded as qrun loads
 * it, the chat template, and every tensor's first and last block
 * dequantised. A loaded tokenizer must give every GGUF row its own id (the
 * row's text at that id) and encode to ids that decode. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_model.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { TOKEN_UNUSED = 5 };

/* every row below 4096 but the UNUSED ones holds its own text */
static void check_rows(const struct gguf *g, const qp_tok *tok)
{
    const struct gguf_kv *tokens = gguf_find_kv(g, "tokenizer.ggml.tokens");
    const struct gguf_kv *types = gguf_find_kv(g, "tokenizer.ggml.token_type");
    uint64_t at = 0;
    for (uint64_t i = 0; i < tokens->count && i < 4096; i++) {
        const char *s, *got;
        size_t n, len = 0;
        gguf_next_str(tokens, &at, &s, &n);
        if (gguf_array_int(types, i) == TOKEN_UNUSED)
            continue;
        got = qp_tok_token_string(tok, (int32_t)i, &len);
        if (!got || len != n || memcmp(got, s, n))
            abort(); /* a row renumbered */
    }
}

static void run_tokenizer(const struct gguf *g, const char *json, size_t len)
{
    qp_tok *tok = NULL;
    qp_err err;
    if (qp_tok_load_buffer(&tok, json, len, "fuzz.gguf", &err))
        return;
    check_rows(g, tok);
    static const char text[] = "Hello, world! <|im_start|>user\n  12345 \xc3\xa9t\xc3\xa9 <|endoftext|><think>";
    qp_tok_ids ids = {0};
    qp_tok_text out = {0};
    if (qp_tok_encode(tok, text, sizeof text - 1, &ids, &err) == 0) {
        for (size_t i = 0; i < ids.len; i++)
            if (ids.v[i] < 0 || ids.v[i] >= qp_tok_vocab_size(tok))
                abort();
        if (qp_tok_decode(tok, ids.v, ids.len, 0, &out, &err))
            abort(); /* ids the tokenizer gave must decode */
    }
    qp_tok_ids_free(&ids);
    qp_tok_text_free(&out);
    qp_tok_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);   /* exact size: overreads are caught */
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    struct gguf g = {.name = strdup("fuzz.gguf")};
    qp_err err;
    if (g.name && gguf_parse(&g, buf, size, g.name, 0, &err) == 0) {
        struct qwen3_config c;
        char *json = NULL, *tpl = NULL;
        size_t len;
        (void)gguf_config(&g, &c, &err);
        if (gguf_tokenizer_json(&g, &json, &len, &err) == 0)
            run_tokenizer(&g, json, len);
        (void)gguf_chat_template(&g, &tpl, &err);
        free(json);
        free(tpl);
        float out[256];
        volatile float sink = 0;
        for (uint32_t i = 0; i < g.n_tensors; i++) {
            const struct gguf_tensor *t = &g.tensors[i];
            uint32_t blk = gguf_type_block(t->type), bytes = gguf_type_block_bytes(t->type);
            gguf_dequantize(t->type, t->data, blk, out);
            sink += out[0];
            gguf_dequantize(t->type, t->data + t->nbytes - bytes, blk, out);
            sink += out[blk - 1];
        }
        (void)sink;
    }
    gguf_close(&g);
    free(buf);
    return 0;
}
