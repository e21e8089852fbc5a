/* think_text.h - a Qwen3 reply's thinking told apart from its answer.
 *
 * With thinking on, Qwen3 replies "<think>\nREASONING\n</think>\n\nANSWER".
 * The splitter takes the reply's text as it streams and hands out each run
 * of it as thinking or answer, without the tags and the line breaks around
 * them: the text up to the first non-blank byte decides (a reply that does
 * not open with <think> is all answer, its leading blanks kept), and
 * "</think>" ends the thinking.
 * What could still be the start of a tag is held until the next piece
 * decides it, as the stop strings do; a tag is ASCII, so what is handed out
 * stays whole UTF-8 characters. */
#ifndef QP_THINK_TEXT_H
#define QP_THINK_TEXT_H

#include <stdbool.h>
#include <stddef.h>

enum think_part { THINK_REASONING, THINK_ANSWER };

/* Receives one run of text of one part; non-zero stops the push. */
typedef int think_out_fn(void *arg, enum think_part part, const char *text, size_t len);

struct think_text {
    int state;
    size_t matched;      /* bytes of a tag matched so far */
    char held[64];       /* blanks and a tag's start, not handed out yet */
    size_t held_len;
};

void think_text_init(struct think_text *tt);

/* Adds text[0..len), handing out what is decided; the first non-zero
 * return of out, else 0. */
int think_text_push(struct think_text *tt, const char *text, size_t len, think_out_fn *out, void *arg);

/* The end of the reply: a held tag start is handed out as text (blanks
 * around the tags are dropped); the splitter starts over. */
int think_text_finish(struct think_text *tt, think_out_fn *out, void *arg);

#endif
