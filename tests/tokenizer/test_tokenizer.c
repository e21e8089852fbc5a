/* test_tokenizer.c - the Qwen3 tokenizer against Hugging Face tokenizers.
 *
 * Expected ids and texts come from tests/data/tokenizer/{encode,decode}.jsonl, written by
 * scripts/gen_tokenizer_expected.mjs with the `tokenizers` npm package (the
 * Rust library). Every case must match exactly.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat.h"
#include "tok_internal.h"
#include "tok_test_util.h"
#include "tokenizer.h"
#include "utf8_stream.h"
#include "qp_test.h"

static qp_tok *tok;
static tok_case *enc_cases, *dec_cases;
static size_t n_enc, n_dec;

static void setup(void)
{
    tok = tok_official();
    enc_cases = tok_cases_load(TOK_DATA "/encode.jsonl", &n_enc);
    dec_cases = tok_cases_load(TOK_DATA "/decode.jsonl", &n_dec);
}

static void teardown(void)
{
    tok_cases_free(enc_cases, n_enc);
    tok_cases_free(dec_cases, n_dec);
}

static int ids_equal(const qp_tok_ids *a, const qp_tok_ids *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->v, b->v, a->len * sizeof(int32_t)) == 0);
}

static void print_ids(const char *label, const qp_tok_ids *ids)
{
    fprintf(stderr, "  %s:", label);
    for (size_t i = 0; i < ids->len && i < 40; i++)
        fprintf(stderr, " %d", ids->v[i]);
    fprintf(stderr, ids->len > 40 ? " ...\n" : "\n");
}

/* ---- encoding ----------------------------------------------------------- */

START_TEST(hello_world_is_9707_11_1879_0)
{
    qp_tok_ids ids = {0};
    qp_err err = {{0}};
    ck_assert_int_eq(qp_tok_encode(tok, "Hello, world!", 13, &ids, &err), 0);
    const int32_t want[] = {9707, 11, 1879, 0};
    ck_assert_uint_eq(ids.len, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ids.v[i], want[i]);
    qp_tok_ids_free(&ids);
}
END_TEST

START_TEST(corpus_ids_match_hugging_face_exactly)
{
    ck_assert_uint_ge(n_enc, 500);
    size_t bad = 0;
    for (size_t i = 0; i < n_enc; i++) {
        qp_tok_ids ids = {0};
        qp_err err = {{0}};
        int r = qp_tok_encode(tok, enc_cases[i].text.s, enc_cases[i].text.len, &ids, &err);
        if (r != 0 || !ids_equal(&ids, &enc_cases[i].ids)) {
            if (bad++ < 10) {
                fprintf(stderr, "%s: %s\n", enc_cases[i].name, r ? err.msg : "ids differ");
                print_ids("want", &enc_cases[i].ids);
                print_ids("got ", &ids);
            }
        }
        qp_tok_ids_free(&ids);
    }
    ck_assert_msg(bad == 0, "%zu of %zu corpus strings differ", bad, n_enc);
}
END_TEST

START_TEST(encode_appends_and_repeats_identically)
{
    /* the word cache must not change anything: encode everything twice */
    qp_tok_ids ids = {0};
    qp_err err = {{0}};
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n_enc; i++) {
            size_t before = ids.len;
            ck_assert_int_eq(qp_tok_encode(tok, enc_cases[i].text.s, enc_cases[i].text.len, &ids, &err), 0);
            qp_tok_ids got = {.v = ids.v + before, .len = ids.len - before};
            ck_assert_msg(ids_equal(&got, &enc_cases[i].ids), "%s (pass %d)", enc_cases[i].name, pass);
        }
    qp_tok_ids_free(&ids);
}
END_TEST

/* ---- decoding ----------------------------------------------------------- */

static void decode_all(const qp_tok_ids *ids, int flags, qp_tok_text *out)
{
    qp_err err = {{0}};
    out->len = 0;
    ck_assert_msg(qp_tok_decode(tok, ids->v, ids->len, flags, out, &err) == 0, "%s", err.msg);
    ck_assert(qp_tok_text_append(out, "", 0) == 0);
}

