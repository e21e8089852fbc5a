/* test_think_text.c - think_text.h: each reply below, written by hand with
 * the reasoning and answer it must give, pushed whole, a byte at a time and
 * cut at every pair of places, gives those two texts. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "think_text.h"
#include "qp_test.h"

struct parts {
    char text[2][512];       /* [THINK_REASONING], [THINK_ANSWER] */
    size_t len[2];
    int calls;
};

static int collect(void *arg, enum think_part part, const char *text, size_t len)
{
    struct parts *p = arg;
    ck_assert_uint_gt(len, 0);
    ck_assert_uint_lt(p->len[part] + len, sizeof p->text[part]);
    memcpy(p->text[part] + p->len[part], text, len);
    p->len[part] += len;
    p->calls++;
    return 0;
}

/* reply pushed in the pieces that cuts[0..n) make */
static void split(const char *reply, const size_t *cuts, int n, struct parts *p)
{
    memset(p, 0, sizeof *p);
    struct think_text tt;
    think_text_init(&tt);
    size_t at = 0, len = strlen(reply);
    for (int i = 0; i <= n; i++) {
        size_t end = i < n ? cuts[i] : len;
        ck_assert_int_eq(think_text_push(&tt, reply + at, end - at, collect, p), 0);
        at = end;
    }
    ck_assert_int_eq(think_text_finish(&tt, collect, p), 0);
}

static void expect(const char *reply, const char *reasoning, const char *answer)
{
    size_t len = strlen(reply);
    struct parts p;
    size_t cuts[2];
    for (size_t a = 0; a <= len; a++)
        for (size_t b = a; b <= len; b++) {
            cuts[0] = a;
            cuts[1] = b;
            split(reply, cuts, 2, &p);
            ck_assert_msg(p.len[THINK_REASONING] == strlen(reasoning) &&
                              !memcmp(p.text[THINK_REASONING], reasoning, strlen(reasoning)),
                          "reply '%s' cut at %zu, %zu: reasoning '%.*s', want '%s'", reply, a, b,
                          (int)p.len[THINK_REASONING], p.text[THINK_REASONING], reasoning);
            ck_assert_msg(p.len[THINK_ANSWER] == strlen(answer) && !memcmp(p.text[THINK_ANSWER], answer, strlen(answer)),
                          "reply '%s' cut at %zu, %zu: answer '%.*s', want '%s'", reply, a, b,
                          (int)p.len[THINK_ANSWER], p.text[THINK_ANSWER], answer);
        }
    size_t each[512];
    for (size_t i = 0; i + 1 < len && i < 512; i++)
        each[i] = i + 1;
    split(reply, each, len > 1 ? (int)len - 1 : 0, &p);
    ck_assert(p.len[THINK_ANSWER] == strlen(answer) && !memcmp(p.text[THINK_ANSWER], answer, strlen(answer)));
}

START_TEST(qwen3_reply)
{
    expect("<think>\nThe user greets me.\n</think>\n\nHello!", "The user greets me.", "Hello!");
    /* an empty think block, as the template writes without thinking */
    expect("<think>\n\n</think>\n\nHi there", "", "Hi there");
    /* blanks and a line break inside the reasoning stay */
    expect("<think>\nOne.\n\nTwo  three.\n</think>\nFour", "One.\n\nTwo  three.", "Four");
}
END_TEST

START_TEST(no_think_block)
{
    expect("Hello, world", "", "Hello, world");
    /* an answer's leading blanks are its own */
    expect("  \nHello", "", "  \nHello");
    expect(" ", "", " ");
    expect("\n <think>x</think>y", "x", "y");
    /* a tag's start that is not one is text */
    expect("<thin>ice", "", "<thin>ice");
    expect("<b>bold</b>", "", "<b>bold</b>");
    /* a think tag later in an answer is the answer's */
    expect("Use <think> tags", "", "Use <think> tags");
    expect("<thi", "", "<thi");
}
END_TEST

START_TEST(inside_the_reasoning)
{
    /* something like the closing tag, and tags in the answer */
    expect("<think>a </thing> b</think>c", "a </thing> b", "c");
    expect("<think>x<</think>y", "x<", "y");
    expect("<think>x</</think>y", "x</", "y");
    expect("<think>a</think>b</think>", "a", "b</think>");
    /* UTF-8 passes through whole */
    expect("<think>\xc3\xa9t\xc3\xa9</think>\xe2\x82\xac", "\xc3\xa9t\xc3\xa9", "\xe2\x82\xac");
}
END_TEST

START_TEST(reply_cut_short)
{
    /* a reply that ends inside its thinking: what came is reasoning */
    expect("<think>\nStill thinking", "Still thinking", "");
    expect("<think>\nStill thinking\n", "Still thinking", "");
    expect("<think>a</th", "a</th", "");
    expect("<think>\nsee a <", "see a <", "");
    expect("<think>\nsee a\n\n</thi", "see a\n\n</thi", "");
    expect("<think>", "", "");
}
END_TEST

START_TEST(long_blank_runs_kept)
{
    char reply[400], want[400];
    char spaces[201];
    memset(spaces, ' ', 200);
    spaces[200] = 0;
    snprintf(reply, sizeof reply, "<think>a%sb</think>c", spaces);
    snprintf(want, sizeof want, "a%sb", spaces);
    struct parts p;
    split(reply, NULL, 0, &p);
    ck_assert_uint_eq(p.len[THINK_REASONING], strlen(want));
    ck_assert(!memcmp(p.text[THINK_REASONING], want, strlen(want)));
    /* so many blanks before a tag open no thinking: all answer, kept */
    snprintf(reply, sizeof reply, "%s<think>a</think>", spaces);
    split(reply, NULL, 0, &p);
    ck_assert_uint_eq(p.len[THINK_REASONING], 0);
    ck_assert_uint_eq(p.len[THINK_ANSWER], strlen(reply));
}
END_TEST

static int stop_at_first(void *arg, enum think_part part, const char *text, size_t len)
{
    (void)part, (void)text, (void)len;
    ++*(int *)arg;
    return 7;
}

START_TEST(callback_stops)
{
    struct think_text tt;
    think_text_init(&tt);
    int calls = 0;
    ck_assert_int_eq(think_text_push(&tt, "<think>a b c d</think>e", 23, stop_at_first, &calls), 7);
    ck_assert_int_eq(calls, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("think_text");
    TCase *tc = tcase_create("split");
    tcase_add_test(tc, qwen3_reply);
    tcase_add_test(tc, no_think_block);
    tcase_add_test(tc, inside_the_reasoning);
    tcase_add_test(tc, reply_cut_short);
    tcase_add_test(tc, long_blank_runs_kept);
    tcase_add_test(tc, callback_stops);
    suite_add_tcase(s, tc);
    return qp_test_main(s);
}
