// SPDX-License-Identifier: MIT
/* qwen3.bpf.c - the Qwen3 forward pass as BPF socket-filter programs, run
 * with bpf_prog_test_run. Each program is one kernel of kernels/qk_kernels.h
 * (QK_PROGRAMS, qwen3_abi.h, lists them); its arguments (struct qk_args)
 * follow the 14-byte Ethernet header of the test run's input. Map sizes and the model constants are set by
 * the loader (engine/bpf_backend.c) before load. */
#include <linux/bpf.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>

#include "qwen3_abi.h"

const volatile struct qk_config CFG = {0};
#define QK_CFG CFG

/* every map: a BPF_F_MMAPABLE array; value_size and max_entries set at load */
#define QK_MAP(name)                                                   \
    struct {                                                           \
        __uint(type, BPF_MAP_TYPE_ARRAY);                              \
        __uint(map_flags, BPF_F_MMAPABLE);                             \
        __uint(key_size, 4);                                           \
        __uint(value_size, 8);                                         \
        __uint(max_entries, 1);                                        \
    } m_##name SEC(".maps")

#define QK_MAP_OF(NAME, name) QK_MAP(name);
QK_MAPS(QK_MAP_OF)

#include "qk_kernels.h"

static __always_inline int read_args(struct __sk_buff *skb, struct qk_args *a)
{
    return bpf_skb_load_bytes(skb, 0, a, sizeof(*a));
}

/* Each program returns 0 when done, 1 when its arguments were refused,
 * QK_RET_PARTIAL + n when it ran out of time after n units. */
#define QK_PROGRAM(name, kernel)                                       \
    SEC("socket")                                                      \
    int name(struct __sk_buff *skb)                                    \
    {                                                                  \
        struct qk_args a;                                              \
        if (read_args(skb, &a))                                        \
            return 1;                                                  \
        int r = kernel(&a);                                            \
        return r < 0 ? 1 : r == 0 ? 0 : QK_RET_PARTIAL + r;            \
    }

#define QK_PROGRAM_OF(NAME, name, kernel) QK_PROGRAM(name, kernel)
QK_PROGRAMS(QK_PROGRAM_OF)

/* ---- the kernel schedule (docs/SCHEDULE.md) ----
 * Each kernel also has a BPF_PROG_TYPE_SYSCALL program, run once at load:
 * it makes each lane's work item of that kernel call the kernel on the
 * lane's current job. Only a sleepable program may set a work item's
 * callback, and every program keeps its own verifier budget: one callback
 * holding every kernel would pass the 1 M instructions. A work item runs
 * on the CPU that started it, so a lane stays on the CPU its host thread
 * started it from. A job done, a lane claims the next job of the phase and
 * starts its kernel's item (or its own item again for the rest of a
 * paused job); with nothing to claim yet it runs its idle item, which
 * looks again. The last lane to stop reports through ring buffer
 * `chain_done`. */

#include "qk_wq.h"

struct qk_wq_item {
    struct bpf_wq wq;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, QK_CHAIN_LANES * QK_LANE_ITEMS);
    __type(key, u32);
    __type(value, struct qk_wq_item);
} m_wq SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, QK_CHAIN_MAX_JOBS);
    __type(key, u32);
    __type(value, struct qk_job);
} m_jobs SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct qk_chain);
} m_chain SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 4096);
} m_chain_done SEC(".maps");

/* units of a paused job's progress: 4 rows a row block, 1 attention task;
 * 0 for the kernels that never pause */
static __always_inline u32 qk_resume_unit(u32 program)
{
    switch (program) {
    case QK_P_MATVEC_Q24: case QK_P_MATVEC_I8: case QK_P_MATVEC_I8_BLOCK: case QK_P_MATVEC_I4:
    case QK_P_MATVEC_I4_BLOCK: case QK_P_MATVEC_I6: case QK_P_MATVEC_I6_BLOCK:
        return 4;
    case QK_P_ATTENTION: case QK_P_ATTENTION8:
        return 1;
    default:
        return 0;
    }
}

/* clang 19 has no BPF acquire and release atomics; on x86 (TSO) the JIT's
 * plain loads and stores keep their order, and volatile keeps clang's */
static __always_inline u32 qk_volatile_load(const u32 *p)
{
    return *(const volatile u32 *)p;
}

static __always_inline struct qk_chain *qk_chain(void)
{
    u32 key = 0;
    return bpf_map_lookup_elem(&m_chain, &key);
}

