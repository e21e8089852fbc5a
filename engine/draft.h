/* draft.h - the drafts of exact lookup decoding (qpack_lookup_step,
 * api/lookup.c). The next tokens are drafted by matching the latest
 * n-gram of the text so far (prompt and output) against earlier text; the
 * model checks the whole draft in one block pass, and the longest prefix it
 * would itself have chosen greedily is kept, plus its own next token. */
#ifndef QP_DRAFT_H
#define QP_DRAFT_H

#include <stdint.h>

#define QP_DRAFT_NGRAM_MAX 4   /* longest n-gram matched */

/* The max tokens that followed the latest earlier occurrence of the
 * longest suffix of hist[0..n) of QP_DRAFT_NGRAM_MAX..1 tokens (one
 * followed by max tokens preferred, unless hist ends in two whole periods
 * of the latest; past the end of hist the copy repeats the period it
 * found), into draft; returns max, or 0 when the suffix has no earlier
 * occurrence. */
uint32_t qp_draft(const uint32_t *hist, uint32_t n, uint32_t max, uint32_t *draft);

#endif
