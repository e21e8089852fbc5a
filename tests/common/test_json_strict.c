/* test_json_strict.c - a key twice in one object and an escaped NUL, which
 * cJSON and Hugging Face (Python's json: the last value wins) read
 * differently, are refused with one line naming the key; and the
 * safetensors reader refuses a field twice in a tensor entry, as the
 * reference Rust reader (serde) does. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_strict.h"
#include "safetensors.h"
#include "qp_test.h"

/* The message json_refuse_duplicate_keys gives for text ("" when it passes). */
static const char *duplicate_error(const char *text)
{
    static qp_err err;
    cJSON *root = cJSON_Parse(text);
    ck_assert_msg(root != NULL, "not JSON: %s", text);
    err.msg[0] = 0;
    int rc = json_refuse_duplicate_keys(root, "f.json", &err);
    cJSON_Delete(root);
    ck_assert_int_eq(rc, err.msg[0] ? -1 : 0);
    ck_assert_msg(!strchr(err.msg, '\n'), "not one line: %s", err.msg);
    return err.msg;
}

START_TEST(distinct_keys_pass_at_every_level)
{
    ck_assert_str_eq(duplicate_error("{\"a\": 1, \"b\": {\"a\": 2, \"c\": [{\"a\": 1, \"b\": 2}, {\"a\": 3}]}}"), "");
    ck_assert_str_eq(duplicate_error("[1, {\"x\": 1}, []]"), "");
    ck_assert_str_eq(duplicate_error("{}"), "");
    /* case matters, as in Python */
    ck_assert_str_eq(duplicate_error("{\"a\": 1, \"A\": 2}"), "");
}
END_TEST

START_TEST(a_top_level_key_twice_is_named)
{
    const char *m = duplicate_error("{\"rope_theta\": 5, \"hidden_size\": 8, \"rope_theta\": 1000000}");
    ck_assert_msg(strstr(m, "f.json: key \"rope_theta\" appears twice") == m, "%s", m);
}
END_TEST

START_TEST(a_nested_key_twice_is_named_with_its_object)
{
    const char *m = duplicate_error("{\"added_tokens_decoder\": {\"7\": {\"content\": \"a\"}, \"7\": {}}}");
    ck_assert_msg(strstr(m, "key \"7\" appears twice in object \"added_tokens_decoder\""), "%s", m);
    m = duplicate_error("{\"list\": [{\"k\": 1}, {\"k\": 1, \"k\": 2}]}");
    ck_assert_msg(strstr(m, "key \"k\" appears twice in object \"list\""), "%s", m);
}
END_TEST

START_TEST(control_characters_in_a_key_keep_the_message_one_line)
{
    const char *m = duplicate_error("{\"a\\nb\": 1, \"a\\nb\": 2}");
    ck_assert_msg(strstr(m, "key \"a?b\" appears twice"), "%s", m);
}
END_TEST

START_TEST(an_object_of_many_keys_is_checked_whole)
{
    /* 20000 distinct keys, then one of them again at the end */
    size_t cap = 20000 * 16 + 64, len = 0;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    len += (size_t)snprintf(text + len, cap - len, "{");
    for (int i = 0; i < 20000; i++)
        len += (size_t)snprintf(text + len, cap - len, "\"k%d\": %d, ", i, i);
    snprintf(text + len, cap - len, "\"k%d\": 0}", 12345);
    const char *m = duplicate_error(text);
    ck_assert_msg(strstr(m, "key \"k12345\" appears twice"), "%s", m);
    text[len - 2] = '}';
    text[len - 1] = 0;
    ck_assert_str_eq(duplicate_error(text), "");
    free(text);
}
END_TEST

START_TEST(an_escaped_nul_is_found_but_not_an_escaped_backslash)
{
    const char *with = "{\"a\\u0000b\": 1}";
    ck_assert(json_has_escaped_nul(with, strlen(with)));
    const char *lookalike = "{\"a\\\\u0000b\": 1}"; /* a backslash, then the text u0000 */
    ck_assert(!json_has_escaped_nul(lookalike, strlen(lookalike)));
    const char *other = "{\"a\\u0001\": 1}";
    ck_assert(!json_has_escaped_nul(other, strlen(other)));
}
END_TEST

