/* qrun - runs a packed Qwen3 model's whole forward pass in eBPF.
 *
 *   qrun -m MODEL.qpk -p TEXT -n N        generate, streaming text
 *   qrun -m MODEL.qpk --ids "9707 11" ... prompt as token ids
 *   qrun -m MODEL.qpk --chat              interactive chat, one user turn per stdin line
 *   qrun tokenize | detokenize ...        the tokenizer alone
 *
 * Order of checks, so that the cheap ones fail first and nothing is computed
 * for a run that cannot succeed: options (numbers and ranges) and -p's
 * UTF-8, then the model path, then BPF privilege (--backend bpf), then the
 * tokenizer and the prompt's tokens (against an explicit -c), then the
 * session (load), then token ids against the model's vocabulary and the
 * prompt against the context, and only then the forward pass.
 *
 * Exit status: 0 done, 1 error, 2 bad usage, 128 + signal when SIGINT or
 * SIGTERM stopped it (130, 143). Errors are one line on stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "sampler.h"
#include "session.h"
#include "tok_cli.h"
#include "tokenizer.h"
#include "utf8_stream.h"

struct options {
    struct qp_session_opts s;
    const char *prompt, *ids, *tokenizer, *dump_logits;
    int32_t n_new;
    bool print_ids, stats, chat, think, interactive;
    double temperature, top_p;
    uint32_t top_k;
    uint64_t seed;
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static void usage(FILE *out)
{
    fprintf(out,
            "usage: qrun -m MODEL.qpk [-p TEXT | --ids \"ID ...\"] [options]\n"
            "       qrun -m MODEL.qpk --chat [options]       interactive chat on stdin\n"
            "       qrun tokenize|detokenize (--tokenizer FILE | -m MODEL.qpk) [--jsonl]\n"
            "\n"
            "  -m, --model PATH       the .qpk container (a Hugging Face folder with --backend ref)\n"
            "  -p, --prompt TEXT      prompt text (needs the tokenizer the container carries);\n"
            "                         must be well-formed UTF-8. An argument cannot hold a NUL\n"
            "                         byte: the text ends at the first one\n"
            "      --ids \"ID ...\"     prompt as token ids (separated by spaces or commas)\n"
            "  -n, --new N            tokens to generate, per reply with --chat (default 32;\n"
            "                         0: run the prompt only); past the context is an error\n"
            "  -c, --ctx N            context length in positions (default min(4096, model's));\n"
            "                         a longer prompt is an error before any compute\n"
            "      --chat             wrap the prompt in Qwen3's chat template; stop at <|im_end|>\n"
            "                         or <|endoftext|>. Without -p or --ids: interactive, one user\n"
            "                         turn per line of stdin (empty lines skipped; a line with\n"
            "                         invalid UTF-8 or a NUL byte is refused with a message, the\n"
            "                         chat goes on, and the exit status is then 1), each reply\n"
            "                         streamed and ended with a newline, the KV cache kept across\n"
            "                         turns; ends at end of input, or with an error when the\n"
            "                         conversation fills the context (see -c)\n"
            "      --think            with --chat: leave thinking on (no empty think block)\n"
            "      --backend B        bpf (default), emu (the host twin, bit-identical), or ref\n"
            "                         (float64 reference from a Hugging Face folder given as -m);\n"
            "                         bpf needs root or CAP_BPF + CAP_PERFMON\n"
            "      --threads N        1 or 2 (default 2)\n"
            "      --no-verify        skip the container's tensor checksums at start-up\n"
            "      --resident         all weights copied into BPF maps once at start-up (default)\n"
            "      --stream           small-memory mode: matrices stay in the container and are\n"
            "                         read, unconverted, into a 64 MiB work map per batch of\n"
            "                         rows (slower; if the file is truncated meanwhile qrun stops\n"
            "                         with an error)\n"
            "      --temp T           sampling temperature, 0 to 100 (default 0: greedy)\n"
            "      --top-k K          keep the K most likely tokens (default 0: all)\n"
            "      --top-p P          keep the smallest set with probability >= P, in (0, 1]\n"
            "                         (default 1)\n"
            "      --seed S           sampling seed, 0 to 2^64-1 (default 1)\n"
            "      --print-ids        print generated token ids instead of text\n"
            "      --dump-logits FILE write the last prompt position's logits (float32 LE;\n"
            "                         with interactive --chat: of the latest turn)\n"
            "      --tokenizer FILE   use this tokenizer.json instead of the container's\n"
            "      --stats            timings, bpf calls per token and memory on stderr\n"
            "  -h, --help             this text\n"
            "\n"
            "Generated ids without a token in the tokenizer (a model's padding ids) print no\n"
            "text. SIGINT or SIGTERM stops between tokens: the text printed so far ends with\n"
            "whole characters, and the exit status is 130 or 143.\n"
            "Exit status: 0 done, 1 error, 2 bad usage.\n");
}

/* ---- options ------------------------------------------------------------------------ */

