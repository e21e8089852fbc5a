/* stop_text.h - `--stop STRING`: generation ends where the text first
 * contains one of the stop strings, and the stop string is not printed
 * (llama.cpp's "stop" of its server: the completion excludes it).
 *
 * The text streams out as it comes, except a tail that could still grow
 * into a stop string: that is held until the next piece decides it. A stop
 * string starts with a UTF-8 lead byte, so what is held back always starts
 * on a character boundary and what is printed is whole characters. */
#ifndef QP_STOP_TEXT_H
#define QP_STOP_TEXT_H

#include <stdbool.h>
#include <stddef.h>

struct stop_text {
    const char *const *stops;   /* n non-empty strings, borrowed */
    int n;
    char *buf;                  /* the text not printed yet */
    size_t len, cap;
    size_t handed;              /* bytes at buf's start handed out by the last call */
    bool stopped;
    int hit;                    /* once stopped: the stop string that ended the text */
};

void stop_text_init(struct stop_text *st, const char *const *stops, int n);
void stop_text_free(struct stop_text *st);

/* Adds text[0..len). *out, *out_len: what may be printed now (valid until
 * the next call). Returns true when a stop string is complete: *out is
 * then the text before it, and everything after is dropped. -1 when
 * memory runs out. */
int stop_text_push(struct stop_text *st, const char *text, size_t len, const char **out, size_t *out_len);

/* The end of a reply without a stop: the held text, to print; the next
 * reply starts empty. */
void stop_text_finish(struct stop_text *st, const char **out, size_t *out_len);

#endif
