// SPDX-License-Identifier: MIT
/* qwen3.bpf.c - the Qwen3 forward pass as BPF socket-filter programs, run
 * with bpf_prog_test_run. Each program is one kernel of kernels/qk_kernels.h
 * (QK_PROGRAMS, qwen3_abi.h, lists them); its arguments (struct qk_args)
 * follow the 14-byte Ethernet header of the test run's input. Map sizes and the model constants are set by
 * the loader (engine/bpf_backend.c) before load. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <stdbool.h>
#include <bpf/bpf_endian.h>
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
 * on the CPU that started it, so a lane stays on the CPU it was started
 * from (lane_kick below, or lane_start from a host thread). A job done, a
 * lane claims the next job of the phase and starts its kernel's item (or
 * its own item again for the rest of a paused job); with nothing to claim
 * yet it runs its idle item, which looks again. The last lane to stop
 * reports through ring buffer `chain_done`. */

#include "qk_wq.h"

struct qk_wq_item {
    struct bpf_wq wq;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, QK_CHAIN_LANES * QK_LANE_ITEMS + 1);    /* and the listen item */
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

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct qk_listen);
} m_listen SEC(".maps");

static __always_inline struct qk_listen *qk_listen(void)
{
    u32 key = 0;
    return bpf_map_lookup_elem(&m_listen, &key);
}

/* the lanes' CPUs: each entry runs lane_kicked (below) in its kthread */
struct {
    __uint(type, BPF_MAP_TYPE_CPUMAP);
    __uint(max_entries, 1);     /* the possible CPUs, set at load: the key is a CPU */
    __type(key, u32);
    __type(value, struct bpf_cpumap_val);
} m_lane_cpus SEC(".maps");

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

static __always_inline void qk_listen_wake(void)
{
    u32 key = QK_LISTEN_ITEM;
    struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &key);
    if (w)
        bpf_wq_start(&w->wq, 0);
}

/* the lane's idle item queued on this CPU: false when it could not be */
static __always_inline bool qk_lane_idle(u32 lane)
{
    u32 key = (lane & (QK_CHAIN_LANES - 1)) * QK_LANE_ITEMS + QK_PROGRAM_COUNT;
    struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &key);
    return w && !bpf_wq_start(&w->wq, 0);
}

/* A listen step's lane that leaves while the other still runs the step
 * parks on its CPU for the request's next step; the last one to leave
 * starts the listen item here, which starts this lane on the next step. */
static __always_inline void qk_listen_leave(struct qk_chain *c, u32 lane, bool last)
{
    struct qk_listen *L = qk_listen();
    lane &= QK_CHAIN_LANES - 1;
    if (!L)
        return;
    if (last) {
        L->lead = lane;
        qk_listen_wake();
        return;
    }
    u32 request = qk_volatile_load(&L->requests);
    L->left_gen[lane] = qk_volatile_load(&c->gen);
    *(volatile u32 *)&L->parked[lane] = request;
    if (!qk_lane_idle(lane))    /* the other lane runs the steps alone */
        __sync_val_compare_and_swap(&L->parked[lane], request, 0);
}

/* the lane queues nothing more; the last lane's record wakes the host, or
 * for a listen step the listen item */
