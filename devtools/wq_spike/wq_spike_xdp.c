// SPDX-License-Identifier: MIT
/* wq_spike_xdp.c - runs wq_spike_xdp.bpf.o on loopback (root): init sets
 * the work item's callback, then packets start it from XDP and from tc,
 * and a later packet is answered by XDP_TX. Prints what happened.
 * scripts/wq_spike.sh runs it in a network namespace of its own. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#define PORT 47999

struct spike {
    unsigned long long starts[2];
    long start_ret[2];
    unsigned long long runs, pkt_ns, lat_ns;
    unsigned int answer, replies;
    unsigned long long patch_ns;
};

static int state_fd;

static struct spike read_state(void)
{
    struct spike s = {0};
    unsigned int key = 0;
    bpf_map_lookup_elem(state_fd, &key, &s);
    return s;
}

static struct in_addr dest = {.s_addr = 0x0100007f};  /* 127.0.0.1 */

static void send_udp(int fd, char what)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(PORT), .sin_addr = dest};
    char buf[8] = {what};
    sendto(fd, buf, sizeof buf, 0, (struct sockaddr *)&to, sizeof to);
    usleep(20000);
}

int main(int argc, char **argv)
{
    /* wq_spike_xdp OBJ [IF NETNS DEST]: the programs on IF, the sender in
     * network namespace NETNS sending to DEST (a veth pair's far end) */
    if (argc != 2 && argc != 5) {
        fprintf(stderr, "usage: wq_spike_xdp OBJ [IF NETNS DEST]\n");
        return 2;
    }
    const char *ifname = argc == 5 ? argv[2] : "lo";
    int xdp_mode = argc == 5 ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
    if (argc == 5 && !inet_aton(argv[4], &dest))
        return 2;
    struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
    if (!obj || bpf_object__load(obj)) {
        perror("load");
        return 1;
    }
    state_fd = bpf_object__find_map_fd_by_name(obj, "state");
    LIBBPF_OPTS(bpf_test_run_opts, run);
    int init = bpf_program__fd(bpf_object__find_program_by_name(obj, "init"));
    if (bpf_prog_test_run_opts(init, &run) || run.retval) {
        printf("init failed: %u\n", run.retval);
        return 1;
    }
    int lo = if_nametoindex(ifname);
    int xdp = bpf_program__fd(bpf_object__find_program_by_name(obj, "on_xdp"));
    int tc = bpf_program__fd(bpf_object__find_program_by_name(obj, "on_tc"));
    int here = open("/proc/self/ns/net", O_RDONLY), there = argc == 5 ? open(argv[3], O_RDONLY) : here;
    if (here < 0 || there < 0 || setns(there, CLONE_NEWNET)) {
        perror("netns");
        return 1;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    setns(here, CLONE_NEWNET);
    struct timeval tv = {.tv_usec = 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    if (bpf_xdp_attach(lo, xdp, xdp_mode, NULL)) {
        perror("xdp attach");
        return 1;
    }
    for (int i = 0; i < 5; i++)
        send_udp(fd, 'S');
    struct spike s = read_state();
    printf("xdp: starts %llu, last bpf_wq_start %ld, callbacks run %llu, packet to callback %.1f us, "
           "%d jobs copied and patched in %.1f us\n", s.starts[0], s.start_ret[0], s.runs,
           s.lat_ns / 1e3, 1024, s.patch_ns / 1e3);
    send_udp(fd, 'R');
    char buf[64];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    unsigned int answer = 0;
    if (n >= 8)
        memcpy(&answer, buf + 4, 4);
    s = read_state();
    printf("xdp: 'R' turned round %u time(s); the sender got %zd bytes, '%c', answer %u\n",
           s.replies, n, n > 0 ? buf[0] : '-', answer);
    bpf_xdp_detach(lo, xdp_mode, NULL);

    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = lo, .attach_point = BPF_TC_INGRESS);
    LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = tc);
    if (bpf_tc_hook_create(&hook)) {
        perror("tc hook");
        return 1;
    }
    if (bpf_tc_attach(&hook, &opts)) {
        perror("tc attach");
        return 1;
    }
    unsigned long long before = s.runs;
    for (int i = 0; i < 5; i++)
        send_udp(fd, 'T');
    s = read_state();
    printf("tc: starts %llu, last bpf_wq_start %ld, callbacks run %llu, packet to callback %.1f us\n",
           s.starts[1], s.start_ret[1], s.runs - before, s.lat_ns / 1e3);
    opts.prog_fd = opts.prog_id = 0;
    opts.flags = 0;
    bpf_tc_detach(&hook, &opts);
    hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;    /* removes the clsact qdisc */
    bpf_tc_hook_destroy(&hook);
    close(fd);
    bpf_object__close(obj);
    return 0;
}
