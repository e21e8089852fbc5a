#include "error.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int qp_fail(qp_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->code = 0;
    }
    return -1;
}

int qp_fail_code(qp_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return -1;
}

static char sigbus_message[256];

static void on_sigbus(int sig)
{
    (void)sig;
    ssize_t n = write(STDERR_FILENO, sigbus_message, strlen(sigbus_message));
    (void)n;
    _exit(1);
}

void qp_exit_on_sigbus(const char *message)
{
    snprintf(sigbus_message, sizeof sigbus_message, "%s\n", message);
    struct sigaction sa = {.sa_handler = on_sigbus};
    sigaction(SIGBUS, &sa, NULL);
}