static __always_inline void qk_lane_exit(struct qk_chain *c, u32 lane)
{
    bool last = __sync_sub_and_fetch(&c->lanes, 1) == 0;
    if (qk_volatile_load(&c->listen)) {
        qk_listen_leave(c, lane, last);
    } else if (last) {
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
    qk_lane_exit(c, lane);
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
        qk_lane_exit(c, lane);
        return;
    }
    if (cur < qk_volatile_load(&c->phase_end) && __sync_val_compare_and_swap(&c->claim, cur, cur + 1) == cur) {
        struct qk_job *j = bpf_map_lookup_elem(&m_jobs, &cur);
        if (!j || j->program >= QK_PROGRAM_COUNT) {
            qk_chain_stop(c, cur, QK_CHAIN_BROKEN);
            qk_lane_exit(c, lane);
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
        qk_lane_exit(c, lane);
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
        qk_lane_exit(c, lane);
        return;
    }
    if (sc->range_error || sc->seq_error) {
        qk_chain_stop(c, i, QK_CHAIN_FLAGGED);
        qk_lane_exit(c, lane);
        return;
    }
    if (r > 0) {
        j->args.begin += unit * (u32)r;
        j->args.resume = unit == 4;
        if (qk_volatile_load(&c->cancel) || qk_volatile_load(&c->status) != QK_CHAIN_RUNNING) {
            qk_chain_stop(c, i, QK_CHAIN_CANCELLED);
            qk_lane_exit(c, lane);
            return;
        }
        qk_lane_start(c, lane, program, i);
        return;
    }
    u32 done = __sync_add_and_fetch(&c->done, 1);
    if (done == c->n) {
        qk_chain_stop(c, done, QK_CHAIN_DONE);
        qk_lane_exit(c, lane);
        return;
    }
    if (done == qk_volatile_load(&c->phase_end)) {  /* this phase's last job: the next phase opens */
        struct qk_job *nx = bpf_map_lookup_elem(&m_jobs, &done);
        c->phase_end = nx ? nx->phase_end : done;
    }
    qk_lane_next(c, lane);
}

#define QK_EBUSY 16

/* Gives work item `key` of map wq its callback: 0, 1 when there is no
 * such item, else the kernel's error. -EBUSY from bpf_wq_init: an earlier
 * run set the item up and failed on a later one. */
static __always_inline int qk_item_init(u32 key, int (*cb)(void *, int *, void *))
{
    struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &key);
    if (!w)
        return 1;
    int r = bpf_wq_init(&w->wq, &m_wq, 0);
    if (r && r != -QK_EBUSY)
        return -r;
    return -bpf_wq_set_callback_impl(&w->wq, cb, 0, NULL);
}

/* item `item` of every lane */
static __always_inline int qk_chain_init(u32 item, int (*cb)(void *, int *, void *))
{
    for (u32 lane = 0; lane < QK_CHAIN_LANES; lane++) {
        int r = qk_item_init(lane * QK_LANE_ITEMS + item, cb);
        if (r)
            return r;
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

/* A lane parked for request `request`: ends when the request has (and
 * unparks, unless a new request parked it again meanwhile); joins a step
 * it has not left yet while that step still has a lane (the listen item
 * counts its lead last, when the step is built); else looks again. */
static __always_inline void qk_listen_parked(struct qk_listen *L, struct qk_chain *c, u32 lane, u32 request)
{
    if (!qk_volatile_load(&L->busy) || qk_volatile_load(&L->requests) != request) {
        __sync_val_compare_and_swap(&L->parked[lane], request, 0);
        return;
    }
    u32 n = qk_volatile_load(&c->lanes);
    if (n && qk_volatile_load(&c->gen) != L->left_gen[lane] &&
        __sync_val_compare_and_swap(&c->lanes, n, n + 1) == n) {
        *(volatile u32 *)&L->parked[lane] = 0;
        __sync_fetch_and_add(&L->joined, 1);
        qk_lane_next(c, lane);
        return;
    }
    qk_lane_idle(lane);
}

/* a lane's idle item: claims a job when the phase has one */
static int lane_idle_item(void *map, int *key, void *value)
{
    struct qk_chain *c = qk_chain();
    struct qk_listen *L = qk_listen();
    u32 lane = qk_lane_of(key);
    if (!c || !L)
        return 0;
    u32 request = qk_volatile_load(&L->parked[lane]);
    /* a host step's lanes never park (no request runs, the chain is the host's) */
    if (request && (qk_volatile_load(&L->busy) || qk_volatile_load(&c->listen)))
        qk_listen_parked(L, c, lane, request);
    else
        qk_lane_next(c, lane);
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

/* ---- qrun listen (docs/LISTEN.md) ----
 * Maps `tmpl` and `sessions` are sized by the loader (one entry when the
 * model has no kernel schedule). */

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct qk_job);
} m_tmpl SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct qk_session);
} m_sessions SEC(".maps");

struct qk_udp_packet {
    struct ethhdr *eth;
    struct iphdr *ip;
    struct udphdr *udp;
};

struct qk_copy_ctx {
    u32 base, token, pos;
};

/* job i of the step: template job base + i with the step's token and position */
static long qk_copy_job(u32 i, void *arg)
{
    struct qk_copy_ctx *x = arg;
    u32 t = x->base + i;
    struct qk_job *src = bpf_map_lookup_elem(&m_tmpl, &t), *dst = bpf_map_lookup_elem(&m_jobs, &i);
    if (!src || !dst)
        return 1;
    *dst = *src;
    if (dst->program == QK_P_EMBED)
        dst->args.token = x->token;
    else if (dst->program == QK_P_ATTENTION || dst->program == QK_P_ATTENTION8 || dst->program == QK_P_ATTN_MERGE)
        dst->args.max_pos = x->pos;
    return 0;
}

