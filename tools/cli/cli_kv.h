/* cli_kv.h - the KV cache option every tool that loads a model takes:
 * --kv-cache int16|int8. */
#ifndef QP_CLI_KV_H
#define QP_CLI_KV_H

#include "qpack.h"

/* What --kv-cache says, for the tools' --help. */
#define CLI_KV_CACHE_HELP                                                                         \
    "      --kv-cache T       int16 (default: exact-first, 112 KiB a position on Qwen3-0.6B) or\n" \
    "                         int8 (8-bit codes with a shift per head vector: 59.5 KiB, and\n"    \
    "                         faster attention at long contexts, a small accuracy cost)\n"

/* "int16" or "int8" into *out; otherwise "PROG: --kv-cache takes int16 or
 * int8, got 'ARG'" and -1. */
int cli_kv_cache(const char *prog, const char *arg, qpack_kv_cache *out);

#endif
