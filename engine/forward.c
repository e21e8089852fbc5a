/* forward.c - the schedule of a forward pass: which kernel runs when, on
 * which rows, heads and positions.
 *
 * Parallel steps are cut into jobs of at most MACS_PER_CALL multiply-adds
 * (about half a millisecond in BPF) and shared by the pool's threads
 * (pool.h); integer sums do not depend on who computes which rows, so the
 * result is the same bits for any split. */
#include "forward.h"

#include "clock.h"
#include "pool.h"
#include "stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define MACS_PER_CALL (2u << 20)
#define JOBS_PER_THREAD 2       /* at least, per product */
#define MAX_JOBS 4096

/* --stream: where a job's weight row blocks come from (args.work_key is
 * where they go) */
struct job_source {
    enum qp_map_id map;
    uint32_t key;
};

/* the jobs the pool runs next: one kernel invocation each */
struct job_list {
    enum qp_kernel kernel[MAX_JOBS];
    struct qk_args args[MAX_JOBS];
    struct job_source src[MAX_JOBS];    /* --stream products: staged by the job itself */
    uint32_t n;
};

struct qp_forward {
    struct qp_backend *b;
    const struct qp_plan *plan;
    const struct qk_config *cfg;
    struct qk_args pending[MAX_JOBS];   /* --stream: the whole list, run in batches */
    enum qp_kernel pending_kernel[MAX_JOBS];
    struct qp_pool *pool;
    unsigned threads;           /* the pool's */
    struct job_list jobs;
    struct qp_forward_stats stats;
    pthread_mutex_t stats_mu;
    void (*on_layer)(void *, uint32_t);
    void *on_layer_arg;
    const atomic_bool *interrupt;       /* when set, every later invocation fails at once */
    bool recording;             /* --schedule kernel: invocations go to the backend's job list */
    uint32_t recorded;          /* ... this many so far */
};

/* the kernels that stop at the model's call_budget_ns and resume (QK_RET_PARTIAL):
 * every other kernel's work per entry is small and bounded by its size */
static bool resumes(enum qp_kernel k)
{
    switch (k) {
    case QP_K_MATVEC_Q24: case QP_K_MATVEC_I8: case QP_K_MATVEC_I8_BLOCK: case QP_K_MATVEC_I4:
    case QP_K_MATVEC_I4_BLOCK: case QP_K_MATVEC_I6: case QP_K_MATVEC_I6_BLOCK:
    case QP_K_ATTENTION: case QP_K_ATTENTION8:
        return true;
    default:
        return false;
    }
}

/* a paused invocation's arguments for the rest of its units */
static void resume_after(struct qk_args *a, enum qp_kernel k, uint32_t units)
{
    if (k == QP_K_ATTENTION || k == QP_K_ATTENTION8) {
        a->begin += units;
        return;
    }
    a->begin += 4 * units;
    a->work_key += units;       /* --stream: the row blocks were staged in order */
    a->resume = 1;
}

/* one program run; first: the invocation's first (the others are counted
 * as paused calls only) */
static int call_once(struct qp_forward *fw, enum qp_kernel k, const struct qk_args *a, bool first, qp_err *err)
{
    double t0 = qp_now_ms();
    uint64_t prog_ns = 0;
    int rc = fw->b->run(fw->b, k, a, &prog_ns, err);
    double ms = qp_now_ms() - t0, prog_ms = prog_ns / 1e6;
    pthread_mutex_lock(&fw->stats_mu);
    fw->stats.calls += first;
    fw->stats.paused_calls += rc >= QK_RET_PARTIAL;
    fw->stats.kernel_ms[k] += ms;
    fw->stats.kernel_calls[k] += first;
    fw->stats.slow_calls += ms > QP_SLOW_CALL_MS;
    fw->stats.slow_progs += prog_ms > QP_SLOW_CALL_MS;
    if (prog_ms > fw->stats.max_prog_ms) {
        fw->stats.max_prog_ms = prog_ms;
        snprintf(fw->stats.max_prog_kernel, sizeof fw->stats.max_prog_kernel, "%s", qp_kernel_name(k));
    }
    if (ms > fw->stats.max_call_ms) {
        fw->stats.max_call_ms = ms;
        snprintf(fw->stats.max_call_kernel, sizeof fw->stats.max_call_kernel, "%s", qp_kernel_name(k));
    }
    pthread_mutex_unlock(&fw->stats_mu);
    return rc;
}