/* The step stops here with status, unless a lane stopped it first. When a
 * lane has not started yet, a record wakes the host to drop it. */
static __always_inline void qk_chain_stop(struct qk_chain *c, u32 job, u32 status)
{
    if (__sync_val_compare_and_swap(&c->status, QK_CHAIN_RUNNING, status) != QK_CHAIN_RUNNING)
        return;
    c->stop_job = job;
    if (qk_volatile_load(&c->lane_state[QK_CHAIN_LANES - 1]) == QK_LANE_WAITING) {
        u32 record = status;
        bpf_ringbuf_output(&m_chain_done, &record, sizeof record, 0);
    }
}

/* the lane queues nothing more; the last lane's record wakes the host */
static __always_inline void qk_lane_exit(struct qk_chain *c)
{
    if (__sync_sub_and_fetch(&c->lanes, 1) == 0) {
        u32 record = qk_volatile_load(&c->status);
        bpf_ringbuf_output(&m_chain_done, &record, sizeof record, 0);
    }
}

static __always_inline int qk_lane_start(struct qk_chain *c, u32 lane, u32 item, u32 job)
{
    u32 key = (lane & (QK_CHAIN_LANES - 1)) * QK_LANE_ITEMS + item;
    struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &key);
    if (w && !bpf_wq_start(&w->wq, 0))
        return 0;
    qk_chain_stop(c, job, QK_CHAIN_BROKEN);
    qk_lane_exit(c);
    return -1;
}

/* Claims the next job of the open phase and queues its kernel's item on
 * this lane; with none to claim yet, the lane's idle item; with none left,
 * or the step stopped, the lane ends. */
static __always_inline void qk_lane_next(struct qk_chain *c, u32 lane)
{
    u32 cur = qk_volatile_load(&c->claim);
    if (qk_volatile_load(&c->cancel))
        qk_chain_stop(c, cur, QK_CHAIN_CANCELLED);
    if (qk_volatile_load(&c->status) != QK_CHAIN_RUNNING || cur >= c->n) {
        qk_lane_exit(c);
        return;
    }
    if (cur < qk_volatile_load(&c->phase_end) && __sync_val_compare_and_swap(&c->claim, cur, cur + 1) == cur) {
        struct qk_job *j = bpf_map_lookup_elem(&m_jobs, &cur);
        if (!j || j->program >= QK_PROGRAM_COUNT) {
            qk_chain_stop(c, cur, QK_CHAIN_BROKEN);
            qk_lane_exit(c);
            return;
        }
        c->lane_job[lane & (QK_CHAIN_LANES - 1)] = cur;
        qk_lane_start(c, lane, j->program, cur);
        return;
    }
    qk_lane_start(c, lane, QK_PROGRAM_COUNT, cur);
}

/* the lane of a work item: its key's */
static __always_inline u32 qk_lane_of(const int *key)
{
    return (u32)*key / QK_LANE_ITEMS & (QK_CHAIN_LANES - 1);
}

/* Copies the lane's job's arguments, or ends the lane. Nothing stays live
 * across the kernel but the arguments: the attention kernels use the whole
 * 512-byte stack. */
static __always_inline int qk_chain_load(struct qk_args *a, u32 program, u32 lane)
{
    struct qk_chain *c = qk_chain();
    if (!c)
        return -1;
    u32 i = c->lane_job[lane];
    struct qk_job *j = bpf_map_lookup_elem(&m_jobs, &i);
    if (!j || j->program != program || i >= c->n) {
        qk_chain_stop(c, i, QK_CHAIN_BROKEN);
        qk_lane_exit(c);
        return -1;
    }
    *a = j->args;
    a->scratch = lane;      /* the block products' unpk entry: one per lane, as per host thread */
    c->lane_t0[lane] = bpf_ktime_get_ns();
    return 0;
}

/* After the kernel returned r on the lane's job: the rest of a paused job
 * in another item of the same kernel (the return to the work queue lets
 * the core go to another task, as a return to user space does), else the
 * lane's next job; the last job's lane ends the step. */
