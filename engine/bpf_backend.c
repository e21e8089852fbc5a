/* bpf_backend.c - loads kernels/qwen3.bpf.c: sizes every map from the plan,
 * sets the model constants as read-only data, loads (the verifier checks
 * every kernel against those sizes), then copies the weights into the
 * maps once. A kernel invocation is one bpf_prog_test_run. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/capability.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "backend.h"
#include "qwen3.skel.h"
#include "clock.h"
#include "bpf_backend.h"

/* where each object of the schedule is pinned */
static const char *const sched_pins[QP_SCHED_OBJECTS] = {"map_wq", "map_jobs", "map_chain", "map_chain_done",
                                                          "prog_lane_start", "map_tmpl", "map_listen",
                                                          "map_sessions", "prog_listen_xdp", "prog_lane_kick",
                                                          "map_lane_cpus"};

static bool sched_optional(int i)
{
    return i == QP_SCHED_LISTEN_XDP || i == QP_SCHED_LANE_KICK || i == QP_SCHED_LANE_CPUS;
}

static int libbpf_stderr(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    (void)level;
    return vfprintf(stderr, fmt, ap);   /* QP_BPF_LOG=1 only: a developer asked for the log */
}

static struct bpf_map *map_of(struct qwen3 *s, enum qp_map_id id)
{
    struct bpf_map *maps[QP_MAP_COUNT] = {
#define QP_BPF_MAP(NAME, name) s->maps.m_##name,
        QK_MAPS(QP_BPF_MAP)
#undef QP_BPF_MAP
    };
    return maps[id];
}

static size_t map_bytes(const struct qp_mapspec *m)
{
    size_t n = qp_map_bytes(m);
    long page = sysconf(_SC_PAGESIZE);
    return (n + (size_t)page - 1) / (size_t)page * (size_t)page;
}

static int bpfb_run(struct qp_backend *b, enum qp_kernel k, const struct qk_args *a, uint64_t *prog_ns, qp_err *err)
{
    struct bpfb *s = (struct bpfb *)b;
    uint8_t data[ETH_HLEN + sizeof *a];
    memset(data, 0, ETH_HLEN);
    memcpy(data + ETH_HLEN, a, sizeof *a);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = data, .data_size_in = sizeof data, .repeat = 1);
    if (bpf_prog_test_run_opts(s->prog_fd[k], &opts) != 0)
        return qp_fail(err, "BPF kernel %s: test run failed: %s", qp_kernel_name(k), strerror(errno));
    if (prog_ns)
        *prog_ns = opts.duration;   /* per repeat; repeat is 1 */
    if (opts.retval >= QK_RET_PARTIAL && opts.retval - QK_RET_PARTIAL < UINT32_MAX / 4)
        return (int)opts.retval;
    if (opts.retval != 0)
        return qp_fail(err, "BPF kernel %s rejected its arguments", qp_kernel_name(k));
    return 0;
}


static void bpfb_destroy(struct qp_backend *b)
{
    struct bpfb *s = (struct bpfb *)b;
    chain_close(s);
    for (int i = 0; i < QP_MAP_COUNT; i++)
        if (s->mapped[i])
            munmap(s->mapped[i], s->mapped_len[i]);
    if (s->skel) {
        qwen3__destroy(s->skel);
    } else {
        for (int i = 0; i < QP_MAP_COUNT; i++)
            if (s->map_fd[i] >= 0)
                close(s->map_fd[i]);
        for (int k = 0; k < QP_K_COUNT; k++)
            if (s->prog_fd[k] >= 0)
                close(s->prog_fd[k]);
        for (int i = 0; i < QP_SCHED_OBJECTS; i++)
            if (s->sched_fd[i] >= 0)
                close(s->sched_fd[i]);
        if (s->rodata_fd >= 0)
            close(s->rodata_fd);
    }
    free(s);
}

/* --stream: the matrix maps exist (the programs name them) but hold nothing */
static bool streamed_matrix(const struct qp_plan *plan, int id)
{
    return plan->stream && qp_map_is_matrix(id);
}

