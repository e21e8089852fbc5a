/* test_serve_format.c - response_format's machine (tools/serve/serve_format.c):
 * documents a format holds are taken to the end and complete, every other
 * is refused at the first byte that leaves it; and random replies drawn
 * only from the tokens it allows always parse (cJSON) and satisfy their
 * schema (checked here, by hand). */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "qp_test.h"

static struct serve_format *format_of(const char *response_format)
{
    cJSON *j = cJSON_Parse(response_format);
    ck_assert_msg(j, "bad test JSON: %s", response_format);
    struct serve_format *f = NULL;
    struct serve_error e = {0};
    ck_assert_msg(serve_format_read(j, &f, &e) == 0, "%s: %s", response_format, e.message);
    cJSON_Delete(j);
    return f;
}

static struct serve_format *schema(const char *s)
{
    char rf[4096];
    snprintf(rf, sizeof rf, "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"t\", \"schema\": %s}}", s);
    return format_of(rf);
}

/* how many bytes of text the format takes (strlen: all), and whether the
 * value is then complete */
static size_t taken(struct serve_format *f, const char *text, bool *done)
{
    size_t n = strlen(text), i = 0;
    struct serve_format_state *st = serve_format_start(f, NULL, false);
    while (i < n && serve_format_feed_text(st, text + i, 1) == 0)
        i++;
    *done = i == n && serve_format_complete(st);
    serve_format_end(st);
    return i;
}

static void holds(struct serve_format *f, const char *text)
{
    bool done;
    size_t n = taken(f, text, &done);
    ck_assert_msg(n == strlen(text) && done, "'%s': taken to byte %zu, complete %d", text, n, done);
}

/* refused at the byte `at` points to in text, or complete == false at the end when at is NULL */
static void refuses(struct serve_format *f, const char *text, const char *at)
{
    bool done;
    size_t n = taken(f, text, &done);
    if (at)
        ck_assert_msg(n == (size_t)(strstr(text, at) - text), "'%s': taken to byte %zu, expected %zu", text, n,
                      (size_t)(strstr(text, at) - text));
    else
        ck_assert_msg(n == strlen(text) && !done, "'%s': taken to %zu, complete %d: expected incomplete", text, n,
                      done);
}

START_TEST(any_object)
{
    struct serve_format *f = format_of("{\"type\": \"json_object\"}");
    holds(f, "{}");
    holds(f, " {\n  \"a\": 1,\n  \"b\": [true, null, -0.5e+3, \"x\\u00e9\\n\", []],\n  \"c\": {\"d\": \"\xc3\xa9\"}\n}");
    holds(f, "{\"\": {\"\": {\"\": 0}}}");
    refuses(f, "[1]", "[");
    refuses(f, "{\"a\" 1}", "1}");
    refuses(f, "{\"a\": 01}", "1}");
    refuses(f, "{\"a\": tru}", "}");
    refuses(f, "{\"a\": 1,}", "}");
    refuses(f, "{\"a\": 1.}", "}");
    refuses(f, "{\"a\": -}", "}");
    refuses(f, "{\"a\": \"x\ty\"}", "\ty");
    refuses(f, "{\"a\": \"\\q\"}", "q");
    refuses(f, "{\"a\": \"\\u12g4\"}", "g4");
    /* surrogates only in pairs, as cJSON (which reads tool calls) wants them */
    holds(f, "{\"a\": \"\\ud83d\\ude00 \\uD7FF\\uE000\"}");
    refuses(f, "{\"a\": \"\\udc00\"}", "c00");
    refuses(f, "{\"a\": \"\\ud800x\"}", "x\"");
    refuses(f, "{\"a\": \"\\ud800\\n\"}", "n\"");
    refuses(f, "{\"a\": \"\\ud800\\ud800\"}", "800\"");
    refuses(f, "{\"a\": \"\\ud800\\ue000\"}", "e000");
    refuses(f, "{} ", " ");
    refuses(f, "{}]", "]");
    refuses(f, "{\"a\": 1", NULL);
    refuses(f, "{\"a\": [1, 2}", "}");
    serve_format_unref(f);
}
END_TEST

