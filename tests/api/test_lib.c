/* test_lib.c - include/qpack.h as a user sees it, on a tiny random model
 * with the official Qwen3 tokenizer:
 *   - feeding and the argmax give qrun's tokens (qrun --print-ids, run as a
 *     program, is the independent expectation), on emu and (root) bpf;
 *   - qpack_feed_all_logits row i equals the logits of a fresh session fed
 *     the first i + 1 tokens; a rewind gives the bits of a fresh feed;
 *     two sessions interleaved give what each gives alone, with no
 *     recompute (each has its own KV cache slot), on emu and bpf; a switch
 *     of sessions recomputes only when they share a KV cache;
 *   - checks before compute: ids outside the vocabulary, the context,
 *     the session limit, a missing file, each with its code;
 *   - the sampler: greedy is the argmax, a seed repeats, min-p 1 is greedy
 *     at any temperature, the repeat penalty as llama.cpp defines it;
 *   - text: tokenize/detokenize against known ids, the streaming decoder
 *     never cuts a character, the chat template's exact text;
 *   - an interrupt stops a feed from another thread; two emu models stepped
 *     from two threads at once give the bits of each alone; a call budget
 *     of 2 us pauses products and attention, cuts blocks, and changes no bit;
 *   - what qrun and qeval need: lookup decoding gives greedy decoding's
 *     tokens and logits (plain greedy steps are the expectation), every
 *     row of qpack_feed_each equals qpack_feed_all_logits's, progress after
 *     each block, hidden states within 1e-3 of the float64 reference's,
 *     qpack_model_inspect agrees with the opened model, per-kernel calls
 *     add up, the tokenizer of a container read alone, the recorded source
 *     files equal the folder's hashes (and a changed file differs);
 *   - (root) a model qpack load pinned opens as pin:NAME with the loaded
 *     context and sessions and the bits of the container in-process;
 *   - (root) batch steps under --schedule kernel give the host schedule's
 *     bits, its two lanes start from one XDP test run, and an interrupt
 *     cancels a kernel-scheduled feed. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qpack.h"
#include "qp_test.h"

static char model_path[512];

static void make_model(void)
{
    char args[512];
    snprintf(args, sizeof args, "--preset tiny --vocab 151936 --seed 2 --tokenizer-dir %s/assets/qwen3-tokenizer",
             QP_SOURCE_DIR);
    snprintf(model_path, sizeof model_path, "%s", qp_test_model("ck", args, ""));
    /* the batches' other formats: mixed int4, and a stress checkpoint's */
    pack_checkpoint("ck", "int4.qpk", "--quiet --format int4");
    snprintf(args, sizeof args, "--preset tiny --vocab 151936 --seed 5 --stress --tokenizer-dir %s/assets/qwen3-tokenizer",
             QP_SOURCE_DIR);
    gen("stress", args);
    pack_checkpoint("stress", "stress-int8.qpk", "--quiet --format int8");
    pack_checkpoint("stress", "stress-int4-pure.qpk", "--quiet --format int4-pure");
}

static qpack_model *open_with(const char *path, const qpack_model_params *p)
{
    qpack_model *m;
    qpack_error e;
    ck_assert_msg(qpack_model_open(&m, path, p, &e) == QPACK_OK, "%s: %s", path, e.message);
    return m;
}

static qpack_model *open_model_at(const char *path, qpack_backend backend, uint32_t ctx, uint32_t sessions,
                                  bool stream)
{
    qpack_model_params p = qpack_model_default_params();
    p.backend = backend;
    p.ctx = ctx;
    p.max_sessions = sessions;
    p.stream = stream;
    return open_with(path, &p);
}

static qpack_model *open_model(qpack_backend backend, uint32_t ctx, uint32_t sessions)
{
    return open_model_at(model_path, backend, ctx, sessions, false);
}

static qpack_session *new_session(qpack_model *m)
{
    qpack_session *s;
    qpack_error e;
    ck_assert_msg(qpack_session_new(&s, m, &e) == QPACK_OK, "%s", e.message);
    return s;
}

static void feed(qpack_session *s, const int32_t *ids, size_t n)
{
    qpack_error e;
    ck_assert_msg(qpack_feed(s, ids, n, &e) == QPACK_OK, "%s", e.message);
}

static const int32_t hello[] = {9707, 11, 1879, 0};    /* "Hello, world!" */

/* greedy ids after the prompt, n of them, as text "a b c" */
static void greedy(qpack_session *s, int n, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        int32_t next = qpack_argmax(s);
        at += (size_t)snprintf(out + at, cap - at, "%s%d", i ? " " : "", next);
        if (i + 1 < n)
            feed(s, &next, 1);
    }
}

static void generates_qruns_tokens_on(qpack_backend backend, const char *name)
{
    int rc = run("%s -m %s --backend %s --ids '9707 11 1879 0' -n 12 --temp 0 --print-ids", QP_QRUN, model_path,
                 name);
    ck_assert_msg(rc == 0, "qrun: %s", out_text);
    char want[512];
    snprintf(want, sizeof want, "%s", out_text);
    want[strcspn(want, "\n")] = 0;
    qpack_model *m = open_model(backend, 0, 1);
    const qpack_model_info *i = qpack_model_get_info(m);
    ck_assert_uint_eq(i->vocab, 151936);
    ck_assert_uint_eq(i->hidden, 64);
    ck_assert(i->has_tokenizer);
    ck_assert_str_eq(i->backend, name);
    qpack_session *s = new_session(m);
    ck_assert_ptr_null(qpack_logits(s));
    ck_assert_int_eq(qpack_argmax(s), -1);
    feed(s, hello, 4);
    char got[512];
    greedy(s, 12, got, sizeof got);
    ck_assert_str_eq(got, want);
    ck_assert_uint_eq(qpack_session_pos(s), 15);
    qpack_session_stats st;
    qpack_session_get_stats(s, &st);
    ck_assert_uint_eq(st.tokens, 15);
    ck_assert_uint_gt(st.calls, 0);
    /* the kernel clocks the program inside the call we time around it */
    ck_assert(st.max_run_ms <= st.max_call_ms);
    ck_assert_uint_le(st.slow_runs, st.slow_calls);
    if (!strcmp(name, "bpf"))
        ck_assert(st.max_run_ms > 0);
    else
        ck_assert(st.max_run_ms == 0 && st.slow_runs == 0);
    qpack_session_free(s);
    qpack_model_free(m);
}

START_TEST(emu_generates_qruns_tokens)
{
    generates_qruns_tokens_on(QPACK_BACKEND_EMU, "emu");
}
END_TEST

START_TEST(bpf_generates_qruns_tokens)
{
    if (geteuid() != 0)
        return;     /* BPF needs root */
    generates_qruns_tokens_on(QPACK_BACKEND_BPF, "bpf");
}
END_TEST

START_TEST(all_logits_rows_equal_fresh_feeds_of_each_prefix)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 2);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    const int32_t ids[] = {9707, 11, 1879, 0, 151644, 872, 198, 9707, 11, 1879, 0, 13, 576, 1207, 374, 220, 17, 18};
    size_t n = sizeof ids / sizeof *ids;
    float *all = malloc(n * vocab * sizeof *all);
    qpack_session *s = new_session(m);
    qpack_error e;
    ck_assert_msg(qpack_feed_all_logits(s, ids, n, all, &e) == QPACK_OK, "%s", e.message);
    qpack_session *fresh = new_session(m);
    for (size_t k = 1; k <= n; k += 4) {
        ck_assert_int_eq(qpack_session_rewind(fresh, 0, &e), QPACK_OK);
        feed(fresh, ids, k);
        const double *l = qpack_logits(fresh);
        for (uint32_t v = 0; v < vocab; v++)
            ck_assert_msg(all[(k - 1) * vocab + v] == (float)l[v], "row %zu id %u", k - 1, v);
    }
    qpack_session_free(fresh);
    qpack_session_free(s);
    free(all);
    qpack_model_free(m);
}
END_TEST

START_TEST(rewind_gives_the_bits_of_a_fresh_feed)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 2);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    const int32_t a[] = {9707, 11, 1879, 0, 13, 13}, b[] = {9707, 11, 576, 1207};
    qpack_session *s = new_session(m), *fresh = new_session(m);
    feed(s, a, 6);
    qpack_error e;
    ck_assert_int_eq(qpack_session_rewind(s, 7, &e), QPACK_ERR_ARGUMENT);
    ck_assert_int_eq(qpack_session_rewind(s, 2, &e), QPACK_OK);
    ck_assert_ptr_null(qpack_logits(s));
    feed(s, b + 2, 2);
    feed(fresh, b, 4);
    ck_assert_mem_eq(qpack_logits(s), qpack_logits(fresh), vocab * sizeof(double));
    ck_assert_mem_eq(qpack_session_tokens(s), b, sizeof b);
    qpack_session_free(fresh);
    qpack_session_free(s);
    qpack_model_free(m);
}
END_TEST

/* n greedy steps after feeding prompt: each step's logits (n * vocab
 * doubles) into out; the session stays open */
static void greedy_logits(qpack_session *s, int step, uint32_t vocab, double *out)
{
    int32_t next = qpack_argmax(s);
    memcpy(out + (size_t)step * vocab, qpack_logits(s), vocab * sizeof *out);
    feed(s, &next, 1);
}

/* ---- batches ---------------------------------------------------------- */

#define BATCH_SESSIONS 3
#define BATCH_TOKENS 40

/* the logits after the first p tokens of seq, fed alone in session ref */
static void logits_alone(qpack_session *ref, const int32_t *seq, uint32_t p, double *out, uint32_t vocab)
{
    qpack_error e;
    ck_assert_int_eq(qpack_session_rewind(ref, 0, &e), QPACK_OK);
    feed(ref, seq, p);
    memcpy(out, qpack_logits(ref), vocab * sizeof *out);
}

/* Sessions fed together in batches get the bits each gets alone, whatever
 * shares its blocks, where it sits in them and how its tokens are cut:
 * steps of 1, B - 1, B and B + 1 positions in all (B, the block size), a
 * step of one token of each session, one whose items span two blocks, the
 * items in other orders. */
