/* qrun - runs a packed Qwen3 model's whole forward pass in eBPF.
 *
 *   qrun -m MODEL.qpk -p TEXT -n N        generate, streaming text
 *   qrun -m MODEL.qpk --ids "9707 11" ... prompt as token ids
 *   qrun tokenize | detokenize ...        the tokenizer alone
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "sampler.h"
#include "session.h"
#include "tok_cli.h"
#include "tokenizer.h"

struct options {
    struct qp_session_opts s;
    const char *prompt, *ids, *tokenizer, *dump_logits;
    int32_t n_new;
    bool print_ids, stats, chat, think, quiet;
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
            "       qrun tokenize|detokenize (--tokenizer FILE | -m MODEL.qpk) [--jsonl]\n"
            "\n"
            "  -m, --model PATH       the .qpk container (a Hugging Face folder with --backend ref)\n"
            "  -p, --prompt TEXT      prompt text (needs the tokenizer the container carries)\n"
            "      --ids \"ID ...\"     prompt as token ids\n"
            "  -n, --new N            tokens to generate (default 32; 0: run the prompt only)\n"
            "  -c, --ctx N            context length in positions (default min(4096, model's))\n"
            "      --chat             wrap the prompt in Qwen3's chat template; stop at <|im_end|>\n"
            "      --think            with --chat: leave thinking on (no empty think block)\n"
            "      --backend B        bpf (default), emu (the host twin, bit-identical), or ref\n"
            "                         (float64 reference from a Hugging Face folder given as -m)\n"
            "      --threads N        1 or 2 (default 2)\n"
            "      --no-verify        skip the container's tensor checksums at start-up\n"
            "      --temp T           sampling temperature (default 0: greedy)\n"
            "      --top-k K          keep the K most likely tokens (default 0: all)\n"
            "      --top-p P          keep the smallest set with probability >= P (default 1)\n"
            "      --seed S           sampling seed (default 1)\n"
            "      --print-ids        print generated token ids instead of text\n"
            "      --dump-logits FILE write the last prompt position's logits (float32 LE)\n"
            "      --tokenizer FILE   use this tokenizer.json instead of the container's\n"
            "      --stats            timings, bpf calls per token and memory on stderr\n"
            "  -h, --help             this text\n");
}

static int parse_options(struct options *o, int argc, char **argv)
{
    enum { O_IDS = 256, O_BACKEND, O_THREADS, O_NO_VERIFY, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_PRINT_IDS,
           O_DUMP, O_TOKENIZER, O_STATS, O_CHAT, O_THINK };
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"new", required_argument, 0, 'n'}, {"ctx", required_argument, 0, 'c'},
        {"ids", required_argument, 0, O_IDS}, {"backend", required_argument, 0, O_BACKEND},
        {"threads", required_argument, 0, O_THREADS}, {"no-verify", no_argument, 0, O_NO_VERIFY},
        {"temp", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP}, {"seed", required_argument, 0, O_SEED},
        {"print-ids", no_argument, 0, O_PRINT_IDS}, {"dump-logits", required_argument, 0, O_DUMP},
        {"tokenizer", required_argument, 0, O_TOKENIZER}, {"stats", no_argument, 0, O_STATS},
        {"chat", no_argument, 0, O_CHAT}, {"think", no_argument, 0, O_THINK},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (struct options){.s = {.backend = QP_BACKEND_BPF, .threads = 2}, .n_new = 32, .top_p = 1, .seed = 1};
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "m:p:n:c:h", longs, NULL)) != -1) {
        errno = 0;
        switch (c) {
        case 'm': o->s.model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n':
            o->n_new = (int32_t)strtol(optarg, &end, 10);
            if (*end || o->n_new < 0 || errno) {
                fprintf(stderr, "qrun: -n needs a count >= 0, got '%s'\n", optarg);
                return -1;
            }
            break;
        case 'c':
            o->s.ctx = (uint32_t)strtoul(optarg, &end, 10);
            if (*end || o->s.ctx == 0 || errno || optarg[0] == '-') {
                fprintf(stderr, "qrun: -c needs a positive context length, got '%s'\n", optarg);
                return -1;
            }
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
        case O_THREADS: o->s.threads = (unsigned)strtoul(optarg, NULL, 10); break;
        case O_NO_VERIFY: o->s.no_verify = true; break;
        case O_TEMP: o->temperature = strtod(optarg, NULL); break;
        case O_TOPK: o->top_k = (uint32_t)strtoul(optarg, NULL, 10); break;
        case O_TOPP: o->top_p = strtod(optarg, NULL); break;
        case O_SEED: o->seed = strtoull(optarg, NULL, 10); break;
        case O_PRINT_IDS: o->print_ids = true; break;
        case O_DUMP: o->dump_logits = optarg; break;
        case O_TOKENIZER: o->tokenizer = optarg; break;
        case O_STATS: o->stats = true; break;
        case O_CHAT: o->chat = true; break;
        case O_THINK: o->think = true; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
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
    if (!o->prompt == !o->ids) {
        fprintf(stderr, "qrun: give a prompt with either -p TEXT or --ids \"ID ...\"\n");
        return -1;
    }
    if (o->temperature < 0 || !(o->top_p > 0 && o->top_p <= 1) || o->s.threads < 1 || o->s.threads > 2) {
        fprintf(stderr, "qrun: --temp must be >= 0, --top-p in (0, 1], --threads 1 or 2\n");
        return -1;
    }
    return 0;
}

static int parse_ids(const char *text, qp_tok_ids *ids, uint32_t vocab, qp_err *err)
{
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno || *p == '-' || v >= vocab)
            return qp_fail(err, "--ids: '%.*s' is not a token id below the vocabulary size %u",
                           (int)strcspn(p, " ,\t\n"), p, vocab);
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

struct run_state {
    struct options *o;
    struct qp_session s;
    qp_tok *tok;
    qp_tok_stream stream;
    qp_tok_ids prompt;
    double prompt_ms, gen_ms;
    uint32_t generated;
    uint64_t calls_prompt, calls_gen;
};

static int emit_token(struct run_state *r, uint32_t id, qp_err *err)
{
    if (r->o->print_ids || !r->tok) {
        printf("%s%u", r->generated ? " " : "", id);
        fflush(stdout);
        return 0;
    }
    qp_tok_text text = {0};
    int rc = qp_tok_stream_push(&r->stream, (int32_t)id, &text, err);
    if (!rc && text.len) {
        fwrite(text.s, 1, text.len, stdout);
        fflush(stdout);
    }
    qp_tok_text_free(&text);
    return rc;
}

static bool is_stop(const struct run_state *r, uint32_t id)
{
    if (!r->tok || !r->o->chat)
        return false;
    size_t n;
    const char *s = qp_tok_token_string(r->tok, (int32_t)id, &n);
    return s && ((n == 10 && !memcmp(s, "<|im_end|>", 10)) || (n == 13 && !memcmp(s, "<|endoftext|>", 13)));
}

static uint64_t calls(const struct run_state *r)
{
    return r->s.fw ? qp_forward_stats(r->s.fw)->calls : 0;
}

static int generate(struct run_state *r, qp_err *err)
{
    struct options *o = r->o;
    struct qp_sampler sampler;
    if (qp_sampler_init(&sampler, r->s.vocab, o->temperature, o->top_k, o->top_p, o->seed))
        return qp_fail(err, "out of memory");
    uint32_t n_prompt = (uint32_t)r->prompt.len, pos = 0, next = 0;
    int rc = 0;
    if (n_prompt + (uint32_t)o->n_new > r->s.ctx && n_prompt > r->s.ctx)
        rc = qp_fail(err, "the prompt has %u tokens, more than the context of %u (see -c)", n_prompt, r->s.ctx);
    double t0 = now_ms();
    bool need_logits = o->temperature > 0 || o->dump_logits || r->s.kind == QP_BACKEND_REF;
    for (; !rc && pos < n_prompt && !stop_signal; pos++) {
        bool last = pos + 1 == n_prompt;
        rc = qp_session_step(&r->s, (uint32_t)r->prompt.v[pos], pos, last, &next, err);
    }
    r->prompt_ms = now_ms() - t0;
    r->calls_prompt = calls(r);
    if (!rc && o->dump_logits && !stop_signal)
        rc = dump_logits(o->dump_logits, r->s.logits, r->s.vocab, err);
    t0 = now_ms();
    for (int32_t i = 0; !rc && i < o->n_new && !stop_signal; i++) {
        uint32_t id = need_logits ? qp_sample(&sampler, r->s.logits) : next;
        if (is_stop(r, id))
            break;
        rc = emit_token(r, id, err);
        r->generated++;
        if (rc || i + 1 == o->n_new)
            break;
        if (pos >= r->s.ctx) {
            rc = qp_fail(err, "reached the end of the context (%u tokens); use -c to allow more", r->s.ctx);
            break;
        }
        rc = qp_session_step(&r->s, id, pos++, true, &next, err);
    }
    r->gen_ms = now_ms() - t0;
    r->calls_gen = calls(r) - r->calls_prompt;
    qp_tok_text tail = {0};
    if (r->tok && !o->print_ids && qp_tok_stream_finish(&r->stream, &tail, err) == 0 && tail.len)
        fwrite(tail.s, 1, tail.len, stdout);
    qp_tok_text_free(&tail);
    if (r->generated)
        putchar('\n');
    fflush(stdout);
    qp_sampler_free(&sampler);
    return rc;
}

static void print_stats(const struct run_state *r)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint32_t n_prompt = (uint32_t)r->prompt.len, steps = r->generated > 1 ? r->generated - 1 : 0;
    fprintf(stderr, "qrun: backend %s, load %.0f ms, prompt %u tokens in %.0f ms (%.1f ms/token)\n",
            qp_backend_kind_name(r->s.kind), r->s.load_ms, n_prompt, r->prompt_ms,
            n_prompt ? r->prompt_ms / n_prompt : 0);
    fprintf(stderr, "qrun: generated %u tokens, %.1f ms/token", r->generated, steps ? r->gen_ms / steps : 0);
    if (r->s.fw) {
        const struct qp_forward_stats *st = qp_forward_stats(r->s.fw);
        fprintf(stderr, ", %.0f bpf calls/token, longest call %.2f ms (%s)",
                n_prompt ? (double)r->calls_prompt / n_prompt : 0, st->max_call_ms, st->max_call_kernel);
    }
    fprintf(stderr, "\nqrun: BPF maps %.1f MB, KV cache %.1f KiB/position, peak RSS %.0f MB\n",
            (double)(r->s.b ? r->s.b->map_bytes : 0) / 1e6, (double)r->s.plan.kv_bytes_per_pos / 1024,
            ru.ru_maxrss / 1024.0);
}

static int prepare_prompt(struct run_state *r, qp_err *err)
{
    struct options *o = r->o;
    bool need_tok = o->prompt || !o->print_ids;
    if (need_tok && o->tokenizer) {
        if (qp_tok_load_file(&r->tok, o->tokenizer, err))
            return -1;
    } else if (need_tok && r->s.kind != QP_BACKEND_REF) {
        qp_err quiet;
        if (load_container_tokenizer(o->s.model, &r->tok, o->prompt ? err : &quiet) && o->prompt)
            return -1;
    } else if (need_tok) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", o->s.model);
        qp_err quiet;
        if (qp_tok_load_file(&r->tok, path, o->prompt ? err : &quiet) && o->prompt)
            return -1;
    }
    if (r->tok)
        qp_tok_stream_init(&r->stream, r->tok, QP_TOK_SKIP_SPECIAL);
    if (o->ids)
        return parse_ids(o->ids, &r->prompt, r->s.vocab, err);
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
    for (size_t i = 0; !rc && i < r->prompt.len; i++)
        if ((uint32_t)r->prompt.v[i] >= r->s.vocab)
            rc = qp_fail(err, "prompt token %d is outside this model's vocabulary of %u", r->prompt.v[i],
                         r->s.vocab);
    return rc;
}

int main(int argc, char **argv)
{
    tok_cli_set_model_loader(load_container_tokenizer);
    if (argc > 1 && (!strcmp(argv[1], "tokenize") || !strcmp(argv[1], "detokenize")))
        return tok_cli_main(argc - 1, argv + 1, "qrun");
    struct options o;
    if (parse_options(&o, argc, argv))
        return 2;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct run_state r = {.o = &o};
    qp_err err = {{0}};
    int rc = qp_session_open(&r.s, &o.s, &err);
    if (!rc)
        rc = prepare_prompt(&r, &err);
    if (!rc && !stop_signal)
        rc = generate(&r, &err);
    if (!rc && o.stats)
        print_stats(&r);
    if (rc)
        fprintf(stderr, "qrun: %s\n", err.msg);
    qp_tok_ids_free(&r.prompt);
    qp_tok_free(r.tok);
    qp_session_close(&r.s);
    if (stop_signal) {
        fprintf(stderr, "qrun: interrupted\n");
        return 128 + stop_signal;
    }
    return rc ? 1 : 0;
}
