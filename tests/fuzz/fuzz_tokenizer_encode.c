/* fuzz_tokenizer_encode.c - libFuzzer target: the official Qwen3 tokenizer
 * (loaded once) on arbitrary text and ids.
 *
 * The tokenizer is $QP_FUZZ_TOKENIZER, else the QP_FUZZ_TOKENIZER_PATH the
 * build compiled in (assets/qwen3-tokenizer/tokenizer.json).
 *
 * The first input byte picks what the rest is:
 *   even: text. qp_tok_encode; on success decode the ids back (whole and
 *         streamed) and check both agree, and for ASCII text (which NFC
 *         leaves alone) that the round trip gives the text back exactly.
 *   odd:  little-endian int32 ids (any values, also invalid ones), decoded
 *         whole and streamed with flags from the first byte; when the whole
 *         decode succeeds the streamed text must equal it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#ifndef QP_FUZZ_TOKENIZER_PATH
#define QP_FUZZ_TOKENIZER_PATH "assets/qwen3-tokenizer/tokenizer.json"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static qp_tok *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *path = getenv("QP_FUZZ_TOKENIZER");
    if (!path || !*path)
        path = QP_FUZZ_TOKENIZER_PATH;
    qp_err err;
    if (qp_tok_load_file(&g_tok, path, &err)) {
        fprintf(stderr, "fuzz_tokenizer_encode: %s\n", err.msg);
        abort();
    }
    return 0;
}

/* Decodes ids whole and streamed; returns whether the whole decode worked
 * (then whole holds its text) and checks the stream matches it. */
static int decode_both(const int32_t *ids, size_t n, int flags, qp_tok_text *whole)
{
    qp_err err;
    int ok = qp_tok_decode(g_tok, ids, n, flags, whole, &err) == 0;
    qp_tok_stream s;
    qp_tok_text streamed = {0};
    qp_tok_stream_init(&s, g_tok, flags);
    int sok = 1;
    for (size_t i = 0; i < n && sok; i++)
        sok = qp_tok_stream_push(&s, ids[i], &streamed, &err) == 0;
    if (sok)
        sok = qp_tok_stream_finish(&s, &streamed, &err) == 0;
    if (ok != sok) {
        fprintf(stderr, "decode %s but stream %s\n", ok ? "succeeded" : "failed",
                sok ? "succeeded" : "failed");
        abort();
    }
    if (ok && (streamed.len != whole->len ||
               (whole->len && memcmp(streamed.s, whole->s, whole->len)))) {
        fprintf(stderr, "stream decode differs from decode (%zu vs %zu bytes)\n",
                streamed.len, whole->len);
        abort();
    }
    qp_tok_text_free(&streamed);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tok)
        LLVMFuzzerInitialize(NULL, NULL);
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++, size--;
    qp_err err;
    if (!(mode & 1)) {
        char *text = malloc(size ? size : 1);     /* exact size: not NUL-terminated */
        if (!text)
            return 0;
        if (size)
            memcpy(text, data, size);
        qp_tok_ids ids = {0};
        if (qp_tok_encode(g_tok, text, size, &ids, &err) == 0) {
            int32_t vs = qp_tok_vocab_size(g_tok);
            for (size_t i = 0; i < ids.len; i++)
                if (ids.v[i] < 0 || ids.v[i] >= vs) {
                    fprintf(stderr, "encode gave id %d outside [0, %d)\n", ids.v[i], vs);
                    abort();
                }
            qp_tok_text back = {0};
            if (!decode_both(ids.v, ids.len, 0, &back)) {
                fprintf(stderr, "ids from encode do not decode\n");
                abort();
            }
            int ascii = 1;
            for (size_t i = 0; i < size && ascii; i++)
                ascii = data[i] < 0x80;
            if (ascii && (back.len != size || (size && memcmp(back.s, data, size)))) {
                fprintf(stderr, "ASCII round trip differs (%zu -> %zu ids -> %zu bytes)\n",
                        size, ids.len, back.len);
                abort();
            }
            qp_tok_text_free(&back);
        }
        qp_tok_ids_free(&ids);
        free(text);
    } else {
        size_t n = size / 4;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids)
            return 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
                         (uint32_t)data[4 * i + 2] << 16 | (uint32_t)data[4 * i + 3] << 24;
            /* Mostly ids near the vocabulary, sometimes anything. */
            ids[i] = (mode & 2) ? (int32_t)u : (int32_t)(u % 151700u) - 2;
        }
        qp_tok_text out = {0};
        decode_both(ids, n, (mode & 4) ? QP_TOK_SKIP_SPECIAL : 0, &out);
        qp_tok_text_free(&out);
        free(ids);
    }
    return 0;
}