static int text_equal(const qp_tok_text *a, const qp_tok_text *b)
{
    return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
}

START_TEST(decode_matches_hugging_face_on_the_corpus)
{
    qp_tok_text out = {0};
    for (size_t i = 0; i < n_enc; i++) {
        decode_all(&enc_cases[i].ids, 0, &out);
        ck_assert_msg(text_equal(&out, &enc_cases[i].decoded), "%s", enc_cases[i].name);
    }
    qp_tok_text_free(&out);
}
END_TEST

/* NFC as tokenizers computes it: utf8proc's NFC except around characters
 * newer than tokenizers' Unicode 9.0 normalization data (tok_nfc.c). The
 * corpus has a case for each of those (nfc-barrier-*), where plain utf8proc
 * NFC would differ. */
START_TEST(decode_of_encode_is_the_nfc_text)
{
    qp_tok_text out = {0}, nfc = {0};
    size_t plain_differs = 0;
    for (size_t i = 0; i < n_enc; i++) {
        const tok_case *c = &enc_cases[i];
        qp_err err = {{0}};
        nfc.len = 0;
        ck_assert(tok_nfc(c->text.s, c->text.len, &nfc, &err) == 0);
        decode_all(&c->ids, 0, &out);
        ck_assert_msg(out.len == nfc.len && memcmp(out.s, nfc.s, nfc.len) == 0, "%s", c->name);
        utf8proc_uint8_t *plain = NULL;
        utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)c->text.s,
                                          (utf8proc_ssize_t)c->text.len, &plain,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        ck_assert_int_ge(n, 0);
        plain_differs += (size_t)n != nfc.len || memcmp(plain, nfc.s, nfc.len) != 0;
        free(plain);
    }
    ck_assert_uint_gt(plain_differs, 0); /* the barrier cases do bite */
    qp_tok_text_free(&out);
    qp_tok_text_free(&nfc);
}
END_TEST

START_TEST(decode_cases_match_hugging_face_including_replacements)
{
    qp_tok_text out = {0};
    for (size_t i = 0; i < n_dec; i++) {
        decode_all(&dec_cases[i].ids, dec_cases[i].skip_special ? QP_TOK_SKIP_SPECIAL : 0, &out);
        ck_assert_msg(text_equal(&out, &dec_cases[i].text), "%s: got \"%s\" want \"%s\"",
                      dec_cases[i].name, out.s, dec_cases[i].text.s);
    }
    qp_tok_text_free(&out);
}
END_TEST

START_TEST(decode_rejects_an_unknown_id_and_keeps_the_output)
{
    qp_tok_text out = {0};
    qp_err err = {{0}};
    ck_assert(qp_tok_text_appends(&out, "kept") == 0);
    const int32_t ids[] = {9707, 151936};
    ck_assert_int_eq(qp_tok_decode(tok, ids, 2, 0, &out, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "151936"));
    ck_assert_str_eq(out.s, "kept");
    const int32_t neg[] = {-1};
    ck_assert_int_eq(qp_tok_decode(tok, neg, 1, 0, &out, &err), -1);
    qp_tok_text_free(&out);
}
END_TEST

/* ---- streaming ---------------------------------------------------------- */

static int has_multibyte(const qp_tok_text *t)
{
    for (size_t i = 0; i < t->len; i++)
        if ((unsigned char)t->s[i] >= 0x80)
            return 1;
    return 0;
}

