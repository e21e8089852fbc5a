/* test_serve_anthropic.c - Anthropic's Messages API in `qrun serve`
 * without a model (serve_anthropic.c):
 *   - requests: a conversation's blocks become the chat turns Qwen3's
 *     template takes (system first, a tool_result a tool turn, thinking an
 *     assistant's reasoning, tool_use its calls), tool_choice and thinking
 *     their flags; every known field of the wrong shape refused naming it;
 *   - replies: the content blocks in Anthropic's order, the stop reasons;
 *   - events: for a reply streamed as reasoning, text and calls, the
 *     sequence of Anthropic's events, each "event:" line its data's type,
 *     the blocks numbered from 0, each started before its deltas and
 *     stopped before the next starts;
 *   - errors: Anthropic's shape, the type from the HTTP status. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "qp_test.h"

static const struct serve_model_ref model = {"M", false, 1000};

static int parse(const char *body, bool count, struct serve_request *q, struct serve_error *e)
{
    return serve_parse_messages(body, strlen(body), count, &model, q, e);
}

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

START_TEST(a_conversation_becomes_the_templates_turns)
{
    const char *body =
        "{\"model\": \"any\", \"max_tokens\": 3000, \"temperature\": 0.5, \"top_k\": 7, \"top_p\": 0.9,"
        " \"stop_sequences\": [\"END\"], \"stream\": true, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 1024},"
        " \"system\": [{\"type\": \"text\", \"text\": \"Be \"}, {\"type\": \"text\", \"text\": \"brief.\"}],"
        " \"tools\": [{\"name\": \"w\", \"description\": \"weather\", \"input_schema\": {\"type\": \"object\"}}],"
        " \"tool_choice\": {\"type\": \"auto\"},"
        " \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"},"
        "  {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"hm\", \"signature\": \"s\"},"
        "   {\"type\": \"redacted_thinking\", \"data\": \"x\"}, {\"type\": \"text\", \"text\": \"Let me see.\"},"
        "   {\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"w\", \"input\": {\"city\": \"Oslo\", \"n\": 2}}]},"
        "  {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\","
        "   \"content\": [{\"type\": \"text\", \"text\": \"18 C\"}]}, {\"type\": \"text\", \"text\": \"Thanks\"}]}]}";
    struct serve_request q;
    struct serve_error e;
    ck_assert_msg(parse(body, false, &q, &e) == 0, "%s", e.message);
    static const char *const roles[] = {"system", "user", "assistant", "tool", "user"};
    static const char *const contents[] = {"Be brief.", "Weather?", "Let me see.", "18 C", "Thanks"};
    ck_assert_uint_eq(q.n_msgs, 5);
    for (size_t i = 0; i < 5; i++) {
        ck_assert_str_eq(q.msgs[i].role, roles[i]);
        ck_assert_str_eq(q.msgs[i].content, contents[i]);
    }
    ck_assert_str_eq(q.msgs[2].reasoning, "hm");
    ck_assert_uint_eq(q.msgs[2].n_tool_calls, 1);
    ck_assert_str_eq(q.msgs[2].tool_calls[0].name, "w");
    ck_assert_str_eq(q.msgs[2].tool_calls[0].arguments, "{\"city\": \"Oslo\", \"n\": 2}");
    ck_assert_uint_eq(q.n_tools, 1);
    ck_assert_str_eq(q.tools[0], "{\"type\": \"function\", \"function\": {\"name\": \"w\", \"description\": \"weather\", "
                                 "\"parameters\": {\"type\": \"object\"}}}");
    ck_assert(q.think && q.stream && q.has_max_tokens && q.max_tokens == 3000);
    ck_assert(q.sampling.temperature == 0.5 && q.sampling.top_k == 7 && q.sampling.top_p == 0.9);
    ck_assert_uint_eq(q.stops.n, 1);
    ck_assert_str_eq(q.stops.s[0], "END");
    ck_assert(!q.format && !q.no_tools && !q.tool_required);
    serve_request_free(&q);

    /* a forced call holds the reply to the tool; none drops the tools */
    const char *forced = "{\"max_tokens\": 9, \"tools\": [{\"name\": \"w\", \"input_schema\": {\"type\": \"object\"}}],"
                         " \"tool_choice\": {\"type\": \"%s\"%s}, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}";
    char b[512];
    snprintf(b, sizeof b, forced, "tool", ", \"name\": \"w\"");
    ck_assert_msg(parse(b, false, &q, &e) == 0, "%s", e.message);
    ck_assert(q.format && q.tool_name && !strcmp(q.tool_name, "w"));
    serve_request_free(&q);
    snprintf(b, sizeof b, forced, "any", "");
    ck_assert_msg(parse(b, false, &q, &e) == 0, "%s", e.message);
    ck_assert(q.format && q.tool_required);
    serve_request_free(&q);
    snprintf(b, sizeof b, forced, "none", "");
    ck_assert_msg(parse(b, false, &q, &e) == 0, "%s", e.message);
    ck_assert(!q.format && q.n_tools == 0);
    serve_request_free(&q);

    /* count_tokens needs no max_tokens */
    ck_assert(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", true, &q, &e) == 0);
    ck_assert(q.n_msgs == 1 && !q.think);
    serve_request_free(&q);
}
END_TEST

