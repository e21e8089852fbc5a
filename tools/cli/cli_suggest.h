/* cli_suggest.h - one line for a mistyped option or command, with the
 * closest known one ("did you mean --format?"), never a usage dump. */
#ifndef QP_CLI_SUGGEST_H
#define QP_CLI_SUGGEST_H

#include <getopt.h>
#include <stddef.h>

/* The closest of names[0..n) to word by edit distance (a swap of two
 * neighbours counts one), or NULL when none is within a third of the
 * longer of the two (at least 1, at most 3). */
const char *qp_cli_closest(const char *word, const char *const *names, size_t n);

/* The closest long option of longs (ending in a zero entry) to an argument
 * like "--fromat" or "--fromat=int4" ("format"), or NULL. */
const char *qp_cli_closest_option(const char *arg, const struct option *longs);

/* getopt's '?' (opterr = 0): "PROG: unknown option 'ARG': did you mean
 * --NAME? (see PROG --help)" on stderr; short options get no guess. arg is
 * argv[optind - 1]; help names the --help to see ("qrun serve"). */
void qp_cli_unknown_option(const char *prog, const char *help, const char *arg, int optopt,
                           const struct option *longs);

#endif
