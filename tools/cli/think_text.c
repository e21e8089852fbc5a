/* think_text.c - a reply's thinking told apart from its answer
 * (think_text.h). A byte at a time: the states below, and the runs of one
 * part gathered before they are handed out. */
#include "think_text.h"

#include <string.h>

enum {
    LEAD,           /* only blanks so far, held */
    OPEN,           /* matching "<think>" */
    THINK_LEAD,     /* blanks after <think> */
    THINK,          /* the reasoning; blanks and a "</think>" start held */
    ANSWER_LEAD,    /* blanks after </think> */
    ANSWER,
};

static const char open_tag[] = "<think>", close_tag[] = "</think>";

struct run {
    struct think_text *tt;
    think_out_fn *out;
    void *arg;
    enum think_part part;
    const char *start;   /* a run inside the pushed text, or NULL */
    size_t len;
    int rc;
};

static bool blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static void flush(struct run *r)
{
    if (r->len && !r->rc)
        r->rc = r->out(r->arg, r->part, r->start, r->len);
    r->start = NULL;
    r->len = 0;
}

/* Hands out p[0..n) as part: adjacent bytes of the pushed text of the same
 * part join one run; held bytes go out on their own. */
static void emit(struct run *r, enum think_part part, const char *p, size_t n)
{
    if (!n)
        return;
    if (r->len && (part != r->part || r->start + r->len != p))
        flush(r);
    if (!r->len) {
        r->part = part;
        r->start = p;
    }
    r->len += n;
}

static void emit_held(struct run *r, enum think_part part)
{
    struct think_text *tt = r->tt;
    flush(r);
    if (tt->held_len && !r->rc)
        r->rc = r->out(r->arg, part, tt->held, tt->held_len);
    tt->held_len = 0;
}

static void hold(struct think_text *tt, char c)
{
    tt->held[tt->held_len++] = c;   /* THINK keeps room for a tag: never full */
}

static void step(struct run *r, const char *p)
{
    struct think_text *tt = r->tt;
    char c = *p;
    switch (tt->state) {
    case LEAD:
        if (blank(c)) {
            /* so many blanks do not open a thinking reply: an answer */
            if (tt->held_len == sizeof tt->held - sizeof open_tag) {
                tt->state = ANSWER;
                emit_held(r, THINK_ANSWER);
                emit(r, THINK_ANSWER, p, 1);
                return;
            }
            hold(tt, c);
            return;
        }
        tt->state = OPEN;
        tt->matched = 0;
        /* fall through */
    case OPEN:
        if (c == open_tag[tt->matched]) {
            hold(tt, c);
            if (++tt->matched == sizeof open_tag - 1) {
                tt->held_len = 0;
                tt->state = THINK_LEAD;
            }
            return;
        }
        tt->state = ANSWER;
        emit_held(r, THINK_ANSWER);
        emit(r, THINK_ANSWER, p, 1);
        return;
    case THINK_LEAD:
        if (blank(c))
            return;
        tt->state = THINK;
        tt->matched = 0;
        /* fall through */
    case THINK:
        if (tt->matched) {
            if (c == close_tag[tt->matched]) {
                if (++tt->matched == sizeof close_tag - 1) {
                    flush(r);
                    tt->held_len = 0;          /* the blanks before the tag */
                    tt->state = ANSWER_LEAD;
                }
                return;
            }
            /* not the tag after all: what was held is reasoning */
            for (size_t i = 0; i < tt->matched; i++)
                hold(tt, close_tag[i]);
            tt->matched = 0;
            emit_held(r, THINK_REASONING);
        }
        if (c == '<') {
            flush(r);
            tt->matched = 1;
        } else if (blank(c)) {
            flush(r);
            /* a long run of blanks inside the reasoning goes out early, so
             * the buffer keeps room for a tag's start */
            if (tt->held_len >= sizeof tt->held - sizeof close_tag)
                emit_held(r, THINK_REASONING);
            hold(tt, c);
        } else {
            if (tt->held_len)
                emit_held(r, THINK_REASONING);
            emit(r, THINK_REASONING, p, 1);
        }
        return;
    case ANSWER_LEAD:
        if (blank(c))
            return;
        tt->state = ANSWER;
        /* fall through */
    default:
        emit(r, THINK_ANSWER, p, 1);
    }
}

void think_text_init(struct think_text *tt)
{
    memset(tt, 0, sizeof *tt);
    tt->state = LEAD;
}

int think_text_push(struct think_text *tt, const char *text, size_t len, think_out_fn *out, void *arg)
{
    struct run r = {.tt = tt, .out = out, .arg = arg};
    for (size_t i = 0; i < len && !r.rc; i++)
        step(&r, text + i);
    flush(&r);
    return r.rc;
}

int think_text_finish(struct think_text *tt, think_out_fn *out, void *arg)
{
    struct run r = {.tt = tt, .out = out, .arg = arg};
    if (tt->state == LEAD || tt->state == OPEN)
        emit_held(&r, THINK_ANSWER);
    else if (tt->state == THINK && tt->matched) {
        /* not a tag after all: it and the blanks before it are reasoning */
        for (size_t i = 0; i < tt->matched; i++)
            hold(tt, close_tag[i]);
        emit_held(&r, THINK_REASONING);
    }
    think_text_init(tt);
    return r.rc;
}