START_TEST(requests_of_the_wrong_shape_are_refused_naming_the_field)
{
    static const struct {
        const char *body, *param;
    } cases[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "max_tokens"},
        {"{\"max_tokens\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "max_tokens"},
        {"{\"max_tokens\": 1.5, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "max_tokens"},
        {"{\"max_tokens\": 5}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": []}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"tool\", \"content\": \"Hi\"}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [\"Hi\"]}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"document\"}]}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_use\", \"id\": \"a\", "
         "\"name\": \"f\", \"input\": {}}]}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\"}]}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", "
         "\"tool_use_id\": \"a\", \"is_error\": 1}]}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
         "\"content\": [{\"type\": \"tool_use\", \"id\": \"a\", \"name\": \"f\", \"input\": []}]}, "
         "{\"role\": \"user\", \"content\": \"x\"}]}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
         "\"content\": \"x\"}]}", "messages"},
        {"{\"max_tokens\": 5, \"system\": 3, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "system"},
        {"{\"max_tokens\": 5, \"system\": [{\"type\": \"image\"}], \"messages\": [{\"role\": \"user\", \"content\": "
         "\"Hi\"}]}", "system"},
        {"{\"max_tokens\": 5, \"temperature\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "temperature"},
        {"{\"max_tokens\": 5, \"top_p\": \"1\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "top_p"},
        {"{\"max_tokens\": 5, \"top_k\": -1, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "top_k"},
        {"{\"max_tokens\": 5, \"stop_sequences\": [\"\"], \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
         "stop_sequences"},
        {"{\"max_tokens\": 5, \"stop_sequences\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"messages\": [{\"role\": "
         "\"user\", \"content\": \"Hi\"}]}", "stop_sequences"},
        {"{\"max_tokens\": 5, \"stream\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "stream"},
        {"{\"max_tokens\": 5, \"metadata\": \"u\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "metadata"},
        {"{\"max_tokens\": 5, \"model\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "model"},
        {"{\"max_tokens\": 5, \"tools\": {}, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "tools"},
        {"{\"max_tokens\": 5, \"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"array\"}}], "
         "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "tools"},
        {"{\"max_tokens\": 5, \"tools\": [{\"type\": \"web_search_20250305\", \"name\": \"web_search\"}], "
         "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "tools"},
        {"{\"max_tokens\": 5, \"tools\": [{\"name\": \"\", \"input_schema\": {\"type\": \"object\"}}], "
         "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "tools"},
        {"{\"max_tokens\": 5, \"tool_choice\": \"auto\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
         "tool_choice"},
        {"{\"max_tokens\": 5, \"tool_choice\": {\"type\": \"tool\"}, \"messages\": [{\"role\": \"user\", \"content\": "
         "\"Hi\"}]}", "tool_choice"},
        {"{\"max_tokens\": 5, \"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"object\"}}], \"tool_choice\": "
         "{\"type\": \"tool\", \"name\": \"g\"}, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "tool_choice"},
        {"{\"max_tokens\": 5000, \"thinking\": {\"type\": \"enabled\"}, \"messages\": [{\"role\": \"user\", \"content\": "
         "\"Hi\"}]}", "thinking"},
        {"{\"max_tokens\": 5000, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 100}, \"messages\": "
         "[{\"role\": \"user\", \"content\": \"Hi\"}]}", "thinking.budget_tokens"},
        {"{\"max_tokens\": 2000, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 2000}, \"messages\": "
         "[{\"role\": \"user\", \"content\": \"Hi\"}]}", "thinking.budget_tokens"},
        {"{\"max_tokens\": 5, \"thinking\": {\"type\": \"on\"}, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
         "thinking"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct serve_request q;
        struct serve_error e;
        ck_assert_msg(parse(cases[i].body, false, &q, &e) == -1, "accepted: %s", cases[i].body);
        ck_assert_int_eq(e.http, 400);
        ck_assert_msg(!strcmp(e.param, cases[i].param), "%s: param %s, expected %s (%s)", cases[i].body, e.param,
                      cases[i].param, e.message);
        ck_assert_msg(strlen(e.message) > 0, "no message");
    }
    /* unknown fields are ignored, in the body, the blocks and the tools */
    struct serve_request q;
    struct serve_error e;
    ck_assert(parse("{\"max_tokens\": 5, \"container\": [], \"service_tier\": \"auto\", \"tools\": [{\"name\": \"f\", "
                    "\"input_schema\": {\"type\": \"object\"}, \"cache_control\": {}}], \"messages\": [{\"role\": \"user\","
                    " \"extra\": 1, \"content\": [{\"type\": \"text\", \"text\": \"Hi\", \"cache_control\": {\"type\": "
                    "\"ephemeral\"}, \"citations\": null}]}]}", false, &q, &e) == 0);
    serve_request_free(&q);
}
END_TEST

static const struct serve_reply_meta meta = {.kind = SERVE_CHAT, .id = "msg_1", .model = "M", .anthropic = true,
                                             .prompt_tokens = 11};

START_TEST(replies_are_content_blocks_in_anthropics_order)
{
    struct serve_tool_call calls[2] = {{.id = "call_ab", .name = "f", .arguments = "{\"x\":1}"},
                                       {.id = "call_cd", .name = "g", .arguments = "not json"}};
    struct serve_reply_text t = {.content = "Hi\0there", .content_len = 8, .reasoning = "hm", .reasoning_len = 2,
                                 .calls = calls, .n_calls = 2};
    struct serve_usage u = {.prompt_tokens = 11, .completion_tokens = 4};
    cJSON *m = parse_json(serve_message_json(&meta, &t, "tool_calls", NULL, &u));
    ck_assert_str_eq(str_at(m, "type", NULL), "message");
    ck_assert_str_eq(str_at(m, "role", NULL), "assistant");
    ck_assert_str_eq(str_at(m, "stop_reason", NULL), "tool_use");
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(m, "stop_sequence")));
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "usage"), "input_tokens")->valueint, 11);
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "usage"), "output_tokens")->valueint, 4);
    const cJSON *c = cJSON_GetObjectItem(m, "content");
    ck_assert_int_eq(cJSON_GetArraySize(c), 4);
    ck_assert_str_eq(str_at(cJSON_GetArrayItem(c, 0), "type", NULL), "thinking");
    ck_assert_str_eq(str_at(cJSON_GetArrayItem(c, 0), "thinking", NULL), "hm");
    ck_assert_str_eq(str_at(cJSON_GetArrayItem(c, 1), "type", NULL), "text");
    ck_assert_str_eq(str_at(cJSON_GetArrayItem(c, 2), "type", NULL), "tool_use");
    ck_assert_str_eq(str_at(cJSON_GetArrayItem(c, 2), "id", NULL), "toolu_ab");
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 2), "input"), "x")->valueint, 1);
    ck_assert(cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 3), "input")));
    cJSON_Delete(m);
    /* a NUL byte in the text is escaped, not an end */
    char *raw = serve_message_json(&meta, &t, "stop", NULL, &u);
    ck_assert_ptr_nonnull(strstr(raw, "\"Hi\\u0000there\""));
    free(raw);

    static const struct {
        const char *finish, *stop, *reason;
    } reasons[] = {{"stop", NULL, "end_turn"}, {"stop", "END", "stop_sequence"}, {"length", NULL, "max_tokens"},
                   {"tool_calls", NULL, "tool_use"}};
    struct serve_reply_text plain = {.content = "x", .content_len = 1};
    for (size_t i = 0; i < 4; i++) {
        m = parse_json(serve_message_json(&meta, &plain, reasons[i].finish, reasons[i].stop, &u));
        ck_assert_str_eq(str_at(m, "stop_reason", NULL), reasons[i].reason);
        ck_assert(reasons[i].stop ? !strcmp(str_at(m, "stop_sequence", NULL), reasons[i].stop)
                                  : cJSON_IsNull(cJSON_GetObjectItem(m, "stop_sequence")));
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(m, "content")), 1);
        cJSON_Delete(m);
    }
}
END_TEST

