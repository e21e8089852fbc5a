/* fsafe.c - files opened and written safely (see fsafe.h).
 *
 * Reading order: inputs -> the destination check -> the list of named
 * partial files a signal handler removes -> creating, publishing and
 * removing an output. */
#include "fsafe.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ------------------------------------------------------------------ inputs */

static const char *kind_of(mode_t mode)
{
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a fifo" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : S_ISLNK(mode) ? "a symbolic link"
         : "not a file";
}

int fs_open_input(const char *path, struct stat *st_out, qp_err *err)
{
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return qp_fail_code(err, QP_E_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    int flags;
    if (fstat(fd, &st) != 0 || (S_ISREG(st.st_mode) && ((flags = fcntl(fd, F_GETFL)) < 0 ||
                                                        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0))) {
        int e = errno;
        close(fd);
        return qp_fail_code(err, QP_E_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return qp_fail_code(err, QP_E_IO, "%s: not a regular file (%s)", path, kind_of(st.st_mode));
    }
    if (st_out)
        *st_out = st;
    return fd;
}

int fs_read_input(const char *path, size_t limit, char **text, size_t *len, qp_err *err)
{
    struct stat st;
    *text = NULL;
    *len = 0;
    int fd = fs_open_input(path, &st, err);
    if (fd < 0)
        return -1;
    if ((uint64_t)st.st_size > limit) {
        close(fd);
        return qp_fail(err, "%s: %lld bytes, more than the limit of %zu", path, (long long)st.st_size, limit);
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *buf = malloc(size + 1);
    ssize_t r = 0;
    while (buf && got < size) {
        r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    int read_errno = errno;
    close(fd);
    if (!buf)
        return qp_fail(err, "%s: out of memory for %zu bytes", path, size);
    if (got != size) {
        free(buf);
        return qp_fail(err, "%s: read failed after %zu of %zu bytes: %s", path, got, size,
                       r < 0 ? strerror(read_errno) : "the file shrank");
    }
    buf[size] = 0;
    *text = buf;
    *len = size;
    return 0;
}

/* ---------------------------------------------------- the destination check */

/* dest's folder ("." when it has none) and its name in it. */
static int split_dest(const char *dest, char **dir, char **base, qp_err *err)
{
    const char *slash = strrchr(dest, '/');
    const char *name = slash ? slash + 1 : dest;
    *dir = *base = NULL;
    if (!*name)
        return qp_fail(err, "%s: names a folder, not a file", dest);
    *dir = slash ? strndup(dest, slash == dest ? 1 : (size_t)(slash - dest)) : strdup(".");
    *base = strdup(name);
    if (!*dir || !*base) {
        free(*dir);
        free(*base);
        *dir = *base = NULL;
        return qp_fail(err, "%s: out of memory", dest);
    }
    return 0;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* An input folder stands for every file directly inside it. */
static int check_folder_input(const char *dest, const struct stat *out, const char *folder, qp_err *err)
{
    DIR *d = opendir(folder);
    if (!d)
        return 0; /* an unreadable input is its reader's error */
    struct dirent *e;
    struct stat st;
    int rc = 0;
    while (!rc && (e = readdir(d)))
        if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode) && same_file(&st, out))
            rc = qp_fail(err, "%s: is the input %s/%s; writing there would overwrite its own input", dest,
                         folder, e->d_name);
    closedir(d);
    return rc;
}

static int check_not_input(const char *dest, const struct stat *out, const char *const *inputs, qp_err *err)
{
    struct stat st;
    for (size_t i = 0; inputs && inputs[i]; i++) {
        if (stat(inputs[i], &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && check_folder_input(dest, out, inputs[i], err))
            return -1;
        if (same_file(&st, out))
            return qp_fail(err, "%s: is the input %s; writing there would overwrite its own input", dest,
                           inputs[i]);
    }
    return 0;
}

int fs_out_check(const char *dest, const char *const *inputs, qp_err *err)
{
    char *dir, *base;
    if (split_dest(dest, &dir, &base, err))
        return -1;
    struct stat st;
    int rc = 0;
    if (lstat(dest, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            rc = qp_fail(err, "%s: is a directory, not a file", dest);
        else if (!S_ISREG(st.st_mode))
            rc = qp_fail(err, "%s: exists and is not a regular file (%s); refusing to replace it", dest,
                         kind_of(st.st_mode));
        else
            rc = check_not_input(dest, &st, inputs, err);
    } else if (errno != ENOENT) {
        rc = qp_fail(err, "%s: %s", dest, strerror(errno));
    }
    if (!rc && stat(dir, &st) != 0)
        rc = qp_fail(err, "%s: cannot write into %s: %s", dest, dir, strerror(errno));
    else if (!rc && !S_ISDIR(st.st_mode))
        rc = qp_fail(err, "%s: cannot write into %s: %s", dest, dir, strerror(ENOTDIR));
    else if (!rc && access(dir, W_OK | X_OK) != 0)
        rc = qp_fail(err, "%s: cannot write into %s: %s", dest, dir, strerror(errno));
    free(dir);
    free(base);
    return rc;
}

/* -------------------------------------------------- named partial files */

/* ".partial-", a PID of up to 10 digits, "-", 16 hex digits and the
 * leading "." around the destination's name, which is cut to fit. */
#define PARTIAL_EXTRA (1 + 9 + 10 + 1 + 16)
#define MAX_OPEN_OUTPUTS 8

/* The named partial files of open outputs, for fs_out_remove_temps. A slot
 * is FREE, CLAIMED (being filled; the handler skips it) or ACTIVE. */
enum { SLOT_FREE, SLOT_CLAIMED, SLOT_ACTIVE };
static struct partial_slot {
    volatile sig_atomic_t state;
    int dir_fd;
    char name[NAME_MAX + 1];
} partials[MAX_OPEN_OUTPUTS];

void fs_out_remove_temps(void)
{
    for (int i = 0; i < MAX_OPEN_OUTPUTS; i++)
        if (__atomic_load_n(&partials[i].state, __ATOMIC_ACQUIRE) == SLOT_ACTIVE)
            unlinkat(partials[i].dir_fd, partials[i].name, 0);
}

static void partial_prefix(const char *base, char *out, size_t cap)
{
    snprintf(out, cap, ".%.*s.partial-", (int)(NAME_MAX - PARTIAL_EXTRA), base);
}

void fs_out_partial_prefix(const char *dest, char *out, size_t cap)
{
    const char *slash = strrchr(dest, '/');
    partial_prefix(slash ? slash + 1 : dest, out, cap);
}

/* 1 when name is prefix, a PID, "-" and 16 lowercase hex digits. */
static bool partial_pid(const char *name, const char *prefix, long *pid)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0)
        return false;
    char *end;
    errno = 0;
    *pid = strtol(name + n, &end, 10);
    if (end == name + n || errno || *pid <= 0 || *end != '-' || strlen(end + 1) != 16)
        return false;
    return strspn(end + 1, "0123456789abcdef") == 16;
}

static int random_u64(uint64_t *v)
{
    for (;;) {
        ssize_t n = getrandom(v, sizeof *v, 0);
        if (n == (ssize_t)sizeof *v)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* Takes a free slot and gives it a fresh random name; it is ACTIVE (the
 * handler removes it) from now on, before the file exists, so no moment
 * leaves a named file the handler does not know. */
static int claim_partial(struct fs_out *o, qp_err *err)
{
    uint64_t r;
    if (random_u64(&r))
        return qp_fail(err, "%s: getrandom: %s", o->dest, strerror(errno));
    for (int i = 0; i < MAX_OPEN_OUTPUTS; i++) {
        sig_atomic_t expect = SLOT_FREE;
        if (!__atomic_compare_exchange_n(&partials[i].state, &expect, SLOT_CLAIMED, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        snprintf(partials[i].name, sizeof partials[i].name, ".%.*s.partial-%d-%016" PRIx64,
                 (int)(NAME_MAX - PARTIAL_EXTRA), o->base, (int)getpid(), r);
        partials[i].dir_fd = o->dir_fd;
        __atomic_store_n(&partials[i].state, SLOT_ACTIVE, __ATOMIC_RELEASE);
        o->slot = i;
        return 0;
    }
    return qp_fail(err, "%s: more than %d outputs open at once", o->dest, MAX_OPEN_OUTPUTS);
}

static void release_partial(struct fs_out *o)
{
    if (o->slot >= 0)
        __atomic_store_n(&partials[o->slot].state, SLOT_FREE, __ATOMIC_RELEASE);
    o->slot = -1;
}

static const char *partial_name(const struct fs_out *o)
{
    return partials[o->slot].name;
}

/* Removes the named partial files of this destination whose writer
 * process is gone (killed before it could clean up). */
static void remove_stale_partials(const struct fs_out *o)
{
    char prefix[NAME_MAX + 1];
    partial_prefix(o->base, prefix, sizeof prefix);
    int fd = openat(o->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    long pid;
    while ((e = readdir(d)))
        if (partial_pid(e->d_name, prefix, &pid) && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 &&
            errno == ESRCH)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

/* ----------------------------------------------------------------- outputs */

static bool tmpfile_refused(int e)
{
    /* EISDIR: a kernel without O_TMPFILE sees only O_DIRECTORY */
    return e == EOPNOTSUPP || e == EISDIR || e == EINVAL;
}

static int create_named(struct fs_out *o, qp_err *err)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        if (claim_partial(o, err))
            return -1;
        o->fd = openat(o->dir_fd, partial_name(o), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (o->fd >= 0)
            return 0;
        int e = errno;
        release_partial(o);
        if (e != EEXIST)
            return qp_fail(err, "%s: cannot create a file in its folder: %s", o->dest, strerror(e));
    }
    return qp_fail(err, "%s: no free name for a partial file in its folder", o->dest);
}

int fs_out_open(struct fs_out *o, const char *dest, unsigned flags, qp_err *err)
{
    *o = (struct fs_out){.dir_fd = -1, .fd = -1, .slot = -1};
    char *dir = NULL;
    int rc = fs_out_check(dest, NULL, err) || split_dest(dest, &dir, &o->base, err) ? -1 : 0;
    if (!rc && !(o->dest = strdup(dest)))
        rc = qp_fail(err, "%s: out of memory", dest);
    if (!rc && (o->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        rc = qp_fail(err, "%s: cannot open its folder %s: %s", dest, dir, strerror(errno));
    if (!rc && !(flags & FS_OUT_NAMED)) {
        o->fd = openat(o->dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
        o->unnamed = o->fd >= 0;
        if (o->fd < 0 && !tmpfile_refused(errno))
            rc = qp_fail(err, "%s: cannot create a file in %s: %s", dest, dir, strerror(errno));
    }
    if (!rc && o->fd < 0)
        rc = create_named(o, err);
    free(dir);
    if (rc)
        fs_out_abort(o);
    return rc;
}

int fs_out_write(struct fs_out *o, const void *data, size_t len, qp_err *err)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(o->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return qp_fail(err, "%s: write: %s", o->dest, n < 0 ? strerror(errno) : "no progress");
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Gives the unnamed file a random partial name: linkat(AT_EMPTY_PATH) needs
 * CAP_DAC_READ_SEARCH, the /proc/self/fd link does not. */
static int link_unnamed(struct fs_out *o, qp_err *err)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
    for (int attempt = 0; attempt < 16; attempt++) {
        if (claim_partial(o, err))
            return -1;
        int rc = linkat(o->fd, "", o->dir_fd, partial_name(o), AT_EMPTY_PATH);
        if (rc != 0 && (errno == ENOENT || errno == EPERM))
            rc = linkat(AT_FDCWD, proc, o->dir_fd, partial_name(o), AT_SYMLINK_FOLLOW);
        if (rc == 0)
            return 0;
        int e = errno;
        release_partial(o);
        if (e != EEXIST)
            return qp_fail(err, "%s: cannot link the written file into its folder: %s", o->dest, strerror(e));
    }
    return qp_fail(err, "%s: no free name for a partial file in its folder", o->dest);
}

/* The destination may have changed since the check: never replace a
 * directory, FIFO, device or link that appeared there. */
static int still_replaceable(const struct fs_out *o, qp_err *err)
{
    struct stat st;
    if (fstatat(o->dir_fd, o->base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
        return qp_fail(err, "%s: is now %s; refusing to replace it", o->dest, kind_of(st.st_mode));
    return 0;
}

int fs_out_commit(struct fs_out *o, qp_err *err)
{
    int rc = 0;
    if (fsync(o->fd) != 0)
        rc = qp_fail(err, "%s: fsync: %s", o->dest, strerror(errno));
    if (!rc && o->unnamed)
        rc = link_unnamed(o, err);
    if (!rc) {
        int closed = close(o->fd);
        o->fd = -1;
        if (closed != 0)
            rc = qp_fail(err, "%s: close: %s", o->dest, strerror(errno));
    }
    if (!rc)
        rc = still_replaceable(o, err);
    if (!rc && renameat(o->dir_fd, partial_name(o), o->dir_fd, o->base) != 0)
        rc = qp_fail(err, "%s: rename: %s", o->dest, strerror(errno));
    if (rc) {
        fs_out_abort(o);
        return -1;
    }
    release_partial(o); /* renamed: nothing left to remove */
    fsync(o->dir_fd);
    remove_stale_partials(o);
    fs_out_abort(o);    /* closes the folder */
    return 0;
}

void fs_out_abort(struct fs_out *o)
{
    if (o->fd >= 0)
        close(o->fd);
    if (o->slot >= 0)
        unlinkat(o->dir_fd, partial_name(o), 0);
    release_partial(o);
    if (o->dir_fd >= 0)
        close(o->dir_fd);
    free(o->dest);
    free(o->base);
    *o = (struct fs_out){.dir_fd = -1, .fd = -1, .slot = -1};
}

int fs_write_file(const char *dest, const void *data, size_t len, const char *const *inputs, qp_err *err)
{
    struct fs_out o;
    if (fs_out_check(dest, inputs, err) || fs_out_open(&o, dest, 0, err))
        return -1;
    if (fs_out_write(&o, data, len, err)) {
        fs_out_abort(&o);
        return -1;
    }
    return fs_out_commit(&o, err);
}
