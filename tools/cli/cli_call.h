/* cli_call.h - the kernel call bound every tool that loads a model takes:
 * --call-us N|none (qpack_model_params.call_us). */
#ifndef QP_CLI_CALL_H
#define QP_CLI_CALL_H

#include <stdint.h>

#include "qpack.h"

/* What --call-us says, for the tools' --help. */
#define CLI_CALL_US_HELP                                                                          \
    "      --call-us N        the longest a matrix product or attention call holds a core, in\n" \
    "                         microseconds (default 50; a prompt's per-position kernels are\n"  \
    "                         bounded by their work alone); the same bits at any N; none:\n"   \
    "                         bounded by work alone\n"

/* A whole number of microseconds from 10 to 1,000,000 or "none"
 * (QPACK_CALL_US_NONE) into *out; otherwise one line naming --call-us and -1. */
int cli_call_us(const char *prog, const char *arg, uint32_t *out);

#endif
