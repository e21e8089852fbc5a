/* kvfile.h - a saved session (qpack_session_save): its tokens, its last
 * logits and its KV cache rows [0, n_tokens), with what they belong to (the
 * container's directory checksum, the cache type) and an XXH3-64 of every
 * byte before the trailer. Little-endian; the layout is docs/ENGINE.md's
 * "Saved sessions":
 *
 *   header (QP_KVF_HEADER bytes): u32 version, "QPKV", u64 container,
 *       u32 kv8, ctx, n_tokens, vocab, has_logits, n_runs, row_bytes, zeros
 *   i32 tokens[n_tokens]
 *   f64 logits[vocab]                          (has_logits only)
 *   K rows [n_runs][n_tokens][row_bytes], then V rows alike
 *   u64 XXH3-64 of all the bytes above
 *
 * qp_kvf_parse checks the version, then the checksum, before it reads any
 * other field; what it accepts is consistent in itself (sizes add up to
 * the file's), not yet matched to a model: the caller does that. */
#ifndef QP_KVFILE_H
#define QP_KVFILE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define QP_KVF_VERSION 1
#define QP_KVF_HEADER 64
#define QP_KVF_TRAILER 8

struct qp_kvf_header {
    uint32_t version;
    uint64_t container;         /* qpk_file.dir_xxh3 of the model's container */
    uint32_t kv8;               /* 0: the int16 cache, 1: the int8 cache */
    uint32_t ctx;               /* the context of the session saved */
    uint32_t n_tokens;
    uint32_t vocab;
    uint32_t has_logits;        /* 0 or 1 */
    uint32_t n_runs;            /* rows per position of each cache (n_layers, int8: x n_kv_heads) */
    uint32_t row_bytes;         /* bytes of one row */
};

/* A parsed file: pointers into the caller's buffer. */
struct qp_kvf_view {
    struct qp_kvf_header h;
    const uint8_t *tokens;      /* i32 [n_tokens] */
    const uint8_t *logits;      /* f64 [vocab], or NULL */
    const uint8_t *rows[2];     /* K, V: [n_runs][n_tokens][row_bytes] */
};

/* The header's bytes (QP_KVF_HEADER). */
void qp_kvf_header_encode(const struct qp_kvf_header *h, uint8_t *out);

/* Bytes of a whole file with header h; 0 when that overflows. */
uint64_t qp_kvf_size(const struct qp_kvf_header *h);

/* Checks buf[0, len) (name for messages) as described above and points v
 * into it. -1 with a one-line QP_E_FORMAT error otherwise. */
int qp_kvf_parse(const uint8_t *buf, size_t len, const char *name, struct qp_kvf_view *v, qp_err *err);

#endif
