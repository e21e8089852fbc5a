/* stdout_policy.h - what every command-line tool (qpack, qrun, qeval,
 * qp-gen-checkpoint) does with its standard output: `--version`, and the
 * rule that output which could not be written is an error, never a success.
 *
 *   int main(...) {
 *       qp_stdout_init();                      first: a closed pipe becomes EPIPE
 *       ... printf(...) ...                    streaming loops: if (qp_stdout_flush()) stop
 *       return qp_stdout_finish("qpack", status);
 *   }
 *
 * A write that fails (ENOSPC on a full disk or /dev/full, EIO, ...) makes
 * the finish print "PROG: writing standard output: REASON" and return 1. A
 * reader that went away (`qrun ... | head`) is no error of ours: the finish
 * returns QP_EXIT_PIPE quietly, the status a shell shows for a tool that a
 * closed pipe stopped, without dying by SIGPIPE midway.
 */
#ifndef QP_STDOUT_POLICY_H
#define QP_STDOUT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define QP_EXIT_PIPE 141 /* 128 + SIGPIPE */

/* Ignores SIGPIPE, so writing into a closed pipe fails with EPIPE. */
void qp_stdout_init(void);

/* Writes p[0..n) to stdout: 0, or -1 once any write to it has failed (the
 * reason is kept for the finish). For long texts, which stdio writes around
 * its buffer: the bytes of a failed printf stay buffered, and the final
 * flush fails again with the same reason, but those of a long write do not. */
int qp_stdout_write(const void *p, size_t n);

/* Flushes stdout: 0, or -1 once any write to it has failed (the reason is
 * kept). For loops that stream output, to stop as soon as it fails. */
int qp_stdout_flush(void);

/* True once a write to stdout has failed. */
bool qp_stdout_failed(void);

/* The end of a program's output to out (stdout, or a test's stream):
 * flushes it and returns status when everything was written or status is
 * not 0 (its error has had its line already). Otherwise: QP_EXIT_PIPE,
 * quietly, when the reader went away (EPIPE); else 1 after "WHO: writing
 * standard output: REASON" on err. write_errno: the errno of a failed write
 * the caller saw, or 0. */
int qp_output_finish(FILE *out, int write_errno, FILE *err, const char *who, int status);

/* The end of main: qp_output_finish for stdout, then closes it. */
int qp_stdout_finish(const char *prog, int status);

/* "0.1.0 (git f58aa24)": the project version and `git describe --always
 * --dirty` of the tree it was built from ("git unknown" from a tarball). */
const char *qp_version(void);

/* `PROG --version`: prints "PROG VERSION (git COMMIT)", returns the exit status. */
int qp_print_version(const char *prog);

#endif