START_TEST(stream_equals_whole_decode_token_by_token)
{
    qp_tok_text whole = {0}, out = {0};
    qp_err err = {{0}};
    for (size_t i = 0; i < n_enc + n_dec; i++) {
        const tok_case *c = i < n_enc ? &enc_cases[i] : &dec_cases[i - n_enc];
        int flags = c->skip_special ? QP_TOK_SKIP_SPECIAL : 0;
        decode_all(&c->ids, flags, &whole);
        qp_tok_stream st;
        qp_tok_stream_init(&st, tok, flags);
        out.len = 0;
        for (size_t k = 0; k < c->ids.len; k++) {
            ck_assert(qp_tok_stream_push(&st, c->ids.v[k], &out, &err) == 0);
            /* what has come out so far is whole characters and a prefix */
            ck_assert_msg(qp_utf8_check(out.s, out.len, NULL) == out.len, "%s", c->name);
            ck_assert_msg(out.len <= whole.len && memcmp(out.s, whole.s, out.len) == 0,
                          "%s: stream diverged at token %zu", c->name, k);
        }
        ck_assert(qp_tok_stream_finish(&st, &out, &err) == 0);
        ck_assert_msg(text_equal(&out, &whole), "%s", c->name);
    }
    qp_tok_text_free(&whole);
    qp_tok_text_free(&out);
}
END_TEST

START_TEST(byte_stream_equals_whole_for_every_split_point)
{
    qp_tok_text out = {0}, want = {0};
    size_t checked = 0;
    for (size_t i = 0; i < n_enc + n_dec; i++) {
        const qp_tok_text *t = i < n_enc ? &enc_cases[i].text : &dec_cases[i - n_enc].text;
        if (!has_multibyte(t) || t->len > 2000)
            continue;
        want.len = 0;
        ck_assert(qp_utf8_append_lossy(&want, t->s, t->len) == 0);
        for (size_t cut = 0; cut <= t->len; cut++) {
            qp_utf8_stream st;
            qp_utf8_stream_init(&st);
            out.len = 0;
            ck_assert(qp_utf8_stream_feed(&st, t->s, cut, &out) == 0);
            ck_assert(qp_utf8_check(out.s ? out.s : "", out.len, NULL) == out.len);
            ck_assert(qp_utf8_stream_feed(&st, t->s + cut, t->len - cut, &out) == 0);
            ck_assert(qp_utf8_stream_finish(&st, &out) == 0);
            ck_assert_msg(out.len == want.len && memcmp(out.s, want.s, want.len) == 0,
                          "split at byte %zu of %zu", cut, t->len);
            checked++;
        }
    }
    ck_assert_uint_gt(checked, 10000);
    qp_tok_text_free(&out);
    qp_tok_text_free(&want);
}
END_TEST

START_TEST(byte_stream_replaces_ill_formed_input_like_from_utf8_lossy)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"\xF0\x9F\x98" "A", "\xEF\xBF\xBD" "A"},          /* truncated 4-byte, then ASCII */
        {"\xE0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"},          /* E0 needs A0..BF next */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},          /* overlong */
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"a\xE4\xB8", "a\xEF\xBF\xBD"},                    /* incomplete at the end */
        {"\xFF", "\xEF\xBF\xBD"},
        {"\xE4\xB8\xAD", "\xE4\xB8\xAD"},
    };
    qp_tok_text out = {0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = strlen(cases[i].in);
        for (size_t cut = 0; cut <= n; cut++) {
            for (size_t cut2 = cut; cut2 <= n; cut2++) {
                qp_utf8_stream st;
                qp_utf8_stream_init(&st);
                out.len = 0;
                ck_assert(qp_utf8_stream_feed(&st, cases[i].in, cut, &out) == 0);
                ck_assert(qp_utf8_stream_feed(&st, cases[i].in + cut, cut2 - cut, &out) == 0);
                ck_assert(qp_utf8_stream_feed(&st, cases[i].in + cut2, n - cut2, &out) == 0);
                ck_assert(qp_utf8_stream_finish(&st, &out) == 0);
                ck_assert_msg(out.len == strlen(cases[i].want) && memcmp(out.s, cases[i].want, out.len) == 0,
                              "case %zu cut %zu/%zu", i, cut, cut2);
            }
        }
    }
    qp_tok_text_free(&out);
}
END_TEST

