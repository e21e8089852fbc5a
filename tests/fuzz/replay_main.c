/* replay_main.c - runs a fuzz target's LLVMFuzzerTestOneInput over files,
 * without libFuzzer: the ctest replay of the seed corpus and of every
 * regression input (tests/fuzz/replay.cmake), under whatever sanitizers the build
 * uses.
 *
 * usage: <target>-replay PATH...   (a directory: every regular file in it,
 * in name order, skipping names starting with '.' and README files)
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read failed\n", path);
        free(buf);
        return -1;
    }
    /* An exact-size copy, so overreads past the input are caught. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip(const struct dirent *e)
{
    return e->d_name[0] != '.' && strncmp(e->d_name, "README", 6) != 0;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    unsigned n = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            failed++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed += run_file(argv[i]) != 0;
            n++;
            continue;
        }
        struct dirent **list;
        int k = scandir(argv[i], &list, skip, by_name);
        if (k < 0) {
            perror(argv[i]);
            failed++;
            continue;
        }
        for (int j = 0; j < k; j++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], list[j]->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                failed += run_file(path) != 0;
                n++;
            }
            free(list[j]);
        }
        free(list);
    }
    printf("replayed %u inputs, %u unreadable\n", n, failed);
    return failed ? 1 : 0;
}
