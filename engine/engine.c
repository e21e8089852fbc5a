/* engine.c - opening a model for any backend and feeding it tokens (engine.h). */
#include "engine.h"

#include "clock.h"
#include "memory.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

const char *qp_backend_name(qpack_backend k)
{
    return k == QPACK_BACKEND_BPF ? "bpf" : k == QPACK_BACKEND_EMU ? "emu" : "ref";
}

static uint32_t pick_ctx(uint32_t asked, uint32_t max_positions)
{
    if (asked)
        return asked;
    return max_positions < QPACK_DEFAULT_CTX ? max_positions : QPACK_DEFAULT_CTX;
}

/* QP_BLOCK=N sets the block size when the caller leaves it open: for
 * benchmarks that compare block sizes (scripts/bench_prompt.sh) */
static uint32_t pick_block(uint32_t asked)
{
    const char *env = getenv("QP_BLOCK");
    if (asked)
        return asked;
    return env && atoi(env) > 0 ? (uint32_t)atoi(env) : QP_BLOCK_DEFAULT;
}

static void checksum_progress(void *arg, uint64_t done, uint64_t total)
{
    const qpack_model_params *o = arg;
    o->progress(o->progress_user, QPACK_LOAD_CHECKSUMS, done, total);
}

static void report(const qpack_model_params *o, qpack_load_phase phase, uint64_t done, uint64_t total)
{
    if (o->progress)
        o->progress(o->progress_user, phase, done, total);
}

#define MEM_POLL_NS 100000000L     /* how often a refused load looks at MemAvailable again */
#define MEM_SETTLED_POLLS 5         /* polls without growth that end the wait */
#define MEM_WAIT_POLLS 100          /* and at most this many (10 s) */

/* The kernel frees the BPF maps of a process that just ended in the
 * background, about a second for gigabytes: qrun run again at once would
 * find the memory it needs still counted as used. So a load that does not
 * fit waits while MemAvailable grows, and is refused once it stops. */
static int fits_memory(const struct qp_plan *plan, bool bpf, uint64_t avail, qp_err *err)
{
    for (int polls = 0, settled = 0;; polls++) {
        if (qp_mem_check(plan, bpf, avail, err) == 0)
            return 0;
        const char *fixed = getenv("QP_MEM_AVAILABLE");
        if ((fixed && *fixed) || settled == MEM_SETTLED_POLLS || polls == MEM_WAIT_POLLS)
            return -1;
        nanosleep(&(struct timespec){.tv_nsec = MEM_POLL_NS}, NULL);
        qp_err again;
        uint64_t now;
        if (qp_mem_available(&now, &again))
            return -1;
        settled = now > avail + (64u << 20) ? 0 : settled + 1;
        avail = now;
    }
}

/* The context (the asked one, or the default rule's for this host's
 * memory) and the check that the maps fit, before the checksum pass and
 * before any map exists: a model too big for the host is refused at once,
 * with the figures (memory.h). */
static int size_for_memory(struct qp_engine *e, const qpack_model_params *o, uint32_t slots, uint32_t block,
                           qp_err *err)
{
    bool bpf = o->backend == QPACK_BACKEND_BPF, kv8 = o->kv_cache == QPACK_KV_INT8;
    uint64_t avail;
    if (qp_mem_available(&avail, err))
        return -1;
    e->ctx = o->ctx ? o->ctx : qp_mem_default_ctx(&e->file, slots, block, o->stream, kv8, bpf, avail);
    if (qp_plan_layout(&e->plan, &e->file, e->ctx, slots, block, o->stream, kv8, err))
        return -1;
    return fits_memory(&e->plan, bpf, avail, err);
}

/* qpack_model_params.call_us as the kernels' budget (0: unbounded) */
static uint32_t call_budget_ns(uint32_t call_us)
{
    if (call_us == QPACK_CALL_US_NONE)
        return 0;
    uint64_t ns = (uint64_t)(call_us ? call_us : QPACK_DEFAULT_CALL_US) * 1000;
    return ns > INT32_MAX ? INT32_MAX : (uint32_t)ns;     /* qk_past compares 31 bits */
}

