/* test_session_file.c - qpack_session_save / qpack_session_restore on a
 * tiny random model with the official tokenizer:
 *   - a session restored from a file, in another model instance and a
 *     slot whose rows hold another sequence, goes on with the bits of the
 *     session that never stopped: the logits after the restore, after the
 *     rest of the prompt and after each greedy step (memcmp), on emu and
 *     (root) bpf, with the int16 and the int8 cache; a session saved on
 *     emu goes on in bpf with emu's bits;
 *   - refusals, each with its code and one line, the session unchanged:
 *     another model (a second container), the other cache type, a context
 *     too small, a flipped byte, a truncated file, a later version, a
 *     missing file, a NaN logit under a matching checksum, the reference
 *     backend. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "qpack.h"
#include "qp_test.h"

#define PROMPT 37               /* past a block: several blocks' rows */
#define REST 5
#define STEPS 6

static char model_path[512], other_path[512];

static void make_models(void)
{
    char args[512];
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "--preset tiny --vocab 151936 --seed %d --tokenizer-dir %s/assets/qwen3-tokenizer",
                 2 + k, QP_SOURCE_DIR);
        char *dst = k ? other_path : model_path;
        snprintf(dst, sizeof model_path, "%s", qp_test_model(k ? "ck2" : "ck", args, ""));
    }
}

static qpack_model *open_model(const char *path, qpack_backend backend, qpack_kv_cache kv, uint32_t ctx,
                               uint32_t sessions)
{
    qpack_model_params p = qpack_model_default_params();
    p.backend = backend;
    p.kv_cache = kv;
    p.ctx = ctx;
    p.max_sessions = sessions;
    qpack_model *m;
    qpack_error e;
    ck_assert_msg(qpack_model_open(&m, path, &p, &e) == QPACK_OK, "%s: %s", path, e.message);
    return m;
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

static void fill_ids(int32_t *ids, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 7919 + 13 * (size_t)seed) % 5000);
}

/* feeds ids[PROMPT, PROMPT + REST), then STEPS greedy tokens: the logits
 * after each, [1 + STEPS][vocab] */
static void go_on(qpack_session *s, const int32_t *ids, uint32_t vocab, double *out)
{
    feed(s, ids + PROMPT, REST);
    for (int i = 0; i <= STEPS; i++) {
        memcpy(out + (size_t)i * vocab, qpack_logits(s), vocab * sizeof *out);
        int32_t next = qpack_argmax(s);
        if (i < STEPS)
            feed(s, &next, 1);
    }
}

static void restored_session_goes_on_as_the_saved_one(qpack_backend backend, qpack_kv_cache kv)
{
    int32_t ids[PROMPT + REST], other[40];
    fill_ids(ids, PROMPT + REST, 1);
    fill_ids(other, 40, 7);
    const char *file = path_of("s.bin");
    qpack_error e;

    qpack_model *m1 = open_model(model_path, backend, kv, 0, 1);
    uint32_t vocab = qpack_model_get_info(m1)->vocab;
    size_t bytes = (size_t)(1 + STEPS) * vocab * sizeof(double);
    double *want = malloc(bytes), *have = malloc(bytes), *after_prompt = malloc(vocab * sizeof(double));
    qpack_session *a = new_session(m1);
    feed(a, ids, PROMPT);
    memcpy(after_prompt, qpack_logits(a), vocab * sizeof(double));
    ck_assert_msg(qpack_session_save(a, file, &e) == QPACK_OK, "%s", e.message);
    go_on(a, ids, vocab, want);
    qpack_session_free(a);
    qpack_model_free(m1);

    /* another instance; the restored session's slot holds another sequence */
    qpack_model *m2 = open_model(model_path, backend, kv, 0, 2);
    qpack_session *x = new_session(m2), *y = new_session(m2);
    feed(x, other, 20);
    feed(y, other, 40);
    uint32_t n = 0;
    ck_assert_msg(qpack_session_restore(y, file, &n, &e) == QPACK_OK, "%s", e.message);
    ck_assert_uint_eq(n, PROMPT);
    ck_assert_uint_eq(qpack_session_pos(y), PROMPT);
    ck_assert_mem_eq(qpack_session_tokens(y), ids, PROMPT * sizeof *ids);
    ck_assert_msg(!memcmp(qpack_logits(y), after_prompt, vocab * sizeof(double)), "the restored logits differ");
    go_on(y, ids, vocab, have);
    for (int i = 0; i <= STEPS; i++)
        ck_assert_msg(!memcmp(want + (size_t)i * vocab, have + (size_t)i * vocab, vocab * sizeof(double)),
                      "step %d after the restore differs from the session that went on", i);
    qpack_session_free(x);
    qpack_session_free(y);
    qpack_model_free(m2);
    free(want);
    free(have);
    free(after_prompt);
}

