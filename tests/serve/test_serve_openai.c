/* test_serve_openai.c - the parts of `qrun serve` that need no model:
 *   - stop strings: for random texts cut into random pieces, what the
 *     matcher releases (pushes and the flush, concatenated) is the text
 *     before the first stop string that strstr finds in the text up to the
 *     first piece that completes one -- and nothing past it is ever
 *     released early;
 *   - request bodies: each field's type and range, duplicate and unknown
 *     keys, another model's name, the defaults, the content parts;
 *   - response bodies: OpenAI's shapes, read back with cJSON, and a NUL
 *     byte in generated text escaped rather than cutting the text. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_strict.h"
#include "serve.h"
#include "stop_text.h"
#include "qp_test.h"

/* ---- stop strings -------------------------------------------------------- */

static unsigned rng = 12345;

static unsigned next_rand(void)
{
    rng = rng * 1103515245u + 12345u;
    return (rng >> 16) & 0x7fff;
}

/* the reply by definition: the text up to the first piece that completes
 * a stop string, cut before the earliest stop string in it (a shorter stop
 * string that completes first wins over a longer one that started before
 * it, as in llama.cpp) */
static size_t reference_cut(const char *text, const size_t *ends, size_t n_pieces, const struct serve_stops *st,
                            bool *hit)
{
    char prefix[64];
    *hit = false;
    for (size_t p = 0; p < n_pieces; p++) {
        memcpy(prefix, text, ends[p]);
        prefix[ends[p]] = 0;
        size_t cut = ends[p];
        for (unsigned i = 0; i < st->n; i++) {
            const char *at = strstr(prefix, st->s[i]);
            if (at && (size_t)(at - prefix) < cut) {
                cut = (size_t)(at - prefix);
                *hit = true;
            }
        }
        if (*hit)
            return cut;
    }
    return strlen(text);
}

static void random_word(char *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = "abc"[next_rand() % 3];
    out[n] = 0;
}

START_TEST(stop_strings_release_exactly_the_text_before_the_first_stop)
{
    char words[SERVE_MAX_STOPS][8];
    for (int trial = 0; trial < 3000; trial++) {
        struct serve_stops st = {.n = 1 + next_rand() % SERVE_MAX_STOPS};
        for (unsigned i = 0; i < st.n; i++) {
            random_word(words[i], 1 + next_rand() % 4);
            st.s[i] = words[i];
            st.len[i] = strlen(words[i]);
        }
        char text[64];
        random_word(text, next_rand() % 40);
        size_t len = strlen(text), ends[64], n_pieces = 0;
        for (size_t at = 0; at < len;) {
            size_t piece = 1 + next_rand() % 5;
            at += piece > len - at ? len - at : piece;
            ends[n_pieces++] = at;
        }
        bool want_hit;
        size_t want = reference_cut(text, ends, n_pieces, &st, &want_hit);

        struct stop_text m;
        stop_text_init(&m, (const char *const *)st.s, (int)st.n);
        char got[128] = "";
        size_t got_len = 0;
        int hit = 0;
        for (size_t p = 0; p < n_pieces && !hit; p++) {
            size_t from = p ? ends[p - 1] : 0;
            const char *out;
            size_t n;
            hit = stop_text_push(&m, text + from, ends[p] - from, &out, &n);
            ck_assert_int_ge(hit, 0);
            memcpy(got + got_len, out, n);
            got_len += n;
            ck_assert_msg(got_len <= want, "released past the reply: text %s, got %.*s", text, (int)got_len, got);
        }
        if (!hit) {
            const char *out;
            size_t n;
            stop_text_finish(&m, &out, &n);
            memcpy(got + got_len, out, n);
            got_len += n;
        }
        stop_text_free(&m);
        ck_assert_msg(hit == want_hit, "text %s: hit %d, expected %d", text, hit, want_hit);
        /* the stop string named is the one at the cut */
        ck_assert_msg(!hit || !strncmp(text + want, st.s[m.hit], st.len[m.hit]), "text %s: stop %s named at %zu",
                      text, st.s[m.hit], want);
        ck_assert_msg(got_len == want && !memcmp(got, text, want), "text %s: released %.*s, expected %.*s", text,
                      (int)got_len, got, (int)want, text);
    }
}
END_TEST

