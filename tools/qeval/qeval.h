/* qeval.h - what qeval's files share: the metrics (qeval_metrics.c), the
 * run's inputs and results, the report (qeval_report.c) and the cache of
 * the reference's results (qeval_cache.c). qeval is built on
 * include/qpack.h alone. */
#ifndef QP_QEVAL_H
#define QP_QEVAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "qpack.h"

/* ---- metrics ----------------------------------------------------------- */

#define QE_TOPK 5

double qe_logsumexp(const double *x, uint32_t n);
double qe_kl(const double *p_logits, const double *q_logits, uint32_t n);   /* KL(p || q), >= 0 */
double qe_nll(const double *logits, uint32_t n, uint32_t target);           /* -log softmax[target] */
uint32_t qe_argmax(const double *x, uint32_t n);                             /* lowest index of equals */
uint32_t qe_topk(const double *x, uint32_t n, uint32_t k, uint32_t *idx);    /* largest first */
uint32_t qe_overlap(const uint32_t *a, const uint32_t *b, uint32_t k);
double qe_topk_overlap(const double *a, const double *b, uint32_t n, uint32_t k);
uint32_t qe_common_prefix(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb);
double qe_sd(const double *x, uint32_t n);                                   /* standard deviation */

/* logit statistics of one model against the reference, over positions */
struct qe_acc {
    double max_err, sum_abs_err, sum_sq_err, sum_kl, max_kl, sum_top5;
    double sum_sd, sum_ref_sd;    /* the spread of the model's and the reference's logits */
    uint64_t logits, positions, top1;
};

void qe_acc_add(struct qe_acc *a, const double *ref, const double *ours, uint32_t n);
double qe_acc_rms(const struct qe_acc *a);
double qe_acc_mae(const struct qe_acc *a);   /* mean absolute logit error */
double qe_acc_kl_mean(const struct qe_acc *a);
double qe_acc_top1_pct(const struct qe_acc *a);
double qe_acc_top5(const struct qe_acc *a);
double qe_acc_sd(const struct qe_acc *a);      /* mean over positions of the logits' SD */
double qe_acc_ref_sd(const struct qe_acc *a);  /* the same of the reference's logits */
double qe_acc_rel_rms(const struct qe_acc *a); /* RMS error / reference SD: comparable across models */

/* ---- a run ------------------------------------------------------------- */

#define GEN_MAX 16          /* greedy continuation length */
#define TEXT_MAX 4096       /* positions of a --text window at most */
#define N_RANDOM_PROMPTS 4

struct options {
    const char *ref_dir, *prompts_file, *prompt_ids_file, *text_file, *ref_cache, *plot_file;
    const char **models;
    int n_models;
    uint32_t positions;
    uint32_t text_windows;        /* --text-windows: windows of the text scored at most */
    uint64_t seed;
    qpack_backend backend;
    qpack_kv_cache kv_cache;      /* the containers'; the reference keeps float64 */
    uint32_t call_us;             /* qpack_model_params.call_us */
    qpack_schedule schedule;      /* the containers' qpack_model_params.schedule */
    bool json, csv, trace, force, quiet;
};

struct seq {
    int32_t *ids;
    uint32_t n;
    uint32_t gen;                 /* greedy continuation tokens for this prompt */
};

/* one column of the report */
struct result {
    const char *path, *label;
    const char *backend;
    bool cached;                  /* the reference's results came from --ref-cache */
    bool logits_file;             /* logits:FILE, another program's logits: compared, not run */
    qpack_model_info info;        /* inspected */
    uint64_t map_bytes, peak_rss;
    double load_ms;
    double prompt_ms, decode_ms;
    uint64_t prompt_tokens, decode_steps, prompt_calls;
    struct qe_acc acc;
    uint64_t greedy_prefix_sum, greedy_prompts;
    double text_nll_sum;
    uint64_t text_tokens;
    double *trace_max, *trace_sq;      /* [n_layers] */
    uint64_t trace_n;                  /* values per layer */
};

/* everything the reference leaves for the containers */
struct ref_data {
    int fd;                           /* logits, [position][vocab] doubles, all prompts in order */
    off_t rows_off;                   /* where the rows start in fd */
    int32_t **gen;                    /* [prompt][GEN_MAX] greedy tokens */
    double *hidden;                   /* --trace-layers: [last prompt pos][layer][hidden] */
};

struct ctx {
    struct options *o;
    const qpack_model_info *cfg;      /* the reference's */
    struct seq *prompts;
    uint32_t n_prompts;
    int32_t *text;                /* the text's tokens scored: n_text_windows windows of */
    uint32_t n_text;              /* text_window positions one after the other (the last */
    uint32_t text_window;         /* may be shorter), each scored from its own start */
    uint32_t n_text_windows;
    uint32_t n_text_file;         /* tokens of the whole text */
    uint32_t ctx;
    struct ref_data ref;
    struct result *res;               /* [0] reference, [1..] containers */
    qpack_source_file *sources;       /* the reference folder's files, hashed */
    size_t n_sources;
};

/* qeval_report.c */
/* "qeval: MESSAGE" on stderr (the progress line cleared first); returns 1 */
int qe_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* path read whole (at most 256 MiB); a FIFO or device refused at once */
int qe_read_all(const char *path, char **out, size_t *len);

/* qeval_inputs.c: the prompts and the text into x, and the context they need */
int qe_make_inputs(struct ctx *x);

int qe_print_table(const struct ctx *x);
int qe_print_json(const struct ctx *x);
int qe_print_csv(const struct ctx *x);

/* qeval_cache.c: --ref-cache DIR. The reference's results for this
 * checkpoint (its files' hashes) and these token sequences, in one file
 * DIR/HASH.qeref: 1 when found (x->ref filled, res[0] marked cached), 0
 * when not there, -1 on an error (its line printed). */
int qe_cache_load(struct ctx *x);

/* Keeps the reference's results of this run (after it ran), written whole
 * or not at all. */
int qe_cache_store(struct ctx *x);

#endif