/* The request's step L->step: its position's template copied into `jobs`
 * with its token and position, entry 0 of `seq` its position and slot,
 * and lane 0 started on this CPU. */
static __always_inline int qk_listen_step(struct qk_listen *L, struct qk_session *s, struct qk_chain *c)
{
    u32 i = L->step, slot = L->session, key = 0;
    u32 pos = s->pos0 + i;
    u32 k = pos / QK_ATTN_CHUNK;
    struct qk_seq *sq = bpf_map_lookup_elem(&m_seq, &key);
    if (!sq || k >= QK_LISTEN_MAX_CHUNKS || i >= 2 * QK_LISTEN_MAX_IDS)
        return -1;
    u32 t = QK_LISTEN_TMPL(k, i + 1 >= s->n_ids);   /* the ids before the last need no logits */
    u32 n = L->tmpl_jobs[t & (2 * QK_LISTEN_MAX_CHUNKS - 1)];
    if (n == 0 || n > QK_LISTEN_TMPL_JOBS)
        return -1;
    struct qk_copy_ctx x = {.base = t * QK_LISTEN_TMPL_JOBS, .pos = pos};
    x.token = i < s->n_ids ? s->ids[i & (QK_LISTEN_MAX_IDS - 1)] : s->out[(i - s->n_ids) & (QK_LISTEN_MAX_IDS - 1)];
    if (bpf_loop(n, qk_copy_job, &x, 0) != n)
        return -1;
    sq->pos = pos;
    sq->kv_slot = slot;
    struct qk_job *first = bpf_map_lookup_elem(&m_jobs, &key);
    if (!first)
        return -1;
    __builtin_memset(c, 0, sizeof(*c));
    u32 lead = L->lead & (QK_CHAIN_LANES - 1);
    c->n = n;
    c->phase_end = first->phase_end;
    c->listen = 1;
    c->lane_state[0] = QK_LANE_STARTED;
    c->lane_state[1] = QK_LANE_STARTED;
    c->status = QK_CHAIN_RUNNING;
    c->gen = ++L->gen;
    L->stepping = 1;
    L->parked[lead] = 0;
    *(volatile u32 *)&c->lanes = 1;     /* last: a parked lane joins a step with a lane */
    return qk_lane_start(c, lead, QK_PROGRAM_COUNT, 0) ? 1 : 0;
}

/* The request is over: the session says how, and the next may come. */
static __always_inline void qk_listen_end(struct qk_listen *L, struct qk_session *s, u32 state, u32 status)
{
    s->status = status;
    s->t_done = bpf_ktime_get_ns();
    *(volatile u32 *)&L->kick = 0;  /* a late frame starts no lane */
    *(volatile u32 *)&s->state = state;
    __sync_fetch_and_add(&L->answered, 1);
    *(volatile u32 *)&L->busy = 0;
}

/* the listen item: started by listen_xdp for a request's first step and
 * by the last lane of each step; takes the step's argmax and starts the
 * next step until the request has its tokens */
static int listen_item(void *map, int *key, void *value)
{
    struct qk_listen *L = qk_listen();
    struct qk_chain *c = qk_chain();
    u32 zero = 0;
    struct qk_scalars *sc = bpf_map_lookup_elem(&m_scal, &zero);
    if (!L || !c || !sc)
        return 0;
    u32 slot = L->session;
    struct qk_session *s = bpf_map_lookup_elem(&m_sessions, &slot);
    if (!s)
        return 0;
    if (L->stepping) {
        L->stepping = 0;
        if (c->status != QK_CHAIN_DONE) {
            qk_listen_end(L, s, QK_SS_FAILED, c->status);
            return 0;
        }
        u32 i = L->step;
        if (i + 1 >= s->n_ids)
            s->out[(i + 1 - s->n_ids) & (QK_LISTEN_MAX_IDS - 1)] = sc->argmax_index;
        L->step = ++i;
        s->next_pos = s->pos0 + i;
        if (i >= s->n_ids + s->want - 1) {
            qk_listen_end(L, s, QK_SS_DONE, QK_CHAIN_DONE);
            return 0;
        }
    }
    int r = qk_listen_step(L, s, c);
    if (r < 0)
        qk_listen_end(L, s, QK_SS_FAILED, QK_CHAIN_BROKEN);
    /* r > 0: lane 0 did not start; its exit started this item again */
    return 0;
}

