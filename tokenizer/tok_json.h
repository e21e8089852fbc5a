/* tok_json.h - a small strict JSON scanner that allocates nothing.
 *
 * Why not cJSON for everything: tokenizer.json is 11 MB, and cJSON turns its
 * 450k strings into a 48 MB tree. On our VMs fresh memory costs ~2 ms per MB
 * in page faults, so that tree alone blows the 150 ms load budget. The
 * scanner walks the document in place; the loader streams the two big tables
 * (model.vocab, model.merges) straight into its arena and hands every small
 * object (normalizer, pre_tokenizer, added_tokens, ...) to cJSON.
 *
 * The CLI and the tests use it too: it keeps U+0000 in strings, which
 * cJSON's NUL-terminated strings cannot.
 *
 * Errors read "NAME: byte OFFSET: what went wrong".
 */
#ifndef QP_TOK_JSON_H
#define QP_TOK_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tok_buf.h"

/* Nesting limit for skipped values: untrusted input must not overflow the stack. */
#define QP_JSON_MAX_DEPTH 256

typedef struct qp_json {
    const char *start, *p, *end; /* the document, the cursor, its end */
    const char *name;            /* names the document in messages */
    qp_err *err;
} qp_json;

void qp_json_init(qp_json *j, const char *text, size_t len, const char *name, qp_err *err);

/* Fails with "NAME: byte N: <formatted message>" at the cursor; returns -1. */
int qp_json_fail(qp_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Skips whitespace; returns the next byte, or -1 at the end. */
int qp_json_peek(qp_json *j);

/* Consumes byte c (after whitespace) or fails naming ctx. */
int qp_json_expect(qp_json *j, char c, const char *ctx);

/* Reads a string into out (appending, decoded: escapes, surrogate pairs;
 * out->s is non-NULL afterwards, even for ""; out may be NULL to only check
 * the string); rejects ill-formed UTF-8, raw control
 * characters and lone surrogates. */
int qp_json_string(qp_json *j, qp_tok_text *out);

/* Reads an integer (no fraction, no exponent) in [lo, hi]. */
int qp_json_int(qp_json *j, int64_t lo, int64_t hi, int64_t *v, const char *ctx);

/* Skips one value of any type, checking its syntax. */
int qp_json_skip(qp_json *j);

/* Iteration. Call after '{' / '[' was consumed, with *first = 1 before the
 * first call. Returns 1 when a member/element follows (for objects the key is
 * decoded into key, replacing its contents, and the ':' is consumed), 0 after
 * the closing bracket, -1 on error. */
int qp_json_next_member(qp_json *j, int *first, qp_tok_text *key, const char *ctx);
int qp_json_next_element(qp_json *j, int *first, const char *ctx);

/* Fails unless only whitespace remains. */
int qp_json_end(qp_json *j);

/* Appends s[0..n) to out as a JSON string literal with quotes. s must be
 * well-formed UTF-8; control characters (and U+0000) are escaped. */
int qp_json_append_string(qp_tok_text *out, const char *s, size_t n);

#endif
