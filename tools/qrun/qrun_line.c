/* qrun_line.c - the interactive chat's input lines (qrun_line.h). */
#include "qrun_line.h"

#include <errno.h>
#include <histedit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HISTORY_LINES 1000

struct qrun_lines {
    EditLine *el;        /* NULL: plain lines from stdin */
    bool tty;            /* stdin is a terminal: a plain line gets its prompt too */
    History *hist;
    HistEvent ev;
    const char *prompt;  /* what el's prompt function shows */
    char *buf;           /* the line handed out */
    size_t cap;
};

static char *show_prompt(EditLine *el)
{
    struct qrun_lines *in;
    el_get(el, EL_CLIENTDATA, &in);
    return (char *)in->prompt;
}

struct qrun_lines *qrun_lines_open(bool tty)
{
    struct qrun_lines *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    /* the editing is drawn on stderr: both must be the terminal */
    in->tty = tty;
    if (!tty || !isatty(STDERR_FILENO))
        return in;
    in->prompt = "";
    if (!(in->hist = history_init()) || !(in->el = el_init("qrun", stdin, stderr, stderr))) {
        qrun_lines_close(in);
        return NULL;
    }
    history(in->hist, &in->ev, H_SETSIZE, HISTORY_LINES);
    history(in->hist, &in->ev, H_SETUNIQUE, 1);
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_PROMPT, show_prompt);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_HIST, history, in->hist);
    /* the terminal is put back as it was when a signal ends qrun at the prompt */
    el_set(in->el, EL_SIGNAL, 1);
    el_source(in->el, NULL);
    return in;
}

/* Keeps line[0..n) as the line handed out, without its line end. */
static ssize_t hand_out(struct qrun_lines *in, const char *line, size_t n, const char **out)
{
    if (n && line[n - 1] == '\n')
        n--;
    if (n && line[n - 1] == '\r')
        n--;
    if (line == in->buf) {   /* getline's own buffer */
        in->buf[n] = 0;
        *out = in->buf;
        return (ssize_t)n;
    }
    if (n + 1 > in->cap) {
        char *b = realloc(in->buf, n + 1);
        if (!b)
            return errno = ENOMEM, -2;
        in->buf = b;
        in->cap = n + 1;
    }
    memcpy(in->buf, line, n);
    in->buf[n] = 0;
    *out = in->buf;
    return (ssize_t)n;
}

ssize_t qrun_lines_read(struct qrun_lines *in, const char *prompt, const char **line)
{
    if (in->el) {
        in->prompt = prompt;
        int n = 0;
        errno = 0;
        const char *l = el_gets(in->el, &n);
        if (!l || n <= 0)
            return n < 0 || (errno && errno != EINTR) ? -2 : -1;
        return hand_out(in, l, (size_t)n, line);
    }
    if (in->tty) {
        fputs(prompt, stderr);
        fflush(stderr);
    }
    errno = 0;
    ssize_t n = getline(&in->buf, &in->cap, stdin);
    if (n < 0)
        return ferror(stdin) && errno ? -2 : -1;
    return hand_out(in, in->buf, (size_t)n, line);
}

void qrun_lines_remember(struct qrun_lines *in, const char *line)
{
    if (in->hist && *line)
        history(in->hist, &in->ev, H_ENTER, line);
}

void qrun_lines_close(struct qrun_lines *in)
{
    if (!in)
        return;
    if (in->el)
        el_end(in->el);
    if (in->hist)
        history_end(in->hist);
    free(in->buf);
    free(in);
}
