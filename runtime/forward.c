/* forward.c - the schedule of one token and the two-thread pool.
 *
 * Parallel steps are cut into jobs of at most MACS_PER_CALL multiply-adds
 * (about half a millisecond in BPF) and taken from a shared counter by both
 * threads; integer sums do not depend on who computes which rows, so the
 * result is the same bits for any split. */
#include "forward.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MACS_PER_CALL (2u << 20)
#define MAX_JOBS 4096

/* --stream: where a job's weight blocks come from (args.work_key is
 * where they go) */
struct job_source {
    enum qp_map_id map;
    uint32_t key;
};

struct job_list {
    enum qp_kernel kernel[MAX_JOBS];
    struct qk_args args[MAX_JOBS];
    struct job_source src[MAX_JOBS];    /* --stream products: staged by the job itself */
    uint32_t n;
    atomic_uint next;           /* next job to take */
    atomic_int failed;
    qp_err err;
};

struct qp_forward {
    struct qp_backend *b;
    const struct qp_plan *plan;
    const struct qk_config *cfg;
    struct qk_args pending[MAX_JOBS];   /* --stream: the whole list, run in batches */
    enum qp_kernel pending_kernel[MAX_JOBS];
    unsigned threads;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    atomic_uint_fast64_t generation;    /* bumped for each job list */
    uint64_t seen;              /* the worker's: the last generation it ran */
    atomic_bool worker_busy;    /* the worker may still touch the job list */
    atomic_bool stop;
    struct job_list jobs;
    struct qp_forward_stats stats;
    pthread_mutex_t stats_mu;
    void (*on_layer)(void *, uint32_t);
    void *on_layer_arg;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int call(struct qp_forward *fw, enum qp_kernel k, const struct qk_args *a, qp_err *err)
{
    double t0 = now_ms();
    int rc = fw->b->run(fw->b, k, a, err);
    double ms = now_ms() - t0;
    pthread_mutex_lock(&fw->stats_mu);
    fw->stats.calls++;
    fw->stats.kernel_ms[k] += ms;
    fw->stats.kernel_calls[k]++;
    fw->stats.slow_calls += ms > QP_SLOW_CALL_MS;
    if (ms > fw->stats.max_call_ms) {
        fw->stats.max_call_ms = ms;
        snprintf(fw->stats.max_call_kernel, sizeof fw->stats.max_call_kernel, "%s", qp_kernel_name(k));
    }
    pthread_mutex_unlock(&fw->stats_mu);
    return rc;
}

/* --stream: reads n blocks of `block` bytes from the container, starting
 * at src (a pointer into its mapping), to work keys [key, key + n): one
 * qpk_readv per IOV_BATCH blocks. Reading rather than copying from the
 * mapping keeps the model out of this process's memory (--stream is for
 * hosts without room for it) and takes no page faults, which on this VM
 * cost more than the copy. */
#define IOV_BATCH 256

static int read_blocks(struct qp_forward *fw, const uint8_t *src, uint32_t key, uint32_t n, uint32_t block,
                       qp_err *err)
{
    const struct qpk_file *f = fw->plan->file;
    uint32_t stride = fw->plan->maps[QP_MAP_WORK].value_size;
    uint8_t *dst = fw->b->work + (uint64_t)key * stride;
    struct iovec iov[IOV_BATCH];
    for (uint32_t done = 0; done < n;) {
        uint32_t count = n - done < IOV_BATCH ? n - done : IOV_BATCH;
        for (uint32_t b = 0; b < count; b++)
            iov[b] = (struct iovec){dst + (uint64_t)(done + b) * stride, block};
        uint64_t at = (uint64_t)(src - f->map) + (uint64_t)done * block;
        if (qpk_readv(f, at, iov, (int)count))
            return errno == EFAULT
                       ? qp_fail(err, "%s: the model file was truncated or changed on disk while qrun was reading it",
                                 f->path)
                       : qp_fail(err, "%s: reading weights at byte %llu: %s", f->path, (unsigned long long)at,
                                 strerror(errno));
        done += count;
    }
    return 0;
}

/* --stream: copies blocks [group, group + n) of a weight map, verbatim, to
 * work keys [key, key + n), one read per run of blocks adjacent in the file. */
static int stage(struct qp_forward *fw, enum qp_map_id map, uint32_t group, uint32_t n, uint32_t key, qp_err *err)
{
    const struct qp_mapspec *w = &fw->plan->maps[QP_MAP_WORK], *m = &fw->plan->maps[map];
    const uint8_t *run_src = NULL;
    uint32_t run = 0;           /* blocks [b - run, b) are adjacent in the file */
    for (uint32_t b = 0; b < n; b++) {
        const uint8_t *src = qp_plan_block(fw->plan, map, group + b);
        if (!src || key + b >= w->max_entries)
            return qp_fail(err, "internal: block %u of %s cannot be staged", group + b, m->name);
        if (run && src != run_src + (uint64_t)run * m->value_size) {
            if (read_blocks(fw, run_src, key + b - run, run, m->value_size, err))
                return -1;
            run = 0;
        }
        if (!run)
            run_src = src;
        run++;
    }
    return run ? read_blocks(fw, run_src, key + n - run, run, m->value_size, err) : 0;
}

/* Runs job i; a --stream product first stages its own blocks, so each
 * thread reads while the other computes. */
static int run_job(struct qp_forward *fw, unsigned i, qp_err *err)
{
    struct job_list *j = &fw->jobs;
    const struct qk_args *a = &j->args[i];
    bool staged = j->kernel[i] == QP_K_MATVEC_STREAM || j->kernel[i] == QP_K_MATVEC4_STREAM;
    if (staged && stage(fw, j->src[i].map, j->src[i].key, (a->end - a->begin) / 4, a->work_key, err))
        return -1;
    return call(fw, j->kernel[i], a, err);
}

/* Takes jobs until none are left. */
static void drain(struct qp_forward *fw)
{
    struct job_list *j = &fw->jobs;
    for (;;) {
        unsigned i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n)
            return;
        qp_err err;
        if (!atomic_load(&j->failed) && run_job(fw, i, &err) != 0 && atomic_exchange(&j->failed, 1) == 0)
            j->err = err;
    }
}

