/* bpf_backend.h - the BPF backend's state, shared by its loader
 * (bpf_backend.c) and its kernel schedule (bpf_chain.c). */
#ifndef QP_BPF_BACKEND_H
#define QP_BPF_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "qwen3.skel.h"

#define ETH_HLEN 14   /* socket-filter test runs drop this much of data_in */

/* What the kernel schedule runs on, besides the kernels' maps and
 * programs, pinned with a model loaded for it: the work items' map keeps
 * a user reference through its pin (without one the kernel cancels its
 * items), and each item keeps the program that set its callback. The
 * XDP programs and the CPU map (whose entries hold lane_kicked) are there
 * only when the loader could load XDP. */
enum qp_sched_object { QP_SCHED_WQ, QP_SCHED_JOBS, QP_SCHED_CHAIN, QP_SCHED_DONE, QP_SCHED_LANE_START,
                       QP_SCHED_TMPL, QP_SCHED_LISTEN, QP_SCHED_SESSIONS, QP_SCHED_LISTEN_XDP, QP_SCHED_LANE_KICK,
                       QP_SCHED_LANE_CPUS, QP_SCHED_OBJECTS };

struct bpfb {
    struct qp_backend b;
    struct qwen3 *skel;                 /* NULL when attached to pinned objects */
    int prog_fd[QP_K_COUNT];            /* -1: not loaded (the other KV cache's pair) */
    int map_fd[QP_MAP_COUNT];
    int rodata_fd;
    const struct qp_plan *plan;
    void *mapped[QP_MAP_COUNT];         /* state maps, mapped when first needed */
    size_t mapped_len[QP_MAP_COUNT];
    /* the kernel schedule (plan->kernel_lanes) */
    struct qk_job *jobs;                /* map m_jobs, mapped */
    struct qk_chain *chain;             /* map m_chain, mapped */
    struct qk_job *tmpl;                /* map m_tmpl, mapped: qrun listen's templates */
    uint32_t tmpl_entries;
    struct qk_listen *listen;           /* map m_listen, mapped */
    int sessions_fd, listen_xdp_fd;
    struct ring_buffer *chain_done;     /* the lanes' records: the step stopped, the last lane ended */
    int sched_fd[QP_SCHED_OBJECTS];     /* attached: the pinned objects the schedule runs on; else -1 */
    int lane_start_fd;
    uint32_t lanes;
    atomic_bool stepping;               /* this process's step runs: a pinned model's chain may be another's */
    /* two lanes: lane_kick starts both (kick_fd >= 0), else a thread pinned to
       each CPU, the one the caller is not on, starts lane 1 */
    int kick_fd;
    uint32_t kick_step;                 /* the last step's number (qk_chain.kick) */
    int lane_cpu[2];
    struct lane_thread *lane_threads[2];
};

bool may_load_xdp(void);

/* bpf_chain.c */
int chain_open(struct bpfb *s, qp_err *err);
int chain_attach(struct bpfb *s, const int fd[QP_SCHED_OBJECTS], qp_err *err);
void chain_close(struct bpfb *s);
int bpfb_run_chain(struct qp_backend *b, uint32_t n, const atomic_bool *interrupt, struct qk_chain *out,
                   qp_err *err);
void load_chain_programs(struct qwen3 *skel, const struct qk_config *cfg, bool on);
void load_kick_programs(struct qwen3 *skel, uint32_t lanes);
void skel_sched_fds(struct qwen3 *skel, int fd[QP_SCHED_OBJECTS]);

#endif
