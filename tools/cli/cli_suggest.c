/* cli_suggest.c - the closest known option or command to a mistyped one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_suggest.h"

#define WORD_MAX 64             /* longer words are not guessed at */

/* optimal string alignment distance: insertions, deletions, substitutions
 * and swaps of neighbours each cost one */
static size_t distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > WORD_MAX || m > WORD_MAX)
        return (size_t)-1;
    size_t d[WORD_MAX + 1][WORD_MAX + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

const char *qp_cli_closest(const char *word, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = distance(word, names[i]);
        size_t longer = strlen(word) > strlen(names[i]) ? strlen(word) : strlen(names[i]);
        size_t allowed = longer / 3 < 1 ? 1 : longer / 3 > 3 ? 3 : longer / 3;
        if (d <= allowed && d < best_d)
            best = names[i], best_d = d;
    }
    return best;
}

const char *qp_cli_closest_option(const char *arg, const struct option *longs)
{
    if (strncmp(arg, "--", 2))
        return NULL;
    char word[WORD_MAX + 1];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
    size_t n = 0;
    while (longs[n].name)
        n++;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return NULL;
    for (size_t i = 0; i < n; i++)
        names[i] = longs[i].name;
    const char *best = qp_cli_closest(word, names, n);
    free(names);
    return best;
}

void qp_cli_unknown_option(const char *prog, const char *help, const char *arg, int optopt,
                           const struct option *longs)
{
    if (optopt) {
        fprintf(stderr, "%s: unknown option '-%c' (see %s --help)\n", prog, optopt, help);
        return;
    }
    const char *guess = qp_cli_closest_option(arg, longs);
    if (guess)
        fprintf(stderr, "%s: unknown option '%s': did you mean --%s? (see %s --help)\n", prog, arg, guess, help);
    else
        fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", prog, arg, help);
}
