/* session.c - opening a model for any backend and stepping it. */
#include "session.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define DEFAULT_CTX 4096

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

const char *qp_backend_kind_name(enum qp_backend_kind k)
{
    return k == QP_BACKEND_BPF ? "bpf" : k == QP_BACKEND_EMU ? "emu" : "ref";
}

static uint32_t pick_ctx(uint32_t asked, uint32_t max_positions)
{
    if (asked)
        return asked;
    return max_positions < DEFAULT_CTX ? max_positions : DEFAULT_CTX;
}

/* --stream: checksums tensor by tensor, reading through a small buffer
 * rather than the mapping, so the check never holds the model in memory
 * (and takes no page faults) */
static int verify_by_reading(const struct qpk_file *f, qp_err *err)
{
    for (uint32_t i = 0; i < f->n_sections; i++)
        if (qpk_verify_section(f, &f->sections[i], err))
            return -1;
    const size_t chunk = 4u << 20;
    XXH3_state_t *st = XXH3_createState();
    uint8_t *buf = malloc(chunk);
    int rc = st && buf ? 0 : qp_fail(err, "out of memory");
    for (uint32_t i = 0; i < f->n_tensors && !rc; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        XXH3_64bits_reset(st);
        for (uint64_t at = 0; at < t->nbytes && !rc;) {
            size_t want = t->nbytes - at < chunk ? (size_t)(t->nbytes - at) : chunk;
            ssize_t got = pread(f->fd, buf, want, (off_t)(t->offset + at));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                rc = qp_fail(err, "%s: tensor %s: %s", f->path, t->name,
                             got < 0 ? strerror(errno) : "the file ends early (changed on disk?)");
            else {
                XXH3_64bits_update(st, buf, (size_t)got);
                at += (uint64_t)got;
            }
        }
        if (!rc && XXH3_64bits_digest(st) != t->xxh3)
            rc = qp_fail(err, "%s: tensor %s: checksum mismatch (data corrupted)", f->path, t->name);
    }
    free(buf);
    XXH3_freeState(st);
    return rc;
}

static int open_container(struct qp_session *s, const struct qp_session_opts *o, qp_err *err)
{
    bool verify_now = !o->no_verify && !o->stream;
    double t0 = now_ms();
    if (qpk_open(&s->file, o->model, verify_now ? QPK_VERIFY : 0, err))
        return -1;
    s->file_open = true;
    if (o->stream && !o->no_verify && verify_by_reading(&s->file, err))
        return -1;
    s->checksum_ms = o->no_verify ? 0 : now_ms() - t0;
    const struct qpk_config *c = &s->file.cfg;
    s->ctx = pick_ctx(o->ctx, c->max_positions);
    s->vocab = c->vocab;
    s->hidden = c->hidden;
    s->n_layers = c->n_layers;
    if (qp_plan_build(&s->plan, &s->file, s->ctx, o->stream, err))
        return -1;
    int rc = o->backend == QP_BACKEND_BPF ? qp_bpf_create(&s->b, &s->plan, err)
                                          : qp_emu_create(&s->b, &s->plan, err);
    return rc || qp_forward_create(&s->fw, s->b, &s->plan, o->threads, err);
}

static int open_reference(struct qp_session *s, const struct qp_session_opts *o, qp_err *err)
{
    struct qwen3_config probe;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->model);
    if (hf_config_load(path, &probe, err))
        return -1;
    s->ctx = pick_ctx(o->ctx, probe.max_position_embeddings);
    if (s->ctx > probe.max_position_embeddings)
        return qp_fail(err, "context %u is past the model's %u positions", s->ctx, probe.max_position_embeddings);
    if (ref_open(&s->ref, o->model, s->ctx, err))
        return -1;
    s->vocab = probe.vocab_size;
    s->hidden = probe.hidden_size;
    s->n_layers = probe.num_hidden_layers;
    return 0;
}

int qp_session_open(struct qp_session *s, const struct qp_session_opts *o, qp_err *err)
{
    memset(s, 0, sizeof *s);
    s->kind = o->backend;
    double t0 = now_ms();
    int rc = o->backend == QP_BACKEND_REF ? open_reference(s, o, err) : open_container(s, o, err);
    if (!rc) {
        s->logits = malloc((size_t)s->vocab * sizeof *s->logits);
        rc = s->logits ? 0 : qp_fail(err, "out of memory");
    }
    if (rc) {
        qp_session_close(s);
        return -1;
    }
    s->load_ms = now_ms() - t0;
    return 0;
}

void qp_session_close(struct qp_session *s)
{
    qp_forward_destroy(s->fw);
    if (s->b)
        s->b->destroy(s->b);
    qp_plan_free(&s->plan);
    if (s->file_open)
        qpk_close(&s->file);
    ref_close(s->ref);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

int qp_session_step(struct qp_session *s, uint32_t token, uint32_t pos, bool want_logits, uint32_t *next,
                    qp_err *err)
{
    if (s->kind == QP_BACKEND_REF) {
        if (!want_logits)
            return ref_forward(s->ref, token, pos, s->logits, err);
        if (ref_forward(s->ref, token, pos, s->logits, err))
            return -1;
        uint32_t best = 0;
        for (uint32_t i = 1; i < s->vocab; i++)
            if (s->logits[i] > s->logits[best])
                best = i;
        if (next)
            *next = best;
        return 0;
    }
    if (qp_forward_token(s->fw, token, pos, want_logits, next, err))
        return -1;
    if (want_logits)
        for (uint32_t i = 0; i < s->vocab; i++)
            s->logits[i] = ldexp((double)s->b->logits[i], -QM_RESID_FRAC);
    return 0;
}
