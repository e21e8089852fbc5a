/* qp-bench-batch MODEL.qpk [SESSIONS...] - a benchmark, not a test: what a
 * step of qpack_feed_batch costs against how many sessions share it, the
 * engine's own side of `qrun serve`'s scaling with its clients.
 *
 * For each count N (default 1 2 4 8), N sessions are fed the same short
 * prompt, then decode together: each step feeds every session one token
 * (its own greedy pick) in one qpack_feed_batch. The median of STEPS steps
 * gives ms per step, and N / that against one session's is the most
 * tokens/s that N clients can have over one: the server's ceiling, before
 * any HTTP, sampling or scheduling. The host's share (qpack_argmax over
 * every session's logits) is timed apart. Needs root for the BPF backend;
 * QP_BACKEND=emu runs the host twin. */
#include <qpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEPS 9
#define MAX_SESSIONS 16

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fail(const qpack_error *e)
{
    fprintf(stderr, "qp-bench-batch: %s\n", e->message);
    return 1;
}

/* QP_KERNELS=1: each kernel's ms per step (summed over the threads) */
static void print_kernels(const qpack_session *s, const qpack_session_stats *before, unsigned n)
{
    qpack_session_stats st;
    qpack_session_get_stats(s, &st);
    printf("  %u sessions, ms per step by kernel:", n);
    for (uint32_t k = 0; k < st.n_kernels; k++) {
        double ms = st.kernels[k].ms;
        for (uint32_t b = 0; b < before->n_kernels; b++)
            if (!strcmp(before->kernels[b].name, st.kernels[k].name))
                ms -= before->kernels[b].ms;
        if (ms > 0.05 * (STEPS + 1))
            printf(" %s %.1f", st.kernels[k].name, ms / (STEPS + 1));
    }
    printf("\n");
}

/* the median ms of STEPS decode steps of n sessions; *host_ms: the median
 * of picking their next tokens */
static int measure(qpack_model *m, unsigned n, double *step_ms, double *host_ms, qpack_error *e)
{
    static const int32_t prompt[] = {9707, 11, 1879, 0, 576, 1207, 374, 220};
    qpack_session *s[MAX_SESSIONS] = {0};
    qpack_batch_item items[MAX_SESSIONS];
    int32_t next[MAX_SESSIONS];
    double steps[STEPS], host[STEPS];
    int rc = 0;
    for (unsigned i = 0; i < n && !rc; i++) {
        rc = qpack_session_new(&s[i], m, e);
        if (!rc)
            rc = qpack_feed(s[i], prompt, sizeof prompt / sizeof *prompt, e);
    }
    qpack_session_stats before = {0};
    if (!rc)
        qpack_session_get_stats(s[0], &before);
    for (unsigned r = 0; r < STEPS + 1 && !rc; r++) {
        double t0 = now_ms();
        for (unsigned i = 0; i < n; i++) {
            next[i] = qpack_argmax(s[i]);
            items[i] = (qpack_batch_item){s[i], &next[i], 1};
        }
        double t1 = now_ms();
        rc = qpack_feed_batch(items, n, e);
        double t2 = now_ms();
        if (r) {    /* the first step warms the caches */
            host[r - 1] = t1 - t0;
            steps[r - 1] = t2 - t1;
        }
    }
    if (!rc && getenv("QP_KERNELS"))
        print_kernels(s[0], &before, n);
    for (unsigned i = 0; i < n; i++)
        qpack_session_free(s[i]);
    if (rc)
        return rc;
    qsort(steps, STEPS, sizeof *steps, cmp_double);
    qsort(host, STEPS, sizeof *host, cmp_double);
    *step_ms = steps[STEPS / 2];
    *host_ms = host[STEPS / 2];
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: qp-bench-batch MODEL.qpk [SESSIONS...]   (default 1 2 4 8; QP_BACKEND=emu)\n");
        return 2;
    }
    unsigned counts[MAX_SESSIONS], n_counts = 0, most = 1;
    for (int i = 2; i < argc && n_counts < MAX_SESSIONS; i++) {
        int v = atoi(argv[i]);
        if (v < 1 || v > MAX_SESSIONS) {
            fprintf(stderr, "qp-bench-batch: a count of sessions is 1 to %d, not '%s'\n", MAX_SESSIONS, argv[i]);
            return 2;
        }
        counts[n_counts++] = (unsigned)v;
    }
    if (!n_counts)
        for (unsigned v = 1; v <= 8; v *= 2)
            counts[n_counts++] = v;
    for (unsigned i = 0; i < n_counts; i++)
        most = counts[i] > most ? counts[i] : most;
    qpack_model_params mp = qpack_model_default_params();
    const char *backend = getenv("QP_BACKEND");
    if (backend && !strcmp(backend, "emu"))
        mp.backend = QPACK_BACKEND_EMU;
    mp.ctx = 256;
    mp.max_sessions = most;
    qpack_error e;
    qpack_model *m;
    if (qpack_model_open(&m, argv[1], &mp, &e))
        return fail(&e);
    double one = 0;
    printf("sessions  ms/step  ms/token  tokens/s vs 1  host ms/step\n");
    for (unsigned i = 0; i < n_counts; i++) {
        double step, host;
        if (measure(m, counts[i], &step, &host, &e)) {
            qpack_model_free(m);
            return fail(&e);
        }
        if (counts[i] == 1 || !one)
            one = step / counts[i];
        printf("%8u  %7.1f  %8.1f  %12.2fx  %12.2f\n", counts[i], step, step / counts[i], one / (step / counts[i]),
               host);
        fflush(stdout);
    }
    qpack_model_free(m);
    return 0;
}
