/* error.h - one error message, filled where a failure happens, printed at the edge.
 *
 * Library functions return 0 on success and -1 on failure; on failure they
 * have written one human-readable line (no trailing newline) into a qp_err.
 * Only the command-line front ends print it.
 */
#ifndef QP_ERROR_H
#define QP_ERROR_H

#include <stddef.h>

typedef struct qp_err {
    char msg[512];
} qp_err;

/* Formats the message into err (when err is not NULL) and returns -1,
 * so a failing check reads: `return qp_fail(err, "%s: bad magic", path);` */
int qp_fail(qp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Files are read through mmap: one truncated by someone else while we read
 * it raises SIGBUS. This turns that into the given one-line message on
 * stderr and exit status 1 (the kernel releases every BPF object of the
 * process on exit). For the command-line front ends. */
void qp_exit_on_sigbus(const char *message);

#endif
