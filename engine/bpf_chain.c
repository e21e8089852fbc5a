/* bpf_chain.c - the kernel schedule (docs/SCHEDULE.md): a step's job
 * list run as chains of BPF work items, a lane per CPU, started by one
 * XDP test run (or lane 1 by a thread), and the wait for its end. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bpf_backend.h"

/* How often a wait looks at its interrupt flag and at a lane thread that
 * has not started its lane when no record or signal (EINTR) woke it. */
#define CHAIN_POLL_MS 250

/* A thread pinned to one CPU that starts lane 1 there when asked: a work
 * item runs on the CPU that started it. */
struct lane_thread {
    struct bpfb *s;
    pthread_t thread;
    int cpu;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    uint64_t asked, seen;       /* steps asked for, taken */
    bool quit;
};

static int chain_record(void *ctx, void *data, size_t len)
{
    (void)ctx, (void)data, (void)len;
    return 0;   /* the status is in the chain map; a record only wakes the wait */
}

/* Runs lane_start: lane `lane` begins on this thread's CPU, unless the
 * host dropped it. false when the program did not run. */
static bool start_lane(struct bpfb *s, uint32_t lane)
{
    struct qk_lane_start ctx = {.lane = lane};
    LIBBPF_OPTS(bpf_test_run_opts, opts, .ctx_in = &ctx, .ctx_size_in = sizeof ctx);
    return bpf_prog_test_run_opts(s->lane_start_fd, &opts) == 0;
}

/* One live-frames test run of lane_kick starts lane 0 on this CPU and,
 * through the CPU map, lane 1 on the other. false when it did not run. */
static bool kick_lanes(struct bpfb *s)
{
    struct {
        uint8_t eth[ETH_HLEN];
        struct qk_lane_kick kick;
        uint8_t pad[64 - ETH_HLEN - sizeof(struct qk_lane_kick)];  /* a minimum Ethernet frame */
    } __attribute__((packed)) frame = {
        .eth = {[12] = 0x08},   /* IPv4: any type does, nothing reads it */
        .kick = {.step = s->kick_step, .cpu = {(uint32_t)s->lane_cpu[0], (uint32_t)s->lane_cpu[1]}},
    };
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = &frame, .data_size_in = sizeof frame, .repeat = 1,
                .flags = BPF_F_TEST_XDP_LIVE_FRAMES);
    if (bpf_prog_test_run_opts(s->kick_fd, &opts) != 0)
        return false;
    /* a live-frames run reports no verdict: lane_kick ran when lane 0 left
       its waiting state within the call */
    if (__atomic_load_n(&s->chain->lane_state[0], __ATOMIC_ACQUIRE) != QK_LANE_WAITING)
        return true;
    errno = EPROTO;
    return false;
}

/* a lane that has not started is taken off the step (its thread's start
 * then does nothing) */