/* A whole decimal number in [min, max]; no sign, no blanks, nothing after it. */
static int opt_uint(const char *name, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = arg[0] >= '0' && arg[0] <= '9' ? strtoull(arg, &end, 10) : 0;
    if (arg[0] < '0' || arg[0] > '9' || *end || errno || v < min || v > max) {
        fprintf(stderr, "qrun: %s needs a whole number from %" PRIu64 " to %" PRIu64 ", got '%s'\n", name, min,
                max, arg);
        return -1;
    }
    *out = v;
    return 0;
}

/* A finite decimal number in [min, max], or (min, max] when min_open. */
static int opt_real(const char *name, const char *arg, double min, bool min_open, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    bool blank = arg[0] == ' ' || arg[0] == '\t' || arg[0] == '\n';
    if (end == arg || blank || *end || errno || !isfinite(v) || v < min || (min_open && v == min) || v > max) {
        fprintf(stderr, "qrun: %s needs a number in %c%g, %g], got '%s'\n", name, min_open ? '(' : '[', min, max,
                arg);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_options(struct options *o, int argc, char **argv)
{
    enum { O_IDS = 256, O_BACKEND, O_THREADS, O_NO_VERIFY, O_STREAM, O_RESIDENT, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_PRINT_IDS,
           O_DUMP, O_TOKENIZER, O_STATS, O_CHAT, O_THINK };
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"new", required_argument, 0, 'n'}, {"ctx", required_argument, 0, 'c'},
        {"ids", required_argument, 0, O_IDS}, {"backend", required_argument, 0, O_BACKEND},
        {"threads", required_argument, 0, O_THREADS}, {"no-verify", no_argument, 0, O_NO_VERIFY},
        {"stream", no_argument, 0, O_STREAM}, {"resident", no_argument, 0, O_RESIDENT},
        {"temp", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP}, {"seed", required_argument, 0, O_SEED},
        {"print-ids", no_argument, 0, O_PRINT_IDS}, {"dump-logits", required_argument, 0, O_DUMP},
        {"tokenizer", required_argument, 0, O_TOKENIZER}, {"stats", no_argument, 0, O_STATS},
        {"chat", no_argument, 0, O_CHAT}, {"think", no_argument, 0, O_THINK},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (struct options){.s = {.backend = QP_BACKEND_BPF, .threads = 2}, .n_new = 32, .top_p = 1, .seed = 1};
    int c;
    uint64_t v;
    opterr = 0; /* one line of our own per mistake, not getopt's plus the usage */
    while ((c = getopt_long(argc, argv, ":m:p:n:c:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': o->s.model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n':
            if (opt_uint("-n", optarg, 0, INT32_MAX, &v))
                return -1;
            o->n_new = (int32_t)v;
            break;
        case 'c':
            if (opt_uint("-c", optarg, 1, INT32_MAX, &v))
                return -1;
            o->s.ctx = (uint32_t)v;
            break;
        case O_IDS: o->ids = optarg; break;
        case O_BACKEND:
            if (!strcmp(optarg, "bpf")) o->s.backend = QP_BACKEND_BPF;
            else if (!strcmp(optarg, "emu")) o->s.backend = QP_BACKEND_EMU;
            else if (!strcmp(optarg, "ref")) o->s.backend = QP_BACKEND_REF;
            else {
                fprintf(stderr, "qrun: unknown backend '%s' (bpf, emu, ref)\n", optarg);
                return -1;
            }
            break;
        case O_THREADS:
            if (opt_uint("--threads", optarg, 1, 2, &v))
                return -1;
            o->s.threads = (unsigned)v;
            break;
        case O_NO_VERIFY: o->s.no_verify = true; break;
        case O_STREAM: o->s.stream = true; break;
        case O_RESIDENT: o->s.stream = false; break;
        case O_TEMP:
            if (opt_real("--temp", optarg, 0, false, 100, &o->temperature))
                return -1;
            break;
        case O_TOPK:
            if (opt_uint("--top-k", optarg, 0, UINT32_MAX, &v))
                return -1;
            o->top_k = (uint32_t)v;
            break;
        case O_TOPP:
            if (opt_real("--top-p", optarg, 0, true, 1, &o->top_p))
                return -1;
            break;
        case O_SEED:
            if (opt_uint("--seed", optarg, 0, UINT64_MAX, &o->seed))
                return -1;
            break;
        case O_PRINT_IDS: o->print_ids = true; break;
        case O_DUMP: o->dump_logits = optarg; break;
        case O_TOKENIZER: o->tokenizer = optarg; break;
        case O_STATS: o->stats = true; break;
        case O_CHAT: o->chat = true; break;
        case O_THINK: o->think = true; break;
        case 'h': usage(stdout); exit(0);
        case ':':
            fprintf(stderr, "qrun: option '%s' needs a value (try qrun --help)\n", argv[optind - 1]);
            return -1;
        default:
            if (optopt)
                fprintf(stderr, "qrun: unknown option '-%c' (try qrun --help)\n", optopt);
            else
                fprintf(stderr, "qrun: unknown option '%s' (try qrun --help)\n", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "qrun: unexpected argument '%s' (try qrun --help)\n", argv[optind]);
        return -1;
    }
    if (!o->s.model) {
        fprintf(stderr, "qrun: no model: give -m MODEL.qpk (try qrun --help)\n");
        return -1;
    }
    if (o->prompt && o->ids) {
        fprintf(stderr, "qrun: give the prompt either with -p TEXT or with --ids \"ID ...\", not both\n");
        return -1;
    }
    if (!o->prompt && !o->ids && !o->chat) {
        fprintf(stderr, "qrun: give a prompt with -p TEXT or --ids \"ID ...\" (or --chat for a chat on stdin)\n");
        return -1;
    }
    if (o->think && !o->chat) {
        fprintf(stderr, "qrun: --think works with --chat only\n");
        return -1;
    }
    o->interactive = o->chat && !o->prompt && !o->ids;
    if (o->prompt) {
        const char *why = NULL;
        size_t len = strlen(o->prompt), bad = qp_utf8_check(o->prompt, len, &why);
        if (bad < len) {
            fprintf(stderr, "qrun: -p: invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)\n", bad,
                    (unsigned char)o->prompt[bad], why ? why : "ill-formed");
            return -1;
        }
    }
    return 0;
}

/* The model path before anything opens it: a clear word for the usual mix-ups. */
static int check_model_path(const struct options *o)
{
    struct stat st;
    const char *m = o->s.model;
    if (stat(m, &st) != 0) {
        fprintf(stderr, "qrun: %s: %s\n", m, strerror(errno));
        return -1;
    }
    if (o->s.backend != QP_BACKEND_REF && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "qrun: %s is a directory; -m takes a .qpk container (a Hugging Face folder runs "
                        "with --backend ref)\n", m);
        return -1;
    }
    if (o->s.backend == QP_BACKEND_REF && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "qrun: --backend ref takes a Hugging Face checkpoint folder as -m; %s is not a "
                        "directory\n", m);
        return -1;
    }
    if (o->s.backend != QP_BACKEND_REF && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "qrun: %s is not a regular file\n", m);
        return -1;
    }
    return 0;
}

