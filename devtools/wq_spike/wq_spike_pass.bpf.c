// SPDX-License-Identifier: MIT
/* wq_spike_pass.bpf.c - lets every packet by: on the sender's end of a
 * veth pair it makes that end take the frames the far end sends back
 * with XDP_TX (scripts/wq_spike.sh tries with and without it). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int pass(struct xdp_md *ctx)
{
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
