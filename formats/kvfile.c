/* kvfile.c - the saved session file (kvfile.h): header, size and checks. */
#include "kvfile.h"

#include <string.h>
#include <xxhash.h>

#include "le.h"

static const char MAGIC[4] = {'Q', 'P', 'K', 'V'};

void qp_kvf_header_encode(const struct qp_kvf_header *h, uint8_t *out)
{
    memset(out, 0, QP_KVF_HEADER);
    put32(out, h->version);
    memcpy(out + 4, MAGIC, 4);
    put64(out + 8, h->container);
    put32(out + 16, h->kv8);
    put32(out + 20, h->ctx);
    put32(out + 24, h->n_tokens);
    put32(out + 28, h->vocab);
    put32(out + 32, h->has_logits);
    put32(out + 36, h->n_runs);
    put32(out + 40, h->row_bytes);
}

static void header_decode(const uint8_t *in, struct qp_kvf_header *h)
{
    h->version = le32(in);
    h->container = le64(in + 8);
    h->kv8 = le32(in + 16);
    h->ctx = le32(in + 20);
    h->n_tokens = le32(in + 24);
    h->vocab = le32(in + 28);
    h->has_logits = le32(in + 32);
    h->n_runs = le32(in + 36);
    h->row_bytes = le32(in + 40);
}

/* the bytes of one cache's rows (0 on overflow) */
static uint64_t rows_size(const struct qp_kvf_header *h)
{
    uint64_t r;
    if (__builtin_mul_overflow((uint64_t)h->n_runs * h->n_tokens, (uint64_t)h->row_bytes, &r))
        return 0;
    return r;
}

uint64_t qp_kvf_size(const struct qp_kvf_header *h)
{
    uint64_t rows = rows_size(h), all;
    uint64_t fixed = QP_KVF_HEADER + 4ull * h->n_tokens + (h->has_logits ? 8ull * h->vocab : 0) + QP_KVF_TRAILER;
    if ((h->n_tokens && !rows) || __builtin_mul_overflow(rows, 2, &all) || __builtin_add_overflow(all, fixed, &all))
        return 0;
    return all;
}

int qp_kvf_parse(const uint8_t *buf, size_t len, const char *name, struct qp_kvf_view *v, qp_err *err)
{
    if (len < QP_KVF_HEADER + QP_KVF_TRAILER)
        return qp_fail_code(err, QP_E_FORMAT, "%s: %zu bytes, too short for a saved session", name, len);
    if (le32(buf) != QP_KVF_VERSION)
        return qp_fail_code(err, QP_E_FORMAT, "%s: saved session format version %u, this build reads %u", name,
                            le32(buf), QP_KVF_VERSION);
    if (XXH3_64bits(buf, len - QP_KVF_TRAILER) != le64(buf + len - QP_KVF_TRAILER))
        return qp_fail_code(err, QP_E_FORMAT, "%s: checksum mismatch (the file is truncated or corrupted)", name);
    if (memcmp(buf + 4, MAGIC, 4))
        return qp_fail_code(err, QP_E_FORMAT, "%s: not a saved session (bad magic)", name);
    struct qp_kvf_header *h = &v->h;
    header_decode(buf, h);
    if (h->kv8 > 1 || h->has_logits > 1 || !h->n_runs || !h->row_bytes || !h->vocab || h->n_tokens > h->ctx)
        return qp_fail_code(err, QP_E_FORMAT, "%s: inconsistent saved session header", name);
    if (qp_kvf_size(h) != len)
        return qp_fail_code(err, QP_E_FORMAT, "%s: %zu bytes where the header describes %llu", name, len,
                            (unsigned long long)qp_kvf_size(h));
    const uint8_t *at = buf + QP_KVF_HEADER;
    v->tokens = at;
    at += 4ull * h->n_tokens;
    v->logits = h->has_logits ? at : NULL;
    at += h->has_logits ? 8ull * h->vocab : 0;
    v->rows[0] = at;
    v->rows[1] = at + rows_size(h);
    return 0;
}