START_TEST(schema_objects)
{
    struct serve_format *f = schema("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"},"
                                    " \"age\": {\"type\": \"integer\"}, \"tags\": {\"type\": \"array\","
                                    " \"items\": {\"enum\": [\"a\", \"b\"]}}}, \"required\": [\"name\", \"age\"]}");
    holds(f, "{\"name\": \"x\", \"age\": 3}");
    holds(f, "{ \"name\" : \"\", \"age\" : -12 , \"tags\" : [ \"b\" , \"a\" ] }");
    holds(f, "{\"name\": \"x\", \"age\": 0, \"tags\": []}");
    refuses(f, "{\"age\": 3, \"name\": \"x\"}", "age");          /* the schema's order */
    refuses(f, "{\"name\": \"x\"}", "}");                        /* age is required */
    refuses(f, "{\"name\": \"x\", \"age\": 3.5}", ".5");
    refuses(f, "{\"name\": \"x\", \"age\": 3e2}", "e2");
    refuses(f, "{\"name\": \"x\", \"age\": 3, \"tags\": [\"a\", \"c\"]}", "c\"]");
    refuses(f, "{\"name\": \"x\", \"age\": 3, \"other\": 1}", "other");
    refuses(f, "{\"name\": 1}", "1}");
    serve_format_unref(f);
    /* an optional property before a required one may be left out */
    f = schema("{\"properties\": {\"a\": {\"type\": \"boolean\"}, \"b\": {\"type\": \"null\"}}, \"required\": [\"b\"]}");
    holds(f, "{\"b\": null}");
    holds(f, "{\"a\": false, \"b\": null}");
    refuses(f, "{}", "}");
    refuses(f, "{\"a\": true}", "}");
    refuses(f, "{\"a\": true, \"a\": true}", "a\": true}");
    serve_format_unref(f);
    /* nothing required: any prefix of the properties, in order */
    f = schema("{\"type\": \"object\", \"properties\": {\"x\": {}, \"y\": {\"type\": \"number\"}}}");
    holds(f, "{}");
    holds(f, "{\"y\": 1.5E-2}");
    holds(f, "{\"x\": {\"deep\": [1, \"two\"]}, \"y\": 2}");
    refuses(f, "{\"y\": 1, \"x\": 2}", ", \"x");       /* y is the last */
    serve_format_unref(f);
    /* required without properties: exactly the required keys, any values */
    f = schema("{\"type\": \"object\", \"required\": [\"a\", \"b\", \"a\"]}");
    holds(f, "{\"a\": 1, \"b\": [true]}");
    holds(f, "{\"a\": {}, \"b\": \"\"}");
    refuses(f, "{}", "}");
    refuses(f, "{\"a\": 1}", "}");
    refuses(f, "{\"b\": 1, \"a\": 2}", "b\"");
    refuses(f, "{\"c\": 1}", "c\"");
    serve_format_unref(f);
    f = schema("{\"properties\": {}, \"additionalProperties\": true, \"required\": [\"x\"]}");
    holds(f, "{\"x\": null}");
    refuses(f, "{}", "}");
    serve_format_unref(f);
}
END_TEST

START_TEST(values_at_the_root)
{
    struct serve_format *f = schema("{\"type\": \"number\"}");
    holds(f, "12");
    holds(f, "-0.25e7");
    refuses(f, "12.", NULL);
    refuses(f, "012", "12");
    serve_format_unref(f);
    f = schema("{\"enum\": [1, 12, \"one\", true, null, {\"k\": [1]}]}");
    holds(f, "1");
    holds(f, "12");
    holds(f, "\"one\"");
    holds(f, "true");
    holds(f, "null");
    holds(f, "{\"k\":[1]}");
    refuses(f, "13", "3");
    refuses(f, "\"onx\"", "x");
    serve_format_unref(f);
    f = schema("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}");
    holds(f, "[]");
    holds(f, "[1, 2, 3]");
    refuses(f, "[1, 2.0]", ".0");
    refuses(f, "[1, 2", NULL);
    serve_format_unref(f);
    f = schema("{\"const\": \"only\"}");
    holds(f, "\"only\"");
    refuses(f, "\"other\"", "ther");
    serve_format_unref(f);
}
END_TEST