/* what Python's json refuses: bytes that are not UTF-8 (an overlong
 * form, a surrogate, a stray continuation byte, a cut sequence) and raw
 * control characters inside strings; whitespace between tokens and
 * escaped control characters are fine */
#define NONE ((size_t)-1)

START_TEST(text_a_strict_reader_refuses_is_found_at_its_byte)
{
    static const struct {
        const char *text;
        size_t at;              /* NONE: readable */
    } cases[] = {
        {"{\"a\": \"caf\xc3\xa9 \xf0\x9f\x99\x82\"}", NONE},
        {"{\"a\":\n\t\"b\\n\\t\"}", NONE},
        {"{\"a\": \"x\ny\"}", 8},
        {"{\"a\": \"x\ty\"}", 8},
        {"{\"a\": \"\xc0\xaf\"}", 7},
        {"{\"a\": \"\xed\xa0\x80\"}", 7},
        {"{\"a\": \"\x80\"}", 7},
        {"{\"a\": \"\xe2\x82\"}", 7},
        {"{\"a\\\"\n\": 1}", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *why = NULL;
        size_t n = strlen(cases[i].text);
        size_t at = json_find_unreadable(cases[i].text, n, &why), want = cases[i].at == NONE ? n : cases[i].at;
        ck_assert_msg(at == want, "case %zu: at %zu, expected %zu", i, at, want);
        ck_assert(at == n || why);
    }
    qp_err err = {{0}};
    const char *bad = "{\"chat_template\": \"\xff\"}";
    cJSON *root = cJSON_Parse(bad);
    ck_assert_int_eq(json_refuse_ambiguous(root, bad, strlen(bad), "tokenizer_config.json", &err), -1);
    ck_assert_msg(strstr(err.msg, "tokenizer_config.json: byte 19: not UTF-8"), "%s", err.msg);
    cJSON_Delete(root);
}
END_TEST

/* A whole safetensors file: the header, then 4 zero bytes of data. */
static int parse_header(const char *header, qp_err *err)
{
    size_t hlen = strlen(header), len = 8 + hlen + 4;
    uint8_t *buf = calloc(1, len);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    struct st_tensor *t = NULL;
    uint32_t n = 0;
    int rc = st_parse_buffer(buf, len, "x.safetensors", 0, &t, &n, err);
    st_free_tensors(t, n);
    free(buf);
    return rc;
}

START_TEST(a_field_twice_in_a_safetensors_entry_is_refused)
{
    qp_err err = {{0}};
    ck_assert_msg(parse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", &err) == 0,
                  "%s", err.msg);
    /* the first dtype (F32) would fit the data, the last (BF16) would not */
    ck_assert_int_eq(parse_header("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"BF16\",\"shape\":[1],"
                                  "\"data_offsets\":[0,4]}}", &err), -1);
    ck_assert_msg(strstr(err.msg, "x.safetensors: key \"dtype\" appears twice in object \"a\""), "%s", err.msg);
    ck_assert_int_eq(parse_header("{\"__metadata__\":{\"format\":\"pt\",\"format\":\"np\"},"
                                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", &err), -1);
    ck_assert_msg(strstr(err.msg, "key \"format\" appears twice in object \"__metadata__\""), "%s", err.msg);
}
END_TEST

static Suite *json_strict_suite(void)
{
    Suite *s = suite_create("json_strict");
    TCase *tc = tcase_create("keys");
    tcase_add_test(tc, distinct_keys_pass_at_every_level);
    tcase_add_test(tc, a_top_level_key_twice_is_named);
    tcase_add_test(tc, a_nested_key_twice_is_named_with_its_object);
    tcase_add_test(tc, control_characters_in_a_key_keep_the_message_one_line);
    tcase_add_test(tc, an_object_of_many_keys_is_checked_whole);
    tcase_add_test(tc, an_escaped_nul_is_found_but_not_an_escaped_backslash);
    tcase_add_test(tc, text_a_strict_reader_refuses_is_found_at_its_byte);
    tcase_add_test(tc, a_field_twice_in_a_safetensors_entry_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(json_strict_suite());
}
