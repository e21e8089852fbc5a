/* qp-bench-context MODEL.qpk [POSITION...] - a benchmark, not a test: what
 * a decode step costs at a position of a long context, with the int16 or
 * the 8-bit KV cache (QP_KV_CACHE=int8), without the minutes a real prompt
 * of that length takes to feed.
 *
 * For each position P (default 16 2048 4096), the model is opened with a
 * context of P + STEPS positions and STEPS tokens are decoded at positions
 * P - 1 .. P + STEPS - 2, one step each; the median is ms per token. The
 * cache below P - 1 is never written: zeros, whose scores are all equal,
 * so every position weighs (no softmax weight underflows and no value
 * product is skipped): the most work attention can take there, an upper
 * bound on a real prompt's. Also printed: each kernel's ms per step
 * (summed over the threads), the longest program run by the kernel's
 * clock, and the KV cache's bytes per position. Needs root for the BPF
 * backend; QP_BACKEND=emu runs the host twin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine.h"

#define STEPS 7

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int measure(const char *path, const qpack_model_params *mp, uint32_t pos)
{
    qpack_model_params p = *mp;
    p.ctx = pos + STEPS;
    struct qp_engine e;
    qp_err err = {{0}};
    if (qp_engine_open(&e, path, &p, 0, &err)) {
        fprintf(stderr, "qp-bench-context: %s\n", err.msg);
        return 1;
    }
    double ms[STEPS], before[QP_K_COUNT];
    memcpy(before, qp_forward_stats(e.fw)->kernel_ms, sizeof before);
    uint32_t tok = 9707;
    for (int s = 0; s < STEPS; s++) {
        double t0 = qp_now_ms();
        if (qp_engine_step(&e, tok, pos - 1 + (uint32_t)s, true, &tok, &err)) {
            fprintf(stderr, "qp-bench-context: %s\n", err.msg);
            qp_engine_close(&e);
            return 1;
        }
        ms[s] = qp_now_ms() - t0;
    }
    qsort(ms, STEPS, sizeof *ms, cmp_double);
    const struct qp_forward_stats *st = qp_forward_stats(e.fw);
    printf("position %5u: %7.1f ms/token (median of %d), KV cache %s %llu bytes/position, longest program run "
           "%.2f ms\n  ms per token by kernel:", pos, ms[STEPS / 2], STEPS, e.plan.cfg.kv8 ? "int8" : "int16",
           (unsigned long long)e.plan.kv_bytes_per_pos, st->max_prog_ms);
    for (int k = 0; k < QP_K_COUNT; k++)
        if (st->kernel_ms[k] - before[k] > 0.05 * STEPS)
            printf(" %s %.1f", qp_kernel_name(k), (st->kernel_ms[k] - before[k]) / STEPS);
    printf("\n");
    qp_engine_close(&e);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: qp-bench-context MODEL.qpk [POSITION...]\n");
        return 2;
    }
    const char *backend = getenv("QP_BACKEND"), *kv = getenv("QP_KV_CACHE");
    qpack_model_params mp = {.max_sessions = 1, .threads = 2};
    mp.backend = backend && !strcmp(backend, "emu") ? QPACK_BACKEND_EMU : QPACK_BACKEND_BPF;
    mp.kv_cache = kv && !strcmp(kv, "int8") ? QPACK_KV_INT8 : QPACK_KV_INT16;
    mp.no_verify = true;
    static const uint32_t defaults[] = {16, 2048, 4096};
    int n = argc > 2 ? argc - 2 : 3;
    for (int i = 0; i < n; i++) {
        uint32_t pos = argc > 2 ? (uint32_t)strtoul(argv[2 + i], NULL, 10) : defaults[i];
        if (pos < 1) {
            fprintf(stderr, "qp-bench-context: positions start at 1, not '%s'\n", argv[2 + i]);
            return 2;
        }
        if (measure(argv[1], &mp, pos))
            return 1;
    }
    return 0;
}
