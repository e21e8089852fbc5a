/* test_corruption QPACK QRUN QP_GEN TOKENIZER_DIR WORK_DIR
 *
 * Corruption sweep (tests/faults/faults.cmake): packs a tiny random checkpoint that
 * carries every section kind (config, tokenizer, tokenizer_config,
 * chat_template, provenance), then corrupts one byte at a time: every byte
 * of the header and of the directory (each XOR 0xFF, and the header also
 * XOR 0x01), and 64 evenly spaced bytes (all of them when smaller) of each
 * section and each tensor. Every byte there is covered by a checksum, so
 * every flip must be detected: for each corrupted copy `qpack verify COPY`
 * and `qrun -m COPY --ids "1 2" -n 2 --print-ids` must exit non-zero by
 * exit() (never by a signal, status < 128), print nothing on stdout and
 * exactly one line on stderr naming what is wrong. Two worker processes
 * each sweep half the offsets on their own copy (flip, run, restore).
 * Exit 0 all detected, 1 a failure, 77 skipped (no tokenizer).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_REPORTED 20

struct flip {
    uint64_t off;
    uint8_t mask;
    char what[96]; /* e.g. "header", "directory", "tensor model.norm.weight" */
};

static struct flip *flips;
static size_t n_flips, cap_flips;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL (corruption): ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void add_flip(uint64_t off, uint8_t mask, const char *what)
{
    if (n_flips == cap_flips) {
        cap_flips = cap_flips ? cap_flips * 2 : 1024;
        flips = realloc(flips, cap_flips * sizeof *flips);
        if (!flips)
            die("out of memory");
    }
    flips[n_flips].off = off;
    flips[n_flips].mask = mask;
    snprintf(flips[n_flips].what, sizeof flips[n_flips].what, "%s", what);
    n_flips++;
}

/* 64 evenly spaced offsets of [start, start + size), first and last included */
static void add_sample(uint64_t start, uint64_t size, const char *what)
{
    if (size <= 64) {
        for (uint64_t i = 0; i < size; i++)
            add_flip(start + i, 0xFF, what);
        return;
    }
    for (uint64_t i = 0; i < 64; i++)
        add_flip(start + i * (size - 1) / 63, 0xFF, what);
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* run ARGV with stdout/stderr into files; returns the wait status */
static int run(char *const argv[], const char *out, const char *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        die("cannot run %s: %s", argv[0], strerror(rc));
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            die("waitpid: %s", strerror(errno));
    return st;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open %s", path);
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap)
            b = realloc(b, (cap *= 2) + 1);
    }
    fclose(f);
    if (!b)
        die("out of memory");
    b[n] = 0;
    *len = n;
    return b;
}

static const char *const keywords[] = {"checksum", "header", "directory", "section", "tensor",
                                       "magic",    "version", "corrupt",  "truncat", NULL};

/* checks one run's outcome; returns NULL when good, else a description */
static const char *judge(int st, const char *out, const char *err, char *why, size_t whylen)
{
    size_t olen, elen;
    if (WIFSIGNALED(st)) {
        snprintf(why, whylen, "killed by signal %d", WTERMSIG(st));
        return why;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) == 0 || WEXITSTATUS(st) >= 128) {
        snprintf(why, whylen, "exit status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return why;
    }
    char *o = slurp(out, &olen);
    char *e = slurp(err, &elen);
    const char *res = NULL;
    if (olen) {
        snprintf(why, whylen, "stdout not empty: %.80s", o);
        res = why;
    } else if (elen == 0 || e[elen - 1] != '\n' || memchr(e, '\n', elen) != e + elen - 1) {
        snprintf(why, whylen, "stderr is not one line: %.200s", e);
        res = why;
    } else {
        int hit = 0;
        for (int k = 0; keywords[k] && !hit; k++)
            hit = strcasestr(e, keywords[k]) != NULL;
        if (!hit) {
            snprintf(why, whylen, "message names no damaged part: %.200s", e);
            res = why;
        }
    }
    free(o);
    free(e);
    return res;
}