/* A thread that waits for the other one first spins for up to SPIN_US: the
 * waits between the steps of a token are tens of microseconds, and a
 * sleeping thread's wake-up costs more than that on a virtual machine
 * (measured: scripts/bench_qrun.sh). Past SPIN_US it sleeps on a condition
 * variable, so an idle qrun (a chat waiting for input) takes no CPU. */
#define SPIN_US 2000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Spins until done(fw) holds or SPIN_US pass; returns whether it held. */
static bool spin_until(struct qp_forward *fw, bool (*done)(struct qp_forward *))
{
    double deadline = 0;
    for (unsigned i = 1;; i++) {
        if (done(fw))
            return true;
        cpu_relax();
        if (i % 256 == 0) {
            double t = now_ms();
            if (deadline == 0)
                deadline = t + SPIN_US / 1e3;
            else if (t > deadline)
                return false;
        }
    }
}

static bool has_work(struct qp_forward *fw)
{
    return atomic_load(&fw->stop) || atomic_load(&fw->generation) != fw->seen;
}

static bool worker_idle(struct qp_forward *fw)
{
    return !atomic_load(&fw->worker_busy);
}

static void *worker_main(void *arg)
{
    struct qp_forward *fw = arg;
    for (;;) {
        if (!spin_until(fw, has_work)) {
            pthread_mutex_lock(&fw->mu);
            while (!has_work(fw))
                pthread_cond_wait(&fw->wake, &fw->mu);
            pthread_mutex_unlock(&fw->mu);
        }
        if (atomic_load(&fw->stop))
            return NULL;
        fw->seen = atomic_load(&fw->generation);
        drain(fw);
        atomic_store(&fw->worker_busy, false);
        pthread_mutex_lock(&fw->mu);    /* run_jobs may be asleep on it */
        pthread_cond_signal(&fw->finished);
        pthread_mutex_unlock(&fw->mu);
    }
}

/* Runs the prepared job list on every thread and waits for all of it. */
static int run_jobs(struct qp_forward *fw, qp_err *err)
{
    struct job_list *j = &fw->jobs;
    atomic_store(&j->next, 0);
    atomic_store(&j->failed, 0);
    bool both = fw->threads > 1 && j->n > 1;
    if (both) {
        atomic_store(&fw->worker_busy, true);
        pthread_mutex_lock(&fw->mu);
        atomic_fetch_add(&fw->generation, 1);
        pthread_cond_signal(&fw->wake);
        pthread_mutex_unlock(&fw->mu);
    }
    drain(fw);
    /* the list is rewritten next: the worker must be done with it */
    if (both && !spin_until(fw, worker_idle)) {
        pthread_mutex_lock(&fw->mu);
        while (!worker_idle(fw))
            pthread_cond_wait(&fw->finished, &fw->mu);
        pthread_mutex_unlock(&fw->mu);
    }
    if (atomic_load(&j->failed)) {
        *err = j->err;
        return -1;
    }
    return 0;
}