/* --schedule kernel: an invocation becomes the next job of the backend's
 * list, which the kernel runs after the whole step is listed */
static int record(struct qp_forward *fw, enum qp_kernel k, const struct qk_args *a, qp_err *err)
{
    if (fw->recorded == QK_CHAIN_MAX_JOBS)
        return qp_fail_code(err, QP_E_ARGUMENT, "a step of more than %u kernel invocations is too long for "
                            "--schedule kernel (use a smaller block, or --schedule host)", QK_CHAIN_MAX_JOBS);
    /* a phase of its own, unless run_jobs lists a phase of several */
    fw->b->jobs[fw->recorded] = (struct qk_job){.program = k, .phase_end = fw->recorded + 1, .args = *a};
    fw->recorded++;
    fw->stats.calls++;
    fw->stats.kernel_calls[k]++;
    return 0;
}

/* One kernel invocation, in as many calls as its time budget needs: a
 * product or attention that runs out of the call budget returns to user space,
 * where the scheduler may give the core to another task, and goes on
 * from the unit it reached. */
static int call(struct qp_forward *fw, enum qp_kernel k, const struct qk_args *a, qp_err *err)
{
    struct qk_args rest = *a;
    for (bool first = true;; first = false) {
        if (fw->interrupt && atomic_load(fw->interrupt))
            return qp_fail_code(err, QP_E_INTERRUPTED, "interrupted");
        if (fw->recording)
            return record(fw, k, a, err);
        int rc = call_once(fw, k, &rest, first, err);
        if (rc < QK_RET_PARTIAL)
            return rc;
        if (!resumes(k))
            return qp_fail(err, "kernel %s returned %d", qp_kernel_name(k), rc);
        resume_after(&rest, k, (uint32_t)(rc - QK_RET_PARTIAL));
    }
}

/* Runs job i on thread `thread` (0: the caller of run_jobs, 1: the
 * worker), which has its own scratch; a --stream product first stages its
 * own row blocks, so each thread reads while the other computes. */
static int run_job(void *ctx, uint32_t i, uint32_t thread, qp_err *err)
{
    struct qp_forward *fw = ctx;
    struct job_list *j = &fw->jobs;
    struct qk_args a = j->args[i];
    a.scratch = thread;
    if (a.streamed && qp_stream_stage(fw->plan, fw->b->work, j->src[i].map, j->src[i].key, (a.end - a.begin) / 4,
                                  a.work_key, err))
        return -1;
    return call(fw, j->kernel[i], &a, err);
}

/* Runs the prepared job list on every thread and waits for all of it. */
static int run_jobs(struct qp_forward *fw, qp_err *err)
{
    if (!fw->recording)
        return qp_pool_run(fw->pool, fw->jobs.n, err);
    /* listed as one phase: the kernel's lanes share its jobs, and the next
     * phase opens once they are all done */
    uint32_t first = fw->recorded;
    for (uint32_t i = 0; i < fw->jobs.n; i++)
        if (run_job(fw, i, 0, err))
            return -1;
    for (uint32_t i = first; i < fw->recorded; i++)
        fw->b->jobs[i].phase_end = fw->recorded;
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
            uint32_t row_blocks = (a.end - a.begin) / 4;
            if (count && used + row_blocks > capacity)
                break;
            a.streamed = 1;
            a.work_key = used;
            qp_plan_matvec_source(fw->plan, a.layer, a.mode, a.begin, &j->src[count].map, &j->src[count].key);
            j->kernel[count] = fw->pending_kernel[first + count];
            j->args[count++] = a;
            used += row_blocks;
        }
        j->n = count;
        if (run_jobs(fw, err))
            return -1;
        first += count;
    }
    return 0;
}

/* The kernels flag a value that left the Q32 range (QM_Q32_LIMIT_BITS):
 * from there on nothing is exact, so the model is refused rather than
 * allowed to print wrong tokens. `where` names the step just run (NULL:
 * layer `layer`). */
static int check_range(const struct qp_forward *fw, const char *where, uint32_t layer, qp_err *err)
{
    if (!fw->b->scal->range_error)
        return 0;
    char at[48];
    if (where)
        snprintf(at, sizeof at, "%s", where);
    else
        snprintf(at, sizeof at, "layer %u", layer);
    return qp_fail_code(err, QP_E_RANGE, "the model's activations left the range the kernels compute exactly (|value| >= 2^%d) "
                        "in the %s: qrun refuses this model rather than print wrong tokens",
                   QM_Q32_LIMIT_BITS - QM_RESID_FRAC, at);
}