/* Loading the kernels needs CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN, which
 * implies both, as root has). Checked from the effective capability set,
 * then confirmed by loading a two-instruction socket filter, so a denial
 * (seccomp, an LSM) reads as what it is and not as a verifier rejection. */
static int check_bpf_privilege(void)
{
    uint64_t eff = 0;
    bool known = false;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "CapEff:", 7)) {
            eff = strtoull(line + 7, NULL, 16);
            known = true;
        }
    if (f)
        fclose(f);
#define HAS_CAP(c) ((eff >> (c)) & 1)
    bool ok = known ? HAS_CAP(CAP_SYS_ADMIN) || (HAS_CAP(CAP_BPF) && HAS_CAP(CAP_PERFMON)) : geteuid() == 0;
#undef HAS_CAP
    if (ok)
        ok = qp_bpf_may_load();
    if (!ok) {
        fprintf(stderr, "qrun: loading BPF programs needs root or CAP_BPF + CAP_PERFMON (running as uid %u)\n",
                (unsigned)geteuid());
        return -1;
    }
    return 0;
}

/* ---- prompt ------------------------------------------------------------------------- */

/* Ids separated by blanks or commas; the vocabulary is checked once the model is open. */
static int parse_ids(const char *text, qp_tok_ids *ids, qp_err *err)
{
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        unsigned long v = *p >= '0' && *p <= '9' ? strtoul(p, &end, 10) : 0;
        if (*p < '0' || *p > '9' || errno || v > INT32_MAX || !strchr(" ,\t\n", *end))
            return qp_fail(err, "--ids: '%.*s' is not a token id", (int)strcspn(p, " ,\t\n"), p);
        if (qp_tok_ids_push(ids, (int32_t)v))
            return qp_fail(err, "out of memory");
        p = end;
    }
    return ids->len ? 0 : qp_fail(err, "--ids: no token ids given");
}

