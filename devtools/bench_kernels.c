/* qp-bench-kernels MODEL.qpk [BLOCK] - a benchmark, not a test: the cost of
 * one multiply-add in each matrix kernel, one position at a time against a
 * block of BLOCK positions (default: the plan's default block). For each
 * product of layer 0 (q|k|v, o, gate|up, down) it runs every row in one
 * invocation on the BPF backend, REPS times, and prints the fastest run's
 * nanoseconds per multiply-add for one position and per position of the
 * block: the shortest run is the kernel's own cost, whatever else the
 * machine is doing. One layer's matrix stays in the caches from run to
 * run; the last column runs the product of every layer in turn, one
 * position, so its weights come from memory as in decoding. Then
 * attention: layer 0's heads for one position at ATTN_POS over a cache of
 * zeros (every position weighted, the most work), a task (QK_ATTN_CHUNK
 * positions of one head, or of a pair of heads) per invocation, each
 * task's fastest of REPS runs by the kernel's clock (the programs alone),
 * summed: ns per multiply-add of its scores and values and ns per
 * (position, head), with one head a task and with the plan's choice.
 * Between them, the core's own 64-bit multiply throughput (x86-64): the
 * floor of every kernel is its multiplies per multiply-add times that.
 * Needs root. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "qpk.h"
#include "clock.h"

#define REPS 9
#define ATTN_POS 4095

/* The core's 64-bit multiply throughput, ns per multiply at best: eight
 * independent chains of the imul the BPF JIT emits for a BPF multiply.
 * The matrix kernels' floor is their multiplies per multiply-add
 * (scripts/jit_report.sh: muls / MACs) times this. 0 off x86-64. */
static double multiply_ns(void)
{
#if defined(__x86_64__)
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        uint64_t v[8] = {3, 5, 7, 9, 11, 13, 15, 17}, m = 0x9E3779B97F4A7C15ull;
        const long n = 20000000;
        double t0 = (qp_now_ms() * 1e6);
        for (long i = 0; i < n; i++)
            asm volatile("imul %8, %0\n\timul %8, %1\n\timul %8, %2\n\timul %8, %3\n\t"
                         "imul %8, %4\n\timul %8, %5\n\timul %8, %6\n\timul %8, %7"
                         : "+r"(v[0]), "+r"(v[1]), "+r"(v[2]), "+r"(v[3]), "+r"(v[4]), "+r"(v[5]), "+r"(v[6]),
                           "+r"(v[7])
                         : "r"(m));
        double t = ((qp_now_ms() * 1e6) - t0) / (8.0 * n);
        best = t < best ? t : best;
    }
    return best;
#else
    return 0;
#endif
}

/* fastest of REPS runs of rows [0, rows) of `mode` for `block` positions,
 * as `block` / nb invocations of nb positions each: the same work either
 * way, so that both see the machine for as long */