/* The kernels skip a block entry whose KV slot or position lies outside the
 * model (qk_seq_of) and say so; the schedule never writes one, so it is a
 * bug, and the step fails rather than leave that entry's values stale. */
static int check_seq(const struct qp_forward *fw, qp_err *err)
{
    if (!fw->b->scal->seq_error)
        return 0;
    return qp_fail_code(err, QP_E_INTERNAL, "internal: a block entry's KV cache slot or position was outside the "
                        "model (the kernels skipped it)");
}

/* BPF instructions a per-entry kernel spends on one block entry, about
 * (counted in build/kernels/qwen3.bpf.o: per element of its loops, with the
 * callbacks' own cost): the measure that keeps its invocations short at
 * any width. */
static uint64_t entry_insns(const struct qp_forward *fw, enum qp_kernel k, const struct qk_args *a)
{
    const struct qk_config *c = fw->cfg;
    uint64_t heads = c->n_heads, d = c->head_dim;
    switch (k) {
    case QP_K_SWIGLU: return 120ull * c->inter;         /* SiLU, one element per callback */
    case QP_K_QUANT_X:
        return 20ull * (a->mode == QK_MV_O ? c->q_dim : a->mode == QK_MV_DOWN ? c->inter : c->hidden);
    case QP_K_ROPE_STORE:
    case QP_K_ROPE_STORE8: return 60 * (heads + c->n_kv_heads) * d;
    case QP_K_ATTN_MERGE: return heads * (a->max_pos / QK_ATTN_CHUNK + 1) * (8 * d + 50) + 30 * heads * d;
    case QP_K_ARGMAX_REDUCE: return 20ull * a->n_amax_slots;
    default: return 25ull * c->hidden;                   /* rmsnorm: four passes */
    }
}

#define ENTRY_INSNS_PER_CALL (4u << 20)   /* a few milliseconds at most */
/* the counts above run at 3.5 to 6 instructions a nanosecond here (qrun
 * --stats' kernel time over entries): 3 keeps a job inside the call budget */
#define ENTRY_INSNS_PER_US 3000u

/* Work one job of a per-entry kernel may hold: the call budget's worth, so
 * that a prompt's per-position kernels yield the core as often as the
 * products do (they do not pause themselves: an entry is their unit). */
static uint64_t entry_insns_per_call(const struct qp_forward *fw)
{
    uint64_t budget = (uint64_t)fw->cfg->call_budget_ns * ENTRY_INSNS_PER_US / 1000;
    return budget && budget < ENTRY_INSNS_PER_CALL ? budget : ENTRY_INSNS_PER_CALL;
}

/* Runs a per-entry kernel over block entries [b0, b0 + nb) in jobs of
 * whole entries, entry_insns_per_call() of work at most (one entry at
 * least), as many jobs as threads at least. */
static int entries(struct qp_forward *fw, enum qp_kernel k, struct qk_args a, uint32_t b0, uint32_t nb, qp_err *err)
{
    a.b0 = b0;
    a.nb = nb;
    uint64_t per_entry = entry_insns(fw, k, &a), fit = entry_insns_per_call(fw) / (per_entry ? per_entry : 1);
    uint32_t jobs = (uint32_t)((nb + (fit ? fit : 1) - 1) / (fit ? fit : 1));
    jobs = (jobs + fw->threads - 1) / fw->threads * fw->threads;
    jobs = jobs > nb ? nb : jobs;
    if (jobs < 2)
        return call(fw, k, &a, err);
    struct job_list *j = &fw->jobs;
    uint32_t per_job = (nb + jobs - 1) / jobs;
    j->n = 0;
    for (uint32_t e = 0; e < nb; e += per_job) {
        j->kernel[j->n] = k;
        j->args[j->n] = a;
        j->args[j->n].b0 = b0 + e;
        j->args[j->n++].nb = nb - e < per_job ? nb - e : per_job;
    }
    return run_jobs(fw, err);
}

#define MATVEC_MAX_JOBS (MAX_JOBS < QK_MAX_ARGMAX_SLOTS ? MAX_JOBS : QK_MAX_ARGMAX_SLOTS)

