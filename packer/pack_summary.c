/* pack_summary.c - what a pack cost, printed when it ends: each quantised
 * tensor's error, the mix of encodings, the file's size and bits per
 * weight (packer.h). */
#include "packer.h"

#include <math.h>
#include <stdio.h>

#include "fsafe.h"
#include "show.h"

/* One line per tensor, for the quantised formats: where the error is. */
static void print_tensor_errors(const struct packer *p)
{
    for (uint32_t i = 0; i < p->n_plan; i++) {
        const struct planned *pl = &p->plan[i];
        double n = (double)pl->t.rows * pl->t.cols;
        char enc[16];
        snprintf(enc, sizeof enc, pl->t.group_size ? "%s g%u" : "%s", qpk_encoding_name(pl->t.encoding),
                 pl->t.group_size);
        fprintf(stderr, "qpack:   %-46s %-8s %6.3f bpw  rms %-9.3g max %.3g\n", pl->t.name, enc,
                8.0 * (double)pack_planned_bytes(pl) / n, sqrt(pl->sum_sq_err / n), pl->max_err);
    }
}

/* The tensors of each of the n encodings of a family, "140 i4k + 12 i4g",
 * or "" when it has none; true when it had some. */
static bool print_family(const struct packer *p, const unsigned *enc, unsigned n, const char *lead)
{
    bool any = false;
    for (unsigned k = 0; k < n; k++) {
        uint32_t count = 0;
        for (uint32_t i = 0; i < p->n_plan; i++)
            count += p->plan[i].t.encoding == enc[k];
        if (count)
            fprintf(stderr, "%s %u %s", any ? " +" : lead, count, qpk_encoding_name(enc[k]));
        any |= count > 0;
    }
    return any;
}

/* "140 i4k + 12 i4g (groups of 32), 1 i6g + 3 i8g (groups of 64)": a
 * quantised pack's matrices */
static void print_matrix_mix(const struct packer *p)
{
    static const unsigned int4[] = {QPK_ENC_I4K, QPK_ENC_I4G}, int8[] = {QPK_ENC_I6G, QPK_ENC_I7G, QPK_ENC_I8G};
    fprintf(stderr, "qpack: matrices:");
    bool any4 = print_family(p, int4, 2, "");
    if (any4)
        fprintf(stderr, " (groups of %u)", p->opt.group);
    if (print_family(p, int8, 3, any4 ? "," : ""))
        fprintf(stderr, " (groups of %u%s)", p->i8_group,
                p->opt.prec.format != PACK_INT8 && p->i8_group != PRECISION_INT8_GROUP
                    ? ": " STR(PRECISION_INT8_GROUP) " does not divide their columns" : "");
    fprintf(stderr, "\n");
}

void pack_print_summary(const struct packer *p, double seconds)
{
    if (p->opt.quiet)
        return;
    if (!p->tokenizer)
        fprintf(stderr, "qpack: warning: %s has no tokenizer.json: the container carries no tokenizer "
                        "(qrun -p and --chat will need --tokenizer)\n", p->opt.src);
    double worst = 0, sum_sq = 0, n_all = 0;
    const char *worst_name = "";
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < p->n_plan; i++) {
        const struct planned *pl = &p->plan[i];
        sum_sq += pl->sum_sq_err;
        n_all += (double)pl->t.rows * pl->t.cols;
        bytes += pack_planned_bytes(pl);
        if (pl->max_err > worst) {
            worst = pl->max_err;
            worst_name = pl->t.name;
        }
    }
    if (precision_quantised(p->opt.prec.format)) {
        print_tensor_errors(p);
        print_matrix_mix(p);
    }
    struct stat st;
    char file_size[32], data_size[32];
    show_size(file_size, sizeof file_size, stat(p->opt.out, &st) == 0 ? (double)st.st_size : 0);
    show_size(data_size, sizeof data_size, (double)bytes);
    fprintf(stderr, "qpack: %s: %s, %u tensors, %.2fM weights, %s of tensor data, %.3f bits per weight, "
                    "in %.1f s\n",
            p->opt.out, file_size, p->n_plan, n_all / 1e6, data_size, 8.0 * (double)bytes / n_all, seconds);
    fprintf(stderr, "qpack: reconstruction error vs the source: rms %.3g, max %.3g (%s)%s\n",
            sqrt(sum_sq / n_all), worst, worst_name[0] ? worst_name : "all exact",
            p->deduped_lm_head ? "; lm_head stored once (tied)" : "");
}
