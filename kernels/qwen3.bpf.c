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

char LICENSE[] SEC("license") = "Dual MIT/GPL";