SEC("syscall")
int listen_sched(void *ctx)
{
    return qk_item_init(QK_LISTEN_ITEM, listen_item);
}

/* a multicast or the limited broadcast address (network order) */
static __always_inline bool qk_ip_group(u32 addr)
{
    return (bpf_ntohl(addr) >> 28) == 0xe || addr == 0xffffffffu;
}

/* the packet's IPv4 and UDP headers when it is UDP to the listening port,
 * to a unicast address: the reply leaves from the addresses it came to,
 * and a group address is no sender's */
static __always_inline unsigned char *qk_listen_payload(struct xdp_md *ctx, const struct qk_listen *L,
                                                        struct qk_udp_packet *h)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || (eth->h_dest[0] & 1))
        return NULL;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
        (ip->frag_off & bpf_htons(0x3fff)) || qk_ip_group(ip->daddr))
        return NULL;
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > end || udp->dest != (u16)L->port)
        return NULL;
    h->eth = eth;
    h->ip = ip;
    h->udp = udp;
    return (unsigned char *)(udp + 1);
}

/* the packet turned round to its sender with kind and byte 6 set
 * (XDP_TX): addresses and ports swapped, no UDP checksum (IPv4 allows it;
 * the IP checksum does not change when its addresses swap) */
static __always_inline int qk_listen_reply(struct qk_udp_packet *h, unsigned char *p, u8 kind, u8 byte6)
{
    unsigned char mac[ETH_ALEN];
    __builtin_memcpy(mac, h->eth->h_source, ETH_ALEN);
    __builtin_memcpy(h->eth->h_source, h->eth->h_dest, ETH_ALEN);
    __builtin_memcpy(h->eth->h_dest, mac, ETH_ALEN);
    u32 a = h->ip->saddr;
    h->ip->saddr = h->ip->daddr;
    h->ip->daddr = a;
    u16 port = h->udp->source;
    h->udp->source = h->udp->dest;
    h->udp->dest = port;
    h->udp->check = 0;
    p[5] = kind;
    p[6] = byte6;
    return XDP_TX;
}

static __always_inline u32 qk_be32(const unsigned char *p)
{
    return (u32)p[0] << 24 | (u32)p[1] << 16 | (u32)p[2] << 8 | p[3];
}