uint32_t qp_matvec_rows_per_job(uint32_t rows, uint32_t cols, uint32_t nb, uint32_t parts, uint32_t threads,
                                uint32_t stream_fit)
{
    uint32_t step = MACS_PER_CALL / cols / nb / 4 * 4;
    /* every thread gets JOBS_PER_THREAD jobs: a thread that lost its core
     * strands at most that share of the product on the other */
    uint32_t share = (rows / (threads * JOBS_PER_THREAD) + 3) / 4 * 4;
    step = step > share ? share : step;
    step = step < 4 ? 4 : step;
    /* every job has an amax slot (a partial argmax): a whole block's vocabulary
     * projection (151,936 rows x 1,024 x 16 at 0.6B) takes larger jobs
     * rather than more (a partial job per matrix of a fused product, and
     * every part of the block's entries its own jobs) */
    uint32_t room = MATVEC_MAX_JOBS / parts - QP_MAX_FUSED;
    uint32_t least = (rows + room - 1) / room;
    least = (least + 3) / 4 * 4;
    step = step < least ? least : step;
    if (stream_fit)
        step = step > stream_fit ? stream_fit : step;
    return step;
}

/* a product's multiply-adds a microsecond in BPF, about (MACS_PER_CALL's
 * half millisecond) */
#define MACS_PER_US 4000u

/* Parts a block's entries are cut into for a product. The kernel reads its
 * clock between row blocks, so one row block over all the entries is how
 * far past the call budget a call may run: with a budget, a row block holds
 * half of it at most (an entry's sums do not depend on its neighbours). The
 * vocabulary projection keeps its block whole (one amax slot per job),
 * and so does --stream (a part would stage the weights again). */
static uint32_t matvec_entry_parts(const struct qp_forward *fw, uint32_t mode, uint32_t cols, uint32_t nb)
{
    uint64_t macs = (uint64_t)fw->cfg->call_budget_ns * MACS_PER_US / 1000 / 2;
    if (!macs || mode == QK_MV_LOGITS || fw->plan->stream)
        return 1;
    uint64_t fit = macs / (4ull * cols);
    fit = fit ? fit : 1;
    return (uint32_t)((nb + fit - 1) / fit);
}

/* Jobs over rows [0, rows) in steps of whole row blocks of bounded work,
 * each for a part of block entries [b0, b0 + nb). */
static int matvec(struct qp_forward *fw, uint32_t layer, uint32_t mode, uint32_t rows, uint32_t cols,
                  uint32_t b0, uint32_t nb, uint32_t *amax_slots, qp_err *err)
{
    struct job_list *j = &fw->jobs;
    uint32_t parts = matvec_entry_parts(fw, mode, cols, nb), per = (nb + parts - 1) / parts;
    /* --stream: two jobs per batch of the work map at least */
    uint32_t fit = fw->plan->stream ? fw->plan->maps[QP_MAP_WORK].max_entries / 2 * 4 : 0;
    uint32_t step = qp_matvec_rows_per_job(rows, cols, per, parts, fw->threads, fit);
    if (qp_plan_reads_act_records(fw->plan, layer, mode) &&
        entries(fw, QP_K_QUANT_X, (struct qk_args){.layer = layer, .mode = mode}, b0, nb, err))
        return -1;
    struct qk_args *list = fw->plan->stream ? fw->pending : j->args;
    enum qp_kernel *kernels = fw->plan->stream ? fw->pending_kernel : j->kernel;
    uint32_t n = 0;
    for (uint32_t e = 0; e < nb; e += per) {
        uint32_t ne = nb - e < per ? nb - e : per;
        for (uint32_t first = 0; first < rows;) {   /* a job never spans two matrices */
            struct qp_matrix_rows m = qp_plan_matrix_of(fw->plan, layer, mode, first);
            uint32_t end = m.row0 + m.rows;
            for (uint32_t r = first; r < end; r += step) {
                if (n == MATVEC_MAX_JOBS)
                    return qp_fail(err, "internal: too many jobs for one matrix");
                list[n] = (struct qk_args){.layer = layer, .mode = mode, .begin = r,
                                           .end = r + step < end ? r + step : end, .amax_slot = n, .b0 = b0 + e,
                                           .nb = ne};
                kernels[n++] = qp_matvec_kernel(m.enc, ne);
            }
            first = end;
        }
    }
    if (amax_slots)
        *amax_slots = n;
    int rc;
    if (fw->plan->stream) {
        rc = run_streamed(fw, n, err);
    } else {
        j->n = n;
        rc = run_jobs(fw, err);
    }
    /* checked after every product, before any later kernel reads its output */
    return rc ? rc : check_range(fw, mode == QK_MV_LOGITS ? "vocabulary projection" : NULL, layer, err);
}