/* The tokenizer of a container (the tok_cli -m hook and qrun -p). */
static int load_container_tokenizer(const char *path, qp_tok **out, qp_err *err)
{
    struct qpk_file f;
    if (qpk_open(&f, path, 0, err))
        return -1;
    char *json;
    size_t len;
    int rc = qpk_read_section(&f, QPK_SEC_TOKENIZER, &json, &len, err);
    if (!rc && !json)
        rc = qp_fail(err, "%s: the container carries no tokenizer (pack with a tokenizer.json, or use --tokenizer)",
                     path);
    if (!rc)
        rc = qp_tok_load_buffer(out, json, len, path, err);
    free(json);
    qpk_close(&f);
    return rc;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int dump_logits(const char *path, const double *logits, uint32_t n, qp_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return qp_fail(err, "%s: %s", path, strerror(errno));
    for (uint32_t i = 0; i < n; i++) {
        float v = (float)logits[i];
        fwrite(&v, sizeof v, 1, f);
    }
    if (fclose(f) != 0)
        return qp_fail(err, "%s: write failed", path);
    return 0;
}

/* ---- generation --------------------------------------------------------------------- */

struct run_state {
    struct options *o;
    struct qp_session s;
    bool s_open;
    qp_tok *tok;
    qp_tok_stream stream;
    qp_tok_ids prompt;
    struct qp_sampler sampler;
    bool sampler_ready;
    qp_chat_stops stops;    /* with --chat */
    bool use_stops;
    uint32_t pos;           /* tokens in the KV cache */
    uint32_t next;          /* argmax after the last step */
    bool pending;           /* pending_id was printed but is not in the cache yet */
    uint32_t pending_id;
    uint32_t in_reply;      /* tokens printed in the current reply */
    bool bad_input;         /* an interactive line was refused */
    double prompt_ms, gen_ms;
    uint32_t n_prompt, generated;
    uint64_t calls_prompt, calls_gen;
};

static uint64_t calls(const struct run_state *r)
{
    return r->s.fw ? qp_forward_stats(r->s.fw)->calls : 0;
}

static int emit_token(struct run_state *r, uint32_t id, qp_err *err)
{
    if (r->o->print_ids || !r->tok) {
        printf("%s%u", r->in_reply ? " " : "", id);
        fflush(stdout);
        return 0;
    }
    /* the model's vocabulary may be larger than the tokenizer's (padding
     * ids): such an id has no text, as in Hugging Face's decode */
    if (!qp_tok_token_string(r->tok, (int32_t)id, NULL))
        return 0;
    qp_tok_text text = {0};
    int rc = qp_tok_stream_push(&r->stream, (int32_t)id, &text, err);
    if (!rc && text.len) {
        fwrite(text.s, 1, text.len, stdout);
        fflush(stdout);
    }
    qp_tok_text_free(&text);
    return rc;
}

/* Ends a reply's output. After a signal only the complete characters already
 * printed stay (a held partial character is dropped, not replaced); otherwise
 * a partial character left at the end becomes U+FFFD. */
static void end_reply(struct run_state *r, bool newline_always)
{
    if (r->tok && !r->o->print_ids && !stop_signal) {
        qp_tok_text tail = {0};
        qp_err ignore;
        if (qp_tok_stream_finish(&r->stream, &tail, &ignore) == 0 && tail.len)
            fwrite(tail.s, 1, tail.len, stdout);
        qp_tok_text_free(&tail);
    }
    if (r->in_reply || newline_always)
        putchar('\n');
    fflush(stdout);
}

/* Feeds the pending token and ids[0..n) at the next positions; the last one
 * computes logits. The caller checked that they fit the context. */
static int feed(struct run_state *r, const int32_t *ids, size_t n, qp_err *err)
{
    double t0 = now_ms();
    uint64_t c0 = calls(r);
    int rc = 0;
    if (r->pending && !stop_signal) {
        rc = qp_session_step(&r->s, r->pending_id, r->pos, n == 0, &r->next, err);
        if (!rc) {
            r->pos++;
            r->pending = false;
        }
    }
    for (size_t i = 0; !rc && i < n && !stop_signal; i++) {
        rc = qp_session_step(&r->s, (uint32_t)ids[i], r->pos, i + 1 == n, &r->next, err);
        if (!rc)
            r->pos++;
    }
    r->n_prompt += (uint32_t)n;
    r->prompt_ms += now_ms() - t0;
    r->calls_prompt += calls(r) - c0;
    if (!rc && r->o->dump_logits && !stop_signal)
        rc = dump_logits(r->o->dump_logits, r->s.logits, r->s.vocab, err);
    return rc;
}

/* Generates one reply after the prompt just fed: up to -n tokens, ending
 * early at a stop id (which is neither printed nor fed). The last token
 * printed is left pending: the next turn feeds it first. */
static int reply(struct run_state *r, qp_err *err)
{
    struct options *o = r->o;
    bool need_logits = o->temperature > 0 || o->dump_logits || r->s.kind == QP_BACKEND_REF;
    double t0 = now_ms();
    uint64_t c0 = calls(r);
    int rc = 0;
    r->in_reply = 0;
    if (r->tok)
        qp_tok_stream_init(&r->stream, r->tok, QP_TOK_SKIP_SPECIAL);
    for (int32_t i = 0; i < o->n_new && !stop_signal; i++) {
        uint32_t id = need_logits ? qp_sample(&r->sampler, r->s.logits) : r->next;
        if (r->use_stops && qp_chat_is_stop(&r->stops, (int32_t)id))
            break;
        rc = emit_token(r, id, err);
        if (rc)
            break;
        r->in_reply++;
        r->generated++;
        r->pending = true;
        r->pending_id = id;
        if (i + 1 == o->n_new || stop_signal)
            break;
        if (r->pos >= r->s.ctx) {
            rc = qp_fail(err, "reached the end of the context (%u tokens); use -c to allow more", r->s.ctx);
            break;
        }
        rc = qp_session_step(&r->s, id, r->pos, true, &r->next, err);
        if (rc)
            break;
        r->pos++;
        r->pending = false;
    }
    r->gen_ms += now_ms() - t0;
    r->calls_gen += calls(r) - c0;
    return rc;
}

/* The whole conversation must stay within the context: no wrap-around. */
static int check_fits(const struct run_state *r, size_t n, qp_err *err)
{
    uint64_t need = (uint64_t)r->pos + r->pending + n;
    if (need <= r->s.ctx)
        return 0;
    if (r->o->interactive)
        return qp_fail(err, "the conversation is full: %u tokens so far and %zu more for this turn do not fit "
                            "the context of %u tokens (use -c to allow more)",
                       r->pos + r->pending, n, r->s.ctx);
    return qp_fail(err, "the prompt has %zu tokens, more than the context of %u (see -c)", n, r->s.ctx);
}

static int one_shot(struct run_state *r, qp_err *err)
{
    int rc = check_fits(r, r->prompt.len, err);
    if (!rc)
        rc = feed(r, r->prompt.v, r->prompt.len, err);
    if (!rc && !stop_signal)
        rc = reply(r, err);
    if (!rc || r->in_reply)
        end_reply(r, false);
    return rc;
}

/* Refuses a line the tokenizer must not see: invalid UTF-8 or a NUL byte. */
static bool line_ok(const char *line, size_t len, unsigned lineno)
{
    const char *nul = memchr(line, 0, len);
    if (nul) {
        fprintf(stderr, "qrun: input line %u holds a NUL byte at offset %zu; line ignored\n", lineno,
                (size_t)(nul - line));
        return false;
    }
    const char *why = NULL;
    size_t bad = qp_utf8_check(line, len, &why);
    if (bad < len) {
        fprintf(stderr, "qrun: input line %u: invalid UTF-8 at byte offset %zu (byte 0x%02X: %s); line ignored\n",
                lineno, bad, (unsigned char)line[bad], why ? why : "ill-formed");
        return false;
    }
    return true;
}

static int interactive(struct run_state *r, qp_err *err)
{
    qp_chat chat;
    qp_chat_init(&chat, r->o->think);
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t cap = 0;
    unsigned lineno = 0;
    int rc = 0;
    while (!rc && !stop_signal) {
        if (tty) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (stop_signal)
                break;
            if (ferror(stdin) && errno)
                rc = qp_fail(err, "reading stdin: %s", strerror(errno));
            else if (tty)
                fputc('\n', stderr);
            break;
        }
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n')
            len--;
        if (len && line[len - 1] == '\r')
            len--;
        if (!line_ok(line, len, lineno)) {
            r->bad_input = true;
            continue;
        }
        if (!len)
            continue;
        line[len] = '\0';
        qp_tok_text text = {0};
        qp_tok_ids ids = {0};
        qp_chat copy = chat;
        rc = qp_chat_turn(&copy, NULL, line, &text, err);
        if (!rc)
            rc = qp_tok_encode(r->tok, text.s, text.len, &ids, err);
        for (size_t i = 0; !rc && i < ids.len; i++)
            if ((uint32_t)ids.v[i] >= r->s.vocab)
                rc = qp_fail(err, "input line %u: token %d is outside this model's vocabulary of %u", lineno,
                             ids.v[i], r->s.vocab);
        if (!rc)
            rc = check_fits(r, ids.len, err);
        if (!rc) {
            chat = copy;
            rc = feed(r, ids.v, ids.len, err);
        }
        if (!rc && !stop_signal) {
            rc = reply(r, err);
            if (!rc || r->in_reply)
                end_reply(r, !rc);
        }
        qp_tok_text_free(&text);
        qp_tok_ids_free(&ids);
    }
    free(line);
    return rc;
}