/* requests the machine cannot hold are refused with a 400 naming response_format */
START_TEST(unsupported_schemas_are_refused)
{
    static const char *const bad[] = {
        "{\"type\": \"json_schema\"}",
        "{\"type\": \"xml\"}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"anyOf\": [{}, {}]}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"$ref\": \"#/a\"}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": [\"string\", \"null\"]}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"date\"}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"properties\": {\"a\": {}}, \"required\": [\"b\"]}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"enum\": []}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"properties\": {}, \"required\": [\"b\"]}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false, \"required\": [\"b\"]}}}",
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": 3}}",
        "[]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *j = cJSON_Parse(bad[i]);
        struct serve_format *f = NULL;
        struct serve_error e = {0};
        ck_assert_msg(serve_format_read(j, &f, &e) == -1 && !f, "accepted: %s", bad[i]);
        ck_assert_int_eq(e.http, 400);
        ck_assert_str_eq(e.param, "response_format");
        /* a required property that cannot be written is named */
        if (strstr(bad[i], "required"))
            ck_assert_msg(strstr(e.message, "'b'"), "%s: %s", bad[i], e.message);
        cJSON_Delete(j);
    }
    /* nesting without end */
    char deep[4096] = "";
    for (int i = 0; i < 40; i++)
        strcat(deep, "{\"items\": ");
    strcat(deep, "{}");
    for (int i = 0; i < 40; i++)
        strcat(deep, "}");
    char rf[4400];
    snprintf(rf, sizeof rf, "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": %s}}", deep);
    cJSON *j = cJSON_Parse(rf);
    struct serve_format *f = NULL;
    struct serve_error e = {0};
    ck_assert(serve_format_read(j, &f, &e) == -1 && strstr(e.message, "deeper"));
    cJSON_Delete(j);
    /* text is no constraint */
    j = cJSON_Parse("{\"type\": \"text\"}");
    ck_assert(serve_format_read(j, &f, &e) == 0 && !f);
    cJSON_Delete(j);
}
END_TEST

/* tool_choice: one call as Qwen3's template writes it, of a tool offered
 * (of the one named), its arguments holding the tool's parameters */