/* the kernel schedule's lanes: one per host thread, at most two */
static uint32_t kernel_lanes(const qpack_model_params *o)
{
    return o->schedule != QPACK_SCHEDULE_KERNEL ? 0 : o->threads == 1 ? 1 : 2;
}

static int open_container(struct qp_engine *e, const char *path, const qpack_model_params *o, uint32_t block,
                          qp_err *err)
{
    double t0 = qp_now_ms();
    if (qpk_open(&e->file, path, 0, err))
        return -1;
    e->file_open = true;
    uint32_t slots = o->max_sessions ? o->max_sessions : 1;
    block = pick_block(block);
    if (size_for_memory(e, o, slots, block, err))
        return -1;
    if (!o->no_verify &&
        qpk_verify_all_progress(&e->file, o->progress ? checksum_progress : NULL, (void *)o, err))
        return -1;
    e->checksum_ms = o->no_verify ? 0 : qp_now_ms() - t0;
    const struct qpk_config *c = &e->file.cfg;
    e->vocab = c->vocab;
    e->hidden = c->hidden;
    e->n_layers = c->n_layers;
    if (qp_plan_build(&e->plan, &e->file, e->ctx, slots, block, o->stream, o->kv_cache == QPACK_KV_INT8, err))
        return -1;
    e->plan.cfg.call_budget_ns = call_budget_ns(o->call_us);
    e->plan.kernel_lanes = kernel_lanes(o);
    report(o, QPACK_LOAD_MAPS, 0, e->plan.weight_bytes);
    int rc = o->backend == QPACK_BACKEND_BPF ? qp_bpf_create(&e->b, &e->plan, err)
                                          : qp_emu_create(&e->b, &e->plan, err);
    if (!rc)
        report(o, QPACK_LOAD_WEIGHTS, e->plan.weight_bytes, e->plan.weight_bytes);
    /* the BPF maps hold their own copy: the container's pages the plan read
     * leave this process (the host twin keeps reading them) */
    if (!rc && o->backend == QPACK_BACKEND_BPF)
        madvise(e->file.map, e->file.size, MADV_DONTNEED);
    return rc || qp_forward_create(&e->fw, e->b, &e->plan, o->threads ? o->threads : 2, err);
}

static int open_reference(struct qp_engine *e, const char *dir, const qpack_model_params *o, qp_err *err)
{
    struct qwen3_config probe;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (hf_config_load(path, &probe, err))
        return -1;
    e->ctx = pick_ctx(o->ctx, probe.max_position_embeddings);
    if (e->ctx > probe.max_position_embeddings)
        return qp_fail(err, "context %u is past the model's %u positions", e->ctx, probe.max_position_embeddings);
    if (ref_open(&e->ref, dir, e->ctx, err))
        return -1;
    e->vocab = probe.vocab_size;
    e->hidden = probe.hidden_size;
    e->n_layers = probe.num_hidden_layers;
    return 0;
}

/* A model qpack load pinned: the manifest's container and plan, checked
 * against the pinned objects; nothing verified, loaded or copied. */
