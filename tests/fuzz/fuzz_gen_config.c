/* fuzz_gen_config.c - libFuzzer target: gen_config_parse on arbitrary bytes
 * (generation_config.json text, not NUL-terminated); what it accepts must
 * be in the ranges it promises. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gen_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);   /* exact size: no terminator to lean on */
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    struct qwen3_gen_config g;
    qp_err err;
    const uint32_t vocab = 151936;
    if (gen_config_parse(buf, size, "fuzz/generation_config.json", vocab, &g, &err) == 0) {
        if (!(g.temperature >= 0 && g.temperature <= 100) || g.top_k > vocab || !(g.top_p > 0 && g.top_p <= 1) ||
            !(g.min_p >= 0 && g.min_p <= 1) || !(g.repetition_penalty > 0 && g.repetition_penalty <= 100) ||
            g.n_eos > QWEN3_GEN_EOS_MAX)
            abort();
        for (unsigned i = 0; i < g.n_eos; i++)
            if (g.eos[i] < 0 || (uint32_t)g.eos[i] >= vocab)
                abort();
    } else if (!err.msg[0]) {
        abort();
    }
    free(buf);
    return 0;
}