START_TEST(tool_calls)
{
    char *tools[] = {
        strdup("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": "
               "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, "
               "\"required\": [\"city\"]}}}"),
        strdup("{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {\"type\": \"object\", "
               "\"properties\": {}}}}"),
        strdup("{\"type\": \"function\", \"function\": {\"name\": \"odd\", \"parameters\": {\"anyOf\": []}}}"),
        strdup("{\"type\": \"function\", \"function\": {\"name\": \"free\", \"parameters\": {}}}"),
    };
    struct serve_format *f = NULL;
    struct serve_error e = {0};
    ck_assert_int_eq(serve_format_tool_call(tools, 4, NULL, &f, &e), 0);
    holds(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
    holds(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>");
    holds(f, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
    holds(f, "<tool_call>\n{\"name\": \"odd\", \"arguments\": {\"any\": [1]}}\n</tool_call>");  /* anyOf: any object */
    refuses(f, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\": 1}}\n</tool_call>", "\"x");
    refuses(f, "<tool_call>\n{\"name\": \"later\", \"arguments\": {}}\n</tool_call>", "later");
    refuses(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>", "days");
    /* the empty schema's arguments are still an object: a call reads back */
    holds(f, "<tool_call>\n{\"name\": \"free\", \"arguments\": {\"k\": 3}}\n</tool_call>");
    refuses(f, "<tool_call>\n{\"name\": \"free\", \"arguments\": 3}\n</tool_call>", "3}");
    refuses(f, "<tool_call>\n{\"name\": \"free\", \"arguments\": \"x\"}\n</tool_call>", "\"x\"}");
    refuses(f, " <tool_call>", " ");
    refuses(f, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}", NULL);
    serve_format_unref(f);
    ck_assert_int_eq(serve_format_tool_call(tools, 3, "now", &f, &e), 0);
    holds(f, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
    refuses(f, "<tool_call>\n{\"name\": \"get_weather\"", "get_weather");
    serve_format_unref(f);
    ck_assert_int_eq(serve_format_tool_call(tools, 3, "later", &f, &e), -1);
    ck_assert(!f && e.http == 400 && !strcmp(e.param, "tool_choice") && strstr(e.message, "later"));
    ck_assert_int_eq(serve_format_tool_call(tools, 0, NULL, &f, &e), -1);
    /* more tools than a choice holds: name one */
    char *many[65];
    for (int i = 0; i < 65; i++)
        many[i] = tools[1];
    ck_assert_int_eq(serve_format_tool_call(many, 65, NULL, &f, &e), -1);
    ck_assert(!f && strstr(e.message, "at most 64"));
    ck_assert_int_eq(serve_format_tool_call(many, 65, "now", &f, &e), 0);
    serve_format_unref(f);
    /* 64 tools of 20 required properties: each tool's schema is within the
     * bound on a schema's parts, and the last one's is held too */
    static char big[64][2048];
    for (int i = 0; i < 64; i++) {
        int at = snprintf(big[i], sizeof big[i], "{\"type\": \"function\", \"function\": {\"name\": \"t%d\", "
                          "\"parameters\": {\"type\": \"object\", \"properties\": {", i);
        for (int k = 0; k < 20; k++)
            at += snprintf(big[i] + at, sizeof big[i] - (size_t)at, "%s\"p%d\": {\"type\": \"null\"}", k ? ", " : "", k);
        at += snprintf(big[i] + at, sizeof big[i] - (size_t)at, "}, \"required\": [");
        for (int k = 0; k < 20; k++)
            at += snprintf(big[i] + at, sizeof big[i] - (size_t)at, "%s\"p%d\"", k ? ", " : "", k);
        snprintf(big[i] + at, sizeof big[i] - (size_t)at, "]}}}");
        many[i] = big[i];
    }
    ck_assert_msg(serve_format_tool_call(many, 64, NULL, &f, &e) == 0, "%s: %s", e.param, e.message);
    char last[1024] = "<tool_call>\n{\"name\": \"t63\", \"arguments\": {";
    for (int k = 0; k < 20; k++)
        snprintf(last + strlen(last), sizeof last - strlen(last), "%s\"p%d\": null", k ? ", " : "", k);
    strcat(last, "}}\n</tool_call>");
    holds(f, last);
    refuses(f, "<tool_call>\n{\"name\": \"t63\", \"arguments\": {}}", "}}");
    serve_format_unref(f);
    for (int i = 0; i < 4; i++)
        free(tools[i]);
}
END_TEST

/* "</tool_call>" in a name, a key or a const is written "<\/tool_call>",
 * and a string the reply writes cannot hold it as it is: the block ends
 * only at its end, and the call reads back whole */
START_TEST(a_call_holds_no_early_end)
{
    char *tools[] = {
        strdup("{\"type\": \"function\", \"function\": {\"name\": \"a</tool_call>b\", \"parameters\": {\"type\": "
               "\"object\", \"properties\": {\"k</tool_call>\": {\"const\": \"x</tool_call>\"}}, \"required\": "
               "[\"k</tool_call>\"]}}}"),
        strdup("{\"type\": \"function\", \"function\": {\"name\": \"free\"}}"),
    };
    struct serve_format *f = NULL;
    struct serve_error e = {0};
    ck_assert_int_eq(serve_format_tool_call(tools, 2, NULL, &f, &e), 0);
    const char *call = "<tool_call>\n{\"name\": \"a<\\/tool_call>b\", \"arguments\": {\"k<\\/tool_call>\": "
                       "\"x<\\/tool_call>\"}}\n</tool_call>";
    holds(f, call);
    refuses(f, "<tool_call>\n{\"name\": \"a</tool_call>b\"", "/tool_call>b");
    refuses(f, "<tool_call>\n{\"name\": \"free\", \"arguments\": {\"s\": \"</tool_call>\"}}\n</tool_call>", ">\"}}");
    refuses(f, "<tool_call>\n{\"name\": \"free\", \"arguments\": {\"</tool_call>\": 1}}\n</tool_call>", ">\": 1");
    holds(f, "<tool_call>\n{\"name\": \"free\", \"arguments\": {\"s\": \"<\\/tool_call> </tool_call <<\"}}\n</tool_call>");
    struct serve_tool_calls calls;
    ck_assert_int_eq(serve_take_tool_calls(call, strlen(call), &calls), 0);
    ck_assert_uint_eq(calls.n, 1);
    ck_assert_str_eq(calls.v[0].name, "a</tool_call>b");
    ck_assert_str_eq(calls.v[0].arguments, "{\"k</tool_call>\":\"x</tool_call>\"}");
    ck_assert_uint_eq(calls.content_len, 0);
    serve_tool_calls_clear(&calls);
    serve_format_unref(f);
    /* a response_format's texts are JSON's own */
    f = schema("{\"const\": \"</b>\"}");
    holds(f, "\"</b>\"");
    serve_format_unref(f);
    for (int i = 0; i < 2; i++)
        free(tools[i]);
}
END_TEST

/* ---- random replies from the allowed tokens ----------------------------- */

static const char *const toks[] = {
    "<end>", "{", "}", "[", "]", ",", ":", " ", "\n", "\"", "\":", "{\"", "\"}", "\",", ", \"", "a", "b",
    "name", "\"name\"", "age", "tags", "\"tags\": [", "x\"", "é", "\\n", "\\u00e9", "\\", "u", "0", "1",
    "12", "-", ".", "5", "e", "+", "true", "false", "null", "tr", "ue", "red", "\"red\"", "green\"", "1.",
    "}}", "]}", "\"a\"", "\"b\"", "ok", "\"ok\": ", "3}", "7,", " \"age\": ",
};
#define N_TOKS (sizeof toks / sizeof *toks)

static uint64_t rng = 88172645463325252ull;
static uint32_t draw(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* a reply drawn from the allowed tokens, the end token taken when allowed
 * half the time; NULL if it ran past max tokens (the bounds should stop it) */
static char *random_reply(struct serve_format *f, const struct serve_vocab *v, int max)
{
    struct serve_format_state *st = serve_format_start(f, v, false);
    static char out[1 << 16];
    size_t len = 0;
    for (int step = 0; step < max; step++) {
        uint32_t allowed[N_TOKS], n = 0;
        for (uint32_t id = 0; id < N_TOKS; id++)
            if (serve_format_allows(st, (int32_t)id))
                allowed[n++] = id;
        if (!n) {
            /* only a token outside this small vocabulary goes on: refuse the draw */
            serve_format_end(st);
            return NULL;
        }
        uint32_t id = allowed[0] == 0 && draw(2) ? 0 : allowed[draw(n)];
        ck_assert_int_eq(serve_format_take(st, (int32_t)id), 0);
        if (id == 0) {
            ck_assert(serve_format_complete(st));
            serve_format_end(st);
            out[len] = 0;
            return out;
        }
        size_t k = strlen(toks[id]);
        ck_assert(len + k < sizeof out);
        memcpy(out + len, toks[id], k);
        len += k;
    }
    serve_format_end(st);
    return NULL;
}

/* the test schema's rules, checked on the parsed reply */
static void check_person(const cJSON *r, const char *text)
{
    ck_assert_msg(cJSON_IsObject(r), "not an object: %s", text);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(r, "name"), *age = cJSON_GetObjectItemCaseSensitive(r, "age"),
                *tags = cJSON_GetObjectItemCaseSensitive(r, "tags"), *ok = cJSON_GetObjectItemCaseSensitive(r, "ok");
    ck_assert_msg(cJSON_IsString(name), "name: %s", text);
    ck_assert_msg(cJSON_IsNumber(age) && age->valuedouble == (double)(long long)age->valuedouble, "age: %s", text);
    ck_assert_msg(!tags || cJSON_IsArray(tags), "tags: %s", text);
    for (const cJSON *t = tags ? tags->child : NULL; t; t = t->next)
        ck_assert_msg(cJSON_IsString(t) && (!strcmp(t->valuestring, "red") || !strcmp(t->valuestring, "a")), "tag: %s",
                      text);
    ck_assert_msg(!ok || cJSON_IsBool(ok), "ok: %s", text);
    int n = 0;
    for (const cJSON *c = r->child; c; c = c->next)
        n++;
    ck_assert_msg(n == 2 + !!tags + !!ok, "other keys: %s", text);
}

START_TEST(random_replies_parse_and_hold_the_schema)
{
    struct serve_vocab *v = serve_vocab_of(toks, N_TOKS, 0);
    struct serve_format *any = format_of("{\"type\": \"json_object\"}");
    struct serve_format *person = schema(
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"},"
        " \"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"red\", \"a\"]}}, \"ok\": {\"type\": \"boolean\"}},"
        " \"required\": [\"name\", \"age\"]}");
    int done[2] = {0, 0};
    for (int it = 0; it < 4000; it++) {
        bool is_any = it % 2 == 0;
        char *text = random_reply(is_any ? any : person, v, 400);
        if (!text)
            continue;
        cJSON *r = cJSON_Parse(text);
        ck_assert_msg(r, "does not parse: %s", text);
        if (is_any)
            ck_assert_msg(cJSON_IsObject(r), "not an object: %s", text);
        else
            check_person(r, text);
        cJSON_Delete(r);
        done[!is_any]++;
    }
    /* most draws end: the bounds on whitespace and numbers hold */
    ck_assert_msg(done[0] > 1000 && done[1] > 1000, "complete replies: %d any, %d schema", done[0], done[1]);
    serve_format_unref(any);
    serve_format_unref(person);
    serve_vocab_free(v);
}
END_TEST

/* With every single byte a token, the machine never reaches a state no
 * byte continues: each draw has a choice, and what ends parses. */
START_TEST(no_dead_ends)
{
    static char bytes[128][2];
    const char *one[128];
    uint32_t n = 0;
    one[n++] = "<end>";
    for (int c = 1; c < 127; c++)
        if (c == '\t' || c == '\n' || c >= 0x20) {
            bytes[n][0] = (char)c;
            one[n] = bytes[n];
            n++;
        }
    struct serve_vocab *v = serve_vocab_of(one, n, 0);
    struct serve_format *fs[] = {
        format_of("{\"type\": \"json_object\"}"),
        schema("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": \"array\","
               " \"items\": {\"type\": \"integer\"}}, \"c\": {\"type\": \"object\", \"properties\": {}}},"
               " \"required\": [\"b\"]}"),
        schema("{\"type\": \"number\"}"),
    };
    int ended = 0;
    for (int it = 0; it < 300; it++) {
        struct serve_format *f = fs[it % 3];
        struct serve_format_state *st = serve_format_start(f, v, false);
        static char out[4096];
        size_t len = 0;
        for (int step = 0; step < 2000; step++) {
            uint32_t allowed[128], k = 0;
            for (uint32_t id = 0; id < n; id++)
                if (serve_format_allows(st, (int32_t)id))
                    allowed[k++] = id;
            ck_assert_msg(k > 0, "format %d: no byte goes on after '%.*s'", it % 3, (int)len, out);
            /* structure more often than text, the end when it may come */
            uint32_t id = allowed[0] == 0 ? 0 : allowed[draw(k)];
            ck_assert_int_eq(serve_format_take(st, (int32_t)id), 0);
            if (id == 0) {
                out[len] = 0;
                cJSON *r = cJSON_Parse(out);
                ck_assert_msg(r, "does not parse: %s", out);
                cJSON_Delete(r);
                ended++;
                break;
            }
            if (len + 1 < sizeof out)
                out[len++] = one[id][0];
        }
        serve_format_end(st);
    }
    ck_assert_msg(ended > 30, "only %d of 300 ended", ended);
    for (int i = 0; i < 3; i++)
        serve_format_unref(fs[i]);
    serve_vocab_free(v);
}
END_TEST

/* With a budget of tokens, a reply that can close within it does: from
 * random draws of single-byte tokens (structure, strings, whitespace) it
 * always ends with the end token, the end included, and parses; with a
 * budget the size of the shortest value, that value, without the end. */
START_TEST(replies_close_within_their_budget)
{
    static char bytes[128][2];
    const char *one[128];
    uint32_t n = 0;
    one[n++] = "<end>";
    for (int c = 1; c < 127; c++)
        if (c == '\t' || c == '\n' || c >= 0x20) {
            bytes[n][0] = (char)c;
            one[n] = bytes[n];
            n++;
        }
    struct serve_vocab *v = serve_vocab_of(one, n, 0);
    char *tools[] = {strdup("{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                            "\"object\", \"properties\": {\"q\": {\"type\": \"string\"}}, \"required\": [\"q\"]}}}"),
                     strdup("{\"type\": \"function\", \"function\": {\"name\": \"g\"}}")};
    struct serve_format *call = NULL;
    struct serve_error e;
    ck_assert_int_eq(serve_format_tool_call(tools, 2, NULL, &call, &e), 0);
    struct {
        struct serve_format *f;
        const char *shortest;
    } fs[] = {
        {format_of("{\"type\": \"json_object\"}"), "{}"},
        {schema("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": \"array\","
                " \"items\": {\"type\": \"integer\"}}, \"c\": {\"type\": \"object\", \"properties\": {}}, \"d\": "
                "{\"type\": \"object\", \"properties\": {\"e\": {\"enum\": [\"long one\", null]}}, \"required\": [\"e\"]}},"
                " \"required\": [\"b\", \"d\"]}"), "{\"b\":[],\"d\":{\"e\":null}}"},
        {schema("{\"type\": \"array\", \"items\": {\"type\": \"string\"}}"), "[]"},
        {schema("{\"enum\": [\"abcdef\", \"xyz\"]}"), "\"xyz\""},
        {call, "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"},
    };
    size_t n_fs = sizeof fs / sizeof *fs;
    for (int it = 0; it < 600; it++) {
        size_t which = (size_t)it % n_fs;
        uint32_t shortest = (uint32_t)strlen(fs[which].shortest);
        /* the shortest value alone, or room for it and the end, and a little more */
        uint32_t budget = it % 7 == 0 ? shortest : shortest + 1 + draw(40);
        struct serve_format_state *st = serve_format_start(fs[which].f, v, false);
        serve_format_budget(st, budget);
        static char out[4096];
        size_t len = 0;
        bool ended = false;
        for (uint32_t step = 0; step < budget; step++) {
            uint32_t allowed[128], k = 0;
            for (uint32_t id = 0; id < n; id++)
                if (serve_format_allows(st, (int32_t)id))
                    allowed[k++] = id;
            out[len] = 0;
            ck_assert_msg(k > 0, "format %zu, budget %u: no token goes on after '%s'", which, budget, out);
            uint32_t id = allowed[0] == 0 && draw(3) == 0 ? 0 : allowed[draw(k)];
            ck_assert_int_eq(serve_format_take(st, (int32_t)id), 0);
            if (id == 0) {
                ended = true;
                break;
            }
            out[len++] = one[id][0];
        }
        out[len] = 0;
        if (budget == shortest) {
            ck_assert_msg(!ended && !strcmp(out, fs[which].shortest), "budget %u: '%s'", budget, out);
        } else {
            ck_assert_msg(ended, "format %zu, budget %u: no end in '%s'", which, budget, out);
            if (which != 4) {
                cJSON *r = cJSON_Parse(out);
                ck_assert_msg(r, "does not parse: %s", out);
                cJSON_Delete(r);
            }
        }
        serve_format_end(st);
    }
    /* inside a string's escapes: the bytes that close it, by hand (a high
     * surrogate's low half, then the quote); with as many tokens the
     * value completes, and with one more the end comes too */
    struct serve_format *str = schema("{\"type\": \"string\"}");
    static const struct {
        const char *prefix;
        uint32_t close;
    } esc[] = {{"\"\\u", 5}, {"\"\\ud7", 3}, {"\"\\ud83", 8}, {"\"\\ud83d", 7}, {"\"\\ud83d\\", 6},
               {"\"\\ud83d\\ud", 4}, {"\"\\", 2}};
    for (int it = 0; it < 400; it++) {
        size_t i = (size_t)it % (sizeof esc / sizeof *esc);
        uint32_t budget = esc[i].close + (uint32_t)(it / 7 % 2);
        struct serve_format_state *st = serve_format_start(str, v, false);
        ck_assert_int_eq(serve_format_feed_text(st, esc[i].prefix, strlen(esc[i].prefix)), 0);
        serve_format_budget(st, budget);
        bool ended = false;
        for (uint32_t step = 0; step < budget && !ended; step++) {
            uint32_t allowed[128], k = 0;
            for (uint32_t id = 0; id < n; id++)
                if (serve_format_allows(st, (int32_t)id))
                    allowed[k++] = id;
            ck_assert_msg(k > 0, "'%s': no token goes on", esc[i].prefix);
            uint32_t id = allowed[draw(k)];
            ck_assert_int_eq(serve_format_take(st, (int32_t)id), 0);
            ended = id == 0;
        }
        ck_assert_msg(serve_format_complete(st) && ended == (budget > esc[i].close), "'%s', budget %u: complete %d, end %d",
                      esc[i].prefix, budget, serve_format_complete(st), ended);
        serve_format_end(st);
    }
    serve_format_unref(str);
    for (size_t i = 0; i < n_fs; i++)
        serve_format_unref(fs[i].f);
    for (int i = 0; i < 2; i++)
        free(tools[i]);
    serve_vocab_free(v);
}
END_TEST

/* the end token only where the value is complete; nothing after it */
START_TEST(end_only_when_complete)
{
    struct serve_vocab *v = serve_vocab_of(toks, N_TOKS, 0);
    struct serve_format *f = format_of("{\"type\": \"json_object\"}");
    struct serve_format_state *st = serve_format_start(f, v, false);
    ck_assert(!serve_format_allows(st, 0));
    ck_assert(serve_format_allows(st, 1));      /* { */
    ck_assert(!serve_format_allows(st, 3));     /* [ */
    ck_assert_int_eq(serve_format_take(st, 1), 0);
    ck_assert(!serve_format_allows(st, 0));
    ck_assert_int_eq(serve_format_take(st, 2), 0);    /* } */
    for (uint32_t id = 1; id < N_TOKS; id++)
        ck_assert_msg(!serve_format_allows(st, (int32_t)id), "'%s' after the end", toks[id]);
    ck_assert(serve_format_allows(st, 0));
    ck_assert_int_eq(serve_format_take(st, 3), -1);
    serve_format_end(st);
    /* with thinking, the format waits for </think> */
    st = serve_format_start(f, v, true);
    ck_assert(serve_format_allows(st, 3) && serve_format_allows(st, 0));
    serve_format_end(st);
    serve_format_unref(f);
    serve_vocab_free(v);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("serve_format");
    TCase *tc = tcase_create("format");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, any_object);
    tcase_add_test(tc, schema_objects);
    tcase_add_test(tc, values_at_the_root);
    tcase_add_test(tc, unsupported_schemas_are_refused);
    tcase_add_test(tc, random_replies_parse_and_hold_the_schema);
    tcase_add_test(tc, end_only_when_complete);
    tcase_add_test(tc, tool_calls);
    tcase_add_test(tc, a_call_holds_no_early_end);
    tcase_add_test(tc, no_dead_ends);
    tcase_add_test(tc, replies_close_within_their_budget);
    suite_add_tcase(s, tc);
    return qp_test_main(s);
}
