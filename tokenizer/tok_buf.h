/* tok_buf.h - growable buffers the tokenizer API appends to.
 *
 * Both start zeroed ({0}); the caller owns them and releases them with
 * qp_tok_ids_free / qp_tok_text_free. Appending never shrinks or clears:
 * set .len = 0 to reuse a buffer without freeing it.
 */
#ifndef QP_TOK_BUF_H
#define QP_TOK_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct qp_tok_ids {
    int32_t *v;        /* token ids, v[0 .. len) */
    size_t len, cap;
} qp_tok_ids;

typedef struct qp_tok_text {
    char *s;           /* bytes s[0 .. len), always followed by a NUL (not counted) */
    size_t len, cap;   /* s may hold NUL bytes itself: trust len, not strlen */
} qp_tok_text;

/* Each returns 0, or -1 when memory runs out (the buffer is then unchanged). */
int qp_tok_ids_push(qp_tok_ids *ids, int32_t id);
int qp_tok_ids_reserve(qp_tok_ids *ids, size_t extra);
int qp_tok_text_append(qp_tok_text *t, const void *bytes, size_t n);
int qp_tok_text_appends(qp_tok_text *t, const char *cstr);

void qp_tok_ids_free(qp_tok_ids *ids);
void qp_tok_text_free(qp_tok_text *t);

#endif