static void batches_give_what_each_gives_alone_on(const char *path, qpack_backend backend, bool stream)
{
    qpack_model *m = open_model_at(path, backend, 64, BATCH_SESSIONS + 1, stream);
    const qpack_model_info *info = qpack_model_get_info(m);
    uint32_t vocab = info->vocab, B = info->block_positions;
    ck_assert_uint_ge(B, 4);
    int32_t seq[BATCH_SESSIONS][BATCH_TOKENS];
    for (int k = 0; k < BATCH_SESSIONS; k++)
        for (int t = 0; t < BATCH_TOKENS; t++)
            seq[k][t] = (int32_t)((k * 7919 + t * 104729 + 13) % 151000);
    qpack_session *s[BATCH_SESSIONS], *ref = new_session(m);
    for (int k = 0; k < BATCH_SESSIONS; k++)
        s[k] = new_session(m);
    /* each step: (session, tokens) items, in this order */
    struct { int k; uint32_t n; } steps[][BATCH_SESSIONS] = {
        {{0, 1}},                               /* one position */
        {{0, B / 2 - 1}, {1, B / 2}},           /* B - 1 */
        {{1, 3}, {2, B - 3}},                   /* B */
        {{2, 2}, {0, B - 1}},                   /* B + 1 */
        {{0, 1}, {1, 1}, {2, 1}},               /* a token of each */
        {{1, B + 4}, {2, 1}},                   /* an item across two blocks */
        {{2, 1}, {0, 1}},                       /* the other way round */
    };
    double *want = malloc(vocab * sizeof *want);
    uint32_t fed[BATCH_SESSIONS] = {0};
    for (size_t st = 0; st < sizeof steps / sizeof *steps; st++) {
        qpack_batch_item items[BATCH_SESSIONS];
        size_t n = 0;
        for (int i = 0; i < BATCH_SESSIONS && steps[st][i].n; i++, n++) {
            int k = steps[st][i].k;
            items[n] = (qpack_batch_item){s[k], seq[k] + fed[k], steps[st][i].n};
        }
        qpack_error e;
        ck_assert_msg(qpack_feed_batch(items, n, &e) == QPACK_OK, "step %zu: %s", st, e.message);
        for (size_t i = 0; i < n; i++) {
            int k = steps[st][i].k;
            fed[k] += steps[st][i].n;
            ck_assert_uint_eq(qpack_session_pos(s[k]), fed[k]);
            logits_alone(ref, seq[k], fed[k], want, vocab);
            ck_assert_msg(memcmp(qpack_logits(s[k]), want, vocab * sizeof *want) == 0,
                          "%s, %s%s, step %zu: session %d at %u differs from it alone", path, info->backend,
                          stream ? " --stream" : "", st, k, fed[k]);
        }
    }
    /* a batch that cannot run changes nothing: a session twice, a token
     * past the vocabulary, more than the context */
    qpack_error e;
    qpack_batch_item twice[2] = {{s[0], seq[0], 1}, {s[0], seq[0], 1}};
    ck_assert_int_eq(qpack_feed_batch(twice, 2, &e), QPACK_ERR_ARGUMENT);
    int32_t bad = (int32_t)vocab;
    qpack_batch_item past[2] = {{s[1], seq[1], 1}, {s[2], &bad, 1}};
    ck_assert_int_eq(qpack_feed_batch(past, 2, &e), QPACK_ERR_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "item 1"));
    int32_t many[64] = {0};
    qpack_batch_item full[1] = {{s[0], many, 64}};
    ck_assert_int_eq(qpack_feed_batch(full, 1, &e), QPACK_ERR_CONTEXT);
    for (int k = 0; k < BATCH_SESSIONS; k++) {
        ck_assert_uint_eq(qpack_session_pos(s[k]), fed[k]);
        qpack_session_free(s[k]);
    }
    free(want);
    qpack_session_free(ref);
    qpack_model_free(m);
}

/* A model qpack load pinned, opened by the library as pin:NAME: the
 * loaded context and sessions, each session's logits the bits of the same
 * container opened in-process, its slots claimed (the third of two is
 * refused, and taken once one is freed), and the emu backend refused. */
START_TEST(a_loaded_model_gives_the_bits_of_one_opened_in_process)
{
    if (geteuid() != 0)     /* qpack load needs root */
        return;
    char name[64], pinned[80];
    snprintf(name, sizeof name, "tl%d", (int)getpid());
    snprintf(pinned, sizeof pinned, "pin:%s", name);
    int rc = run("%s load %s --name %s -c 128 --sessions 2", QP_QPACK, path_of("int4.qpk"), name);
    ck_assert_msg(rc == 0, "qpack load: %s", out_text);
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % 5000);
    qpack_model *in = open_model_at(path_of("int4.qpk"), QPACK_BACKEND_BPF, 128, 2, false);
    qpack_session *x = new_session(in), *y = new_session(in);
    feed(x, ids, 20);
    feed(y, ids + 5, 9);
    qpack_model *m = open_model_at(pinned, QPACK_BACKEND_BPF, 0, 0, false);
    ck_assert_uint_eq(qpack_model_get_info(m)->ctx, 128);
    ck_assert_uint_eq(qpack_model_get_info(m)->max_sessions, 2);
    size_t bytes = qpack_model_get_info(m)->vocab * sizeof(double);
    qpack_session *a = new_session(m), *b = new_session(m), *c;
    feed(b, ids + 5, 9);    /* interleaved with a: each in its own slot */
    feed(a, ids, 20);
    ck_assert_msg(!memcmp(qpack_logits(a), qpack_logits(x), bytes), "the loaded model's logits differ");
    ck_assert_msg(!memcmp(qpack_logits(b), qpack_logits(y), bytes), "the second session's logits differ");
    qpack_error e;
    ck_assert_int_eq(qpack_session_new(&c, m, &e), QPACK_ERR_BUSY);
    ck_assert_msg(strstr(e.message, "all 2 sessions"), "%s", e.message);
    qpack_session_free(b);
    c = new_session(m);
    feed(c, ids + 5, 9);
    ck_assert_msg(!memcmp(qpack_logits(c), qpack_logits(y), bytes), "a reclaimed slot's logits differ");
    qpack_session_free(a);
    qpack_session_free(c);
    qpack_model_free(m);
    qpack_session_free(x);
    qpack_session_free(y);
    qpack_model_free(in);
    qpack_model_params p = qpack_model_default_params();
    p.backend = QPACK_BACKEND_EMU;
    ck_assert_int_eq(qpack_model_open(&m, pinned, &p, &e), QPACK_ERR_ARGUMENT);
    ck_assert_ptr_null(m);
    rc = run("%s unload %s", QP_QPACK, name);
    ck_assert_msg(rc == 0, "qpack unload: %s", out_text);
    ck_assert_int_eq(qpack_model_open(&m, pinned, NULL, &e), QPACK_ERR_IO);
    ck_assert_msg(strstr(e.message, "no model named"), "%s", e.message);
}
END_TEST

START_TEST(batches_give_what_each_session_gives_alone)
{
    batches_give_what_each_gives_alone_on(model_path, QPACK_BACKEND_EMU, false);
    batches_give_what_each_gives_alone_on(path_of("int4.qpk"), QPACK_BACKEND_EMU, false);
    if (geteuid() != 0)     /* BPF needs root */
        return;
    batches_give_what_each_gives_alone_on(model_path, QPACK_BACKEND_BPF, false);
    batches_give_what_each_gives_alone_on(path_of("int4.qpk"), QPACK_BACKEND_BPF, false);
    batches_give_what_each_gives_alone_on(path_of("stress-int8.qpk"), QPACK_BACKEND_BPF, true);
    batches_give_what_each_gives_alone_on(path_of("stress-int4-pure.qpk"), QPACK_BACKEND_BPF, false);
}
END_TEST

/* A copied session continues as its source: logits of the same bits
 * after the rest of the prompt, after the whole of it, and after a token
 * more; a fresh feed of the same tokens agrees (the copy computes
 * nothing). Positions past the source's are refused. */
static void copies_continue_as_their_source_on(const char *path, qpack_backend backend, bool stream)
{
    qpack_model *m = open_model_at(path, backend, 0, 3, stream);
    size_t vocab = qpack_model_get_info(m)->vocab, bytes = vocab * sizeof(double);
    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % 5000);
    qpack_session *a = new_session(m), *b = new_session(m), *c = new_session(m);
    qpack_error e;
    feed(a, ids, 37);                   /* past a block: several blocks' rows */
    ck_assert_int_eq(qpack_session_copy(b, a, 23, &e), QPACK_OK);
    ck_assert_uint_eq(qpack_session_pos(b), 23);
    feed(b, ids + 23, 14);
    ck_assert_msg(!memcmp(qpack_logits(a), qpack_logits(b), bytes), "a copy's continuation differs");
    ck_assert_int_eq(qpack_session_copy(c, a, 37, &e), QPACK_OK);
    ck_assert_msg(!memcmp(qpack_logits(a), qpack_logits(c), bytes), "a whole copy's logits differ");
    ck_assert_mem_eq(qpack_session_tokens(c), ids, 37 * sizeof *ids);
    feed(a, ids + 37, 1);
    feed(c, ids + 37, 1);
    ck_assert_msg(!memcmp(qpack_logits(a), qpack_logits(c), bytes), "the next token after a whole copy differs");
    qpack_session_free(b);
    b = new_session(m);
    feed(b, ids, 38);
    ck_assert_msg(!memcmp(qpack_logits(a), qpack_logits(b), bytes), "a fresh feed differs from the copied");
    ck_assert_int_eq(qpack_session_copy(c, a, 39, &e), QPACK_ERR_ARGUMENT);
    ck_assert_uint_eq(qpack_session_pos(c), 38);
    qpack_session_free(a);
    qpack_session_free(b);
    qpack_session_free(c);
    qpack_model_free(m);
}

START_TEST(copies_continue_as_their_source)
{
    copies_continue_as_their_source_on(model_path, QPACK_BACKEND_EMU, false);
    copies_continue_as_their_source_on(path_of("int4.qpk"), QPACK_BACKEND_EMU, false);
    if (geteuid() != 0)     /* BPF needs root */
        return;
    copies_continue_as_their_source_on(model_path, QPACK_BACKEND_BPF, false);
    copies_continue_as_their_source_on(path_of("stress-int8.qpk"), QPACK_BACKEND_BPF, true);
}
END_TEST

#define INTERLEAVED_STEPS 6

/* Each session has its own KV cache slot: two sessions fed in turn give
 * the bits each gives alone (in slot 0, the only one in use then), and
 * switching between them costs no kernel call (no recompute of a cache):
 * the interleaved run makes exactly as many calls as the two alone. */
