/* qeval - how close packed models are to the float64 reference, and what
 * they cost: logit error, KL divergence, top-1 and top-5 agreement,
 * teacher-forced perplexity of a text, greedy continuation agreement,
 * memory, speed and (optionally) the hidden-state error after every layer.
 * Built on include/qpack.h alone.
 *
 *   qeval --ref DIR A.qpk [B.qpk ...] [logits:FILE ...] [--prompts FILE | --prompt-ids FILE]
 *         [--text FILE] [--positions N] [--seed S] [--backend bpf|emu] [--kv-cache int16|int8] [--call-us N]
 *         [--schedule host|kernel] [--json | --csv]
 *         [--trace-layers] [--ref-cache DIR] [--force] [--quiet]
 *
 * Cheap checks come first: the options, the reference folder's config and
 * safetensors headers, each container's header against it, the source
 * files each container records against the reference folder's, the token
 * sequences, BPF privilege. Then the reference (the float64 forward from
 * the Hugging Face folder DIR) runs over every sequence; its logits are
 * kept in an unlinked temporary file, so memory does not grow with the
 * number of positions (with --ref-cache, in a cache file that the next run
 * reads instead). Then each container is opened in turn, runs the same
 * sequences, is compared and closed: one model is loaded at a time.
 * logits:FILE is another program's (llama.cpp's, scripts/compare_llamacpp.sh)
 * float32 logits of the same sequences, compared as a container's are.
 *
 * Exit status: 0 done, 1 error (also when stdout cannot be written), 2 bad
 * usage, 130/143 interrupted, 141 when the reader of stdout went away.
 * Errors are one line on stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_call.h"
#include "cli_kv.h"
#include "cli_num.h"
#include "cli_suggest.h"
#include "stdout_policy.h"
#include "fsafe.h"
#include "progress.h"
#include "qeval.h"
#include "qeval_plot.h"
#include "clock.h"

#define INPUT_MAX (256u << 20) /* bytes of --prompts or --text read at most */

static const char *prog = "qeval";

int qe_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    progress_clear();
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* Nothing is half-written: the cache file is a nameless temporary until it
 * is complete, the logits' temporary file is unlinked, and the kernel
 * releases the BPF objects of a process that ends. */
static void on_signal(int sig)
{
    progress_clear_from_signal();
    fs_out_remove_temps();
    ssize_t w = write(STDERR_FILENO, "qeval: interrupted\n", 19);
    (void)w;
    _exit(128 + sig);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: qeval --ref DIR|FILE.gguf A.qpk [B.qpk ...] [logits:FILE ...] [options]\n"
            "\n"
            "Compares each container with the float64 reference computed from the Hugging Face\n"
            "checkpoint folder DIR (or a GGUF file), on the same token sequences, and measures its\n"
            "memory and speed.\n"
            "\n"
            "  --ref DIR           the original checkpoint (config.json + safetensors), or a GGUF\n"
            "                      file (one, or the first of a split: its values as its types\n"
            "                      decode them); required.\n"
            "                      Each container must have been packed from these very files:\n"
            "                      the source files its provenance records (name, size, XXH3)\n"
            "                      are checked against DIR's before any work, and its config\n"
            "                      against DIR's (rope_theta and rms_norm_eps to float32's\n"
            "                      precision, as a GGUF stores them)\n"
            "  --force             run even when the source files differ (a warning instead of\n"
            "                      an error; a container packed from a GGUF of DIR needs it)\n"
            "  logits:FILE         in place of a container: another program's logits of the same\n"
            "                      sequences, float32 in host byte order, [position][vocabulary],\n"
            "                      every position of every prompt in order; compared with the\n"
            "                      reference as a container is (no text score, no continuation,\n"
            "                      no size or speed); best with --prompt-ids\n"
            "  --prompts FILE      one prompt per line (empty lines skipped), tokenized with\n"
            "                      DIR/tokenizer.json, else the first container's tokenizer.\n"
            "                      Default: %u seeded random token sequences of --positions tokens\n"
            "  --prompt-ids FILE   instead of --prompts: one prompt per line as token ids\n"
            "                      separated by blanks (what `qrun tokenize` prints)\n"
            "  --positions N       length of the random prompts (default 32)\n"
            "  --seed S            seed of the random prompts (default 1)\n"
            "  --text FILE         also score FILE teacher-forced: NLL per token and perplexity,\n"
            "                      reference and containers, in windows of the model's positions\n"
            "                      (at most %u), one after the other, each from its own start\n"
            "                      (its first token is context); the report says how many\n"
            "                      tokens and windows were scored\n"
            "  --text-windows N    score the first N windows of --text (default 1; all: the\n"
            "                      whole text)\n"
            "  --backend B         bpf (default; needs root or CAP_BPF + CAP_PERFMON) or emu\n"
            "  --kv-cache T        the containers' KV cache: int16 (default) or int8 (the\n"
            "                      reference keeps float64)\n"
            "  --call-us N         how long a kernel call may hold a core, in microseconds\n"
            "                      (default 50; none: bounded by work alone; the same bits)\n"
            "  --schedule S        the containers' steps: host (default) or kernel, chains of\n"
            "                      BPF work items (the same bits; not with --trace-layers)\n"
            "  --json              print one JSON object instead of the table\n"
            "  --csv               print CSV instead: a header line, then one line per model\n"
            "                      (the reference first), the keys of --json (not the trace)\n"
            "  --plot FILE.svg     also draw mean KL (log scale) against bits per weight, a\n"
            "                      labelled point per container, as a self-contained SVG\n"
            "  --trace-layers      also the hidden-state error after every layer (max abs and RMS\n"
            "                      over the last prompt's positions)\n"
            "  --ref-cache DIR     keep the reference's logits (and continuations, text score,\n"
            "                      trace) in DIR, in a file named by a hash of the checkpoint's\n"
            "                      files and of the token sequences: a later run on the same\n"
            "                      checkpoint and sequences reads them instead of computing\n"
            "                      them (the reference's timings then show as cached)\n"
            "  -q, --quiet         no progress line (on a terminal, stderr shows the model,\n"
            "                      the phase and the positions done)\n"
            "  --version           the version and the git commit qeval was built from\n"
            "  -h, --help          this text\n"
            "\n"
            "Per model, over every position of every prompt: logit max abs, mean abs and RMS\n"
            "error, mean and max KL(ref || model), top-1 agreement, top-5 overlap, the logits'\n"
            "spread (their SD; the reference's too) and the RMS error in units of the reference's\n"
            "spread, which compares models whose logits span different ranges; from the end\n"
            "of each prompt, %u greedy tokens from model and reference and the mean length of\n"
            "their common prefix;\n"
            "file size, bytes in BPF maps, bits per weight, KV cache bytes per position, peak RSS\n"
            "(the process's, reset before each model); start-up, prompt and decode ms per token,\n"
            "kernel calls per token. Sizes in SI units (1 MB = 10^6 bytes). One model is loaded\n"
            "at a time.\n"
            "Exit status: 0 done, 1 error (also when standard output cannot be written), 2 bad\n"
            "usage, 130/143 interrupted, 141 when the reader of standard output went away (| head).\n",
            N_RANDOM_PROMPTS, TEXT_MAX, GEN_MAX);
}

