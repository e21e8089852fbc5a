/* wq_spike.c - runs wq_spike.bpf.o's experiments and prints what the
 * kernel allowed and how long things took (docs/SCHEDULE.md).
 *   wq_spike OBJ              all experiments (root)
 *   wq_spike OBJ --pin PATH   loads, runs init, pins start_chain at PATH (root)
 *   wq_spike --run PATH       runs the pinned start_chain (try it unprivileged)
 *   wq_spike --load OBJ       only loads OBJ, printing the verifier's last lines on failure */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define RUNS 64
typedef unsigned long long u64;
struct spike {
    u64 runs[4];
    u64 cpu[4][RUNS];
    u64 t0[4][RUNS], t1[4][RUNS];
    u64 start_ns;
    u64 subprog;
};

static char vlog[1 << 20];
static struct bpf_object *obj;

static u64 now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);     /* bpf_ktime_get_ns's clock */
    return (u64)t.tv_sec * 1000000000ull + (u64)t.tv_nsec;
}

static int prog_fd(const char *name)
{
    return bpf_program__fd(bpf_object__find_program_by_name(obj, name));
}

static int run_syscall(int fd)
{
    LIBBPF_OPTS(bpf_test_run_opts, o);
    if (bpf_prog_test_run_opts(fd, &o))
        return -errno;
    return (int)o.retval;
}

static int load(const char *path)
{
    obj = bpf_object__open_file(path, NULL);
    if (!obj)
        return -1;
    struct bpf_program *p;
    bpf_object__for_each_program(p, obj) bpf_program__set_log_buf(p, vlog, sizeof vlog);
    if (bpf_object__load(obj)) {
        /* the verifier's reason is the log's last lines */
        size_t n = strlen(vlog);
        int lines = 0;
        while (n > 0 && lines < 3)
            lines += vlog[--n] == '\n';
        printf("load of %s refused: %s%s\n", path, strerror(errno), n < strlen(vlog) ? vlog + n : "");
        return -1;
    }
    return 0;
}

static void pin_cpu(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void start_busy(int which)
{
    char data[64] = {0};
    data[14] = (char)which;     /* a socket filter's test run drops the 14-byte Ethernet header */
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = data, .data_size_in = sizeof data);
    bpf_prog_test_run_opts(prog_fd("start_busy"), &o);
}

static atomic_int ready, go;

/* pinned to CPU 1 before main starts its item: a thread still queued on
 * CPU 0 would wait there for main's 5 ms item (no preemption) */
static void *start_on_cpu1(void *arg)
{
    pin_cpu(1);
    atomic_store(&ready, 1);
    while (!atomic_load(&go))
        ;
    start_busy(1);
    return arg;
}