static int open_resident(struct qp_engine *e, const char *name, const qpack_model_params *o, qp_err *err)
{
    if (o->backend != QPACK_BACKEND_BPF)
        return qp_fail_code(err, QP_E_ARGUMENT, "a loaded model (%s%s) runs in BPF: --backend %s does not apply",
                            QP_PIN_PREFIX, name, qp_backend_name(o->backend));
    if (!(e->pin = malloc(sizeof *e->pin)))
        return qp_fail_code(err, QP_E_MEMORY, "out of memory");
    if (qp_pin_open(e->pin, name, err))
        return -1;
    const struct qp_pin_manifest *m = &e->pin->man;
    if (qpk_open(&e->file, m->container, 0, err))
        return -1;
    e->file_open = true;
    if (qp_pin_check_container(e->pin, &e->file, err))
        return -1;
    const struct qpk_config *c = &e->file.cfg;
    e->ctx = m->ctx;
    e->vocab = c->vocab;
    e->hidden = c->hidden;
    e->n_layers = c->n_layers;
    struct qk_config *pinned = malloc(sizeof *pinned);
    int rc = !pinned ? qp_fail_code(err, QP_E_MEMORY, "out of memory")
             : qp_bpf_pinned_config(e->pin->dir, pinned, err)
                 ? -1
                 : qp_plan_build_with(&e->plan, &e->file, m->ctx, m->slots, m->block, m->kv8, pinned, err);
    free(pinned);
    if (rc)
        return -1;
    e->plan.cfg.call_budget_ns = m->call_budget_ns;
    if (o->schedule == QPACK_SCHEDULE_KERNEL && !m->kernel_schedule)
        return qp_fail_code(err, QP_E_ARGUMENT, "--schedule kernel: %s%s was loaded without it (qpack load "
                            "--schedule kernel pins its work items)", QP_PIN_PREFIX, name);
    e->plan.kernel_lanes = kernel_lanes(o);
    if (qp_bpf_attach(&e->b, &e->plan, e->pin->dir, err))
        return -1;
    madvise(e->file.map, e->file.size, MADV_DONTNEED);
    return qp_forward_create(&e->fw, e->b, &e->plan, o->threads ? o->threads : 2, err);
}

/* What the kernel schedule does not run yet is refused, never run by the
 * host instead. */
static int check_schedule(const qpack_model_params *o, qp_err *err)
{
    if (o->schedule == QPACK_SCHEDULE_HOST)
        return 0;
    if (o->schedule != QPACK_SCHEDULE_KERNEL)
        return qp_fail_code(err, QP_E_ARGUMENT, "unknown schedule %d", (int)o->schedule);
    if (o->backend != QPACK_BACKEND_BPF)
        return qp_fail_code(err, QP_E_ARGUMENT, "--schedule kernel runs in BPF: not with --backend %s",
                            qp_backend_name(o->backend));
    if (o->stream)
        return qp_fail_code(err, QP_E_ARGUMENT, "--schedule kernel does not run --stream yet (its jobs stage "
                            "weights from the host)");
    return 0;
}

int qp_engine_open(struct qp_engine *e, const char *path, const qpack_model_params *o, uint32_t block, qp_err *err)
{
    memset(e, 0, sizeof *e);
    e->kind = o->backend;
    if (check_schedule(o, err))
        return -1;
    double t0 = qp_now_ms();
    size_t np = strlen(QP_PIN_PREFIX);
    int rc = !strncmp(path, QP_PIN_PREFIX, np)      ? open_resident(e, path + np, o, err)
             : o->backend == QPACK_BACKEND_REF ? open_reference(e, path, o, err)
                                               : open_container(e, path, o, block, err);
    if (!rc) {
        e->logits = malloc((size_t)e->vocab * sizeof *e->logits);
        rc = e->logits ? 0 : qp_fail(err, "out of memory");
    }
    if (rc) {
        qp_engine_close(e);
        return -1;
    }
    e->load_ms = qp_now_ms() - t0;
    return 0;
}

void qp_engine_close(struct qp_engine *e)
{
    qp_forward_destroy(e->fw);
    if (e->b)
        e->b->destroy(e->b);
    qp_plan_free(&e->plan);
    if (e->file_open)
        qpk_close(&e->file);
    ref_close(e->ref);
    free(e->logits);
    if (e->pin)
        qp_pin_close(e->pin);
    free(e->pin);
    memset(e, 0, sizeof *e);
}

/* the largest of the reference's logits, lowest index on ties */
static uint32_t reference_argmax(const struct qp_engine *e)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < e->vocab; i++)
        if (e->logits[i] > e->logits[best])
            best = i;
    return best;
}

