/* stop_text.c - stop strings over streamed text (stop_text.h). */
#include "stop_text.h"

#include <stdlib.h>
#include <string.h>

void stop_text_init(struct stop_text *st, const char *const *stops, int n)
{
    *st = (struct stop_text){.stops = stops, .n = n};
}

void stop_text_free(struct stop_text *st)
{
    free(st->buf);
    st->buf = NULL;
    st->len = st->cap = 0;
}

/* the earliest index where a stop string starts in buf, or len; *which
 * the stop string found there (the first listed of those starting there) */
static size_t first_stop(const struct stop_text *st, int *which)
{
    size_t best = st->len;
    for (int i = 0; i < st->n; i++) {
        const char *hit = memmem(st->buf, st->len, st->stops[i], strlen(st->stops[i]));
        if (hit && (size_t)(hit - st->buf) < best)
            best = (size_t)(hit - st->buf), *which = i;
    }
    return best;
}

/* the length of the longest tail of buf that is a proper start of a stop string */
static size_t held_tail(const struct stop_text *st)
{
    size_t keep = 0;
    for (int i = 0; i < st->n; i++) {
        size_t m = strlen(st->stops[i]);
        for (size_t k = m - 1 < st->len ? m - 1 : st->len; k > keep; k--)
            if (!memcmp(st->buf + st->len - k, st->stops[i], k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

/* What the last call handed out has been printed by now: it leaves. */
static void drop_handed(struct stop_text *st)
{
    if (!st->handed)
        return;
    memmove(st->buf, st->buf + st->handed, st->len - st->handed);
    st->len -= st->handed;
    st->handed = 0;
}

int stop_text_push(struct stop_text *st, const char *text, size_t len, const char **out, size_t *out_len)
{
    *out = "";
    *out_len = 0;
    if (st->stopped)
        return true;
    drop_handed(st);
    if (st->len + len + 1 > st->cap) {
        size_t cap = (st->len + len + 1) * 2;
        char *b = realloc(st->buf, cap);
        if (!b)
            return -1;
        st->buf = b;
        st->cap = cap;
    }
    memcpy(st->buf + st->len, text, len);
    st->len += len;
    size_t at = first_stop(st, &st->hit);
    *out = st->buf;
    if (at < st->len) {
        *out_len = at;
        st->stopped = true;
        st->len = st->handed = 0;
        return true;
    }
    *out_len = st->len - held_tail(st);
    st->handed = *out_len;
    return false;
}

void stop_text_finish(struct stop_text *st, const char **out, size_t *out_len)
{
    drop_handed(st);
    *out = st->buf ? st->buf : "";
    *out_len = st->stopped ? 0 : st->len;
    st->len = 0;
    st->stopped = false;
}
