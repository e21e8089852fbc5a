#include "tok_buf.h"
#include "buf.h"
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

int tok_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) {
        if (cap2 > SIZE_MAX / 2 / elem)
            return -1;
        cap2 *= 2;
    }
    void *p2 = realloc(*p, cap2 * elem);
    if (!p2)
        return -1;
    *p = p2;
    *cap = cap2;
    return 0;
}

int qp_tok_ids_reserve(qp_tok_ids *ids, size_t extra)
{
    if (extra > SIZE_MAX - ids->len)
        return -1;
    return tok_grow((void **)&ids->v, &ids->cap, ids->len + extra, sizeof(int32_t));
}

int qp_tok_ids_push(qp_tok_ids *ids, int32_t id)
{
    if (ids->len == ids->cap && qp_tok_ids_reserve(ids, 1))
        return -1;
    ids->v[ids->len++] = id;
    return 0;
}

/* common/buf's append, without its sticky flag: a failure here leaves the
 * text as it was and the next append may succeed, as tok_buf.h says */
int qp_tok_text_append(qp_tok_text *t, const void *bytes, size_t n)
{
    struct qp_buf b = {.s = t->s, .len = t->len, .cap = t->cap};
    if (qp_buf_add(&b, bytes, n))
        return -1;
    t->s = b.s;
    t->len = b.len;
    t->cap = b.cap;
    return 0;
}

int qp_tok_text_appends(qp_tok_text *t, const char *cstr)
{
    return qp_tok_text_append(t, cstr, strlen(cstr));
}

void qp_tok_ids_free(qp_tok_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->len = ids->cap = 0;
}

void qp_tok_text_free(qp_tok_text *t)
{
    free(t->s);
    t->s = NULL;
    t->len = t->cap = 0;
}
