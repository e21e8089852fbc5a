/* test_fsafe.c - files opened and written safely (common/fsafe.h): inputs
 * that are not regular files are refused at once, outputs are published
 * whole or not at all, never through a planted link, never over an input,
 * and leave nothing behind when aborted or interrupted. The named fallback
 * (file systems without O_TMPFILE) is forced with FS_OUT_NAMED. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fsafe.h"
#include "qp_test.h"

/* ----------------------------------------------------------------- fixtures */

/* The test's scratch folder with a deadline: an input that blocks fails the
 * test instead of hanging it. */
static void begin(void)
{
    make_dir();
    alarm(20);
}

static void end(void)
{
    alarm(0);
    remove_dir();
}

static void write_text(const char *name, const char *text)
{
    FILE *f = fopen(path_of(name), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* The whole file at name, NUL-terminated (the test files are text). */
static char *read_text(const char *name)
{
    static char buf[4096];
    FILE *f = fopen(path_of(name), "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Names in the test folder, sorted, joined by spaces. */
static const char *listing(void)
{
    static char out[8192];
    struct dirent **names;
    int n = scandir(test_dir, &names, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, ".."))
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", out[0] ? " " : "", names[i]->d_name);
        free(names[i]);
    }
    free(names);
    return out;
}

#define ck_assert_error(err, needle, file) do {                                            \
    ck_assert_msg(strstr((err).msg, (needle)) != NULL, "message \"%s\" lacks \"%s\"",       \
                  (err).msg, (needle));                                                     \
    ck_assert_msg(strstr((err).msg, (file)) != NULL, "message \"%s\" does not name %s",     \
                  (err).msg, (file));                                                       \
    ck_assert_msg(strchr((err).msg, '\n') == NULL, "message \"%s\" is not one line", (err).msg); \
} while (0)

/* 1 when name is a named partial file of dest "out" as fsafe.h describes:
 * ".out.partial-PID-" and 16 lowercase hex digits. */
static int is_partial_name(const char *name, pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, ".out.partial-%d-", (int)pid);
    size_t n = strlen(prefix);
    return strncmp(name, prefix, n) == 0 && strlen(name + n) == 16 &&
           strspn(name + n, "0123456789abcdef") == 16;
}

/* ------------------------------------------------------------------- inputs */

START_TEST(an_input_fifo_is_refused_at_once)
{
    begin();
    ck_assert_int_eq(mkfifo(path_of("fifo"), 0644), 0);
    qp_err err = {{0}};
    /* no writer: a plain open() would block here until the alarm */
    ck_assert_int_eq(fs_open_input(path_of("fifo"), NULL, &err), -1);
    ck_assert_error(err, "not a regular file (a fifo)", path_of("fifo"));
    char *text = NULL;
    size_t len;
    ck_assert_int_eq(fs_read_input(path_of("fifo"), 100, &text, &len, &err), -1);
    ck_assert_ptr_null(text);
    end();
}
END_TEST

START_TEST(an_input_folder_or_device_is_refused)
{
    begin();
    qp_err err = {{0}};
    ck_assert_int_eq(fs_open_input(test_dir, NULL, &err), -1);
    ck_assert_error(err, "not a regular file (a directory)", test_dir);
    ck_assert_int_eq(fs_open_input("/dev/null", NULL, &err), -1);
    ck_assert_error(err, "not a regular file (a character device)", "/dev/null");
    ck_assert_int_eq(fs_open_input(path_of("missing"), NULL, &err), -1);
    ck_assert_error(err, "No such file", path_of("missing"));
    end();
}
END_TEST

START_TEST(an_input_file_is_opened_blocking_with_its_stat)
{
    begin();
    write_text("a", "hello");
    qp_err err = {{0}};
    struct stat st;
    int fd = fs_open_input(path_of("a"), &st, &err);
    ck_assert_msg(fd >= 0, "%s", err.msg);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    ck_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    ck_assert_int_eq(st.st_size, 5);
    close(fd);
    char *text;
    size_t len;
    ck_assert_int_eq(fs_read_input(path_of("a"), 5, &text, &len, &err), 0);
    ck_assert_uint_eq(len, 5);
    ck_assert_str_eq(text, "hello");
    free(text);
    ck_assert_int_eq(fs_read_input(path_of("a"), 4, &text, &len, &err), -1);
    ck_assert_error(err, "5 bytes, more than the limit of 4", path_of("a"));
    end();
}
END_TEST

