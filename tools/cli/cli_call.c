/* cli_call.c - --call-us (cli_call.h). */
#include "cli_call.h"

#include <stdio.h>
#include <string.h>

#include "cli_num.h"

/* below 10 us a call would spend more on entering the kernel than on work */
#define CALL_US_MIN 10
#define CALL_US_MAX 1000000

int cli_call_us(const char *prog, const char *arg, uint32_t *out)
{
    if (!strcmp(arg, "none")) {
        *out = QPACK_CALL_US_NONE;
        return 0;
    }
    uint64_t v;
    if (cli_uint(prog, "--call-us", arg, CALL_US_MIN, CALL_US_MAX, &v))
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int cli_schedule(const char *prog, const char *arg, qpack_schedule *out)
{
    if (!strcmp(arg, "host"))
        *out = QPACK_SCHEDULE_HOST;
    else if (!strcmp(arg, "kernel"))
        *out = QPACK_SCHEDULE_KERNEL;
    else {
        fprintf(stderr, "%s: --schedule takes host or kernel, got '%s'\n", prog, arg);
        return -1;
    }
    return 0;
}
