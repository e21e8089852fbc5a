/* model.c - qpack_model: opening a container (or, for the reference, a
 * checkpoint folder) once, for every session to share; the version and the
 * error conversion of include/qpack.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "chat.h"
#include "fsafe.h"
#include "le.h"
#include "stdout_policy.h"
#include "internal.h"
#include "pooling.h"
#include "task.h"

const char *qpack_version(void)
{
    return qp_version();
}

const char *qpack_status_name(qpack_status code)
{
    static const char *const names[] = {
        "ok", "argument", "io", "format", "privilege", "memory", "context", "range", "busy", "interrupted",
        "kernel", "internal",
    };
    return (unsigned)code < sizeof names / sizeof *names ? names[code] : "unknown";
}

_Static_assert((int)QPACK_ERR_ARGUMENT == (int)QP_E_ARGUMENT && (int)QPACK_ERR_INTERNAL == (int)QP_E_INTERNAL &&
                   (int)QPACK_ERR_RANGE == (int)QP_E_RANGE && (int)QPACK_ERR_KERNEL == (int)QP_E_KERNEL,
               "qpack_status mirrors enum qp_err_code");

qpack_status qp_lib_error(qpack_error *out, const qp_err *in, qpack_status fallback)
{
    qpack_status code = in->code > 0 && in->code <= QPACK_ERR_INTERNAL ? (qpack_status)in->code : fallback;
    if (out) {
        out->code = code;
        snprintf(out->message, sizeof out->message, "%s", in->msg);
    }
    return code;
}

qpack_status qp_lib_fail(qpack_error *out, qpack_status code, const char *fmt, ...)
{
    if (out) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(out->message, sizeof out->message, fmt, ap);
        va_end(ap);
        out->code = code;
    }
    return code;
}

uint32_t qpack_default_ctx(uint32_t max_positions)
{
    return max_positions < QPACK_DEFAULT_CTX ? max_positions : QPACK_DEFAULT_CTX;
}

qpack_model_params qpack_model_default_params(void)
{
    return (qpack_model_params){.backend = QPACK_BACKEND_BPF, .max_sessions = 1, .threads = 2};
}

/* The stop ids of a reply: the chat template's end tokens and the model's eos. */
static void find_end_ids(qpack_model *m)
{
    if (m->tokenizer) {
        qp_chat_stops stops;
        if (qp_chat_stop_ids(m->tokenizer->tok, &stops, NULL) == 0)
            for (int i = 0; i < stops.n; i++)
                m->end_ids[m->n_end++] = stops.ids[i];
    }
    int32_t eos[1 + QWEN3_GEN_EOS_MAX] = {m->info.eos_id};
    unsigned n = 1;
    for (unsigned i = 0; m->has_gen && i < m->gen.n_eos; i++)
        eos[n++] = m->gen.eos[i];
    for (unsigned k = 0; k < n; k++) {
        bool known = eos[k] < 0;
        for (int i = 0; i < m->n_end; i++)
            known |= m->end_ids[i] == eos[k];
        if (!known)
            m->end_ids[m->n_end++] = eos[k];
    }
}

/* the final norm's scales of a container, as doubles (i32s: q 2^-scale_exp) */
static int load_final_norm(qpack_model *m, qp_err *err)
{
    const struct qpk_file *f = &m->engine.file;
    const struct qpk_tensor *t = qpk_tensor_of(f, QPK_ROLE_FINAL_NORM, QPK_NO_LAYER);
    uint32_t n = m->info.hidden;
    int32_t *q = malloc(n * sizeof *q);
    m->final_norm = malloc(n * sizeof *m->final_norm);
    if (!q || !m->final_norm) {
        free(q);
        return qp_fail_code(err, QP_E_MEMORY, "out of memory");
    }
    int rc = t ? qpk_read(f, t->offset, q, n * sizeof *q) : -1;
    for (uint32_t i = 0; !rc && i < n; i++)
        m->final_norm[i] = ldexp((double)(int32_t)le32((const uint8_t *)&q[i]), -(int)t->scale_exp);
    free(q);
    return rc ? qp_fail(err, "%s: the final norm cannot be read", m->path) : 0;
}

/* A checkpoint file qpack pack keeps as a section: from the reference's
 * folder (file, relative to it) or from the container (kind); *text NULL
 * when there is none. name gets what messages call it. */
static int read_kept(qpack_model *m, const char *file, unsigned kind, char **text, size_t *len, char *name,
                     size_t cap, qp_err *err)
{
    *text = NULL;
    *len = 0;
    if (m->params.backend != QPACK_BACKEND_REF) {
        snprintf(name, cap, "%s: section %s", m->path, qpk_section_name(kind));
        return qpk_read_section(&m->engine.file, kind, text, len, err);
    }
    snprintf(name, cap, "%s/%s", m->path, file);
    if (access(name, F_OK))
        return 0;
    return fs_read_input(name, 1u << 20, text, len, err);
}

