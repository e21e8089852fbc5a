/* progress.h - one live status line on stderr, for a terminal only.
 *
 * While a slow phase runs (loading a model, reading a long prompt, qeval's
 * models) the tools redraw one line in place: "\r" + text + erase to the
 * end of the line, at most 10 times a second. Nothing is drawn when stderr
 * is not a terminal or the user asked for --quiet, so logs and pipes never
 * see it. The line is erased before anything else is written to the
 * terminal (progress_clear), and by a signal handler that ends the process
 * (progress_clear_from_signal). */
#ifndef QP_PROGRESS_H
#define QP_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/* prog prefixes the line ("qrun"); enabled: !--quiet. Draws only when
 * stderr is a terminal too. */
void progress_init(const char *prog, bool enabled);

bool progress_enabled(void);

/* Redraws the line with the formatted text, unless the last draw was less
 * than 100 ms ago (force: draw anyway, for a phase's first and last line). */
void progress_show(bool force, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Erases the line when one is drawn. */
void progress_clear(void);

/* The same from a signal handler (async-signal-safe). */
void progress_clear_from_signal(void);

/* "1.2 s", "3 min 5 s": a duration for a line; out holds 32 bytes. */
void progress_duration(char out[32], double seconds);

#endif
