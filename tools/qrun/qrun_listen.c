/* qrun_listen.c - `qrun listen`: a model opened with the kernel schedule
 * answers UDP token requests in the kernel (qpack_listen_*), and `qrun
 * ask`, the client that sends one request and polls for its tokens. The
 * packet format is docs/LISTEN.md's. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli_num.h"
#include "qpack.h"
#include "qrun.h"

/* docs/LISTEN.md */
#define HDR 20
#define MAX_IDS 16
#define POLL_BYTES (HDR + 4 * MAX_IDS)
#define KIND_STEP 1
#define KIND_POLL 2
#define KIND_ANSWER 0x81
#define KIND_BUSY 0x82
#define KIND_REFUSED 0x83
#define KIND_ACCEPTED 0x84

#define LISTEN_USAGE "usage: qrun listen -m MODEL --udp PORT [--dev IF] [--sessions N]\n"
#define ASK_USAGE                                                                                      \
    "usage: qrun ask --udp HOST:PORT --ids \"ID ...\" [-n N] [--session S] [--pos P] [--stats]\n" \
    "       qrun ask --udp HOST:PORT --raw HEX\n"

static void listen_help(void)
{
    printf(LISTEN_USAGE
           "\n"
           "Answers UDP token requests on interface IF (default lo) entirely in the kernel:\n"
           "an XDP program takes each packet, the kernel schedule runs the steps of a greedy\n"
           "continuation as BPF work items, and XDP turns the client's poll round with the\n"
           "tokens (docs/LISTEN.md). The host only records the step templates and attaches\n"
           "the program; it stays in the foreground until SIGINT or SIGTERM, then detaches.\n"
           "\n"
           "  -m, --model M     pin:NAME loaded with qpack load --schedule kernel, or a .qpk\n"
           "  --udp PORT        the UDP port requests come to\n"
           "  --dev IF          the interface (default lo: generic XDP; others native)\n"
           "  --sessions N      a .qpk's KV cache slots, one per session (default 4)\n");
}

static void ask_help(void)
{
    printf(ASK_USAGE
           "\n"
           "Sends token ids to a qrun listen and prints the N tokens of its greedy\n"
           "continuation (docs/LISTEN.md); gives up after 60 s without the answer.\n"
           "\n"
           "  --udp HOST:PORT   the listener (an IPv4 address or name)\n"
           "  --ids \"ID ...\"    1 to 16 token ids, fed at positions P.. of the session\n"
           "  -n N              tokens to continue with, 1 to 16 (default 1)\n"
           "  --session S       the session (a KV cache slot of the model; default 0)\n"
           "  --pos P           the first id's position: 0 (default) starts the session over,\n"
           "                    else the session's next position (the same sender only)\n"
           "  --stats           print the request's time to stderr (packet sent to answer)\n"
           "  --raw HEX         send HEX as the UDP payload and print the reply's kind\n");
}

static volatile sig_atomic_t stop_listening;

static void on_stop(int sig)
{
    (void)sig;
    stop_listening = 1;
}

int listen_main(int argc, char **argv)
{
    const char *model = NULL, *dev = "lo";
    uint64_t port = 0, sessions = 4;
    for (int i = 1; i < argc; i += 2) {     /* every option takes a value */
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            listen_help();
            return 0;
        }
        bool takes = !strcmp(o, "-m") || !strcmp(o, "--model") || !strcmp(o, "--udp") || !strcmp(o, "--dev") ||
                     !strcmp(o, "--sessions");
        if (!takes) {
            fprintf(stderr, "qrun listen: unexpected argument '%s' (see qrun listen --help)\n", o);
            return QRUN_USAGE;
        }
        if (!v) {
            fprintf(stderr, "qrun listen: %s needs a value (see qrun listen --help)\n", o);
            return QRUN_USAGE;
        }
        if (!strcmp(o, "-m") || !strcmp(o, "--model"))
            model = v;
        else if (!strcmp(o, "--dev"))
            dev = v;
        else if (!strcmp(o, "--udp") ? cli_uint("qrun listen", o, v, 1, 65535, &port)
                                     : cli_uint("qrun listen", o, v, 1, 1024, &sessions))
            return QRUN_USAGE;
    }
    if (!model || !port) {
        fprintf(stderr, LISTEN_USAGE);
        return QRUN_USAGE;
    }
    qpack_model_params mp = {.backend = QPACK_BACKEND_BPF, .schedule = QPACK_SCHEDULE_KERNEL, .threads = 2,
                             .max_sessions = (uint32_t)sessions};
    qpack_model *m;
    qpack_listen *l;
    qpack_error err = {0};
    if (qpack_model_open(&m, model, &mp, &err)) {
        fprintf(stderr, "qrun listen: %s\n", err.message);
        return QRUN_FAILED;
    }
    qpack_listen_params lp = {.dev = dev, .port = (uint16_t)port};
    if (qpack_listen_open(&l, m, &lp, &err)) {
        fprintf(stderr, "qrun listen: %s\n", err.message);
        qpack_model_free(m);
        return QRUN_FAILED;
    }
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigprocmask(SIG_BLOCK, &stop, &old);
    fprintf(stderr, "qrun listen: %s answers UDP port %u on %s (%u sessions); SIGINT or SIGTERM stops\n", model,
            (unsigned)port, dev, qpack_model_get_info(m)->max_sessions);
    while (!stop_listening)
        sigsuspend(&old);
    qpack_listen_stats st;
    qpack_listen_get_stats(l, &st);
    qpack_listen_close(l);
    qpack_model_free(m);
    fprintf(stderr, "qrun listen: detached; %u requests accepted, %u answered", st.requests, st.answered);
    if (st.lanes > 1)
        fprintf(stderr, ", on 2 lanes (the second joined %u steps)\n", st.joined);
    else
        fprintf(stderr, ", on 1 lane\n");
    return 0;
}