static int on_done(void *ctx, void *data, size_t len)
{
    *(u64 *)ctx = now_ns();
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    u64 x = *(const u64 *)a, y = *(const u64 *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--run")) {
        int fd = bpf_obj_get(argv[2]);
        if (fd < 0) {
            printf("pinned start_chain: cannot open %s: %s\n", argv[2], strerror(errno));
            return 1;
        }
        LIBBPF_OPTS(bpf_test_run_opts, o);
        if (bpf_prog_test_run_opts(fd, &o)) {
            printf("pinned start_chain run by uid %d: test run refused: %s\n", (int)getuid(), strerror(errno));
            return 1;
        }
        usleep(50000);
        char state[4096];
        snprintf(state, sizeof state, "%s_state", argv[2]);
        int sfd = bpf_obj_get(state);
        struct spike *s = sfd < 0 ? MAP_FAILED
                                  : mmap(NULL, (sizeof *s + 4095) / 4096 * 4096, PROT_READ, MAP_SHARED, sfd, 0);
        printf("pinned start_chain run by uid %d: test run done, bpf_wq_start returned %d, chain items run: %lld\n",
               (int)getuid(), (int)o.retval, s == MAP_FAILED ? -1ll : (long long)(s->runs[0] + s->runs[1]));
        return o.retval != 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--load"))
        return load(argv[2]) ? 1 : 0;
    if (argc < 2 || load(argv[1]))
        return 1;
    int r = run_syscall(prog_fd("init"));
    printf("init (syscall program: bpf_wq_init, bpf_wq_set_callback_impl): %d\n", r);
    if (r)
        return 1;
    if (argc == 4 && !strcmp(argv[2], "--pin")) {
        /* the items' map pinned too: an array map cancels its work items when
         * its last user reference (fd or pin) goes, whatever programs hold it */
        char items[4096], state[4096];
        snprintf(items, sizeof items, "%s_items", argv[3]);
        snprintf(state, sizeof state, "%s_state", argv[3]);
        return bpf_obj_pin(prog_fd("start_chain"), argv[3]) ||
               bpf_obj_pin(bpf_map__fd(bpf_object__find_map_by_name(obj, "state")), state) ||
               (getenv("PIN_ITEMS") && bpf_obj_pin(bpf_map__fd(bpf_object__find_map_by_name(obj, "items")), items));
    }
    int sfd = bpf_map__fd(bpf_object__find_map_by_name(obj, "state"));
    struct spike *s = mmap(NULL, (sizeof *s + 4095) / 4096 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
    u64 woke = 0;
    struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(bpf_object__find_map_by_name(obj, "done")), on_done, &woke,
                                              NULL);
    if (s == MAP_FAILED || !rb)
        return 1;

    /* the chain, 20 times: submission to first item, hops, last item to the waiter's wake */
    enum { REPS = 20 };
    u64 first[REPS], hop[REPS], wake[REPS];
    for (int i = 0; i < REPS; i++) {
        memset(s, 0, sizeof *s);
        r = run_syscall(prog_fd("start_chain"));
        int got = ring_buffer__poll(rb, 1000);
        if (r || got != 1 || s->runs[0] != 10 || s->runs[1] != 1) {
            printf("chain %d: start %d, ring records %d, runs %llu + %llu\n", i, r, got, s->runs[0], s->runs[1]);
            return 1;
        }
        first[i] = s->t0[0][0] - s->start_ns;
        hop[i] = (s->t0[1][0] - s->t0[0][0]) / 10;
        wake[i] = woke - s->t1[1][0];
    }
    qsort(first, REPS, sizeof *first, cmp_u64);
    qsort(hop, REPS, sizeof *hop, cmp_u64);
    qsort(wake, REPS, sizeof *wake, cmp_u64);
    printf("chain of 11 items (a callback restarts its own item, then starts another; a global subprogram "
           "called each time: %llu = 7 x 10): medians over %d: submission to first item %.1f us, item to next "
           "item %.2f us, last item to the ring buffer waiter awake %.1f us; item cpus:",
           s->subprog, REPS, first[REPS / 2] / 1e3, hop[REPS / 2] / 1e3, wake[REPS / 2] / 1e3);
    for (int i = 0; i < 10; i++)
        printf(" %llu", s->cpu[0][i]);
    printf("\n");

    /* two busy items started from one CPU, then from each CPU */
    for (int two_cpus = 0; two_cpus < 2; two_cpus++) {
        memset(s, 0, sizeof *s);
        pin_cpu(0);
        pthread_t t;
        if (two_cpus) {
            atomic_store(&ready, 0);
            atomic_store(&go, 0);
            pthread_create(&t, NULL, start_on_cpu1, NULL);
            while (!atomic_load(&ready))
                ;
            atomic_store(&go, 1);
        } else {
            start_busy(1);
        }
        start_busy(0);
        if (two_cpus)
            pthread_join(t, NULL);
        usleep(50000);
        u64 base = s->t0[2][0] < s->t0[3][0] ? s->t0[2][0] : s->t0[3][0];
        printf("two 5 ms items started from %s: item 2 on cpu %llu at %.2f-%.2f ms, item 3 on cpu %llu at "
               "%.2f-%.2f ms\n",
               two_cpus ? "cpu 0 and cpu 1" : "cpu 0", s->cpu[2][0], (s->t0[2][0] - base) / 1e6,
               (s->t1[2][0] - base) / 1e6, s->cpu[3][0], (s->t0[3][0] - base) / 1e6, (s->t1[3][0] - base) / 1e6);
    }
    return 0;
}
