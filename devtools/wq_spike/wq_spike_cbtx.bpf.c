// SPDX-License-Identifier: MIT
/* wq_spike_cbtx.bpf.c - a work item's callback that would send a packet
 * (bpf_redirect): the load is expected to fail (scripts/wq_spike.sh prints
 * the verifier's reason). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "qk_wq.h"

struct item {
    struct bpf_wq wq;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, unsigned int);
    __type(value, struct item);
} items SEC(".maps");

static int cb(void *map, int *key, void *value)
{
    return bpf_redirect(1, 0);
}

SEC("syscall")
int init(void *ctx)
{
    unsigned int key = 0;
    struct item *it = bpf_map_lookup_elem(&items, &key);
    if (!it || bpf_wq_init(&it->wq, &items, 0))
        return 1;
    return bpf_wq_set_callback_impl(&it->wq, cb, 0, NULL);
}

char LICENSE[] SEC("license") = "GPL";
