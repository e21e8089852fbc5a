/* buf.c - the growing buffer of buf.h. */
#include "buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int qp_buf_add(struct qp_buf *b, const void *p, size_t n)
{
    if (b->oom)
        return -1;
    if (n > SIZE_MAX - b->len - 1) {
        b->oom = true;
        return -1;
    }
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 128;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return -1;
        }
        b->s = s;
        b->cap = cap;
    }
    if (n)
        memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

int qp_buf_adds(struct qp_buf *b, const char *s)
{
    return qp_buf_add(b, s, strlen(s));
}

void qp_buf_free(struct qp_buf *b)
{
    free(b->s);
    *b = (struct qp_buf){0};
}
