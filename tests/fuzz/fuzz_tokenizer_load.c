/* fuzz_tokenizer_load.c - libFuzzer target: qp_tok_load_buffer on arbitrary
 * bytes; when a tokenizer loads, a short encode/decode round trip. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);   /* exact size: not NUL-terminated */
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    qp_tok *tok = NULL;
    qp_err err;
    if (qp_tok_load_buffer(&tok, buf, size, "fuzz/tokenizer.json", &err) == 0) {
        static const char text[] = "Hello, world! <|im_start|>user\n  12345 \xc3\xa9t\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd\n";
        qp_tok_ids ids = {0};
        qp_tok_text out = {0};
        if (qp_tok_encode(tok, text, sizeof text - 1, &ids, &err) == 0)
            (void)qp_tok_decode(tok, ids.v, ids.len, 0, &out, &err);
        int32_t n = qp_tok_vocab_size(tok);
        for (int32_t id = -1; id <= n && id < 600; id++) {
            size_t len = 0;
            const char *s = qp_tok_token_string(tok, id, &len);
            if (s)
                (void)qp_tok_token_id(tok, s, len);
            (void)qp_tok_is_special(tok, id);
            (void)qp_tok_is_added(tok, id);
        }
        qp_tok_ids_free(&ids);
        qp_tok_text_free(&out);
        qp_tok_free(tok);
    }
    free(buf);
    return 0;
}
