/* tokenizer.h - the Hugging Face tokenizer of Qwen3, exactly, in C.
 *
 * Everything comes from tokenizer.json: the NFC normalizer, the pre-split
 * regex (run with PCRE2, JIT-compiled), byte-level BPE with the file's merges
 * and vocabulary, and the added tokens (<|im_start|>, <think>, ...). A file
 * asking for something this code does not implement is refused at load time
 * with a message naming the field, never silently tokenized differently.
 *
 * Encoding follows tokenizers' `encode(text, add_special_tokens=...)`
 * (the ByteLevel post-processor adds no tokens): added tokens are found in
 * the raw text first (leftmost, longest), the text between them is
 * normalized, split by the regex, mapped to byte-level characters and BPE
 * merged by rank.
 *
 * Decoding follows `decode(ids, skip_special_tokens)`: the ByteLevel decoder
 * turns each token back into its bytes, and ill-formed UTF-8 becomes U+FFFD
 * (see utf8_stream.h for the exact policy). qp_tok_stream does the same one
 * token at a time and never emits a partial character.
 *
 * Threads: a qp_tok is read-only after loading except for its word cache
 * and scratch buffers, which encode uses. Use one qp_tok per encoding
 * thread; decoding (const qp_tok *) may be shared.
 *
 * Version 1. All functions returning int give 0 on success and -1 on failure
 * with one line in *err (err may be NULL).
 */
#ifndef QP_TOKENIZER_H
#define QP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tok_buf.h"
#include "utf8_stream.h"

#define QP_TOK_API_VERSION 1

typedef struct qp_tok qp_tok;

/* ---- loading ------------------------------------------------------------ */

/* Loads tokenizer.json from a file (mmapped while loading). */
int qp_tok_load_file(qp_tok **out, const char *path, qp_err *err);

/* Loads from memory: json[0..len) need not be NUL-terminated and is not kept.
 * name labels error messages (e.g. "model.qpk:tokenizer.json").
 * Safe on arbitrary bytes: that is the fuzzing entry point. */
int qp_tok_load_buffer(qp_tok **out, const char *json, size_t len, const char *name,
                       qp_err *err);

void qp_tok_free(qp_tok *tok);

/* ---- encoding ----------------------------------------------------------- */

/* Appends the ids of text[0..len) to out. text must be well-formed UTF-8
 * (U+0000 is an ordinary character); otherwise fails naming the byte offset
 * and leaves out as it was. Safe on arbitrary bytes. */
int qp_tok_encode(qp_tok *tok, const char *text, size_t len, qp_tok_ids *out, qp_err *err);

/* ---- decoding ----------------------------------------------------------- */

enum {
    QP_TOK_SKIP_SPECIAL = 1, /* drop tokens marked "special" (like skip_special_tokens) */
};

/* Appends the text of ids[0..n) to out; ill-formed UTF-8 becomes U+FFFD.
 * An id with no token fails (naming it) and leaves out as it was. */
int qp_tok_decode(const qp_tok *tok, const int32_t *ids, size_t n, int flags,
                  qp_tok_text *out, qp_err *err);

/* Streaming decode for a generator: push ids one by one, print what comes
 * out. Output concatenated over a whole stream (with the final finish)
 * equals qp_tok_decode of all its ids. */
typedef struct qp_tok_stream {
    const qp_tok *tok;
    int flags;
    qp_utf8_stream utf8; /* holds the bytes of a character not complete yet */
} qp_tok_stream;

void qp_tok_stream_init(qp_tok_stream *s, const qp_tok *tok, int flags);

/* Appends to out the characters completed by token id (maybe none yet). */
int qp_tok_stream_push(qp_tok_stream *s, int32_t id, qp_tok_text *out, qp_err *err);

/* End of the stream: an incomplete character left over becomes U+FFFD. */
int qp_tok_stream_finish(qp_tok_stream *s, qp_tok_text *out, qp_err *err);

/* ---- vocabulary --------------------------------------------------------- */

/* One more than the largest id (model vocabulary and added tokens). */
int32_t qp_tok_vocab_size(const qp_tok *tok);

/* Id of the token whose string is exactly s[0..n) (as tokenizer.json spells
 * it: added-token content first, then the model vocabulary, in byte-level
 * form such as "Ġthe"), or -1. */
int32_t qp_tok_token_id(const qp_tok *tok, const char *s, size_t n);

/* The string of token id as tokenizer.json spells it (NUL-terminated), or
 * NULL for an id with no token. */
const char *qp_tok_token_string(const qp_tok *tok, int32_t id, size_t *len);

/* The bytes token id decodes to (not NUL-terminated; a byte-level token
 * may hold part of a UTF-8 character), or NULL for an id with no token. */
const char *qp_tok_token_bytes(const qp_tok *tok, int32_t id, size_t *len);

/* 1 if id is an added token with "special": true (skipped by
 * QP_TOK_SKIP_SPECIAL), else 0. */
int qp_tok_is_special(const qp_tok *tok, int32_t id);

/* 1 if id is an added token (special or not), else 0. */
int qp_tok_is_added(const qp_tok *tok, int32_t id);

#endif
