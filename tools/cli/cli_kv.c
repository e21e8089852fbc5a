/* cli_kv.c - --kv-cache (cli_kv.h). */
#include "cli_kv.h"

#include <stdio.h>
#include <string.h>

int cli_kv_cache(const char *prog, const char *arg, qpack_kv_cache *out)
{
    if (!strcmp(arg, "int16"))
        *out = QPACK_KV_INT16;
    else if (!strcmp(arg, "int8"))
        *out = QPACK_KV_INT8;
    else {
        fprintf(stderr, "%s: --kv-cache takes int16 or int8, got '%s'\n", prog, arg);
        return -1;
    }
    return 0;
}
