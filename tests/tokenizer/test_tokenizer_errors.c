/* test_tokenizer_errors.c - what goes wrong, said clearly: malformed
 * tokenizer.json files, bad CLI input, regex translation. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_cli.h"
#include "tok_internal.h"
#include "tok_json.h"
#include "tok_test_util.h"
#include "tok_unicode_tables.h"
#include "tokenizer.h"
#include "qp_test.h"

/* ---- a small but complete tokenizer.json ---------------------------------- */

/* ByteLevel stand-in of byte b, as JSON string content. */
static void byte_char_json(int b, qp_tok_text *out)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    static int next_of[256];
    static int ready;
    if (!ready) {
        int next = 256;
        for (int i = 0; i < 256; i++) {
            int p = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
            next_of[i] = p ? i : next++;
        }
        ready = 1;
    }
    int c = printable ? b : next_of[b];
    if (c == '"' || c == '\\') {
        char esc[3] = {'\\', (char)c, 0};
        qp_tok_text_appends(out, esc);
    } else {
        qp_utf8_append_cp(out, (uint32_t)c);
    }
}

/* The split regex as JSON text: GPT-2-like, " ?" joins a space to a word. */
#define SPLIT_RE "\" ?\\\\p{L}+|\\\\s+|[^\\\\s\\\\p{L}]+\""

/* The good file: 256 byte tokens, "ab" (256), "abc" (257), " the"... */
static char *good_json(void)
{
    qp_tok_text t = {0};
    qp_tok_text_appends(&t,
        "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
        " \"added_tokens\": [{\"id\": 259, \"content\": \"<|end|>\", \"single_word\": false,"
        " \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}],\n"
        " \"normalizer\": {\"type\": \"NFC\"},\n"
        " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
        "{\"type\": \"Split\", \"pattern\": {\"Regex\": " SPLIT_RE "},"
        " \"behavior\": \"Isolated\", \"invert\": false},"
        " {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]},\n"
        " \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false},\n"
        " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false},\n"
        " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null,"
        " \"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", \"fuse_unk\": false,"
        " \"byte_fallback\": false, \"ignore_merges\": false,\n  \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        qp_tok_text_appends(&t, b ? ", \"" : "\"");
        byte_char_json(b, &t);
        char num[32];
        snprintf(num, sizeof(num), "\": %d", b);
        qp_tok_text_appends(&t, num);
    }
    qp_tok_text_appends(&t, ", \"ab\": 256, \"abc\": 257, \"\\u0120t\": 258},\n"
                            "  \"merges\": [[\"a\", \"b\"], [\"ab\", \"c\"], [\"\\u0120\", \"t\"]]}}\n");
    return t.s;
}

/* The good file with the first occurrence of what replaced by with. */
static char *variant(const char *what, const char *with)
{
    char *good = good_json();
    char *at = strstr(good, what);
    ck_assert_msg(at != NULL, "template has no \"%s\"", what);
    qp_tok_text t = {0};
    qp_tok_text_append(&t, good, (size_t)(at - good));
    qp_tok_text_appends(&t, with);
    qp_tok_text_appends(&t, at + strlen(what));
    free(good);
    return t.s;
}

/* Loads json and expects failure with a message containing each of the
 * NULL-terminated fragments. */
static void expect_error(const char *json, size_t len, ...)
{
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_int_eq(qp_tok_load_buffer(&tok, json, len, "test.json", &err), -1);
    ck_assert_ptr_null(tok);
    ck_assert_msg(strncmp(err.msg, "test.json", 9) == 0, "message does not name the file: %s", err.msg);
    va_list ap;
    va_start(ap, len);
    const char *frag;
    while ((frag = va_arg(ap, const char *)))
        ck_assert_msg(strstr(err.msg, frag) != NULL, "\"%s\" not in: %s", frag, err.msg);
    va_end(ap);
}

static void expect_variant_error(const char *what, const char *with, const char *frag)
{
    char *json = variant(what, with);
    expect_error(json, strlen(json), frag, NULL);
    free(json);
}