static int size_maps(struct bpfb *s, const struct qp_plan *plan, qp_err *err)
{
    for (int i = 0; i < QP_MAP_COUNT; i++) {
        struct bpf_map *m = map_of(s->skel, i);
        if (bpf_map__set_value_size(m, plan->maps[i].value_size) ||
            bpf_map__set_max_entries(m, streamed_matrix(plan, i) ? 1 : plan->maps[i].max_entries))
            return qp_fail(err, "cannot size BPF map %s", plan->maps[i].name);
    }
    s->skel->rodata->CFG = plan->cfg;
    return 0;
}

static bool has_capability(unsigned cap)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2] = {{0}};
    return syscall(SYS_capget, &h, d) == 0 && d[cap / 32].effective & (1u << cap % 32);
}

/* an XDP program's load takes CAP_NET_ADMIN or CAP_SYS_ADMIN */
bool may_load_xdp(void)
{
    return has_capability(CAP_NET_ADMIN) || has_capability(CAP_SYS_ADMIN);
}

bool qp_bpf_may_load(void)
{
    /* a socket filter loads with CAP_BPF alone; the kernels' reads of the
     * clock and their map pointers need CAP_PERFMON as well */
    if (!has_capability(CAP_PERFMON) && !has_capability(CAP_SYS_ADMIN))
        return false;
    const struct bpf_insn insns[2] = {
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
        {.code = BPF_JMP | BPF_EXIT},
    };
    int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "qrun_probe", "GPL", insns, 2, NULL);
    if (fd < 0)
        return errno != EPERM && errno != EACCES;
    close(fd);
    return true;
}

/* an array map's value past this is refused with E2BIG (the kernel's
 * KMALLOC_MAX_SIZE: 4 MiB pages, order 10) */
#define KERNEL_MAX_MAP_VALUE (4u << 20)

/* the reason behind a load's errno, written into buf when it names a map */
const char *qp_bpf_load_hint(const struct qp_plan *plan, int e, char *buf, size_t cap)
{
    if ((e == EPERM || e == EACCES) && qp_bpf_may_load())
        return "the kernel's verifier refused a kernel for this model's sizes (QP_BPF_LOG=1 prints its log)";
    if (e == EPERM || e == EACCES)
        return "loading BPF programs needs root or the capabilities CAP_BPF and CAP_PERFMON";
    if (e == ENOMEM)
        return "the kernel refused the memory for the BPF maps; try --stream or a smaller format";
    if (e != E2BIG)
        return NULL;
    /* E2BIG is a size past a kernel limit, not a lack of memory: a map's
     * value, or a program past the verifier's 1M processed instructions */
    for (int i = 0; i < QP_MAP_COUNT; i++)
        if (plan->maps[i].value_size > KERNEL_MAX_MAP_VALUE) {
            snprintf(buf, cap, "map %s has values of %u bytes, past the kernel's limit of %u (not a lack of memory)",
                     plan->maps[i].name, plan->maps[i].value_size, KERNEL_MAX_MAP_VALUE);
            return buf;
        }
    return "a kernel took more than the verifier's limit of 1M processed instructions at this model's sizes "
           "(not a lack of memory; QP_BPF_LOG=1 prints the verifier's log)";
}

/* The weights go in through BPF_MAP_UPDATE_BATCH, not the maps' user
 * mappings: the kernel writes them through the address the kernels read
 * them from. On a host that builds page tables lazily (this VM keeps shadow
 * page tables: ~4 s per GB and core for the first touch of a page through
 * each mapping, measured on plain anonymous memory too) that touch is paid once,
 * at load, on both cores, instead of once through a user mapping and again
 * in the first token's kernel calls (up to 120 ms per call). For the same
 * reason the bytes come from the container by pread into a buffer each
 * thread reuses, not through its mapping: no faults on the user side, and
 * nothing of the model stays in this process's memory. */
#define COPY_KEYS 256           /* keys per batch: 4 MiB of 0.6B q24 blocks */
#define COPY_THREADS 2          /* 4 copy no faster here (the cost is page-table faults) */

struct copy_batch {
    int fd;
    uint32_t first_key, n_keys, value_size;
    const uint8_t *data;        /* in the container's mapping (read by pread) or in memory */
    const struct qp_segment *seg;     /* packed: data holds its stored blocks, expanded on the way */
    const char *map;            /* for the error */
};

struct copy_job {
    struct copy_batch *batches;
    uint32_t n_batches;
    size_t batch_bytes;         /* of the largest batch: each thread's buffers (two) */
    const struct qpk_file *file;
    _Atomic uint32_t next;
    _Atomic int failed_errno;
    const char *failed_map;
};