static void print_stats(const struct run_state *r)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint32_t n_prompt = r->n_prompt, steps = r->generated > 1 ? r->generated - 1 : 0;
    fprintf(stderr, "qrun: backend %s, load %.0f ms", qp_backend_kind_name(r->s.kind), r->s.load_ms);
    if (r->s.kind != QP_BACKEND_REF) {
        fprintf(stderr, " (checksums %.0f ms", r->s.checksum_ms);
        if (r->s.b && r->s.kind == QP_BACKEND_BPF)
            fprintf(stderr, ", maps and programs %.0f ms, weight copy %.0f ms", r->s.b->verify_ms, r->s.b->copy_ms);
        fprintf(stderr, ")");
    }
    fprintf(stderr, ", prompt %u tokens in %.0f ms (%.1f ms/token)\n", n_prompt, r->prompt_ms,
            n_prompt ? r->prompt_ms / n_prompt : 0);
    fprintf(stderr, "qrun: generated %u tokens, %.1f ms/token", r->generated, steps ? r->gen_ms / steps : 0);
    if (r->s.fw) {
        const struct qp_forward_stats *st = qp_forward_stats(r->s.fw);
        fprintf(stderr, ", %.0f bpf calls/token, longest call %.2f ms (%s), %llu of %llu calls over %.0f ms",
                n_prompt ? (double)r->calls_prompt / n_prompt : 0, st->max_call_ms, st->max_call_kernel,
                (unsigned long long)st->slow_calls, (unsigned long long)st->calls, QP_SLOW_CALL_MS);
    }
    if (r->s.fw) {
        const struct qp_forward_stats *st = qp_forward_stats(r->s.fw);
        fprintf(stderr, "\nqrun: kernel time (all tokens, both threads):");
        for (int k = 0; k < QP_K_COUNT; k++)
            if (st->kernel_calls[k])
                fprintf(stderr, " %s %.0f ms/%llu", qp_kernel_name(k), st->kernel_ms[k],
                        (unsigned long long)st->kernel_calls[k]);
    }
    fprintf(stderr, "\nqrun: BPF maps %.1f MB, KV cache %.1f KiB/position, peak RSS %.0f MB\n",
            (double)(r->s.b ? r->s.b->map_bytes : 0) / 1e6, (double)r->s.plan.kv_bytes_per_pos / 1024,
            ru.ru_maxrss / 1024.0);
}