START_TEST(small_good_file_loads_and_merges)
{
    char *json = good_json();
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_msg(qp_tok_load_buffer(&tok, json, strlen(json), "test.json", &err) == 0, "%s", err.msg);
    qp_tok_ids ids = {0};
    ck_assert(qp_tok_encode(tok, "abc ab<|end|> t", 15, &ids, &err) == 0);
    const int32_t want[] = {257, ' ', 256, 259, 258}; /* ' ' is byte 32's token, id 32 */
    ck_assert_uint_eq(ids.len, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ids.v[i], want[i]);
    qp_tok_text out = {0};
    ck_assert(qp_tok_decode(tok, ids.v, ids.len, 0, &out, &err) == 0);
    ck_assert_str_eq(out.s, "abc ab<|end|> t");
    qp_tok_ids_free(&ids);
    qp_tok_text_free(&out);
    qp_tok_free(tok);
    free(json);
}
END_TEST

START_TEST(empty_keys_are_ordinary_keys)
{
    /* found by fuzzing: "" used to leave the key buffer NULL */
    char *json = variant("\"version\": \"1.0\"", "\"\": {\"\": \"\"}, \"version\": \"1.0\"");
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_msg(qp_tok_load_buffer(&tok, json, strlen(json), "test.json", &err) == 0, "%s", err.msg);
    qp_tok_free(tok);
    free(json);
}
END_TEST

START_TEST(bytes_without_tokens_are_dropped_like_hugging_face)
{
    /* with no unk_token, tokenizers drops characters the vocabulary lacks;
     * a word can then give no ids at all (found by fuzzing) */
    char *json = variant(", \"z\": 122", ", \"no_z\": 122");
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_msg(qp_tok_load_buffer(&tok, json, strlen(json), "test.json", &err) == 0, "%s", err.msg);
    for (int pass = 0; pass < 2; pass++) { /* the second pass hits the word cache */
        qp_tok_ids ids = {0};
        ck_assert(qp_tok_encode(tok, "zz z", 4, &ids, &err) == 0);
        ck_assert_uint_eq(ids.len, 1);
        ck_assert_int_eq(ids.v[0], ' ');
        qp_tok_ids_free(&ids);
        ck_assert(qp_tok_encode(tok, "zz", 2, &ids, &err) == 0);
        ck_assert_uint_eq(ids.len, 0);
        qp_tok_ids_free(&ids);
    }
    qp_tok_free(tok);
    free(json);
}
END_TEST

START_TEST(missing_model_is_named)
{
    const char *json = "{\"version\": \"1.0\", \"normalizer\": null}";
    expect_error(json, strlen(json), "no \"model\"", NULL);
}
END_TEST

