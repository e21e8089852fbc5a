/* qeval - how close packed models are to the float64 reference, and what
 * they cost: logit error, KL divergence, top-1 and top-5 agreement,
 * teacher-forced perplexity of a text, greedy continuation agreement,
 * memory, speed and (optionally) the hidden-state error after every layer.
 *
 *   qeval --ref DIR A.qpk [B.qpk ...] [--prompts FILE] [--text FILE]
 *         [--positions N] [--seed S] [--backend bpf|emu] [--json] [--trace-layers]
 *
 * The reference (the float64 forward from the Hugging Face folder DIR) runs
 * first over every token sequence; its logits are kept in an unlinked
 * temporary file, so memory does not grow with the number of positions.
 * Then each container is opened in turn, runs the same sequences, is
 * compared and closed: one model is loaded at a time.
 *
 * Exit status: 0 done, 1 error, 2 bad usage. Errors are one line on stderr.
 */
#include <bpf/bpf.h>
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/bpf.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "safetensors.h"
#include "session.h"
#include "tokenizer.h"

/* ---- metrics (unit tested in tests/test_qeval.c) ------------------------------------ */

#define QE_TOPK 5

/* log(sum_i exp(x[i])), computed stably */
double qe_logsumexp(const double *x, uint32_t n)
{
    double m = x[0];
    for (uint32_t i = 1; i < n; i++)
        m = fmax(m, x[i]);
    double z = 0;
    for (uint32_t i = 0; i < n; i++)
        z += exp(x[i] - m);
    return m + log(z);
}