/* appends every event of text to the list "type@index ..." (index -1: none),
 * checking each "event:" line names its data's type */
static void read_events(char *text, char *list, size_t cap)
{
    ck_assert_ptr_nonnull(text);
    for (char *at = text; *at;) {
        char type[64], *data = strstr(at, "\ndata: "), *end = data ? strstr(data, "\n\n") : NULL;
        ck_assert_msg(!strncmp(at, "event: ", 7) && data && end, "not an event: %s", at);
        snprintf(type, sizeof type, "%.*s", (int)(data - at - 7), at + 7);
        *end = 0;
        cJSON *j = cJSON_Parse(data + 7);
        ck_assert_msg(j && str_at(j, "type", NULL) && !strcmp(str_at(j, "type", NULL), type), "event %s: %s", type,
                      data + 7);
        const cJSON *index = cJSON_GetObjectItem(j, "index"), *delta = cJSON_GetObjectItem(j, "delta");
        const cJSON *block = cJSON_GetObjectItem(j, "content_block");
        const char *sub = delta ? str_at(delta, "type", NULL) : block ? str_at(block, "type", NULL) : NULL;
        char item[128];
        snprintf(item, sizeof item, "%s%s%s@%d ", type, sub ? ":" : "", sub ? sub : "", index ? index->valueint : -1);
        snprintf(list + strlen(list), cap - strlen(list), "%s", item);
        cJSON_Delete(j);
        at = end + 2;
    }
    free(text);
}