/* Loads the tokenizer and encodes the prompt, before the model is loaded. */
static int prepare_prompt(struct run_state *r, qp_err *err)
{
    struct options *o = r->o;
    bool need_tok = o->prompt || o->chat || !o->print_ids;
    bool must = o->prompt || o->chat;
    qp_err quiet;
    if (need_tok && o->tokenizer) {
        if (qp_tok_load_file(&r->tok, o->tokenizer, err))
            return -1;
    } else if (need_tok && o->s.backend != QP_BACKEND_REF) {
        if (load_container_tokenizer(o->s.model, &r->tok, must ? err : &quiet) && must)
            return -1;
    } else if (need_tok) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", o->s.model);
        if (qp_tok_load_file(&r->tok, path, must ? err : &quiet) && must)
            return -1;
    }
    if (o->chat) {
        if (qp_chat_stop_ids(r->tok, &r->stops, err))
            return -1;
        r->use_stops = true;
    }
    if (o->interactive)
        return 0;
    if (o->ids)
        return parse_ids(o->ids, &r->prompt, err);
    qp_tok_text wrapped = {0};
    const char *text = o->prompt;
    size_t len = strlen(text);
    if (o->chat) {
        if (qp_chat_prompt(NULL, o->prompt, o->think, &wrapped, err))
            return -1;
        text = wrapped.s;
        len = wrapped.len;
    }
    int rc = qp_tok_encode(r->tok, text, len, &r->prompt, err);
    qp_tok_text_free(&wrapped);
    if (!rc && r->prompt.len == 0)
        rc = qp_fail(err, "the prompt encodes to no tokens");
    return rc;
}