static void interleaved_sessions_on(qpack_backend backend)
{
    qpack_model *m = open_model(backend, 0, 2);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    const int32_t p1[] = {9707, 11, 1879, 0}, p2[] = {576, 1207, 374, 220, 17};
    const int32_t *prompts[2] = {p1, p2};
    const size_t lens[2] = {4, 5};
    size_t bytes = (size_t)INTERLEAVED_STEPS * vocab * sizeof(double);
    double *alone[2] = {malloc(bytes), malloc(bytes)}, *mixed[2] = {malloc(bytes), malloc(bytes)};
    qpack_session_stats st_alone[2], st_mixed[2];
    for (int k = 0; k < 2; k++) {
        qpack_session *s = new_session(m);
        feed(s, prompts[k], lens[k]);
        for (int i = 0; i < INTERLEAVED_STEPS; i++)
            greedy_logits(s, i, vocab, alone[k]);
        qpack_session_get_stats(s, &st_alone[k]);
        qpack_session_free(s);
    }
    /* one token of each in turn; y starts after x has its prompt */
    qpack_session *x[2] = {new_session(m), new_session(m)};
    feed(x[0], p1, 4);
    feed(x[1], p2, 5);
    for (int i = 0; i < INTERLEAVED_STEPS; i++)
        for (int k = 0; k < 2; k++)
            greedy_logits(x[k], i, vocab, mixed[k]);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(memcmp(alone[k], mixed[k], bytes) == 0, "session %d: interleaved logits differ", k);
        qpack_session_get_stats(x[k], &st_mixed[k]);
        ck_assert_uint_eq(st_mixed[k].tokens, st_alone[k].tokens);
        ck_assert_msg(st_mixed[k].calls == st_alone[k].calls,
                      "session %d: %llu kernel calls interleaved, %llu alone (a cache was recomputed)", k,
                      (unsigned long long)st_mixed[k].calls, (unsigned long long)st_alone[k].calls);
    }
    qpack_session *z;
    qpack_error e;
    ck_assert_int_eq(qpack_session_new(&z, m, &e), QPACK_ERR_BUSY);
    ck_assert_ptr_nonnull(strstr(e.message, "2 sessions"));
    /* a freed slot is taken again, and starts empty */
    qpack_session_free(x[0]);
    x[0] = new_session(m);
    ck_assert_uint_eq(qpack_session_pos(x[0]), 0);
    feed(x[0], p1, 4);
    ck_assert_mem_eq(qpack_logits(x[0]), alone[0], vocab * sizeof(double));
    for (int k = 0; k < 2; k++) {
        qpack_session_free(x[k]);
        free(alone[k]);
        free(mixed[k]);
    }
    qpack_model_free(m);
}

START_TEST(interleaved_sessions_give_what_each_gives_alone)
{
    interleaved_sessions_on(QPACK_BACKEND_EMU);
    if (geteuid() == 0)     /* BPF needs root */
        interleaved_sessions_on(QPACK_BACKEND_BPF);
}
END_TEST

/* kernel invocations of feeding ids to s */
static uint64_t calls_of_feed(qpack_session *s, const int32_t *ids, size_t n)
{
    qpack_session_stats before, after;
    qpack_session_get_stats(s, &before);
    feed(s, ids, n);
    qpack_session_get_stats(s, &after);
    return after.calls - before.calls;
}

/* With fewer caches than sessions, a session whose cache another one took
 * pays for recomputing its tokens; with one cache each, a switch is free. */
START_TEST(kv_caches_tell_whether_a_switch_recomputes)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 2);
    uint32_t caches = qpack_model_kv_caches(m);
    ck_assert(caches >= 1 && caches <= 2);
    const int32_t p1[] = {9707, 11, 1879, 0, 13, 576, 1207, 374, 220, 17, 18, 19}, p2[] = {576, 1207};
    qpack_session *x = new_session(m), *y = new_session(m);
    feed(x, p1, 12);
    int32_t next = qpack_argmax(x);
    uint64_t resident = calls_of_feed(x, &next, 1);   /* x's cache in place */
    feed(y, p2, 2);                                    /* y's steps run */
    next = qpack_argmax(x);
    uint64_t switched = calls_of_feed(x, &next, 1);
    if (caches == 2)
        ck_assert_uint_eq(switched, resident);
    else
        ck_assert_msg(switched > resident, "a switch cost %llu calls, a resident step %llu",
                      (unsigned long long)switched, (unsigned long long)resident);
    qpack_session_free(x);
    qpack_session_free(y);
    qpack_model_free(m);
}
END_TEST

START_TEST(bad_input_is_refused_before_compute_with_its_code)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 8, 1);
    qpack_session *s = new_session(m);
    qpack_error e;
    int32_t bad[] = {9707, 151936};
    ck_assert_int_eq(qpack_feed(s, bad, 2, &e), QPACK_ERR_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "151936"));
    int32_t neg = -1;
    ck_assert_int_eq(qpack_feed(s, &neg, 1, &e), QPACK_ERR_ARGUMENT);
    int32_t nine[9] = {0};
    ck_assert_int_eq(qpack_feed(s, nine, 9, &e), QPACK_ERR_CONTEXT);
    ck_assert_uint_eq(qpack_session_pos(s), 0);
    feed(s, nine, 8);
    ck_assert_int_eq(qpack_feed(s, nine, 1, &e), QPACK_ERR_CONTEXT);
    qpack_session_stats st;
    qpack_session_get_stats(s, &st);
    ck_assert_uint_eq(st.tokens, 8);
    qpack_session_free(s);
    qpack_model_free(m);

    qpack_model *none;
    ck_assert_int_eq(qpack_model_open(&none, "/nonexistent/m.qpk", NULL, &e), QPACK_ERR_IO);
    ck_assert_ptr_null(none);
    ck_assert_ptr_nonnull(strstr(e.message, "/nonexistent/m.qpk"));
    /* 160 bytes, the text's tail zeros (the literal alone is 148: reading
     * 160 of it overflowed, ASan) */
    static const char junk[160] = "not a container at all, but more than the header's one hundred and twenty-eight "
                                  "bytes long, so that the magic is what fails first .................";
    spit(path_of("junk.qpk"), junk, sizeof junk);
    ck_assert_int_eq(qpack_model_open(&none, path_of("junk.qpk"), NULL, &e), QPACK_ERR_FORMAT);
    ck_assert_str_eq(qpack_status_name(QPACK_ERR_CONTEXT), "context");
}
END_TEST

static bool odd_only(void *user, int32_t token)
{
    (void)user;
    return token % 2 == 1;
}

static bool one_of_three(void *user, int32_t token)
{
    const int32_t *ids = user;
    return token == ids[0] || token == ids[1] || token == ids[2];
}

/* ---- the sampler against a plain one ------------------------------------ */

static uint64_t ref_rng;

