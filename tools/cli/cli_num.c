/* cli_num.c - numbers from the command line (cli_num.h). */
#include "cli_num.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int cli_uint(const char *prog, const char *name, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = arg[0] >= '0' && arg[0] <= '9' ? strtoull(arg, &end, 10) : 0;
    if (arg[0] < '0' || arg[0] > '9' || *end || errno || v < min || v > max) {
        fprintf(stderr, "%s: %s needs a whole number from %" PRIu64 " to %" PRIu64 ", got '%s'\n", prog, name, min,
                max, arg);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_real(const char *prog, const char *name, const char *arg, double min, bool min_open, double max,
             double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    bool blank = arg[0] == ' ' || arg[0] == '\t' || arg[0] == '\n';
    if (end == arg || blank || *end || errno || !isfinite(v) || v < min || (min_open && v == min) || v > max) {
        fprintf(stderr, "%s: %s needs a number in %c%g, %g], got '%s'\n", prog, name, min_open ? '(' : '[', min,
                max, arg);
        return -1;
    }
    *out = v;
    return 0;
}
