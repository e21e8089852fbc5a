// SPDX-License-Identifier: MIT
/* wq_spike_cpumap.bpf.c - may one BPF_PROG_TEST_RUN start a work item on
 * each CPU? kick, an XDP program run in live-frames mode, starts item 0 on
 * the caller's CPU and redirects its frame into a CPU map whose entry runs
 * on_cpu in that CPU's kthread, which starts item 1 there
 * (docs/SCHEDULE.md, "Lanes"; wq_spike_cpumap.c runs it). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

typedef unsigned long long u64;
typedef unsigned int u32;

#include "qk_wq.h"

struct item {
    struct bpf_wq wq;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, u32);
    __type(value, struct item);
} items SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_CPUMAP);
    __uint(max_entries, 2);
    __type(key, u32);
    __type(value, struct bpf_cpumap_val);
} cpus SEC(".maps");

/* what one kick did: times by bpf_ktime_get_ns, CPUs by
 * bpf_get_smp_processor_id */
struct spike {
    u64 kick_ns, on_cpu_ns, item_ns[2];
    u32 kick_cpu, on_cpu_cpu, item_cpu[2];
    int start_ret[2];   /* bpf_wq_start's return in kick and on_cpu */
    u32 redirect;       /* kick's verdict */
    u32 items_run[2];
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct spike);
} state SEC(".maps");

static struct spike *spike(void)
{
    u32 key = 0;
    return bpf_map_lookup_elem(&state, &key);
}

static int item_cb(void *map, int *key, void *value)
{
    struct spike *s = spike();
    u32 i = *key & 1;
    if (s) {
        s->item_ns[i] = bpf_ktime_get_ns();
        s->item_cpu[i] = bpf_get_smp_processor_id();
        __sync_fetch_and_add(&s->items_run[i], 1);
    }
    return 0;
}

static int init_one(u32 key)
{
    struct item *it = bpf_map_lookup_elem(&items, &key);
    return !it || bpf_wq_init(&it->wq, &items, 0) || bpf_wq_set_callback_impl(&it->wq, item_cb, 0, NULL);
}

SEC("syscall")
int init(void *ctx)
{
    return init_one(0) || init_one(1);
}

static int start(u32 key)
{
    struct item *it = bpf_map_lookup_elem(&items, &key);
    return it ? bpf_wq_start(&it->wq, 0) : -1;
}

/* the frame goes to the other of CPUs 0 and 1, whichever this runs on */
SEC("xdp")
int kick(struct xdp_md *ctx)
{
    struct spike *s = spike();
    if (!s)
        return XDP_ABORTED;
    s->kick_ns = bpf_ktime_get_ns();
    s->kick_cpu = bpf_get_smp_processor_id();
    s->start_ret[0] = start(0);
    s->redirect = bpf_redirect_map(&cpus, s->kick_cpu ^ 1, 0);
    return s->redirect;
}

SEC("xdp/cpumap")
int on_cpu(struct xdp_md *ctx)
{
    struct spike *s = spike();
    if (s) {
        s->on_cpu_ns = bpf_ktime_get_ns();
        s->on_cpu_cpu = bpf_get_smp_processor_id();
        s->start_ret[1] = start(1);
    }
    return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