/* A part of the good file, what replaces it, and what the refusal names. */
static const struct bad_variant {
    const char *what, *with, *frag;
} bad_variants[] = {
    /* missing vocab or merges */
    {"\"merges\": [[", "\"merges_\": [[", "no \"merges\""},
    {"\"vocab\": {", "\"vocab_\": {", "no \"vocab\""},
    /* merge of unknown token */
    {"[\"ab\", \"c\"]", "[\"ab\", \"zz\"]", "model.merges[1]: \"zz\" is not in model.vocab"},
    {"[\"ab\", \"c\"]", "[\"b\", \"c\"]", "merged token \"bc\""},
    /* malformed merges */
    {"[\"ab\", \"c\"]", "[\"ab\", \"c\", \"d\"]", "model.merges[1] has more than two strings"},
    {"[\"ab\", \"c\"]", "[\"ab\"]", "model.merges[1] must be a pair of strings"},
    {"[\"ab\", \"c\"]", "[1, 2]", "model.merges[1] must be a pair of strings"},
    {"[[\"a\", \"b\"], [\"ab\", \"c\"], [\"\\u0120\", \"t\"]]", "[\"a b\", \"ab  c\"]",
     "model.merges[1]: \"ab  c\" is not two tokens"},
    {"\"merges\": [", "\"merges\": {\"x\": 1}, \"m\": [", "model.merges"},
    {"[\"ab\", \"c\"]", "\"ab c\"", "model.merges[1]: mixes"},
    /* wrong types */
    {"\"vocab\": {", "\"vocab\": [], \"v\": {", "model.vocab"},
    {"\"ab\": 256", "\"ab\": \"256\"", "model.vocab id"},
    {"\"ab\": 256", "\"ab\": 2.5", "fraction"},
    {"\"ab\": 256", "\"ab\": -3", "outside"},
    {"\"special\": true", "\"special\": \"yes\"", "added_tokens[0].special must be a boolean"},
    {"\"added_tokens\": [", "\"added_tokens\": 5, \"x\": [", "added_tokens must be an array"},
    {"\"id\": 259", "\"id\": \"259\"", "added_tokens[0].id must be an integer"},
    {"\"content\": \"<|end|>\"", "\"content\": 7", "added_tokens[0].content must be a string"},
    {"\"normalizer\": {\"type\": \"NFC\"}", "\"normalizer\": [\"NFC\"]", "normalizer must be an object"},
    {"\"behavior\": \"Isolated\"", "\"behavior\": 1", "behavior must be a string"},
    /* unsupported components */
    {"{\"type\": \"Split\"", "{\"type\": \"Whitespace\"",
     "pre_tokenizer.pretokenizers[0]: type \"Whitespace\" is not supported"},
    {"\"normalizer\": {\"type\": \"NFC\"}", "\"normalizer\": {\"type\": \"NFKC\"}",
     "normalizer: type \"NFKC\" is not supported"},
    {"\"behavior\": \"Isolated\"", "\"behavior\": \"Removed\"", "behavior \"Removed\" is not supported"},
    {"\"invert\": false", "\"invert\": true", "invert = true is not supported"},
    {"\"use_regex\": false}]",
     "\"use_regex\": false}, {\"type\": \"Split\", \"pattern\": {\"String\": \"x\"}, \"behavior\": \"Isolated\"}]",
     "comes after ByteLevel"},
    {"{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}",
     "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": false}",
     "add_prefix_space = true is not supported"},
    {"\"decoder\": {\"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"WordPiece\"",
     "decoder: type \"WordPiece\" is not supported"},
    {"\"post_processor\": {\"type\": \"ByteLevel\"", "\"post_processor\": {\"type\": \"TemplateProcessing\"",
     "post_processor: type \"TemplateProcessing\""},
    {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model.type must be \"BPE\""},
    {"\"dropout\": null", "\"dropout\": 0.1", "model.dropout"},
    {"\"byte_fallback\": false", "\"byte_fallback\": true", "byte_fallback"},
    {"\"continuing_subword_prefix\": \"\"", "\"continuing_subword_prefix\": \"##\"", "continuing_subword_prefix"},
    {"\"truncation\": null", "\"truncation\": {\"max_length\": 5}", "\"truncation\" must be null"},
    {"\"unk_token\": null", "\"unk_token\": \"<unk>\"", "unk_token \"<unk>\" is not in model.vocab"},
    /* duplicates */
    {"\"ab\": 256", "\"ab\": 256, \"ab\": 300", "\"ab\" appears twice"},
    {"\"ab\": 256", "\"ab\": 255", "id 255 is given to both"},
    {"\"version\": \"1.0\"", "\"version\": \"1.0\", \"normalizer\": null", "\"normalizer\" appears twice"},
    {"\"version\": \"1.0\"", "\"version\": \"1.0\", \"model\": {}", "test.json: \"model\" appears twice"},
    {"\"t\"]]}}", "\"t\"]], \"vocab\": {}}}", "model: \"vocab\" appears twice"},
    {"\"t\"]]}}", "\"t\"]], \"merges\": []}}", "model: \"merges\" appears twice"},
};

START_TEST(each_bad_variant_is_refused_by_name)
{
    const struct bad_variant *v = &bad_variants[_i];
    expect_variant_error(v->what, v->with, v->frag);
}
END_TEST

START_TEST(legacy_string_merges_load)
{
    char *json = variant("[[\"a\", \"b\"], [\"ab\", \"c\"], [\"\\u0120\", \"t\"]]", "[\"#version: 0.2\", \"a b\", \"ab c\", \"\\u0120 t\"]");
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_msg(qp_tok_load_buffer(&tok, json, strlen(json), "test.json", &err) == 0, "%s", err.msg);
    qp_tok_ids ids = {0};
    ck_assert(qp_tok_encode(tok, "abc", 3, &ids, &err) == 0);
    ck_assert_uint_eq(ids.len, 1);
    ck_assert_int_eq(ids.v[0], 257);
    qp_tok_ids_free(&ids);
    qp_tok_free(tok);
    free(json);
}
END_TEST

/* The good file's added tokens replaced by list (JSON text). */
static char *with_added(const char *list)
{
    static const char one[] = "[{\"id\": 259, \"content\": \"<|end|>\", \"single_word\": false,"
                              " \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}]";
    return variant(one, list);
}

#define ADDED(id, content) "{\"id\": " #id ", \"content\": \"" content "\", \"normalized\": false, \"special\": true}"