static void drop_lane(struct bpfb *s, uint32_t lane)
{
    uint32_t waiting = QK_LANE_WAITING;
    if (__atomic_compare_exchange_n(&s->chain->lane_state[lane], &waiting, QK_LANE_DROPPED, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        __atomic_sub_fetch(&s->chain->lanes, 1, __ATOMIC_ACQ_REL);
}

static void *lane_thread_main(void *arg)
{
    struct lane_thread *t = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->quit && t->seen == t->asked)
            pthread_cond_wait(&t->wake, &t->mu);
        if (t->quit)
            break;
        t->seen = t->asked;
        pthread_mutex_unlock(&t->mu);
        start_lane(t->s, 1);    /* when it cannot run, the host drops the lane once the step stops */
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Lanes of a stopped step that have not started are dropped. Lane 1 of a
 * kicked step belongs to whoever holds its ticket: the host takes it back,
 * and drops the lane only when lane_kicked has not taken it first (then
 * lane_kicked starts the lane, which ends at once). */
static void drop_waiting_lanes(struct bpfb *s)
{
    drop_lane(s, 0);
    if (s->lanes > 1 && (s->kick_fd < 0 || __atomic_exchange_n(&s->chain->kick, 0, __ATOMIC_ACQ_REL)))
        drop_lane(s, 1);
}

/* Waits until every lane has ended; cancels the step when interrupt is
 * set (each lane stops before its next item). A lane that has not started
 * by the time the step stopped is not waited for. */
static int chain_wait(struct bpfb *s, const atomic_bool *interrupt, qp_err *err)
{
    for (;;) {
        bool stopped = __atomic_load_n(&s->chain->status, __ATOMIC_ACQUIRE) != QK_CHAIN_RUNNING;
        if (stopped)
            drop_waiting_lanes(s);
        if (stopped && __atomic_load_n(&s->chain->lanes, __ATOMIC_ACQUIRE) == 0)
            return 0;
        if (interrupt && atomic_load(interrupt))
            __atomic_store_n(&s->chain->cancel, 1, __ATOMIC_RELEASE);
        int n = ring_buffer__poll(s->chain_done, CHAIN_POLL_MS);
        if (n < 0 && n != -EINTR)
            return qp_fail(err, "waiting for the kernel schedule's chain failed: %s", strerror(-n));
    }
}

int bpfb_run_chain(struct qp_backend *b, uint32_t n, const atomic_bool *interrupt, struct qk_chain *out,
                          qp_err *err)
{
    struct bpfb *s = (struct bpfb *)b;
    struct qk_chain *c = s->chain;
    if (n == 0 || n > QK_CHAIN_MAX_JOBS)
        return qp_fail(err, "internal: a chain of %u jobs (1..%u)", n, QK_CHAIN_MAX_JOBS);
    if (__atomic_load_n(&c->lanes, __ATOMIC_ACQUIRE))
        return qp_fail(err, "internal: the kernel schedule's last step still runs");
    /* the records of a step whose lanes ended before its wait looked: taken
     * now, or a full ring buffer would drop this step's and the wait sleep */
    ring_buffer__consume(s->chain_done);
    atomic_store(&s->stepping, true);
    *c = (struct qk_chain){.n = n, .lanes = s->lanes, .phase_end = s->jobs[0].phase_end,
                           .status = QK_CHAIN_RUNNING};
    for (uint32_t lane = s->lanes; lane < QK_CHAIN_LANES; lane++)
        c->lane_state[lane] = QK_LANE_DROPPED;
    if (s->kick_fd >= 0) {
        if (++s->kick_step == 0)
            s->kick_step = 1;
        __atomic_store_n(&c->kick, s->kick_step, __ATOMIC_RELEASE);  /* last: the chain is ready */
    } else if (s->lanes > 1) {
        int cpu = sched_getcpu();
        struct lane_thread *t = s->lane_threads[cpu == s->lane_threads[0]->cpu];
        pthread_mutex_lock(&t->mu);
        t->asked++;
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->mu);
    }
    bool started = s->kick_fd >= 0 ? kick_lanes(s) : start_lane(s, 0);
    if (!started) {   /* the step stops; a started lane 1 ends after its item */
        int e = errno;
        uint32_t running = QK_CHAIN_RUNNING;
        __atomic_compare_exchange_n(&c->status, &running, QK_CHAIN_BROKEN, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
        chain_wait(s, NULL, err);
        atomic_store(&s->stepping, false);
        return qp_fail(err, "starting the kernel schedule failed: %s", strerror(e));
    }
    int rc = chain_wait(s, interrupt, err);
    if (!rc)
        atomic_store(&s->stepping, false);
    *out = *c;
    return rc;
}

static void lane_threads_stop(struct bpfb *s)
{
    for (int i = 0; i < 2; i++) {
        struct lane_thread *t = s->lane_threads[i];
        if (!t)
            continue;
        pthread_mutex_lock(&t->mu);
        t->quit = true;
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->wake);
        free(t);
        s->lane_threads[i] = NULL;
    }
}

/* the lanes' CPUs: the first two the process may use; false with one */
static bool pick_lane_cpus(struct bpfb *s)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        CPU_ZERO(&allowed);
    int found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
        if (CPU_ISSET(c, &allowed))
            s->lane_cpu[found++] = c;
    return found == 2;
}

static uint32_t map_entries(int fd);

