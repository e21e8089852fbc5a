/* stdout_policy.c - standard output of the command-line tools (see stdout_policy.h). */
#include "stdout_policy.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>

#include "qp_git_version.h" /* generated at build time: QP_GIT_COMMIT */

static int stdout_errno; /* errno of the first failed write to stdout, 0 while none failed */

void qp_stdout_init(void)
{
    signal(SIGPIPE, SIG_IGN);
}

/* Keeps the reason of the first failure: errno right after the call that
 * failed, or EIO for an error an earlier, unchecked write left. */
static int check(bool failed)
{
    if (!failed && !ferror(stdout))
        return 0;
    if (!stdout_errno)
        stdout_errno = failed && errno ? errno : EIO;
    return -1;
}

int qp_stdout_write(const void *p, size_t n)
{
    errno = 0;
    return check(fwrite(p, 1, n, stdout) != n);
}

int qp_stdout_flush(void)
{
    errno = 0;
    return check(fflush(stdout) != 0);
}

bool qp_stdout_failed(void)
{
    return stdout_errno || ferror(stdout);
}

/* A pipe or socket whose reader has gone: its write end polls POLLERR. */
static bool reader_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

int qp_output_finish(FILE *out, int write_errno, FILE *err, const char *who, int status)
{
    errno = 0;
    bool flush_failed = fflush(out) != 0;
    int flush_errno = errno;
    if (!flush_failed && !ferror(out))
        return status;
    if (status)
        return status;
    int e = write_errno          ? write_errno
            : flush_failed && flush_errno ? flush_errno
            : reader_gone(fileno(out)) ? EPIPE
                                     : EIO;
    if (e == EPIPE)
        return QP_EXIT_PIPE;
    fprintf(err, "%s: writing standard output: %s\n", who, strerror(e));
    return 1;
}

int qp_stdout_finish(const char *prog, int status)
{
    status = qp_output_finish(stdout, stdout_errno, stderr, prog, status);
    errno = 0;
    if (fclose(stdout) != 0 && !status) {
        fprintf(stderr, "%s: writing standard output: %s\n", prog, strerror(errno ? errno : EIO));
        status = 1;
    }
    return status;
}

const char *qp_version(void)
{
    return QP_VERSION " (git " QP_GIT_COMMIT ")";
}

int qp_print_version(const char *prog)
{
    printf("%s %s\n", prog, qp_version());
    return qp_stdout_finish(prog, 0);
}
