/* qk_wq.h - BPF work items (bpf_wq) for the kernel schedule and its
 * experiments (devtools/wq_spike/): the type and the kfuncs, which Debian
 * 12's linux/bpf.h predates; the verifier knows the type by its BTF name. */
#ifndef QP_QK_WQ_H
#define QP_QK_WQ_H

struct bpf_wq {
    unsigned long long __opaque[2];
} __attribute__((aligned(8)));

extern int bpf_wq_init(struct bpf_wq *wq, void *p__map, unsigned int flags) __weak __ksym;
extern int bpf_wq_start(struct bpf_wq *wq, unsigned int flags) __weak __ksym;
extern int bpf_wq_set_callback_impl(struct bpf_wq *wq, int (callback_fn)(void *map, int *key, void *value),
                                    unsigned int flags__k, void *aux__ign) __weak __ksym;

#endif
