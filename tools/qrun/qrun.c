/* qrun - runs a packed Qwen3 model's whole forward pass in eBPF, through
 * include/qpack.h.
 *
 *   qrun -m MODEL.qpk -p TEXT -n N        generate, streaming text
 *   qrun -m MODEL.qpk --ids "9707 11" ... prompt as token ids
 *   qrun -m MODEL.qpk --chat              interactive chat, one user turn per stdin line
 *   qrun tokenize | detokenize ...        the tokenizer alone
 *
 * Order of checks, so that the cheap ones fail first and nothing is computed
 * for a run that cannot succeed: options (numbers, ranges, combinations)
 * and the prompt's UTF-8, then the model path, then BPF privilege (--backend
 * bpf), the output files, the model's header (-c against its maximum), the
 * tokenizer and the prompt's tokens (against its vocabulary, and with -n
 * against the context), and only then the load and the forward pass.
 *
 * Exit status: qrun.h (QRUN_*), 128 + signal when SIGINT or SIGTERM stopped
 * it (130, 143), 141 when the reader of stdout went away. Errors are one
 * line on stderr. Output is part of the result: a token that cannot be
 * written (a full disk, a closed pipe) stops the generation at once
 * (stdout_policy.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stdout_policy.h"
#include "fsafe.h"
#include "progress.h"
#include "qrun.h"
#include "serve.h"
#include "tok_cli.h"
#include "clock.h"

volatile sig_atomic_t qrun_stop_signal, qrun_reply_stopped, qrun_prompt_shown;
static volatile sig_atomic_t phase = QRUN_LOADING, interactive_mode;
static qpack_session *volatile signal_session;

/* While loading or waiting for a line there is nothing to finish: the
 * process ends at once (the kernel releases its BPF objects; an output
 * file is only ever a nameless temporary until it is complete). While
 * working, the session stops within one kernel invocation: one-shot runs
 * end, an interactive reply returns to the prompt on the first SIGINT. A
 * second signal ends the process at once. */
static void on_signal(int sig)
{
    if (phase != QRUN_WORKING || qrun_stop_signal) {
        progress_clear_from_signal();
        fs_out_remove_temps();
        /* at a terminal's "> " the message starts its own line */
        const char *msg = phase == QRUN_WAITING && qrun_prompt_shown ? "\nqrun: interrupted\n" : "qrun: interrupted\n";
        ssize_t w = write(STDERR_FILENO, msg, strlen(msg));
        (void)w;
        _exit(128 + sig);
    }
    if (interactive_mode && sig == SIGINT && !qrun_reply_stopped)
        qrun_reply_stopped = 1;
    else
        qrun_stop_signal = sig;
    if (signal_session)
        qpack_session_interrupt(signal_session);
}

void qrun_set_phase(enum qrun_phase p)
{
    phase = p;
}