START_TEST(stream_holds_back_a_split_emoji_until_complete)
{
    /* U+1D518 (fraktur U) is two tokens: nothing may come out after the first */
    qp_tok_ids ids = {0};
    qp_tok_text out = {0};
    qp_err err = {{0}};
    ck_assert(qp_tok_encode(tok, "\xF0\x9D\x94\x98", 4, &ids, &err) == 0);
    ck_assert_uint_ge(ids.len, 2);
    qp_tok_stream st;
    qp_tok_stream_init(&st, tok, 0);
    for (size_t k = 0; k + 1 < ids.len; k++)
        ck_assert(qp_tok_stream_push(&st, ids.v[k], &out, &err) == 0);
    ck_assert_uint_eq(out.len, 0);
    ck_assert(qp_tok_stream_push(&st, ids.v[ids.len - 1], &out, &err) == 0);
    ck_assert_str_eq(out.s, "\xF0\x9D\x94\x98");
    /* a stream ending mid-character gets one U+FFFD */
    qp_tok_stream_init(&st, tok, 0);
    out.len = 0;
    ck_assert(qp_tok_stream_push(&st, ids.v[0], &out, &err) == 0);
    ck_assert(qp_tok_stream_finish(&st, &out, &err) == 0);
    ck_assert_str_eq(out.s, QP_UTF8_REPLACEMENT);
    qp_tok_ids_free(&ids);
    qp_tok_text_free(&out);
}
END_TEST

/* ---- vocabulary --------------------------------------------------------- */

START_TEST(vocabulary_lookups)
{
    ck_assert_int_eq(qp_tok_vocab_size(tok), 151669);
    ck_assert_int_eq(qp_tok_token_id(tok, "<|im_end|>", 10), 151645);
    ck_assert_int_eq(qp_tok_token_id(tok, "Hello", 5), 9707);
    ck_assert_int_eq(qp_tok_token_id(tok, "\xC4\xA0world", 7), 1879); /* "Ġworld" */
    ck_assert_int_eq(qp_tok_token_id(tok, "no such token!", 14), -1);
    size_t len;
    ck_assert_str_eq(qp_tok_token_string(tok, 151667, &len), "<think>");
    ck_assert_ptr_null(qp_tok_token_string(tok, 151669, &len));
    ck_assert_int_eq(qp_tok_is_special(tok, 151645), 1);
    ck_assert_int_eq(qp_tok_is_special(tok, 151667), 0); /* <think> is added, not special */
    ck_assert_int_eq(qp_tok_is_added(tok, 151667), 1);
    ck_assert_int_eq(qp_tok_is_added(tok, 9707), 0);
}
END_TEST

START_TEST(encode_refuses_invalid_utf8_naming_the_offset)
{
    qp_tok_ids ids = {0};
    qp_err err = {{0}};
    ck_assert(qp_tok_ids_push(&ids, 7) == 0);
    ck_assert_int_eq(qp_tok_encode(tok, "abc\xC3(", 5, &ids, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte offset 3"));
    ck_assert_uint_eq(ids.len, 1); /* out untouched */
    ck_assert_int_eq(qp_tok_encode(tok, "\xED\xA0\x80", 3, &ids, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "surrogate"));
    qp_tok_ids_free(&ids);
}
END_TEST

START_TEST(encode_survives_arbitrary_bytes)
{
    /* the fuzzing contract: any bytes, never a crash, valid UTF-8 encodes */
    uint32_t x = 12345;
    qp_tok_ids ids = {0};
    qp_err err = {{0}};
    char buf[64];
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(round % 63) + 1;
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            buf[i] = (char)(x >> 24);
        }
        ids.len = 0;
        int r = qp_tok_encode(tok, buf, n, &ids, &err);
        ck_assert_int_eq(r == 0, qp_utf8_check(buf, n, NULL) == n);
    }
    qp_tok_ids_free(&ids);
}
END_TEST

