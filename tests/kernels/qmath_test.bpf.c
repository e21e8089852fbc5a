// SPDX-License-Identifier: MIT
/* qmath_test.bpf.c - every function of qmath.h as a BPF program, so tests
 * can compare each against its host build bit for bit on any inputs. One
 * invocation evaluates one function on a batch of inputs from `io`. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "qmath_test.h"

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(key_size, 4);
    __uint(value_size, sizeof(struct qmt_case));
    __uint(max_entries, QMT_BATCH);
} io SEC(".maps");

struct qmt_ctx {
    u32 fn;
};

static long eval_cb(u64 i, void *vctx)
{
    struct qmt_ctx *cx = vctx;
    u32 key = (u32)i;
    struct qmt_case *c = bpf_map_lookup_elem(&io, &key);
    if (!c)
        return 1;
    qmt_eval(cx->fn, c);
    return 0;
}

SEC("socket")
int qmath_eval(struct __sk_buff *skb)
{
    u32 args[2];
    if (bpf_skb_load_bytes(skb, 0, args, sizeof(args)) || args[1] > QMT_BATCH)
        return 1;
    struct qmt_ctx cx = {args[0]};
    bpf_loop(args[1], eval_cb, &cx, 0);
    return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