/* An added token keeps its "id": past a hole, before the model's last
 * id, out of order, or the model token of the same content (tokenizers
 * would renumber the first two after the vocabulary's count, warning that
 * the ids differ from the file's). */
START_TEST(added_token_ids_are_the_ones_given)
{
    char *json = with_added("[" ADDED(300, "<|a|>") ", " ADDED(290, "<|b|>") ", " ADDED(256, "ab") "]");
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_msg(qp_tok_load_buffer(&tok, json, strlen(json), "test.json", &err) == 0, "%s", err.msg);
    qp_tok_ids ids = {0};
    ck_assert(qp_tok_encode(tok, "<|b|><|a|>ab", 12, &ids, &err) == 0);
    ck_assert_uint_eq(ids.len, 3);
    ck_assert_int_eq(ids.v[0], 290);
    ck_assert_int_eq(ids.v[1], 300);
    ck_assert_int_eq(ids.v[2], 256);
    ck_assert_int_eq(qp_tok_vocab_size(tok), 301);
    ck_assert_int_eq(qp_tok_is_special(tok, 256), 1);
    qp_tok_text out = {0};
    ck_assert(qp_tok_decode(tok, ids.v, 2, 0, &out, &err) == 0);
    ck_assert(out.len == 10 && !memcmp(out.s, "<|b|><|a|>", 10));
    int32_t hole = 259;
    ck_assert_int_eq(qp_tok_decode(tok, &hole, 1, 0, &out, &err), -1);
    qp_tok_text_free(&out);
    qp_tok_ids_free(&ids);
    qp_tok_free(tok);
    free(json);
}
END_TEST

/* An id that holds another token, or content that is another id's model
 * token, is a contradiction: refused naming the field. */
START_TEST(contradicting_added_token_ids_are_refused)
{
    char *json = with_added("[" ADDED(258, "<|a|>") "]");
    expect_error(json, strlen(json), "added_tokens[0].id 258 is already model.vocab's \"\u0120t\"", NULL);
    free(json);
    json = with_added("[" ADDED(259, "ab") "]");
    expect_error(json, strlen(json), "added_tokens[0].id is 259, but \"ab\" is model.vocab's token 256", NULL);
    free(json);
    json = with_added("[" ADDED(260, "<|a|>") ", " ADDED(260, "<|b|>") "]");
    expect_error(json, strlen(json), "added_tokens[1].id 260 is already the added token \"<|a|>\"", NULL);
    free(json);
}
END_TEST

/* A BPE without merges is legal: every word stays its byte tokens, an
 * added token still matches whole. */
START_TEST(an_empty_merges_list_leaves_bytes)
{
    char *json = variant("[[\"a\", \"b\"], [\"ab\", \"c\"], [\"\\u0120\", \"t\"]]", "[]");
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_msg(qp_tok_load_buffer(&tok, json, strlen(json), "test.json", &err) == 0, "%s", err.msg);
    qp_tok_ids ids = {0};
    ck_assert(qp_tok_encode(tok, "abc<|end|>", 10, &ids, &err) == 0);
    ck_assert_uint_eq(ids.len, 4);
    ck_assert_int_eq(ids.v[0], 'a');
    ck_assert_int_eq(ids.v[1], 'b');
    ck_assert_int_eq(ids.v[2], 'c');
    ck_assert_int_eq(ids.v[3], 259);
    qp_tok_ids_free(&ids);
    qp_tok_free(tok);
    free(json);
}
END_TEST

START_TEST(bad_regex_is_refused_with_pcre2s_reason)
{
    char *json = variant(SPLIT_RE, "\"(unclosed\"");
    expect_error(json, strlen(json), "bad regex /(unclosed/", "missing closing parenthesis", NULL);
    free(json);
    expect_variant_error(SPLIT_RE, "\"[\\\\W]\"", "\\W inside a character class is not supported");
}
END_TEST

START_TEST(broken_json_is_refused_with_a_byte_offset)
{
    expect_error("", 0, "expected '{'", NULL);
    expect_error("[]", 2, "expected '{'", NULL);
    expect_error("{\"model\": {}", 12, "byte 12", NULL);
    expect_error("{\"a\": 1,}", 9, "expected a key string", NULL);
    expect_error("{\"a\": tru}", 10, "expected a value", NULL);
    expect_error("{\"a\": \"\\ud800\"}", 14, "lone high surrogate", NULL);
    expect_error("{\"a\": \"\xff\"}", 10, "invalid UTF-8", NULL);
    expect_error("{} extra", 8, "after the JSON value", NULL);
    /* every prefix of the good file fails cleanly (and never crashes) */
    char *json = good_json();
    size_t n = strlen(json);
    for (size_t cut = 0; cut + 2 < n; cut += 7) {
        qp_tok *tok = NULL;
        qp_err err = {{0}};
        ck_assert_int_eq(qp_tok_load_buffer(&tok, json, cut, "test.json", &err), -1);
        ck_assert(err.msg[0] != '\0');
    }
    free(json);
}
END_TEST

