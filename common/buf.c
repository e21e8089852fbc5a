/* buf.c - the growing buffer of buf.h. */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* room for n more bytes and the NUL; -1 with oom set when there is none */
static int reserve(struct qp_buf *b, size_t n)
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
    return 0;
}

int qp_buf_add(struct qp_buf *b, const void *p, size_t n)
{
    if (reserve(b, n))
        return -1;
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

int qp_buf_printf(struct qp_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return -1;
    }
    if (reserve(b, (size_t)n))
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void qp_buf_free(struct qp_buf *b)
{
    free(b->s);
    *b = (struct qp_buf){0};
}