/* ---- qrun ask ---- */

static const char *reason_name(unsigned r)
{
    static const char *const names[] = {
        "?", "the length disagrees with the kind and count", "unknown version", "unknown kind",
        "0 or more than 16 ids", "0 or more than 16 tokens asked", "no such session",
        "the position is neither 0 nor the session's next", "past the context", "a token id past the vocabulary",
        "the session belongs to another sender", "no such request", "the step failed in the kernel",
    };
    return r < sizeof names / sizeof *names ? names[r] : "?";
}

static void put32(uint8_t *p, uint32_t v)
{
    uint32_t be = htonl(v);
    memcpy(p, &be, 4);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t be;
    memcpy(&be, p, 4);
    return ntohl(be);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int open_socket(const char *hostport)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof host) {
        fprintf(stderr, "qrun ask: --udp takes HOST:PORT, got '%s'\n", hostport);
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc) {
        fprintf(stderr, "qrun ask: %s: %s\n", hostport, gai_strerror(rc));
        return -1;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen)) {
        fprintf(stderr, "qrun ask: %s: %s\n", hostport, strerror(errno));
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    freeaddrinfo(ai);
    struct timeval tv = {.tv_usec = 200000};   /* a lost packet is sent again */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

#define ASK_TIMEOUT_MS 60000
/* between polls: each poll's round trip takes the CPU the steps run on
 * for tens of microseconds (the packet's softirq and XDP run there), so
 * polling every 50 us cost 0.6B steps 15-25 % here; at 1 ms it is noise */
#define POLL_NS 1000000

/* Sends pkt until a reply of the same request comes, busy replies
 * included; the reply's length, or -1 after ASK_TIMEOUT_MS. */
static int exchange(int fd, const uint8_t *pkt, size_t len, uint8_t *reply, size_t cap, double t0)
{
    while (now_ms() - t0 < ASK_TIMEOUT_MS) {
        /* refused: the port's ICMP error, so no XDP program took the
         * packet and nothing listens there */
        if (send(fd, pkt, len, 0) < 0)
            return -1;
        ssize_t n = recv(fd, reply, cap, 0);
        if (n < 0 && errno == ECONNREFUSED)
            return -1;
        /* the reply to this packet: its magic, version and request number */
        if (n >= HDR && len >= HDR && !memcmp(reply, pkt, 5) && !memcmp(reply + 16, pkt + 16, 4))
            return (int)n;
        if (n >= 8 && len < HDR && !memcmp(reply, pkt, 5))
            return (int)n;
    }
    errno = ETIMEDOUT;
    return -1;
}

static int parse_hex(const char *hex, uint8_t *out, size_t cap, size_t *n)
{
    size_t len = strlen(hex);
    if (len % 2 || len / 2 > cap)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    *n = len / 2;
    return 0;
}

/* --raw: one packet, and the reply's kind and byte 6 */
static int ask_raw(int fd, const char *hex)
{
    uint8_t pkt[512], reply[512];
    size_t len;
    if (parse_hex(hex, pkt, sizeof pkt, &len) || len < 5) {
        fprintf(stderr, "qrun ask: --raw takes 5 to 512 bytes in hex\n");
        return QRUN_USAGE;
    }
    int n = exchange(fd, pkt, len, reply, sizeof reply, now_ms());
    if (n < 0) {
        fprintf(stderr, "qrun ask: no reply: %s\n", strerror(errno));
        return QRUN_FAILED;
    }
    if (reply[5] == KIND_REFUSED)
        printf("refused %u (%s)\n", reply[6], reason_name(reply[6]));
    else
        printf("kind 0x%02x, byte 6 %u, %d bytes\n", reply[5], reply[6], n);
    return 0;
}

struct ask {
    uint32_t ids[MAX_IDS], n_ids, want, session, pos;
    bool stats;
};

static int refused(const uint8_t *reply)
{
    fprintf(stderr, "qrun ask: refused: %s (reason %u)\n", reason_name(reply[6]), reply[6]);
    return QRUN_FAILED;
}

static void header(uint8_t *p, uint8_t kind, const struct ask *a, uint32_t req)
{
    memcpy(p, "QPKL", 4);
    p[4] = 1;
    p[5] = kind;
    p[6] = (uint8_t)a->n_ids;
    p[7] = (uint8_t)a->want;
    put32(p + 8, a->session);
    put32(p + 12, a->pos);
    put32(p + 16, req);
}

static int ask_tokens(int fd, const struct ask *a)
{
    uint8_t step[HDR + 4 * MAX_IDS], poll[POLL_BYTES], reply[POLL_BYTES + 64];
    uint32_t req;
    if (getentropy(&req, sizeof req))
        req = (uint32_t)getpid() ^ (uint32_t)time(NULL);
    header(step, KIND_STEP, a, req);
    for (uint32_t i = 0; i < a->n_ids; i++)
        put32(step + HDR + 4 * i, a->ids[i]);
    double t0 = now_ms();
    int n;
    /* busy: another request runs; sent again */
    while ((n = exchange(fd, step, HDR + 4 * a->n_ids, reply, sizeof reply, t0)) >= 0 && reply[5] == KIND_BUSY)
        nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
    if (n < 0) {
        fprintf(stderr, "qrun ask: no reply from the listener: %s\n", strerror(errno));
        return QRUN_FAILED;
    }
    if (reply[5] == KIND_REFUSED)
        return refused(reply);
    double t_accepted = now_ms();
    memset(poll, 0, sizeof poll);
    header(poll, KIND_POLL, a, req);
    while ((n = exchange(fd, poll, sizeof poll, reply, sizeof reply, t0)) >= 0 && reply[5] == KIND_BUSY)
        nanosleep(&(struct timespec){.tv_nsec = POLL_NS}, NULL);
    double t1 = now_ms();
    if (n < 0) {
        fprintf(stderr, "qrun ask: no answer from the listener: %s\n", strerror(errno));
        return QRUN_FAILED;
    }
    if (reply[5] == KIND_REFUSED)
        return refused(reply);
    if (reply[5] != KIND_ANSWER || n < HDR + 4 * reply[7] || reply[7] != a->want) {
        fprintf(stderr, "qrun ask: a reply of kind 0x%02x with %u tokens, not the answer\n", reply[5], reply[7]);
        return QRUN_FAILED;
    }
    for (uint32_t i = 0; i < a->want; i++)
        printf("%s%u", i ? " " : "", get32(reply + HDR + 4 * i));
    printf("\n");
    uint32_t steps = a->n_ids + a->want - 1;
    if (a->stats)
        fprintf(stderr, "qrun ask: %u steps in %.2f ms from the request to the answer (%.3f ms/step; accepted in "
                        "%.3f ms)\n", steps, t1 - t0, (t1 - t0) / steps, t_accepted - t0);
    return 0;
}

static int parse_ids(const char *s, struct ask *a)
{
    char *end;
    a->n_ids = 0;
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || errno || v > UINT32_MAX || a->n_ids == MAX_IDS)
            return -1;
        a->ids[a->n_ids++] = (uint32_t)v;
        s = end;
    }
    return a->n_ids ? 0 : -1;
}