/* The bytes of a batch: its data itself, or read from the container into
 * buf when the data lies in the container's mapping, or for a packed
 * tensor read into stored and expanded into buf (both batch_bytes).
 * NULL with errno set (EFAULT when the file ends early). */
static const uint8_t *batch_source(const struct copy_job *j, const struct copy_batch *b, uint8_t *buf,
                                   uint8_t *stored)
{
    const struct qpk_file *f = j->file;
    if (!f || b->data < f->map || b->data >= f->map + f->size)
        return b->data;     /* a table the plan computed */
    if (b->seg->packed) {
        if (qpk_read(f, (uint64_t)(b->data - f->map), stored, (size_t)b->n_keys * b->seg->packed->row_stride))
            return NULL;
        qp_segment_expand(b->seg, stored, b->n_keys, buf, b->value_size);
        return buf;
    }
    return qpk_read(f, (uint64_t)(b->data - f->map), buf, (size_t)b->n_keys * b->value_size) ? NULL : buf;
}

static void *copy_worker(void *arg)
{
    struct copy_job *j = arg;
    uint32_t keys[COPY_KEYS];
    uint8_t *buf = malloc(2 * j->batch_bytes);
    if (!buf) {
        int zero = 0;
        atomic_compare_exchange_strong(&j->failed_errno, &zero, ENOMEM);
        return NULL;
    }
    for (;;) {
        uint32_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_batches || atomic_load(&j->failed_errno))
            break;
        const struct copy_batch *b = &j->batches[i];
        for (uint32_t k = 0; k < b->n_keys; k++)
            keys[k] = b->first_key + k;
        __u32 count = b->n_keys;
        const uint8_t *bytes = batch_source(j, b, buf, buf + j->batch_bytes);
        if (!bytes || bpf_map_update_batch(b->fd, keys, bytes, &count, NULL) || count != b->n_keys) {
            int e = errno ? errno : EIO, zero = 0;
            if (atomic_compare_exchange_strong(&j->failed_errno, &zero, e))
                j->failed_map = b->map;
        }
    }
    free(buf);
    return NULL;
}

/* Splits every segment of every resident map into batches of COPY_KEYS
 * keys, written to out when it is not NULL; returns how many. With
 * --stream, the work map is also written once, from `zeros` (COPY_KEYS
 * values): the first token's kernels would otherwise take the first touch
 * of its pages (calls of up to 30 ms here). */
static uint32_t list_batches(struct bpfb *s, const struct qp_plan *plan, const uint8_t *zeros, struct copy_batch *out)
{
    uint32_t n = 0;
    for (int i = 0; i < QP_MAP_COUNT; i++) {
        const struct qp_mapspec *spec = &plan->maps[i];
        for (uint32_t k = 0; !streamed_matrix(plan, i) && k < spec->n_segs; k++) {
            const struct qp_segment *seg = &spec->segs[k];
            for (uint32_t at = 0; at < seg->n_keys; at += COPY_KEYS, n++) {
                uint32_t keys = seg->n_keys - at < COPY_KEYS ? seg->n_keys - at : COPY_KEYS;
                if (out)
                    out[n] = (struct copy_batch){s->map_fd[i], seg->first_key + at, keys,
                                                 spec->value_size,
                                                 seg->data + (size_t)at * (seg->packed ? seg->packed->row_stride
                                                                                       : spec->value_size),
                                                 seg, spec->name};
            }
        }
    }
    const struct qp_mapspec *work = &plan->maps[QP_MAP_WORK];
    for (uint32_t at = 0; plan->stream && at < work->max_entries; at += COPY_KEYS, n++)
        if (out)
            out[n] = (struct copy_batch){s->map_fd[QP_MAP_WORK], at,
                                         work->max_entries - at < COPY_KEYS ? work->max_entries - at : COPY_KEYS,
                                         work->value_size, zeros, NULL, work->name};
    return n;
}

/* Copies every segment of every resident map; COPY_THREADS threads take
 * the batches in turn. */