/* Attention (entry, task heads, chunk) tasks of entries [0, nb), a few per job;
 * then the per-head merge. */
static int attention(struct qp_forward *fw, uint32_t layer, uint32_t last, uint32_t nb, qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    uint32_t chunks = last / QK_ATTN_CHUNK + 1, tasks = nb * qk_attn_head_tasks(c) * chunks;
    /* a task's work in matvec multiply-adds (3 BPF instructions each): a
     * position of a head costs ~6.5 instructions per multiply-add of its
     * scores and values, plus ~290 for its exponential and V weight (a pair
     * of heads costs less than twice that: the estimate errs short) */
    uint32_t per_task = (last + 1 < QK_ATTN_CHUNK ? last + 1 : QK_ATTN_CHUNK) * (c->head_dim * 4 + 100) *
                        c->attn_heads;
    uint32_t step = MACS_PER_CALL / per_task;
    step = step < 1 ? 1 : step;
    uint32_t parts = fw->threads > 1 ? 2 : 1;  /* at least one job per thread */
    if (step > (tasks + parts - 1) / parts)
        step = (tasks + parts - 1) / parts;
    struct job_list *j = &fw->jobs;
    j->n = 0;
    for (uint32_t t = 0; t < tasks; t += step) {
        if (j->n == MAX_JOBS)
            return qp_fail(err, "internal: too many attention jobs");
        j->kernel[j->n] = c->kv8 ? QP_K_ATTENTION8 : QP_K_ATTENTION;
        j->args[j->n++] = (struct qk_args){.layer = layer, .max_pos = last, .b0 = 0, .nb = nb, .begin = t,
                                           .end = t + step < tasks ? t + step : tasks};
    }
    if (run_jobs(fw, err) || check_seq(fw, err))
        return -1;
    struct qk_args a = {.layer = layer, .max_pos = last, .begin = 0, .end = c->n_heads};
    return entries(fw, QP_K_ATTN_MERGE, a, 0, nb, err);
}

/* layer l of block entries [0, nb), whose largest position is last:
 *   x = rmsnorm(h);  qkv[nb][q_dim + 2 kv_dim] = x W_qkv
 *   q, k = rope(norm(q), norm(k)), k and v into each entry's KV slot
 *   x[nb][q_dim] = attention(q, its KV slot's cache up to the entry);  h += x W_o
 *   x = rmsnorm(h);  gu[nb][2 inter] = x W_gate|up;  x = silu(g) * u;  h += x W_down */
static int layer(struct qp_forward *fw, uint32_t l, uint32_t last, uint32_t nb, qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    struct qk_args norm_attn = {.layer = l, .mode = QK_NORM_ATTN};
    struct qk_args norm_mlp = {.layer = l, .mode = QK_NORM_MLP};
    struct qk_args rope = {.layer = l};
    struct qk_args none = {0};
    return entries(fw, QP_K_RMSNORM, norm_attn, 0, nb, err) ||
           matvec(fw, l, QK_MV_QKV, c->q_dim + 2 * c->kv_dim, c->hidden, 0, nb, NULL, err) ||
           entries(fw, c->kv8 ? QP_K_ROPE_STORE8 : QP_K_ROPE_STORE, rope, 0, nb, err) || check_seq(fw, err) ||
           attention(fw, l, last, nb, err) ||
           matvec(fw, l, QK_MV_O, c->hidden, c->q_dim, 0, nb, NULL, err) ||
           entries(fw, QP_K_RMSNORM, norm_mlp, 0, nb, err) ||
           matvec(fw, l, QK_MV_GATE_UP, 2 * c->inter, c->hidden, 0, nb, NULL, err) ||
           entries(fw, QP_K_SWIGLU, none, 0, nb, err) ||
           matvec(fw, l, QK_MV_DOWN, c->hidden, c->inter, 0, nb, NULL, err);
}

/* The final norm, the vocabulary projection and the argmax of entries
 * [b0, b0 + nb). */
