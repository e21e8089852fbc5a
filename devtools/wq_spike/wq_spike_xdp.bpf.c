// SPDX-License-Identifier: MIT
/* wq_spike_xdp.bpf.c - may a packet start a work item? An XDP and a tc
 * program call bpf_wq_start on an item a syscall program initialised, and
 * XDP answers a later packet with XDP_TX, the only way a reply can leave
 * (docs/SCHEDULE.md, "Inference from a packet"; wq_spike_xdp.c runs it on
 * loopback). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

typedef unsigned long long u64;
typedef unsigned int u32;

#include "qk_wq.h"

#define PORT 47999
#define JOBS 1024

struct item {
    struct bpf_wq wq;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct item);
} items SEC(".maps");

struct spike {
    u64 starts[2];      /* [0] by XDP, [1] by tc */
    long start_ret[2];  /* the last bpf_wq_start's return */
    u64 runs;           /* callbacks run */
    u64 pkt_ns, lat_ns; /* the starting packet's time; packet to callback */
    u32 answer;         /* what the callback left for the next packet */
    u32 replies;        /* packets XDP turned round with XDP_TX */
    u64 patch_ns;       /* copying and patching JOBS jobs in the callback */
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, u32);
    __type(value, struct spike);
} state SEC(".maps");

/* a job list template and the list a step would run (struct qk_job's size) */
struct job {
    u32 program, phase_end;
    u32 args[14];
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, JOBS);
    __type(key, u32);
    __type(value, struct job);
} tmpl SEC(".maps"), jobs SEC(".maps");

static struct spike *spike(void)
{
    u32 key = 0;
    return bpf_map_lookup_elem(&state, &key);
}

static long patch_one(u32 i, void *ctx)
{
    struct job *t = bpf_map_lookup_elem(&tmpl, &i), *j = bpf_map_lookup_elem(&jobs, &i);
    if (!t || !j)
        return 1;
    *j = *t;
    j->args[3] = *(u32 *)ctx;   /* max_pos: the request's position */
    return 0;
}

/* the step: here only the job list built from its template, then the
 * answer the next packet takes */
static int step_cb(void *map, int *key, void *value)
{
    struct spike *s = spike();
    if (!s)
        return 0;
    u64 t0 = bpf_ktime_get_ns();
    u32 pos = 7;
    s->lat_ns = t0 - s->pkt_ns;
    bpf_loop(JOBS, patch_one, &pos, 0);
    s->patch_ns = bpf_ktime_get_ns() - t0;
    s->answer = 4242;
    __sync_fetch_and_add(&s->runs, 1);
    return 0;
}

SEC("syscall")
int init(void *ctx)
{
    u32 key = 0;
    struct item *it = bpf_map_lookup_elem(&items, &key);
    if (!it || bpf_wq_init(&it->wq, &items, 0))
        return 1;
    return bpf_wq_set_callback_impl(&it->wq, step_cb, 0, NULL);
}

/* the UDP payload of a packet to PORT, or NULL */
static unsigned char *payload(void *data, void *end, struct udphdr **udp_out)
{
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return NULL;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
        return NULL;
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > end || udp->dest != bpf_htons(PORT))
        return NULL;
    *udp_out = udp;
    return (unsigned char *)(udp + 1);
}

static int start(int who)
{
    u32 key = 0;
    struct item *it = bpf_map_lookup_elem(&items, &key);
    struct spike *s = spike();
    if (!it || !s)
        return 0;
    s->pkt_ns = bpf_ktime_get_ns();
    s->start_ret[who & 1] = bpf_wq_start(&it->wq, 0);
    __sync_fetch_and_add(&s->starts[who & 1], 1);
    return 0;
}

/* 'S' starts the step; 'R' is turned round with the answer (XDP_TX) */
SEC("xdp")
int on_xdp(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct udphdr *udp;
    unsigned char *p = payload(data, end, &udp);
    if (!p || (void *)(p + 8) > end)
        return XDP_PASS;
    if (p[0] == 'S') {
        start(0);
        return XDP_DROP;
    }
    if (p[0] != 'R')
        return XDP_PASS;
    struct spike *s = spike();
    if (!s)
        return XDP_PASS;
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    unsigned char mac[ETH_ALEN];
    __builtin_memcpy(mac, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
    u32 a = ip->saddr;
    ip->saddr = ip->daddr;
    ip->daddr = a;
    __be16 port = udp->source;
    udp->source = udp->dest;
    udp->dest = port;
    udp->check = 0;
    p[0] = 'A';
    __builtin_memcpy(p + 4, &s->answer, 4);
    __sync_fetch_and_add(&s->replies, 1);
    return XDP_TX;
}

SEC("tc")
int on_tc(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct udphdr *udp;
    unsigned char *p = payload(data, end, &udp);
    if (p && (void *)(p + 1) <= end && p[0] == 'T')
        start(1);
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