static bool is_logits_file(const char *model) { return !strncmp(model, "logits:", 7); }

static int parse_options(struct options *o, int argc, char **argv)
{
    enum { O_REF = 256, O_PROMPTS, O_TEXT, O_POSITIONS, O_SEED, O_BACKEND, O_JSON, O_CSV, O_TRACE, O_CACHE, O_FORCE,
           O_VERSION, O_PLOT, O_KV_CACHE, O_CALL_US, O_TEXT_WINDOWS, O_SCHEDULE, O_PROMPT_IDS };
    static const struct option longs[] = {
        {"ref", required_argument, 0, O_REF}, {"prompts", required_argument, 0, O_PROMPTS},
        {"text", required_argument, 0, O_TEXT}, {"positions", required_argument, 0, O_POSITIONS},
        {"seed", required_argument, 0, O_SEED}, {"backend", required_argument, 0, O_BACKEND},
        {"json", no_argument, 0, O_JSON}, {"csv", no_argument, 0, O_CSV},
        {"trace-layers", no_argument, 0, O_TRACE}, {"ref-cache", required_argument, 0, O_CACHE},
        {"force", no_argument, 0, O_FORCE}, {"quiet", no_argument, 0, 'q'},
        {"version", no_argument, 0, O_VERSION}, {"plot", required_argument, 0, O_PLOT},
        {"kv-cache", required_argument, 0, O_KV_CACHE}, {"call-us", required_argument, 0, O_CALL_US},
        {"text-windows", required_argument, 0, O_TEXT_WINDOWS}, {"schedule", required_argument, 0, O_SCHEDULE},
        {"prompt-ids", required_argument, 0, O_PROMPT_IDS},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (struct options){.positions = 32, .text_windows = 1, .seed = 1, .backend = QPACK_BACKEND_BPF};
    o->models = calloc((size_t)argc, sizeof *o->models);
    if (!o->models)
        return qe_die("out of memory"), -1;
    int c;
    uint64_t v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":qh", longs, NULL)) != -1) {
        switch (c) {
        case O_REF: o->ref_dir = optarg; break;
        case O_PROMPTS: o->prompts_file = optarg; break;
        case O_PROMPT_IDS: o->prompt_ids_file = optarg; break;
        case O_TEXT: o->text_file = optarg; break;
        case O_TEXT_WINDOWS:
            if (!strcmp(optarg, "all"))
                o->text_windows = UINT32_MAX;
            else if (cli_uint(prog, "--text-windows", optarg, 1, UINT32_MAX, &v))
                return -1;
            else
                o->text_windows = (uint32_t)v;
            break;
        case O_POSITIONS:
            if (cli_uint(prog, "--positions", optarg, 1, 1u << 20, &v))
                return -1;
            o->positions = (uint32_t)v;
            break;
        case O_SEED:
            if (cli_uint(prog, "--seed", optarg, 0, UINT64_MAX, &o->seed))
                return -1;
            break;
        case O_BACKEND:
            if (!strcmp(optarg, "bpf"))
                o->backend = QPACK_BACKEND_BPF;
            else if (!strcmp(optarg, "emu"))
                o->backend = QPACK_BACKEND_EMU;
            else {
                fprintf(stderr, "%s: unknown backend '%s' (bpf, emu)\n", prog, optarg);
                return -1;
            }
            break;
        case O_KV_CACHE:
            if (cli_kv_cache(prog, optarg, &o->kv_cache))
                return -1;
            break;
        case O_CALL_US:
            if (cli_call_us(prog, optarg, &o->call_us))
                return -1;
            break;
        case O_SCHEDULE:
            if (cli_schedule(prog, optarg, &o->schedule))
                return -1;
            break;
        case O_JSON: o->json = true; break;
        case O_CSV: o->csv = true; break;
        case O_TRACE: o->trace = true; break;
        case O_CACHE: o->ref_cache = optarg; break;
        case O_FORCE: o->force = true; break;
        case 'q': o->quiet = true; break;
        case O_PLOT: o->plot_file = optarg; break;
        case O_VERSION: exit(qp_print_version(prog));
        case 'h': usage(stdout); exit(qp_stdout_finish(prog, 0));
        case ':':
            fprintf(stderr, "%s: option '%s' needs a value (try qeval --help)\n", prog, argv[optind - 1]);
            return -1;
        default:
            qp_cli_unknown_option(prog, "qeval", argv[optind - 1], optopt, longs);
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
    if (o->json && o->csv) {
        fprintf(stderr, "%s: give --json or --csv, not both\n", prog);
        return -1;
    }
    if (o->prompts_file && o->prompt_ids_file) {
        fprintf(stderr, "%s: give --prompts or --prompt-ids, not both\n", prog);
        return -1;
    }
    for (int i = 0; i < o->n_models; i++)
        if (is_logits_file(o->models[i]) && (o->text_file || o->trace)) {
            fprintf(stderr, "%s: %s: a logits file has no %s to compare; leave it out\n", prog, o->models[i],
                    o->text_file ? "--text score" : "hidden states (--trace-layers)");
            return -1;
        }
    return 0;
}

/* ---- inputs ------------------------------------------------------------------------ */

static int need_file(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st))
        return qe_die("%s %s: %s", what, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return qe_die("%s %s: not a regular file", what, path);
    return 0;
}