static __always_inline void qk_chain_after(u32 program, u32 lane, int r)
{
    struct qk_chain *c = qk_chain();
    u32 key = 0;
    struct qk_scalars *sc = bpf_map_lookup_elem(&m_scal, &key);
    if (!c || !sc)
        return;
    u32 i = c->lane_job[lane], unit = qk_resume_unit(program);
    u64 ns = bpf_ktime_get_ns() - c->lane_t0[lane];
    if (ns > c->max_item_ns) {      /* a figure for --stats: a race between lanes only blurs it */
        c->max_item_ns = ns;
        c->max_item_job = i;
    }
    __sync_fetch_and_add(&c->items, 1);
    c->lane_items[lane]++;
    c->lane_cpu[lane] = bpf_get_smp_processor_id();
    struct qk_job *j = bpf_map_lookup_elem(&m_jobs, &i);
    if (!j || r < 0 || (r > 0 && !unit)) {
        qk_chain_stop(c, i, j ? QK_CHAIN_REFUSED : QK_CHAIN_BROKEN);
        qk_lane_exit(c);
        return;
    }
    if (sc->range_error || sc->seq_error) {
        qk_chain_stop(c, i, QK_CHAIN_FLAGGED);
        qk_lane_exit(c);
        return;
    }
    if (r > 0) {
        j->args.begin += unit * (u32)r;
        j->args.resume = unit == 4;
        if (qk_volatile_load(&c->cancel) || qk_volatile_load(&c->status) != QK_CHAIN_RUNNING) {
            qk_chain_stop(c, i, QK_CHAIN_CANCELLED);
            qk_lane_exit(c);
            return;
        }
        qk_lane_start(c, lane, program, i);
        return;
    }
    u32 done = __sync_add_and_fetch(&c->done, 1);
    if (done == c->n) {
        qk_chain_stop(c, done, QK_CHAIN_DONE);
        qk_lane_exit(c);
        return;
    }
    if (done == qk_volatile_load(&c->phase_end)) {  /* this phase's last job: the next phase opens */
        struct qk_job *nx = bpf_map_lookup_elem(&m_jobs, &done);
        c->phase_end = nx ? nx->phase_end : done;
    }
    qk_lane_next(c, lane);
}

#define QK_EBUSY 16

static __always_inline int qk_chain_init(u32 item, int (*cb)(void *, int *, void *))
{
    for (u32 lane = 0; lane < QK_CHAIN_LANES; lane++) {
        u32 key = lane * QK_LANE_ITEMS + item;
        struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &key);
        if (!w)
            return 1;
        /* -EBUSY: set by an earlier run that failed on a later lane */
        int r = bpf_wq_init(&w->wq, &m_wq, 0);
        if (r && r != -QK_EBUSY)
            return -r;
        r = bpf_wq_set_callback_impl(&w->wq, cb, 0, NULL);
        if (r)
            return -r;
    }
    return 0;
}

/* name_sched: run once, sets each lane's item of kernel NAME, which runs
 * the lane's job */
#define QK_SCHED_PROGRAM(NAME, name, kernel)                           \
    static int name##_item(void *map, int *key, void *value)           \
    {                                                                  \
        struct qk_args a;                                              \
        u32 lane = qk_lane_of(key);                                    \
        if (qk_chain_load(&a, QK_P_##NAME, lane))                      \
            return 0;                                                  \
        qk_chain_after(QK_P_##NAME, qk_lane_of(key), kernel(&a));      \
        return 0;                                                      \
    }                                                                  \
    SEC("syscall")                                                     \
    int name##_sched(void *ctx)                                        \
    {                                                                  \
        return qk_chain_init(QK_P_##NAME, name##_item);                \
    }

QK_PROGRAMS(QK_SCHED_PROGRAM)

/* a lane's idle item: claims a job when the phase has one */
static int lane_idle_item(void *map, int *key, void *value)
{
    struct qk_chain *c = qk_chain();
    if (c)
        qk_lane_next(c, qk_lane_of(key));
    return 0;
}

SEC("syscall")
int lane_sched(void *ctx)
{
    return qk_chain_init(QK_PROGRAM_COUNT, lane_idle_item);
}

/* Starts lane ctx->lane on the CPU that runs this (the host prepared map
 * `chain`). */
SEC("syscall")
int lane_start(struct qk_lane_start *ctx)
{
    struct qk_chain *c = qk_chain();
    u32 lane = ctx->lane & (QK_CHAIN_LANES - 1);
    if (!c)
        return 1;
    if (__sync_val_compare_and_swap(&c->lane_state[lane], QK_LANE_WAITING, QK_LANE_STARTED) != QK_LANE_WAITING)
        return 0;   /* dropped: the step ended without it */
    return qk_lane_start(c, lane, QK_PROGRAM_COUNT, 0) ? 1 : 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