START_TEST(long_whitespace_and_words_encode)
{
    /* a megabyte of one class exercises the regex's backtracking stack */
    size_t n = 1 << 20;
    char *s = malloc(n);
    qp_tok_ids ids = {0};
    qp_err err = {{0}};
    memset(s, ' ', n);
    ck_assert_msg(qp_tok_encode(tok, s, n, &ids, &err) == 0, "%s", err.msg);
    memset(s, 'a', n);
    ids.len = 0;
    ck_assert_msg(qp_tok_encode(tok, s, n, &ids, &err) == 0, "%s", err.msg);
    qp_tok_text out = {0};
    ck_assert(qp_tok_decode(tok, ids.v, ids.len, 0, &out, &err) == 0);
    ck_assert(out.len == n && memcmp(out.s, s, n) == 0);
    free(s);
    qp_tok_ids_free(&ids);
    qp_tok_text_free(&out);
}
END_TEST

/* ---- added-token flags ---------------------------------------------------- */

/* The official file with tests/data/tokenizer/added_tokens_extra.json
 * appended to its "added_tokens" (the generator does the same). */
static qp_tok *load_with_extra_tokens(void)
{
    size_t len, extra_len;
    char *json = tok_read_file(TOK_ASSET, &len);
    char *extra = tok_read_file(TOK_DATA "/added_tokens_extra.json", &extra_len);
    char *normalizer = strstr(json, "\"normalizer\"");
    ck_assert_ptr_nonnull(normalizer);
    char *close = normalizer;
    while (close > json && *close != ']')
        close--;
    qp_tok_text edited = {0};
    ck_assert(qp_tok_text_append(&edited, json, (size_t)(close - json)) == 0);
    ck_assert(qp_tok_text_appends(&edited, ",\n") == 0);
    ck_assert(qp_tok_text_append(&edited, extra, extra_len) == 0);
    ck_assert(qp_tok_text_append(&edited, close, len - (size_t)(close - json)) == 0);
    qp_tok *t = NULL;
    qp_err err = {{0}};
    ck_assert_msg(qp_tok_load_buffer(&t, edited.s, edited.len, "edited", &err) == 0, "%s", err.msg);
    free(json);
    free(extra);
    qp_tok_text_free(&edited);
    return t;
}

START_TEST(added_token_flags_match_hugging_face)
{
    /* lstrip, rstrip, single_word and normalized: true, which Qwen3's own
     * added tokens never set */
    qp_tok *t = load_with_extra_tokens();
    size_t n;
    tok_case *cases = tok_cases_load(TOK_DATA "/added_flags.jsonl", &n);
    ck_assert_uint_ge(n, 20);
    qp_tok_text out = {0};
    for (size_t i = 0; i < n; i++) {
        qp_tok_ids ids = {0};
        qp_err err = {{0}};
        ck_assert(qp_tok_encode(t, cases[i].text.s, cases[i].text.len, &ids, &err) == 0);
        if (!ids_equal(&ids, &cases[i].ids)) {
            print_ids("want", &cases[i].ids);
            print_ids("got ", &ids);
            ck_abort_msg("%s: \"%s\"", cases[i].name, cases[i].text.s);
        }
        out.len = 0;
        ck_assert(qp_tok_decode(t, ids.v, ids.len, 0, &out, &err) == 0);
        ck_assert_msg(out.len == cases[i].decoded.len && memcmp(out.s, cases[i].decoded.s, out.len) == 0,
                      "%s decode", cases[i].name);
        qp_tok_ids_free(&ids);
    }
    qp_tok_text_free(&out);
    tok_cases_free(cases, n);
    qp_tok_free(t);
}
END_TEST

/* ---- chat --------------------------------------------------------------- */

static const tok_case *enc_case(const char *name)
{
    for (size_t i = 0; i < n_enc; i++)
        if (strcmp(enc_cases[i].name, name) == 0)
            return &enc_cases[i];
    ck_abort_msg("no corpus case %s", name);
    return NULL;
}

static void assert_encodes_like(const qp_tok_text *text, const char *case_name)
{
    const tok_case *c = enc_case(case_name);
    ck_assert_msg(text_equal(text, &c->text), "chat text differs from %s", case_name);
    qp_tok_ids ids = {0};
    qp_err err = {{0}};
    ck_assert(qp_tok_encode(tok, text->s, text->len, &ids, &err) == 0);
    ck_assert(ids_equal(&ids, &c->ids));
    qp_tok_ids_free(&ids);
}

