/* session.c - opening a model for any backend and stepping it. */
#include "session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

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

static int open_container(struct qp_session *s, const struct qp_session_opts *o, qp_err *err)
{
    double t0 = now_ms();
    if (qpk_open(&s->file, o->model, o->no_verify ? 0 : QPK_VERIFY, err))
        return -1;
    s->file_open = true;
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
    /* the BPF maps hold their own copy: the container's pages the plan read
     * leave this process (the host twin keeps reading them) */
    if (!rc && o->backend == QP_BACKEND_BPF)
        madvise(s->file.map, s->file.size, MADV_DONTNEED);
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