static double ref_uniform(void)
{
    ref_rng ^= ref_rng >> 12;
    ref_rng ^= ref_rng << 25;
    ref_rng ^= ref_rng >> 27;
    return (double)((ref_rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static const double *ref_weight;

static int ref_by_weight(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    if (ref_weight[i] != ref_weight[j])
        return ref_weight[i] < ref_weight[j] ? 1 : -1;
    return i < j ? -1 : 1;
}

/* sampler.c's documented order, written plainly: min-p, temperature, every
 * candidate sorted by weight (ties by id), top-k, top-p, a draw from
 * xorshift64* */
static int32_t plain_sample(const double *logit, uint32_t vocab, const qpack_sampler_params *p, double *w,
                            uint32_t *order)
{
    uint32_t best = 0, n = 0;
    for (uint32_t i = 1; i < vocab; i++)
        best = logit[i] > logit[best] ? i : best;
    double floor = p->min_p > 0 ? logit[best] + log(p->min_p) : -INFINITY, sum = 0;
    for (uint32_t i = 0; i < vocab; i++)
        if (logit[i] >= floor) {
            w[i] = exp((logit[i] - logit[best]) / p->temperature);
            sum += w[i];
            order[n++] = i;
        }
    if (p->top_k || p->top_p < 1) {
        ref_weight = w;
        qsort(order, n, sizeof *order, ref_by_weight);
        n = p->top_k && p->top_k < n ? p->top_k : n;
        double kept = 0;
        for (uint32_t i = 0; i < n; i++)
            if ((kept += w[order[i]]) >= p->top_p * sum) {
                n = i + 1;
                break;
            }
        sum = 0;
        for (uint32_t i = 0; i < n; i++)
            sum += w[order[i]];
    }
    double r = ref_uniform() * sum, acc = 0;
    for (uint32_t i = 0; i < n; i++)
        if (r < (acc += w[order[i]]))
            return (int32_t)order[i];
    return (int32_t)order[n - 1];
}

/* top-k and top-p sort only the candidates they keep: the same draws as
 * sorting all of them, for cuts of one token to most of the vocabulary */
START_TEST(sampler_draws_as_a_full_sort_does)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 1);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    qpack_session *s = new_session(m);
    feed(s, hello, 4);
    double *w = malloc(vocab * sizeof *w);
    uint32_t *order = malloc(vocab * sizeof *order);
    struct { double temp, top_p, min_p; uint32_t top_k; } cases[] = {
        {0.7, 1, 0, 20}, {1.5, 0.95, 0, 0}, {0.3, 0.5, 0, 0}, {1, 0.9, 0, 5000}, {2, 1, 0, 1}, {1, 0.8, 0.01, 40},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        qpack_sampler_params p = qpack_sampler_default_params();
        p.temperature = cases[c].temp, p.top_p = cases[c].top_p, p.top_k = cases[c].top_k, p.min_p = cases[c].min_p;
        p.seed = 11 + c;
        qpack_sampler *sm;
        qpack_error e;
        ck_assert_int_eq(qpack_sampler_new(&sm, m, &p, &e), QPACK_OK);
        ref_rng = p.seed;
        for (int d = 0; d < 25; d++)
            ck_assert_int_eq(qpack_sample(sm, s), plain_sample(qpack_logits(s), vocab, &p, w, order));
        qpack_sampler_free(sm);
    }
    free(w);
    free(order);
    qpack_session_free(s);
    qpack_model_free(m);
}
END_TEST

START_TEST(sampler_greedy_seeded_min_p_and_repeat_penalty)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 1);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    qpack_session *s = new_session(m);
    feed(s, hello, 4);
    qpack_error e;
    qpack_sampler *g, *a, *b, *c, *mp;
    qpack_sampler_params p = qpack_sampler_default_params();
    ck_assert_int_eq(qpack_sampler_new(&g, m, &p, &e), QPACK_OK);
    ck_assert_int_eq(qpack_sample(g, s), qpack_argmax(s));
    p.temperature = 5;
    p.seed = 7;
    ck_assert_int_eq(qpack_sampler_new(&a, m, &p, &e), QPACK_OK);
    ck_assert_int_eq(qpack_sampler_new(&b, m, &p, &e), QPACK_OK);
    p.seed = 8;
    ck_assert_int_eq(qpack_sampler_new(&c, m, &p, &e), QPACK_OK);
    bool differs = false;
    for (int i = 0; i < 50; i++) {
        int32_t x = qpack_sample(a, s), y = qpack_sample(b, s), z = qpack_sample(c, s);
        ck_assert_int_eq(x, y);
        ck_assert(x >= 0 && (uint32_t)x < vocab);
        differs |= x != z;
    }
    ck_assert_msg(differs, "another seed gave the same 50 draws at temperature 5");
    p.min_p = 1;        /* only tokens as likely as the best survive */
    ck_assert_int_eq(qpack_sampler_new(&mp, m, &p, &e), QPACK_OK);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(qpack_sample(mp, s), qpack_argmax(s));
    qpack_sampler_free(mp);     /* the refused call below sets mp to NULL */
    p = qpack_sampler_default_params();
    p.temperature = -1;
    ck_assert_int_eq(qpack_sampler_new(&mp, m, &p, &e), QPACK_ERR_ARGUMENT);

    /* the repeat penalty: greedy decoding until the argmax is one of the
     * last 16 tokens (a random model soon repeats itself); then a penalty
     * of 100 over those 16 must pick the argmax of the logits penalised by
     * hand (llama.cpp: a positive logit divided, a negative one
     * multiplied, each distinct token once) -- not the plain argmax */
    int32_t top = qpack_argmax(s);
    bool repeats = false;
    for (int i = 0; i < 64 && !repeats; i++) {
        feed(s, &top, 1);
        top = qpack_argmax(s);
        uint32_t pos = qpack_session_pos(s);
        for (uint32_t k = pos > 16 ? pos - 16 : 0; k < pos; k++)
            repeats |= qpack_session_tokens(s)[k] == top;
    }
    ck_assert_msg(repeats, "greedy decoding never repeated a recent token");
    const double *l = qpack_logits(s);
    uint32_t pos = qpack_session_pos(s);
    uint32_t w = pos < 16 ? pos : 16;
    const int32_t *recent = qpack_session_tokens(s) + (pos - w);
    double penalty = 100, best_v = -INFINITY;
    int32_t expect = -1;
    for (uint32_t v = 0; v < vocab; v++) {
        double x = l[v];
        for (uint32_t k = 0; k < w; k++)
            if (recent[k] == (int32_t)v) {
                x = x > 0 ? x / penalty : x * penalty;
                break;
            }
        if (x > best_v) {
            best_v = x;
            expect = (int32_t)v;
        }
    }
    ck_assert_int_ne(expect, top);
    qpack_sampler *rp;
    p = qpack_sampler_default_params();
    p.repeat_penalty = penalty;
    p.repeat_last_n = 16;
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_OK);
    ck_assert_int_eq(qpack_sample(rp, s), expect);
    qpack_sampler_free(rp);

    /* OpenAI's penalties over the same 16 tokens, by hand: logit -
     * presence - frequency * count for every recent token */
    p = qpack_sampler_default_params();
    p.presence_penalty = 1.5;
    p.frequency_penalty = -0.75;    /* negative: repeats favoured */
    p.repeat_last_n = 16;
    best_v = -INFINITY;
    for (uint32_t v = 0; v < vocab; v++) {
        uint32_t count = 0;
        for (uint32_t k = 0; k < w; k++)
            count += recent[k] == (int32_t)v;
        double x = l[v] - (count ? p.presence_penalty + p.frequency_penalty * count : 0);
        if (x > best_v) {
            best_v = x;
            expect = (int32_t)v;
        }
    }
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_OK);
    ck_assert_int_eq(qpack_sample(rp, s), expect);
    qpack_sampler_free(rp);
    /* logit biases: -100 on the argmax moves greedy decoding to the
     * runner-up, +100 on any token makes it the choice */
    int32_t second = top == 0 ? 1 : 0;
    for (uint32_t v = 0; v < vocab; v++)
        if ((int32_t)v != top && l[v] > l[second])
            second = (int32_t)v;
    qpack_logit_bias ban = {top, -100}, force = {12345, 100};
    p = qpack_sampler_default_params();
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_OK);
    ban.token = 0;      /* the sampler keeps its own copy */
    ck_assert_int_eq(qpack_sample(rp, s), second);
    qpack_sampler_free(rp);
    p.logit_bias = &force;
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_OK);
    ck_assert_int_eq(qpack_sample(rp, s), 12345);
    qpack_sampler_free(rp);
    /* a constraint: greedy picks the most likely token it allows (here the
     * odd ids), sampling never picks one it does not (here all but three) */
    p = qpack_sampler_default_params();
    p.allow = odd_only;
    int32_t best_odd = 1;
    for (uint32_t v = 1; v < vocab; v += 2)
        if (l[v] > l[best_odd])
            best_odd = (int32_t)v;
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_OK);
    ck_assert_int_eq(qpack_sample(rp, s), best_odd);
    qpack_sampler_free(rp);
    int32_t three[3] = {7, 300, (int32_t)vocab - 1};
    p = (qpack_sampler_params){.temperature = 1.5, .top_p = 0.9, .top_k = 2, .repeat_penalty = 1, .seed = 5,
                               .allow = one_of_three, .allow_user = three};
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_OK);
    for (int i = 0; i < 200; i++) {
        int32_t id = qpack_sample(rp, s);
        ck_assert_msg(id == three[0] || id == three[1] || id == three[2], "draw %d: %d is not allowed", i, id);
    }
    qpack_sampler_free(rp);
    p = qpack_sampler_default_params();
    p.logit_bias = &force;
    p.n_logit_bias = 1;
    force.token = (int32_t)vocab;
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_ERR_ARGUMENT);
    p.n_logit_bias = 0;
    p.frequency_penalty = 2.5;
    ck_assert_int_eq(qpack_sampler_new(&rp, m, &p, &e), QPACK_ERR_ARGUMENT);
    qpack_sampler_free(g);
    qpack_sampler_free(a);
    qpack_sampler_free(b);
    qpack_sampler_free(c);
    qpack_sampler_free(mp);
    qpack_session_free(s);
    qpack_model_free(m);
}
END_TEST

START_TEST(text_round_trips_and_the_decoder_never_cuts_a_character)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 1);
    const qpack_tokenizer *t = qpack_model_tokenizer(m);
    ck_assert_ptr_nonnull(t);
    qpack_error e;
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(qpack_tokenize(t, "Hello, world!", 13, &ids, &n, &e), QPACK_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_mem_eq(ids, hello, sizeof hello);
    free(ids);
    const char *text = "na\xc3\xafve \xf0\x9f\x98\x80 caf\xc3\xa9 <|im_end|>";
    ck_assert_int_eq(qpack_tokenize(t, text, strlen(text), &ids, &n, &e), QPACK_OK);
    char *back;
    size_t len;
    ck_assert_int_eq(qpack_detokenize(t, ids, n, false, &back, &len, &e), QPACK_OK);
    ck_assert_str_eq(back, text);
    free(back);
    /* each token's bytes, joined, are the text, though a token may hold part
     * of a character (the emoji spans tokens) */
    char raw[256] = "";
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const char *b = qpack_token_bytes(t, ids[i], &k);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_lt(at + k, sizeof raw);
        memcpy(raw + at, b, k);
        at += k;
    }
    ck_assert_uint_eq(at, strlen(text));
    ck_assert_mem_eq(raw, text, at);
    ck_assert_ptr_null(qpack_token_bytes(t, -1, &len));
    ck_assert_ptr_null(qpack_token_bytes(t, 10000000, &len));
    /* one token at a time: every piece is whole UTF-8, and they add up */
    qpack_decoder *d;
    ck_assert_int_eq(qpack_decoder_new(&d, t, true, &e), QPACK_OK);
    char joined[256] = "";
    for (size_t i = 0; i < n; i++) {
        const char *piece = qpack_decoder_push(d, ids[i], &len);
        for (size_t k = 0; k < len; k++)   /* a piece never ends inside a character */
            if (k + 1 == len)
                ck_assert_msg(((unsigned char)piece[k] & 0xC0) != 0xC0 || false, "piece ends in a lead byte");
        strncat(joined, piece, len);
    }
    strcat(joined, qpack_decoder_finish(d, true, &len));
    ck_assert_str_eq(joined, "na\xc3\xafve \xf0\x9f\x98\x80 caf\xc3\xa9 ");   /* special token skipped */
    int32_t emoji_half = 9843;      /* a byte-level token holding part of a 4-byte character */
    const char *piece = qpack_decoder_push(d, emoji_half, &len);
    (void)piece;
    const char *tail = qpack_decoder_finish(d, false, &len);
    ck_assert_uint_eq(len, 0);
    (void)tail;
    qpack_decoder_free(d);
    free(ids);
    ck_assert_int_eq(qpack_tokenize(t, "\xff", 1, &ids, &n, &e), QPACK_ERR_ARGUMENT);
    /* padding ids (the model's vocabulary is larger than the tokenizer's) have no text */
    int32_t pad = 151935;
    ck_assert_int_eq(qpack_detokenize(t, &pad, 1, false, &back, &len, &e), QPACK_OK);
    ck_assert_uint_eq(len, 0);
    free(back);
    ck_assert(qpack_token_is_end(m, 151645));      /* <|im_end|> */
    ck_assert(qpack_token_is_end(m, 151643));      /* <|endoftext|> */
    ck_assert(!qpack_token_is_end(m, 9707));
    qpack_model_free(m);
}
END_TEST

START_TEST(chat_render_is_qwen3s_template)
{
    qpack_chat_message msgs[] = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "<think>\nhmm\n</think>\n\nHello!"}, {"user", "Bye"},
    };
    char *text;
    size_t len;
    qpack_error e;
    ck_assert_int_eq(qpack_chat_render(msgs, 4, false, &text, &len, &e), QPACK_OK);
    ck_assert_str_eq(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    ck_assert_uint_eq(len, strlen(text));
    free(text);
    ck_assert_int_eq(qpack_chat_render(msgs + 1, 1, true, &text, &len, &e), QPACK_OK);
    ck_assert_str_eq(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    qpack_chat_message bad = {"robot", "x"};
    ck_assert_int_eq(qpack_chat_render(&bad, 1, false, &text, &len, &e), QPACK_ERR_ARGUMENT);
}
END_TEST

struct long_feed {
    qpack_session *s;
    int32_t *ids;
    size_t n;
    int rc;
};

static void *feed_long(void *arg)
{
    struct long_feed *f = arg;
    qpack_error e;
    f->rc = qpack_feed(f->s, f->ids, f->n, &e);
    return NULL;
}

/* A feed interrupted from another thread fails QPACK_ERR_INTERRUPTED and
 * leaves the session as it was; the next feed runs normally. */
static void interrupt_stops_a_feed_on(qpack_model *m)
{
    struct long_feed f = {.s = new_session(m), .n = 2000};
    f.ids = calloc(f.n, sizeof *f.ids);
    for (size_t i = 0; i < f.n; i++)
        f.ids[i] = (int32_t)(1000 + i * 7 % 5000);
    pthread_t t;
    pthread_create(&t, NULL, feed_long, &f);
    usleep(100 * 1000);
    qpack_session_interrupt(f.s);
    pthread_join(t, NULL);
    ck_assert_int_eq(f.rc, QPACK_ERR_INTERRUPTED);
    ck_assert_uint_eq(qpack_session_pos(f.s), 0);
    feed(f.s, hello, 4);        /* the next feed runs normally */
    ck_assert_uint_eq(qpack_session_pos(f.s), 4);
    free(f.ids);
    qpack_session_free(f.s);
}

START_TEST(interrupt_stops_a_feed_from_another_thread)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 2048, 1);
    interrupt_stops_a_feed_on(m);
    qpack_model_free(m);
}
END_TEST