START_TEST(emu_restored_session_goes_on_as_the_saved_one)
{
    restored_session_goes_on_as_the_saved_one(QPACK_BACKEND_EMU, QPACK_KV_INT16);
    restored_session_goes_on_as_the_saved_one(QPACK_BACKEND_EMU, QPACK_KV_INT8);
}
END_TEST

START_TEST(bpf_restored_session_goes_on_as_the_saved_one)
{
    if (geteuid() != 0)     /* BPF needs root */
        return;
    restored_session_goes_on_as_the_saved_one(QPACK_BACKEND_BPF, QPACK_KV_INT16);
    restored_session_goes_on_as_the_saved_one(QPACK_BACKEND_BPF, QPACK_KV_INT8);
}
END_TEST

/* The file names no backend: a session saved on the host twin goes on in
 * BPF with the bits the host twin gives (the twin is bit-identical) */
START_TEST(a_session_saved_on_emu_goes_on_in_bpf)
{
    if (geteuid() != 0)
        return;
    int32_t ids[PROMPT + REST];
    fill_ids(ids, PROMPT + REST, 3);
    const char *file = path_of("emu.bin");
    qpack_error e;
    qpack_model *emu = open_model(model_path, QPACK_BACKEND_EMU, QPACK_KV_INT16, 0, 1);
    uint32_t vocab = qpack_model_get_info(emu)->vocab;
    size_t bytes = (size_t)(1 + STEPS) * vocab * sizeof(double);
    double *want = malloc(bytes), *have = malloc(bytes);
    qpack_session *a = new_session(emu);
    feed(a, ids, PROMPT);
    ck_assert_msg(qpack_session_save(a, file, &e) == QPACK_OK, "%s", e.message);
    go_on(a, ids, vocab, want);
    qpack_session_free(a);
    qpack_model_free(emu);
    qpack_model *bpf = open_model(model_path, QPACK_BACKEND_BPF, QPACK_KV_INT16, 0, 1);
    qpack_session *b = new_session(bpf);
    ck_assert_msg(qpack_session_restore(b, file, NULL, &e) == QPACK_OK, "%s", e.message);
    go_on(b, ids, vocab, have);
    ck_assert_msg(!memcmp(want, have, bytes), "bpf after an emu save differs from emu going on");
    qpack_session_free(b);
    qpack_model_free(bpf);
    free(want);
    free(have);
}
END_TEST

/* restoring path into s fails with code, its message holding needle, and
 * leaves s's tokens and logits as they were */
static void refused(qpack_session *s, const char *path, qpack_status code, const char *needle)
{
    uint32_t pos = qpack_session_pos(s);
    int32_t tokens[8];
    double first = qpack_logits(s)[0];
    memcpy(tokens, qpack_session_tokens(s), sizeof tokens);
    qpack_error e;
    uint32_t n = 99;
    ck_assert_int_eq(qpack_session_restore(s, path, &n, &e), code);
    ck_assert_msg(strstr(e.message, needle), "'%s' lacks '%s'", e.message, needle);
    ck_assert_ptr_null(strchr(e.message, '\n'));
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(qpack_session_pos(s), pos);
    ck_assert_mem_eq(qpack_session_tokens(s), tokens, sizeof tokens);
    ck_assert(qpack_logits(s)[0] == first);
}

/* a copy of the file at src with its bytes [at, at + len) xor-ed with x
 * and cut to size */
static const char *altered(const char *src, const char *name, size_t at, uint8_t x, long cut)
{
    size_t len;
    char *data = slurp(src, &len);
    if (at < len)
        data[at] ^= (char)x;
    const char *dst = path_of("%s", name);
    spit(dst, data, cut < 0 ? len + (size_t)cut : len);
    free(data);
    return dst;
}