/* The task section: a reranker (checked as the packer checks it) */
static int load_task(qpack_model *m, qp_err *err)
{
    if (m->params.backend == QPACK_BACKEND_REF) {  /* a folder has no section: its name says */
        m->info.task = task_of_path(m->path) == QP_TASK_RERANK ? QPACK_TASK_RERANK : QPACK_TASK_NONE;
        return 0;
    }
    char *text, name[4200];
    size_t len;
    snprintf(name, sizeof name, "%s: section task", m->path);
    if (qpk_read_section(&m->engine.file, QPK_SEC_TASK, &text, &len, err))
        return -1;
    if (!text)
        return 0;
    enum qp_task task;
    int rc = task_parse(text, len, name, &task, err);
    free(text);
    m->info.task = !rc && task == QP_TASK_RERANK ? QPACK_TASK_RERANK : QPACK_TASK_NONE;
    return rc;
}

/* 1_Pooling/config.json: an embedding model (checked as the packer checks it) */
static int load_pooling(qpack_model *m, qp_err *err)
{
    char *text, name[4200];
    size_t len;
    if (read_kept(m, "1_Pooling/config.json", QPK_SEC_POOLING, &text, &len, name, sizeof name, err))
        return -1;
    if (!text)
        return 0;
    enum qp_pooling mode;
    int rc = pooling_parse(text, len, name, m->info.hidden, &mode, err);
    free(text);
    if (rc)
        return -1;
    m->info.pooling = mode == QP_POOLING_LAST ? QPACK_POOLING_LAST : QPACK_POOLING_MEAN;
    return m->params.backend == QPACK_BACKEND_REF ? 0 : load_final_norm(m, err);
}

/* generation_config.json (a container of an older packer has none),
 * checked as the packer checks it */
static int load_generation_config(qpack_model *m, qp_err *err)
{
    char *text, name[4200];
    size_t len;
    if (read_kept(m, "generation_config.json", QPK_SEC_GENERATION_CONFIG, &text, &len, name, sizeof name, err))
        return -1;
    if (!text)
        return 0;
    int rc = gen_config_parse(text, len, name, m->info.vocab, &m->gen, err);
    free(text);
    m->has_gen = rc == 0;
    return rc;
}

/* Qwen3's model card: with thinking 0.6, 0.95, 20 (its
 * generation_config.json); without, 0.7, 0.8, 20 */
#define QWEN3_THINK_TEMP 0.6
#define QWEN3_THINK_TOP_P 0.95
#define QWEN3_PLAIN_TEMP 0.7
#define QWEN3_PLAIN_TOP_P 0.8

bool qpack_model_sampling(const qpack_model *m, bool thinking, qpack_sampler_params *p)
{
    if (!m->has_gen)
        return false;
    const struct qwen3_gen_config *g = &m->gen;
    if (!g->do_sample) {
        p->temperature = 0;
        return true;
    }
    p->temperature = g->temperature;
    p->top_k = g->top_k;
    p->top_p = g->top_p;
    p->min_p = g->min_p;
    p->repeat_penalty = g->repetition_penalty;
    if (!thinking && g->temperature == QWEN3_THINK_TEMP && g->top_p == QWEN3_THINK_TOP_P && g->top_k == 20) {
        p->temperature = QWEN3_PLAIN_TEMP;
        p->top_p = QWEN3_PLAIN_TOP_P;
    }
    return true;
}

/* The tokenizer a container carries; a container without one opens fine
 * (ids in, ids out), one whose tokenizer does not load does not. */
static int load_container_tokenizer(qpack_model *m, qp_err *err)
{
    qp_tok *tok;
    if (qp_lib_container_tokenizer(&m->engine.file, m->path, &tok, err))
        return -1;
    if (!tok)
        return 0;
    m->tokenizer = qp_lib_tokenizer_wrap(tok);
    return m->tokenizer ? 0 : qp_fail_code(err, QP_E_MEMORY, "out of memory");
}

static void fill_info_from_engine(qpack_model *m)
{
    const struct qp_engine *e = &m->engine;
    qpack_model_info *i = &m->info;
    qp_lib_info_from_container(&e->file, i);
    i->ctx = e->ctx;
    i->backend = qp_backend_name(e->kind);
    i->block_positions = qp_forward_block_size(e->fw);
    i->kv_cache = e->plan.cfg.kv8 ? "int8" : "int16";
    i->kv_bytes_per_position = e->plan.kv_bytes_per_pos;
    i->load_ms = e->load_ms;
    i->checksum_ms = e->checksum_ms;
    if (e->kind == QPACK_BACKEND_BPF && e->b) {
        i->map_bytes = e->b->map_bytes;
        i->weight_bytes = e->plan.stream ? 0 : e->plan.weight_bytes;
        i->maps_ms = e->b->verify_ms;
        i->copy_ms = e->b->copy_ms;
        i->kernel_lanes = e->b->kernel_lanes;
        i->lane_start = e->b->lane_start;
        for (int k = 0; k < QP_K_COUNT && i->n_programs < QPACK_KERNELS_MAX; k++)
            if (e->b->verified_insns[k]) {
                qpack_program_info *p = &i->programs[i->n_programs++];
                snprintf(p->name, sizeof p->name, "%s", qp_kernel_name(k));
                p->verified_insns = e->b->verified_insns[k];
            }
    }
}