static double fastest_ns(struct qp_backend *b, const struct qp_plan *p, uint32_t mode, uint32_t rows, uint32_t nb,
                         uint32_t block, uint32_t layers)
{
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = (qp_now_ms() * 1e6);
        for (uint32_t layer = 0; layer < layers; layer++)
        for (uint32_t k = 0; k < block / nb; k++)
        for (uint32_t first = 0; first < rows;) {
            struct qp_matrix_rows m = qp_plan_matrix_of(p, layer, mode, first);
            struct qk_args a = {.layer = layer, .mode = mode, .begin = first, .end = m.row0 + m.rows,
                                .b0 = nb == 1 ? k : 0, .nb = nb};
            qp_err err;
            if (qp_plan_reads_act_records(p, layer, mode) && b->run(b, QP_K_QUANT_X, &a, NULL, &err))
                return -1;
            /* the block program itself for a block, whatever qp_matvec_kernel would pick */
            enum qp_kernel k = qp_matvec_kernel(m.enc, nb > 1 ? QK_MAX_BLOCK : 1);
            if (b->run(b, k, &a, NULL, &err)) {
                fprintf(stderr, "qp-bench-kernels: %s\n", err.msg);
                exit(1);
            }
            first = m.row0 + m.rows;
        }
        double t = (qp_now_ms() * 1e6) - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* layer 0's attention for one position at pos, all heads, one task per
 * invocation: the sum over tasks of each task's fastest of REPS runs, by
 * the programs' own nanoseconds (a sum of per-run totals would keep every
 * run's worst interruptions) */
static double attention_ns(struct qp_backend *b, const struct qk_config *c, uint32_t pos)
{
    uint32_t tasks = qk_attn_head_tasks(c) * (pos / QK_ATTN_CHUNK + 1);
    b->seq[0] = (struct qk_seq){.pos = pos, .kv_slot = 0};
    double sum = 0;
    for (uint32_t t = 0; t < tasks; t++) {
        double best = 1e30;
        for (int r = 0; r < REPS; r++) {
            struct qk_args a = {.layer = 0, .max_pos = pos, .nb = 1, .begin = t, .end = t + 1};
            uint64_t ns = 0;
            qp_err err;
            if (b->run(b, c->kv8 ? QP_K_ATTENTION8 : QP_K_ATTENTION, &a, &ns, &err)) {
                fprintf(stderr, "qp-bench-kernels: %s\n", err.msg);
                exit(1);
            }
            best = (double)ns < best ? (double)ns : best;
        }
        sum += best;
    }
    return sum;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: qp-bench-kernels MODEL.qpk [BLOCK]\n");
        return 2;
    }
    uint32_t block = argc > 2 ? (uint32_t)atoi(argv[2]) : QP_BLOCK_DEFAULT;
    struct qpk_file f;
    struct qp_plan p;
    struct qp_backend *b;
    qp_err err;
    const char *kv = getenv("QP_KV_CACHE");     /* "int8": the 8-bit cache's attention */
    bool kv8 = kv && !strcmp(kv, "int8");
    if (qpk_open(&f, argv[1], 0, &err) || qp_plan_build(&p, &f, ATTN_POS + 1, 1, block, false, kv8, &err) ||
        qp_bpf_create(&b, &p, &err)) {
        fprintf(stderr, "qp-bench-kernels: %s\n", err.msg);
        return 1;
    }
    const struct qk_config *c = &p.cfg;
    /* act vectors of moderate size in every entry: the cost does not depend on the values */
    int64_t *x = (int64_t *)b->state(b, QP_MAP_X);
    for (size_t i = 0; i < (size_t)c->act_len * block; i++)
        x[i] = (int64_t)((i * 2654435761u) % 2000001) - 1000000;
    struct { const char *name; uint32_t mode, rows, cols; } prods[] = {
        {"q|k|v", QK_MV_QKV, c->q_dim + 2 * c->kv_dim, c->hidden},
        {"o", QK_MV_O, c->hidden, c->q_dim},
        {"gate|up", QK_MV_GATE_UP, 2 * c->inter, c->hidden},
        {"down", QK_MV_DOWN, c->hidden, c->inter},
    };
    printf("%s, layer 0 (last column: every layer), fastest of %d runs, ns per multiply-add:\n", argv[1], REPS);
    printf("  %-8s %10s %10s %u %14s\n", "product", "1 position", "block of", block, "every layer");
    for (int i = 0; i < 4; i++) {
        double macs = (double)prods[i].rows * prods[i].cols;
        double one = fastest_ns(b, &p, prods[i].mode, prods[i].rows, 1, block, 1) / macs / block;
        double blk = fastest_ns(b, &p, prods[i].mode, prods[i].rows, block, block, 1) / macs / block;
        double all = fastest_ns(b, &p, prods[i].mode, prods[i].rows, 1, 1, c->n_layers) / macs / c->n_layers;
        printf("  %-8s %10.3f %14.3f %14.3f\n", prods[i].name, one, blk, all);
    }
    double mul = multiply_ns();
    if (mul > 0)
        printf("this core: %.3f ns per 64-bit multiply at best (8 independent chains), the floor of a kernel "
               "with one multiply per multiply-add\n", mul);
    /* one task per invocation (a task is a chunk of QK_ATTN_CHUNK positions
     * of attn_heads heads), one head per task against the plan's choice */
    double pos_heads = (double)(ATTN_POS + 1) * c->n_heads;
    uint32_t choice = c->attn_heads;
    for (uint32_t heads = 1; heads <= choice; heads++) {
        struct qp_backend *ab = b;
        p.cfg.attn_heads = heads;
        if (heads != choice && qp_bpf_create(&ab, &p, &err)) {
            fprintf(stderr, "qp-bench-kernels: %s\n", err.msg);
            return 1;
        }
        double ns = attention_ns(ab, c, ATTN_POS);
        printf("attention at position %u, layer 0, %u head%s a task (kernel clock): %.3f ms, %.3f ns per "
               "multiply-add, %.1f ns per (position, head)\n", ATTN_POS, heads, heads > 1 ? "s" : "", ns / 1e6,
               ns / (pos_heads * c->head_dim * 2), ns / pos_heads);
        if (ab != b)
            ab->destroy(ab);
    }
    b->destroy(b);
    qp_plan_free(&p);
    qpk_close(&f);
    return 0;
}