/* ---- the kernel schedule (docs/SCHEDULE.md) ---------------------------- */

static qpack_model *open_scheduled(const char *path, qpack_schedule schedule, uint32_t ctx, uint32_t sessions)
{
    qpack_model_params p = qpack_model_default_params();
    p.ctx = ctx;
    p.max_sessions = sessions;
    p.schedule = schedule;
    return open_with(path, &p);
}

/* Batch steps of several sessions run as kernel chains give, step by step,
 * the bits the host schedule gives the same steps of the same container. */
static void kernel_schedule_batches_on(const char *path)
{
    qpack_model *m[2] = {open_scheduled(path, QPACK_SCHEDULE_HOST, 64, BATCH_SESSIONS),
                         open_scheduled(path, QPACK_SCHEDULE_KERNEL, 64, BATCH_SESSIONS)};
    const qpack_model_info *info = qpack_model_get_info(m[0]);
    uint32_t B = info->block_positions;
    int32_t seq[BATCH_SESSIONS][BATCH_TOKENS];
    for (int k = 0; k < BATCH_SESSIONS; k++)
        for (int t = 0; t < BATCH_TOKENS; t++)
            seq[k][t] = (int32_t)((k * 7919 + t * 104729 + 13) % 151000);
    qpack_session *s[2][BATCH_SESSIONS];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < BATCH_SESSIONS; k++)
            s[h][k] = new_session(m[h]);
    struct { int k; uint32_t n; } steps[][BATCH_SESSIONS] = {
        {{0, 1}},                               /* a decode step */
        {{0, 5}, {1, 9}},                       /* two prompts in one block */
        {{1, 1}, {2, 1}, {0, 1}},               /* a token of each */
        {{2, B + 4}},                           /* across two blocks */
    };
    uint32_t fed[BATCH_SESSIONS] = {0};
    for (size_t st = 0; st < sizeof steps / sizeof *steps; st++) {
        for (int h = 0; h < 2; h++) {
            qpack_batch_item items[BATCH_SESSIONS];
            size_t n = 0;
            for (int i = 0; i < BATCH_SESSIONS && steps[st][i].n; i++, n++) {
                int k = steps[st][i].k;
                items[n] = (qpack_batch_item){s[h][k], seq[k] + fed[k], steps[st][i].n};
            }
            qpack_error e;
            ck_assert_msg(qpack_feed_batch(items, n, &e) == QPACK_OK, "%s step %zu: %s", path, st, e.message);
        }
        for (int i = 0; i < BATCH_SESSIONS && steps[st][i].n; i++) {
            int k = steps[st][i].k;
            fed[k] += steps[st][i].n;
            ck_assert_msg(memcmp(qpack_logits(s[0][k]), qpack_logits(s[1][k]), info->vocab * sizeof(double)) == 0,
                          "%s, step %zu: session %d's logits differ between the host and kernel schedules", path,
                          st, k);
        }
    }
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < BATCH_SESSIONS; k++)
            qpack_session_free(s[h][k]);
        qpack_model_free(m[h]);
    }
}

START_TEST(kernel_schedule_gives_the_host_schedules_bits)
{
    if (geteuid() != 0)     /* BPF needs root */
        return;
    kernel_schedule_batches_on(model_path);
    kernel_schedule_batches_on(path_of("int4.qpk"));
    kernel_schedule_batches_on(path_of("stress-int4-pure.qpk"));
    qpack_model *m = open_scheduled(model_path, QPACK_SCHEDULE_KERNEL, 2048, 1);
    /* root may load an XDP program: two lanes start from one test run
     * (one lane when the process has one CPU) */
    const qpack_model_info *info = qpack_model_get_info(m);
    ck_assert_msg(info->kernel_lanes == 1 || info->kernel_lanes == 2, "%u kernel lanes", info->kernel_lanes);
    if (info->kernel_lanes == 2)
        ck_assert_str_eq(info->lane_start, "xdp");
    else
        ck_assert_ptr_null(info->lane_start);
    interrupt_stops_a_feed_on(m);
    qpack_model_free(m);
    m = open_scheduled(model_path, QPACK_SCHEDULE_HOST, 64, 1);
    ck_assert_uint_eq(qpack_model_get_info(m)->kernel_lanes, 0);
    qpack_model_free(m);
}
END_TEST

/* Two emu models, each stepped by a thread of its own at the same time, give
 * the bits each gives alone: the host twin keeps no model in process state. */
#define CONCURRENT_STEPS 24

struct model_run {
    const char *path;
    uint32_t vocab;
    double *logits;     /* CONCURRENT_STEPS rows of vocab */
};

static void *greedy_run(void *arg)
{
    struct model_run *r = arg;
    qpack_model *m = open_model_at(r->path, QPACK_BACKEND_EMU, 64, 1, false);
    qpack_session *s = new_session(m);
    feed(s, hello, 4);
    for (int i = 0; i < CONCURRENT_STEPS; i++)
        greedy_logits(s, i, r->vocab, r->logits);
    qpack_session_free(s);
    qpack_model_free(m);
    return NULL;
}