START_TEST(deep_nesting_is_refused_not_overflowed)
{
    size_t depth = 100000;
    char *json = malloc(depth * 2 + 32);
    size_t n = 0;
    n += (size_t)sprintf(json, "{\"x\": ");
    for (size_t i = 0; i < depth; i++)
        json[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        json[n++] = ']';
    json[n++] = '}';
    expect_error(json, n, "nesting deeper than", NULL);
    free(json);
}
END_TEST

START_TEST(mutated_official_file_never_crashes)
{
    size_t len;
    char *json = tok_read_file(TOK_ASSET, &len);
    /* small slices of the start, with a flipped byte: always an error */
    uint32_t x = 99;
    for (int round = 0; round < 200; round++) {
        x = x * 1664525u + 1013904223u;
        size_t n = 200 + x % 4000;
        char *copy = malloc(n);
        memcpy(copy, json, n);
        copy[(x >> 8) % n] ^= (char)(1 + (x >> 20) % 255);
        qp_tok *tok = NULL;
        qp_err err = {{0}};
        ck_assert_int_eq(qp_tok_load_buffer(&tok, copy, n, "cut.json", &err), -1);
        free(copy);
    }
    free(json);
}
END_TEST

START_TEST(missing_file_is_named)
{
    qp_tok *tok = NULL;
    qp_err err = {{0}};
    ck_assert_int_eq(qp_tok_load_file(&tok, "/nonexistent/tokenizer.json", &err), -1);
    ck_assert_str_eq(err.msg, "/nonexistent/tokenizer.json: No such file or directory");
}
END_TEST

/* ---- regex translation -------------------------------------------------------- */

/* pcre may say @L / @N for \p{L} / \p{N} with tokenizers' newer letters
 * and numbers (tok_unicode_tables.h) as class items. */
static void expect_translation(const char *onig, const char *pcre)
{
    qp_tok_text out = {0}, want = {0};
    qp_err err = {{0}};
    ck_assert_msg(tok_regex_translate(onig, strlen(onig), &out, "re", &err) == 0, "%s", err.msg);
    for (const char *p = pcre; *p; p++) {
        if (*p != '@') {
            qp_tok_text_append(&want, p, 1);
            continue;
        }
        char which = *++p;
        const uint32_t(*extra)[2] = which == 'L' ? TOK_EXTRA_LETTERS : TOK_EXTRA_NUMBERS;
        size_t n = which == 'L' ? sizeof(TOK_EXTRA_LETTERS) / sizeof(*TOK_EXTRA_LETTERS)
                                : sizeof(TOK_EXTRA_NUMBERS) / sizeof(*TOK_EXTRA_NUMBERS);
        char buf[40];
        snprintf(buf, sizeof(buf), "\\p{%c}", which);
        qp_tok_text_appends(&want, buf);
        for (size_t i = 0; i < n; i++) {
            snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", extra[i][0], extra[i][1]);
            qp_tok_text_appends(&want, buf);
        }
    }
    qp_tok_text_append(&want, "", 0);
    ck_assert_str_eq(out.s ? out.s : "", want.s);
    qp_tok_text_free(&out);
    qp_tok_text_free(&want);
}

START_TEST(oniguruma_syntax_is_translated)
{
    expect_translation("\\s+(?!\\S)", "\\p{White_Space}+(?!\\P{White_Space})");
    expect_translation("[^\\s\\p{L}\\p{N}]", "[^\\p{White_Space}@L@N]");
    expect_translation("\\p{L}+\\pN\\P{L}", "[@L]+[@N][^@L]");
    expect_translation("[^\\P{L}]\\p{Lu}", "[^\\P{L}]\\p{Lu}");
    expect_translation("\\w\\d\\h", "[@L\\p{M}\\p{Nd}\\p{Pc}]\\p{Nd}[0-9a-fA-F]");
    expect_translation("[\\w-]", "[@L\\p{M}\\p{Nd}\\p{Pc}-]");
    expect_translation("\\p{^L}\\P{^N}", "\\P{L}\\p{N}");
    expect_translation("(?m:.)(?i)x(?im-x:y)", "(?s:.)(?i)x(?is-x:y)");
    expect_translation("\\u00e9", "\\x{00e9}");
    expect_translation("[]a]\\]", "[]a]\\]");
    expect_translation("[[:alpha:]]", "[[:alpha:]]");
    expect_translation("(?i:'s|'t)", "(?i:'s|'t)");
    qp_tok_text out = {0};
    qp_err err = {{0}};
    ck_assert_int_eq(tok_regex_translate("[a&&b]", 6, &out, "re", &err), -1);
    ck_assert_int_eq(tok_regex_translate("[a[b]]", 6, &out, "re", &err), -1);
    ck_assert_int_eq(tok_regex_translate("[\\H]", 4, &out, "re", &err), -1);
    ck_assert_int_eq(tok_regex_translate("abc\\", 4, &out, "re", &err), -1);
    ck_assert_int_eq(tok_regex_translate("[abc", 4, &out, "re", &err), -1);
    qp_tok_text_free(&out);
}
END_TEST

/* ---- the CLI ------------------------------------------------------------------- */

typedef struct run_result {
    int status;
    char *out, *err;
    size_t out_len;
} run_result;

static char *read_back(FILE *f, size_t *len)
{
    rewind(f);
    qp_tok_text t = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        qp_tok_text_append(&t, buf, n);
    qp_tok_text_append(&t, "", 0);
    if (len)
        *len = t.len;
    return t.s;
}

/* Runs `qrun ARGS...` with stdin = in[0..in_len). */
static run_result run_cli(const char *in, size_t in_len, ...)
{
    char *argv[16];
    int argc = 0;
    va_list ap;
    va_start(ap, in_len);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 15)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    FILE *fin = tmpfile(), *fout = tmpfile(), *ferr = tmpfile();
    fwrite(in, 1, in_len, fin);
    rewind(fin);
    run_result r;
    r.status = tok_cli_run(argc, argv, "qrun", fin, fout, ferr);
    r.out = read_back(fout, &r.out_len);
    r.err = read_back(ferr, NULL);
    fclose(fin);
    fclose(fout);
    fclose(ferr);
    return r;
}