static __always_inline void qk_put_be32(unsigned char *p, u32 v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

/* A step request: every check before the claim, so that a refused packet
 * changes nothing; then the session's request and the listen item. */
static __always_inline int qk_listen_on_step(struct xdp_md *ctx, struct qk_listen *L, struct qk_udp_packet *h,
                                             unsigned char *p, u32 len)
{
    void *end = (void *)(long)ctx->data_end;
    u32 n = p[6], want = p[7], slot = qk_be32(p + 8), pos = qk_be32(p + 12), req = qk_be32(p + 16);
    if (n == 0 || n > QK_LISTEN_MAX_IDS)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_COUNT);
    if (len != QK_LISTEN_HDR + 4 * n)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_LENGTH);
    if (want == 0 || want > QK_LISTEN_MAX_IDS)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_WANT);
    if (slot >= QK_CFG.kv_slots)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_SESSION);
    struct qk_session *s = bpf_map_lookup_elem(&m_sessions, &slot);
    if (!s)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_SESSION);
    /* the sender first: another one learns nothing of the session */
    bool own = s->addr == h->ip->saddr && s->port == h->udp->source;
    if (pos != 0 && !own)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_SENDER);
    /* the session's request sent again (its 0x84 was lost): accepted
     * again, not run again, though its position has moved on */
    bool again = own && s->state != QK_SS_IDLE && s->req == req && s->pos0 == pos && s->n_ids == n &&
                 s->want == want;
    if (pos != 0 && pos != s->next_pos && !again)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_POSITION);
    if ((u64)pos + n + want - 1 > QK_CFG.ctx)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_CONTEXT);
    u32 ids[QK_LISTEN_MAX_IDS];
    for (u32 i = 0; i < QK_LISTEN_MAX_IDS; i++) {
        if (i >= n)
            break;
        if ((void *)(p + QK_LISTEN_HDR + 4 * i + 4) > end)
            return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_LENGTH);
        ids[i] = qk_be32(p + QK_LISTEN_HDR + 4 * i);
        if (ids[i] >= QK_CFG.vocab)
            return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_TOKEN);
        again = again && ids[i] == s->ids[i];
    }
    if (again)
        return qk_listen_reply(h, p, QK_LK_ACCEPTED, n);
    if (__sync_val_compare_and_swap(&L->busy, 0, 1) != 0)
        return qk_listen_reply(h, p, QK_LK_BUSY, 0);
    s->t_packet = bpf_ktime_get_ns();
    s->req = req;
    s->pos0 = pos;
    s->n_ids = n;
    s->want = want;
    s->addr = h->ip->saddr;
    s->port = h->udp->source;
    for (u32 i = 0; i < QK_LISTEN_MAX_IDS; i++)
        s->ids[i] = i < n ? ids[i] : 0;
    s->state = QK_SS_RUNNING;
    L->session = slot;
    L->step = 0;
    L->stepping = 0;
    L->gen = 0;
    L->lead = 0;
    u32 request = __sync_add_and_fetch(&L->requests, 1);
    u32 key = QK_LISTEN_ITEM;
    struct qk_wq_item *w = bpf_map_lookup_elem(&m_wq, &key);
    if (!w || bpf_wq_start(&w->wq, 0)) {
        s->state = QK_SS_FAILED;
        s->status = QK_CHAIN_BROKEN;
        *(volatile u32 *)&L->busy = 0;
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_FAILED);
    }
    int verdict = qk_listen_reply(h, p, QK_LK_ACCEPTED, n);
    if (L->lanes < 2 || !request)
        return verdict;
    /* the second lane: the accept reply goes to the other CPU, where
     * lane_kicked starts the lane and sends the reply out of this
     * interface; without the CPU map's entry it leaves here */
    u32 cpu = bpf_get_smp_processor_id();
    u32 other = cpu == L->cpu[0] ? L->cpu[1] : L->cpu[0];
    *(volatile u32 *)&L->kick = request;
    return bpf_redirect_map(&m_lane_cpus, other, XDP_TX);
}

/* A poll: busy until the session's request has its tokens, then the
 * tokens in the poll's room for them. */
static __always_inline int qk_listen_on_poll(struct xdp_md *ctx, struct qk_udp_packet *h, unsigned char *p, u32 len)
{
    void *end = (void *)(long)ctx->data_end;
    u32 slot = qk_be32(p + 8), req = qk_be32(p + 16);
    if (len != QK_LISTEN_POLL_BYTES || (void *)(p + QK_LISTEN_POLL_BYTES) > end)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_LENGTH);
    if (slot >= QK_CFG.kv_slots)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_SESSION);
    struct qk_session *s = bpf_map_lookup_elem(&m_sessions, &slot);
    if (!s)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_SESSION);
    if (s->addr != h->ip->saddr || s->port != h->udp->source)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_SENDER);
    u32 state = *(volatile u32 *)&s->state;
    if (s->req != req || state == QK_SS_IDLE)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_REQUEST);
    if (state == QK_SS_RUNNING)
        return qk_listen_reply(h, p, QK_LK_BUSY, 0);
    if (state == QK_SS_FAILED)
        return qk_listen_reply(h, p, QK_LK_REFUSED, QK_LR_FAILED);
    u32 want = s->want;
    p[7] = want;
    qk_put_be32(p + 12, s->pos0);
    for (u32 i = 0; i < QK_LISTEN_MAX_IDS; i++)
        qk_put_be32(p + QK_LISTEN_HDR + 4 * i, i < want ? s->out[i] : 0);
    return qk_listen_reply(h, p, QK_LK_ANSWER, want);
}

/* Every UDP packet to the listening port with the magic is ours: refused
 * with a reason, answered busy, accepted or answered; the rest passes. A
 * reply passes too: answering one could send it round for ever (a sender
 * on the listening port, or two listeners on one port). */