START_TEST(stop_strings_hold_back_only_a_possible_start)
{
    char a[] = "END";
    struct serve_stops st = {.s = {a}, .len = {3}, .n = 1};
    struct stop_text m;
    stop_text_init(&m, (const char *const *)st.s, (int)st.n);
    const char *out;
    size_t n;
    ck_assert_int_eq(stop_text_push(&m, "Hello E", 7, &out, &n), 0);
    ck_assert_uint_eq(n, 6);     /* "Hello " released, "E" held */
    ck_assert_int_eq(stop_text_push(&m, "x", 1, &out, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert(!memcmp(out, "Ex", 2));
    ck_assert_int_eq(stop_text_push(&m, " EN", 3, &out, &n), 0);
    ck_assert_uint_eq(n, 1);     /* " " released, "EN" held */
    ck_assert_int_eq(stop_text_push(&m, "D and more", 10, &out, &n), 1);
    ck_assert_uint_eq(n, 0);     /* the stop string and all after it dropped */
    stop_text_free(&m);
}
END_TEST

/* ---- requests ------------------------------------------------------------ */

static int parse(enum serve_kind kind, const char *body, struct serve_request *q, struct serve_error *e)
{
    static const struct serve_model_ref model = {"M", false, 151936};
    return serve_parse_request(kind, body, strlen(body), &model, q, e);
}

static int parse_strict(enum serve_kind kind, const char *body, struct serve_request *q, struct serve_error *e)
{
    static const struct serve_model_ref model = {"M", true, 151936};
    return serve_parse_request(kind, body, strlen(body), &model, q, e);
}

/* body is refused with status http, naming param (NULL: none) */
static void refused(enum serve_kind kind, const char *body, int http, const char *param)
{
    struct serve_request q;
    struct serve_error e;
    ck_assert_msg(parse(kind, body, &q, &e) == -1, "accepted: %s", body);
    ck_assert_msg(e.http == http, "%s: status %d, expected %d (%s)", body, e.http, http, e.message);
    ck_assert_msg(!strcmp(e.param, param ? param : ""), "%s: param '%s', expected '%s'", body, e.param,
                  param ? param : "");
    ck_assert_msg(e.message[0] && !strchr(e.message, '\n'), "%s: message '%s'", body, e.message);
}

START_TEST(requests_of_the_wrong_shape_are_refused_naming_the_field)
{
    refused(SERVE_CHAT, "", 400, NULL);
    refused(SERVE_CHAT, "{", 400, NULL);
    refused(SERVE_CHAT, "[]", 400, NULL);
    refused(SERVE_CHAT, "{} x", 400, NULL);
    refused(SERVE_CHAT, "{}", 400, "messages");
    refused(SERVE_CHAT, "{\"messages\": []}", 400, "messages");
    refused(SERVE_CHAT, "{\"messages\": \"hi\"}", 400, "messages");
    refused(SERVE_CHAT, "{\"messages\": [{\"role\": \"function\", \"content\": \"x\"}]}", 400, "messages");
    refused(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": [{}]}]}", 400,
            "messages");
    refused(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages");
    refused(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "messages");
    refused(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400,
            "messages");
    refused(SERVE_CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": [{\"id\": \"1\"}]}]}",
            400, "messages");
    const char *msg = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
    char body[512];
    static const struct {
        const char *field, *param;
        int http;
    } bad[] = {
        {"\"max_tokens\": \"8\"", "max_tokens", 400}, {"\"max_tokens\": 0", "max_tokens", 400},
        {"\"max_tokens\": 2.5", "max_tokens", 400}, {"\"temperature\": \"hot\"", "temperature", 400},
        {"\"temperature\": 2.5", "temperature", 400}, {"\"top_p\": 1.5", "top_p", 400},
        {"\"seed\": 1.5", "seed", 400}, {"\"stream\": 1", "stream", 400}, {"\"stop\": 5", "stop", 400},
        {"\"stop\": \"\"", "stop", 400}, {"\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]", "stop", 400},
        {"\"stop\": \"\xff\"", NULL, 400},   /* a body that is not UTF-8, whatever the field */ {"\"n\": 9", "n", 400}, {"\"n\": 0", "n", 400},
        {"\"frequency_penalty\": 2.5", "frequency_penalty", 400}, {"\"presence_penalty\": \"1\"", "presence_penalty", 400},
        {"\"top_k\": 1.5", "top_k", 400}, {"\"min_p\": 2", "min_p", 400}, {"\"repeat_penalty\": 0", "repeat_penalty", 400},
        {"\"logit_bias\": 5", "logit_bias", 400}, {"\"logit_bias\": {\"x\": 1}", "logit_bias", 400},
        {"\"logit_bias\": {\"151936\": 1}", "logit_bias", 400}, {"\"logit_bias\": {\"5\": 101}", "logit_bias", 400},
        {"\"logit_bias\": [[5]]", "logit_bias", 400}, {"\"logprobs\": \"yes\"", "logprobs", 400},
        {"\"logprobs\": 1", "logprobs", 400}, {"\"top_logprobs\": 3", "top_logprobs", 400},
        {"\"logprobs\": true, \"top_logprobs\": 21", "top_logprobs", 400},
        {"\"tools\": [{\"type\": \"function\"}]", "tools", 400}, {"\"tool_choice\": \"required\"", "tool_choice", 400},
        {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"oneOf\": []}}}", "response_format", 400},
        {"\"cache_prompt\": 1", "cache_prompt", 400}, {"\"prompt\": \"x\"", "prompt", 400},
        {"\"model\": 7", "model", 400},
        {"\"stream_options\": {\"include_usage\": \"yes\"}", "stream_options.include_usage", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(body, sizeof body, "{%s, %s}", msg, bad[i].field);
        refused(SERVE_CHAT, body, bad[i].http, bad[i].param);
    }
    /* a key twice, an escaped NUL: JSON readers would disagree on them */
    snprintf(body, sizeof body, "{%s, \"max_tokens\": 1, \"max_tokens\": 9}", msg);
    refused(SERVE_CHAT, body, 400, NULL);
    refused(SERVE_COMPLETION, "{\"prompt\": \"a\\u0000b\"}", 400, NULL);
    refused(SERVE_COMPLETION, "{\"prompt\": [[1, 2], [3]]}", 400, "prompt");
    refused(SERVE_COMPLETION, "{\"prompt\": [1, -2]}", 400, "prompt");
    refused(SERVE_COMPLETION, "{\"prompt\": []}", 400, "prompt");
    refused(SERVE_COMPLETION, "{\"messages\": []}", 400, "messages");
    refused(SERVE_COMPLETION, "{\"prompt\": \"x\", \"echo\": 1}", 400, "echo");
    /* a tool's arguments are an object: its parameters an object's schema */
    static const char *const not_object[] = {"{\"type\": \"integer\"}", "[]", "\"x\"", "{\"type\": [\"object\"]}"};
    for (size_t i = 0; i < sizeof not_object / sizeof *not_object; i++) {
        snprintf(body, sizeof body, "{%s, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"ok\"}}, "
                 "{\"type\": \"function\", \"function\": {\"name\": \"count\", \"parameters\": %s}}]}", msg,
                 not_object[i]);
        refused(SERVE_CHAT, body, 400, "tools");
        struct serve_request q;
        struct serve_error e;
        ck_assert_int_eq(parse(SERVE_CHAT, body, &q, &e), -1);
        ck_assert_msg(strstr(e.message, "tools[1] 'count'"), "%s", e.message);
    }
}
END_TEST

/* what clients send by default, and what they send that this server does
 * not know, goes through; another model's name is served unless strict */
START_TEST(neutral_and_unknown_fields_are_accepted)
{
    struct serve_request q;
    struct serve_error e;
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": [], \"refusal\": null}, "
                       "{\"role\": \"assistant\", \"content\": \"y\", \"tool_calls\": null}], "
                       "\"model\": \"gpt-4o\", \"logprobs\": false, \"top_logprobs\": 0, \"n\": 1, \"tools\": [], "
                       "\"tool_choice\": \"auto\", \"parallel_tool_calls\": true, \"response_format\": {\"type\": \"text\"}, "
                       "\"cache_prompt\": true, \"user\": \"u\", \"metadata\": {\"a\": 1}, \"frobnicate\": [1, 2], "
                       "\"stream_options\": {\"include_usage\": true, \"future\": 1}, "
                       "\"chat_template_kwargs\": {\"enable_thinking\": false, \"other\": \"z\"}}";
    ck_assert_msg(parse(SERVE_CHAT, chat, &q, &e) == 0, "%s", e.message);
    ck_assert_uint_eq(q.n_msgs, 2);
    ck_assert(q.include_usage && !q.think);
    serve_request_free(&q);
    ck_assert_int_eq(parse_strict(SERVE_CHAT, chat, &q, &e), -1);
    ck_assert_int_eq(e.http, 404);
    ck_assert_str_eq(e.param, "model");
    ck_assert_int_eq(parse(SERVE_COMPLETION, "{\"prompt\": \"x\", \"echo\": false, \"logprobs\": 0, \"best_of\": 1, "
                                             "\"suffix\": \"\", \"model\": \"M\"}", &q, &e), 0);
    serve_request_free(&q);
    ck_assert_int_eq(parse_strict(SERVE_COMPLETION, "{\"prompt\": \"x\", \"model\": \"M\"}", &q, &e), 0);
    serve_request_free(&q);
    /* more replies than the server ever holds at once: no retry serves them */
    static const struct serve_model_ref small = {"M", false, 151936, .max_choices = 3};
    const char *body = "{\"prompt\": \"x\", \"n\": 4}";
    ck_assert_int_eq(serve_parse_request(SERVE_COMPLETION, body, strlen(body), &small, &q, &e), -1);
    ck_assert(e.http == 400 && !strcmp(e.param, "n") && strstr(e.message, "at most 3"));
    body = "{\"prompt\": \"x\", \"n\": 3}";
    ck_assert_int_eq(serve_parse_request(SERVE_COMPLETION, body, strlen(body), &small, &q, &e), 0);
    ck_assert_uint_eq(q.n_choices, 3);
    serve_request_free(&q);
}
END_TEST

/* the sampling fields, OpenAI's and llama-server's, into the sampler */
START_TEST(sampling_fields_reach_the_sampler)
{
    struct serve_request q;
    struct serve_error e;
    ck_assert_int_eq(parse(SERVE_COMPLETION, "{\"prompt\": \"x\", \"top_k\": 40, \"min_p\": 0.05, \"repeat_penalty\": 1.1, "
                                             "\"repeat_last_n\": -1, \"presence_penalty\": -0.5, \"frequency_penalty\": 1.5, "
                                             "\"logit_bias\": {\"5\": -100, \"7\": 2.5}}", &q, &e), 0);
    const qpack_sampler_params *sp = &q.sampling;
    ck_assert(sp->top_k == 40 && sp->min_p == 0.05 && sp->repeat_penalty == 1.1 && sp->repeat_last_n == UINT32_MAX);
    ck_assert(sp->presence_penalty == -0.5 && sp->frequency_penalty == 1.5);
    ck_assert_uint_eq(sp->n_logit_bias, 2);
    ck_assert(sp->logit_bias[0].token == 5 && sp->logit_bias[0].bias == -100);
    ck_assert(sp->logit_bias[1].token == 7 && sp->logit_bias[1].bias == 2.5);
    serve_request_free(&q);
    ck_assert_int_eq(parse(SERVE_COMPLETION, "{\"prompt\": \"x\", \"repetition_penalty\": 1.3, \"top_k\": -1, "
                                             "\"logit_bias\": [[9, false], [11, 3]]}", &q, &e), 0);
    ck_assert(q.sampling.repeat_penalty == 1.3 && q.sampling.top_k == 0 && q.sampling.repeat_last_n == 64);
    ck_assert(q.sampling.n_logit_bias == 2 && q.sampling.logit_bias[0].bias == -100 &&
              q.sampling.logit_bias[1].token == 11);
    serve_request_free(&q);
}
END_TEST

START_TEST(the_models_sampling_fills_what_a_request_leaves_out)
{
    qpack_sampler_params plain = serve_default_sampling(), think = plain;
    plain.temperature = 0.7, plain.top_k = 20, plain.top_p = 0.8, plain.repeat_penalty = 1.5;
    think.temperature = 0.6, think.top_k = 20, think.top_p = 0.95, think.min_p = 0.05;
    struct serve_model_ref model = {"M", false, 151936, {&plain, &think}};
    struct serve_request q;
    struct serve_error e;
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"top_k\": 5}";
    ck_assert_int_eq(serve_parse_request(SERVE_CHAT, chat, strlen(chat), &model, &q, &e), 0);
    ck_assert(q.sampling.temperature == 0.7 && q.sampling.top_p == 0.8 && q.sampling.repeat_penalty == 1.5);
    ck_assert_uint_eq(q.sampling.top_k, 5);     /* given: kept */
    serve_request_free(&q);
    const char *thinking = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                           "\"chat_template_kwargs\": {\"enable_thinking\": true}, \"temperature\": 0}";
    ck_assert_int_eq(serve_parse_request(SERVE_CHAT, thinking, strlen(thinking), &model, &q, &e), 0);
    ck_assert(q.sampling.temperature == 0 && q.sampling.top_p == 0.95 && q.sampling.min_p == 0.05);
    serve_request_free(&q);
    const char *text = "{\"prompt\": \"Hi\"}";
    ck_assert_int_eq(serve_parse_request(SERVE_COMPLETION, text, strlen(text), &model, &q, &e), 0);
    ck_assert(q.sampling.temperature == 0.6 && q.sampling.top_k == 20);   /* a text: the file's own values */
    serve_request_free(&q);
}
END_TEST

START_TEST(requests_get_openais_defaults_and_their_fields)
{
    struct serve_request q;
    struct serve_error e;
    ck_assert_int_eq(parse(SERVE_COMPLETION, "{\"prompt\": \"Hi\", \"model\": \"M\", \"user\": \"u\", \"n\": 1}", &q, &e),
                     0);
    ck_assert_str_eq(q.prompt, "Hi");
    ck_assert(q.has_max_tokens);
    ck_assert_uint_eq(q.max_tokens, 16);        /* OpenAI's default for completions */
    ck_assert(q.sampling.temperature == 0.8 && q.sampling.top_k == 40 && q.sampling.top_p == 0.95);   /* qrun's */
    ck_assert(!q.stream && !q.has_seed);
    serve_request_free(&q);

    ck_assert_int_eq(parse(SERVE_COMPLETION, "{\"prompt\": [\"Hi\"], \"top_p\": 0, \"seed\": -3, \"max_tokens\": null}",
                           &q, &e), 0);
    ck_assert_str_eq(q.prompt, "Hi");
    ck_assert(q.sampling.temperature == 0);     /* top_p 0 leaves the most likely token */
    ck_assert(q.has_seed && q.sampling.seed == (uint64_t)-3);
    serve_request_free(&q);

    ck_assert_int_eq(parse(SERVE_COMPLETION, "{\"prompt\": [9707, 11], \"stop\": \"\\n\", \"stream\": true, "
                                             "\"stream_options\": {\"include_usage\": true}}", &q, &e), 0);
    ck_assert_uint_eq(q.n_prompt_ids, 2);
    ck_assert_int_eq(q.prompt_ids[1], 11);
    ck_assert_uint_eq(q.stops.n, 1);
    ck_assert_str_eq(q.stops.s[0], "\n");
    ck_assert(q.stream && q.include_usage);
    serve_request_free(&q);

    ck_assert_int_eq(parse(SERVE_CHAT, "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}, "
                                       "{\"role\": \"user\", \"name\": \"ann\", \"content\": [{\"type\": \"text\", "
                                       "\"text\": \"Hel\"}, {\"type\": \"text\", \"text\": \"lo\"}]}], "
                                       "\"max_completion_tokens\": 7, \"temperature\": 0, \"stop\": [\"a\", \"bc\"], "
                                       "\"chat_template_kwargs\": {\"enable_thinking\": true}}", &q, &e), 0);
    ck_assert_uint_eq(q.n_msgs, 2);
    ck_assert_str_eq(q.msgs[0].role, "system");
    ck_assert_str_eq(q.msgs[1].content, "Hello");
    ck_assert(!q.has_max_tokens || q.max_tokens == 7);
    ck_assert_uint_eq(q.max_tokens, 7);
    ck_assert_uint_eq(q.stops.n, 2);
    ck_assert(q.think);
    serve_request_free(&q);
    ck_assert_int_eq(parse(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &q, &e), 0);
    ck_assert(!q.has_max_tokens && !q.think);   /* a chat runs to its end or the context */
    serve_request_free(&q);
}
END_TEST

/* a reply held to a format ends where its value does: its stop strings,
 * which would cut the value inside, are not used; a text reply keeps them */
START_TEST(stop_strings_do_not_cut_a_held_reply)
{
    static const char *const bodies[] = {
        "{\"prompt\": \"x\", \"stop\": [\"}\", \"\\\"\", \" \"], \"response_format\": {\"type\": \"json_object\"}}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": \"}\", \"response_format\": "
        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"string\"}}}}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": [\"</tool_call>\", \"\\n\"], "
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": \"required\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        struct serve_request q;
        struct serve_error e;
        ck_assert_msg(parse(i ? SERVE_CHAT : SERVE_COMPLETION, bodies[i], &q, &e) == 0, "%s: %s", bodies[i], e.message);
        ck_assert_msg(q.format && q.stops.n == 0, "%s: %u stop strings", bodies[i], q.stops.n);
        serve_request_free(&q);
    }
    struct serve_request q;
    struct serve_error e;
    ck_assert_int_eq(parse(SERVE_COMPLETION, "{\"prompt\": \"x\", \"stop\": \"}\", \"response_format\": "
                                             "{\"type\": \"text\"}}", &q, &e), 0);
    ck_assert(!q.format && q.stops.n == 1);
    serve_request_free(&q);
}
END_TEST

/* ---- responses ----------------------------------------------------------- */

static cJSON *parse_json(char *text)
{
    ck_assert_ptr_nonnull(text);
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "not JSON: %s", text);
    free(text);
    return j;
}

static const char *str_at(const cJSON *j, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, a);
    if (b)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* an error quoting what a client sent (a path, a name) that is not UTF-8
 * is still a JSON body: such bytes become '?' */
START_TEST(error_bodies_are_utf8_json_whatever_they_quote)
{
    struct serve_error e;
    serve_error_set(&e, 404, "invalid_request_error", "not_found", "\xc3", "No route for GET /%s",
                    "\xff\xfe/caf\xc3\xa9/\xe2\x82");
    char *j = serve_error_json(&e);
    ck_assert_ptr_nonnull(j);
    ck_assert_msg(json_find_unreadable(j, strlen(j), NULL) == strlen(j), "not UTF-8 JSON: %s", j);
    ck_assert_ptr_nonnull(strstr(j, "No route for GET /?" "?/caf\xc3\xa9/?" "?"));
    cJSON *root = cJSON_Parse(j);
    ck_assert_ptr_nonnull(root);
    cJSON_Delete(root);
    free(j);
}
END_TEST

/* the calls a reply holds, by hand */
START_TEST(tool_calls_are_read_from_replies)
{
    struct serve_tool_calls c;
    const char *one = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                      "\"days\": 2}}\n</tool_call>";
    ck_assert_int_eq(serve_take_tool_calls(one, strlen(one), &c), 0);
    ck_assert_uint_eq(c.n, 1);
    ck_assert_str_eq(c.v[0].name, "get_weather");
    ck_assert_str_eq(c.v[0].arguments, "{\"city\":\"Paris\",\"days\":2}");
    ck_assert_str_eq(c.content, "Let me check.");
    ck_assert_int_eq(strncmp(c.v[0].id, "call_", 5), 0);
    ck_assert_uint_eq(strlen(c.v[0].id), 5 + 24);
    serve_tool_calls_clear(&c);

    /* two calls and nothing else; arguments written as a string */
    const char *two = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                      "{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>\n";
    ck_assert_int_eq(serve_take_tool_calls(two, strlen(two), &c), 0);
    ck_assert_uint_eq(c.n, 2);
    ck_assert_str_eq(c.v[0].arguments, "{}");
    ck_assert_str_eq(c.v[1].name, "b");
    ck_assert_str_eq(c.v[1].arguments, "{\"x\": 1}");
    ck_assert_uint_eq(c.content_len, 0);
    ck_assert_str_ne(c.v[0].id, c.v[1].id);
    serve_tool_calls_clear(&c);

    /* what is not a call stays text, untouched */
    const char *texts[] = {"<tool_call>\nnot json\n</tool_call>", "<tool_call>\n{\"name\": \"f\"",
                           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
                           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "  plain  "};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        ck_assert_int_eq(serve_take_tool_calls(texts[i], strlen(texts[i]), &c), 0);
        ck_assert_uint_eq(c.n, 0);
        ck_assert_str_eq(c.content, texts[i]);
        serve_tool_calls_clear(&c);
    }
}
END_TEST

static void stream_pieces(const char *const *pieces, size_t n, char *shown, size_t cap, struct serve_tool_calls *c)
{
    struct serve_tool_text t = {0};
    shown[0] = 0;
    for (size_t i = 0; i < n; i++) {
        char *out;
        size_t len;
        ck_assert_int_eq(serve_tool_text_push(&t, pieces[i], strlen(pieces[i]), &out, &len), 0);
        ck_assert_uint_eq(out ? strlen(out) : 0, len);
        if (out)
            strncat(shown, out, cap - strlen(shown) - 1);
        free(out);
    }
    ck_assert_int_eq(serve_tool_text_finish(&t, c), 0);
}

START_TEST(tool_calls_are_held_as_a_reply_streams)
{
    char shown[256];
    struct serve_tool_calls c;
    /* the text before the call streams, a tag's start held */
    const char *call[] = {"Hi <to", "ol_call>\n{\"name\": \"f\", \"argu", "ments\": {\"a\": true}}\n</tool_call>"};
    stream_pieces(call, 3, shown, sizeof shown, &c);
    ck_assert_str_eq(shown, "Hi ");
    ck_assert_uint_eq(c.n, 1);
    ck_assert_str_eq(c.v[0].arguments, "{\"a\":true}");
    serve_tool_calls_clear(&c);
    /* a "<" that starts no call goes out with the next piece */
    const char *lt[] = {"a <", " b <tool", "box>"};
    stream_pieces(lt, 3, shown, sizeof shown, &c);
    ck_assert_str_eq(shown, "a < b <toolbox>");
    ck_assert_uint_eq(c.n, 0);
    ck_assert_uint_eq(c.content_len, 0);
    serve_tool_calls_clear(&c);
    /* a reply cut in a tag's start: the held text is content */
    const char *cut[] = {"x <tool_c"};
    stream_pieces(cut, 1, shown, sizeof shown, &c);
    ck_assert_str_eq(shown, "x ");
    ck_assert_str_eq(c.content, "<tool_c");
    serve_tool_calls_clear(&c);
}
END_TEST

START_TEST(tools_are_written_as_transformers_writes_them)
{
    cJSON *v = cJSON_Parse("{\"b\": [1, 2.5, -3e-7, true, null, \"\\u00e9\\n\\\"\\u0001\"], \"a\": {}}");
    char *s = serve_python_json(v);
    ck_assert_str_eq(s, "{\"b\": [1, 2.5, -3e-07, true, null, \"\xc3\xa9\\n\\\"\\u0001\"], \"a\": {}}");
    free(s);
    cJSON_Delete(v);
    /* as Python's json.dumps(json.loads(...)) prints them */
    v = cJSON_Parse("[5e-324, -0, 1e-310, 0.1, 1e16, 2.5e-7, 123456.789]");
    s = serve_python_json(v);
    ck_assert_str_eq(s, "[5e-324, 0, 1e-310, 0.1, 1e+16, 2.5e-07, 123456.789]");
    free(s);
    cJSON_Delete(v);
    /* a history's call with null arguments is written null, as the template writes it */
    struct serve_request q;
    struct serve_error e;
    ck_assert_int_eq(parse(SERVE_CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
                                       "[{\"function\": {\"name\": \"f\", \"arguments\": null}}, "
                                       "{\"function\": {\"name\": \"g\", \"arguments\": {\"x\": [1, \"y\"]}}}]}]}",
                           &q, &e), 0);
    ck_assert_str_eq(q.msgs[0].tool_calls[0].arguments, "null");
    ck_assert_str_eq(q.msgs[0].tool_calls[1].arguments, "{\"x\": [1, \"y\"]}");
    serve_request_free(&q);
}
END_TEST

/* log softmax by hand: logits 1, 3, 2, 3 sum to e + 2e^3 + e^2 */
START_TEST(logprobs_are_the_log_softmax_of_the_logits)
{
    const double logits[4] = {1, 3, 2, 3};
    double z = exp(1) + 2 * exp(3) + exp(2);
    struct serve_logprob lp;
    serve_logprob_of(logits, 4, 2, 3, &lp);
    ck_assert_int_eq(lp.id, 2);
    ck_assert_double_eq_tol(lp.logprob, log(exp(2) / z), 1e-12);
    ck_assert_uint_eq(lp.n_top, 3);
    /* the most likely first, the lower id first among equals */
    ck_assert_int_eq(lp.top_id[0], 1);
    ck_assert_int_eq(lp.top_id[1], 3);
    ck_assert_int_eq(lp.top_id[2], 2);
    ck_assert_double_eq_tol(lp.top_logprob[0], log(exp(3) / z), 1e-12);
    ck_assert(lp.top_logprob[2] == lp.logprob);   /* the same bits */
    serve_logprob_of(logits, 4, 0, 0, &lp);
    ck_assert_uint_eq(lp.n_top, 0);
    ck_assert_double_eq_tol(lp.logprob, log(exp(1) / z), 1e-12);
    serve_logprob_of(logits, 4, 1, 99, &lp);    /* more than there are: all of them */
    ck_assert_uint_eq(lp.n_top, 4);
    ck_assert_int_eq(lp.top_id[3], 0);
}
END_TEST

/* ---- POST /v1/responses -------------------------------------------------- */

/* body parsed as a Responses request, answered with text: 0 and the
 * response's id in id, or -1 with *e (the request freed either way) */
static int respond(const char *body, const char *text, char *id, size_t cap, struct serve_request *keep,
                   struct serve_error *e)
{
    static const struct serve_model_ref model = {"M", false, 151936};
    struct serve_request q;
    struct serve_resp *r;
    if (serve_parse_responses(body, strlen(body), &model, &q, &r, e))
        return -1;
    struct serve_reply_text t = {.content = text, .content_len = strlen(text)};
    struct serve_usage u = {.prompt_tokens = 1, .completion_tokens = 1};
    free(serve_resp_json(r, &t, "stop", &u));
    snprintf(id, cap, "%s", serve_resp_id(r));
    serve_resp_free(r);
    if (keep)
        *keep = q;
    else
        serve_request_free(&q);
    return 0;
}

static char *continuing(const char *id, const char *input)
{
    static char body[256];
    snprintf(body, sizeof body, "{\"previous_response_id\": \"%s\", \"input\": \"%s\"}", id, input);
    return body;
}

START_TEST(responses_input_items_are_the_chats_messages)
{
    struct serve_request q;
    struct serve_error e;
    char id[48];
    ck_assert_int_eq(respond("{\"instructions\": \"Be brief.\", \"input\": [{\"role\": \"user\", \"content\": "
                             "[{\"type\": \"input_text\", \"text\": \"W\"}, {\"type\": \"input_text\", \"text\": \"?\"}]},"
                             "{\"type\": \"message\", \"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", "
                             "\"text\": \"Let me see.\"}]}, {\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": "
                             "\"f\", \"arguments\": \"{}\"}, {\"type\": \"function_call\", \"call_id\": \"c2\", \"name\": "
                             "\"g\", \"arguments\": \"{\\\"a\\\": 1}\"}, {\"type\": \"function_call_output\", \"call_id\": "
                             "\"c1\", \"output\": \"18 C\"}], \"tools\": [{\"type\": \"function\", \"name\": \"f\", "
                             "\"parameters\": {\"type\": \"object\"}}]}", "Sunny.", id, sizeof id, &q, &e), 0);
    ck_assert_uint_eq(q.n_msgs, 4);
    ck_assert_str_eq(q.msgs[0].role, "system");
    ck_assert_str_eq(q.msgs[0].content, "Be brief.");
    ck_assert_str_eq(q.msgs[1].content, "W?");
    ck_assert_str_eq(q.msgs[2].role, "assistant");
    ck_assert_str_eq(q.msgs[2].content, "Let me see.");
    ck_assert_uint_eq(q.msgs[2].n_tool_calls, 2);
    ck_assert_str_eq(q.msgs[2].tool_calls[1].name, "g");
    ck_assert_str_eq(q.msgs[2].tool_calls[1].arguments, "{\"a\": 1}");
    ck_assert_str_eq(q.msgs[3].role, "tool");
    ck_assert_str_eq(q.msgs[3].content, "18 C");
    /* the flat tool in the chat's shape, as the template writes it */
    ck_assert_uint_eq(q.n_tools, 1);
    ck_assert_str_eq(q.tools[0], "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                                 "{\"type\": \"object\"}}}");
    serve_request_free(&q);

    /* continued: the conversation and the reply, not the instructions */
    char next[48];
    ck_assert_int_eq(respond(continuing(id, "Thanks"), "ok", next, sizeof next, &q, &e), 0);
    ck_assert_uint_eq(q.n_msgs, 5);
    ck_assert_str_eq(q.msgs[0].role, "user");
    ck_assert_str_eq(q.msgs[3].role, "assistant");
    ck_assert_str_eq(q.msgs[3].content, "Sunny.");
    ck_assert_str_eq(q.msgs[4].content, "Thanks");
    serve_request_free(&q);
}
END_TEST

START_TEST(responses_are_kept_within_the_stores_bounds)
{
    struct serve_request q;
    struct serve_error e;
    char id[300][48];
    /* the last 256 */
    for (int i = 0; i < 257; i++)
        ck_assert_int_eq(respond("{\"input\": \"Hi\"}", "ok", id[i], sizeof id[i], NULL, &e), 0);
    ck_assert_int_eq(respond(continuing(id[0], "x"), "ok", id[257], sizeof id[257], NULL, &e), -1);
    ck_assert_int_eq(e.http, 404);
    ck_assert_str_eq(e.param, "previous_response_id");
    ck_assert_ptr_nonnull(strstr(e.message, id[0]));
    /* one continued is used: the least recently used goes instead */
    ck_assert_int_eq(respond(continuing(id[1], "x"), "ok", id[257], sizeof id[257], &q, &e), 0);
    ck_assert_uint_eq(q.n_msgs, 3);
    serve_request_free(&q);
    ck_assert_int_eq(respond(continuing(id[2], "x"), "ok", id[258], sizeof id[258], NULL, &e), -1);
    ck_assert_int_eq(respond(continuing(id[1], "x"), "ok", id[258], sizeof id[258], NULL, &e), 0);
    /* store false: not kept */
    ck_assert_int_eq(respond("{\"input\": \"Hi\", \"store\": false}", "ok", id[259], sizeof id[259], NULL, &e), 0);
    ck_assert_int_eq(respond(continuing(id[259], "x"), "ok", id[260], sizeof id[260], NULL, &e), -1);
    ck_assert_int_eq(e.http, 404);
    /* 64 MiB: 65 conversations of 1 MiB leave out the first */
    size_t big = 1u << 20;
    char *body = malloc(big + 64);
    ck_assert_ptr_nonnull(body);
    int at = sprintf(body, "{\"input\": \"");
    memset(body + at, 'a', big);
    strcpy(body + at + big, "\"}");
    for (int i = 0; i < 65; i++)
        ck_assert_int_eq(respond(body, "ok", id[i], sizeof id[i], NULL, &e), 0);
    free(body);
    ck_assert_int_eq(respond(continuing(id[0], "x"), "ok", id[299], sizeof id[299], NULL, &e), -1);
    ck_assert_int_eq(e.http, 404);
    ck_assert_int_eq(respond(continuing(id[64], "x"), "ok", id[299], sizeof id[299], NULL, &e), 0);
}
END_TEST

START_TEST(responses_have_openais_shapes)
{
    struct serve_reply_meta chat = {.kind = SERVE_CHAT, .id = "chatcmpl-1", .created = 1700000000, .model = "M"};
    struct serve_usage u = {.prompt_tokens = 5, .completion_tokens = 3};
    struct serve_reply_text hi = {.content = "Hi \"there\"\n", .content_len = 11};
    cJSON *j = parse_json(serve_completion_json(&chat, &hi, "stop", &u));
    ck_assert_str_eq(str_at(j, "object", NULL), "chat.completion");
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    ck_assert_str_eq(str_at(c0, "message", "role"), "assistant");
    ck_assert_str_eq(str_at(c0, "message", "content"), "Hi \"there\"\n");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "message"),
                                                        "reasoning_content"));
    ck_assert_str_eq(str_at(c0, "finish_reason", NULL), "stop");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"), "total_tokens")
                         ->valueint, 8);
    cJSON_Delete(j);

    /* reasoning beside the answer, as llama-server gives it; a reply cut in
     * its thinking has an empty content */
    struct serve_reply_text both = {.content = "4", .content_len = 1, .reasoning = "2+2\n", .reasoning_len = 4};
    j = parse_json(serve_completion_json(&chat, &both, "stop", &u));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    ck_assert_str_eq(str_at(c0, "message", "content"), "4");
    ck_assert_str_eq(str_at(c0, "message", "reasoning_content"), "2+2\n");
    cJSON_Delete(j);
    struct serve_reply_text cut = {.reasoning = "hmm", .reasoning_len = 3};
    j = parse_json(serve_completion_json(&chat, &cut, "length", &u));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    ck_assert_str_eq(str_at(c0, "message", "content"), "");
    ck_assert_str_eq(str_at(c0, "message", "reasoning_content"), "hmm");
    cJSON_Delete(j);
    j = parse_json(serve_chunk_json(&chat, &cut, false, NULL));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    ck_assert_str_eq(str_at(c0, "delta", "reasoning_content"), "hmm");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"), "content"));
    cJSON_Delete(j);

    /* calls: content null in a whole reply, numbered in a delta */
    struct serve_tool_call call = {.id = "call_1", .name = "f", .arguments = "{}"};
    struct serve_reply_text calls = {.calls = &call, .n_calls = 1};
    j = parse_json(serve_completion_json(&chat, &calls, "tool_calls", &u));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "message"), "content")));
    const cJSON *tc0 = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "message"), "tool_calls"), 0);
    ck_assert_str_eq(str_at(tc0, "id", NULL), "call_1");
    ck_assert_str_eq(str_at(tc0, "type", NULL), "function");
    ck_assert_str_eq(str_at(tc0, "function", "name"), "f");
    ck_assert_str_eq(str_at(tc0, "function", "arguments"), "{}");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(tc0, "index"));
    ck_assert_str_eq(str_at(c0, "finish_reason", NULL), "tool_calls");
    cJSON_Delete(j);
    j = parse_json(serve_chunk_json(&chat, &calls, false, NULL));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    tc0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"), "tool_calls"), 0);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(tc0, "index")->valueint, 0);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"), "content"));
    cJSON_Delete(j);

    j = parse_json(serve_chunk_json(&chat, NULL, true, NULL));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    ck_assert_str_eq(str_at(j, "object", NULL), "chat.completion.chunk");
    ck_assert_str_eq(str_at(c0, "delta", "role"), "assistant");
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c0, "finish_reason")));
    cJSON_Delete(j);
    j = parse_json(serve_chunk_json(&chat, NULL, false, "length"));
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c0, "delta")), 0);
    ck_assert_str_eq(str_at(c0, "finish_reason", NULL), "length");
    cJSON_Delete(j);

    struct serve_reply_meta cmpl = {.kind = SERVE_COMPLETION, .id = "cmpl-1", .created = 1, .model = "M"};
    struct serve_reply_text nul = {.content = "a\0b", .content_len = 3};
    char *raw = serve_chunk_json(&cmpl, &nul, false, NULL);
    ck_assert_ptr_nonnull(strstr(raw, "\"text\":\"a\\u0000b\""));
    j = parse_json(raw);
    ck_assert_str_eq(str_at(j, "object", NULL), "text_completion");
    cJSON_Delete(j);
    j = parse_json(serve_usage_chunk_json(&cmpl, &u));
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "choices")), 0);
    cJSON_Delete(j);

    /* llama-server's timings, by hand: 10 prompt tokens, 4 cached, 6 run in
     * 30 ms (200/s); 5 generated in 250 ms (20/s); none timed: 0/s */
    struct serve_usage timed = {.prompt_tokens = 10, .cached_tokens = 4, .completion_tokens = 5, .prompt_ms = 30,
                                .predicted_ms = 250};
    j = parse_json(serve_final_chunk_json(&chat, 2, "stop", &timed));
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"),
                                                                         0), "index")->valueint, 2);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "timings");
    ck_assert_str_eq(str_at(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "finish_reason",
                            NULL), "stop");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(t, "prompt_n")->valueint, 6);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(t, "cache_n")->valueint, 4);
    ck_assert_double_eq_tol(cJSON_GetObjectItemCaseSensitive(t, "prompt_per_second")->valuedouble, 200, 1e-9);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(t, "predicted_n")->valueint, 5);
    ck_assert_double_eq_tol(cJSON_GetObjectItemCaseSensitive(t, "predicted_per_second")->valuedouble, 20, 1e-9);
    cJSON_Delete(j);
    j = parse_json(serve_completion_json(&chat, &hi, "stop", &u));
    t = cJSON_GetObjectItemCaseSensitive(j, "timings");
    ck_assert_double_eq(cJSON_GetObjectItemCaseSensitive(t, "predicted_per_second")->valuedouble, 0);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"),
                                                          "prompt_tokens_details"),
                         "cached_tokens")->valueint, 0);
    cJSON_Delete(j);

    struct serve_error e;
    serve_error_set(&e, 404, "invalid_request_error", "model_not_found", "model", "no model %s", "x");
    j = parse_json(serve_error_json(&e));
    ck_assert_str_eq(str_at(j, "error", "message"), "no model x");
    ck_assert_str_eq(str_at(j, "error", "code"), "model_not_found");
    ck_assert_str_eq(str_at(j, "error", "param"), "model");
    cJSON_Delete(j);
    j = parse_json(serve_models_json("M", 2, false, 256, 40960, 1000));
    ck_assert_str_eq(str_at(j, "object", NULL), "list");
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
    ck_assert_str_eq(str_at(m, "id", NULL), "M");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(m, "max_model_len")->valueint, 256);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m, "meta");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(meta, "n_ctx")->valueint, 256);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(meta, "n_ctx_train")->valueint, 40960);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(meta, "n_vocab")->valueint, 1000);
    cJSON_Delete(j);

    struct serve_slot_info slots[2] = {{.busy = true, .held = 7, .prompt = 5, .decoded = 3}, {0}};
    j = parse_json(serve_slots_json(slots, 2, 256));
    ck_assert_int_eq(cJSON_GetArraySize(j), 2);
    const cJSON *s0 = cJSON_GetArrayItem(j, 0), *s1 = cJSON_GetArrayItem(j, 1);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s0, "is_processing")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(s1, "is_processing")));
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(s0, "n_past")->valueint, 7);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(s1, "id")->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(s0, "n_ctx")->valueint, 256);
    cJSON_Delete(j);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("serve_openai");
    TCase *tc = tcase_create("units");
    tcase_add_test(tc, stop_strings_release_exactly_the_text_before_the_first_stop);
    tcase_add_test(tc, stop_strings_hold_back_only_a_possible_start);
    tcase_add_test(tc, requests_of_the_wrong_shape_are_refused_naming_the_field);
    tcase_add_test(tc, requests_get_openais_defaults_and_their_fields);
    tcase_add_test(tc, the_models_sampling_fills_what_a_request_leaves_out);
    tcase_add_test(tc, neutral_and_unknown_fields_are_accepted);
    tcase_add_test(tc, sampling_fields_reach_the_sampler);
    tcase_add_test(tc, responses_have_openais_shapes);
    tcase_add_test(tc, responses_input_items_are_the_chats_messages);
    tcase_add_test(tc, responses_are_kept_within_the_stores_bounds);
    tcase_add_test(tc, logprobs_are_the_log_softmax_of_the_logits);
    tcase_add_test(tc, tool_calls_are_read_from_replies);
    tcase_add_test(tc, tool_calls_are_held_as_a_reply_streams);
    tcase_add_test(tc, tools_are_written_as_transformers_writes_them);
    tcase_add_test(tc, stop_strings_do_not_cut_a_held_reply);
    tcase_add_test(tc, error_bodies_are_utf8_json_whatever_they_quote);
    suite_add_tcase(su, tc);
    return qp_test_main(su);
}