START_TEST(two_emu_models_on_two_threads_give_their_solo_bits)
{
    const char *paths[2] = {model_path, path_of("stress-int8.qpk")};
    struct model_run solo[2], both[2];
    for (int i = 0; i < 2; i++) {
        qpack_model *m = open_model_at(paths[i], QPACK_BACKEND_EMU, 64, 1, false);
        uint32_t vocab = qpack_model_get_info(m)->vocab;
        qpack_model_free(m);
        size_t bytes = (size_t)CONCURRENT_STEPS * vocab * sizeof(double);
        solo[i] = (struct model_run){.path = paths[i], .vocab = vocab, .logits = malloc(bytes)};
        both[i] = (struct model_run){.path = paths[i], .vocab = vocab, .logits = malloc(bytes)};
        greedy_run(&solo[i]);
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, greedy_run, &both[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        size_t bytes = (size_t)CONCURRENT_STEPS * solo[i].vocab * sizeof(double);
        ck_assert_msg(memcmp(solo[i].logits, both[i].logits, bytes) == 0, "%s: logits differ beside another model",
                      paths[i]);
        free(solo[i].logits);
        free(both[i].logits);
    }
}
END_TEST

/* A call budget cuts products and attention into more kernel calls and
 * changes no bit: a prompt in blocks, then lookup steps (whose tokens are
 * the kernels' fused argmax, a paused vocabulary pass resuming its slot),
 * with calls of at most 2 us (nearly every product pauses, blocks in parts) give the
 * tokens and logits of calls bounded by work alone, on int4 (i6 vocabulary)
 * and stress int8, bpf and emu. */
#define BUDGET_TOKENS 24

struct budget_run {
    int32_t tokens[BUDGET_TOKENS + 8];
    double *rows;       /* the prompt's last logits, then each step's */
    uint64_t paused;
};

static void budget_run(const char *path, qpack_backend backend, uint32_t call_us, struct budget_run *r)
{
    qpack_model_params p = qpack_model_default_params();
    p.backend = backend;
    p.ctx = 128;
    p.call_us = call_us;
    qpack_model *m = open_with(path, &p);
    qpack_error e;
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    qpack_session *s = new_session(m);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = 1000 + i * 37;
    r->rows = calloc((size_t)(1 + BUDGET_TOKENS) * vocab, sizeof(double));
    feed(s, prompt, 40);
    memcpy(r->rows, qpack_logits(s), vocab * sizeof(double));
    int made = 0, steps = 0;
    r->tokens[made++] = qpack_argmax(s);
    while (made < BUDGET_TOKENS) {
        uint32_t count;
        ck_assert_msg(qpack_lookup_step(s, r->tokens[made - 1], 7, r->tokens + made, &count, &e) == QPACK_OK, "%s",
                      e.message);
        made += (int)count;
        memcpy(r->rows + (size_t)++steps * vocab, qpack_logits(s), vocab * sizeof(double));
    }
    qpack_session_stats st;
    qpack_session_get_stats(s, &st);
    r->paused = st.paused_calls;
    qpack_session_free(s);
    qpack_model_free(m);
}

static void call_budget_keeps_the_bits_on(const char *path, qpack_backend backend)
{
    struct budget_run whole, paused;
    budget_run(path, backend, QPACK_CALL_US_NONE, &whole);
    /* 2 us: products cut a 16-position block in parts, per-position
     * kernels run an entry or a few a call (engine/forward.c) */
    budget_run(path, backend, 2, &paused);
    uint32_t vocab;
    {
        qpack_model *m = open_model_at(path, QPACK_BACKEND_EMU, 64, 1, false);
        vocab = qpack_model_get_info(m)->vocab;
        qpack_model_free(m);
    }
    ck_assert_msg(!memcmp(whole.tokens, paused.tokens, BUDGET_TOKENS * sizeof(int32_t)),
                  "%s: tokens differ with calls of 2 us", path);
    ck_assert_msg(!memcmp(whole.rows, paused.rows, (size_t)(1 + BUDGET_TOKENS) * vocab * sizeof(double)),
                  "%s: logits differ with calls of 2 us", path);
    ck_assert_uint_eq(whole.paused, 0);
    ck_assert_msg(paused.paused > 100, "%s: only %llu runs paused at 2 us", path, (unsigned long long)paused.paused);
    free(whole.rows);
    free(paused.rows);
}

START_TEST(a_call_budget_changes_no_bit)
{
    call_budget_keeps_the_bits_on(path_of("int4.qpk"), QPACK_BACKEND_EMU);
    call_budget_keeps_the_bits_on(path_of("stress-int8.qpk"), QPACK_BACKEND_EMU);
    if (geteuid() != 0)
        return;
    call_budget_keeps_the_bits_on(path_of("int4.qpk"), QPACK_BACKEND_BPF);
    call_budget_keeps_the_bits_on(path_of("stress-int8.qpk"), QPACK_BACKEND_BPF);
}
END_TEST

/* ---- what qrun and qeval need beyond generating -------------------------- */

/* plain greedy decoding: gen tokens after prompt, and the logits each was
 * chosen from (gen rows of vocab) */
static void plain_greedy(qpack_model *m, const int32_t *prompt, size_t n, int gen, int32_t *tokens, double *rows)
{
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    qpack_session *s = new_session(m);
    feed(s, prompt, n);
    for (int t = 0; t < gen; t++) {
        memcpy(rows + (size_t)t * vocab, qpack_logits(s), vocab * sizeof *rows);
        tokens[t] = qpack_argmax(s);
        if (t + 1 < gen)
            feed(s, &tokens[t], 1);
    }
    qpack_session_free(s);
}

/* lookup decoding of the same: after each step the session's logits are
 * those plain decoding chose the pending token from */
static void lookup_greedy(qpack_model *m, const int32_t *prompt, size_t n, int gen, int32_t *tokens,
                          const double *rows, qpack_session_stats *st, uint32_t *backoffs)
{
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    qpack_session *s = new_session(m);
    qpack_error e;
    feed(s, prompt, n);
    int made = 0;
    tokens[made++] = qpack_argmax(s);
    uint64_t last_drafted = 0, last_kept = 0;
    while (made < gen) {
        int32_t out[8];
        uint32_t count;
        qpack_session_stats before, after;
        qpack_session_get_stats(s, &before);
        ck_assert_msg(qpack_lookup_step(s, tokens[made - 1], 7, out, &count, &e) == QPACK_OK, "%s", e.message);
        ck_assert(count >= 1 && count <= 8);
        /* the draft's length adapts: none after a draft refused at its
         * first token, at most twice the last after one kept whole */
        qpack_session_get_stats(s, &after);
        uint64_t drafted = after.lookup_drafted - before.lookup_drafted;
        uint64_t kept = after.lookup_kept - before.lookup_kept;
        if (last_drafted && !last_kept) {
            ck_assert_uint_eq(drafted, 0);
            ++*backoffs;
        }
        if (last_drafted && last_kept == last_drafted)
            ck_assert_uint_le(drafted, 2 * last_drafted);
        last_drafted = drafted, last_kept = kept;
        ck_assert_uint_eq(qpack_session_pos(s), n + (size_t)made - 1 + count);
        for (uint32_t i = 0; i < count && made < gen; i++)
            tokens[made++] = out[i];
        if (made < gen || count == 1)
            ck_assert_msg(!memcmp(qpack_logits(s), rows + (size_t)(made - 1) * vocab, vocab * sizeof *rows),
                          "the logits after a lookup step differ from plain decoding's at token %d", made - 1);
    }
    qpack_session_get_stats(s, st);
    qpack_session_free(s);
}

static void lookup_keeps_greedy_tokens_on(qpack_backend backend)
{
    qpack_model *m = open_model(backend, 256, 2);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    enum { GEN = 64 };
    int32_t prompts[2][24], plain[GEN], look[GEN];
    for (int i = 0; i < 24; i++) {
        prompts[0][i] = (int32_t)(1000 + (i * 7919) % 50000);   /* drafts the model mostly refuses */
        prompts[1][i] = prompts[0][i % 6];                      /* a loop the model may keep */
    }
    double *rows = malloc((size_t)GEN * vocab * sizeof *rows);
    uint64_t drafted = 0, kept = 0;
    uint32_t backoffs = 0;
    for (int p = 0; p < 2; p++) {
        qpack_session_stats st;
        plain_greedy(m, prompts[p], 24, GEN, plain, rows);
        lookup_greedy(m, prompts[p], 24, GEN, look, rows, &st, &backoffs);
        ck_assert_msg(!memcmp(plain, look, sizeof plain), "prompt %d: lookup decoding chose other tokens", p);
        ck_assert_uint_gt(st.lookup_passes, 0);
        drafted += st.lookup_drafted;
        kept += st.lookup_kept;
    }
    /* both paths were taken: drafts kept and drafts refused */
    ck_assert_uint_gt(kept, 0);
    ck_assert_uint_gt(drafted, kept);
    ck_assert_uint_gt(backoffs, 0);      /* a refused draft was followed by none */
    free(rows);
    qpack_model_free(m);
}

/* ---- lookup steps in batches --------------------------------------------- */

#define LB_STEPS 12

/* Two sessions decoding by lookup (one on a loop whose drafts the model
 * keeps, one on text whose drafts it mostly refuses) and a third fed its
 * prompt in chunks share every step; each gets, step for step, what it
 * gets alone: the lookup's count, tokens, draft, logits and position, the
 * fed session's logits. */
static void lookups_in_batches_on(const char *path, qpack_backend backend, bool stream)
{
    qpack_model *m = open_model_at(path, backend, 256, 7, stream);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    size_t bytes = vocab * sizeof(double);
    int32_t prompts[2][24], fed_seq[LB_STEPS * 5];
    for (int i = 0; i < 24; i++) {
        prompts[0][i] = (int32_t)(1000 + (i * 7919) % 50000);
        prompts[1][i] = prompts[0][i % 6];
    }
    for (int i = 0; i < LB_STEPS * 5; i++)
        fed_seq[i] = (int32_t)((i * 104729 + 17) % 150000);
    qpack_session *alone[3], *together[3];
    int32_t pending[2];
    for (int k = 0; k < 3; k++) {
        alone[k] = new_session(m);
        together[k] = new_session(m);
    }
    for (int k = 0; k < 2; k++) {
        feed(alone[k], prompts[k], 24);
        feed(together[k], prompts[k], 24);
        pending[k] = qpack_argmax(alone[k]);
    }
    uint64_t drafted = 0, kept = 0;
    qpack_error e;
    for (int st = 0; st < LB_STEPS; st++) {
        int32_t out_alone[2][8], out_together[2][8];
        uint32_t count_alone[2];
        qpack_lookup_item look[2];
        for (int k = 0; k < 2; k++) {
            qpack_session_stats before, after;
            qpack_session_get_stats(alone[k], &before);
            ck_assert_int_eq(qpack_lookup_step(alone[k], pending[k], 7, out_alone[k], &count_alone[k], &e), QPACK_OK);
            qpack_session_get_stats(alone[k], &after);
            drafted += after.lookup_drafted - before.lookup_drafted;
            kept += after.lookup_kept - before.lookup_kept;
            look[k] = (qpack_lookup_item){.session = together[k], .pending = pending[k], .max_draft = 7,
                                          .out = out_together[k]};
            look[k].drafted = (uint32_t)(after.lookup_drafted - before.lookup_drafted);     /* expected, overwritten */
        }
        uint32_t want_drafted[2] = {look[0].drafted, look[1].drafted};
        feed(alone[2], fed_seq + 5 * st, 5);
        qpack_batch_item chunk = {together[2], fed_seq + 5 * st, 5};
        ck_assert_msg(qpack_step_batch(&chunk, 1, look, 2, &e) == QPACK_OK, "step %d: %s", st, e.message);
        for (int k = 0; k < 2; k++) {
            ck_assert_uint_eq(look[k].count, count_alone[k]);
            ck_assert_uint_eq(look[k].drafted, want_drafted[k]);
            ck_assert_mem_eq(out_together[k], out_alone[k], count_alone[k] * sizeof(int32_t));
            ck_assert_uint_eq(qpack_session_pos(together[k]), qpack_session_pos(alone[k]));
            ck_assert_msg(!memcmp(qpack_logits(together[k]), qpack_logits(alone[k]), bytes),
                          "%s %s: step %d, lookup %d: logits differ from the lookup alone", path,
                          qpack_model_get_info(m)->backend, st, k);
            pending[k] = out_alone[k][count_alone[k] - 1];
        }
        ck_assert_msg(!memcmp(qpack_logits(together[2]), qpack_logits(alone[2]), bytes),
                      "step %d: the fed session's logits differ from it alone", st);
    }
    ck_assert_uint_gt(kept, 0);             /* drafts kept and refused both ran */
    ck_assert_uint_gt(drafted, kept);
    ck_assert_mem_eq(qpack_session_tokens(together[1]), qpack_session_tokens(alone[1]),
                     qpack_session_pos(alone[1]) * sizeof(int32_t));
    /* refused before any compute, nothing changed: a session in both
     * lists, a lookup with no room left */
    uint32_t pos0 = qpack_session_pos(together[0]);
    int32_t out[8];
    qpack_lookup_item twice = {.session = together[0], .pending = 1, .max_draft = 7, .out = out};
    qpack_batch_item feed0 = {together[0], fed_seq, 1};
    ck_assert_int_eq(qpack_step_batch(&feed0, 1, &twice, 1, &e), QPACK_ERR_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "lookup item 0"));
    ck_assert_int_eq(qpack_step_batch(NULL, 0, NULL, 0, &e), QPACK_ERR_ARGUMENT);
    ck_assert_uint_eq(qpack_session_pos(together[0]), pos0);
    qpack_session *full = new_session(m);
    int32_t filler[256];
    for (int i = 0; i < 256; i++)
        filler[i] = 1000 + i;
    feed(full, filler, 256);
    qpack_lookup_item no_room = {.session = full, .pending = 1, .max_draft = 7, .out = out};
    ck_assert_int_eq(qpack_step_batch(&feed0, 1, &no_room, 1, &e), QPACK_ERR_CONTEXT);
    ck_assert_ptr_nonnull(strstr(e.message, "lookup item 0"));
    ck_assert_uint_eq(qpack_session_pos(together[0]), pos0);
    ck_assert_uint_eq(qpack_session_pos(full), 256);
    qpack_session_free(full);
    for (int k = 0; k < 3; k++) {
        qpack_session_free(alone[k]);
        qpack_session_free(together[k]);
    }
    qpack_model_free(m);
}

START_TEST(lookup_steps_in_batches_give_what_each_gives_alone)
{
    lookups_in_batches_on(model_path, QPACK_BACKEND_EMU, false);
    lookups_in_batches_on(path_of("int4.qpk"), QPACK_BACKEND_EMU, false);
    if (geteuid() != 0)     /* BPF needs root */
        return;
    lookups_in_batches_on(model_path, QPACK_BACKEND_BPF, false);
    lookups_in_batches_on(path_of("int4.qpk"), QPACK_BACKEND_BPF, false);
    lookups_in_batches_on(path_of("stress-int8.qpk"), QPACK_BACKEND_BPF, true);
}
END_TEST

START_TEST(lookup_step_gives_the_tokens_and_logits_of_greedy_decoding)
{
    lookup_keeps_greedy_tokens_on(QPACK_BACKEND_EMU);
    if (geteuid() == 0)
        lookup_keeps_greedy_tokens_on(QPACK_BACKEND_BPF);
}
END_TEST

struct rows_seen {
    uint32_t vocab;
    const float *want;
    size_t seen, stop_at;
};

static int check_row(void *user, size_t i, const double *logits)
{
    struct rows_seen *r = user;
    ck_assert_uint_eq(i, r->seen);
    for (uint32_t v = 0; v < r->vocab; v++)
        ck_assert_msg((float)logits[v] == r->want[i * r->vocab + v], "row %zu id %u", i, v);
    return ++r->seen == r->stop_at;
}