/* the reference: one position at a time */
static int feed_reference(struct qp_engine *e, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                          enum qp_logits want, qp_engine_logits_fn on_logits, void *arg, uint32_t *next,
                          qp_err *err)
{
    for (uint32_t i = 0; i < n; i++) {
        if (ref_forward(e->ref, tokens[i], pos0 + i, e->logits, err))
            return -1;
        e->argmax = reference_argmax(e);
        if (want == QP_LOGITS_ALL && on_logits && on_logits(arg, pos0 + i, err))
            return -1;
    }
    if (want != QP_LOGITS_NONE && next)
        *next = e->argmax;
    return 0;
}

/* entry b of the last block's logits -> e->logits */
static void take_logits(struct qp_engine *e, uint32_t b)
{
    e->logits_q32 = qp_forward_logits(e->fw, b);
    e->argmax = qp_forward_argmax(e->fw, b);
    for (uint32_t i = 0; i < e->vocab; i++)
        e->logits[i] = ldexp((double)e->logits_q32[i], -QM_RESID_FRAC);
}

/* A loaded model's state maps are every process's: one forward block at a
 * time, from its first kernel to the last read of its logits. */
static int step_lock(struct qp_engine *e, qp_err *err)
{
    return e->pin ? qp_pin_lock(e->pin, err) : 0;
}

static void step_unlock(struct qp_engine *e)
{
    if (e->pin)
        qp_pin_unlock(e->pin);
}

static int feed_block(struct qp_engine *e, uint32_t slot, const uint32_t *tokens, uint32_t len, uint32_t pos0,
                      enum qp_logits mode, qp_engine_logits_fn on_logits, void *arg, qp_err *err)
{
    if (qp_forward_block(e->fw, slot, tokens, len, pos0, mode, err))
        return -1;
    for (uint32_t b = 0; mode == QP_LOGITS_ALL && b < len; b++) {
        take_logits(e, b);
        if (on_logits && on_logits(arg, pos0 + b, err))
            return -1;
    }
    if (mode == QP_LOGITS_LAST)
        take_logits(e, len - 1);
    return 0;
}

int qp_engine_feed(struct qp_engine *e, uint32_t slot, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                         enum qp_logits want, qp_engine_logits_fn on_logits, void *arg, uint32_t *next,
                         qp_err *err)
{
    if (e->kind == QPACK_BACKEND_REF && slot != 0)
        return qp_fail_code(err, QP_E_ARGUMENT, "the reference holds one sequence (slot 0), not slot %u", slot);
    if (e->kind == QPACK_BACKEND_REF)
        return feed_reference(e, tokens, n, pos0, want, on_logits, arg, next, err);
    uint32_t block = qp_forward_block_size(e->fw);
    for (uint32_t at = 0; at < n; at += block) {
        uint32_t len = n - at < block ? n - at : block;
        bool last_block = at + len == n;
        enum qp_logits mode = want == QP_LOGITS_ALL ? QP_LOGITS_ALL
                              : want == QP_LOGITS_LAST && last_block ? QP_LOGITS_LAST : QP_LOGITS_NONE;
        if (step_lock(e, err))
            return -1;
        int rc = feed_block(e, slot, tokens + at, len, pos0 + at, mode, on_logits, arg, err);
        if (!rc && mode != QP_LOGITS_NONE && last_block && next)
            *next = qp_forward_argmax(e->fw, len - 1);
        step_unlock(e);
        if (rc)
            return -1;
    }
    return 0;
}

int qp_engine_feed_batch(struct qp_engine *e, const struct qp_entry *ent, const bool *want, uint32_t n,
                         qp_engine_batch_fn on_logits, void *arg, qp_err *err)
{
    if (e->kind == QPACK_BACKEND_REF)
        return qp_fail_code(err, QP_E_ARGUMENT, "the reference holds one sequence: no batches");
    uint32_t block = qp_forward_block_size(e->fw);
    struct qp_entry order[QK_MAX_BLOCK];
    uint32_t index[QK_MAX_BLOCK];
    for (uint32_t at = 0; at < n; at += block) {
        uint32_t len = n - at < block ? n - at : block, head = 0, wanted = 0;
        for (uint32_t i = at; i < at + len; wanted += want[i++])
            ;
        for (uint32_t i = at, tail = len - wanted; i < at + len; i++) {
            uint32_t b = want[i] ? tail++ : head++;
            order[b] = ent[i];
            index[b] = i;
        }
        if (step_lock(e, err))
            return -1;
        int rc = qp_forward_batch(e->fw, order, len, len - wanted, err);
        for (uint32_t b = len - wanted; !rc && b < len; b++)
            rc = on_logits(arg, index[b], qp_forward_logits(e->fw, b), qp_forward_argmax(e->fw, b), err);
        step_unlock(e);
        if (rc)
            return -1;
    }
    return 0;
}