static int copy_segments(struct bpfb *s, const struct qp_plan *plan, qp_err *err)
{
    uint8_t *zeros = plan->stream ? calloc(COPY_KEYS, plan->maps[QP_MAP_WORK].value_size) : NULL;
    struct copy_job j = {.n_batches = list_batches(s, plan, zeros, NULL)};
    j.batches = calloc(j.n_batches + 1, sizeof *j.batches);
    if (!j.batches || (plan->stream && !zeros)) {
        free(j.batches);
        free(zeros);
        return qp_fail(err, "out of memory");
    }
    list_batches(s, plan, zeros, j.batches);
    j.file = plan->file;
    for (uint32_t i = 0; i < j.n_batches; i++)
        if ((size_t)j.batches[i].n_keys * j.batches[i].value_size > j.batch_bytes)
            j.batch_bytes = (size_t)j.batches[i].n_keys * j.batches[i].value_size;
    pthread_t helpers[COPY_THREADS - 1];
    int n_helpers = 0;
    while (n_helpers < COPY_THREADS - 1 && pthread_create(&helpers[n_helpers], NULL, copy_worker, &j) == 0)
        n_helpers++;
    copy_worker(&j);
    while (n_helpers > 0)
        pthread_join(helpers[--n_helpers], NULL);
    free(j.batches);
    free(zeros);
    int e = atomic_load(&j.failed_errno);
    if (e == EFAULT)    /* the container read short */
        return qp_fail(err, "filling BPF map %s: the model file was truncated or changed on disk while qrun was reading it",
                       j.failed_map);
    if (e)
        return qp_fail(err, "filling BPF map %s: %s%s", j.failed_map, strerror(e),
                       e == ENOMEM ? "; try --stream or a smaller format" : "");
    return 0;
}

/* Maps state map id into this process, once; NULL on failure. */
static void *map_state(struct bpfb *s, const struct qp_plan *plan, enum qp_map_id id, qp_err *err)
{
    if (s->mapped[id])
        return s->mapped[id];
    size_t len = map_bytes(&plan->maps[id]);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, s->map_fd[id], 0);
    if (p == MAP_FAILED) {
        qp_fail(err, "mmap of BPF map %s (%zu bytes): %s", plan->maps[id].name, len, strerror(errno));
        return NULL;
    }
    s->mapped[id] = p;
    s->mapped_len[id] = len;
    return p;
}

static void finish(struct bpfb *s, const struct qp_plan *plan, double verify_ms, double copy_ms);

/* Fills the maps that hold data from the container (segments) and maps the
 * state maps the host reads or writes every token; the others (the KV
 * cache above all) are mapped only when asked for (bpfb_state, for tests),
 * and the weight maps never are. */
static int fill_maps(struct bpfb *s, const struct qp_plan *plan, qp_err *err)
{
    const enum qp_map_id host_maps[] = {QP_MAP_LOGITS, QP_MAP_SCAL, QP_MAP_H, QP_MAP_WORK, QP_MAP_SEQ};
    for (size_t i = 0; i < sizeof host_maps / sizeof *host_maps; i++)
        if (!map_state(s, plan, host_maps[i], err))
            return -1;
    return copy_segments(s, plan, err);
}

/* pinned objects: the state maps the host reads or writes every token are
 * mapped; the weights are already there */
static int fill_maps_attached(struct bpfb *s, const struct qp_plan *plan, qp_err *err)
{
    const enum qp_map_id host_maps[] = {QP_MAP_LOGITS, QP_MAP_SCAL, QP_MAP_H, QP_MAP_WORK, QP_MAP_SEQ};
    for (size_t i = 0; i < sizeof host_maps / sizeof *host_maps; i++)
        if (!map_state(s, plan, host_maps[i], err))
            return -1;
    return 0;
}

static void *bpfb_state(struct qp_backend *b, enum qp_map_id id)
{
    struct bpfb *s = (struct bpfb *)b;
    qp_err err;
    if (id >= QP_MAP_COUNT || s->plan->maps[id].segs || streamed_matrix(s->plan, id))
        return NULL;
    return map_state(s, s->plan, id, &err);
}

/* the verifier's processed-instruction count of a loaded program (0 on a
 * kernel that does not report it) */
static uint32_t verified_insns(int prog_fd)
{
    struct bpf_prog_info info = {0};
    uint32_t len = sizeof info;
    return bpf_obj_get_info_by_fd(prog_fd, &info, &len) == 0 ? info.verified_insns : 0;
}

/* the rope_store and attention programs of the model's KV cache only: the
 * other pair addresses rows of another size */