START_TEST(a_streamed_reply_is_anthropics_event_sequence)
{
    char list[2048] = "";
    struct serve_message_events ev = {0};
    struct serve_tool_call call = {.id = "call_1", .name = "f", .arguments = "{\"x\": 1}"};
    read_events(serve_message_start_events(&meta), list, sizeof list);
    struct serve_reply_text parts[] = {
        {.reasoning = "a", .reasoning_len = 1}, {.reasoning = "b", .reasoning_len = 1},
        {.content = "c", .content_len = 1, .reasoning = "", .reasoning_len = 0}, {.content = "d", .content_len = 1},
        {.calls = &call, .n_calls = 1},
    };
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        read_events(serve_message_delta_events(&ev, &parts[i]), list, sizeof list);
    struct serve_usage u = {.prompt_tokens = 11, .completion_tokens = 5};
    read_events(serve_message_end_events(&ev, "tool_calls", NULL, &u), list, sizeof list);
    ck_assert_str_eq(list, "message_start@-1 "
                           "content_block_start:thinking@0 content_block_delta:thinking_delta@0 "
                           "content_block_delta:thinking_delta@0 content_block_stop@0 "
                           "content_block_start:text@1 content_block_delta:text_delta@1 "
                           "content_block_delta:text_delta@1 content_block_stop@1 "
                           "content_block_start:tool_use@2 content_block_delta:input_json_delta@2 "
                           "content_block_stop@2 message_delta@-1 message_stop@-1 ");

    /* text only, ended by a stop sequence: the block closed at the end */
    list[0] = 0;
    ev = (struct serve_message_events){0};
    struct serve_reply_text text = {.content = "x", .content_len = 1};
    read_events(serve_message_delta_events(&ev, &text), list, sizeof list);
    char *end = serve_message_end_events(&ev, "stop", "END", &u);
    ck_assert_ptr_nonnull(strstr(end, "\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"},"
                                      "\"usage\":{\"output_tokens\":5}"));
    read_events(end, list, sizeof list);
    ck_assert_str_eq(list, "content_block_start:text@0 content_block_delta:text_delta@0 content_block_stop@0 "
                           "message_delta@-1 message_stop@-1 ");
}
END_TEST

START_TEST(errors_have_anthropics_shape)
{
    static const struct {
        int http;
        const char *type;
    } cases[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
                 {404, "not_found_error"}, {405, "invalid_request_error"}, {413, "request_too_large"},
                 {429, "rate_limit_error"}, {500, "api_error"}, {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct serve_error e;
        serve_error_set(&e, cases[i].http, "invalid_request_error", NULL, "x", "bad \xff byte");
        cJSON *j = parse_json(serve_anthropic_error_json(&e));
        ck_assert_str_eq(str_at(j, "type", NULL), "error");
        ck_assert_str_eq(str_at(j, "error", "type"), cases[i].type);
        ck_assert_str_eq(str_at(j, "error", "message"), "bad ? byte");
        cJSON_Delete(j);
    }
    struct serve_error e;
    serve_error_set(&e, 500, "server_error", NULL, NULL, "boom");
    char *ev = serve_message_error_event(&e);
    ck_assert_str_eq(ev, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n");
    free(ev);
    cJSON *c = parse_json(serve_count_tokens_json(42));
    ck_assert_int_eq(cJSON_GetObjectItem(c, "input_tokens")->valueint, 42);
    cJSON_Delete(c);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("serve_anthropic");
    TCase *tc = tcase_create("messages");
    tcase_add_test(tc, a_conversation_becomes_the_templates_turns);
    tcase_add_test(tc, requests_of_the_wrong_shape_are_refused_naming_the_field);
    tcase_add_test(tc, replies_are_content_blocks_in_anthropics_order);
    tcase_add_test(tc, a_streamed_reply_is_anthropics_event_sequence);
    tcase_add_test(tc, errors_have_anthropics_shape);
    suite_add_tcase(su, tc);
    return qp_test_main(su);
}