/* --ref-cache DIR: a folder this process can write (created when only its
 * last part is missing), before any work */
static int check_cache_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) && errno == ENOENT && mkdir(dir, 0755))
        return qe_die("--ref-cache %s: cannot create it: %s", dir, strerror(errno));
    if (stat(dir, &st))
        return qe_die("--ref-cache %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return qe_die("--ref-cache %s: not a folder", dir);
    if (access(dir, W_OK | X_OK))
        return qe_die("--ref-cache %s: not writable: %s", dir, strerror(errno));
    return 0;
}

/* A FIFO or device is refused at once, not waited on (fsafe.h). */
int qe_read_all(const char *path, char **out, size_t *len)
{
    qp_err err;
    return fs_read_input(path, INPUT_MAX, out, len, &err) ? qe_die("%s", err.msg) : 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

/* Two real config values the same as their storage can tell: a GGUF keeps
 * rope_theta and rms_norm_eps as float32 (1e-6 comes back as
 * 9.9999999747524271e-07), config.json and a container as double. */
static bool same_real(double a, double b)
{
    return a == b || (float)a == (float)b;
}

/* A container's header against the reference's config. */
static int inspect_container(struct ctx *x, struct result *r)
{
    qpack_error err;
    if (qpack_model_inspect(r->path, x->o->backend, &r->info, &err))
        return qe_die("%s", err.message);
    const qpack_model_info *c = &r->info, *h = x->cfg;
    char what[128] = "";
#define DIFF_WHEN(name, a, b, differ)                                                                               \
    if (!what[0] && (differ))                                                                                       \
    snprintf(what, sizeof what, "%s %.17g vs %.17g", name, (double)(a), (double)(b))
#define DIFF(name, a, b) DIFF_WHEN(name, a, b, (a) != (b))
    DIFF("hidden_size", c->hidden, h->hidden);
    DIFF("intermediate_size", c->intermediate, h->intermediate);
    DIFF("num_hidden_layers", c->n_layers, h->n_layers);
    DIFF("num_attention_heads", c->n_heads, h->n_heads);
    DIFF("num_key_value_heads", c->n_kv_heads, h->n_kv_heads);
    DIFF("head_dim", c->head_dim, h->head_dim);
    DIFF("vocab_size", c->vocab, h->vocab);
    DIFF("max_position_embeddings", c->max_positions, h->max_positions);
    DIFF_WHEN("rope_theta", c->rope_theta, h->rope_theta, !same_real(c->rope_theta, h->rope_theta));
    DIFF_WHEN("rms_norm_eps", c->rms_eps, h->rms_eps, !same_real(c->rms_eps, h->rms_eps));
    DIFF("tie_word_embeddings", c->tied, h->tied);
#undef DIFF
#undef DIFF_WHEN
    if (what[0])
        return qe_die("%s: config differs from the reference %s: %s (container vs reference)", r->path,
                   x->o->ref_dir, what);
    return 0;
}

/* The source files a container records against the reference folder's:
 * the same checkpoint, or (--force) a warning. */
static int check_sources(struct ctx *x, const struct result *r)
{
    qpack_error err;
    qpack_source_file *rec;
    size_t n;
    if (qpack_container_sources(r->path, &rec, &n, &err))
        return qe_die("%s", err.message);
    char why[600] = "";
    if (!n)
        snprintf(why, sizeof why, "%s records no source files: it cannot be checked against %s", r->path,
                 x->o->ref_dir);
    for (size_t i = 0; i < n && !why[0]; i++) {
        const qpack_source_file *have = NULL;
        for (size_t k = 0; k < x->n_sources; k++)
            if (!strcmp(x->sources[k].name, rec[i].name))
                have = &x->sources[k];
        if (!have)
            snprintf(why, sizeof why, "%s was packed from a %s that %s lacks", r->path, rec[i].name, x->o->ref_dir);
        else if (have->size != rec[i].size || have->xxh3 != rec[i].xxh3)
            snprintf(why, sizeof why,
                     "%s was packed from another %s than %s's (recorded %" PRIu64 " bytes, xxh3 %016" PRIx64
                     "; found %" PRIu64 " bytes, xxh3 %016" PRIx64 ")",
                     r->path, rec[i].name, x->o->ref_dir, rec[i].size, rec[i].xxh3, have->size, have->xxh3);
    }
    free(rec);
    if (!why[0])
        return 0;
    if (!x->o->force)
        return qe_die("%s (--force compares them anyway)", why);
    progress_clear();
    fprintf(stderr, "%s: warning: %s\n", prog, why);
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

/* what scoring one prompt's positions needs */
struct scorer {
    struct ctx *x;
    struct result *r;
    int index;                  /* of the model: 0 the reference */
    uint32_t prompt;
    double *ref_logits;         /* containers: the reference's row */
    const double *hidden;       /* --trace-layers: [layer][hidden] of this position */
    uint64_t at;                /* the prompt's first row in the reference's logits */
    int failed;                 /* errno of a failed read or write */
};

static void show_progress(const struct scorer *sc, const char *phase, size_t done, size_t total)
{
    const struct ctx *x = sc->x;
    progress_show(false, "[%d/%d] %s: %s %u of %u, position %zu of %zu", sc->index + 1, x->o->n_models + 1,
                  sc->r->label, phase, sc->prompt + 1, x->n_prompts, done, total);
}

static void compare_hidden(struct scorer *sc, uint32_t pos)
{
    const qpack_model_info *c = sc->x->cfg;
    uint32_t L = c->n_layers, H = c->hidden;
    struct result *r = sc->r;
    for (uint32_t l = 0; l < L; l++) {
        const double *a = sc->hidden + (size_t)l * H, *b = sc->x->ref.hidden + ((size_t)pos * L + l) * H;
        for (uint32_t i = 0; i < H; i++) {
            double e = fabs(a[i] - b[i]);
            r->trace_max[l] = fmax(r->trace_max[l], e);
            r->trace_sq[l] += e * e;
        }
    }
    r->trace_n += H;
}

/* The reference keeps position pos's logits (and hidden states when
 * traced); a container is scored against them. */
static int score_position(void *arg, size_t pos, const double *logits)
{
    struct scorer *sc = arg;
    struct ctx *x = sc->x;
    const qpack_model_info *c = x->cfg;
    size_t row = (size_t)c->vocab * sizeof(double);
    off_t off = x->ref.rows_off + (off_t)((sc->at + pos) * row);
    show_progress(sc, "prompt", pos + 1, x->prompts[sc->prompt].n);
    if (sc->index == 0) {
        if (pwrite(x->ref.fd, logits, row, off) != (ssize_t)row)
            return sc->failed = errno ? errno : EIO;
        if (sc->hidden)
            memcpy(x->ref.hidden + (size_t)pos * c->n_layers * c->hidden, sc->hidden,
                   (size_t)c->n_layers * c->hidden * sizeof(double));
        return 0;
    }
    if (pread(x->ref.fd, sc->ref_logits, row, off) != (ssize_t)row)
        return sc->failed = errno ? errno : EIO;
    qe_acc_add(&sc->r->acc, sc->ref_logits, logits, c->vocab);
    if (sc->hidden)
        compare_hidden(sc, (uint32_t)pos);
    return 0;
}

struct text_scorer {
    struct ctx *x;
    struct result *r;
    uint32_t start;               /* the window's first token in the text */
};

/* --text: the NLL of the token after position pos of the window */
static int score_text(void *arg, size_t pos, const double *logits)
{
    struct text_scorer *t = arg;
    t->r->text_nll_sum += qe_nll(logits, t->x->cfg->vocab, (uint32_t)t->x->text[t->start + pos + 1]);
    t->r->text_tokens++;
    progress_show(false, "%s: text, token %" PRIu64 " of %u", t->r->label, t->r->text_tokens,
                  t->x->n_text - t->x->n_text_windows);
    return 0;
}

static int feed_failed(struct result *r, const struct scorer *sc, const qpack_error *err)
{
    if (sc && sc->failed)
        return qe_die("temporary file for the reference's logits: %s", strerror(sc->failed));
    return qe_die("%s: %s", r->path, err->message);
}

/* the traced prompt one position at a time: its hidden states after each layer */
static int run_traced(qpack_session *s, const struct seq *q, struct scorer *sc, double *hidden, qpack_error *err)
{
    sc->hidden = hidden;
    for (uint32_t pos = 0; pos < q->n; pos++) {
        if (qpack_feed_hidden(s, q->ids[pos], hidden, err))
            return -1;
        if (score_position(sc, pos, qpack_logits(s)))
            return -1;
    }
    sc->hidden = NULL;
    return 0;
}

/* the greedy continuation from the end of the prompt */
static int run_greedy(qpack_session *s, const struct seq *q, struct result *r, int32_t *gen, qpack_error *err)
{
    gen[0] = qpack_argmax(s);
    for (uint32_t k = 1; k < q->gen; k++) {
        double t0 = qp_now_ms();
        if (qpack_feed(s, &gen[k - 1], 1, err))
            return -1;
        r->decode_ms += qp_now_ms() - t0;
        r->decode_steps++;
        gen[k] = qpack_argmax(s);
    }
    return 0;
}

static int run_prompts(struct ctx *x, struct result *r, int index, qpack_session *s, double *hidden)
{
    uint32_t vocab = x->cfg->vocab;
    double *ref_logits = index ? malloc((size_t)vocab * sizeof *ref_logits) : NULL;
    if (index && !ref_logits)
        return qe_die("out of memory");
    int32_t gen[GEN_MAX];
    uint64_t at = 0;
    qpack_error err;
    int rc = 0;
    for (uint32_t p = 0; !rc && p < x->n_prompts; p++) {
        const struct seq *q = &x->prompts[p];
        bool traced = x->o->trace && p + 1 == x->n_prompts;
        struct scorer sc = {x, r, index, p, ref_logits, NULL, at, 0};
        qpack_session_stats before, after;
        qpack_session_get_stats(s, &before);
        double t0 = qp_now_ms();
        rc = qpack_session_rewind(s, 0, &err);
        if (!rc)
            rc = traced ? run_traced(s, q, &sc, hidden, &err) : qpack_feed_each(s, q->ids, q->n, score_position, &sc, &err);
        if (rc) {
            feed_failed(r, &sc, &err);
            break;
        }
        qpack_session_get_stats(s, &after);
        r->prompt_ms += qp_now_ms() - t0;
        r->prompt_calls += after.calls - before.calls;
        r->prompt_tokens += q->n;
        at += q->n;
        show_progress(&sc, "greedy continuation of prompt", q->n, q->n);
        if ((rc = run_greedy(s, q, r, gen, &err))) {
            feed_failed(r, NULL, &err);
            break;
        }
        if (index == 0)
            memcpy(x->ref.gen[p], gen, q->gen * sizeof *gen);
        else
            r->greedy_prefix_sum += qe_common_prefix((const uint32_t *)gen, q->gen, (const uint32_t *)x->ref.gen[p],
                                                     q->gen);
        r->greedy_prompts++;
    }
    free(ref_logits);
    return rc;
}

/* teacher-forced text, in blocks, window by window */
static int run_text(struct ctx *x, struct result *r, qpack_session *s)
{
    qpack_error err;
    struct text_scorer t = {x, r, 0};
    for (; t.start + 1 < x->n_text; t.start += x->text_window) {
        uint32_t n = x->n_text - t.start < x->text_window ? x->n_text - t.start : x->text_window;
        if (qpack_session_rewind(s, 0, &err) || qpack_feed_each(s, x->text + t.start, n - 1, score_text, &t, &err))
            return feed_failed(r, NULL, &err);
    }
    return 0;
}

struct load_line {
    const struct ctx *x;
    const struct result *r;
    int index;
};

static void on_load_progress(void *user, qpack_load_phase phase, uint64_t done, uint64_t total)
{
    const struct load_line *l = user;
    static const char *const names[] = {"checksums", "maps and programs", "weights"};
    progress_show(done == 0 || done == total, "[%d/%d] %s: loading: %s %.0f%%", l->index + 1, l->x->o->n_models + 1,
                  l->r->label, names[phase], total ? 100.0 * (double)done / (double)total : 100.0);
}

static int open_model(struct ctx *x, struct result *r, int index, qpack_model **m, qpack_session **s)
{
    qpack_model_params mp = qpack_model_default_params();
    struct load_line line = {x, r, index};
    mp.backend = index ? x->o->backend : QPACK_BACKEND_REF;
    mp.kv_cache = index ? x->o->kv_cache : QPACK_KV_INT16;
    mp.call_us = x->o->call_us;
    mp.schedule = index ? x->o->schedule : QPACK_SCHEDULE_HOST;
    mp.ctx = x->ctx;
    mp.skip_tokenizer = true;
    mp.progress = on_load_progress;
    mp.progress_user = &line;
    qpack_error err;
    double t0 = qp_now_ms();
    if (!index)
        progress_show(true, "[1/%d] %s: mapping the checkpoint", x->o->n_models + 1, r->label);
    if (qpack_model_open(m, r->path, &mp, &err) || qpack_session_new(s, *m, &err))
        return qe_die("%s", err.message);
    r->load_ms = qp_now_ms() - t0;
    const qpack_model_info *i = qpack_model_get_info(*m);
    r->map_bytes = i->map_bytes;
    r->info.kv_cache = i->kv_cache;
    r->info.kv_bytes_per_position = i->kv_bytes_per_position;
    return 0;
}

/* logits:FILE: its rows, widened to double, against the reference's */
static int compare_logits_file(struct ctx *x, struct result *r)
{
    uint32_t vocab = x->cfg->vocab;
    size_t row = (size_t)vocab * sizeof(double);
    float *f = malloc(vocab * sizeof *f);
    double *ours = malloc(row), *ref = malloc(row);
    qp_err err;
    int fd = fs_open_input(r->path, NULL, &err), rc = 0;
    if (fd < 0)
        rc = qe_die("logits file %s", err.msg);
    else if (!f || !ours || !ref)
        rc = qe_die("out of memory");
    uint64_t at = 0;
    for (uint32_t p = 0; !rc && p < x->n_prompts; p++) {
        for (uint32_t pos = 0; !rc && pos < x->prompts[p].n; pos++, at++) {
            ssize_t got = pread(fd, f, vocab * sizeof *f, (off_t)(at * vocab * sizeof *f));
            if (got != (ssize_t)(vocab * sizeof *f))
                rc = qe_die("logits file %s: %s", r->path, got < 0 ? strerror(errno) : "shorter than when checked");
            else if (pread(x->ref.fd, ref, row, x->ref.rows_off + (off_t)(at * row)) != (ssize_t)row)
                rc = qe_die("temporary file for the reference's logits: %s", strerror(errno ? errno : EIO));
            for (uint32_t i = 0; !rc && i < vocab; i++)
                ours[i] = f[i];
            if (!rc)
                qe_acc_add(&r->acc, ref, ours, vocab);
        }
        r->prompt_tokens += x->prompts[p].n;
    }
    if (fd >= 0)
        close(fd);
    free(f);
    free(ours);
    free(ref);
    return rc;
}

/* Runs the reference (index 0) or a container over every sequence. */
static int run_model(struct ctx *x, struct result *r, int index)
{
    if (r->logits_file)
        return compare_logits_file(x, r);
    const qpack_model_info *c = x->cfg;
    qpack_model *m = NULL;
    qpack_session *s = NULL;
    double *hidden = NULL;
    reset_peak_rss();
    int rc = open_model(x, r, index, &m, &s);
    if (!rc && x->o->trace) {
        hidden = calloc((size_t)c->n_layers * c->hidden, sizeof *hidden);
        r->trace_max = calloc(c->n_layers, sizeof *r->trace_max);
        r->trace_sq = calloc(c->n_layers, sizeof *r->trace_sq);
        if (!hidden || !r->trace_max || !r->trace_sq)
            rc = qe_die("out of memory");
    }
    if (!rc)
        rc = run_prompts(x, r, index, s, hidden);
    if (!rc)
        rc = run_text(x, r, s);
    r->peak_rss = peak_rss();
    free(hidden);
    qpack_session_free(s);
    qpack_model_free(m);
    progress_clear();
    return rc;
}

/* ---- main ------------------------------------------------------------------------------ */

/* Every file qeval reads, which --plot must not replace. */
static const char **input_paths(const struct options *o)
{
    const char **in = calloc((size_t)o->n_models + 5, sizeof *in);
    int n = 0;
    if (!in)
        return NULL;
    in[n++] = o->ref_dir;
    for (int i = 0; i < o->n_models; i++)
        in[n++] = is_logits_file(o->models[i]) ? o->models[i] + 7 : o->models[i];
    if (o->prompts_file)
        in[n++] = o->prompts_file;
    if (o->prompt_ids_file)
        in[n++] = o->prompt_ids_file;
    if (o->text_file)
        in[n++] = o->text_file;
    return in;
}

/* --plot: checked before the work (check) or written after it. */
static int plot(const struct ctx *x, bool check)
{
    const char **in = input_paths(x->o);
    struct qe_point *pts = calloc((size_t)x->o->n_models, sizeof *pts);
    qp_err err = {{0}};
    int rc = 0;
    if (!in || !pts)
        rc = qe_die("out of memory");
    else if (check)
        rc = fs_out_check(x->o->plot_file, in, &err) ? qe_die("--plot %s", err.msg) : 0;
    else {
        int n = 0;          /* a logits file has no bits per weight */
        for (int i = 0; i < x->o->n_models; i++) {
            const struct result *r = &x->res[i + 1];
            if (!r->logits_file)
                pts[n++] = (struct qe_point){r->label, r->info.bits_per_weight, qe_acc_kl_mean(&r->acc)};
        }
        size_t len;
        char *svg = qe_plot_svg(pts, n, "qeval: mean KL against bits per weight", &len);
        if (!svg)
            rc = qe_die("out of memory");
        else if (fs_write_file(x->o->plot_file, svg, len, in, &err))
            rc = qe_die("--plot %s", err.msg);
        free(svg);
    }
    free(in);
    free(pts);
    return rc;
}

/* A logits file holds a float32 row for every position of every prompt. */
static int check_logits_size(const struct ctx *x, const struct result *r)
{
    uint64_t positions = 0;
    for (uint32_t p = 0; p < x->n_prompts; p++)
        positions += x->prompts[p].n;
    uint64_t want = positions * x->cfg->vocab * sizeof(float);
    struct stat st;
    if (stat(r->path, &st))
        return qe_die("logits file %s: %s", r->path, strerror(errno));
    if ((uint64_t)st.st_size != want)
        return qe_die("logits file %s: %" PRIu64 " bytes, not the %" PRIu64 " of %" PRIu64
                   " positions x %u logits x 4 bytes (float32)", r->path, (uint64_t)st.st_size, want, positions,
                   x->cfg->vocab);
    return 0;
}

/* Everything checkable before the reference runs. */
static int check_inputs(struct ctx *x)
{
    struct options *o = x->o;
    struct stat st;
    qpack_error err;
    size_t len = strlen(o->ref_dir);
    bool gguf = len > 5 && !strcmp(o->ref_dir + len - 5, ".gguf");
    if (stat(o->ref_dir, &st))
        return qe_die("--ref %s: %s", o->ref_dir, strerror(errno));
    if (gguf ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode))
        return qe_die("--ref %s: not a checkpoint folder nor a .gguf file", o->ref_dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->ref_dir);
    if (!gguf && need_file(path, "reference config"))
        return -1;
    bool all_pinned = true;     /* loaded models (pin:NAME) and logits files need no privilege */
    for (int i = 0; i < o->n_models; i++) {
        bool pinned = !strncmp(o->models[i], "pin:", 4), logits = is_logits_file(o->models[i]);
        all_pinned &= pinned || logits;
        if (!pinned && need_file(logits ? o->models[i] + 7 : o->models[i], logits ? "logits file" : "container"))
            return -1;
    }
    if ((o->prompts_file && need_file(o->prompts_file, "--prompts")) ||
        (o->prompt_ids_file && need_file(o->prompt_ids_file, "--prompt-ids")) ||
        (o->text_file && need_file(o->text_file, "--text")) || (o->ref_cache && check_cache_dir(o->ref_cache)) ||
        (o->plot_file && plot(x, true)))
        return -1;
    x->res = calloc((size_t)o->n_models + 1, sizeof *x->res);
    if (!x->res)
        return qe_die("out of memory");
    x->res[0] = (struct result){.path = o->ref_dir, .label = "reference", .backend = "ref"};
    if (qpack_model_inspect(o->ref_dir, QPACK_BACKEND_REF, &x->res[0].info, &err))
        return qe_die("%s", err.message);
    x->cfg = &x->res[0].info;
    for (int i = 0; i < o->n_models; i++) {
        struct result *r = &x->res[i + 1];
        if (is_logits_file(o->models[i])) {
            *r = (struct result){.path = o->models[i] + 7, .label = base_name(o->models[i] + 7), .backend = "file",
                                 .logits_file = true};
            continue;
        }
        *r = (struct result){.path = o->models[i], .label = base_name(o->models[i]),
                             .backend = o->backend == QPACK_BACKEND_BPF ? "bpf" : "emu"};
        if (inspect_container(x, r))
            return -1;
    }
    progress_show(true, "hashing the checkpoint's files");
    if (qpack_checkpoint_sources(o->ref_dir, &x->sources, &x->n_sources, &err))
        return qe_die("%s", err.message);
    for (int i = 0; i < o->n_models; i++)
        if (!x->res[i + 1].logits_file && check_sources(x, &x->res[i + 1]))
            return -1;
    progress_clear();
    if (qe_make_inputs(x))
        return -1;
    for (int i = 0; i < o->n_models; i++)
        if (x->res[i + 1].logits_file && check_logits_size(x, &x->res[i + 1]))
            return -1;
    if (o->backend == QPACK_BACKEND_BPF && !all_pinned && !qpack_bpf_permitted())
        return qe_die("loading BPF programs needs root or CAP_BPF + CAP_PERFMON (running as uid %u; "
                   "--backend emu needs neither)", (unsigned)geteuid());
    return 0;
}

/* Room for the reference's results: the logits' temporary file, the
 * continuations, the traced hidden states. */
static int make_ref_buffers(struct ctx *x)
{
    FILE *tmp = tmpfile();
    if (!tmp)
        return qe_die("cannot create a temporary file for the reference's logits: %s", strerror(errno));
    x->ref.fd = dup(fileno(tmp));
    fclose(tmp);
    x->ref.gen = calloc(x->n_prompts, sizeof *x->ref.gen);
    for (uint32_t p = 0; x->ref.gen && p < x->n_prompts; p++)
        if (!(x->ref.gen[p] = calloc(GEN_MAX, sizeof **x->ref.gen)))
            break;
    if (x->o->trace)
        x->ref.hidden = malloc((size_t)x->prompts[x->n_prompts - 1].n * x->cfg->n_layers * x->cfg->hidden *
                               sizeof(double));
    if (x->ref.fd < 0 || !x->ref.gen || !x->ref.gen[x->n_prompts - 1] || (x->o->trace && !x->ref.hidden))
        return qe_die("out of memory");
    return 0;
}

/* The reference's results: from --ref-cache, or computed (and kept there). */
static int reference(struct ctx *x)
{
    if (make_ref_buffers(x))
        return -1;
    int found = x->o->ref_cache ? qe_cache_load(x) : 0;
    if (found)
        return found < 0 ? -1 : 0;
    if (run_model(x, &x->res[0], 0))
        return -1;
    return x->o->ref_cache ? qe_cache_store(x) : 0;
}

static void release(struct ctx *x)
{
    if (x->ref.fd >= 0)
        close(x->ref.fd);
    for (uint32_t p = 0; p < x->n_prompts; p++) {
        free(x->prompts[p].ids);
        if (x->ref.gen)
            free(x->ref.gen[p]);
    }
    free(x->prompts);
    free(x->ref.gen);
    free(x->ref.hidden);
    free(x->text);
    free(x->sources);
    for (int i = 0; x->res && i <= x->o->n_models; i++) {
        free(x->res[i].trace_max);
        free(x->res[i].trace_sq);
    }
    free(x->res);
    free(x->o->models);
}

int main(int argc, char **argv)
{
    qp_stdout_init();
    struct options o;
    if (parse_options(&o, argc, argv)) {
        free(o.models);
        return 2;
    }
    progress_init(prog, !o.quiet);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct ctx x = {.o = &o, .ref = {.fd = -1}};
    int rc = check_inputs(&x) || reference(&x);
    for (int i = 1; !rc && i <= o.n_models; i++)
        rc = run_model(&x, &x.res[i], i);
    if (!rc)
        rc = o.json ? qe_print_json(&x) : o.csv ? qe_print_csv(&x) : qe_print_table(&x);
    if (!rc && o.plot_file)
        rc = plot(&x, false);
    release(&x);
    return qp_stdout_finish(prog, rc ? 1 : 0);
}