/* ------------------------------------------------------ the destination check */

START_TEST(a_destination_that_is_not_a_regular_file_is_refused)
{
    begin();
    qp_err err = {{0}};
    ck_assert_int_eq(fs_out_check("/dev/null", NULL, &err), -1);
    ck_assert_error(err, "not a regular file (a character device)", "/dev/null");
    ck_assert_int_eq(mkfifo(path_of("fifo"), 0644), 0);
    ck_assert_int_eq(fs_out_check(path_of("fifo"), NULL, &err), -1);
    ck_assert_error(err, "(a fifo)", path_of("fifo"));
    ck_assert_int_eq(mkdir(path_of("sub"), 0755), 0);
    ck_assert_int_eq(fs_out_check(path_of("sub"), NULL, &err), -1);
    ck_assert_error(err, "is a directory", path_of("sub"));
    ck_assert_int_eq(fs_out_check(path_of("sub/"), NULL, &err), -1);
    ck_assert_error(err, "names a folder", path_of("sub/"));
    write_text("target", "x");
    ck_assert_int_eq(symlink(path_of("target"), path_of("link")), 0);
    ck_assert_int_eq(fs_out_check(path_of("link"), NULL, &err), -1);
    ck_assert_error(err, "(a symbolic link)", path_of("link"));
    ck_assert_int_eq(symlink(path_of("nowhere"), path_of("dangling")), 0);
    ck_assert_int_eq(fs_out_check(path_of("dangling"), NULL, &err), -1);
    ck_assert_error(err, "(a symbolic link)", path_of("dangling"));
    /* absent, or a regular file: fine */
    ck_assert_msg(fs_out_check(path_of("new"), NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(fs_out_check(path_of("target"), NULL, &err) == 0, "%s", err.msg);
    end();
}
END_TEST

START_TEST(a_destination_that_is_an_input_is_refused_by_inode)
{
    begin();
    qp_err err = {{0}};
    ck_assert_int_eq(mkdir(path_of("ck"), 0755), 0);
    write_text("ck/config.json", "{}");
    write_text("other", "x");
    char *other = strdup(path_of("other")), *ck = strdup(path_of("ck"));
    const char *file_input[] = {other, NULL};
    const char *folder_input[] = {ck, NULL};
    ck_assert_int_eq(fs_out_check(path_of("other"), file_input, &err), -1);
    ck_assert_error(err, "would overwrite its own input", path_of("other"));
    ck_assert_int_eq(fs_out_check(path_of("ck/config.json"), folder_input, &err), -1);
    ck_assert_error(err, "would overwrite its own input", "config.json");
    /* another name for the same file */
    ck_assert_int_eq(link(path_of("ck/config.json"), path_of("hard")), 0);
    ck_assert_int_eq(fs_out_check(path_of("hard"), folder_input, &err), -1);
    ck_assert_error(err, "is the input", path_of("ck/config.json"));
    /* a different file of the same content is not an input */
    write_text("copy", "{}");
    ck_assert_msg(fs_out_check(path_of("copy"), folder_input, &err) == 0, "%s", err.msg);
    free(other);
    free(ck);
    end();
}
END_TEST

START_TEST(a_destination_folder_must_exist_and_be_writable)
{
    begin();
    qp_err err = {{0}};
    ck_assert_int_eq(fs_out_check(path_of("no/such/x"), NULL, &err), -1);
    ck_assert_error(err, "No such file", path_of("no/such/x"));
    write_text("file", "x");
    ck_assert_int_eq(fs_out_check(path_of("file/x"), NULL, &err), -1);
    ck_assert_error(err, "Not a directory", path_of("file/x"));
    if (geteuid() != 0) { /* root writes anywhere */
        ck_assert_int_eq(mkdir(path_of("ro"), 0555), 0);
        ck_assert_int_eq(fs_out_check(path_of("ro/x"), NULL, &err), -1);
        ck_assert_error(err, "Permission denied", path_of("ro/x"));
    }
    end();
}
END_TEST

/* ------------------------------------------------------------------ outputs */

/* How many named partial files of dest "out" this process has in the
 * folder; the last one's name goes to name. */
static int our_partials(char name[NAME_MAX + 1])
{
    DIR *d = opendir(test_dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (is_partial_name(e->d_name, getpid())) {
            snprintf(name, NAME_MAX + 1, "%s", e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

/* Writes "new" into dest "out" through fs_out with flags; returns the name
 * of the partial file seen while writing ("" for an unnamed one). */
static const char *write_out(unsigned flags)
{
    static char partial[NAME_MAX + 1];
    struct fs_out o;
    qp_err err = {{0}};
    char *before = strdup(listing());
    ck_assert_msg(fs_out_open(&o, path_of("out"), flags, &err) == 0, "%s", err.msg);
    ck_assert_msg(fs_out_write(&o, "new", 3, &err) == 0, "%s", err.msg);
    partial[0] = 0;
    if (o.unnamed) {
        ck_assert_str_eq(listing(), before); /* nothing new in the folder */
    } else {
        ck_assert_int_eq(our_partials(partial), 1);
        struct stat st;
        ck_assert_int_eq(lstat(path_of(partial), &st), 0);
        ck_assert(S_ISREG(st.st_mode));
    }
    ck_assert_msg(fs_out_commit(&o, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(read_text("out"), "new");
    char none[NAME_MAX + 1];
    ck_assert_int_eq(our_partials(none), 0);
    free(before);
    return partial;
}

START_TEST(an_unnamed_output_has_no_name_until_it_is_complete)
{
    begin();
    struct fs_out o;
    qp_err err = {{0}};
    ck_assert_msg(fs_out_open(&o, path_of("probe"), 0, &err) == 0, "%s", err.msg);
    bool unnamed = o.unnamed;
    fs_out_abort(&o);
    if (unnamed) {
        ck_assert_str_eq(write_out(0), "");
        write_text("out", "old");
        ck_assert_str_eq(write_out(0), "");
    }
    end();
}
END_TEST

START_TEST(a_named_output_gets_a_fresh_random_name_each_time)
{
    begin();
    char first[NAME_MAX + 1];
    snprintf(first, sizeof first, "%s", write_out(FS_OUT_NAMED));
    ck_assert(first[0]);
    const char *second = write_out(FS_OUT_NAMED);
    ck_assert(second[0]);
    ck_assert_str_ne(first, second);
    end();
}
END_TEST

/* The names qpack used to write to, ".out.partial-PID", as links to a file
 * that must not change; and a link at this process's own such name. */
START_TEST(planted_links_are_never_followed)
{
    begin();
    write_text("victim", "precious");
    char name[64];
    for (int pid = getpid() - 50; pid <= getpid() + 50; pid++) {
        snprintf(name, sizeof name, ".out.partial-%d", pid);
        ck_assert_int_eq(symlink(path_of("victim"), path_of(name)), 0);
    }
    write_out(FS_OUT_NAMED);
    write_out(0);
    ck_assert_str_eq(read_text("victim"), "precious");
    snprintf(name, sizeof name, ".out.partial-%d", (int)getpid());
    struct stat st;
    ck_assert_int_eq(lstat(path_of(name), &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    end();
}
END_TEST

START_TEST(abort_leaves_the_folder_as_it_was)
{
    begin();
    write_text("out", "old");
    for (unsigned flags = 0; flags <= FS_OUT_NAMED; flags += FS_OUT_NAMED) {
        struct fs_out o;
        qp_err err = {{0}};
        ck_assert_msg(fs_out_open(&o, path_of("out"), flags, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(fs_out_write(&o, "new", 3, &err), 0);
        fs_out_abort(&o);
        fs_out_abort(&o); /* twice is harmless */
        ck_assert_str_eq(listing(), "out");
        ck_assert_str_eq(read_text("out"), "old");
    }
    end();
}
END_TEST

START_TEST(a_destination_that_became_a_fifo_is_not_replaced)
{
    begin();
    for (unsigned flags = 0; flags <= FS_OUT_NAMED; flags += FS_OUT_NAMED) {
        struct fs_out o;
        qp_err err = {{0}};
        ck_assert_msg(fs_out_open(&o, path_of("out"), flags, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(mkfifo(path_of("out"), 0644), 0);
        ck_assert_int_eq(fs_out_commit(&o, &err), -1);
        ck_assert_error(err, "is now a fifo", path_of("out"));
        struct stat st;
        ck_assert_int_eq(lstat(path_of("out"), &st), 0);
        ck_assert(S_ISFIFO(st.st_mode));
        ck_assert_str_eq(listing(), "out");
        unlink(path_of("out"));
    }
    end();
}
END_TEST

static void on_term(int sig)
{
    fs_out_remove_temps();
    _exit(100 + sig);
}

/* What a signal handler that ends the process does for the named fallback. */
START_TEST(a_signal_handler_removes_named_partial_files)
{
    begin();
    write_text("out", "old");
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        struct fs_out a, b;
        qp_err err;
        if (fs_out_open(&a, path_of("out"), FS_OUT_NAMED, &err) ||
            fs_out_open(&b, path_of("out2"), FS_OUT_NAMED, &err) || fs_out_write(&a, "new", 3, &err))
            _exit(1);
        signal(SIGTERM, on_term);
        raise(SIGTERM);
        _exit(2);
    }
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 100 + SIGTERM);
    ck_assert_str_eq(listing(), "out");
    ck_assert_str_eq(read_text("out"), "old");
    end();
}
END_TEST

/* A process killed (SIGKILL) while writing a named partial file leaves it;
 * the next commit to the same destination removes it, and only it. */
START_TEST(stale_partials_of_dead_writers_go_with_the_next_commit)
{
    begin();
    pid_t dead = fork();
    ck_assert_int_ge(dead, 0);
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    char stale[64], live[64], other_dest[64], legacy[64];
    snprintf(stale, sizeof stale, ".out.partial-%d-0123456789abcdef", (int)dead);
    snprintf(live, sizeof live, ".out.partial-%d-0123456789abcdef", (int)getppid());
    snprintf(other_dest, sizeof other_dest, ".other.partial-%d-0123456789abcdef", (int)dead);
    snprintf(legacy, sizeof legacy, ".out.partial-%d", (int)dead); /* not a name fsafe makes */
    write_text(stale, "x");
    write_text(live, "x");
    write_text(other_dest, "x");
    write_text(legacy, "x");
    write_out(FS_OUT_NAMED);
    const char *kept[] = {live, other_dest, legacy};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(access(path_of(kept[i]), F_OK) == 0, "%s was removed", kept[i]);
    ck_assert_int_ne(access(path_of(stale), F_OK), 0);
    end();
}
END_TEST

START_TEST(write_file_publishes_exactly_the_bytes)
{
    begin();
    qp_err err = {{0}};
    static const char data[] = "bytes\0with a NUL";
    mode_t mask = umask(0);
    umask(mask);
    ck_assert_msg(fs_write_file(path_of("out"), data, sizeof data, NULL, &err) == 0, "%s", err.msg);
    struct stat st;
    ck_assert_int_eq(stat(path_of("out"), &st), 0);
    ck_assert_int_eq(st.st_size, sizeof data);
    ck_assert_int_eq(st.st_mode & 0777, 0644 & ~mask);
    ck_assert_str_eq(listing(), "out");
    const char *inputs[] = {path_of("out"), NULL};
    ck_assert_int_eq(fs_write_file(path_of("out"), "x", 1, inputs, &err), -1);
    ck_assert_error(err, "would overwrite its own input", path_of("out"));
    ck_assert_int_eq(stat(path_of("out"), &st), 0);
    ck_assert_int_eq(st.st_size, sizeof data);
    end();
}
END_TEST

static Suite *fsafe_suite(void)
{
    Suite *s = suite_create("fsafe");
    TCase *tc = tcase_create("inputs");
    tcase_add_test(tc, an_input_fifo_is_refused_at_once);
    tcase_add_test(tc, an_input_folder_or_device_is_refused);
    tcase_add_test(tc, an_input_file_is_opened_blocking_with_its_stat);
    suite_add_tcase(s, tc);
    tc = tcase_create("check");
    tcase_add_test(tc, a_destination_that_is_not_a_regular_file_is_refused);
    tcase_add_test(tc, a_destination_that_is_an_input_is_refused_by_inode);
    tcase_add_test(tc, a_destination_folder_must_exist_and_be_writable);
    suite_add_tcase(s, tc);
    tc = tcase_create("outputs");
    tcase_add_test(tc, an_unnamed_output_has_no_name_until_it_is_complete);
    tcase_add_test(tc, a_named_output_gets_a_fresh_random_name_each_time);
    tcase_add_test(tc, planted_links_are_never_followed);
    tcase_add_test(tc, abort_leaves_the_folder_as_it_was);
    tcase_add_test(tc, a_destination_that_became_a_fifo_is_not_replaced);
    tcase_add_test(tc, a_signal_handler_removes_named_partial_files);
    tcase_add_test(tc, stale_partials_of_dead_writers_go_with_the_next_commit);
    tcase_add_test(tc, write_file_publishes_exactly_the_bytes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(fsafe_suite());
}
