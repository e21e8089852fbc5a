/* fuzz_gguf.c - libFuzzer target: gguf_parse on arbitrary bytes (one whole
 * GGUF part in memory); what it accepts goes on as qpack reads it: the
 * config, the tokenizer rebuilt as tokenizer.json, the chat template, and
 * every tensor's first and last block dequantised. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        (void)gguf_tokenizer_json(&g, &json, &len, &err);
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
