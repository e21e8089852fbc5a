/* session_file.c - a session saved to a file and restored into another
 * (formats/kvfile.h): its tokens, logits and KV cache rows, copied out of
 * and back into the engine's maps, so that the restored session goes on
 * with the bits the saved one would have had. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fsafe.h"
#include "internal.h"
#include "kvfile.h"
#include "le.h"

/* the header a save of s with n tokens writes */
static void header_of(const qpack_session *s, uint32_t n, bool logits, struct qp_kvf_header *h)
{
    const struct qp_engine *e = &s->m->engine;
    *h = (struct qp_kvf_header){.version = QP_KVF_VERSION, .container = e->file.dir_xxh3,
                                .kv8 = e->plan.cfg.kv8, .ctx = e->ctx, .n_tokens = n,
                                .vocab = s->m->info.vocab, .has_logits = logits};
    qp_engine_kv_shape(e, &h->n_runs, &h->row_bytes);
}

static int engine_only(const qpack_session *s, const char *what, qpack_error *err)
{
    if (s->m->params.backend == QPACK_BACKEND_REF)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "the reference backend cannot %s a session", what);
    return QPACK_OK;
}

/* the file's bytes from the session: header, tokens, logits, rows, XXH3 */
static int encode(qpack_session *s, uint8_t *buf, const struct qp_kvf_header *h, qp_err *e)
{
    qp_kvf_header_encode(h, buf);
    uint8_t *at = buf + QP_KVF_HEADER;
    for (uint32_t i = 0; i < h->n_tokens; i++, at += 4)
        put32(at, (uint32_t)s->tokens[i]);
    for (uint32_t v = 0; h->has_logits && v < h->vocab; v++, at += 8)
        putf64(at, s->logits[v]);
    size_t rows = (size_t)h->n_runs * h->n_tokens * h->row_bytes;
    uint8_t *kv[2] = {at, at + rows};
    qpack_model *m = s->m;
    pthread_mutex_lock(&m->step_mu);    /* no step writes the cache meanwhile */
    int rc = qp_engine_slot_rows(&m->engine, s->slot, h->n_tokens, kv, false, e);
    pthread_mutex_unlock(&m->step_mu);
    at += 2 * rows;
    put64(at, XXH3_64bits(buf, (size_t)(at - buf)));
    return rc;
}

int qpack_session_save(qpack_session *s, const char *path, qpack_error *err)
{
    int rc = engine_only(s, "save", err);
    if (rc)
        return rc;
    struct qp_kvf_header h;
    header_of(s, s->pos, s->have_logits, &h);
    uint64_t size = qp_kvf_size(&h);
    uint8_t *buf = size && size <= SIZE_MAX ? malloc((size_t)size) : NULL;
    if (!buf)
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory for a saved session of %llu bytes",
                           (unsigned long long)size);
    qp_err e = {{0}};
    rc = encode(s, buf, &h, &e) ? qp_lib_error(err, &e, QPACK_ERR_INTERNAL) : QPACK_OK;
    if (!rc && fs_write_file(path, buf, (size_t)size, NULL, &e))
        rc = qp_lib_error(err, &e, QPACK_ERR_IO);
    free(buf);
    return rc;
}

/* Whether the parsed file fits s: the same container and cache type, a
 * context that holds its tokens, ids in the vocabulary, finite logits.
 * The checksum catches damage, not forgery: the rows themselves are
 * whatever the file holds (the kernels read any bits without leaving
 * their maps), so restore files this model's sessions wrote. */
static int check_fit(const qpack_session *s, const struct qp_kvf_view *v, const char *path, qpack_error *err)
{
    struct qp_kvf_header want;
    header_of(s, 0, false, &want);
    const struct qp_kvf_header *h = &v->h;
    if (h->container != want.container)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT,
                           "%s: saved from another model (container checksum %016llx, this one %016llx)", path,
                           (unsigned long long)h->container, (unsigned long long)want.container);
    if (h->kv8 != want.kv8)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "%s: saved with the %s KV cache, this model has the %s one",
                           path, h->kv8 ? "int8" : "int16", want.kv8 ? "int8" : "int16");
    if (h->n_runs != want.n_runs || h->row_bytes != want.row_bytes || h->vocab != want.vocab)
        return qp_lib_fail(err, QPACK_ERR_FORMAT, "%s: its KV cache rows do not match this model's", path);
    if (h->n_tokens > s->m->info.ctx)
        return qp_lib_fail(err, QPACK_ERR_CONTEXT, "%s: %u tokens do not fit the session's context of %u", path,
                           h->n_tokens, s->m->info.ctx);
    for (uint32_t i = 0; i < h->n_tokens; i++)
        if (le32(v->tokens + 4ull * i) >= h->vocab)
            return qp_lib_fail(err, QPACK_ERR_FORMAT, "%s: token %u is outside the vocabulary", path, i);
    for (uint32_t i = 0; v->logits && i < h->vocab; i++)
        if (!isfinite(lef64(v->logits + 8ull * i)))
            return qp_lib_fail(err, QPACK_ERR_FORMAT, "%s: logit %u is not a finite number", path, i);
    return QPACK_OK;
}

/* the parsed file into s: nothing of s changes unless the rows went in */
static int install(qpack_session *s, const struct qp_kvf_view *v, qpack_error *err)
{
    const struct qp_kvf_header *h = &v->h;
    qpack_model *m = s->m;
    qp_err e = {{0}};
    uint8_t *kv[2] = {(uint8_t *)v->rows[0], (uint8_t *)v->rows[1]};
    pthread_mutex_lock(&m->step_mu);
    int rc = qp_engine_slot_rows(&m->engine, s->slot, h->n_tokens, kv, true, &e);
    pthread_mutex_unlock(&m->step_mu);
    if (rc)
        return qp_lib_error(err, &e, QPACK_ERR_INTERNAL);
    for (uint32_t i = 0; i < h->n_tokens; i++)
        s->tokens[i] = (int32_t)le32(v->tokens + 4ull * i);
    s->pos = h->n_tokens;
    s->have_logits = v->logits != NULL;
    for (uint32_t i = 0; v->logits && i < h->vocab; i++)
        s->logits[i] = lef64(v->logits + 8ull * i);
    s->lookup_len = UINT32_MAX;
    return QPACK_OK;
}

int qpack_session_restore(qpack_session *s, const char *path, uint32_t *n_restored, qpack_error *err)
{
    if (n_restored)
        *n_restored = 0;
    int rc = engine_only(s, "restore", err);
    if (rc)
        return rc;
    struct qp_kvf_header most;
    header_of(s, s->m->info.ctx, true, &most);
    char *buf = NULL;
    size_t len = 0;
    qp_err e = {{0}};
    /* room for the other cache type's file too (int16 rows are about twice
     * int8's), so that it is refused by name, not by size */
    if (fs_read_input(path, 4 * (size_t)qp_kvf_size(&most), &buf, &len, &e))
        return qp_lib_error(err, &e, QPACK_ERR_IO);
    struct qp_kvf_view v;
    if (qp_kvf_parse((const uint8_t *)buf, len, path, &v, &e))
        rc = qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    if (!rc)
        rc = check_fit(s, &v, path, err);
    if (!rc)
        rc = install(s, &v, err);
    if (!rc && n_restored)
        *n_restored = v.h.n_tokens;
    free(buf);
    return rc;
}