int ask_main(int argc, char **argv)
{
    const char *udp = NULL, *raw = NULL, *ids = NULL;
    struct ask a = {.want = 1};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            ask_help();
            return 0;
        }
        if (!strcmp(o, "--stats")) {
            a.stats = true;
            continue;
        }
        bool takes = !strcmp(o, "--udp") || !strcmp(o, "--ids") || !strcmp(o, "-n") || !strcmp(o, "--session") ||
                     !strcmp(o, "--pos") || !strcmp(o, "--raw");
        if (!takes) {
            fprintf(stderr, "qrun ask: unexpected argument '%s' (see qrun ask --help)\n", o);
            return QRUN_USAGE;
        }
        if (!v) {
            fprintf(stderr, "qrun ask: %s needs a value (see qrun ask --help)\n", o);
            return QRUN_USAGE;
        }
        i++;
        if (!strcmp(o, "--udp"))
            udp = v;
        else if (!strcmp(o, "--ids"))
            ids = v;
        else if (!strcmp(o, "--raw"))
            raw = v;
        else if (cli_uint("qrun ask", o, v, !strcmp(o, "-n"), !strcmp(o, "-n") ? MAX_IDS : UINT32_MAX, &n))
            return QRUN_USAGE;
        else if (!strcmp(o, "-n"))
            a.want = (uint32_t)n;
        else if (!strcmp(o, "--session"))
            a.session = (uint32_t)n;
        else
            a.pos = (uint32_t)n;
    }
    if (!udp || (!raw && !ids)) {
        fprintf(stderr, ASK_USAGE);
        return QRUN_USAGE;
    }
    if (ids && parse_ids(ids, &a)) {
        fprintf(stderr, "qrun ask: --ids takes 1 to %d token ids, got '%s'\n", MAX_IDS, ids);
        return QRUN_USAGE;
    }
    int fd = open_socket(udp);
    if (fd < 0)
        return QRUN_FAILED;
    int rc = raw ? ask_raw(fd, raw) : ask_tokens(fd, &a);
    close(fd);
    return rc;
}