START_TEST(chat_prompt_without_thinking_has_the_empty_think_block)
{
    qp_tok_text t = {0};
    qp_err err = {{0}};
    ck_assert(qp_chat_prompt(NULL, "What is 2+2?", 0, &t, &err) == 0);
    ck_assert_str_eq(t.s, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
                          "<think>\n\n</think>\n\n");
    assert_encodes_like(&t, "chat-1");
    qp_tok_text_free(&t);
}
END_TEST

START_TEST(chat_prompt_with_thinking_and_system)
{
    qp_tok_text t = {0};
    qp_err err = {{0}};
    ck_assert(qp_chat_prompt(NULL, "Hello, who are you?", 1, &t, &err) == 0);
    assert_encodes_like(&t, "chat-0");
    t.len = 0;
    ck_assert(qp_chat_prompt("You are a helpful assistant.", "Hi", 0, &t, &err) == 0);
    assert_encodes_like(&t, "chat-2");
    qp_tok_text_free(&t);
}
END_TEST

START_TEST(chat_later_turns_close_the_reply_and_add_only_the_suffix)
{
    qp_chat chat;
    qp_tok_text t = {0};
    qp_err err = {{0}};
    qp_chat_init(&chat, 0);
    ck_assert(qp_chat_turn(&chat, "ignored later", "A", &t, &err) == 0);
    t.len = 0;
    ck_assert(qp_chat_turn(&chat, "ignored later", "and then?", &t, &err) == 0);
    assert_encodes_like(&t, "chat-5");
    ck_assert_int_eq(chat.turns, 2);
    qp_tok_text_free(&t);
}
END_TEST

START_TEST(chat_stop_tokens_come_from_the_tokenizer)
{
    qp_chat_stops stops;
    qp_err err = {{0}};
    ck_assert(qp_chat_stop_ids(tok, &stops, &err) == 0);
    ck_assert_int_eq(stops.n, 2);
    ck_assert_int_eq(stops.ids[0], 151645);
    ck_assert_int_eq(stops.ids[1], 151643);
    ck_assert(qp_chat_is_stop(&stops, 151645));
    ck_assert(qp_chat_is_stop(&stops, 151643));
    ck_assert(!qp_chat_is_stop(&stops, 151644));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("conformance");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, hello_world_is_9707_11_1879_0);
    tcase_add_test(tc, corpus_ids_match_hugging_face_exactly);
    tcase_add_test(tc, encode_appends_and_repeats_identically);
    tcase_add_test(tc, decode_matches_hugging_face_on_the_corpus);
    tcase_add_test(tc, decode_of_encode_is_the_nfc_text);
    tcase_add_test(tc, decode_cases_match_hugging_face_including_replacements);
    tcase_add_test(tc, decode_rejects_an_unknown_id_and_keeps_the_output);
    tcase_add_test(tc, stream_equals_whole_decode_token_by_token);
    tcase_add_test(tc, byte_stream_equals_whole_for_every_split_point);
    tcase_add_test(tc, byte_stream_replaces_ill_formed_input_like_from_utf8_lossy);
    tcase_add_test(tc, stream_holds_back_a_split_emoji_until_complete);
    tcase_add_test(tc, vocabulary_lookups);
    tcase_add_test(tc, encode_refuses_invalid_utf8_naming_the_offset);
    tcase_add_test(tc, encode_survives_arbitrary_bytes);
    tcase_add_test(tc, long_whitespace_and_words_encode);
    tcase_add_test(tc, added_token_flags_match_hugging_face);
    tcase_add_test(tc, chat_prompt_without_thinking_has_the_empty_think_block);
    tcase_add_test(tc, chat_prompt_with_thinking_and_system);
    tcase_add_test(tc, chat_later_turns_close_the_reply_and_add_only_the_suffix);
    tcase_add_test(tc, chat_stop_tokens_come_from_the_tokenizer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(suite());
}
