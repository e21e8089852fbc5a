/* resident.h - a model loaded once into BPF and pinned in bpffs, for any
 * process to open by name (docs/RESIDENT.md): the folder
 * /sys/fs/bpf/qpack/NAME holds the kernels' maps and programs, the
 * manifest (a frozen one-entry map) and the owner table of the KV cache
 * slots. Every process that opens it steps under one lock (flock of the
 * folder): the per-step state maps are shared, the KV cache slots are not. */
#ifndef QP_RESIDENT_H
#define QP_RESIDENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "plan.h"
#include "qpk.h"

struct qp_backend;

#define QP_PIN_ROOT "/sys/fs/bpf/qpack"
#define QP_PIN_PREFIX "pin:"            /* -m pin:NAME */
#define QP_PIN_MAGIC "QPKPIN\0"         /* 8 bytes with the terminator */
#define QP_PIN_VERSION 2
#define QP_PIN_NAME_MAX 64
#define QP_PIN_MAX_SLOTS 1024           /* qpack load --sessions at most */

/* The manifest: the value of map `manifest` (key 0), written once by the
 * load and frozen. Host byte order: pinned objects never leave the host. */
struct qp_pin_manifest {
    char magic[8];              /* QP_PIN_MAGIC */
    uint32_t version;           /* QP_PIN_VERSION */
    uint32_t size;              /* sizeof(struct qp_pin_manifest) */
    uint64_t build_id;          /* qp_bpf_build_id() of the loader */
    char name[QP_PIN_NAME_MAX];
    char container[4096];       /* absolute path of the .qpk */
    uint64_t container_size, container_mtime_ns, container_ino, container_dev;
    uint64_t container_dir_xxh3;        /* the container's directory checksum */
    uint32_t ctx, slots, block, kv8;    /* the plan's parameters */
    uint32_t call_budget_ns;
    uint32_t loader_pid;
    uint64_t map_bytes, weight_bytes, kv_bytes;
    uint64_t loaded_unix;       /* seconds */
    uint32_t gid, mode;         /* the pinned files' group and mode */
    uint32_t kernel_schedule;   /* 1: loaded with --schedule kernel, its work items and job list pinned */
    uint32_t reserved;          /* 0 */
};

/* One KV cache slot's owner (map `owners`, key = slot): 0 pid when free. */
struct qp_pin_owner {
    uint32_t pid;
    uint32_t uid;
    uint64_t start_ticks;       /* the owner's start time (/proc/PID/stat, field 22) */
};

/* An opened loaded model. */
struct qp_pin {
    char dir[256];
    int dir_fd;                 /* flock: the step lock and the owner table's lock */
    int owners_fd;
    struct qp_pin_manifest man;
};

/* A loaded model's name: 1..63 of [A-Za-z0-9._-], not starting with '.' */
int qp_pin_check_name(const char *name, qp_err *err);

/* Makes sure bpffs is mounted on /sys/fs/bpf, mounting it when not;
 * *mounted says whether it did. */
int qp_pin_mount(bool *mounted, qp_err *err);

/* Makes /sys/fs/bpf searchable (x) by group and others when it is not
 * (systemd mounts it 0700): without, no group reaches a model's folder.
 * Listing it (r) stays root's. *changed says whether it did. */
int qp_pin_reachable(bool *changed, qp_err *err);

struct qp_pin_access {
    gid_t gid;                  /* (gid_t)-1: root's */
    mode_t mode;                /* of the pinned files, e.g. 0660; the folder gets x where r is */
};

/* Pins the BPF backend b of plan (open on container f) as NAME with a
 * manifest and an owner table of plan->cfg.kv_slots slots. Refuses a name in
 * use (QP_E_BUSY). On failure nothing stays pinned. */
int qp_pin_load(const char *name, const struct qpk_file *f, const struct qp_plan *plan, struct qp_backend *b,
                const struct qp_pin_access *acc, qp_err *err);

/* Unpins NAME (processes that hold it keep it until they close). */
int qp_pin_unload(const char *name, qp_err *err);

/* Opens NAME: its folder and manifest, checked against this build. */
int qp_pin_open(struct qp_pin *p, const char *name, qp_err *err);
void qp_pin_close(struct qp_pin *p);

/* The container f against the manifest: same file, unchanged. */
int qp_pin_check_container(const struct qp_pin *p, const struct qpk_file *f, qp_err *err);

/* Claims a free KV cache slot (or one whose owner died) for this process;
 * QP_E_BUSY when every slot is held by a live process. */
int qp_pin_claim(struct qp_pin *p, uint32_t *slot, qp_err *err);
void qp_pin_release(struct qp_pin *p, uint32_t slot);

/* The step lock: one process's forward block at a time. */
int qp_pin_lock(struct qp_pin *p, qp_err *err);
void qp_pin_unlock(struct qp_pin *p);

/* Whether the owner of a slot is alive (pid and start time). */
bool qp_pin_owner_alive(const struct qp_pin_owner *o);

/* The slots' owners, n = p->man.slots of them, into out. */
int qp_pin_owners(const struct qp_pin *p, struct qp_pin_owner *out, qp_err *err);

#endif
