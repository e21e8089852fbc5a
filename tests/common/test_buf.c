/* test_buf.c - common/buf.h's growing buffer: appends join in order and
 * stay NUL-terminated as it grows; once an append fails (here one too
 * large for memory) the flag sticks and later appends change nothing. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "qp_test.h"

START_TEST(appends_join_in_order_past_many_growths)
{
    struct qp_buf b = {0};
    char want[1001];
    for (int i = 0; i < 1000; i++) {
        char c = (char)('a' + i % 26);
        want[i] = c;
        ck_assert_int_eq(qp_buf_add(&b, &c, 1), 0);
    }
    want[1000] = 0;
    ck_assert_uint_eq(b.len, 1000);
    ck_assert_uint_ge(b.cap, 1001);
    ck_assert_str_eq(b.s, want);         /* NUL right after the last byte */
    ck_assert(!b.oom);
    qp_buf_free(&b);
    ck_assert_ptr_null(b.s);
    ck_assert_uint_eq(b.len, 0);
}
END_TEST

START_TEST(an_empty_append_gives_an_empty_string)
{
    struct qp_buf b = {0};
    ck_assert_int_eq(qp_buf_add(&b, "", 0), 0);
    ck_assert_ptr_nonnull(b.s);
    ck_assert_str_eq(b.s, "");
    ck_assert_int_eq(qp_buf_adds(&b, "x, "), 0);
    ck_assert_int_eq(qp_buf_adds(&b, "y"), 0);
    ck_assert_str_eq(b.s, "x, y");
    qp_buf_free(&b);
}
END_TEST

START_TEST(a_failed_append_sticks_and_changes_nothing)
{
    struct qp_buf b = {0};
    ck_assert_int_eq(qp_buf_adds(&b, "kept"), 0);
    char *s = b.s;
    ck_assert_int_eq(qp_buf_add(&b, "z", SIZE_MAX - 2), -1);     /* cannot be allocated */
    ck_assert(b.oom);
    ck_assert_int_eq(qp_buf_adds(&b, "lost"), -1);               /* sticky: nothing appended */
    ck_assert_ptr_eq(b.s, s);
    ck_assert_uint_eq(b.len, 4);
    ck_assert_str_eq(b.s, "kept");
    qp_buf_free(&b);
    ck_assert(!b.oom);
}
END_TEST

START_TEST(printf_appends_its_text_past_a_growth)
{
    struct qp_buf b = {0};
    ck_assert_int_eq(qp_buf_adds(&b, "n="), 0);
    ck_assert_int_eq(qp_buf_printf(&b, "%d, %s", 42, "x"), 0);
    ck_assert_str_eq(b.s, "n=42, x");
    char wide[301];
    memset(wide, 'w', 300);
    wide[300] = 0;
    ck_assert_int_eq(qp_buf_printf(&b, "[%s]", wide), 0);       /* more than the first capacity */
    ck_assert_uint_eq(b.len, 7 + 302);
    ck_assert_int_eq(b.s[7], '[');
    ck_assert_int_eq(b.s[7 + 301], ']');
    ck_assert_int_eq(b.s[b.len], 0);
    b.oom = true;                                               /* sticky for printf too */
    ck_assert_int_eq(qp_buf_printf(&b, "%d", 1), -1);
    ck_assert_uint_eq(b.len, 7 + 302);
    qp_buf_free(&b);
}
END_TEST

static Suite *buf_suite(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("append");
    tcase_add_test(tc, appends_join_in_order_past_many_growths);
    tcase_add_test(tc, an_empty_append_gives_an_empty_string);
    tcase_add_test(tc, a_failed_append_sticks_and_changes_nothing);
    tcase_add_test(tc, printf_appends_its_text_past_a_growth);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(buf_suite());
}