static void load_cache_programs(struct qwen3 *skel, bool kv8)
{
    bpf_program__set_autoload(skel->progs.rope_store, !kv8);
    bpf_program__set_autoload(skel->progs.attention, !kv8);
    bpf_program__set_autoload(skel->progs.rope_store8, kv8);
    bpf_program__set_autoload(skel->progs.attention8, kv8);
}


int qp_bpf_create(struct qp_backend **out, const struct qp_plan *plan, qp_err *err)
{
    *out = NULL;
    struct bpfb *s = calloc(1, sizeof *s);
    if (!s)
        return qp_fail(err, "out of memory");
    s->plan = plan;
    s->kick_fd = -1;
    /* QP_BPF_LOG=1 shows libbpf's messages and the verifier's log */
    libbpf_set_print(getenv("QP_BPF_LOG") ? libbpf_stderr : NULL);
    s->skel = qwen3__open();
    int rc = s->skel ? size_maps(s, plan, err) : qp_fail(err, "cannot open the BPF object: %s", strerror(errno));
    if (!rc) {
        load_cache_programs(s->skel, plan->cfg.kv8);
        load_chain_programs(s->skel, &plan->cfg, plan->kernel_lanes > 0);
        load_kick_programs(s->skel, plan->kernel_lanes);
    }
    double t0 = qp_now_ms();
    if (!rc && qwen3__load(s->skel) != 0) {
        int e = errno;
        char why[160];
        const char *hint = qp_bpf_load_hint(plan, e, why, sizeof why);
        int code = e == ENOMEM ? QP_E_MEMORY
                   : (e == EPERM || e == EACCES) && !qp_bpf_may_load() ? QP_E_PRIVILEGE : QP_E_KERNEL;
        rc = qp_fail_code(err, code, "loading the BPF kernels failed: %s%s%s", strerror(e), hint ? "; " : "",
                          hint ? hint : "");
    }
    double t1 = qp_now_ms();
    for (int i = 0; !rc && i < QP_MAP_COUNT; i++)
        s->map_fd[i] = bpf_map__fd(map_of(s->skel, i));
    if (!rc)
        rc = fill_maps(s, plan, err);
    if (!rc && plan->kernel_lanes)
        rc = chain_open(s, err);
    double t2 = qp_now_ms();
    if (rc) {
        if (s->skel)
            bpfb_destroy(&s->b);
        else
            free(s);
        return -1;
    }
    struct bpf_program *progs[QP_K_COUNT] = {
#define QP_PROGRAM_OF(NAME, name, kernel) s->skel->progs.name,
        QK_PROGRAMS(QP_PROGRAM_OF)
#undef QP_PROGRAM_OF
    };
    for (int k = 0; k < QP_K_COUNT; k++)
        s->prog_fd[k] = bpf_program__fd(progs[k]);
    s->rodata_fd = bpf_map__fd(s->skel->maps.rodata);
    finish(s, plan, t1 - t0, t2 - t1);
    *out = &s->b;
    return 0;
}

/* the backend's fields once every map and program has its fd */
static void finish(struct bpfb *s, const struct qp_plan *plan, double verify_ms, double copy_ms)
{
    uint64_t bytes = 0;
    for (int i = 0; i < QP_MAP_COUNT; i++)
        if (!streamed_matrix(plan, i))
            bytes += map_bytes(&plan->maps[i]);
    s->b = (struct qp_backend){.name = "bpf", .run = bpfb_run, .destroy = bpfb_destroy, .state = bpfb_state,
                               .logits = s->mapped[QP_MAP_LOGITS], .scal = s->mapped[QP_MAP_SCAL],
                               .h = s->mapped[QP_MAP_H], .work = s->mapped[QP_MAP_WORK], .seq = s->mapped[QP_MAP_SEQ],
                               .map_bytes = bytes, .verify_ms = verify_ms, .copy_ms = copy_ms,
                               .jobs = s->jobs, .run_chain = s->jobs ? bpfb_run_chain : NULL,
                               .tmpl = s->tmpl, .tmpl_entries = s->tmpl_entries, .listen = s->listen,
                               .sessions_fd = s->jobs ? s->sessions_fd : -1,
                               .listen_xdp_fd = s->jobs ? s->listen_xdp_fd : -1,
                               .kernel_lanes = s->lanes,
                               .lane_start = s->lanes < 2 ? NULL : s->kick_fd >= 0 ? "xdp" : "thread",
                               .lane_cpu = {s->lane_cpu[0], s->lane_cpu[1]}};
    for (int k = 0; k < QP_K_COUNT; k++)
        s->b.verified_insns[k] = s->prog_fd[k] >= 0 ? verified_insns(s->prog_fd[k]) : 0;
}