START_TEST(feed_each_sees_every_row_and_can_stop_the_feed)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 2);
    uint32_t vocab = qpack_model_get_info(m)->vocab;
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = 300 + 17 * i;
    float *all = malloc(20 * vocab * sizeof *all);
    qpack_session *a = new_session(m), *b = new_session(m);
    qpack_error e;
    ck_assert_int_eq(qpack_feed_all_logits(a, ids, 20, all, &e), QPACK_OK);
    struct rows_seen r = {vocab, all, 0, 0};
    ck_assert_msg(qpack_feed_each(b, ids, 20, check_row, &r, &e) == QPACK_OK, "%s", e.message);
    ck_assert_uint_eq(r.seen, 20);
    ck_assert_mem_eq(qpack_logits(a), qpack_logits(b), vocab * sizeof(double));
    /* a non-zero return stops it: the session is as it was */
    ck_assert_int_eq(qpack_session_rewind(b, 0, &e), QPACK_OK);
    r = (struct rows_seen){vocab, all, 0, 3};
    ck_assert_int_eq(qpack_feed_each(b, ids, 20, check_row, &r, &e), QPACK_ERR_INTERRUPTED);
    ck_assert_uint_eq(r.seen, 3);
    ck_assert_uint_eq(qpack_session_pos(b), 0);
    free(all);
    qpack_session_free(a);
    qpack_session_free(b);
    qpack_model_free(m);
}
END_TEST

struct progress_log {
    size_t done[8], total[8];
    int n;
};

static void log_progress(void *user, size_t done, size_t total)
{
    struct progress_log *l = user;
    if (l->n < 8) {
        l->done[l->n] = done;
        l->total[l->n] = total;
    }
    l->n++;
}

START_TEST(progress_comes_after_each_block_of_a_feed)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 1);
    uint32_t block = qpack_model_get_info(m)->block_positions;
    ck_assert_uint_eq(block, 16);
    qpack_session *s = new_session(m);
    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = 500 + i;
    struct progress_log log = {0};
    qpack_session_set_progress(s, log_progress, &log);
    feed(s, ids, 40);
    ck_assert_int_eq(log.n, 3);
    const size_t want[] = {16, 32, 40};
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(log.done[i], want[i]);
        ck_assert_uint_eq(log.total[i], 40);
    }
    qpack_session_set_progress(s, NULL, NULL);
    feed(s, ids, 4);
    ck_assert_int_eq(log.n, 3);
    qpack_session_free(s);
    qpack_model_free(m);
}
END_TEST

START_TEST(hidden_states_follow_the_reference_and_leave_the_logits_alone)
{
    qpack_model *m = open_model(QPACK_BACKEND_EMU, 0, 2);
    const qpack_model_info *i = qpack_model_get_info(m);
    qpack_model_params rp = qpack_model_default_params();
    rp.backend = QPACK_BACKEND_REF;
    qpack_model *ref;
    qpack_error e;
    ck_assert_msg(qpack_model_open(&ref, path_of("ck"), &rp, &e) == QPACK_OK, "%s", e.message);
    size_t n = (size_t)i->n_layers * i->hidden;
    double *h = malloc(n * sizeof *h), *hr = malloc(n * sizeof *hr);
    qpack_session *s = new_session(m), *plain = new_session(m), *sr = new_session(ref);
    for (int t = 0; t < 4; t++) {
        ck_assert_int_eq(qpack_feed_hidden(s, hello[t], h, &e), QPACK_OK);
        ck_assert_int_eq(qpack_feed_hidden(sr, hello[t], hr, &e), QPACK_OK);
        feed(plain, &hello[t], 1);
        ck_assert_mem_eq(qpack_logits(s), qpack_logits(plain), i->vocab * sizeof(double));
        double worst = 0, scale = 0;
        for (size_t k = 0; k < n; k++) {
            worst = fmax(worst, fabs(h[k] - hr[k]));
            scale = fmax(scale, fabs(hr[k]));
        }
        ck_assert_msg(scale > 0.01 && worst < 1e-3, "position %d: hidden error %g (values up to %g)", t, worst, scale);
    }
    free(h);
    free(hr);
    qpack_session_free(s);
    qpack_session_free(plain);
    qpack_session_free(sr);
    qpack_model_free(ref);
    qpack_model_free(m);
}
END_TEST