/* --stream: runs fw->pending[0, n) in batches that fit the work map. */
static int run_streamed(struct qp_forward *fw, uint32_t n, qp_err *err)
{
    struct job_list *j = &fw->jobs;
    uint32_t capacity = fw->plan->maps[QP_MAP_WORK].max_entries;
    for (uint32_t first = 0; first < n;) {
        uint32_t used = 0, count = 0;
        while (first + count < n) {
            struct qk_args a = fw->pending[first + count];
            uint32_t blocks = (a.end - a.begin) / 4;
            if (count && used + blocks > capacity)
                break;
            a.streamed = 1;
            a.work_key = used;
            qp_plan_matvec_source(fw->plan, a.layer, a.mode, a.begin, &j->src[count].map, &j->src[count].key);
            j->kernel[count] = fw->pending_kernel[first + count] == QP_K_MATVEC4 ? QP_K_MATVEC4_STREAM
                                                                                 : QP_K_MATVEC_STREAM;
            j->args[count++] = a;
            used += blocks;
        }
        j->n = count;
        if (run_jobs(fw, err))
            return -1;
        first += count;
    }
    return 0;
}

/* does the product read an i4g matrix (and so the quantised act vector)? */
static bool reads_i4(const struct qp_plan *p, uint32_t layer, uint32_t mode, uint32_t rows)
{
    for (uint32_t r = 0; r < rows;) {
        struct qp_matrix_rows m = qp_plan_matrix_of(p, layer, mode, r);
        if (m.i4)
            return true;
        r = m.row0 + m.rows;
    }
    return false;
}

/* Jobs over rows [0, rows) in steps of whole 4-row groups of bounded work. */
static int matvec(struct qp_forward *fw, uint32_t layer, uint32_t mode, uint32_t rows, uint32_t cols,
                  uint32_t *slots, qp_err *err)
{
    struct job_list *j = &fw->jobs;
    uint32_t step = MACS_PER_CALL / cols / 4 * 4;
    uint32_t half = (rows / fw->threads + 3) / 4 * 4;   /* every thread gets a job */
    step = step > half ? half : step;
    step = step < 4 ? 4 : step;
    if (fw->plan->stream) {
        uint32_t fit = fw->plan->maps[QP_MAP_WORK].max_entries / 2 * 4; /* two jobs per batch at least */
        step = step > fit ? fit : step;
    }
    if (reads_i4(fw->plan, layer, mode, rows)) {
        struct qk_args q = {.layer = layer, .mode = mode};
        if (call(fw, QP_K_QUANT_X, &q, err))
            return -1;
    }
    struct qk_args *list = fw->plan->stream ? fw->pending : j->args;
    enum qp_kernel *kernels = fw->plan->stream ? fw->pending_kernel : j->kernel;
    uint32_t n = 0;
    for (uint32_t first = 0; first < rows;) {   /* a job never spans two matrices */
        struct qp_matrix_rows m = qp_plan_matrix_of(fw->plan, layer, mode, first);
        uint32_t end = m.row0 + m.rows;
        for (uint32_t r = first; r < end; r += step) {
            if (n == MAX_JOBS || n == QK_MAX_ARGMAX_SLOTS)
                return qp_fail(err, "internal: too many jobs for one matrix");
            list[n] = (struct qk_args){.layer = layer, .mode = mode, .begin = r,
                                       .end = r + step < end ? r + step : end, .slot = n};
            kernels[n++] = m.i4 ? QP_K_MATVEC4 : QP_K_MATVEC;
        }
        first = end;
    }
    if (slots)
        *slots = n;
    if (fw->plan->stream)
        return run_streamed(fw, n, err);
    j->n = n;
    return run_jobs(fw, err);
}

/* Attention (head, chunk) tasks, a few per job; then the per-head merge. */
static int attention(struct qp_forward *fw, uint32_t layer, uint32_t pos, qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    uint32_t chunks = pos / QK_ATTN_CHUNK + 1, tasks = c->n_heads * chunks;
    uint32_t per_task = (pos + 1 < QK_ATTN_CHUNK ? pos + 1 : QK_ATTN_CHUNK) * c->head_dim * 2;
    uint32_t step = MACS_PER_CALL / per_task;
    step = step < 1 ? 1 : step;
    uint32_t parts = fw->threads > 1 ? 2 : 1;  /* at least one job per thread */
    if (step > (tasks + parts - 1) / parts)
        step = (tasks + parts - 1) / parts;
    struct job_list *j = &fw->jobs;
    j->n = 0;
    for (uint32_t t = 0; t < tasks; t += step) {
        j->kernel[j->n] = QP_K_ATTENTION;
        j->args[j->n++] = (struct qk_args){.layer = layer, .pos = pos, .begin = t,
                                           .end = t + step < tasks ? t + step : tasks};
    }
    if (run_jobs(fw, err))
        return -1;
    struct qk_args a = {.layer = layer, .pos = pos, .begin = 0, .end = c->n_heads};
    return call(fw, QP_K_ATTN_MERGE, &a, err);
}

