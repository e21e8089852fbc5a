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
 * it makes work item `wq[kernel]` call the kernel on the chain's current
 * job. Only a sleepable program may set a work item's callback, and every
 * program keeps its own verifier budget: one callback holding every
 * kernel would pass the 1 M instructions. A job done, its item starts the
 * item of the next job's kernel (or itself for the rest of a paused job);
 * the last reports through ring buffer `chain_done`. */

/* Debian 12's linux/bpf.h predates it; the verifier knows it by its BTF name */
struct bpf_wq {
    __u64 __opaque[2];
} __attribute__((aligned(8)));

extern int bpf_wq_init(struct bpf_wq *wq, void *p__map, unsigned int flags) __weak __ksym;
extern int bpf_wq_start(struct bpf_wq *wq, unsigned int flags) __weak __ksym;
extern int bpf_wq_set_callback_impl(struct bpf_wq *wq, int (callback_fn)(void *map, int *key, void *value),
                                    unsigned int flags__k, void *aux__ign) __weak __ksym;

struct qk_wq_item {
    struct bpf_wq wq;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, QK_PROGRAM_COUNT);
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

/* the chain ends here: the host's wait wakes on the record */
static __always_inline void qk_chain_end(struct qk_chain *c, u32 status)
{
    c->stop_job = c->next;
    *(volatile u32 *)&c->status = status;
    u32 record = status;
    bpf_ringbuf_output(&m_chain_done, &record, sizeof record, 0);
}

/* queues the work item of job c->next's kernel, or ends the chain */
static __always_inline int qk_chain_next(struct qk_chain *c)
{
    u32 i = c->next;
    if (qk_volatile_load(&c->cancel)) {
        qk_chain_end(c, QK_CHAIN_CANCELLED);
        return 0;
    }
    if (i >= c->n) {
        qk_chain_end(c, QK_CHAIN_DONE);
        return 0;
    }
    struct qk_job *j = bpf_map_lookup_elem(&m_jobs, &i);
    u32 program = j ? j->program : QK_PROGRAM_COUNT;
    struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &program);
    if (!w || bpf_wq_start(&w->wq, 0))
        qk_chain_end(c, QK_CHAIN_BROKEN);
    return 0;
}

/* Copies the current job's arguments, or ends the chain. Nothing stays
 * live across the kernel but the arguments: the attention kernels use the
 * whole 512-byte stack. */
static __always_inline int qk_chain_load(struct qk_args *a, u32 program)
{
    struct qk_chain *c = qk_chain();
    if (!c)
        return -1;
    u32 i = c->next;
    struct qk_job *j = bpf_map_lookup_elem(&m_jobs, &i);
    if (!j || j->program != program || i >= c->n) {
        qk_chain_end(c, QK_CHAIN_BROKEN);
        return -1;
    }
    *a = j->args;
    c->item_t0 = bpf_ktime_get_ns();
    return 0;
}

/* After the kernel returned r: the rest of a paused job in another item
 * of the same kernel (the return to the work queue lets the core go to
 * another task, as a return to user space does), else the next job. */
static __always_inline void qk_chain_after(u32 program, int r)
{
    struct qk_chain *c = qk_chain();
    u32 key = 0;
    struct qk_scalars *sc = bpf_map_lookup_elem(&m_scal, &key);
    if (!c || !sc)
        return;
    u32 i = c->next, unit = qk_resume_unit(program);
    u64 ns = bpf_ktime_get_ns() - c->item_t0;
    if (ns > c->max_item_ns) {
        c->max_item_ns = ns;
        c->max_item_job = i;
    }
    c->items++;
    struct qk_job *j = bpf_map_lookup_elem(&m_jobs, &i);
    if (!j || r < 0 || (r > 0 && !unit)) {
        qk_chain_end(c, j ? QK_CHAIN_REFUSED : QK_CHAIN_BROKEN);
        return;
    }
    if (sc->range_error || sc->seq_error) {
        qk_chain_end(c, QK_CHAIN_FLAGGED);
        return;
    }
    if (r > 0) {
        j->args.begin += unit * (u32)r;
        j->args.resume = unit == 4;
        if (qk_volatile_load(&c->cancel)) {
            qk_chain_end(c, QK_CHAIN_CANCELLED);
            return;
        }
        struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &program);
        if (!w || bpf_wq_start(&w->wq, 0))
            qk_chain_end(c, QK_CHAIN_BROKEN);
        return;
    }
    c->next = i + 1;
    qk_chain_next(c);
}

static __always_inline int qk_chain_init(u32 program, int (*cb)(void *, int *, void *))
{
    struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &program);
    if (!w || bpf_wq_init(&w->wq, &m_wq, 0) || bpf_wq_set_callback_impl(&w->wq, cb, 0, NULL))
        return 1;
    return 0;
}

/* name_sched: run once, sets wq[NAME]'s callback, which runs one job */
#define QK_SCHED_PROGRAM(NAME, name, kernel)                           \
    static int name##_item(void *map, int *key, void *value)           \
    {                                                                  \
        struct qk_args a;                                              \
        if (qk_chain_load(&a, QK_P_##NAME))                            \
            return 0;                                                  \
        qk_chain_after(QK_P_##NAME, kernel(&a));                       \
        return 0;                                                      \
    }                                                                  \
    SEC("syscall")                                                     \
    int name##_sched(void *ctx)                                        \
    {                                                                  \
        return qk_chain_init(QK_P_##NAME, name##_item);                \
    }

QK_PROGRAMS(QK_SCHED_PROGRAM)

/* One submission: runs the chain of map `jobs`' first chain.n jobs. */
SEC("syscall")
int chain_start(void *ctx)
{
    struct qk_chain *c = qk_chain();
    if (!c || qk_volatile_load(&c->status) == QK_CHAIN_RUNNING)
        return 1;
    c->next = 0;
    c->items = 0;
    c->max_item_ns = 0;
    c->status = QK_CHAIN_RUNNING;
    return qk_chain_next(c);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