static int open_container(qpack_model *m, const qpack_model_params *p, qp_err *err)
{
    if (p->backend == QPACK_BACKEND_BPF && !qp_lib_is_pinned(m->path) && !qp_bpf_may_load())
        return qp_fail_code(err, QP_E_PRIVILEGE, "loading BPF programs needs root or CAP_BPF + CAP_PERFMON "
                            "(the emu backend, the kernels' host twin, runs without)");
    if (qp_engine_open(&m->engine, m->path, p, 0, err))
        return -1;
    m->engine_open = true;
    fill_info_from_engine(m);
    return p->skip_tokenizer ? 0 : load_container_tokenizer(m, err);
}

/* The reference: the folder's config now, one reference per session later;
 * its tokenizer.json when there is one. */
static int open_reference(qpack_model *m, const qpack_model_params *p, qp_err *err)
{
    if (qp_lib_info_from_folder(m->path, &m->info, err))
        return -1;
    uint32_t max = m->info.max_positions;
    m->info.ctx = p->ctx ? p->ctx : qpack_default_ctx(max);
    if (m->info.ctx > max)
        return qp_fail_code(err, QP_E_CONTEXT, "context %u is past the model's %u positions", m->info.ctx, max);
    if (!m->info.has_tokenizer || p->skip_tokenizer)
        return 0;
    qp_tok *tok;
    if (qp_lib_reference_tokenizer(m->path, &tok, err))
        return -1;
    if (!tok)
        return 0;
    m->tokenizer = qp_lib_tokenizer_wrap(tok);
    return m->tokenizer ? 0 : qp_fail_code(err, QP_E_MEMORY, "out of memory");
}

int qpack_model_open(qpack_model **out, const char *path, const qpack_model_params *params, qpack_error *err)
{
    *out = NULL;
    qpack_model_params p = params ? *params : qpack_model_default_params();
    if (!path)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no model path");
    if (p.backend > QPACK_BACKEND_REF || p.threads > 2 || p.kv_cache > QPACK_KV_INT8)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT,
                           "model parameters out of range (backend %d, threads %u, kv_cache %d)", (int)p.backend,
                           p.threads, (int)p.kv_cache);
    if (p.backend == QPACK_BACKEND_REF && p.kv_cache != QPACK_KV_INT16)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "the reference backend keeps its KV cache in float64: "
                           "an 8-bit cache is for containers (bpf, emu)");
    qpack_status folder = p.backend == QPACK_BACKEND_REF || qp_lib_is_pinned(path) ? QPACK_OK : qp_lib_refuse_folder(path, err);
    if (folder)
        return folder;
    /* a loaded model has the slots it was loaded with (qpack load --sessions) */
    p.max_sessions = qp_lib_is_pinned(path) ? QP_PIN_MAX_SLOTS : p.max_sessions ? p.max_sessions : 1;
    qpack_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path)) || !(m->slot_taken = calloc(p.max_sessions, sizeof *m->slot_taken))) {
        if (m)
            free(m->path);
        free(m);
        return qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    }
    m->params = p;
    pthread_mutex_init(&m->step_mu, NULL);
    pthread_mutex_init(&m->sessions_mu, NULL);
    qp_err e = {{0}};
    int rc = p.backend == QPACK_BACKEND_REF ? open_reference(m, &p, &e) : open_container(m, &p, &e);
    if (rc) {
        qpack_model_free(m);
        return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    }
    m->info.max_sessions = m->engine.pin ? m->engine.pin->man.slots : p.max_sessions;
    m->params.max_sessions = m->info.max_sessions;
    m->info.path = m->path;
    if (load_generation_config(m, &e) || load_pooling(m, &e) || load_task(m, &e)) {
        qpack_model_free(m);
        return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    }
    find_end_ids(m);
    *out = m;
    return QPACK_OK;
}

void qpack_model_free(qpack_model *m)
{
    if (!m)
        return;
    if (m->engine_open)
        qp_engine_close(&m->engine);
    qpack_tokenizer_free(m->tokenizer);
    pthread_mutex_destroy(&m->step_mu);
    pthread_mutex_destroy(&m->sessions_mu);
    free(m->slot_taken);
    free(m->final_norm);
    free(m->path);
    free(m);
}

const qpack_model_info *qpack_model_get_info(const qpack_model *m)
{
    return &m->info;
}

/* bpf and emu: a slot of the engine's KV cache maps per session; the
 * reference opens one per session. */
uint32_t qpack_model_kv_caches(const qpack_model *m)
{
    return m->info.max_sessions;
}

const qpack_tokenizer *qpack_model_tokenizer(const qpack_model *m)
{
    return m->tokenizer;
}

bool qpack_token_is_end(const qpack_model *m, int32_t id)
{
    for (int i = 0; i < m->n_end; i++)
        if (m->end_ids[i] == id)
            return true;
    return false;
}
