/* progress.c - one live status line on a terminal's stderr (progress.h). */
#include "progress.h"
#include "clock.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define REDRAW_MS 100.0         /* a human reads no faster; a redraw costs a write */

static const char *line_prog = "";
static bool on;
static volatile sig_atomic_t drawn;    /* a line is on the screen */
static double last_ms = -1e9;

void progress_init(const char *prog, bool enabled)
{
    line_prog = prog;
    on = enabled && isatty(STDERR_FILENO);
}

bool progress_enabled(void)
{
    return on;
}

void progress_show(bool force, const char *fmt, ...)
{
    if (!on || (!force && qp_now_ms() - last_ms < REDRAW_MS))
        return;
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r%s: %s\033[K", line_prog, text);
    fflush(stderr);
    drawn = 1;
    last_ms = qp_now_ms();
}

void progress_clear(void)
{
    if (!drawn)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    drawn = 0;
    last_ms = -1e9;
}

void progress_clear_from_signal(void)
{
    if (drawn) {
        ssize_t w = write(STDERR_FILENO, "\r\033[K", 4);
        (void)w;
        drawn = 0;
    }
}

void progress_duration(char out[32], double s)
{
    if (s < 60)
        snprintf(out, 32, "%.1f s", s);
    else if (s < 3600)
        snprintf(out, 32, "%d min %d s", (int)(s / 60), (int)s % 60);
    else
        snprintf(out, 32, "%d h %d min", (int)(s / 3600), (int)(s / 60) % 60);
}