/* sweeps flips[i] for i = worker mod 2 on its own copy; returns failures */
static int sweep(int worker, int nworkers, const char *qpack, const char *qrun, const char *orig,
                 const char *work, int root)
{
    char copy[4096], out[4096], err[4096];
    snprintf(copy, sizeof copy, "%s/copy%d.qpk", work, worker);
    snprintf(out, sizeof out, "%s/w%d.out", work, worker);
    snprintf(err, sizeof err, "%s/w%d.err", work, worker);
    size_t len;
    char *data = slurp(orig, &len);
    int fd = open(copy, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, data, len) != (ssize_t)len)
        die("cannot write %s", copy);
    char *vargv[] = {(char *)qpack, "verify", copy, NULL};
    char *rargv[] = {(char *)qrun,    "-m",   copy,           "--ids", "1 2", "-n", "2",
                     "--print-ids",   root ? NULL : "--backend", "emu", NULL};
    int failures = 0;
    char why[512];
    for (size_t i = worker; i < n_flips; i += nworkers) {
        const struct flip *f = &flips[i];
        uint8_t b = (uint8_t)data[f->off] ^ f->mask;
        if (pwrite(fd, &b, 1, (off_t)f->off) != 1)
            die("pwrite %s: %s", copy, strerror(errno));
        for (int t = 0; t < 2; t++) {
            int st = run(t == 0 ? vargv : rargv, out, err);
            if (judge(st, out, err, why, sizeof why)) {
                if (failures < MAX_REPORTED)
                    fprintf(stderr, "FAIL (corruption): %s: byte %llu (%s) ^ 0x%02x: %s\n",
                            t == 0 ? "qpack verify" : "qrun", (unsigned long long)f->off, f->what,
                            f->mask, why);
                failures++;
            }
        }
        b = (uint8_t)data[f->off];
        if (pwrite(fd, &b, 1, (off_t)f->off) != 1)
            die("pwrite %s: %s", copy, strerror(errno));
    }
    close(fd);
    free(data);
    unlink(copy);
    unlink(out);
    unlink(err);
    return failures;
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: test_corruption QPACK QRUN QP_GEN TOKENIZER_DIR WORK_DIR [PACK_FLAGS]\n");
        return 2;
    }
    const char *qpack = argv[1], *qrun = argv[2], *gen = argv[3], *tokdir = argv[4], *work = argv[5];
    const char *pack_flags = argc == 7 ? argv[6] : "";
    char path[4096], ckpt[4096], model[4096], cmd[16384];
    snprintf(path, sizeof path, "%s/tokenizer.json", tokdir);
    if (access(path, R_OK) != 0) {
        printf("SKIP (corruption): no %s (scripts/fetch_tokenizer.sh)\n", path);
        return 77;
    }
    int root = geteuid() == 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    /* one layer keeps the directory small: 5 sections + 13 tensors */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", work, work);
    if (system(cmd) != 0)
        die("cannot create %s", work);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", work);
    snprintf(model, sizeof model, "%s/M.qpk", work);
    snprintf(cmd, sizeof cmd,
             "'%s' '%s' --preset tiny --layers 1 --vocab 2048 --seed 5 --tokenizer-dir '%s' >/dev/null && "
             "'%s' pack '%s' -o '%s' --quiet %s",
             gen, ckpt, tokdir, qpack, ckpt, model, pack_flags);
    if (system(cmd) != 0)
        die("generating or packing the checkpoint failed: %s", cmd);

    size_t len;
    uint8_t *m = (uint8_t *)slurp(model, &len);
    if (len < 128 || memcmp(m, "QPACK\r\n\x1a", 8) != 0)
        die("%s is not a container", model);
    uint64_t dir_off = le(m + 24, 8), dir_size = le(m + 32, 8);
    uint32_t n_sec = (uint32_t)le(m + 40, 4), n_ten = (uint32_t)le(m + 44, 4);
    if (dir_size != (uint64_t)n_sec * 64 + (uint64_t)n_ten * 128 || dir_off + dir_size > len)
        die("unexpected directory in %s", model);

    for (uint64_t i = 0; i < 128; i++)
        add_flip(i, 0xFF, "header");
    for (uint64_t i = 0; i < 128; i++)
        add_flip(i, 0x01, "header");
    for (uint64_t i = 0; i < dir_size; i++)
        add_flip(dir_off + i, 0xFF, "directory");
    char what[96];
    for (uint32_t s = 0; s < n_sec; s++) {
        const uint8_t *e = m + dir_off + (uint64_t)s * 64;
        uint64_t off = le(e + 8, 8), size = le(e + 16, 8);
        if (off + size > len)
            die("section %u outside the file", s);
        snprintf(what, sizeof what, "section kind %u", (unsigned)le(e, 4));
        add_sample(off, size, what);
    }
    for (uint32_t t = 0; t < n_ten; t++) {
        const uint8_t *e = m + dir_off + (uint64_t)n_sec * 64 + (uint64_t)t * 128;
        uint64_t off = le(e + 96, 8), size = le(e + 104, 8);
        if (off + size > len)
            die("tensor %u outside the file", t);
        snprintf(what, sizeof what, "tensor %.64s", (const char *)e);
        add_sample(off, size, what);
    }
    free(m);

    /* the pristine container passes both commands */
    char out[4096], err[4096];
    snprintf(out, sizeof out, "%s/orig.out", work);
    snprintf(err, sizeof err, "%s/orig.err", work);
    char *vargv[] = {(char *)qpack, "verify", model, NULL};
    char *rargv[] = {(char *)qrun, "-m", model, "--ids", "1 2", "-n", "2", "--print-ids",
                     root ? NULL : "--backend", "emu", NULL};
    int st = run(vargv, out, err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("qpack verify of the intact container failed");
    st = run(rargv, out, err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("qrun on the intact container failed");
    unlink(out);
    unlink(err);

    enum { NW = 2 };
    pid_t pids[NW];
    for (int w = 0; w < NW; w++) {
        pids[w] = fork();
        if (pids[w] < 0)
            die("fork: %s", strerror(errno));
        if (pids[w] == 0) {
            int f = sweep(w, NW, qpack, qrun, model, work, root);
            _exit(f > 100 ? 100 : f);
        }
    }
    int failures = 0;
    for (int w = 0; w < NW; w++) {
        if (waitpid(pids[w], &st, 0) < 0 || !WIFEXITED(st))
            die("worker %d died", w);
        failures += WEXITSTATUS(st);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (failures) {
        fprintf(stderr, "FAIL (corruption): %d of %zu runs (%zu flips x 2 commands) not detected cleanly\n",
                failures, n_flips * 2, n_flips);
        return 1;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", work);
    printf("ok: %zu corrupted copies (header %d, directory %llu, %u sections and %u tensors sampled), "
           "each refused cleanly by qpack verify and qrun, %.1f s\n",
           n_flips, 256, (unsigned long long)dir_size, n_sec, n_ten, secs);
    return 0;
}