/* ---- pinned objects (engine/resident.c) ---- */

static int pin_one(int fd, const char *dir, const char *prefix, const char *name, qp_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", dir, prefix, name);
    if (bpf_obj_pin(fd, path))
        return qp_fail(err, "cannot pin %s: %s", path, strerror(errno));
    return 0;
}

int qp_bpf_pin(struct qp_backend *b, const struct qp_plan *plan, const char *dir, qp_err *err)
{
    struct bpfb *s = (struct bpfb *)b;
    static const char *const progs[QP_K_COUNT] = {
#define QP_PROG_NAME(NAME, name, kernel) #name,
        QK_PROGRAMS(QP_PROG_NAME)
#undef QP_PROG_NAME
    };
    for (int i = 0; i < QP_MAP_COUNT; i++)
        if (pin_one(s->map_fd[i], dir, "map_", plan->maps[i].name, err))
            return -1;
    for (int k = 0; k < QP_K_COUNT; k++)
        if (s->prog_fd[k] >= 0 && pin_one(s->prog_fd[k], dir, "prog_", progs[k], err))
            return -1;
    int sched[QP_SCHED_OBJECTS];
    if (s->jobs)
        skel_sched_fds(s->skel, sched);
    for (int i = 0; s->jobs && i < QP_SCHED_OBJECTS; i++)
        if ((!sched_optional(i) || sched[i] >= 0) && pin_one(sched[i], dir, "", sched_pins[i], err))
            return -1;
    return pin_one(s->rodata_fd, dir, "", "rodata", err);
}

/* an object pinned under dir; -1 with err set (a missing file or a refused
 * permission named) */
static int get_pinned(const char *dir, const char *prefix, const char *name, bool optional, qp_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", dir, prefix, name);
    int fd = bpf_obj_get(path);
    if (fd >= 0 || (optional && errno == ENOENT))
        return fd;
    int e = errno;
    if (e == EACCES || e == EPERM)
        return qp_fail_code(err, QP_E_PRIVILEGE, "%s: permission denied (uid %u is not allowed to open the loaded "
                            "model: ask for its group)", path, (unsigned)geteuid());
    return qp_fail_code(err, QP_E_FORMAT, "%s: %s (the loaded model is incomplete: unload and load it again)", path,
                        strerror(e));
}

/* the pinned model constants (the programs' read-only data) against the
 * plan's: the same model, context, slots and cache */
static bool same_config(const struct qk_config *a, const struct qk_config *b)
{
    const struct qm_sf *fa[] = {&a->eps, &a->inv_hidden, &a->inv_head_dim, &a->attn_c};
    const struct qm_sf *fb[] = {&b->eps, &b->inv_hidden, &b->inv_head_dim, &b->attn_c};
    if (memcmp(a, b, offsetof(struct qk_config, eps)))
        return false;
    for (int i = 0; i < 4; i++)
        if (fa[i]->m != fb[i]->m || fa[i]->e != fb[i]->e)
            return false;
    return true;
}

/* the model constants in a pinned rodata map (the section may hold more
 * than CFG, which comes first) */
static int read_config(int fd, struct qk_config *cfg, const char *dir, qp_err *err)
{
    struct bpf_map_info info = {0};
    uint32_t len = sizeof info, key = 0;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) || info.value_size < sizeof *cfg)
        return qp_fail_code(err, QP_E_FORMAT, "%s/rodata: not the programs' constants", dir);
    uint8_t *v = malloc(info.value_size);
    int rc = !v || bpf_map_lookup_elem(fd, &key, v)
                 ? qp_fail(err, "%s/rodata: cannot read the model constants: %s", dir, strerror(errno))
                 : 0;
    if (!rc)
        memcpy(cfg, v, sizeof *cfg);
    free(v);
    return rc;
}

int qp_bpf_pinned_config(const char *dir, struct qk_config *cfg, qp_err *err)
{
    int fd = get_pinned(dir, "", "rodata", false, err);
    if (fd < 0)
        return -1;
    int rc = read_config(fd, cfg, dir, err);
    close(fd);
    return rc;
}

