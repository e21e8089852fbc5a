/* cli_num.h - numbers from the command line, checked whole: each mistake
 * is one line naming the option, its range and what was given. */
#ifndef QP_CLI_NUM_H
#define QP_CLI_NUM_H

#include <stdbool.h>
#include <stdint.h>

/* A whole decimal number in [min, max]; no sign, no blanks, nothing after
 * it. On a mistake prints "PROG: NAME needs a whole number from MIN to MAX,
 * got 'ARG'" and returns -1. */
int cli_uint(const char *prog, const char *name, const char *arg, uint64_t min, uint64_t max, uint64_t *out);

/* A finite decimal number in [min, max], or (min, max] when min_open. */
int cli_real(const char *prog, const char *name, const char *arg, double min, bool min_open, double max,
             double *out);

#endif