/* A pinned model's lanes run on the CPUs its loader gave lane_kicked in
 * the CPU map (the first two entries set); false without two. */
static bool kick_pinned(struct bpfb *s, int map_fd, int kick_fd)
{
    uint32_t entries = map_entries(map_fd);
    int found = 0;
    for (uint32_t cpu = 0; cpu < entries && found < 2; cpu++) {
        struct bpf_cpumap_val val;
        if (bpf_map_lookup_elem(map_fd, &cpu, &val) == 0 && val.qsize)
            s->lane_cpu[found++] = (int)cpu;
    }
    if (found < 2)
        return false;
    s->kick_fd = kick_fd;
    return true;
}

/* lane_kicked on both lanes' CPUs (a kthread each); false when the CPU map
 * refuses an entry */
static bool kick_open(struct bpfb *s)
{
    struct bpf_cpumap_val val = {.qsize = 8, .bpf_prog.fd = bpf_program__fd(s->skel->progs.lane_kicked)};
    int fd = bpf_map__fd(s->skel->maps.m_lane_cpus);
    for (int i = 0; i < 2; i++) {
        uint32_t cpu = (uint32_t)s->lane_cpu[i];
        if (bpf_map_update_elem(fd, &cpu, &val, 0) != 0)
            return false;
    }
    s->kick_fd = bpf_program__fd(s->skel->progs.lane_kick);
    return true;
}

/* two lanes: a thread on each lane's CPU */
static int lane_threads_start(struct bpfb *s, qp_err *err)
{
    for (int i = 0; i < 2; i++) {
        struct lane_thread *t = calloc(1, sizeof *t);
        if (!t)
            return qp_fail(err, "out of memory");
        *t = (struct lane_thread){.s = s, .cpu = s->lane_cpu[i]};
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->wake, NULL);
        if (pthread_create(&t->thread, NULL, lane_thread_main, t) != 0) {
            pthread_mutex_destroy(&t->mu);
            pthread_cond_destroy(&t->wake);
            free(t);
            return qp_fail(err, "the kernel schedule: cannot start a lane thread");
        }
        s->lane_threads[i] = t;
    }
    return 0;
}