/* KL(p || q) of the softmaxes of two logit vectors (natural log), >= 0 */
double qe_kl(const double *p_logits, const double *q_logits, uint32_t n)
{
    double lzp = qe_logsumexp(p_logits, n), lzq = qe_logsumexp(q_logits, n), kl = 0;
    for (uint32_t i = 0; i < n; i++) {
        double lp = p_logits[i] - lzp, lq = q_logits[i] - lzq;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}

/* -log softmax(logits)[target] (natural log) */
double qe_nll(const double *logits, uint32_t n, uint32_t target)
{
    return qe_logsumexp(logits, n) - logits[target];
}

/* index of the largest value; the lowest index among equals */
uint32_t qe_argmax(const double *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The indices of the min(k, n) largest values into idx, largest first (the
 * lower index first among equals); returns how many. */
uint32_t qe_topk(const double *x, uint32_t n, uint32_t k, uint32_t *idx)
{
    uint32_t have = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (have == k && !(x[i] > x[idx[k - 1]]))
            continue;
        uint32_t j = have < k ? have++ : k - 1;
        while (j > 0 && x[i] > x[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    return have;
}

/* |a ∩ b| of two sets of k distinct indices */
uint32_t qe_overlap(const uint32_t *a, const uint32_t *b, uint32_t k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < k; i++)
        for (uint32_t j = 0; j < k; j++)
            if (a[i] == b[j]) {
                n++;
                break;
            }
    return n;
}

/* top-k overlap of two logit vectors, as a fraction: |topk(a) ∩ topk(b)| / k */
double qe_topk_overlap(const double *a, const double *b, uint32_t n, uint32_t k)
{
    uint32_t ia[16], ib[16];
    if (k > 16)
        k = 16;
    uint32_t m = qe_topk(a, n, k, ia);
    qe_topk(b, n, k, ib);
    return m ? (double)qe_overlap(ia, ib, m) / m : 0;
}

/* length of the common prefix of a[0..na) and b[0..nb) */
uint32_t qe_common_prefix(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb)
{
    uint32_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

/* logit statistics of one model against the reference, over positions */
struct qe_acc {
    double max_err, sum_sq_err, sum_kl, max_kl, sum_top5;
    uint64_t logits, positions, top1;
};

void qe_acc_add(struct qe_acc *a, const double *ref, const double *ours, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        double e = fabs(ours[i] - ref[i]);
        a->max_err = fmax(a->max_err, e);
        a->sum_sq_err += e * e;
    }
    double kl = qe_kl(ref, ours, n);
    a->sum_kl += kl;
    a->max_kl = fmax(a->max_kl, kl);
    a->sum_top5 += qe_topk_overlap(ref, ours, n, QE_TOPK);
    a->top1 += qe_argmax(ref, n) == qe_argmax(ours, n);
    a->logits += n;
    a->positions++;
}

double qe_acc_rms(const struct qe_acc *a) { return a->logits ? sqrt(a->sum_sq_err / (double)a->logits) : 0; }
double qe_acc_kl_mean(const struct qe_acc *a) { return a->positions ? a->sum_kl / (double)a->positions : 0; }
double qe_acc_top1_pct(const struct qe_acc *a) { return a->positions ? 100.0 * (double)a->top1 / (double)a->positions : 0; }
double qe_acc_top5(const struct qe_acc *a) { return a->positions ? a->sum_top5 / (double)a->positions : 0; }

#ifndef QEVAL_NO_MAIN

#define GEN_MAX 16          /* greedy continuation length */
#define TEXT_MAX 4096       /* tokens of --text scored at most */
#define N_RANDOM_PROMPTS 4

struct options {
    const char *ref_dir, *prompts_file, *text_file;
    const char **models;
    int n_models;
    uint32_t positions;
    uint64_t seed;
    enum qp_backend_kind backend;
    bool json, trace;
};

struct seq {
    uint32_t *ids, n;
    uint32_t gen;                 /* greedy continuation tokens for this prompt */
};

/* one column of the report */
struct result {
    const char *path, *label;
    enum qp_backend_kind kind;
    uint64_t file_bytes, map_bytes, kv_bytes_per_pos, peak_rss;
    double bits_per_weight, load_ms;
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
    uint32_t **gen;                   /* [prompt][gen] greedy tokens */
    double *hidden;                   /* --trace-layers: [last prompt pos][layer][hidden] */
};

struct ctx {
    struct options *o;
    struct qwen3_config cfg;
    struct seq *prompts;
    uint32_t n_prompts;
    uint32_t *text, n_text;
    uint32_t ctx;
    struct ref_data ref;
    struct result *res;               /* [0] reference, [1..] containers */
};

static const char *prog = "qeval";

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: qeval --ref DIR A.qpk [B.qpk ...] [options]\n"
            "\n"
            "Compares each container with the float64 reference computed from the Hugging Face\n"
            "checkpoint folder DIR, on the same token sequences, and measures its memory and speed.\n"
            "\n"
            "  --ref DIR           the original checkpoint (config.json + safetensors); required\n"
            "  --prompts FILE      one prompt per line (empty lines skipped), tokenized with\n"
            "                      DIR/tokenizer.json, else the first container's tokenizer.\n"
            "                      Default: %u seeded random token sequences of --positions tokens\n"
            "  --positions N       length of the random prompts (default 32)\n"
            "  --seed S            seed of the random prompts (default 1)\n"
            "  --text FILE         also score FILE teacher-forced: NLL per token and perplexity,\n"
            "                      reference and containers (the first token is context; at most\n"
            "                      %u tokens or the model's positions are scored)\n"
            "  --backend B         bpf (default; needs root or CAP_BPF + CAP_PERFMON) or emu\n"
            "  --json              print one JSON object instead of the table\n"
            "  --trace-layers      also the hidden-state error after every layer (max abs and RMS\n"
            "                      over the last prompt's positions)\n"
            "  -h, --help          this text\n"
            "\n"
            "Per model, over every position of every prompt: logit max abs and RMS error, mean and\n"
            "max KL(ref || model), top-1 agreement, top-5 overlap; from the end of each prompt, %u\n"
            "greedy tokens from model and reference and the mean length of their common prefix;\n"
            "file size, bytes in BPF maps, bits per weight, KV cache bytes per position, peak RSS\n"
            "(the process's, reset before each model); start-up, prompt and decode ms per token,\n"
            "kernel calls per token. One model is loaded at a time.\n"
            "Exit status: 0 done, 1 error, 2 bad usage.\n",
            N_RANDOM_PROMPTS, TEXT_MAX, GEN_MAX);
}

static int opt_uint(const char *name, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = arg[0] >= '0' && arg[0] <= '9' ? strtoull(arg, &end, 10) : 0;
    if (arg[0] < '0' || arg[0] > '9' || *end || errno || v < min || v > max) {
        fprintf(stderr, "%s: %s needs a whole number from %" PRIu64 " to %" PRIu64 ", got '%s'\n", prog, name,
                min, max, arg);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_options(struct options *o, int argc, char **argv)
{
    enum { O_REF = 256, O_PROMPTS, O_TEXT, O_POSITIONS, O_SEED, O_BACKEND, O_JSON, O_TRACE };
    static const struct option longs[] = {
        {"ref", required_argument, 0, O_REF}, {"prompts", required_argument, 0, O_PROMPTS},
        {"text", required_argument, 0, O_TEXT}, {"positions", required_argument, 0, O_POSITIONS},
        {"seed", required_argument, 0, O_SEED}, {"backend", required_argument, 0, O_BACKEND},
        {"json", no_argument, 0, O_JSON}, {"trace-layers", no_argument, 0, O_TRACE},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (struct options){.positions = 32, .seed = 1, .backend = QP_BACKEND_BPF};
    o->models = calloc((size_t)argc, sizeof *o->models);
    if (!o->models)
        return die("out of memory"), -1;
    int c;
    uint64_t v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        switch (c) {
        case O_REF: o->ref_dir = optarg; break;
        case O_PROMPTS: o->prompts_file = optarg; break;
        case O_TEXT: o->text_file = optarg; break;
        case O_POSITIONS:
            if (opt_uint("--positions", optarg, 1, QWEN3_MAX_POSITIONS, &v))
                return -1;
            o->positions = (uint32_t)v;
            break;
        case O_SEED:
            if (opt_uint("--seed", optarg, 0, UINT64_MAX, &o->seed))
                return -1;
            break;
        case O_BACKEND:
            if (!strcmp(optarg, "bpf"))
                o->backend = QP_BACKEND_BPF;
            else if (!strcmp(optarg, "emu"))
                o->backend = QP_BACKEND_EMU;
            else {
                fprintf(stderr, "%s: unknown backend '%s' (bpf, emu)\n", prog, optarg);
                return -1;
            }
            break;
        case O_JSON: o->json = true; break;
        case O_TRACE: o->trace = true; break;
        case 'h': usage(stdout); exit(0);
        case ':':
            fprintf(stderr, "%s: option '%s' needs a value (try qeval --help)\n", prog, argv[optind - 1]);
            return -1;
        default:
            if (optopt)
                fprintf(stderr, "%s: unknown option '-%c' (try qeval --help)\n", prog, optopt);
            else
                fprintf(stderr, "%s: unknown option '%s' (try qeval --help)\n", prog, argv[optind - 1]);
            return -1;
        }
    }
    for (int i = optind; i < argc; i++)
        o->models[o->n_models++] = argv[i];
    if (!o->ref_dir) {
        fprintf(stderr, "%s: no reference: give --ref DIR (try qeval --help)\n", prog);
        return -1;
    }
    if (!o->n_models) {
        fprintf(stderr, "%s: no container: give one or more MODEL.qpk (try qeval --help)\n", prog);
        return -1;
    }
    return 0;
}

/* ---- inputs ------------------------------------------------------------------------ */

static int need_file(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st))
        return die("%s %s: %s", what, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return die("%s %s: not a regular file", what, path);
    return 0;
}

static int read_all(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return die("%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf)
        return die("out of memory");
    if (bad) {
        free(buf);
        return die("%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

/* Bits per weight from a container's tensor table; its file size. */
static int inspect_container(struct ctx *x, struct result *r)
{
    qp_err err = {{0}};
    struct qpk_file f;
    if (qpk_open(&f, r->path, 0, &err))
        return die("%s", err.msg);
    const struct qpk_config *c = &f.cfg;
    const struct qwen3_config *h = &x->cfg;
    char what[128] = "";
#define DIFF(name, a, b)                                                                                            \
    if (!what[0] && (a) != (b))                                                                                     \
    snprintf(what, sizeof what, "%s %.17g vs %.17g", name, (double)(a), (double)(b))
    DIFF("hidden_size", c->hidden, h->hidden_size);
    DIFF("intermediate_size", c->intermediate, h->intermediate_size);
    DIFF("num_hidden_layers", c->n_layers, h->num_hidden_layers);
    DIFF("num_attention_heads", c->n_heads, h->num_attention_heads);
    DIFF("num_key_value_heads", c->n_kv_heads, h->num_key_value_heads);
    DIFF("head_dim", c->head_dim, h->head_dim);
    DIFF("vocab_size", c->vocab, h->vocab_size);
    DIFF("max_position_embeddings", c->max_positions, h->max_position_embeddings);
    DIFF("rope_theta", c->rope_theta, h->rope_theta);
    DIFF("rms_norm_eps", c->rms_eps, h->rms_norm_eps);
    DIFF("tie_word_embeddings", !!(c->flags & QPK_CONFIG_TIED), h->tie_word_embeddings);
#undef DIFF
    uint64_t bytes = 0, params = 0;
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        bytes += f.tensors[i].nbytes;
        params += (uint64_t)f.tensors[i].rows * f.tensors[i].cols;
    }
    r->file_bytes = f.size;
    r->bits_per_weight = params ? 8.0 * (double)bytes / (double)params : 0;
    qpk_close(&f);
    if (what[0])
        return die("%s: config differs from the reference %s: %s (container vs reference)", r->path,
                   x->o->ref_dir, what);
    return 0;
}

/* The reference's file size (safetensors files and index) and bits per
 * weight (tensor bytes * 8 / parameters), from its safetensors headers. */
static int inspect_reference(const char *dir, struct result *r)
{
    qp_err err = {{0}};
    struct st_model m;
    if (st_open_dir(&m, dir, &err))
        return die("%s", err.msg);
    uint64_t bytes = 0, params = 0;
    for (uint32_t i = 0; i < m.n_files; i++)
        r->file_bytes += m.files[i].size;
    r->file_bytes += m.index_size;
    for (uint32_t i = 0; i < m.n_tensors; i++) {
        bytes += m.tensors[i].nbytes;
        params += m.tensors[i].numel;
    }
    r->bits_per_weight = params ? 8.0 * (double)bytes / (double)params : 0;
    st_close(&m);
    return 0;
}

static int load_tokenizer(struct ctx *x, qp_tok **tok)
{
    qp_err err = {{0}};
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", x->o->ref_dir);
    struct stat st;
    if (!stat(path, &st))
        return qp_tok_load_file(tok, path, &err) ? die("%s", err.msg) : 0;
    for (int i = 0; i < x->o->n_models; i++) {
        struct qpk_file f;
        if (qpk_open(&f, x->o->models[i], 0, &err))
            return die("%s", err.msg);
        char *json = NULL;
        size_t len;
        int rc = qpk_read_section(&f, QPK_SEC_TOKENIZER, &json, &len, &err);
        if (!rc && json)
            rc = qp_tok_load_buffer(tok, json, len, x->o->models[i], &err);
        free(json);
        qpk_close(&f);
        if (rc)
            return die("%s", err.msg);
        if (json)
            return 0;
    }
    return die("no tokenizer for --prompts/--text: %s has no tokenizer.json and no container carries one",
               x->o->ref_dir);
}

/* Token ids of text, each checked against the vocabulary. */
static int encode(struct ctx *x, qp_tok *tok, const char *what, const char *text, size_t len, uint32_t **out,
                  uint32_t *n)
{
    qp_err err = {{0}};
    qp_tok_ids ids = {0};
    if (qp_tok_encode(tok, text, len, &ids, &err)) {
        qp_tok_ids_free(&ids);
        return die("%s: %s", what, err.msg);
    }
    *out = malloc((ids.len ? ids.len : 1) * sizeof **out);
    if (!*out) {
        qp_tok_ids_free(&ids);
        return die("out of memory");
    }
    for (size_t i = 0; i < ids.len; i++) {
        if ((uint32_t)ids.v[i] >= x->cfg.vocab_size) {
            int rc = die("%s: token id %d is outside the model's vocabulary (%u)", what, ids.v[i],
                         x->cfg.vocab_size);
            qp_tok_ids_free(&ids);
            free(*out);
            *out = NULL;
            return rc;
        }
        (*out)[i] = (uint32_t)ids.v[i];
    }
    *n = (uint32_t)ids.len;
    qp_tok_ids_free(&ids);
    return 0;
}

static int make_inputs(struct ctx *x)
{
    struct options *o = x->o;
    qp_tok *tok = NULL;
    if ((o->prompts_file || o->text_file) && load_tokenizer(x, &tok))
        return -1;
    int rc = 0;
    if (o->prompts_file) {
        char *buf;
        size_t len;
        if (read_all(o->prompts_file, &buf, &len)) {
            qp_tok_free(tok);
            return -1;
        }
        uint32_t lines = 1;
        for (size_t i = 0; i < len; i++)
            lines += buf[i] == '\n';
        x->prompts = calloc(lines, sizeof *x->prompts);
        char *p = buf, *end = buf + len;
        uint32_t line_no = 0;
        while (!rc && x->prompts && p < end) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
            line_no++;
            if (n && p[n - 1] == '\r')
                n--;
            if (n) {
                char what[4200];
                snprintf(what, sizeof what, "%s line %u", o->prompts_file, line_no);
                struct seq *s = &x->prompts[x->n_prompts];
                rc = encode(x, tok, what, p, n, &s->ids, &s->n);
                if (!rc && s->n)
                    x->n_prompts++;
                else if (!rc)
                    free(s->ids);
            }
            p = nl ? nl + 1 : end;
        }
        free(buf);
        if (!x->prompts)
            rc = die("out of memory");
        if (!rc && !x->n_prompts)
            rc = die("%s: no prompts (one prompt per line)", o->prompts_file);
    } else {
        x->n_prompts = N_RANDOM_PROMPTS;
        x->prompts = calloc(N_RANDOM_PROMPTS, sizeof *x->prompts);
        if (!x->prompts)
            rc = die("out of memory");
        /* the sequences of scripts/accuracy.c */
        uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 1;
        for (uint32_t p = 0; !rc && p < N_RANDOM_PROMPTS; p++) {
            struct seq *s = &x->prompts[p];
            s->n = o->positions;
            s->ids = malloc(s->n * sizeof *s->ids);
            if (!s->ids) {
                rc = die("out of memory");
                break;
            }
            for (uint32_t i = 0; i < s->n; i++) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                s->ids[i] = (uint32_t)(rng % x->cfg.vocab_size);
            }
        }
    }
    if (!rc && o->text_file) {
        char *buf;
        size_t len;
        rc = read_all(o->text_file, &buf, &len);
        if (!rc) {
            rc = encode(x, tok, o->text_file, buf, len, &x->text, &x->n_text);
            free(buf);
        }
        uint32_t cap = x->cfg.max_position_embeddings < TEXT_MAX ? x->cfg.max_position_embeddings : TEXT_MAX;
        if (!rc && x->n_text < 2)
            rc = die("%s: the text has %u token(s); scoring needs at least 2", o->text_file, x->n_text);
        if (!rc && x->n_text > cap) {
            fprintf(stderr, "%s: note: %s has %u tokens; scoring the first %u\n", prog, o->text_file, x->n_text,
                    cap);
            x->n_text = cap;
        }
    }
    qp_tok_free(tok);
    if (rc)
        return -1;
    /* context: every prompt with its continuation, and the text */
    uint32_t max_pos = x->cfg.max_position_embeddings;
    x->ctx = x->n_text;
    for (uint32_t p = 0; p < x->n_prompts; p++) {
        struct seq *s = &x->prompts[p];
        if (s->n > max_pos)
            return die("prompt %u has %u tokens, past the model's %u positions", p + 1, s->n, max_pos);
        s->gen = max_pos - s->n + 1 < GEN_MAX ? max_pos - s->n + 1 : GEN_MAX;
        uint32_t need = s->n + s->gen - 1;
        if (need > x->ctx)
            x->ctx = need;
    }
    return 0;
}

/* Before any compute: can this process load BPF programs? (a two-instruction
 * socket filter, as qrun checks) */
static int check_bpf_privilege(void)
{
    const struct bpf_insn insns[2] = {
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
        {.code = BPF_JMP | BPF_EXIT},
    };
    int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "qeval_probe", "GPL", insns, 2, NULL);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == EPERM || errno == EACCES)
        return die("loading BPF programs needs root or CAP_BPF + CAP_PERFMON (running as uid %u; "
                   "--backend emu needs neither)", (unsigned)geteuid());
    return 0;
}

/* ---- running a model ----------------------------------------------------------------- */

static void reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static uint64_t peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

struct tracer {
    struct qp_session *s;
    double *buf;                      /* [layer][hidden] of the current position */
    bool on;
};

static void on_layer(void *arg, uint32_t l)
{
    struct tracer *t = arg;
    if (!t->on)
        return;
    const int64_t *h = t->s->b->h;
    double *dst = t->buf + (size_t)l * t->s->hidden;
    for (uint32_t i = 0; i < t->s->hidden; i++)
        dst[i] = ldexp((double)h[i], -QM_RESID_FRAC);
}

static int step(struct qp_session *s, uint32_t tok, uint32_t pos, const char *who)
{
    qp_err err = {{0}};
    if (qp_session_step(s, tok, pos, true, NULL, &err))
        return die("%s: %s", who, err.msg);
    return 0;
}

static uint64_t calls(const struct qp_session *s) { return s->fw ? qp_forward_stats(s->fw)->calls : 0; }

/* Runs the reference (res[0]) or a container (res[i]) over every sequence. */
static int run_model(struct ctx *x, struct result *r)
{
    bool is_ref = r->kind == QP_BACKEND_REF;
    uint32_t vocab = x->cfg.vocab_size, L = x->cfg.num_hidden_layers, H = x->cfg.hidden_size;
    size_t row = (size_t)vocab * sizeof(double);
    qp_err err = {{0}};
    struct qp_session s;
    reset_peak_rss();
    struct qp_session_opts so = {.model = r->path, .backend = r->kind, .ctx = x->ctx, .threads = 2};
    if (qp_session_open(&s, &so, &err))
        return die("%s", err.msg);
    r->load_ms = s.load_ms;
    r->map_bytes = s.b ? s.b->map_bytes : 0;
    r->kv_bytes_per_pos = is_ref ? 2ull * L * x->cfg.num_key_value_heads * x->cfg.head_dim * sizeof(double)
                                 : s.plan.kv_bytes_per_pos;
    double *ref_logits = is_ref ? NULL : malloc(row);
    struct tracer tr = {.s = &s};
    if (x->o->trace) {
        tr.buf = calloc((size_t)L * H, sizeof *tr.buf);
        r->trace_max = calloc(L, sizeof *r->trace_max);
        r->trace_sq = calloc(L, sizeof *r->trace_sq);
        if (!tr.buf || !r->trace_max || !r->trace_sq)
            goto oom;
        if (!is_ref)
            qp_forward_on_layer(s.fw, on_layer, &tr);
    }
    if (!is_ref && !ref_logits)
        goto oom;
    uint32_t gen[GEN_MAX];
    uint64_t at = 0;      /* position index into the reference's logits file */
    for (uint32_t p = 0; p < x->n_prompts; p++) {
        const struct seq *q = &x->prompts[p];
        bool last = p + 1 == x->n_prompts;
        tr.on = last && x->o->trace;
        for (uint32_t pos = 0; pos < q->n; pos++, at++) {
            uint64_t c0 = calls(&s);
            double t0 = now_ms();
            if (step(&s, q->ids[pos], pos, r->path))
                goto fail;
            r->prompt_ms += now_ms() - t0;
            r->prompt_calls += calls(&s) - c0;
            r->prompt_tokens++;
            if (is_ref) {
                if (pwrite(x->ref.fd, s.logits, row, (off_t)(at * row)) != (ssize_t)row) {
                    die("temporary file for the reference's logits: %s", strerror(errno));
                    goto fail;
                }
                if (tr.on)
                    for (uint32_t l = 0; l < L; l++)
                        memcpy(x->ref.hidden + ((size_t)pos * L + l) * H, ref_hidden_after(s.ref, l),
                               H * sizeof(double));
                continue;
            }
            if (pread(x->ref.fd, ref_logits, row, (off_t)(at * row)) != (ssize_t)row) {
                die("temporary file for the reference's logits: %s", strerror(errno));
                goto fail;
            }
            qe_acc_add(&r->acc, ref_logits, s.logits, vocab);
            if (tr.on) {
                for (uint32_t l = 0; l < L; l++) {
                    const double *a = tr.buf + (size_t)l * H, *b = x->ref.hidden + ((size_t)pos * L + l) * H;
                    for (uint32_t i = 0; i < H; i++) {
                        double e = fabs(a[i] - b[i]);
                        r->trace_max[l] = fmax(r->trace_max[l], e);
                        r->trace_sq[l] += e * e;
                    }
                }
                r->trace_n += H;
            }
        }
        tr.on = false;
        /* greedy continuation from the end of the prompt */
        gen[0] = qe_argmax(s.logits, vocab);
        for (uint32_t k = 1; k < q->gen; k++) {
            double t0 = now_ms();
            if (step(&s, gen[k - 1], q->n + k - 1, r->path))
                goto fail;
            r->decode_ms += now_ms() - t0;
            r->decode_steps++;
            gen[k] = qe_argmax(s.logits, vocab);
        }
        if (is_ref)
            memcpy(x->ref.gen[p], gen, q->gen * sizeof *gen);
        else
            r->greedy_prefix_sum += qe_common_prefix(gen, q->gen, x->ref.gen[p], q->gen);
        r->greedy_prompts++;
    }
    /* teacher-forced text */
    for (uint32_t i = 0; i + 1 < x->n_text; i++) {
        if (step(&s, x->text[i], i, r->path))
            goto fail;
        r->text_nll_sum += qe_nll(s.logits, vocab, x->text[i + 1]);
        r->text_tokens++;
    }
    r->peak_rss = peak_rss();
    free(ref_logits);
    free(tr.buf);
    qp_session_close(&s);
    return 0;
oom:
    die("out of memory");
fail:
    free(ref_logits);
    free(tr.buf);
    qp_session_close(&s);
    return -1;
}

/* ---- report -------------------------------------------------------------------------- */

static void fmt_bytes(char *out, size_t n, double b)
{
    if (b < 1024)
        snprintf(out, n, "%.0f B", b);
    else if (b < 1024.0 * 1024)
        snprintf(out, n, "%.1f KiB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024)
        snprintf(out, n, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(out, n, "%.2f GiB", b / (1024.0 * 1024 * 1024));
}

static double per(double a, uint64_t n) { return n ? a / (double)n : 0; }

#define N_ROWS 24
#define CELL 48

static void print_table(struct ctx *x)
{
    int cols = x->o->n_models + 1;
    static const char *rows[N_ROWS];
    char (*cell)[N_ROWS][CELL] = calloc((size_t)cols, sizeof *cell);
    if (!cell)
        return;
    int nr = 0;
#define ROW(label, ...)                                                                                             \
    do {                                                                                                            \
        rows[nr] = label;                                                                                           \
        for (int c = 0; c < cols; c++) {                                                                            \
            const struct result *r = &x->res[c];                                                                    \
            bool ref = c == 0;                                                                                      \
            (void)r;                                                                                                \
            (void)ref;                                                                                              \
            snprintf(cell[c][nr], CELL, __VA_ARGS__);                                                               \
        }                                                                                                           \
        nr++;                                                                                                       \
    } while (0)
#define ROWF(label, body)                                                                                           \
    do {                                                                                                            \
        rows[nr] = label;                                                                                           \
        for (int c = 0; c < cols; c++) {                                                                            \
            const struct result *r = &x->res[c];                                                                    \
            char *out = cell[c][nr];                                                                                \
            if (c == 0)                                                                                             \
                snprintf(out, CELL, "-");                                                                           \
            else {                                                                                                  \
                body;                                                                                               \
            }                                                                                                       \
        }                                                                                                           \
        nr++;                                                                                                       \
    } while (0)
    ROW("backend", "%s", qp_backend_kind_name(r->kind));
    rows[nr] = "file size";
    for (int c = 0; c < cols; c++)
        fmt_bytes(cell[c][nr], CELL, (double)x->res[c].file_bytes);
    nr++;
    rows[nr] = "bytes in BPF maps";
    for (int c = 0; c < cols; c++)
        if (x->res[c].kind == QP_BACKEND_BPF)
            fmt_bytes(cell[c][nr], CELL, (double)x->res[c].map_bytes);
        else
            snprintf(cell[c][nr], CELL, "-");
    nr++;
    ROW("bits per weight", "%.2f", r->bits_per_weight);
    rows[nr] = "KV cache per position";
    for (int c = 0; c < cols; c++)
        fmt_bytes(cell[c][nr], CELL, (double)x->res[c].kv_bytes_per_pos);
    nr++;
    rows[nr] = "peak RSS";
    for (int c = 0; c < cols; c++)
        fmt_bytes(cell[c][nr], CELL, (double)x->res[c].peak_rss);
    nr++;
    ROW("start-up ms", "%.1f", r->load_ms);
    ROW("prompt ms/token", "%.3f", per(r->prompt_ms, r->prompt_tokens));
    ROW("decode ms/token", "%.3f", per(r->decode_ms, r->decode_steps));
    rows[nr] = "kernel calls/token";
    for (int c = 0; c < cols; c++)
        if (c == 0)
            snprintf(cell[c][nr], CELL, "-");
        else
            snprintf(cell[c][nr], CELL, "%.1f", per((double)x->res[c].prompt_calls, x->res[c].prompt_tokens));
    nr++;
    ROW("positions compared", "%" PRIu64, r->prompt_tokens);
    ROWF("logit max abs error", snprintf(out, CELL, "%.3g", r->acc.max_err));
    ROWF("logit RMS error", snprintf(out, CELL, "%.3g", qe_acc_rms(&r->acc)));
    ROWF("KL(ref||model) mean", snprintf(out, CELL, "%.3g", qe_acc_kl_mean(&r->acc)));
    ROWF("KL(ref||model) max", snprintf(out, CELL, "%.3g", r->acc.max_kl));
    ROWF("top-1 agreement", snprintf(out, CELL, "%" PRIu64 "/%" PRIu64 " (%.2f%%)", r->acc.top1,
                                     r->acc.positions, qe_acc_top1_pct(&r->acc)));
    ROWF("top-5 overlap", snprintf(out, CELL, "%.4f", qe_acc_top5(&r->acc)));
    ROWF("greedy common prefix", snprintf(out, CELL, "%.2f of %u", per((double)r->greedy_prefix_sum,
                                                                         r->greedy_prompts),
                                          x->prompts[0].gen));
    if (x->n_text) {
        ROW("text NLL/token", "%.4f", per(r->text_nll_sum, r->text_tokens));
        ROW("text perplexity", "%.4g", exp(per(r->text_nll_sum, r->text_tokens)));
    }
#undef ROW
#undef ROWF
    int w0 = 6;
    for (int i = 0; i < nr; i++)
        if ((int)strlen(rows[i]) > w0)
            w0 = (int)strlen(rows[i]);
    int *w = calloc((size_t)cols, sizeof *w);
    if (!w) {
        free(cell);
        return;
    }
    for (int c = 0; c < cols; c++) {
        w[c] = (int)strlen(x->res[c].label);
        for (int i = 0; i < nr; i++)
            if ((int)strlen(cell[c][i]) > w[c])
                w[c] = (int)strlen(cell[c][i]);
    }
    if (x->o->prompts_file)
        printf("%u prompts from %s, %" PRIu64 " positions", x->n_prompts, x->o->prompts_file,
               x->res[0].prompt_tokens);
    else
        printf("%u random prompts x %u positions (seed %" PRIu64 ")", x->n_prompts, x->o->positions, x->o->seed);
    if (x->n_text)
        printf("; text %s: %u tokens", x->o->text_file, x->n_text);
    printf("\n\n%-*s", w0, "metric");
    for (int c = 0; c < cols; c++)
        printf("  %*s", w[c], x->res[c].label);
    printf("\n");
    for (int i = 0; i < nr; i++) {
        printf("%-*s", w0, rows[i]);
        for (int c = 0; c < cols; c++)
            printf("  %*s", w[c], cell[c][i]);
        printf("\n");
    }
    if (x->o->trace) {
        uint32_t L = x->cfg.num_hidden_layers;
        int tw = 21;
        for (int c = 1; c < cols; c++)
            if ((int)strlen(x->res[c].label) > tw)
                tw = (int)strlen(x->res[c].label);
        printf("\nhidden-state error after each layer (max abs / RMS), last prompt's %u positions\n\n%-6s",
               x->prompts[x->n_prompts - 1].n, "layer");
        for (int c = 1; c < cols; c++)
            printf("  %*s", tw, x->res[c].label);
        printf("\n");
        for (uint32_t l = 0; l < L; l++) {
            printf("%-6u", l);
            for (int c = 1; c < cols; c++) {
                const struct result *r = &x->res[c];
                char b[64];
                snprintf(b, sizeof b, "%.3g / %.3g", r->trace_max[l], sqrt(per(r->trace_sq[l], r->trace_n)));
                printf("  %*s", tw, b);
            }
            printf("\n");
        }
    }
    free(w);
    free(cell);
}

static cJSON *result_json(struct ctx *x, const struct result *r, bool is_ref)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "path", r->path);
    cJSON_AddStringToObject(j, "backend", qp_backend_kind_name(r->kind));
    cJSON_AddNumberToObject(j, "file_bytes", (double)r->file_bytes);
    if (!is_ref)
        cJSON_AddNumberToObject(j, "map_bytes", (double)r->map_bytes);
    cJSON_AddNumberToObject(j, "bits_per_weight", r->bits_per_weight);
    cJSON_AddNumberToObject(j, "kv_bytes_per_pos", (double)r->kv_bytes_per_pos);
    cJSON_AddNumberToObject(j, "peak_rss_bytes", (double)r->peak_rss);
    cJSON_AddNumberToObject(j, "load_ms", r->load_ms);
    cJSON_AddNumberToObject(j, "prompt_ms_per_token", per(r->prompt_ms, r->prompt_tokens));
    cJSON_AddNumberToObject(j, "decode_ms_per_token", per(r->decode_ms, r->decode_steps));
    if (!is_ref)
        cJSON_AddNumberToObject(j, "calls_per_token", per((double)r->prompt_calls, r->prompt_tokens));
    cJSON_AddNumberToObject(j, "positions", (double)r->prompt_tokens);
    if (!is_ref) {
        cJSON_AddNumberToObject(j, "logit_max_abs_err", r->acc.max_err);
        cJSON_AddNumberToObject(j, "logit_rms_err", qe_acc_rms(&r->acc));
        cJSON_AddNumberToObject(j, "kl_mean", qe_acc_kl_mean(&r->acc));
        cJSON_AddNumberToObject(j, "kl_max", r->acc.max_kl);
        cJSON_AddNumberToObject(j, "top1_agree", (double)r->acc.top1);
        cJSON_AddNumberToObject(j, "top1_percent", qe_acc_top1_pct(&r->acc));
        cJSON_AddNumberToObject(j, "top5_overlap", qe_acc_top5(&r->acc));
        cJSON_AddNumberToObject(j, "greedy_prefix_mean", per((double)r->greedy_prefix_sum, r->greedy_prompts));
    }
    if (x->n_text) {
        double nll = per(r->text_nll_sum, r->text_tokens);
        cJSON_AddNumberToObject(j, "text_tokens", (double)r->text_tokens);
        cJSON_AddNumberToObject(j, "text_nll", nll);
        cJSON_AddNumberToObject(j, "text_ppl", exp(nll));
    }
    if (!is_ref && x->o->trace) {
        cJSON *t = cJSON_AddArrayToObject(j, "trace_layers");
        for (uint32_t l = 0; l < x->cfg.num_hidden_layers; l++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "layer", l);
            cJSON_AddNumberToObject(e, "max_abs_err", r->trace_max[l]);
            cJSON_AddNumberToObject(e, "rms_err", sqrt(per(r->trace_sq[l], r->trace_n)));
            cJSON_AddItemToArray(t, e);
        }
    }
    return j;
}

