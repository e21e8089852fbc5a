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
    int code;           /* QP_E_*, or 0 when the failure was not classified */
} qp_err;

/* What kind of failure, where the failing code knows better than its
 * caller (the public API's qpack_status, include/qpack.h, mirrors these). */
enum qp_err_code {
    QP_E_ARGUMENT = 1, QP_E_IO = 2, QP_E_FORMAT = 3, QP_E_PRIVILEGE = 4, QP_E_MEMORY = 5,
    QP_E_CONTEXT = 6, QP_E_RANGE = 7, QP_E_BUSY = 8, QP_E_INTERRUPTED = 9, QP_E_KERNEL = 10,
    QP_E_INTERNAL = 11,
};

/* Formats the message into err (when err is not NULL) and returns -1,
 * so a failing check reads: `return qp_fail(err, "%s: bad magic", path);` */
int qp_fail(qp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same with a code (enum qp_err_code). */
int qp_fail_code(qp_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Files are read through mmap: one truncated by someone else while we read
 * it raises SIGBUS. This turns that into the given one-line message on
 * stderr and exit status 1 (the kernel releases every BPF object of the
 * process on exit). For the command-line front ends. */
void qp_exit_on_sigbus(const char *message);

#endif
