/* qrun_line.h - the interactive chat's input lines.
 *
 * On a terminal the lines are edited with libedit: the arrows, Home/End,
 * Ctrl-R, the history of this chat (kept in memory, never written to disk)
 * and the user's ~/.editrc. Otherwise (a pipe, a file) they are read as
 * they come. The prompt and the echo of what is typed go to stderr, so
 * stdout carries only the replies. */
#ifndef QP_QRUN_LINE_H
#define QP_QRUN_LINE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct qrun_lines;

/* tty: stdin is a terminal. Lines are edited when stderr is one too;
 * otherwise the prompt is written before each line read from a terminal.
 * NULL when memory runs out. */
struct qrun_lines *qrun_lines_open(bool tty);

/* The next line, without its line end, in *line (valid until the next
 * call) and its length; -1 at the end of input, -2 on a read error (errno
 * set). */
ssize_t qrun_lines_read(struct qrun_lines *in, const char *prompt, const char **line);

/* Adds a line to the history the arrows walk (when editing). */
void qrun_lines_remember(struct qrun_lines *in, const char *line);

void qrun_lines_close(struct qrun_lines *in);

#endif
