// SPDX-License-Identifier: MIT
/* wq_spike.bpf.c - what BPF work items (bpf_wq) allow, on the running
 * kernel: the experiments docs/SCHEDULE.md reports (scripts/wq_spike.sh
 * builds and runs them with wq_spike.c). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

typedef unsigned long long u64;
typedef unsigned int u32;

#include "qk_wq.h"

#define CHAIN 10        /* item 0 restarts itself this often */
#define RUNS 64

struct item {
    struct bpf_wq wq;
    u64 n;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 4);
    __type(key, u32);
    __type(value, struct item);
} items SEC(".maps");

struct spike {
    u64 runs[4];
    u64 cpu[4][RUNS];
    u64 t0[4][RUNS], t1[4][RUNS];       /* bpf_ktime_get_ns at an item's start and end */
    u64 start_ns;                       /* when the submission ran */
    u64 subprog;                        /* a global subprogram's work, called from a callback */
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct spike);
} state SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 4096);
} done SEC(".maps");

const volatile u64 busy_ns = 5000000;  /* items 2 and 3 hold their core this long */

__attribute__((noinline)) int global_add(u64 *p)
{
    if (!p)
        return -1;
    *p += 7;
    return 0;
}

static struct spike *spike(void)
{
    u32 key = 0;
    return bpf_map_lookup_elem(&state, &key);
}

static void stamp(struct spike *s, u32 k, u64 t0)
{
    u64 n = __sync_fetch_and_add(&s->runs[k & 3], 1) & (RUNS - 1);
    s->cpu[k & 3][n] = bpf_get_smp_processor_id();
    s->t0[k & 3][n] = t0;
    s->t1[k & 3][n] = bpf_ktime_get_ns();
}

/* item 0: calls a global subprogram, restarts itself CHAIN times, then starts item 1 */
static int chain_cb(void *map, int *key, void *value)
{
    struct item *it = value;
    struct spike *s = spike();
    if (!s)
        return 0;
    stamp(s, 0, bpf_ktime_get_ns());
    global_add(&s->subprog);
    if (++it->n < CHAIN) {
        bpf_wq_start(&it->wq, 0);
        return 0;
    }
    u32 next = 1;
    struct item *last = bpf_map_lookup_elem(&items, &next);
    if (last)
        bpf_wq_start(&last->wq, 0);
    return 0;
}

/* item 1: the end of the chain, reported through the ring buffer */
static int done_cb(void *map, int *key, void *value)
{
    struct spike *s = spike();
    if (!s)
        return 0;
    stamp(s, 1, bpf_ktime_get_ns());
    u64 v = 1;
    bpf_ringbuf_output(&done, &v, sizeof v, 0);
    return 0;
}

static long spin(u32 i, void *ctx)
{
    return bpf_ktime_get_ns() >= *(u64 *)ctx;
}

/* items 2 and 3: hold the core busy_ns in a bpf_loop */
static int busy_cb(void *map, int *key, void *value)
{
    struct spike *s = spike();
    if (!s)
        return 0;
    u64 t0 = bpf_ktime_get_ns(), end = t0 + busy_ns;
    bpf_loop(1 << 23, spin, &end, 0);
    stamp(s, *key, t0);
    return 0;
}

SEC("syscall")
int init(void *ctx)
{
    for (u32 k = 0; k < 4; k++) {
        u32 key = k;
        struct item *it = bpf_map_lookup_elem(&items, &key);
        if (!it)
            return 1;
        if (bpf_wq_init(&it->wq, &items, 0))
            return 2;
        if (bpf_wq_set_callback_impl(&it->wq, k == 0 ? chain_cb : k == 1 ? done_cb : busy_cb, 0, NULL))
            return 3;
    }
    return 0;
}

/* a syscall program starts a work item too */
SEC("syscall")
int start_chain(void *ctx)
{
    u32 key = 0;
    struct item *it = bpf_map_lookup_elem(&items, &key);
    struct spike *s = spike();
    if (!it || !s)
        return 1;
    it->n = 0;
    s->start_ns = bpf_ktime_get_ns();
    return bpf_wq_start(&it->wq, 0);
}

/* and so does a socket filter, as the issue found: item 2 or 3 (the test
 * run's first data byte) */
SEC("socket")
int start_busy(struct __sk_buff *skb)
{
    unsigned char which = 0;
    if (bpf_skb_load_bytes(skb, 0, &which, 1))
        return 100;
    u32 key = which & 1 ? 3 : 2;
    struct item *it = bpf_map_lookup_elem(&items, &key);
    return it ? bpf_wq_start(&it->wq, 0) : 101;
}

char LICENSE[] SEC("license") = "GPL";