static int layer(struct qp_forward *fw, uint32_t l, uint32_t pos, qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    struct qk_args norm_attn = {.layer = l, .mode = QK_NORM_ATTN};
    struct qk_args norm_mlp = {.layer = l, .mode = QK_NORM_MLP};
    struct qk_args rope = {.layer = l, .pos = pos};
    struct qk_args none = {0};
    return call(fw, QP_K_RMSNORM, &norm_attn, err) ||
           matvec(fw, l, QK_MV_QKV, c->q_dim + 2 * c->kv_dim, c->hidden, NULL, err) ||
           call(fw, QP_K_ROPE_STORE, &rope, err) || attention(fw, l, pos, err) ||
           matvec(fw, l, QK_MV_O, c->hidden, c->q_dim, NULL, err) ||
           call(fw, QP_K_RMSNORM, &norm_mlp, err) ||
           matvec(fw, l, QK_MV_GATE_UP, 2 * c->inter, c->hidden, NULL, err) ||
           call(fw, QP_K_SWIGLU, &none, err) ||
           matvec(fw, l, QK_MV_DOWN, c->hidden, c->inter, NULL, err);
}

int qp_forward_token(struct qp_forward *fw, uint32_t token, uint32_t pos, bool logits, uint32_t *next,
                     qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    if (token >= c->vocab)
        return qp_fail(err, "token id %u is outside the vocabulary (%u)", token, c->vocab);
    if (pos >= c->ctx)
        return qp_fail(err, "position %u is past the context of %u tokens (see -c)", pos, c->ctx);
    struct qk_args embed = {.token = token};
    if (fw->plan->stream) {
        embed.streamed = 1;
        if (stage(fw, c->embed_i4 ? QP_MAP_W4_HID : QP_MAP_W_HID, c->embed_key + token / 4, 1, 0, err))
            return -1;
    }
    if (call(fw, QP_K_EMBED, &embed, err))
        return -1;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        if (layer(fw, l, pos, err))
            return -1;
        if (fw->on_layer)
            fw->on_layer(fw->on_layer_arg, l);
    }
    if (!logits)
        return 0;
    struct qk_args norm = {.mode = QK_NORM_FINAL};
    uint32_t slots;
    if (call(fw, QP_K_RMSNORM, &norm, err) || matvec(fw, 0, QK_MV_LOGITS, c->vocab, c->hidden, &slots, err))
        return -1;
    struct qk_args reduce = {.n_slots = slots};
    if (call(fw, QP_K_ARGMAX_REDUCE, &reduce, err))
        return -1;
    if (next)
        *next = fw->b->scal->argmax_index;
    return 0;
}

int qp_forward_create(struct qp_forward **out, struct qp_backend *b, const struct qp_plan *plan,
                      unsigned threads, qp_err *err)
{
    struct qp_forward *fw = calloc(1, sizeof *fw);
    if (!fw)
        return qp_fail(err, "out of memory");
    fw->b = b;
    fw->plan = plan;
    fw->cfg = &plan->cfg;
    fw->threads = threads > 1 ? 2 : 1;
    pthread_mutex_init(&fw->mu, NULL);
    pthread_mutex_init(&fw->stats_mu, NULL);
    pthread_cond_init(&fw->wake, NULL);
    pthread_cond_init(&fw->finished, NULL);
    if (fw->threads > 1 && pthread_create(&fw->worker, NULL, worker_main, fw) != 0)
        fw->threads = 1;
    *out = fw;
    return 0;
}

void qp_forward_destroy(struct qp_forward *fw)
{
    if (!fw)
        return;
    if (fw->threads > 1) {
        pthread_mutex_lock(&fw->mu);
        atomic_store(&fw->stop, true);
        pthread_cond_signal(&fw->wake);
        pthread_mutex_unlock(&fw->mu);
        pthread_join(fw->worker, NULL);
    }
    pthread_mutex_destroy(&fw->mu);
    pthread_mutex_destroy(&fw->stats_mu);
    pthread_cond_destroy(&fw->wake);
    pthread_cond_destroy(&fw->finished);
    free(fw);
}

void qp_forward_on_layer(struct qp_forward *fw, void (*cb)(void *, uint32_t), void *arg)
{
    fw->on_layer = cb;
    fw->on_layer_arg = arg;
}

const struct qp_forward_stats *qp_forward_stats(const struct qp_forward *fw)
{
    return &fw->stats;
}