static int check_pinned_map(struct bpfb *s, const struct qp_plan *plan, int i, const char *dir, qp_err *err)
{
    struct bpf_map_info info = {0};
    uint32_t len = sizeof info;
    uint32_t entries = streamed_matrix(plan, i) ? 1 : plan->maps[i].max_entries;
    if (bpf_obj_get_info_by_fd(s->map_fd[i], &info, &len))
        return qp_fail(err, "%s/map_%s: %s", dir, plan->maps[i].name, strerror(errno));
    if (info.value_size != plan->maps[i].value_size || info.max_entries != entries)
        return qp_fail_code(err, QP_E_FORMAT, "%s/map_%s: %u entries of %u bytes, the manifest's plan says %u of %u "
                            "(the manifest does not match the objects)", dir, plan->maps[i].name, info.max_entries,
                            info.value_size, entries, plan->maps[i].value_size);
    return 0;
}

int qp_bpf_attach(struct qp_backend **out, const struct qp_plan *plan, const char *dir, qp_err *err)
{
    *out = NULL;
    struct bpfb *s = calloc(1, sizeof *s);
    if (!s)
        return qp_fail(err, "out of memory");
    s->plan = plan;
    s->rodata_fd = -1;
    s->kick_fd = -1;
    for (int i = 0; i < QP_MAP_COUNT; i++)
        s->map_fd[i] = -1;
    static const char *const progs[QP_K_COUNT] = {
#define QP_PROG_NAME(NAME, name, kernel) #name,
        QK_PROGRAMS(QP_PROG_NAME)
#undef QP_PROG_NAME
    };
    int rc = 0;
    for (int k = 0; k < QP_K_COUNT; k++)
        s->prog_fd[k] = -1;
    for (int i = 0; i < QP_SCHED_OBJECTS; i++)
        s->sched_fd[i] = -1;
    for (int i = 0; !rc && i < QP_MAP_COUNT; i++)
        rc = (s->map_fd[i] = get_pinned(dir, "map_", plan->maps[i].name, false, err)) < 0 ||
             check_pinned_map(s, plan, i, dir, err);
    bool kv8 = plan->cfg.kv8;
    for (int k = 0; !rc && k < QP_K_COUNT; k++) {
        bool other_cache = kv8 ? k == QP_K_ROPE_STORE || k == QP_K_ATTENTION : k == QP_K_ROPE_STORE8 || k == QP_K_ATTENTION8;
        if (!other_cache)
            rc = (s->prog_fd[k] = get_pinned(dir, "prog_", progs[k], false, err)) < 0;
    }
    if (!rc)
        rc = (s->rodata_fd = get_pinned(dir, "", "rodata", false, err)) < 0;
    struct qk_config *cfg = rc ? NULL : malloc(sizeof *cfg);
    if (!rc)
        rc = !cfg ? qp_fail(err, "out of memory")
             : read_config(s->rodata_fd, cfg, dir, err) ? -1
             : !same_config(cfg, &plan->cfg)
                 ? qp_fail_code(err, QP_E_FORMAT, "%s: the pinned programs were built for other model constants "
                                "than the manifest's plan (the manifest does not match the objects)", dir)
                 : 0;
    free(cfg);
    if (!rc)
        rc = fill_maps_attached(s, plan, err);
    for (int i = 0; !rc && plan->kernel_lanes && i < QP_SCHED_OBJECTS; i++)
        rc = (s->sched_fd[i] = get_pinned(dir, "", sched_pins[i], sched_optional(i), err)) < 0 &&
             !sched_optional(i);
    if (!rc && plan->kernel_lanes)
        rc = chain_attach(s, s->sched_fd, err);
    if (rc) {
        bpfb_destroy(&s->b);
        return -1;
    }
    finish(s, plan, 0, 0);
    *out = &s->b;
    return 0;
}

uint64_t qp_bpf_build_id(void)
{
    size_t n;
    const void *elf = qwen3__elf_bytes(&n);
    /* the kernels' object and the ABI's sizes (XXH3: a few ms for the
     * object, which every open of a loaded model hashes) */
    uint64_t sizes[] = {XXH3_64bits(elf, n), sizeof(struct qk_config), sizeof(struct qk_args), QP_MAP_COUNT,
                        QP_K_COUNT};
    return XXH3_64bits(sizes, sizeof sizes);
}
