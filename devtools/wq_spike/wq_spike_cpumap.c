// SPDX-License-Identifier: MIT
/* wq_spike_cpumap.c - runs wq_spike_cpumap.bpf.o (root): one live-frames
 * test run of kick should start item 0 on the caller's CPU and, through
 * the CPU map's entry for the other CPU, item 1 there.
 *   wq_spike_cpumap OBJ [--pin PATH]   load, run 20 kicks, print; pin kick and the maps
 *   wq_spike_cpumap --run PATH         run the pinned kick once (as another user) */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

struct spike {
    unsigned long long kick_ns, on_cpu_ns, item_ns[2];
    unsigned int kick_cpu, on_cpu_cpu, item_cpu[2];
    int start_ret[2];
    unsigned int redirect;
    unsigned int items_run[2];
};

#define KICKS 20

static int kick_once(int prog, int state)
{
    unsigned char frame[64] = {0};
    frame[12] = 0x08;   /* IPv4 ethertype: any frame does */
    LIBBPF_OPTS(bpf_test_run_opts, run, .data_in = frame, .data_size_in = sizeof frame, .repeat = 1,
                .flags = BPF_F_TEST_XDP_LIVE_FRAMES);
    struct spike zero = {0};
    unsigned int key = 0;
    if (state >= 0)
        bpf_map_update_elem(state, &key, &zero, 0);
    int rc = bpf_prog_test_run_opts(prog, &run);
    if (rc)
        printf("test run: %s\n", strerror(errno));
    return rc;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--run")) {
        int prog = bpf_obj_get(argv[2]);
        if (prog < 0) {
            printf("bpf_obj_get: %s\n", strerror(errno));
            return 1;
        }
        char path[256];
        snprintf(path, sizeof path, "%s_state", argv[2]);
        int state = bpf_obj_get(path);
        if (kick_once(prog, state))
            return 1;
        usleep(20000);
        struct spike s = {0};
        unsigned int key = 0;
        if (state < 0 || bpf_map_lookup_elem(state, &key, &s)) {
            printf("kick ran; its state map cannot be read: %s\n", strerror(errno));
            return 0;
        }
        printf("kick ran as uid %d on CPU %u: items run %u on CPU %u and %u on CPU %u\n", getuid(), s.kick_cpu,
               s.items_run[0], s.item_cpu[0], s.items_run[1], s.item_cpu[1]);
        return 0;
    }
    if (argc != 2 && !(argc == 4 && !strcmp(argv[2], "--pin"))) {
        fprintf(stderr, "usage: wq_spike_cpumap OBJ [--pin PATH] | --run PATH\n");
        return 2;
    }
    struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
    if (!obj || bpf_object__load(obj)) {
        perror("load");
        return 1;
    }
    int state = bpf_object__find_map_fd_by_name(obj, "state");
    int cpus = bpf_object__find_map_fd_by_name(obj, "cpus");
    int kick = bpf_program__fd(bpf_object__find_program_by_name(obj, "kick"));
    int on_cpu = bpf_program__fd(bpf_object__find_program_by_name(obj, "on_cpu"));
    LIBBPF_OPTS(bpf_test_run_opts, run);
    int init = bpf_program__fd(bpf_object__find_program_by_name(obj, "init"));
    if (bpf_prog_test_run_opts(init, &run) || run.retval) {
        printf("init failed: %u\n", run.retval);
        return 1;
    }
    struct bpf_cpumap_val val = {.qsize = 8, .bpf_prog.fd = on_cpu};
    for (unsigned int cpu = 0; cpu < 2; cpu++)
        if (bpf_map_update_elem(cpus, &cpu, &val, 0)) {
            printf("cpu map entry for CPU %u: %s\n", cpu, strerror(errno));
            return 1;
        }
    double to_on_cpu[KICKS], to_item1[KICKS], to_item0[KICKS];
    int ok = 0;
    struct spike s = {0};
    for (int i = 0; i < KICKS; i++) {
        if (kick_once(kick, state))
            return 1;
        usleep(20000);
        unsigned int k0 = 0;
        bpf_map_lookup_elem(state, &k0, &s);
        if (s.items_run[0] != 1 || s.items_run[1] != 1)
            continue;
        to_item0[ok] = (s.item_ns[0] - s.kick_ns) / 1e3;
        to_on_cpu[ok] = (s.on_cpu_ns - s.kick_ns) / 1e3;
        to_item1[ok++] = (s.item_ns[1] - s.kick_ns) / 1e3;
    }
    printf("last kick: verdict %u (XDP_REDIRECT %u), on CPU %u; on_cpu ran on CPU %u; bpf_wq_start %d and %d; "
           "items run %u on CPU %u and %u on CPU %u\n", s.redirect, XDP_REDIRECT, s.kick_cpu, s.on_cpu_cpu,
           s.start_ret[0], s.start_ret[1], s.items_run[0], s.item_cpu[0], s.items_run[1], s.item_cpu[1]);
    if (ok) {
        qsort(to_item0, ok, sizeof *to_item0, cmp);
        qsort(to_on_cpu, ok, sizeof *to_on_cpu, cmp);
        qsort(to_item1, ok, sizeof *to_item1, cmp);
        printf("%d of %d kicks ran both items; medians from kick: item 0 %.1f us, on_cpu %.1f us, item 1 %.1f us "
               "(item 1 %.1f to %.1f us)\n", ok, KICKS, to_item0[ok / 2], to_on_cpu[ok / 2], to_item1[ok / 2],
               to_item1[0], to_item1[ok - 1]);
    } else {
        printf("0 of %d kicks ran both items\n", KICKS);
    }
    if (argc == 4) {
        char path[256];
        snprintf(path, sizeof path, "%s_state", argv[3]);
        if (bpf_obj_pin(kick, argv[3]) || bpf_obj_pin(state, path)) {
            printf("pin: %s\n", strerror(errno));
            return 1;
        }
        printf("pinned; waiting\n");
        fflush(stdout);
        pause();    /* the maps keep their user reference while the loader lives */
    }
    bpf_object__close(obj);
    return 0;
}
