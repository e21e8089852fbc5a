// SPDX-License-Identifier: MIT
/* probe.bpf.c - the smallest kernel: qrun loads it first to learn whether
 * this process may load BPF programs and run them with bpf_prog_test_run,
 * and the build uses it to prove the skeleton pipeline. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("socket")
int probe(struct __sk_buff *skb)
{
    return 42;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