SEC("xdp")
int listen_xdp(struct xdp_md *ctx)
{
    struct qk_listen *L = qk_listen();
    struct qk_udp_packet h;
    if (!L || !L->open)
        return XDP_PASS;
    unsigned char *p = qk_listen_payload(ctx, L, &h);
    void *end = (void *)(long)ctx->data_end;
    if (!p || (void *)(p + 4) > end || qk_be32(p) != QK_LISTEN_MAGIC)
        return XDP_PASS;
    if ((void *)(p + 8) > end)
        return XDP_DROP;    /* a refusal could not fit */
    if (p[5] & QK_LK_REPLY)
        return XDP_PASS;
    u32 len = bpf_ntohs(h.udp->len);
    if (len < sizeof(struct udphdr) + 8 || (void *)p + (len - sizeof(struct udphdr)) > end ||
        sizeof(struct iphdr) + len > bpf_ntohs(h.ip->tot_len))
        return XDP_DROP;    /* shorter than the reply's bytes, or than it says, or past its IP packet */
    len -= sizeof(struct udphdr);
    if (len < QK_LISTEN_HDR || (void *)(p + QK_LISTEN_HDR) > end)
        return qk_listen_reply(&h, p, QK_LK_REFUSED, QK_LR_LENGTH);
    if (p[4] != QK_LISTEN_VERSION)
        return qk_listen_reply(&h, p, QK_LK_REFUSED, QK_LR_VERSION);
    if (p[5] == QK_LK_STEP)
        return qk_listen_on_step(ctx, L, &h, p, len);
    if (p[5] == QK_LK_POLL)
        return qk_listen_on_poll(ctx, &h, p, len);
    return qk_listen_reply(&h, p, QK_LK_REFUSED, QK_LR_KIND);
}

/* Both lanes from one system call: the host runs lane_kick, an XDP
 * program, once through BPF_PROG_TEST_RUN in live-frames mode. It starts
 * lane 0 on the caller's CPU and redirects its frame into m_lane_cpus,
 * whose entry for the other lane's CPU runs lane_kicked in that CPU's
 * kthread, which starts lane 1 there. The kthread may run after the step
 * stopped, or during the next one's set-up: lane_kicked starts lane 1 only
 * by taking the step's ticket (qk_chain.kick), which the host takes back
 * when the step stops. */
#define QK_ETH_HLEN 14

static __always_inline struct qk_lane_kick *qk_kick_of(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct qk_lane_kick *k = data + QK_ETH_HLEN;
    return (void *)(k + 1) <= end ? k : NULL;
}

SEC("xdp")
int lane_kick(struct xdp_md *ctx)
{
    struct qk_lane_kick *k = qk_kick_of(ctx);
    struct qk_chain *c = qk_chain();
    if (!k || !c)
        return XDP_ABORTED;
    u32 other = k->cpu[0] == bpf_get_smp_processor_id() ? k->cpu[1] : k->cpu[0];
    if (__sync_val_compare_and_swap(&c->lane_state[0], QK_LANE_WAITING, QK_LANE_STARTED) == QK_LANE_WAITING)
        qk_lane_start(c, 0, QK_PROGRAM_COUNT, 0);
    return bpf_redirect_map(&m_lane_cpus, other, XDP_DROP);
}

/* A listen request's frame (the accept reply, turned round): lane 1
 * starts parked when the request's ticket is still there, and the reply
 * leaves through the interface the request came in on. */
static __always_inline int qk_listen_kicked(struct xdp_md *ctx)
{
    struct qk_listen *L = qk_listen();
    if (!L)
        return XDP_DROP;
    u32 request = qk_volatile_load(&L->kick);
    if (request && __sync_val_compare_and_swap(&L->kick, request, 0) == request) {
        L->left_gen[1] = 0;
        *(volatile u32 *)&L->parked[1] = request;
        if (!qk_lane_idle(1))
            __sync_val_compare_and_swap(&L->parked[1], request, 0);
    }
    return bpf_redirect(ctx->ingress_ifindex, 0);
}

SEC("xdp/cpumap")
int lane_kicked(struct xdp_md *ctx)
{
    struct qk_lane_kick *k = qk_kick_of(ctx);
    struct qk_chain *c = qk_chain();
    struct qk_listen *L = qk_listen();
    if (L && qk_volatile_load(&L->open))
        return qk_listen_kicked(ctx);
    if (!k || !c || !k->step || __sync_val_compare_and_swap(&c->kick, k->step, 0) != k->step)
        return XDP_DROP;    /* a late frame: its step stopped */
    if (__sync_val_compare_and_swap(&c->lane_state[1], QK_LANE_WAITING, QK_LANE_STARTED) == QK_LANE_WAITING)
        qk_lane_start(c, 1, QK_PROGRAM_COUNT, 0);
    return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