static int fail(qpack_error *err, qpack_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(qpack_error *err, qpack_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->code = code;
    return -1;
}

/* ---- checks before the load ---------------------------------------------------- */

/* The model path before anything opens it: a clear word for the usual mix-ups. */
static int check_model_path(const struct options *o)
{
    struct stat st;
    const char *m = o->model;
    bool ref = o->mp.backend == QPACK_BACKEND_REF;
    if (stat(m, &st) != 0) {
        fprintf(stderr, "qrun: %s: %s\n", m, strerror(errno));
        return -1;
    }
    size_t n = strlen(m);
    bool gguf = n > 5 && !strcmp(m + n - 5, ".gguf") && S_ISREG(st.st_mode);
    if (ref && !S_ISDIR(st.st_mode) && !gguf) {
        fprintf(stderr, "qrun: --backend ref takes a Hugging Face checkpoint folder or a .gguf file as -m; %s is "
                        "neither\n", m);
        return -1;
    }
    if (!ref && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {   /* a folder: qpack_model_open says what to do */
        fprintf(stderr, "qrun: %s is not a regular file\n", m);
        return -1;
    }
    return 0;
}

static int check_bpf_privilege(void)
{
    if (qpack_bpf_permitted())
        return 0;
    fprintf(stderr, "qrun: loading BPF programs needs root or CAP_BPF + CAP_PERFMON (running as uid %u); "
                    "--backend emu runs the kernels' host twin without\n", (unsigned)geteuid());
    return -1;
}

/* --dump-logits never lands on the model or the tokenizer qrun reads (for
 * --backend ref, any file of the checkpoint folder). */
static int check_outputs(const struct options *o, qpack_error *err)
{
    const char *inputs[] = {o->model, o->tokenizer, NULL};
    qp_err e = {{0}};
    if ((o->dump_logits && fs_out_check(o->dump_logits, inputs, &e)) ||
        (o->dump_logits_all && fs_out_check(o->dump_logits_all, inputs, &e)) ||
        (o->prompt_cache && fs_out_check(o->prompt_cache, inputs, &e)))
        return fail(err, QPACK_ERR_IO, "%s", e.msg);
    return 0;
}

/* -c against the model's maximum: bad usage, before the load */
static int check_ctx(struct run_state *r, qpack_error *err)
{
    const struct options *o = r->o;
    uint32_t max = r->info->max_positions;
    if (o->ctx > max)
        return fail(err, QPACK_ERR_ARGUMENT, "-c %u is past this model's maximum of %u positions", o->ctx, max);
    r->ctx = o->ctx ? o->ctx : qpack_default_ctx(max);
    if (!strncmp(o->model, "pin:", 4) && o->ctx && o->ctx != r->info->ctx)
        return fail(err, QPACK_ERR_ARGUMENT, "%s was loaded with a context of %u positions: -c %u does not apply "
                    "(qpack load -c sets it)", o->model, r->info->ctx, o->ctx);
    if (!strncmp(o->model, "pin:", 4))
        r->ctx = r->info->ctx;
    return 0;
}

/* The one-shot prompt and its -n tokens against the context (the last
 * token generated is printed, never fed): bad usage, before the load. */
static int check_fits(const struct run_state *r, qpack_error *err)
{
    const struct options *o = r->o;
    uint64_t need = r->n_prompt + (o->n_new > 0 && !o->until_end ? (uint64_t)o->n_new - 1 : 0);
    uint32_t max = r->info->max_positions;
    if (r->n_prompt > r->ctx)
        return fail(err, QPACK_ERR_ARGUMENT, "the prompt has %zu tokens, more than the context of %u (see -c)",
                    r->n_prompt, r->ctx);
    if (need <= r->ctx)
        return 0;
    const char *s = r->n_prompt == 1 ? "" : "s";
    if (need > max)
        return fail(err, QPACK_ERR_ARGUMENT,
                    "the prompt (%zu token%s) and -n %d need %" PRIu64 " positions (the last token made is "
                    "printed, not fed), more than this model's maximum of %u: lower -n", r->n_prompt, s, o->n_new,
                    need, max);
    return fail(err, QPACK_ERR_ARGUMENT,
                "the prompt (%zu token%s) and -n %d need %" PRIu64 " positions (the last token made is printed, "
                "not fed), more than the context of %u: raise -c to %" PRIu64 " (at most %u) or lower -n",
                r->n_prompt, s, o->n_new, need, r->ctx, need, max);
}

/* ---- tokens and text ------------------------------------------------------------ */

/* Ids separated by blanks or commas; the vocabulary is checked later. */
static int parse_ids(const char *text, int32_t **out, size_t *n, qpack_error *err)
{
    size_t cap = strlen(text) / 2 + 1, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return fail(err, QPACK_ERR_MEMORY, "out of memory");
    for (const char *p = text; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        unsigned long v = *p >= '0' && *p <= '9' ? strtoul(p, &end, 10) : 0;
        if (*p < '0' || *p > '9' || errno || v > INT32_MAX || !strchr(" ,\t\n", *end)) {
            free(ids);
            return fail(err, QPACK_ERR_ARGUMENT, "--ids: '%.*s' is not a token id", (int)strcspn(p, " ,\t\n"), p);
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    if (!k) {
        free(ids);
        return fail(err, QPACK_ERR_ARGUMENT, "--ids: no token ids given");
    }
    *out = ids;
    *n = k;
    return 0;
}

int qrun_tokenize(const struct run_state *r, const char *text, size_t len, int32_t **ids, size_t *n,
                  qpack_error *err)
{
    return qpack_tokenize(r->tok, text, len, ids, n, err) ? -1 : 0;
}

bool qrun_is_end(const struct run_state *r, int32_t id)
{
    for (int i = 0; i < r->n_extra_ends; i++)
        if (r->extra_ends[i] == id)
            return true;
    return qpack_token_is_end(r->m, id);
}

/* The tokenizer's end tokens: the model is opened without its own copy of
 * the tokenizer (qpack_model_params.skip_tokenizer), so it knows only eos */
static void find_extra_ends(struct run_state *r)
{
    static const char *const names[] = {"<|im_end|>", "<|endoftext|>"};
    for (int i = 0; i < 2; i++) {
        int32_t *ids;
        size_t n;
        if (qpack_tokenize(r->tok, names[i], strlen(names[i]), &ids, &n, NULL) == QPACK_OK && n == 1)
            r->extra_ends[r->n_extra_ends++] = ids[0];
        free(ids);
    }
}

/* The tokenizer: --tokenizer's, or the one the model carries. A model
 * without one runs ids; one whose tokenizer is damaged does not. */
static int load_tokenizer(struct run_state *r, qpack_error *err)
{
    const struct options *o = r->o;
    bool text_in = o->prompt || o->chat;
    if (o->tokenizer ? qpack_tokenizer_load(&r->own_tok, o->tokenizer, err)
                     : qpack_tokenizer_load_model(&r->own_tok, o->model, o->mp.backend, err))
        return -1;
    r->tok = r->own_tok;
    if (!r->tok && text_in)
        return fail(err, QPACK_ERR_FORMAT, "%s carries no tokenizer (pack with a tokenizer.json, or use --tokenizer)",
                    o->model);
    if (!r->tok && !o->print_ids)
        fprintf(stderr, "qrun: note: %s carries no tokenizer: printing token ids\n", o->model);
    if (r->tok)
        find_extra_ends(r);
    return 0;
}

/* The one-shot prompt's tokens, before the model is loaded. */
static int prepare_prompt(struct run_state *r, qpack_error *err)
{
    const struct options *o = r->o;
    if (o->ids)
        return parse_ids(o->ids, &r->prompt, &r->n_prompt, err);
    char *wrapped = NULL;
    const char *text = o->prompt;
    size_t len = strlen(text);
    if (o->chat) {
        qpack_chat_message msgs[2] = {{"system", o->system}, {"user", o->prompt}};
        if (qpack_chat_render(msgs + !o->system, 1 + !!o->system, o->think, &wrapped, &len, err))
            return -1;
        text = wrapped;
    }
    int rc = qrun_tokenize(r, text, len, &r->prompt, &r->n_prompt, err);
    free(wrapped);
    if (!rc && r->n_prompt == 0)
        rc = fail(err, QPACK_ERR_ARGUMENT, "the prompt encodes to no tokens");
    return rc;
}

static int check_vocab(const struct run_state *r, qpack_error *err)
{
    uint32_t vocab = r->info->vocab;
    for (size_t i = 0; i < r->n_prompt; i++)
        if ((uint32_t)r->prompt[i] >= vocab)
            return fail(err, QPACK_ERR_ARGUMENT, "%s %d is outside this model's vocabulary of %u (ids 0 to %u)",
                        r->o->ids ? "--ids: token id" : "prompt token", r->prompt[i], vocab, vocab - 1);
    return 0;
}

/* ---- output -------------------------------------------------------------------- */

/* A token that cannot be written stops the run; main reports it (or, for
 * a closed pipe, says nothing), so this message is never printed. */
static int lost_output(qpack_error *err)
{
    return fail(err, QPACK_ERR_IO, "writing standard output failed");
}

static int put_text(const char *text, size_t len, qpack_error *err)
{
    if (len && (qp_stdout_write(text, len) || qp_stdout_flush()))
        return lost_output(err);
    return 0;
}

/* ---- thinking apart -------------------------------------------------------------- */

/* A --chat --think reply's reasoning goes to stderr (faint on a terminal),
 * ended by a line break when the answer starts; the answer to stdout. So
 * stdout holds only answers, as without thinking. */
static bool splits_thinking(const struct run_state *r)
{
    return r->o->chat && r->o->think && r->tok && !r->o->print_ids;
}

static void close_reasoning(struct run_state *r)
{
    if (!r->reasoning_open)
        return;
    fputs(r->faint ? "\033[0m\n" : "\n", stderr);
    r->reasoning_open = false;
}

static int show_part(void *arg, enum think_part part, const char *text, size_t len)
{
    struct run_state *r = arg;
    if (part == THINK_REASONING) {
        if (!r->reasoning_open && r->faint)
            fputs("\033[2m", stderr);
        r->reasoning_open = true;
        fwrite(text, 1, len, stderr);
        fflush(stderr);
        return 0;
    }
    close_reasoning(r);
    return put_text(text, len, r->text_err);
}

/* A reply's text: to stdout, or split by show_part */
static int reply_text(struct run_state *r, const char *text, size_t len, qpack_error *err)
{
    if (!splits_thinking(r))
        return put_text(text, len, err);
    r->text_err = err;
    return think_text_push(&r->think, text, len, show_part, r);
}

/* Prints one token: its id, or its text through the stop strings. *stop:
 * a stop string is complete. */
static int emit_token(struct run_state *r, int32_t id, bool *stop, qpack_error *err)
{
    *stop = false;
    progress_clear();
    if (r->o->print_ids || !r->tok) {
        printf("%s%d", r->in_reply ? " " : "", id);
        return qp_stdout_flush() ? lost_output(err) : 0;
    }
    size_t len;
    const char *text = qpack_decoder_push(r->decoder, id, &len);
    if (!r->o->n_stops)
        return reply_text(r, text, len, err);
    int hit = stop_text_push(&r->stop, text, len, &text, &len);
    if (hit < 0)
        return fail(err, QPACK_ERR_MEMORY, "out of memory");
    *stop = hit;
    return reply_text(r, text, len, err);
}

/* Ends a reply's output. After a signal (or Ctrl-C in a chat) only the
 * complete characters already printed stay (a held partial character is
 * dropped, not replaced); otherwise a partial character left at the end
 * becomes U+FFFD. */
void qrun_end_reply(struct run_state *r, bool newline_always)
{
    bool cut = qrun_stop_signal || qrun_reply_stopped;
    if (r->tok && !r->o->print_ids) {
        size_t len;
        const char *tail = qpack_decoder_finish(r->decoder, !cut, &len);
        qpack_error ignore;
        if (r->o->n_stops) {
            if (!cut && !r->stop.stopped && stop_text_push(&r->stop, tail, len, &tail, &len) >= 0)
                reply_text(r, tail, len, &ignore);
            stop_text_finish(&r->stop, &tail, &len);
        }
        if (!cut)
            reply_text(r, tail, len, &ignore);
        r->text_err = &ignore;
        if (!cut)
            think_text_finish(&r->think, show_part, r);
        think_text_init(&r->think);
        close_reasoning(r);
    }
    if (r->in_reply || newline_always)
        putchar('\n');
    qp_stdout_flush();
    /* the notes after the reply's line, not inside it */
    if (r->cut_by_n && r->chat_budget)
        fprintf(stderr, "qrun: the reply was cut at %d tokens, a chat's default for a model without a "
                "generation_config.json (-n sets another)\n", r->o->n_new);
    else if (r->cut_by_n)
        fprintf(stderr, "qrun: the reply was cut at -n %d tokens\n", r->o->n_new);
    if (r->cut_by_ctx)
        fprintf(stderr, "qrun: the reply reached the end of the context (%u positions)\n", r->ctx);
    if (r->ended_at_once)
        fprintf(stderr, "qrun: the reply is empty: the model ended its turn at once\n");
    r->cut_by_n = r->cut_by_ctx = r->ended_at_once = false;
}

/* ---- feeding ------------------------------------------------------------------- */

struct prompt_progress {
    size_t base, total;         /* positions done before this call, and in all */
    double t0;
};

#define PROMPT_PROGRESS_AFTER_MS 300.0   /* a short turn draws no line */

static void on_prompt_progress(void *user, size_t done, size_t total)
{
    struct prompt_progress *p = user;
    (void)total;
    double ms = qp_now_ms() - p->t0;
    done += p->base;
    if (ms < PROMPT_PROGRESS_AFTER_MS || done >= p->total)
        return;
    double rate = done / (ms / 1e3);
    char left[32];
    progress_duration(left, (double)(p->total - done) / rate);
    progress_show(false, "prompt: %zu of %zu positions, %.1f tokens/s, %s left", done, p->total, rate, left);
}

/* --dump-logits: written whole or not at all (fsafe.h). */
static int dump_logits(const struct run_state *r, qpack_error *err)
{
    uint32_t n = r->info->vocab;
    const double *logits = qpack_logits(r->s);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return fail(err, QPACK_ERR_MEMORY, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        v[i] = (float)logits[i];
    const char *inputs[] = {r->o->model, r->o->tokenizer, NULL};
    qp_err e = {{0}};
    int rc = fs_write_file(r->o->dump_logits, v, (size_t)n * sizeof *v, inputs, &e);
    free(v);
    return rc ? fail(err, QPACK_ERR_IO, "%s", e.msg) : 0;
}

/* --dump-logits-all: a block of positions at a time into the file */
static int feed_all_rows(struct run_state *r, const int32_t *seq, size_t n, struct prompt_progress *pp,
                         qpack_error *err)
{
    uint32_t vocab = r->info->vocab;
    size_t piece = r->info->block_positions ? r->info->block_positions : 1;
    float *rows = malloc(piece * vocab * sizeof *rows);
    struct fs_out out;
    qp_err e = {{0}};
    if (!rows)
        return fail(err, QPACK_ERR_MEMORY, "out of memory");
    if (fs_out_open(&out, r->o->dump_logits_all, 0, &e)) {
        free(rows);
        return fail(err, QPACK_ERR_IO, "%s", e.msg);
    }
    int rc = 0;
    for (size_t at = 0; !rc && at < n; at += piece) {
        size_t len = n - at < piece ? n - at : piece;
        pp->base = at;
        rc = qpack_feed_all_logits(r->s, seq + at, len, rows, err) ? -1 : 0;
        if (!rc && fs_out_write(&out, rows, len * vocab * sizeof *rows, &e))
            rc = fail(err, QPACK_ERR_IO, "%s", e.msg);
    }
    free(rows);
    if (rc || qrun_stop_signal || qrun_reply_stopped) {
        fs_out_abort(&out);
        return rc;
    }
    return fs_out_commit(&out, &e) ? fail(err, QPACK_ERR_IO, "%s", e.msg) : 0;
}

/* Feeds ids[0..n) at the next positions; the last one computes logits.
 * The caller checked that they fit the context. */
int qrun_feed(struct run_state *r, const int32_t *ids, size_t n, qpack_error *err)
{
    qpack_session_stats before, after;
    qpack_session_get_stats(r->s, &before);
    struct prompt_progress pp = {0, n, qp_now_ms()};
    qpack_session_set_progress(r->s, on_prompt_progress, &pp);
    int rc = r->o->dump_logits_all ? feed_all_rows(r, ids, n, &pp, err) : qpack_feed(r->s, ids, n, err) ? -1 : 0;
    qpack_session_set_progress(r->s, NULL, NULL);
    progress_clear();
    qpack_session_get_stats(r->s, &after);
    r->prompt_tokens += (uint32_t)n;
    r->prompt_ms += qp_now_ms() - pp.t0;
    r->prompt_calls += after.calls - before.calls;
    if (!rc && r->o->dump_logits && !qrun_stop_signal)
        rc = dump_logits(r, err);
    return rc;
}

/* ---- generating ---------------------------------------------------------------- */

static bool stopping(void)
{
    return qrun_stop_signal || qrun_reply_stopped;
}

/* The interactive chat keeps each reply's tokens. */
static int record_reply_token(struct run_state *r, int32_t id, qpack_error *err)
{
    if (!r->n_turns)
        return 0;
    struct turn *t = &r->turns[r->n_turns - 1];
    if (t->n_reply == t->cap_reply) {
        size_t cap = t->cap_reply ? t->cap_reply * 2 : 64;
        int32_t *v = realloc(t->reply, cap * sizeof *v);
        if (!v)
            return fail(err, QPACK_ERR_MEMORY, "out of memory");
        t->reply = v;
        t->cap_reply = cap;
    }
    t->reply[t->n_reply++] = id;
    return 0;
}

/* Feeds the token just printed: one position, or with --lookup one block
 * with a draft (queue: the model's tokens of that pass, the last pending). */
static int step(struct run_state *r, int32_t id, int32_t *queue, uint32_t *q_len, qpack_error *err)
{
    double t0 = qp_now_ms();
    qpack_session_stats before, after;
    qpack_session_get_stats(r->s, &before);
    int rc = r->o->lookup ? qpack_lookup_step(r->s, id, r->o->lookup, queue, q_len, err)
                          : qpack_feed(r->s, &id, 1, err);
    qpack_session_get_stats(r->s, &after);
    r->gen_ms += qp_now_ms() - t0;
    r->decode_calls += after.calls - before.calls;
    r->decode_steps++;
    return rc ? -1 : 0;
}

/* Generates one reply after the prompt just fed: up to -n tokens and room
 * more positions, ending early at an end id with --chat (neither printed
 * nor fed) or a stop string. The last token printed is not fed: a chat's
 * next turn feeds it first. */
int qrun_reply(struct run_state *r, uint32_t room, qpack_error *err)
{
    const struct options *o = r->o;
    uint32_t start = qpack_session_pos(r->s), fed_printed = 0;
    int32_t queue[QRUN_LOOKUP_MAX + 1];
    uint32_t q_len = 0, q_at = 0;
    int rc = 0;
    r->in_reply = 0;
    r->cut_by_n = r->cut_by_ctx = r->ended_at_once = false;
    for (int32_t i = 0; i < o->n_new && !stopping(); i++) {
        /* a queued token but the last is a kept draft, already in the session */
        bool cached = q_at + 1 < q_len;
        int32_t id = q_at < q_len ? queue[q_at++] : qpack_sample(r->sampler, r->s);
        bool stop = false;
        if (o->chat && qrun_is_end(r, id)) {
            r->ended_at_once = i == 0;
            break;
        }
        rc = emit_token(r, id, &stop, err) || record_reply_token(r, id, err);
        if (rc)
            break;
        r->in_reply++;
        r->generated++;
        r->step_tokens += i > 0;      /* the first came from the prompt's pass */
        if (cached) {
            fed_printed++;
            continue;
        }
        r->cut_by_n = i + 1 == o->n_new && o->chat && !stop;
        if (stop || i + 1 == o->n_new || stopping())
            break;
        if (qpack_session_pos(r->s) + 1 > start + room) {
            r->cut_by_ctx = true;
            break;
        }
        q_at = q_len = 0;
        if (step(r, id, queue, &q_len, err)) {
            rc = stopping() ? 0 : -1;
            break;
        }
        fed_printed++;
    }
    /* a draft may have put tokens past the last one printed (an end id)
     * into the session: they leave it */
    uint32_t want = start + fed_printed;
    if (!rc && qpack_session_pos(r->s) > want)
        rc = qpack_session_rewind(r->s, want, err) ? -1 : 0;
    return rc;
}

/* ---- the two modes -------------------------------------------------------------- */

/* --prompt-cache: the file's session, cut to the longest prefix of the
 * prompt it holds, but one token short of the whole prompt at most (its
 * feed gives the logits); *reused its length, *whole whether the file
 * holds the whole prompt (then it is not saved again, as llama.cpp does
 * not). No file yet: an empty session. */
static int restore_prompt_cache(struct run_state *r, uint32_t *reused, bool *whole, qpack_error *err)
{
    const char *path = r->o->prompt_cache;
    *reused = 0;
    *whole = false;
    if (!path || (access(path, F_OK) && errno == ENOENT))
        return 0;
    uint32_t n;
    if (qpack_session_restore(r->s, path, &n, err))
        return -1;
    const int32_t *held = qpack_session_tokens(r->s);
    uint32_t k = 0;
    while (k < n && k < r->n_prompt && held[k] == r->prompt[k])
        k++;
    *whole = k == r->n_prompt;
    *reused = k < r->n_prompt || !k ? k : k - 1;
    if (r->o->stats)
        fprintf(stderr, "qrun: prompt cache %s: %u tokens restored, %u of the prompt's %zu reused\n", path, n,
                *reused, r->n_prompt);
    return qpack_session_rewind(r->s, *reused, err) ? -1 : 0;
}

static int one_shot(struct run_state *r, qpack_error *err)
{
    uint32_t reused;
    bool whole;
    int rc = restore_prompt_cache(r, &reused, &whole, err);
    if (rc)
        return rc;
    rc = qrun_feed(r, r->prompt + reused, r->n_prompt - reused, err);
    if (!rc && r->o->prompt_cache && !whole && !stopping())
        rc = qpack_session_save(r->s, r->o->prompt_cache, err) ? -1 : 0;
    if (rc && stopping())
        return 0;
    if (!rc && !stopping())
        rc = qrun_reply(r, r->ctx - qpack_session_pos(r->s), err);
    if (!rc || r->in_reply)
        qrun_end_reply(r, false);
    return rc;
}

/* The sampler of the options (over the tools' default), or of the model's
 * generation config when they set none (which depends on --think in a
 * chat) */
int qrun_new_sampler(struct run_state *r, qpack_error *err)
{
    const struct options *o = r->o;
    qpack_sampler_params sp = o->sp;
    bool by_default = !o->sampling_given && !o->lookup;
    if (by_default)
        r->model_sampling = qpack_model_sampling(r->m, !o->chat || o->think, &sp);
    if (o->stats && by_default)
        fprintf(stderr, "qrun: sampling as %s: temp %g, top-k %u, top-p %g, min-p %g, repeat-penalty %g (give "
                "--temp 0 for greedy)\n", r->model_sampling ? "the model's generation_config.json says"
                : "llama.cpp's default (the model has no generation_config.json)", sp.temperature, sp.top_k,
                sp.top_p, sp.min_p, sp.repeat_penalty);
    if (o->repeat_last_n_ctx)
        sp.repeat_last_n = r->ctx;
    qpack_sampler *s;
    if (qpack_sampler_new(&s, r->m, &sp, err))
        return -1;
    qpack_sampler_free(r->sampler);
    r->sampler = s;
    return 0;
}

/* A chat reply without -n runs until the end of its turn when the model's
 * authors gave it a generation config (an instruct checkpoint, which ends
 * its turns); without one (a GGUF, a base model, a stand-in of random
 * weights) it may never end one, and runs QRUN_CHAT_NEW tokens at most. */
static void set_chat_budget(struct run_state *r)
{
    qpack_sampler_params authors = qpack_sampler_default_params();
    if (!r->o->until_end || qpack_model_sampling(r->m, true, &authors))
        return;
    r->o->n_new = QRUN_CHAT_NEW;
    r->chat_budget = true;
}

/* ---- loading -------------------------------------------------------------------- */

struct load_progress {
    const char *name;
    const struct options *o;
    double t0;
};

static void on_load_progress(void *user, qpack_load_phase ph, uint64_t done, uint64_t total)
{
    struct load_progress *p = user;
    if (ph == QPACK_LOAD_CHECKSUMS) {
        double s = (qp_now_ms() - p->t0) / 1e3;
        char left[32] = "?";
        if (done && done < total)
            progress_duration(left, s / (double)done * (double)(total - done));
        progress_show(done == 0 || done == total, "loading %s: checksums %.0f%% of %.2f GB, %s left", p->name,
                      total ? 100.0 * (double)done / (double)total : 100.0, (double)total / 1e9,
                      done < total ? left : "nothing");
    } else if (ph == QPACK_LOAD_MAPS && p->o->mp.backend == QPACK_BACKEND_BPF) {
        progress_show(true, "loading %s: BPF maps, programs%s", p->name,
                      p->o->mp.stream ? " (--stream: the weights stay in the file)" : " and the weights' copy");
    } else if (ph == QPACK_LOAD_MAPS) {
        progress_show(true, "loading %s: the host twin's buffers", p->name);
    }
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

/* QP_BPF_STATS=1: the verifier's processed instructions per kernel, one
 * line (bpf only: the other backends load no programs) */
static void print_verifier_counts(const qpack_model_info *info)
{
    if (!info->n_programs)
        return;
    fprintf(stderr, "qrun: verifier processed instructions:");
    for (uint32_t k = 0; k < info->n_programs; k++)
        fprintf(stderr, " %s %" PRIu32, info->programs[k].name, info->programs[k].verified_insns);
    fprintf(stderr, "\n");
}

static int load_model(struct run_state *r, qpack_error *err)
{
    struct options *o = r->o;
    struct load_progress lp = {base_name(o->model), o, qp_now_ms()};
    qpack_model_params mp = o->mp;
    mp.ctx = o->ctx;        /* 0: the library's default, lowered to fit the memory */
    mp.progress = on_load_progress;
    mp.progress_user = &lp;
    mp.skip_tokenizer = true;     /* qrun has read it already */
    double t0 = qp_now_ms();
    if (o->mp.backend == QPACK_BACKEND_REF)
        progress_show(true, "loading %s: mapping the checkpoint", lp.name);
    int rc = qpack_model_open(&r->m, o->model, &mp, err) || qpack_session_new(&r->s, r->m, err) ? -1 : 0;
    progress_clear();
    if (rc)
        return -1;
    r->load_ms = qp_now_ms() - t0;
    r->info = qpack_model_get_info(r->m);
    if (getenv("QP_BPF_STATS"))
        print_verifier_counts(r->info);
    if (r->info->ctx < r->ctx) {
        /* the default context was lowered to fit the memory */
        r->ctx = r->info->ctx;
        if (!o->interactive && check_fits(r, err))
            return -1;
    }
    if (qrun_new_sampler(r, err))
        return -1;
    set_chat_budget(r);
    if (r->tok && qpack_decoder_new(&r->decoder, r->tok, true, err))
        return -1;
    stop_text_init(&r->stop, o->stops, o->n_stops);
    think_text_init(&r->think);
    r->faint = isatty(STDERR_FILENO);
    signal_session = r->s;
    return 0;
}

/* ---- statistics ------------------------------------------------------------------ */

static void print_startup(const struct run_state *r)
{
    const qpack_model_info *i = r->info;
    fprintf(stderr, "qrun: backend %s, start-up %.0f ms", i->backend, r->load_ms);
    if (!strcmp(i->backend, "bpf"))
        fprintf(stderr, " (checksums %.0f ms, maps and programs %.0f ms, weight copy %.0f ms)", i->checksum_ms,
                i->maps_ms, i->copy_ms);
    if (i->kernel_lanes)
        fprintf(stderr, ", kernel schedule: %u lane%s%s", i->kernel_lanes, i->kernel_lanes == 1 ? "" : "s",
                !i->lane_start                  ? ""
                : !strcmp(i->lane_start, "xdp") ? " (both started by one XDP test run)"
                                                : " (the second started by a thread)");
    else if (!strcmp(i->backend, "emu"))
        fprintf(stderr, " (checksums %.0f ms)", i->checksum_ms);
    else
        fprintf(stderr, " (the checkpoint mapped: each step reads its BF16 weights into float64)");
    fprintf(stderr, ", prompt %u token%s in %.0f ms", r->prompt_tokens, r->prompt_tokens == 1 ? "" : "s", r->prompt_ms);
    if (r->prompt_tokens)
        fprintf(stderr, " (%.1f ms/token, %.1f tokens/s)", r->prompt_ms / r->prompt_tokens,
                r->prompt_ms > 0 ? 1000.0 * r->prompt_tokens / r->prompt_ms : 0.0);
    fputc('\n', stderr);
}

static void print_generation(const struct run_state *r, const qpack_session_stats *st)
{
    const qpack_model_info *i = r->info;
    bool ref = !strcmp(i->backend, "ref");
    const char *calls = !strcmp(i->backend, "bpf") ? "bpf calls" : "kernel calls (host twin)";
    fprintf(stderr, "qrun: generated %u token%s", r->generated, r->generated == 1 ? "" : "s");
    /* per token, not per step: a --lookup step can make several */
    if (r->decode_steps && r->step_tokens)
        fprintf(stderr, ", %.1f ms/token (%.1f tokens/s) over %u decode steps", r->gen_ms / r->step_tokens,
                r->gen_ms > 0 ? 1000.0 * r->step_tokens / r->gen_ms : 0.0, r->decode_steps);
    if (r->decode_steps && r->o->lookup)
        fprintf(stderr, " (%.1f ms/step, %u tokens from them)", r->gen_ms / r->decode_steps, r->step_tokens);
    if (!r->decode_steps && r->generated)
        fprintf(stderr, " (the first comes from the prompt's pass: no decode step to time)");
    if (!ref) {
        if (r->prompt_tokens)
            fprintf(stderr, ", %.0f %s/prompt token", (double)r->prompt_calls / r->prompt_tokens, calls);
        if (r->decode_steps)
            fprintf(stderr, ", %.0f per decode step", (double)r->decode_calls / r->decode_steps);
        fprintf(stderr, ", longest call %.2f ms (%s), %" PRIu64 " of %" PRIu64 " calls over 10 ms, %" PRIu64
                " runs paused at --call-us", st->max_call_ms, st->max_call_kernel, st->slow_calls, st->calls,
                st->paused_calls);
        if (!strcmp(i->backend, "bpf"))
            fprintf(stderr, "; the programs alone (kernel clock): longest %.2f ms (%s), %" PRIu64
                    " over 10 ms", st->max_run_ms, st->max_run_kernel, st->slow_runs);
    }
    fputc('\n', stderr);
}

static void print_stats(const struct run_state *r)
{
    const qpack_model_info *i = r->info;
    qpack_session_stats st;
    qpack_session_get_stats(r->s, &st);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    print_startup(r);
    print_generation(r, &st);
    if (r->o->lookup)
        fprintf(stderr, "qrun: lookup: %" PRIu64 " passes for %u tokens, %" PRIu64 " drafted tokens, %" PRIu64 " kept\n",
                st.lookup_passes, r->generated, st.lookup_drafted, st.lookup_kept);
    if (st.n_kernels) {
        fprintf(stderr, "qrun: kernel time (all tokens, both threads):");
        for (uint32_t k = 0; k < st.n_kernels; k++)
            fprintf(stderr, " %s %.0f ms/%" PRIu64, st.kernels[k].name, st.kernels[k].ms, st.kernels[k].calls);
        fputc('\n', stderr);
    }
    fprintf(stderr, "qrun: ");
    if (!strcmp(i->backend, "bpf"))
        fprintf(stderr, "BPF maps %.1f MB (weights %.1f MB%s), ", (double)i->map_bytes / 1e6,
                (double)i->weight_bytes / 1e6, r->o->mp.stream ? ": --stream reads them from the file" : "");
    else if (!strcmp(i->backend, "emu"))
        fprintf(stderr, "weights read in place from the mapped container (%.1f MB), ", (double)i->file_bytes / 1e6);
    /* the cache in KiB, as the docs give it: its sizes are whole KiB */
    fprintf(stderr, "KV cache %s %.1f KiB/position, peak RSS %.0f MB\n", i->kv_cache,
            (double)i->kv_bytes_per_position / 1024, ru.ru_maxrss * 1024 / 1e6);
}

/* ---- main ------------------------------------------------------------------------- */

/* Everything before the load: a usage error (status 2) or a failure (1). */
static int prepare(struct run_state *r, qpack_model_info *inspected, qpack_error *err)
{
    struct options *o = r->o;
    if (check_outputs(o, err))
        return QRUN_FAILED;
    if (qpack_model_inspect(o->model, o->mp.backend, inspected, err))
        return QRUN_FAILED;
    r->info = inspected;
    if (check_ctx(r, err))
        return QRUN_USAGE;
    if (qrun_read_prompt(o)) {
        err->message[0] = 0;
        return QRUN_FAILED;
    }
    if (load_tokenizer(r, err))
        return QRUN_FAILED;
    if (o->interactive)
        return 0;
    if (prepare_prompt(r, err) || check_vocab(r, err))
        return QRUN_FAILED;
    return check_fits(r, err) ? QRUN_USAGE : 0;
}

static int run(struct run_state *r, qpack_error *err)
{
    qpack_model_info inspected;
    int status = prepare(r, &inspected, err);
    if (status)
        return status;
    if (load_model(r, err))
        return QRUN_FAILED;
    interactive_mode = r->o->interactive;
    qrun_set_phase(QRUN_WORKING);
    if (qrun_stop_signal)
        return 0;
    int rc = r->o->interactive ? qrun_interactive(r, err) : one_shot(r, err);
    return rc ? QRUN_FAILED : 0;
}

static void release(struct run_state *r)
{
    signal_session = NULL;
    qrun_turns_free(r);
    free(r->system_text);
    stop_text_free(&r->stop);
    qpack_decoder_free(r->decoder);
    qpack_sampler_free(r->sampler);
    qpack_session_free(r->s);
    qpack_model_free(r->m);
    qpack_tokenizer_free(r->own_tok);
    free(r->prompt);
    free(r->o->prompt_text);
}

static void install_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int main(int argc, char **argv)
{
    qp_stdout_init();
    tok_cli_set_model_loader(tok_cli_container_loader);
    if (argc > 1 && (!strcmp(argv[1], "tokenize") || !strcmp(argv[1], "detokenize")))
        return tok_cli_main(argc - 1, argv + 1, "qrun");
    if (argc > 1 && !strcmp(argv[1], "serve"))
        return serve_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "listen"))
        return listen_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "ask"))
        return ask_main(argc - 1, argv + 1);
    struct options o;
    if (qrun_parse_options(&o, argc, argv))
        return QRUN_USAGE;
    progress_init("qrun", !o.quiet);
    /* a loaded model (qpack load) is opened, not loaded: no file to check,
     * no privilege to load BPF programs needed */
    bool pinned = !strncmp(o.model, "pin:", 4);
    if (!pinned && check_model_path(&o))
        return QRUN_FAILED;
    if (!pinned && o.mp.backend == QPACK_BACKEND_BPF && check_bpf_privilege())
        return QRUN_FAILED;
    install_signals();
    qp_exit_on_sigbus("qrun: the model file was truncated or changed on disk while qrun was reading it");
    struct run_state r = {.o = &o};
    qpack_error err = {0};
    int status = run(&r, &err);
    /* output that could not be written has its line from qp_stdout_finish */
    bool lost = qp_stdout_failed();
    if (!status && o.stats && !qrun_stop_signal && !lost)
        print_stats(&r);
    /* an error caused by the interruption itself is not worth a line */
    if (status && !qrun_stop_signal && !lost && err.message[0])
        fprintf(stderr, "qrun: %s\n", err.message);
    if (qrun_stop_signal) {
        /* what was printed is out; the process's end releases the model
         * (its maps and threads) faster than a teardown would */
        progress_clear();
        fflush(stdout);
        fprintf(stderr, "qrun: interrupted\n");
        _exit(128 + qrun_stop_signal);
    }
    release(&r);
    /* lost output: the finish names it (or is quiet for a closed pipe) */
    if (lost)
        status = 0;
    return qp_stdout_finish("qrun", status ? status : r.bad_input ? QRUN_FAILED : 0);
}
