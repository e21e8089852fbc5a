/* buf.h - one growing byte buffer, always NUL-terminated once written,
 * with a sticky out-of-memory flag: after a failed append every later one
 * does nothing, so a writer appends freely and checks `oom` once at the end. */
#ifndef QP_BUF_H
#define QP_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct qp_buf {
    char *s;                    /* NULL until the first append */
    size_t len, cap;            /* len bytes before the NUL; cap allocated */
    bool oom;                   /* an append failed: the contents are cut short */
};

/* Appends p[0..n); on failure sets oom and leaves the buffer as it was.
 * Returns -1 when oom is set (now or before), else 0. */
int qp_buf_add(struct qp_buf *b, const void *p, size_t n);

/* Appends the C string s. */
int qp_buf_adds(struct qp_buf *b, const char *s);

/* Appends printf's text of fmt (an encoding error sets oom too). */
int qp_buf_printf(struct qp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees the bytes; the buffer is empty again, oom cleared. */
void qp_buf_free(struct qp_buf *b);

#endif
