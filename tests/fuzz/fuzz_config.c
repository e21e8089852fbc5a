/* fuzz_config.c - libFuzzer target: hf_config_parse on arbitrary bytes
 * (config.json text, not NUL-terminated). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);   /* exact size: no terminator to lean on */
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    struct qwen3_config cfg;
    qp_err err;
    if (hf_config_parse(buf, size, "fuzz/config.json", &cfg, &err) == 0)
        (void)hf_config_validate(&cfg, "fuzz/config.json", &err);
    free(buf);
    return 0;
}
