/* utf8_stream.h - UTF-8 checking, and a stream that never emits a broken character.
 *
 * Well-formed UTF-8 is Unicode's Table 3-7: no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF.
 *
 * Replacement policy (the one Rust's String::from_utf8_lossy uses, hence the
 * one Hugging Face's decoder uses): every "maximal subpart" of an ill-formed
 * sequence becomes one U+FFFD. A maximal subpart is the longest prefix of a
 * well-formed sequence that the bytes start, or else a single byte. So
 * "F0 9F 98 41" gives U+FFFD 'A', and "E0 80" gives U+FFFD U+FFFD.
 */
#ifndef QP_UTF8_STREAM_H
#define QP_UTF8_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "tok_buf.h"

#define QP_UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

enum {
    QP_UTF8_INVALID = -1,  /* the first *len bytes are a maximal ill-formed subpart */
    QP_UTF8_TRUNCATED = 0, /* all n bytes are a proper prefix of a character */
    QP_UTF8_OK = 1,        /* one character of *len bytes, value in *cp */
};

/* Looks at the character starting at s[0] (n >= 1 bytes available). */
int qp_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp, size_t *len);

/* Returns the byte offset of the first ill-formed byte of s[0..n), or n when
 * it is all well-formed. When why is not NULL it gets a short reason. */
size_t qp_utf8_check(const void *s, size_t n, const char **why);

/* Appends s[0..n) to out with the replacement policy above (an incomplete
 * character at the end is ill-formed too). Returns 0, or -1 out of memory. */
int qp_utf8_append_lossy(qp_tok_text *out, const void *s, size_t n);

/* Appends the UTF-8 encoding of cp (must be a scalar value). */
int qp_utf8_append_cp(qp_tok_text *out, uint32_t cp);

/* A byte stream cut anywhere (say, between two tokens of one emoji) goes in;
 * only complete characters come out. The stream holds back the bytes of a
 * character that may still complete (at most 3); a byte that proves it
 * ill-formed releases it as U+FFFD. */
typedef struct qp_utf8_stream {
    uint8_t held[4];
    unsigned n_held;
} qp_utf8_stream;

void qp_utf8_stream_init(qp_utf8_stream *st);

/* Appends to out the complete characters that bytes[0..n) finish.
 * Returns 0, or -1 out of memory. */
int qp_utf8_stream_feed(qp_utf8_stream *st, const void *bytes, size_t n, qp_tok_text *out);

/* End of stream: a held, incomplete character becomes one U+FFFD. */
int qp_utf8_stream_finish(qp_utf8_stream *st, qp_tok_text *out);

#endif