static int vocabulary(struct qp_forward *fw, uint32_t b0, uint32_t nb, qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    uint32_t amax_slots;
    if (entries(fw, QP_K_RMSNORM, (struct qk_args){.mode = QK_NORM_FINAL}, b0, nb, err) ||
        matvec(fw, 0, QK_MV_LOGITS, c->vocab, c->hidden, b0, nb, &amax_slots, err))
        return -1;
    return entries(fw, QP_K_ARGMAX_REDUCE, (struct qk_args){.n_amax_slots = amax_slots}, b0, nb, err);
}

/* h of entry b = the embedding of token */
static int embed(struct qp_forward *fw, uint32_t token, uint32_t b, qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    struct qk_args a = {.token = token, .b0 = b, .nb = 1};
    if (fw->plan->stream) {
        a.streamed = 1;
        if (qp_stream_stage(fw->plan, fw->b->work, c->embed_i4 ? QP_MAP_W4_HID : QP_MAP_W_HID, c->embed_key + token / 4,
                            1, 0, err))
            return -1;
    }
    return call(fw, QP_K_EMBED, &a, err) || check_range(fw, "embedding", 0, err);
}

/* The step's schedule: the embedding of each entry, every layer, then the
 * vocabulary of entries [first_logits, n). */
static int schedule(struct qp_forward *fw, const struct qp_entry *e, uint32_t n, uint32_t first_logits,
                    uint32_t last, qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    for (uint32_t b = 0; b < n; b++) {
        fw->b->seq[b] = (struct qk_seq){.pos = e[b].pos, .kv_slot = e[b].kv_slot};
        if (embed(fw, e[b].token, b, err))
            return -1;
    }
    for (uint32_t l = 0; l < c->n_layers; l++) {
        if (layer(fw, l, last, n, err))
            return -1;
        if (fw->on_layer)
            fw->on_layer(fw->on_layer_arg, l);
    }
    return first_logits < n ? vocabulary(fw, first_logits, n - first_logits, err) : 0;
}

/* what a chain's flagged job computed, for check_range's message */
static const char *chain_job_place(const struct qk_job *j)
{
    if (j->program == QP_K_EMBED)
        return "embedding";
    if (j->args.mode == QK_MV_LOGITS && j->program >= QP_K_MATVEC_Q24 && j->program <= QP_K_MATVEC_I6_BLOCK)
        return "vocabulary projection";
    return NULL;
}

/* --schedule kernel: the step listed as the host schedule would run it,
 * then run by the kernel in lanes of work items (docs/SCHEDULE.md) */
static int schedule_in_kernel(struct qp_forward *fw, const struct qp_entry *e, uint32_t n, uint32_t first_logits,
                              uint32_t last, qp_err *err)
{
    if (fw->on_layer)
        return qp_fail_code(err, QP_E_ARGUMENT, "a per-layer trace needs --schedule host: the kernel schedule "
                            "runs every layer in one submission");
    fw->recording = true;
    fw->recorded = 0;
    int rc = schedule(fw, e, n, first_logits, last, err);
    fw->recording = false;
    struct qk_chain chain;
    if (rc || fw->b->run_chain(fw->b, fw->recorded, fw->interrupt, &chain, err))
        return -1;
    fw->stats.paused_calls += chain.items - (chain.items < fw->recorded ? chain.items : fw->recorded);
    double item_ms = chain.max_item_ns / 1e6;
    fw->stats.slow_progs += item_ms > QP_SLOW_CALL_MS;
    if (item_ms > fw->stats.max_prog_ms) {
        fw->stats.max_prog_ms = item_ms;
        snprintf(fw->stats.max_prog_kernel, sizeof fw->stats.max_prog_kernel, "%s",
                 chain.max_item_job < fw->recorded ? qp_kernel_name(fw->b->jobs[chain.max_item_job].program) : "?");
    }
    const struct qk_job *stop = &fw->b->jobs[chain.stop_job < fw->recorded ? chain.stop_job : 0];
    switch (chain.status) {
    case QK_CHAIN_DONE:
        return 0;
    case QK_CHAIN_CANCELLED:
        return qp_fail_code(err, QP_E_INTERRUPTED, "interrupted");
    case QK_CHAIN_REFUSED:
        return qp_fail(err, "BPF kernel %s rejected its arguments (job %u of the kernel schedule)",
                       qp_kernel_name(stop->program), chain.stop_job);
    case QK_CHAIN_FLAGGED:
        if (check_seq(fw, err) || check_range(fw, chain_job_place(stop), stop->args.layer, err))
            return -1;
        return qp_fail(err, "internal: the kernel schedule stopped at a flag no kernel raised");
    default:
        return qp_fail(err, "internal: the kernel schedule's chain broke at job %u (status %u)", chain.stop_job,
                       chain.status);
    }
}

