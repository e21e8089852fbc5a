/* qp_test.c - see qp_test.h. */
#include "qp_test.h"

#include <check.h>
#include <errno.h> /* program_invocation_short_name */
#include <ftw.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

char test_dir[64];
char *out_text;

static int run_suite(Suite *s, bool fork)
{
    SRunner *sr = srunner_create(s);
    if (!fork)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int qp_test_main(Suite *s)
{
    return run_suite(s, true);
}

int qp_test_main_nofork(Suite *s)
{
    return run_suite(s, false);
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

void make_dir(void)
{
    snprintf(test_dir, sizeof test_dir, "/tmp/%.40s-XXXXXX", program_invocation_short_name);
    ck_assert_ptr_nonnull(mkdtemp(test_dir));
}

void remove_dir(void)
{
    if (test_dir[0])
        nftw(test_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    test_dir[0] = 0;
}

const char *path_of(const char *fmt, ...)
{
    static char buf[8][256];
    static int next;
    char *p = buf[next++ % 8], name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    if (name[0] == '/')
        snprintf(p, 256, "%s", name);
    else
        snprintf(p, 256, "%s/%s", test_dir, name);
    return p;
}

char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc((size_t)n + 1, 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

int run(const char *fmt, ...)
{
    char cmd[2048], full[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s >%s/run.out 2>&1", cmd, test_dir);
    int status = system(full);
    free(out_text);
    out_text = slurp(path_of("run.out"), NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void gen(const char *out, const char *args)
{
    int rc = run("%s %s %s", QP_GEN_CHECKPOINT, path_of("%s", out), args);
    ck_assert_msg(rc == 0, "qp-gen-checkpoint %s failed: %s", args, out_text);
}

void pack_checkpoint(const char *src, const char *out, const char *args)
{
    int rc = run("%s pack %s -o %s %s", QP_QPACK, path_of("%s", src), path_of("%s", out), args);
    ck_assert_msg(rc == 0, "qpack pack %s %s failed: %s", src, args, out_text);
}

const char *qp_test_model(const char *name, const char *gen_args, const char *pack_args)
{
    if (!test_dir[0])
        make_dir();
    char out[128], args[1024];
    snprintf(out, sizeof out, "%s.qpk", name);
    snprintf(args, sizeof args, "--quiet %s", pack_args);
    gen(name, gen_args);
    pack_checkpoint(name, out, args);
    return path_of("%s", out);
}

void assert_out_has(const char *needle)
{
    ck_assert_msg(strstr(out_text, needle) != NULL, "expected '%s' in: %s", needle, out_text);
}