/* With the model open: the prompt's ids against its vocabulary and context. */
static int check_prompt(struct run_state *r, qp_err *err)
{
    for (size_t i = 0; i < r->prompt.len; i++)
        if ((uint32_t)r->prompt.v[i] >= r->s.vocab)
            return qp_fail(err, "%s %d is outside this model's vocabulary of %u (ids 0 to %u)",
                           r->o->ids ? "--ids: token id" : "prompt token", r->prompt.v[i], r->s.vocab,
                           r->s.vocab - 1);
    return r->o->interactive ? 0 : check_fits(r, r->prompt.len, err);
}

static int run(struct run_state *r, qp_err *err)
{
    struct options *o = r->o;
    if (prepare_prompt(r, err))
        return -1;
    if (!o->interactive && o->s.ctx && r->prompt.len > o->s.ctx)
        return qp_fail(err, "the prompt has %zu tokens, more than the context of %u (see -c)", r->prompt.len,
                       o->s.ctx);
    if (stop_signal)
        return 0;
    if (qp_session_open(&r->s, &o->s, err))
        return -1;
    r->s_open = true;
    if (check_prompt(r, err))
        return -1;
    if (qp_sampler_init(&r->sampler, r->s.vocab, o->temperature, o->top_k, o->top_p, o->seed))
        return qp_fail(err, "out of memory");
    r->sampler_ready = true;
    if (stop_signal)
        return 0;
    return o->interactive ? interactive(r, err) : one_shot(r, err);
}

int main(int argc, char **argv)
{
    tok_cli_set_model_loader(load_container_tokenizer);
    if (argc > 1 && (!strcmp(argv[1], "tokenize") || !strcmp(argv[1], "detokenize")))
        return tok_cli_main(argc - 1, argv + 1, "qrun");
    struct options o;
    if (parse_options(&o, argc, argv))
        return 2;
    if (check_model_path(&o))
        return 1;
    if (o.s.backend == QP_BACKEND_BPF && check_bpf_privilege())
        return 1;
    /* the first signal stops between tokens; a second one ends qrun at once */
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    qp_exit_on_sigbus("qrun: the model file was truncated or changed on disk while qrun was reading it");
    struct run_state r = {.o = &o};
    qp_err err = {{0}};
    int rc = run(&r, &err);
    if (!rc && o.stats && !stop_signal)
        print_stats(&r);
    /* an error caused by the interruption itself is not worth a line */
    if (rc && !stop_signal)
        fprintf(stderr, "qrun: %s\n", err.msg);
    if (r.sampler_ready)
        qp_sampler_free(&r.sampler);
    qp_tok_ids_free(&r.prompt);
    qp_tok_free(r.tok);
    if (r.s_open)
        qp_session_close(&r.s);
    if (stop_signal) {
        fprintf(stderr, "qrun: interrupted\n");
        return 128 + stop_signal;
    }
    return rc || r.bad_input ? 1 : 0;
}