int qp_forward_batch(struct qp_forward *fw, const struct qp_entry *e, uint32_t n, uint32_t first_logits,
                     qp_err *err)
{
    const struct qk_config *c = fw->cfg;
    if (n < 1 || n > c->block || first_logits > n)
        return qp_fail(err, "internal: a block of %u positions (1..%u), logits from %u", n, c->block, first_logits);
    uint32_t last = 0;
    for (uint32_t b = 0; b < n; b++) {
        if (e[b].kv_slot >= c->kv_slots)
            return qp_fail_code(err, QP_E_ARGUMENT, "KV cache slot %u outside the model's %u", e[b].kv_slot,
                                c->kv_slots);
        if (e[b].pos >= c->ctx)
            return qp_fail_code(err, QP_E_CONTEXT, "position %u is past the context of %u tokens (see -c)", e[b].pos,
                                c->ctx);
        if (e[b].token >= c->vocab)
            return qp_fail(err, "token id %u is outside the vocabulary (%u)", e[b].token, c->vocab);
        last = e[b].pos > last ? e[b].pos : last;
    }
    if (fw->b->run_chain)
        return schedule_in_kernel(fw, e, n, first_logits, last, err);
    return schedule(fw, e, n, first_logits, last, err);
}

int qp_forward_record(struct qp_forward *fw, const struct qp_entry *e, bool logits, uint32_t *n_jobs, qp_err *err)
{
    if (!fw->b->jobs)
        return qp_fail(err, "internal: recording a step needs the kernel schedule");
    if (e->kv_slot >= fw->cfg->kv_slots || e->pos >= fw->cfg->ctx || e->token >= fw->cfg->vocab)
        return qp_fail(err, "internal: a recorded entry outside the model");
    fw->recording = true;
    fw->recorded = 0;
    int rc = schedule(fw, e, 1, logits ? 0 : 1, e->pos, err);
    fw->recording = false;
    *n_jobs = fw->recorded;
    return rc;
}

int qp_forward_block(struct qp_forward *fw, uint32_t kv_slot, const uint32_t *tokens, uint32_t n, uint32_t pos0,
                     enum qp_logits logits, qp_err *err)
{
    struct qp_entry e[QK_MAX_BLOCK];
    if (n < 1 || n > QK_MAX_BLOCK)
        return qp_fail(err, "internal: a block of %u positions (1..%u)", n, QK_MAX_BLOCK);
    if (pos0 > UINT32_MAX - n)
        return qp_fail_code(err, QP_E_CONTEXT, "position %u is past the context (see -c)", pos0);
    for (uint32_t b = 0; b < n; b++)
        e[b] = (struct qp_entry){.token = tokens[b], .kv_slot = kv_slot, .pos = pos0 + b};
    uint32_t first = logits == QP_LOGITS_ALL ? 0 : logits == QP_LOGITS_LAST ? n - 1 : n;
    return qp_forward_batch(fw, e, n, first, err);
}

uint32_t qp_forward_block_size(const struct qp_forward *fw)
{
    return fw->cfg->block;
}

const int64_t *qp_forward_logits(const struct qp_forward *fw, uint32_t b)
{
    return fw->b->logits + (uint64_t)b * fw->cfg->vocab;
}

uint32_t qp_forward_argmax(const struct qp_forward *fw, uint32_t b)
{
    return fw->b->scal[b].argmax_index;
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
    pthread_mutex_init(&fw->stats_mu, NULL);
    if (qp_pool_create(&fw->pool, threads, run_job, fw, err)) {
        qp_forward_destroy(fw);
        return -1;
    }
    fw->threads = qp_pool_threads(fw->pool);
    *out = fw;
    return 0;
}

void qp_forward_destroy(struct qp_forward *fw)
{
    if (!fw)
        return;
    qp_pool_destroy(fw->pool);
    pthread_mutex_destroy(&fw->stats_mu);
    free(fw);
}

void qp_forward_set_interrupt(struct qp_forward *fw, const atomic_bool *flag)
{
    fw->interrupt = flag;
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
