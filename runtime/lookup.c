/* lookup.c - the drafts of exact lookup decoding (lookup.h). */
#include "lookup.h"

#include <string.h>

/* does the g-gram ending at hist[end) equal the one ending at hist[n)? */
static int same_ngram(const uint32_t *hist, uint32_t end, uint32_t n, uint32_t g)
{
    return memcmp(hist + end - g, hist + n - g, g * sizeof *hist) == 0;
}

uint32_t qp_lookup_draft(const uint32_t *hist, uint32_t n, uint32_t max, uint32_t *draft)
{
    for (uint32_t g = QP_LOOKUP_NGRAM_MAX; g >= 1; g--) {
        if (g >= n)
            continue;
        /* the latest earlier occurrence followed by max tokens, or else
         * the earliest (the longest continuation): in a loop of period
         * P, the occurrences P, 2P, ... back all continue alike */
        uint32_t found = 0;
        for (uint32_t end = n - 1; end >= g; end--) {
            if (!same_ngram(hist, end, n, g))
                continue;
            found = end;
            if (n - end >= max)
                break;
        }
        if (found) {
            uint32_t k = 0;
            for (; k < max && found + k < n; k++)
                draft[k] = hist[found + k];
            return k;
        }
    }
    return 0;
}