int qp_engine_step(struct qp_engine *e, uint32_t token, uint32_t pos, bool want_logits, uint32_t *next,
                    qp_err *err)
{
    return qp_engine_feed(e, 0, &token, 1, pos, want_logits ? QP_LOGITS_LAST : QP_LOGITS_NONE, NULL, NULL, next, err);
}

void qp_engine_kv_shape(const struct qp_engine *e, uint32_t *n_runs, uint32_t *row_bytes)
{
    const struct qp_plan *p = &e->plan;
    *n_runs = e->n_layers * (p->cfg.kv8 ? p->cfg.n_kv_heads : 1);
    *row_bytes = (uint32_t)p->maps[QP_MAP_KCACHE].value_size;
}

int qp_engine_slot_rows(struct qp_engine *e, uint32_t kv_slot, uint32_t n, uint8_t *rows[2], bool to_cache,
                        qp_err *err)
{
    const struct qp_plan *p = &e->plan;
    if (!e->b || kv_slot >= p->cfg.kv_slots || n > e->ctx)
        return qp_fail(err, "cannot move %u positions of KV cache slot %u", n, kv_slot);
    uint32_t runs, row;
    qp_engine_kv_shape(e, &runs, &row);
    const enum qp_map_id caches[] = {QP_MAP_KCACHE, QP_MAP_VCACHE};
    for (size_t c = 0; c < 2; c++) {
        uint8_t *base = e->b->state(e->b, caches[c]);
        if (!base)
            return qp_fail(err, "the KV cache (map %s) cannot be reached", p->maps[caches[c]].name);
        /* rows as qp_engine_copy_slot's: (kv_slot * runs + run) * ctx + position */
        for (size_t r = 0; r < runs; r++) {
            uint8_t *cache = base + ((size_t)kv_slot * runs + r) * e->ctx * row;
            uint8_t *buf = rows[c] + r * (size_t)n * row;
            memcpy(to_cache ? cache : buf, to_cache ? buf : cache, (size_t)n * row);
        }
    }
    return 0;
}

int qp_engine_copy_slot(struct qp_engine *e, uint32_t dst, uint32_t src, uint32_t n, qp_err *err)
{
    const struct qp_plan *p = &e->plan;
    if (!e->b || dst >= p->cfg.kv_slots || src >= p->cfg.kv_slots || n > e->ctx)
        return qp_fail(err, "cannot copy %u positions of KV cache slot %u into slot %u", n, src, dst);
    if (dst == src || n == 0)
        return 0;
    const enum qp_map_id caches[] = {QP_MAP_KCACHE, QP_MAP_VCACHE};
    for (size_t c = 0; c < 2; c++) {
        uint8_t *base = e->b->state(e->b, caches[c]);
        size_t row = p->maps[caches[c]].value_size;
        if (!base)
            return qp_fail(err, "the KV cache (map %s) cannot be reached", p->maps[caches[c]].name);
        /* rows (slot * runs + run) * ctx + position: a run per layer
         * (qk_kv_row0), for the 8-bit cache per layer and KV head (qk_kv8_vec) */
        size_t runs = (size_t)e->n_layers * (p->cfg.kv8 ? p->cfg.n_kv_heads : 1);
        for (size_t r = 0; r < runs; r++) {
            size_t from = ((size_t)src * runs + r) * e->ctx, to = ((size_t)dst * runs + r) * e->ctx;
            memcpy(base + to * row, base + from * row, (size_t)n * row);
        }
    }
    return 0;
}
