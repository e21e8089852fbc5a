/* backend.h - where the kernels run: in BPF (bpf_backend.c) or in the host
 * twin compiled from the same source (emu.c). The scheduler (forward.c)
 * drives either one kernel invocation at a time. */
#ifndef QP_BACKEND_H
#define QP_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "plan.h"

/* the kernels, in QK_PROGRAMS's order (kernels/qwen3_abi.h) */
enum qp_kernel {
#define QP_KERNEL_ENUM(NAME, name, kernel) QP_K_##NAME,
    QK_PROGRAMS(QP_KERNEL_ENUM)
#undef QP_KERNEL_ENUM
    QP_K_COUNT
};

struct qp_backend {
    const char *name;
    /* one kernel invocation; safe to call from two threads at once on
     * disjoint ranges. prog_ns (may be NULL) gets the time the program
     * itself ran as the kernel clocked it (bpf: bpf_prog_test_run's
     * duration, from the program's start to its end with migration off: a
     * preemption inside the run counts, the system call around it and a
     * wait before or after it do not; 0 from backends without that clock).
     * Returns 0 when done, -1 (err set) when refused or failed, and
     * QK_RET_PARTIAL + n when the call budget stopped it after n units
     * (qwen3_abi.h): the caller runs the rest */
    int (*run)(struct qp_backend *b, enum qp_kernel k, const struct qk_args *a, uint64_t *prog_ns, qp_err *err);
    void (*destroy)(struct qp_backend *b);
    /* the memory of a state map, the kernels' own (NULL for weight maps):
     * tests read it, a KV cache slot is copied through it */
    void *(*state)(struct qp_backend *b, enum qp_map_id id);
    /* results, readable after a forward pass */
    const int64_t *logits;              /* Q32 [vocab] */
    const struct qk_scalars *scal;      /* argmax */
    const int64_t *h;                   /* residual [hidden] (tests, --trace-layers) */
    uint8_t *work;                      /* --stream: where jobs' weight blocks are staged */
    struct qk_seq *seq;                 /* [block]: each block entry's slot and position, written
                                           by the schedule before a block runs */
    uint64_t map_bytes;                 /* bytes in BPF maps (0 for emu) */
    double verify_ms, copy_ms;          /* start-up: program load, weight copy */
    /* the verifier's processed instructions per kernel (bpf_prog_info's
     * verified_insns; 0 for emu) */
    uint32_t verified_insns[QP_K_COUNT];
    /* the kernel schedule (docs/SCHEDULE.md; NULL unless the plan asked for
     * it): the job list's memory, QK_CHAIN_MAX_JOBS entries, and the step
     * that runs its first n jobs in the kernel, a lane of BPF work items on
     * each of the plan's kernel_lanes CPUs, and waits for the lanes to end;
     * interrupt (may be NULL) cancels the step before each lane's next work
     * item. out gets the step's final state. Returns 0 when the step ran,
     * whatever its status; -1 (err set) when it could not be started or
     * waited for */
    struct qk_job *jobs;
    int (*run_chain)(struct qp_backend *b, uint32_t n, const atomic_bool *interrupt, struct qk_chain *out,
                     qp_err *err);
    /* qrun listen (docs/LISTEN.md), with the kernel schedule: the job list
     * templates (tmpl_entries jobs, QK_LISTEN_TMPL_JOBS a template), the
     * listener's state, the sessions' map and the XDP program */
    struct qk_job *tmpl;
    uint32_t tmpl_entries;
    struct qk_listen *listen;
    int sessions_fd, listen_xdp_fd;
    uint32_t kernel_lanes;              /* the lanes a step runs (fewer than the plan's on one CPU) */
    const char *lane_start;             /* how two lanes start: "xdp" (both from the step's one test run,
                                           through a CPU map), "thread" (lane 1 from a thread on the other
                                           CPU); NULL with fewer */
    int lane_cpu[2];                    /* two lanes: their CPUs (with "xdp", the CPU map's entries) */
};

const char *qp_kernel_name(enum qp_kernel k);

/* The matrix product's program for a matrix of kernel encoding enc
 * (QK_ENC_*) over nb block entries: the unpacking block program when there
 * are enough entries for it to pay and the encoding has one. */
enum qp_kernel qp_matvec_kernel(uint32_t enc, uint32_t nb);

/* The host twin, reading weights from the container in place. */
int qp_emu_create(struct qp_backend **b, const struct qp_plan *plan, qp_err *err);

/* The BPF backend: creates the maps, copies the weights in, loads and
 * verifies the programs. */
int qp_bpf_create(struct qp_backend **b, const struct qp_plan *plan, qp_err *err);
/* Pins b's maps (map_NAME), loaded programs (prog_NAME) and model
 * constants (rodata) under the bpffs folder dir (engine/resident.c). */
int qp_bpf_pin(struct qp_backend *b, const struct qp_plan *plan, const char *dir, qp_err *err);
/* The BPF backend on objects pinned under dir by qp_bpf_pin for this
 * plan: no load, no verification, no copy; every map's size and the
 * programs' constants are checked against the plan (a mismatch fails
 * QP_E_FORMAT, a refused open QP_E_PRIVILEGE). */
int qp_bpf_attach(struct qp_backend **b, const struct qp_plan *plan, const char *dir, qp_err *err);
/* The model constants of the programs pinned under dir. */
int qp_bpf_pinned_config(const char *dir, struct qk_config *cfg, qp_err *err);
/* A hash of the kernels' BPF object and the host-kernel ABI's sizes: pinned
 * objects of another build of qpack are refused. */
uint64_t qp_bpf_build_id(void);
/* false without CAP_PERFMON (or CAP_SYS_ADMIN) or when loading a
 * two-instruction socket filter is refused for privilege: tells a missing
 * privilege from a verifier's refusal */
bool qp_bpf_may_load(void);
/* What a failed load's errno e means for this plan, in words (NULL when
 * there is nothing to add): E2BIG names the map whose values pass the
 * kernel's 4 MiB limit (buf holds the text), else the verifier's limit;
 * neither is a lack of memory, which is ENOMEM. */
const char *qp_bpf_load_hint(const struct qp_plan *plan, int e, char *buf, size_t cap);

#endif
