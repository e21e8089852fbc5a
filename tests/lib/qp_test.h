/* qp_test.h - the tests' shared helpers (tests/lib, linked into every Check
 * test): main(), a scratch folder per test, files, and running qpack /
 * qp-gen-checkpoint as programs (paths from the build: QP_QPACK,
 * QP_GEN_CHECKPOINT), scratch models. Every helper aborts the test on
 * failure. */
#ifndef QP_TEST_H
#define QP_TEST_H

#include <check.h>
#include <stddef.h>

/* main() of a Check test: runs the suite and returns the exit status, 0
 * when every test passed. Each test runs in its own process (CK_FORK=no in
 * the environment runs them in this one, for a debugger). */
int qp_test_main(Suite *s);

/* The same with every test run in this process: for suites whose tests
 * share what an unchecked fixture loaded (BPF programs, a model). */
int qp_test_main_nofork(Suite *s);

/* The scratch folder of the running test (make_dir() .. remove_dir()),
 * /tmp/<test program>-XXXXXX; "" when there is none. */
extern char test_dir[64];
void make_dir(void);
void remove_dir(void);

/* test_dir/name (printf-style), or name itself when it is an absolute path,
 * in one of 8 rotating buffers. */
const char *path_of(const char *fmt, ...);

/* A whole file, NUL-terminated (free() it); *len its size when len != NULL. */
char *slurp(const char *path, size_t *len);
void spit(const char *path, const void *data, size_t len);

/* Output (stdout + stderr) of the last run(), NUL-terminated. */
extern char *out_text;

/* Runs a shell command (printf-style), output in out_text; returns the exit status. */
int run(const char *fmt, ...);

/* qp-gen-checkpoint test_dir/out args; fails the test when it fails. */
void gen(const char *out, const char *args);

/* qpack pack test_dir/src -o test_dir/out args (path_of's names); fails the
 * test when it fails. */
void pack_checkpoint(const char *src, const char *out, const char *args);

/* A scratch model: the checkpoint test_dir/name written by qp-gen-checkpoint
 * gen_args, packed by qpack pack --quiet pack_args into test_dir/name.qpk,
 * whose path it returns (a path_of buffer). Makes the scratch folder first
 * when the test has none. */
const char *qp_test_model(const char *name, const char *gen_args, const char *pack_args);

void assert_out_has(const char *needle);

#endif