START_TEST(restores_of_what_does_not_fit_are_refused)
{
    int32_t ids[PROMPT];
    fill_ids(ids, PROMPT, 1);
    const char *file = path_of("r.bin");
    qpack_error e;
    qpack_model *m = open_model(model_path, QPACK_BACKEND_EMU, QPACK_KV_INT16, 0, 2);
    qpack_session *a = new_session(m), *b = new_session(m);
    feed(a, ids, PROMPT);
    ck_assert_int_eq(qpack_session_save(a, file, &e), QPACK_OK);
    feed(b, ids + 3, 8);

    size_t len;
    free(slurp(file, &len));
    refused(b, altered(file, "flip.bin", len / 2, 0x10, 0), QPACK_ERR_FORMAT, "checksum");
    refused(b, altered(file, "cut.bin", 0, 0, -100), QPACK_ERR_FORMAT, "checksum");
    refused(b, altered(file, "v2.bin", 0, 3, 0), QPACK_ERR_FORMAT, "version 2");
    refused(b, path_of("none.bin"), QPACK_ERR_IO, "none.bin");
    /* a NaN logit under a checksum made to match */
    char *data = slurp(file, &len);
    const double nan = NAN;
    memcpy(data + 64 + 4 * PROMPT, &nan, sizeof nan);
    uint64_t sum = XXH3_64bits(data, len - 8);
    memcpy(data + len - 8, &sum, 8);            /* little-endian host */
    spit(path_of("nan.bin"), data, len);
    free(data);
    refused(b, path_of("nan.bin"), QPACK_ERR_FORMAT, "logit 0 is not a finite number");
    /* the file's own session is refused nothing: the same bytes restore */
    uint32_t n;
    ck_assert_int_eq(qpack_session_restore(b, file, &n, &e), QPACK_OK);
    ck_assert_uint_eq(n, PROMPT);
    feed(b, ids + 3, 8);

    qpack_model *other = open_model(other_path, QPACK_BACKEND_EMU, QPACK_KV_INT16, 0, 1);
    qpack_session *o = new_session(other);
    feed(o, ids, 8);
    refused(o, file, QPACK_ERR_ARGUMENT, "another model");

    qpack_model *kv8 = open_model(model_path, QPACK_BACKEND_EMU, QPACK_KV_INT8, 0, 1);
    qpack_session *k = new_session(kv8);
    feed(k, ids, 8);
    refused(k, file, QPACK_ERR_ARGUMENT, "int16 KV cache");

    qpack_model *small = open_model(model_path, QPACK_BACKEND_EMU, QPACK_KV_INT16, 32, 1);
    qpack_session *c = new_session(small);
    feed(c, ids, 8);
    refused(c, file, QPACK_ERR_CONTEXT, "context of 32");

    qpack_model_params p = qpack_model_default_params();
    p.backend = QPACK_BACKEND_REF;
    qpack_model *ref;
    ck_assert_int_eq(qpack_model_open(&ref, path_of("ck"), &p, &e), QPACK_OK);
    qpack_session *r = new_session(ref);
    feed(r, ids, 8);
    refused(r, file, QPACK_ERR_ARGUMENT, "reference backend");
    ck_assert_int_eq(qpack_session_save(r, path_of("ref.bin"), &e), QPACK_ERR_ARGUMENT);
    ck_assert_int_ne(access(path_of("ref.bin"), F_OK), 0);

    qpack_session_free(r);
    qpack_model_free(ref);
    qpack_session_free(c);
    qpack_model_free(small);
    qpack_session_free(k);
    qpack_model_free(kv8);
    qpack_session_free(o);
    qpack_model_free(other);
    qpack_session_free(a);
    qpack_session_free(b);
    qpack_model_free(m);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("session_file");
    TCase *tc = tcase_create("save_restore");
    tcase_add_unchecked_fixture(tc, make_models, remove_dir);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, emu_restored_session_goes_on_as_the_saved_one);
    tcase_add_test(tc, bpf_restored_session_goes_on_as_the_saved_one);
    tcase_add_test(tc, a_session_saved_on_emu_goes_on_in_bpf);
    tcase_add_test(tc, restores_of_what_does_not_fit_are_refused);
    suite_add_tcase(su, tc);
    return qp_test_main_nofork(su);
}