static void done(run_result *r)
{
    free(r->out);
    free(r->err);
}

#define RUN(in, ...) run_cli((in), strlen(in), __VA_ARGS__, (const char *)NULL)

START_TEST(cli_tokenize_hello_world)
{
    run_result r = RUN("Hello, world!", "tokenize", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "9707 11 1879 0\n");
    ck_assert_str_eq(r.err, "");
    done(&r);
}
END_TEST

START_TEST(cli_tokenize_reports_invalid_utf8_offset)
{
    run_result r = run_cli("ab\xff" "cd", 5, "tokenize", "--tokenizer", TOK_ASSET, (const char *)NULL);
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(strstr(r.err, "qrun tokenize: stdin: invalid UTF-8 at byte offset 2") != NULL, "%s", r.err);
    done(&r);
    r = run_cli("ok\xe4\xb8", 5, "tokenize", "--tokenizer", TOK_ASSET, (const char *)NULL);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "byte offset 2") && strstr(r.err, "truncated"), "%s", r.err);
    done(&r);
}
END_TEST

START_TEST(cli_nul_bytes_are_ordinary_characters)
{
    /* "a\0b" is the corpus case nul-inside: [64, 188, 65] */
    run_result r = run_cli("a\0b", 3, "tokenize", "--tokenizer", TOK_ASSET, (const char *)NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "64 188 65\n");
    done(&r);
    r = RUN("64 188 65", "detokenize", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 0);
    ck_assert_uint_eq(r.out_len, 3);
    ck_assert(memcmp(r.out, "a\0b", 3) == 0);
    done(&r);
    r = RUN("\"a\\u0000b\"\n", "tokenize", "--jsonl", "--tokenizer", TOK_ASSET);
    ck_assert_str_eq(r.out, "[64,188,65]\n");
    done(&r);
    r = RUN("[64,188,65]\n", "detokenize", "--jsonl", "--tokenizer", TOK_ASSET);
    ck_assert_str_eq(r.out, "\"a\\u0000b\"\n");
    done(&r);
}
END_TEST

