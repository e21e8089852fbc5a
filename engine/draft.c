/* draft.c - the drafts of exact lookup decoding (draft.h). */
#include "draft.h"

#include <stdbool.h>
#include <string.h>

/* does the g-gram ending at hist[end) equal the one ending at hist[n)? */
static int same_ngram(const uint32_t *hist, uint32_t end, uint32_t n, uint32_t g)
{
    return memcmp(hist + end - g, hist + n - g, g * sizeof *hist) == 0;
}

uint32_t qp_draft(const uint32_t *hist, uint32_t n, uint32_t max, uint32_t *draft)
{
    for (uint32_t g = QP_DRAFT_NGRAM_MAX; g >= 1; g--) {
        if (g >= n)
            continue;
        /* the latest earlier occurrence followed by max tokens, else the
         * latest of all */
        uint32_t latest = 0, full = 0;
        for (uint32_t end = n - 1; end >= g && !full; end--) {
            if (!same_ngram(hist, end, n, g))
                continue;
            latest = latest ? latest : end;
            full = n - end >= max ? end : 0;
        }
        if (!latest)
            continue;
        /* a text that ends in two whole periods of the latest match (a
         * run, a loop) goes on with that period: an older occurrence with
         * a longer continuation is from before the loop set in */
        uint32_t period = n - latest;
        bool looping = 2 * period <= n && memcmp(hist + n - 2 * period, hist + n - period, period * sizeof *hist) == 0;
        uint32_t found = full && !looping ? full : latest;
        /* a continuation that runs past the text goes on into the draft
         * itself (an overlapping copy, as in LZ77): a loop of period
         * n - found is drafted for all max tokens */
        for (uint32_t k = 0; k < max; k++)
            draft[k] = found + k < n ? hist[found + k] : draft[found + k - n];
        return max;
    }
    return 0;
}