static double cosine(const float *a, const float *b, uint32_t n, double *norm_a)
{
    double ab = 0, aa = 0, bb = 0;
    for (uint32_t i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    *norm_a = sqrt(aa);
    return ab / sqrt(aa * bb);
}

/* An embedding checkpoint (1_Pooling/config.json, last token and mean):
 * its container knows the pooling, and qpack_embed on emu (the final norm
 * applied on the host to the exact residual) gives a unit vector along the
 * float64 reference's (the reference's own final norm, from the folder),
 * bpf (root) the same bits as emu; a generator is refused. */
START_TEST(embeddings_follow_the_reference)
{
    static const char *const modes[] = {"last", "mean"};
    static const int32_t text[] = {9707, 11, 1879, 0, 151643};
    for (int k = 0; k < 2; k++) {
        char args[512], dir[16], qpk[128];
        snprintf(dir, sizeof dir, "emb-%s", modes[k]);
        snprintf(args, sizeof args, "--preset tiny --vocab 151936 --seed 4 --pooling %s --tokenizer-dir %s/assets/qwen3-tokenizer",
                 modes[k], QP_SOURCE_DIR);
        snprintf(qpk, sizeof qpk, "%s", qp_test_model(dir, args, ""));
        qpack_model *emu = open_model_at(qpk, QPACK_BACKEND_EMU, 0, 1, false);
        qpack_model *ref = open_model_at(path_of("%s", dir), QPACK_BACKEND_REF, 0, 1, false);
        qpack_pooling want = k ? QPACK_POOLING_MEAN : QPACK_POOLING_LAST;
        ck_assert_int_eq(qpack_model_get_info(emu)->pooling, want);
        ck_assert_int_eq(qpack_model_get_info(ref)->pooling, want);
        uint32_t h = qpack_model_get_info(emu)->hidden;
        float e[64], r[64], b[64];
        ck_assert_uint_le(h, 64);
        qpack_session *se = new_session(emu), *sr = new_session(ref);
        qpack_error err;
        feed(se, hello, 2);     /* embedding starts over */
        ck_assert_msg(qpack_embed(se, text, 5, e, &err) == QPACK_OK, "%s", err.message);
        ck_assert_msg(qpack_embed(sr, text, 5, r, &err) == QPACK_OK, "%s", err.message);
        ck_assert_uint_eq(qpack_session_pos(se), 5);
        double norm, c = cosine(e, r, h, &norm);
        ck_assert_msg(c > 0.9999 && fabs(norm - 1) < 1e-6, "%s: cosine %.8f to the reference, length %.8f",
                      modes[k], c, norm);
        printf("embedding (%s pooling): cosine to the reference %.9f\n", modes[k], c);
        if (geteuid() == 0) {
            qpack_model *bpf = open_model_at(qpk, QPACK_BACKEND_BPF, 0, 1, false);
            qpack_session *sb = new_session(bpf);
            ck_assert_msg(qpack_embed(sb, text, 5, b, &err) == QPACK_OK, "%s", err.message);
            ck_assert_mem_eq(b, e, h * sizeof *e);
            qpack_session_free(sb);
            qpack_model_free(bpf);
        }
        /* the two poolings differ: the last token alone is not the mean */
        static float last[64];
        if (k == 0)
            memcpy(last, e, sizeof last);
        else
            ck_assert(cosine(last, e, h, &norm) < 0.999);
        qpack_session_free(se);
        qpack_session_free(sr);
        qpack_model_free(emu);
        qpack_model_free(ref);
    }
    qpack_model *gen_model = open_model(QPACK_BACKEND_EMU, 0, 1);
    qpack_session *s = new_session(gen_model);
    float out[64];
    qpack_error err;
    ck_assert_int_eq(qpack_embed(s, hello, 4, out, &err), QPACK_ERR_ARGUMENT);
    ck_assert_msg(strstr(err.message, "not an embedding model"), "%s", err.message);
    qpack_session_free(s);
    qpack_model_free(gen_model);
}
END_TEST

/* A reranker's container records its task (qpack pack from a folder named
 * Qwen3-Reranker, or --task rerank) and the model's info says so; the
 * reference takes it from the folder's name; --task generate records none,
 * and a container of format 1.0, from before the task section, opens as a
 * generator's. */
START_TEST(reranker_container_records_its_task)
{
    gen("Qwen3-Reranker-t", "--preset tiny --seed 5");
    gen("plain", "--preset tiny --seed 5");
    int rc = run("%s pack %s -o %s --quiet && %s pack %s -o %s --task generate --quiet && %s pack %s -o %s --task rerank "
                 "--quiet",
                 QP_QPACK, path_of("Qwen3-Reranker-t"), path_of("rr.qpk"), QP_QPACK, path_of("Qwen3-Reranker-t"),
                 path_of("gen.qpk"), QP_QPACK, path_of("plain"), path_of("task.qpk"));
    ck_assert_msg(rc == 0, "pack: %s", out_text);
    static const struct {
        const char *path;
        qpack_backend backend;
        qpack_task want;
    } cases[] = {
        {"rr.qpk", QPACK_BACKEND_EMU, QPACK_TASK_RERANK},
        {"task.qpk", QPACK_BACKEND_EMU, QPACK_TASK_RERANK},
        {"gen.qpk", QPACK_BACKEND_EMU, QPACK_TASK_NONE},
        {"Qwen3-Reranker-t", QPACK_BACKEND_REF, QPACK_TASK_RERANK},
        {"plain", QPACK_BACKEND_REF, QPACK_TASK_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        qpack_model *m = open_model_at(path_of("%s", cases[i].path), cases[i].backend, 0, 1, false);
        ck_assert_msg(qpack_model_get_info(m)->task == cases[i].want, "%s: task %d", cases[i].path,
                      (int)qpack_model_get_info(m)->task);
        qpack_model_free(m);
    }
    qpack_model *old = open_model_at(QP_SOURCE_DIR "/tests/data/format-1.0-int4.qpk", QPACK_BACKEND_EMU, 0, 1, false);
    ck_assert_int_eq(qpack_model_get_info(old)->task, QPACK_TASK_NONE);
    qpack_model_free(old);
}
END_TEST

/* kv_cache picks the cache: its name and bytes per position in the info
 * (int16: two bytes an entry; int8: one, plus 8 bytes of shift per head
 * vector), and a session runs on it; out of range, or asked of the float64
 * reference, it is refused with the field named */
START_TEST(kv_cache_param_picks_the_cache_and_its_bytes)
{
    qpack_model_params p = qpack_model_default_params();
    p.backend = QPACK_BACKEND_EMU;
    p.ctx = 16;
    qpack_error e;
    qpack_model *m16, *m8, *none;
    ck_assert_int_eq(qpack_model_open(&m16, model_path, &p, &e), QPACK_OK);
    p.kv_cache = QPACK_KV_INT8;
    ck_assert_int_eq(qpack_model_open(&m8, model_path, &p, &e), QPACK_OK);
    const qpack_model_info *a = qpack_model_get_info(m16), *b = qpack_model_get_info(m8);
    uint64_t kv_dim = (uint64_t)a->n_kv_heads * a->head_dim;
    ck_assert_str_eq(a->kv_cache, "int16");
    ck_assert_str_eq(b->kv_cache, "int8");
    ck_assert_uint_eq(a->kv_bytes_per_position, 2 * a->n_layers * 2 * kv_dim);
    ck_assert_uint_eq(b->kv_bytes_per_position, 2 * a->n_layers * (kv_dim + 8 * a->n_kv_heads));
    qpack_session *s = new_session(m8);
    feed(s, hello, 4);
    ck_assert_uint_eq(qpack_session_pos(s), 4);
    ck_assert_int_ge(qpack_argmax(s), 0);
    qpack_session_free(s);
    qpack_model_free(m8);
    qpack_model_free(m16);
    p.kv_cache = (qpack_kv_cache)2;
    ck_assert_int_eq(qpack_model_open(&none, model_path, &p, &e), QPACK_ERR_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "kv_cache"));
    p.kv_cache = QPACK_KV_INT8;
    p.backend = QPACK_BACKEND_REF;
    ck_assert_int_eq(qpack_model_open(&none, path_of("ck"), &p, &e), QPACK_ERR_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(e.message, "reference"));
    ck_assert_ptr_null(none);
}
END_TEST

START_TEST(inspect_tells_what_open_would_load_and_stats_name_the_kernels)
{
    qpack_model_info a, r;
    qpack_error e;
    ck_assert_int_eq(qpack_model_inspect(model_path, QPACK_BACKEND_EMU, &a, &e), QPACK_OK);
    qpack_model_params p = qpack_model_default_params();
    p.backend = QPACK_BACKEND_EMU;
    p.skip_tokenizer = true;
    qpack_model *m;
    ck_assert_int_eq(qpack_model_open(&m, model_path, &p, &e), QPACK_OK);
    const qpack_model_info *b = qpack_model_get_info(m);
    ck_assert_ptr_null(qpack_model_tokenizer(m));   /* skipped, but the model carries one */
    ck_assert(a.has_tokenizer && b->has_tokenizer);
    ck_assert_uint_eq(a.vocab, b->vocab);
    ck_assert_uint_eq(a.n_layers, b->n_layers);
    ck_assert_uint_eq(a.max_positions, b->max_positions);
    ck_assert_uint_eq(a.ctx, b->ctx);
    ck_assert_uint_eq(a.file_bytes, b->file_bytes);
    ck_assert_double_eq(a.bits_per_weight, 32);      /* q24: int32 */
    ck_assert_str_eq(a.format, "q24");
    size_t len;
    free(slurp(model_path, &len));
    ck_assert_uint_eq(a.file_bytes, len);
    ck_assert_int_eq(qpack_model_inspect(path_of("ck"), QPACK_BACKEND_REF, &r, &e), QPACK_OK);
    ck_assert_uint_eq(r.vocab, a.vocab);
    ck_assert_double_eq(r.bits_per_weight, 16);      /* the checkpoint's BF16 */
    ck_assert_uint_eq(r.kv_bytes_per_position, 2ull * r.n_layers * r.n_kv_heads * r.head_dim * 8);
    ck_assert_int_eq(qpack_model_inspect(path_of("nowhere"), QPACK_BACKEND_REF, &r, &e), QPACK_ERR_IO);

    /* the kernels' calls add up to the session's */
    qpack_session *s = new_session(m);
    feed(s, hello, 4);
    qpack_session_stats st;
    qpack_session_get_stats(s, &st);
    uint64_t calls = 0;
    bool matvec = false;
    for (uint32_t k = 0; k < st.n_kernels; k++) {
        calls += st.kernels[k].calls;
        matvec |= !strncmp(st.kernels[k].name, "matvec_", 7);
    }
    ck_assert(matvec);
    ck_assert_uint_eq(calls, st.calls);
    qpack_session_free(s);
    qpack_model_free(m);
}
END_TEST

START_TEST(tokenizer_of_a_model_without_loading_it)
{
    qpack_tokenizer *t;
    qpack_error e;
    ck_assert_int_eq(qpack_tokenizer_load_model(&t, model_path, QPACK_BACKEND_EMU, &e), QPACK_OK);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(qpack_tokenize(t, "Hello, world!", 13, &ids, &n, &e), QPACK_OK);
    ck_assert_mem_eq(ids, hello, sizeof hello);
    free(ids);
    qpack_tokenizer_free(t);
    ck_assert_int_eq(qpack_tokenizer_load_model(&t, path_of("ck"), QPACK_BACKEND_REF, &e), QPACK_OK);
    ck_assert_ptr_nonnull(t);
    qpack_tokenizer_free(t);
    /* a container without one: none, and no error */
    const char *bare = qp_test_model("bare", "--preset tiny --seed 4", "");
    ck_assert_int_eq(qpack_tokenizer_load_model(&t, bare, QPACK_BACKEND_EMU, &e), QPACK_OK);
    ck_assert_ptr_null(t);
    ck_assert_uint_eq(qpack_utf8_check("ok \xc3\xa9", 5, NULL), 5);
    const char *why = NULL;
    ck_assert_uint_eq(qpack_utf8_check("ab\xff", 3, &why), 2);
    ck_assert_ptr_nonnull(why);
}
END_TEST

START_TEST(chat_render_next_closes_the_reply_first)
{
    qpack_chat_message msg = {"user", "Bye"};
    char *text;
    size_t len;
    qpack_error e;
    ck_assert_int_eq(qpack_chat_render_next(&msg, 1, false, &text, &len, &e), QPACK_OK);
    ck_assert_str_eq(text, "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(text);
}
END_TEST

/* the list qpack records, and the folder's; one file changed tells them apart */
START_TEST(sources_of_a_container_match_its_checkpoint)
{
    qpack_source_file *rec, *have;
    size_t nr, nh;
    qpack_error e;
    ck_assert_int_eq(qpack_container_sources(model_path, &rec, &nr, &e), QPACK_OK);
    ck_assert_int_eq(qpack_checkpoint_sources(path_of("ck"), &have, &nh, &e), QPACK_OK);
    ck_assert_uint_eq(nr, nh);
    ck_assert_uint_ge(nr, 3);   /* config.json, tokenizer.json, model.safetensors at least */
    for (size_t i = 0; i < nr; i++) {
        ck_assert_str_eq(rec[i].name, have[i].name);
        ck_assert_uint_eq(rec[i].size, have[i].size);
        ck_assert_uint_eq(rec[i].xxh3, have[i].xxh3);
    }
    free(have);
    ck_assert_int_eq(run("cp -r %s %s", path_of("ck"), path_of("ck2")), 0);
    FILE *f = fopen(path_of("ck2/config.json"), "a");
    ck_assert_ptr_nonnull(f);
    fputc(' ', f);
    fclose(f);
    ck_assert_int_eq(qpack_checkpoint_sources(path_of("ck2"), &have, &nh, &e), QPACK_OK);
    ck_assert_str_eq(have[0].name, "config.json");
    ck_assert_uint_eq(have[0].size, rec[0].size + 1);
    ck_assert_uint_ne(have[0].xxh3, rec[0].xxh3);
    free(have);
    free(rec);
}
END_TEST

START_TEST(version_names_the_release)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d (git ", QPACK_VERSION_MAJOR, QPACK_VERSION_MINOR, QPACK_VERSION_PATCH);
    ck_assert_msg(strncmp(qpack_version(), want, strlen(want)) == 0, "%s", qpack_version());
}
END_TEST

int main(void)
{
    Suite *su = suite_create("lib");
    TCase *tc = tcase_create("api");
    tcase_add_unchecked_fixture(tc, make_model, remove_dir);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, emu_generates_qruns_tokens);
    tcase_add_test(tc, bpf_generates_qruns_tokens);
    tcase_add_test(tc, all_logits_rows_equal_fresh_feeds_of_each_prefix);
    tcase_add_test(tc, rewind_gives_the_bits_of_a_fresh_feed);
    tcase_add_test(tc, interleaved_sessions_give_what_each_gives_alone);
    tcase_add_test(tc, batches_give_what_each_session_gives_alone);
    tcase_add_test(tc, copies_continue_as_their_source);
    tcase_add_test(tc, kv_caches_tell_whether_a_switch_recomputes);
    tcase_add_test(tc, bad_input_is_refused_before_compute_with_its_code);
    tcase_add_test(tc, sampler_greedy_seeded_min_p_and_repeat_penalty);
    tcase_add_test(tc, sampler_draws_as_a_full_sort_does);
    tcase_add_test(tc, text_round_trips_and_the_decoder_never_cuts_a_character);
    tcase_add_test(tc, chat_render_is_qwen3s_template);
    tcase_add_test(tc, interrupt_stops_a_feed_from_another_thread);
    tcase_add_test(tc, two_emu_models_on_two_threads_give_their_solo_bits);
    tcase_add_test(tc, a_call_budget_changes_no_bit);
    tcase_add_test(tc, version_names_the_release);
    tcase_add_test(tc, lookup_step_gives_the_tokens_and_logits_of_greedy_decoding);
    tcase_add_test(tc, lookup_steps_in_batches_give_what_each_gives_alone);
    tcase_add_test(tc, feed_each_sees_every_row_and_can_stop_the_feed);
    tcase_add_test(tc, progress_comes_after_each_block_of_a_feed);
    tcase_add_test(tc, hidden_states_follow_the_reference_and_leave_the_logits_alone);
    tcase_add_test(tc, embeddings_follow_the_reference);
    tcase_add_test(tc, reranker_container_records_its_task);
    tcase_add_test(tc, inspect_tells_what_open_would_load_and_stats_name_the_kernels);
    tcase_add_test(tc, kv_cache_param_picks_the_cache_and_its_bytes);
    tcase_add_test(tc, tokenizer_of_a_model_without_loading_it);
    tcase_add_test(tc, chat_render_next_closes_the_reply_first);
    tcase_add_test(tc, sources_of_a_container_match_its_checkpoint);
    tcase_add_test(tc, a_loaded_model_gives_the_bits_of_one_opened_in_process);
    tcase_add_test(tc, kernel_schedule_gives_the_host_schedules_bits);
    suite_add_tcase(su, tc);
    return qp_test_main_nofork(su);
}