START_TEST(cli_jsonl_round_trip)
{
    run_result r = RUN("\"Hello, world!\"\n\"\"\n\"<|im_start|>user\\n\\u4f60\\u597d\"",
                       "tokenize", "--jsonl", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "[9707,11,1879,0]\n[]\n[151644,872,198,108386]\n");
    run_result d = run_cli(r.out, strlen(r.out), "detokenize", "--jsonl", "--tokenizer", TOK_ASSET, (const char *)NULL);
    ck_assert_int_eq(d.status, 0);
    ck_assert_str_eq(d.out, "\"Hello, world!\"\n\"\"\n\"<|im_start|>user\\n\xe4\xbd\xa0\xe5\xa5\xbd\"\n");
    done(&r);
    done(&d);
}
END_TEST

START_TEST(cli_jsonl_errors_name_the_line)
{
    run_result r = RUN("\"fine\"\nnot json\n", "tokenize", "--jsonl", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "[62057]\n");
    ck_assert_msg(strstr(r.err, "stdin line 2") && strstr(r.err, "expected a JSON string"), "%s", r.err);
    done(&r);
    r = RUN("\"\\ud800\"\n", "tokenize", "--jsonl", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "lone high surrogate"), "%s", r.err);
    done(&r);
    r = run_cli("\"a\xff\"\n", 5, "tokenize", "--jsonl", "--tokenizer", TOK_ASSET, (const char *)NULL);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "line 1") && strstr(r.err, "invalid UTF-8"), "%s", r.err);
    done(&r);
    r = RUN("[1,2,\"x\"]\n", "detokenize", "--jsonl", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "stdin line 1") && strstr(r.err, "token id"), "%s", r.err);
    done(&r);
}
END_TEST

START_TEST(cli_detokenize)
{
    run_result r = RUN("9707 11\n1879\t0\n", "detokenize", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "Hello, world!");
    done(&r);
    r = RUN("151644 872 151645", "detokenize", "--skip-special", "--tokenizer", TOK_ASSET);
    ck_assert_str_eq(r.out, "user");
    done(&r);
    r = RUN("9707 12x", "detokenize", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "byte offset 5: \"12x\" is not a token id"), "%s", r.err);
    done(&r);
    r = RUN("9707 999999", "detokenize", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "token id 999999 is not in the vocabulary"), "%s", r.err);
    done(&r);
}
END_TEST

START_TEST(cli_usage_errors)
{
    run_result r = RUN("", "tokenize");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "give one of --tokenizer FILE or -m MODEL.qpk"));
    done(&r);
    r = RUN("", "tokenize", "--frobnicate");
    ck_assert_int_eq(r.status, 2);
    done(&r);
    r = RUN("", "tokenize", "--tokenizer");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--tokenizer needs a value"));
    done(&r);
    r = RUN("", "tokenise", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 2);
    done(&r);
    r = RUN("", "tokenize", "--tokenizer", "/nonexistent.json");
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "/nonexistent.json: No such file"));
    done(&r);
    r = RUN("", "detokenize", "--help");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: qrun tokenize"));
    ck_assert_ptr_nonnull(strstr(r.out, "--jsonl"));
    done(&r);
}
END_TEST

/* "model.qpk": the Qwen3 tokenizer (151,669 ids) and a model vocabulary of
 * 151,936, as Qwen3's checkpoints pad it. */
static int stub_loader(const char *path, qp_tok **out, uint32_t *model_vocab, qp_err *err)
{
    if (strcmp(path, "model.qpk") != 0)
        return qp_fail(err, "%s: not a container", path);
    *model_vocab = 151936;
    return qp_tok_load_file(out, TOK_ASSET, err);
}

START_TEST(cli_model_flag_uses_the_loader_hook)
{
    run_result r = RUN("hi", "tokenize", "-m", "model.qpk");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "use --tokenizer FILE"));
    done(&r);
    tok_cli_set_model_loader(stub_loader);
    r = RUN("Hello, world!", "tokenize", "-m", "model.qpk");
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "9707 11 1879 0\n");
    done(&r);
    r = RUN("hi", "tokenize", "-m", "other.qpk");
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "other.qpk: not a container"));
    done(&r);
    tok_cli_set_model_loader(NULL);
}
END_TEST