static void *map_fd_memory(int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The schedule's objects of this process's skeleton, in enum
 * qp_sched_object's order. */
void skel_sched_fds(struct qwen3 *skel, int fd[QP_SCHED_OBJECTS])
{
    fd[QP_SCHED_WQ] = bpf_map__fd(skel->maps.m_wq);
    fd[QP_SCHED_JOBS] = bpf_map__fd(skel->maps.m_jobs);
    fd[QP_SCHED_CHAIN] = bpf_map__fd(skel->maps.m_chain);
    fd[QP_SCHED_DONE] = bpf_map__fd(skel->maps.m_chain_done);
    fd[QP_SCHED_LANE_START] = bpf_program__fd(skel->progs.lane_start);
    fd[QP_SCHED_TMPL] = bpf_map__fd(skel->maps.m_tmpl);
    fd[QP_SCHED_LISTEN] = bpf_map__fd(skel->maps.m_listen);
    fd[QP_SCHED_SESSIONS] = bpf_map__fd(skel->maps.m_sessions);
    fd[QP_SCHED_LISTEN_XDP] = bpf_program__fd(skel->progs.listen_xdp);
    fd[QP_SCHED_LANE_KICK] = bpf_program__fd(skel->progs.lane_kick);
    fd[QP_SCHED_LANE_CPUS] = bpf_map__fd(skel->maps.m_lane_cpus);
}

/* a map's entries (0 when its fd says nothing) */
static uint32_t map_entries(int fd)
{
    struct bpf_map_info info = {0};
    uint32_t len = sizeof info;
    return bpf_obj_get_info_by_fd(fd, &info, &len) ? 0 : info.max_entries;
}

/* Maps the job list and the chain, opens the ring buffer and starts the
 * lane threads, on objects this process loaded or a pinned model's. */
int chain_attach(struct bpfb *s, const int fd[QP_SCHED_OBJECTS], qp_err *err)
{
    s->jobs = map_fd_memory(fd[QP_SCHED_JOBS], (size_t)QK_CHAIN_MAX_JOBS * sizeof *s->jobs);
    s->chain = map_fd_memory(fd[QP_SCHED_CHAIN], sizeof *s->chain);
    if (!s->jobs || !s->chain)
        return qp_fail(err, "the kernel schedule: cannot map its job list: %s", strerror(errno));
    s->chain_done = ring_buffer__new(fd[QP_SCHED_DONE], chain_record, NULL, NULL);
    if (!s->chain_done)
        return qp_fail(err, "the kernel schedule: cannot open its ring buffer: %s", strerror(errno));
    s->lane_start_fd = fd[QP_SCHED_LANE_START];
    s->tmpl_entries = map_entries(fd[QP_SCHED_TMPL]);
    s->tmpl = s->tmpl_entries ? map_fd_memory(fd[QP_SCHED_TMPL], (size_t)s->tmpl_entries * sizeof *s->tmpl) : NULL;
    s->listen = map_fd_memory(fd[QP_SCHED_LISTEN], sizeof *s->listen);
    if (!s->tmpl || !s->listen)
        return qp_fail(err, "the kernel schedule: cannot map the listener's maps: %s", strerror(errno));
    s->sessions_fd = fd[QP_SCHED_SESSIONS];
    s->listen_xdp_fd = fd[QP_SCHED_LISTEN_XDP];
    s->lanes = s->plan->kernel_lanes;
    if (s->lanes > 1 && !pick_lane_cpus(s))
        s->lanes = 1;   /* one CPU: one lane */
    if (s->lanes < 2)
        return 0;
    if (s->skel ? bpf_program__autoload(s->skel->progs.lane_kick) && kick_open(s)
                : fd[QP_SCHED_LANE_KICK] >= 0 && fd[QP_SCHED_LANE_CPUS] >= 0 && !getenv("QP_LANE_THREADS") &&
                      kick_pinned(s, fd[QP_SCHED_LANE_CPUS], fd[QP_SCHED_LANE_KICK]))
        return 0;
    return lane_threads_start(s, err);
}

/* Runs each kernel's name_sched program once: it gives the kernel's work
 * item its callback. */
int chain_open(struct bpfb *s, qp_err *err)
{
    struct bpf_program *sched[QP_K_COUNT] = {
#define QP_SCHED_OF(NAME, name, kernel) s->skel->progs.name##_sched,
        QK_PROGRAMS(QP_SCHED_OF)
#undef QP_SCHED_OF
    };
    for (int k = 0; k < QP_K_COUNT; k++) {
        if (!bpf_program__autoload(sched[k]))
            continue;
        /* bpf_wq_init allocates without sleeping, which fails now and
         * then under memory pressure: a few tries before giving up */
        int rc = -1, ret = 0;
        for (int attempt = 0; attempt < 5 && rc; attempt++) {
            LIBBPF_OPTS(bpf_test_run_opts, opts);
            if (attempt)
                usleep(20000);
            rc = bpf_prog_test_run_opts(bpf_program__fd(sched[k]), &opts) != 0 || opts.retval != 0;
            ret = rc && opts.retval ? (int)opts.retval : errno;
        }
        if (rc)
            return qp_fail_code(err, QP_E_KERNEL, "the kernel schedule: cannot set up the work item of %s: %s",
                                qp_kernel_name(k), strerror(ret));
    }
    LIBBPF_OPTS(bpf_test_run_opts, opts);
    if (bpf_prog_test_run_opts(bpf_program__fd(s->skel->progs.lane_sched), &opts) != 0 || opts.retval != 0)
        return qp_fail_code(err, QP_E_KERNEL, "the kernel schedule: cannot set up the lanes' idle work items");
    LIBBPF_OPTS(bpf_test_run_opts, lopts);
    if (bpf_prog_test_run_opts(bpf_program__fd(s->skel->progs.listen_sched), &lopts) != 0 || lopts.retval != 0)
        return qp_fail_code(err, QP_E_KERNEL, "the kernel schedule: cannot set up the listen work item");
    int fd[QP_SCHED_OBJECTS];
    skel_sched_fds(s->skel, fd);
    return chain_attach(s, fd, err);
}

/* A model closed while a chain runs (a step abandoned) must not leave work
 * queued on maps about to be freed: the chain is cancelled and waited for. */
void chain_close(struct bpfb *s)
{
    lane_threads_stop(s);
    if (s->chain && s->chain_done && atomic_load(&s->stepping) &&
        __atomic_load_n(&s->chain->lanes, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&s->chain->cancel, 1, __ATOMIC_RELEASE);
        chain_wait(s, NULL, &(qp_err){0});
    }
    if (s->chain_done)
        ring_buffer__free(s->chain_done);
    if (s->jobs)
        munmap(s->jobs, (size_t)QK_CHAIN_MAX_JOBS * sizeof *s->jobs);
    if (s->chain)
        munmap(s->chain, sizeof *s->chain);
    if (s->tmpl)
        munmap(s->tmpl, (size_t)s->tmpl_entries * sizeof *s->tmpl);
    if (s->listen)
        munmap(s->listen, sizeof *s->listen);
}

/* the work-item programs only when the plan asks for the kernel schedule,
 * and then each kernel's that is loaded itself */
void load_chain_programs(struct qwen3 *skel, const struct qk_config *cfg, bool on)
{
    struct bpf_program *kernels[QP_K_COUNT] = {
#define QP_PROGRAM_OF(NAME, name, kernel) skel->progs.name,
        QK_PROGRAMS(QP_PROGRAM_OF)
#undef QP_PROGRAM_OF
    };
    struct bpf_program *sched[QP_K_COUNT] = {
#define QP_SCHED_OF(NAME, name, kernel) skel->progs.name##_sched,
        QK_PROGRAMS(QP_SCHED_OF)
#undef QP_SCHED_OF
    };
    for (int k = 0; k < QP_K_COUNT; k++)
        bpf_program__set_autoload(sched[k], on && bpf_program__autoload(kernels[k]));
    bpf_program__set_autoload(skel->progs.lane_sched, on);
    bpf_program__set_autoload(skel->progs.lane_start, on);
    bpf_program__set_autoload(skel->progs.listen_sched, on);
    /* loading an XDP program takes CAP_NET_ADMIN (or CAP_SYS_ADMIN) besides
       what the kernels take: without it the schedule runs, qrun listen not */
    bpf_program__set_autoload(skel->progs.listen_xdp, on && may_load_xdp());
    if (!on)    /* the job list's megabyte only for a model that runs it */
        bpf_map__set_max_entries(skel->maps.m_jobs, 1);
    /* qrun listen: two templates per attention chunk count, a record per slot */
    if (on && cfg->max_chunks <= QK_LISTEN_MAX_CHUNKS)
        bpf_map__set_max_entries(skel->maps.m_tmpl, QK_LISTEN_TMPL(cfg->max_chunks, 0) * QK_LISTEN_TMPL_JOBS);
    if (on)
        bpf_map__set_max_entries(skel->maps.m_sessions, cfg->kv_slots);
}

/* lane_kick and its CPU map only for two lanes, and only when this process
 * may load an XDP program (CAP_NET_ADMIN or CAP_SYS_ADMIN besides what
 * loading takes): else lane 1 starts from a thread. QP_LANE_THREADS=1 asks
 * for the thread. */
void load_kick_programs(struct qwen3 *skel, uint32_t lanes)
{
    int cpus = libbpf_num_possible_cpus();
    bool on = lanes > 1 && cpus > 1 && !getenv("QP_LANE_THREADS") && may_load_xdp();
    bpf_program__set_autoload(skel->progs.lane_kick, on);
    bpf_program__set_autoload(skel->progs.lane_kicked, on);
    /* listen_xdp redirects into the map too (an empty one: its reply
       leaves from one lane) */
    bool map = on || bpf_program__autoload(skel->progs.listen_xdp);
    bpf_map__set_autocreate(skel->maps.m_lane_cpus, map);
    if (map)
        bpf_map__set_max_entries(skel->maps.m_lane_cpus, (uint32_t)(cpus > 0 ? cpus : 1));
}
