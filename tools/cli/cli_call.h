/* cli_call.h - how kernel calls are made, options every tool that loads a
 * model takes: --call-us N|none (qpack_model_params.call_us) and
 * --schedule host|kernel (qpack_model_params.schedule). */
#ifndef QP_CLI_CALL_H
#define QP_CLI_CALL_H

#include <stdint.h>

#include "qpack.h"

/* What --call-us says, for the tools' --help. */
#define CLI_CALL_US_HELP                                                                          \
    "      --call-us N        how long a kernel call may hold a core, in microseconds (default\n" \
    "                         50): products and attention stop by the clock, per-position\n"   \
    "                         kernels take the positions that fit (one at least); the same\n"   \
    "                         bits at any N; none: bounded by work alone\n"

/* A whole number of microseconds from 10 to 1,000,000 or "none"
 * (QPACK_CALL_US_NONE) into *out; otherwise one line naming --call-us and -1. */
int cli_call_us(const char *prog, const char *arg, uint32_t *out);

/* What --schedule says, for the tools' --help. */
#define CLI_SCHEDULE_HELP                                                                         \
    "      --schedule S       host (default): qrun runs each kernel invocation; kernel: the\n"   \
    "                         kernel runs a step's invocations as chains of BPF work items,\n"  \
    "                         one per thread on its own CPU (the same bits; bpf, resident\n"    \
    "                         weights only; docs/SCHEDULE.md)\n"

/* "host" or "kernel" into *out; otherwise one line naming --schedule and -1. */
int cli_schedule(const char *prog, const char *arg, qpack_schedule *out);

#endif
