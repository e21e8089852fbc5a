/* fuzz_kvfile.c - libFuzzer target: qp_kvf_parse (a saved session,
 * formats/kvfile.h) on arbitrary bytes, run twice: as given, then with the
 * trailer's checksum repaired so that mutations reach the header's checks.
 * What it accepts must lie inside the buffer and add up to its size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvfile.h"
#include "le.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *buf, size_t len)
{
    struct qp_kvf_view v;
    qp_err err = {{0}};
    if (qp_kvf_parse(buf, len, "fuzz.bin", &v, &err)) {
        if (!err.msg[0] || err.code != QP_E_FORMAT)
            abort();
        return;
    }
    const struct qp_kvf_header *h = &v.h;
    uint64_t rows = (uint64_t)h->n_runs * h->n_tokens * h->row_bytes;
    const uint8_t *end = buf + len - QP_KVF_TRAILER;
    if (h->n_tokens > h->ctx || v.tokens != buf + QP_KVF_HEADER || (v.logits != NULL) != (h->has_logits == 1) ||
        v.rows[1] + rows != end || v.rows[0] + rows != v.rows[1])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = calloc(size ? size : 1, 1);  /* exact size: overreads show */
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    check(buf, size);
    if (size >= QP_KVF_TRAILER) {
        put64(buf + size - QP_KVF_TRAILER, XXH3_64bits(buf, size - QP_KVF_TRAILER));
        check(buf, size);
    }
    free(buf);
    return 0;
}