static int print_json(struct ctx *x)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "prompts_source", x->o->prompts_file ? x->o->prompts_file : "random");
    cJSON_AddNumberToObject(j, "prompts", x->n_prompts);
    if (!x->o->prompts_file)
        cJSON_AddNumberToObject(j, "seed", (double)x->o->seed);
    cJSON_AddNumberToObject(j, "positions", (double)x->res[0].prompt_tokens);
    cJSON_AddNumberToObject(j, "greedy_tokens", x->prompts[0].gen);
    if (x->n_text)
        cJSON_AddStringToObject(j, "text", x->o->text_file);
    cJSON_AddItemToObject(j, "reference", result_json(x, &x->res[0], true));
    cJSON *m = cJSON_AddArrayToObject(j, "models");
    for (int i = 1; i <= x->o->n_models; i++)
        cJSON_AddItemToArray(m, result_json(x, &x->res[i], false));
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    if (!s)
        return die("out of memory");
    printf("%s\n", s);
    free(s);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    if (parse_options(&o, argc, argv)) {
        free(o.models);
        return 2;
    }
    struct ctx x = {.o = &o, .ref = {.fd = -1}};
    int rc = 1;
    char path[4096];
    qp_err err = {{0}};
    /* cheap checks first: files, configs, tokens; then the reference, then each container */
    snprintf(path, sizeof path, "%s/config.json", o.ref_dir);
    struct stat st;
    if (stat(o.ref_dir, &st) || !S_ISDIR(st.st_mode)) {
        die("--ref %s: not a folder", o.ref_dir);
        goto out;
    }
    if (need_file(path, "reference config"))
        goto out;
    if (hf_config_load(path, &x.cfg, &err)) {
        die("%s", err.msg);
        goto out;
    }
    for (int i = 0; i < o.n_models; i++)
        if (need_file(o.models[i], "container"))
            goto out;
    if (o.prompts_file && need_file(o.prompts_file, "--prompts"))
        goto out;
    if (o.text_file && need_file(o.text_file, "--text"))
        goto out;
    x.res = calloc((size_t)o.n_models + 1, sizeof *x.res);
    if (!x.res) {
        die("out of memory");
        goto out;
    }
    x.res[0] = (struct result){.path = o.ref_dir, .label = "reference", .kind = QP_BACKEND_REF};
    if (inspect_reference(o.ref_dir, &x.res[0]))
        goto out;
    for (int i = 0; i < o.n_models; i++) {
        struct result *r = &x.res[i + 1];
        *r = (struct result){.path = o.models[i], .label = base_name(o.models[i]), .kind = o.backend};
        if (inspect_container(&x, r))
            goto out;
    }
    if (make_inputs(&x))
        goto out;
    if (o.backend == QP_BACKEND_BPF && check_bpf_privilege())
        goto out;
    /* the reference */
    FILE *tmp = tmpfile();
    if (!tmp) {
        die("cannot create a temporary file for the reference's logits: %s", strerror(errno));
        goto out;
    }
    x.ref.fd = dup(fileno(tmp));
    fclose(tmp);
    x.ref.gen = calloc(x.n_prompts, sizeof *x.ref.gen);
    for (uint32_t p = 0; x.ref.gen && p < x.n_prompts; p++)
        if (!(x.ref.gen[p] = calloc(GEN_MAX, sizeof **x.ref.gen)))
            break;
    if (o.trace)
        x.ref.hidden = malloc((size_t)x.prompts[x.n_prompts - 1].n * x.cfg.num_hidden_layers * x.cfg.hidden_size *
                              sizeof(double));
    if (x.ref.fd < 0 || !x.ref.gen || !x.ref.gen[x.n_prompts - 1] || (o.trace && !x.ref.hidden)) {
        die("out of memory");
        goto out;
    }
    if (run_model(&x, &x.res[0]))
        goto out;
    for (int i = 1; i <= o.n_models; i++)
        if (run_model(&x, &x.res[i]))
            goto out;
    if (o.json)
        rc = print_json(&x);
    else {
        print_table(&x);
        rc = 0;
    }
out:
    if (x.ref.fd >= 0)
        close(x.ref.fd);
    for (uint32_t p = 0; p < x.n_prompts; p++) {
        free(x.prompts[p].ids);
        if (x.ref.gen)
            free(x.ref.gen[p]);
    }
    free(x.prompts);
    free(x.ref.gen);
    free(x.ref.hidden);
    free(x.text);
    for (int i = 0; x.res && i <= o.n_models; i++) {
        free(x.res[i].trace_max);
        free(x.res[i].trace_sq);
    }
    free(x.res);
    free(o.models);
    return rc;
}

#endif /* QEVAL_NO_MAIN */