START_TEST(cli_detokenize_drops_the_models_padding_ids)
{
    tok_cli_set_model_loader(stub_loader);
    /* 151669..151935: in the model, not in the tokenizer: no text */
    run_result r = RUN("9707 151935 11 151669", "detokenize", "-m", "model.qpk");
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "Hello,");
    done(&r);
    r = RUN("[9707, 151935, 11]\n", "detokenize", "-m", "model.qpk", "--jsonl");
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "\"Hello,\"\n");
    done(&r);
    r = RUN("9707 151936", "detokenize", "-m", "model.qpk");
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(strstr(r.err, "token id 151936 is neither in the tokenizer (ids 0 to 151668) nor in the "
                                "model's vocabulary of 151936"), "%s", r.err);
    done(&r);
    tok_cli_set_model_loader(NULL);
    /* a tokenizer alone cannot tell padding from a mistake */
    r = RUN("9707 151935", "detokenize", "--tokenizer", TOK_ASSET);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "token id 151935 is not in the vocabulary"), "%s", r.err);
    done(&r);
}
END_TEST

/* /dev/full: every write fails with ENOSPC */
START_TEST(cli_lost_output_is_an_error)
{
    const char *cmds[][4] = {{"tokenize", "--tokenizer", TOK_ASSET, NULL},
                             {"tokenize", "--tokenizer", TOK_ASSET, "--jsonl"},
                             {"detokenize", "--tokenizer", TOK_ASSET, NULL},
                             {"tokenize", "--version", NULL, NULL}};
    const char *inputs[] = {"Hello, world!", "\"Hello\"\n\"world\"\n", "9707 11 1879 0", ""};
    for (int i = 0; i < 4; i++) {
        FILE *fin = tmpfile(), *fout = fopen("/dev/full", "w"), *ferr = tmpfile();
        ck_assert(fin && fout && ferr);
        fputs(inputs[i], fin);
        rewind(fin);
        int argc = cmds[i][3] ? 4 : cmds[i][2] ? 3 : 2;
        int status = tok_cli_run(argc, (char **)cmds[i], "qrun", fin, fout, ferr);
        char *err = read_back(ferr, NULL);
        ck_assert_msg(status == 1, "%s %s: status %d", cmds[i][0], cmds[i][1], status);
        char want[128];
        snprintf(want, sizeof want, "qrun %s: writing standard output: No space left on device\n", cmds[i][0]);
        ck_assert_str_eq(err, want);
        free(err);
        fclose(fin);
        fclose(fout);
        fclose(ferr);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tokenizer_errors");
    TCase *tc = tcase_create("files");
    tcase_add_test(tc, small_good_file_loads_and_merges);
    tcase_add_test(tc, empty_keys_are_ordinary_keys);
    tcase_add_test(tc, bytes_without_tokens_are_dropped_like_hugging_face);
    tcase_add_test(tc, missing_model_is_named);
    tcase_add_loop_test(tc, each_bad_variant_is_refused_by_name, 0, (int)(sizeof bad_variants / sizeof *bad_variants));
    tcase_add_test(tc, legacy_string_merges_load);
    tcase_add_test(tc, added_token_ids_are_the_ones_given);
    tcase_add_test(tc, contradicting_added_token_ids_are_refused);
    tcase_add_test(tc, an_empty_merges_list_leaves_bytes);
    tcase_add_test(tc, bad_regex_is_refused_with_pcre2s_reason);
    tcase_add_test(tc, broken_json_is_refused_with_a_byte_offset);
    tcase_add_test(tc, deep_nesting_is_refused_not_overflowed);
    tcase_add_test(tc, mutated_official_file_never_crashes);
    tcase_add_test(tc, missing_file_is_named);
    tcase_add_test(tc, oniguruma_syntax_is_translated);
    suite_add_tcase(s, tc);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 120);
    tcase_add_test(cli, cli_tokenize_hello_world);
    tcase_add_test(cli, cli_tokenize_reports_invalid_utf8_offset);
    tcase_add_test(cli, cli_nul_bytes_are_ordinary_characters);
    tcase_add_test(cli, cli_jsonl_round_trip);
    tcase_add_test(cli, cli_jsonl_errors_name_the_line);
    tcase_add_test(cli, cli_detokenize);
    tcase_add_test(cli, cli_usage_errors);
    tcase_add_test(cli, cli_model_flag_uses_the_loader_hook);
    tcase_add_test(cli, cli_detokenize_drops_the_models_padding_ids);
    tcase_add_test(cli, cli_lost_output_is_an_error);
    suite_add_tcase(s, cli);
    return s;
}

int main(void)
{
    return qp_test_main(suite());
}
