/* qp-bench-map-touch [GB] - a benchmark, not a test: what the first write
 * into fresh BPF array-map memory costs on this host, the floor under
 * qrun's "weight copy". It creates one array map of GB gigabytes (default
 * 2.4, the 0.6B q24 weights), writes it twice with BPF_MAP_UPDATE_BATCH on
 * two threads from a buffer already in memory, and prints the time of map
 * creation and of each pass. The second pass writes the same bytes to the
 * same memory: the difference between the two is the first touch alone. */
#include "clock.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VALUE_BYTES 16384   /* one 4-row block of a 1024-wide q24 matrix */
#define BATCH_KEYS 256      /* as qrun copies: 4 MiB per batch */
#define THREADS 2

struct fill {
    int fd;
    uint32_t n_keys;
    const uint8_t *src;     /* BATCH_KEYS values, reused for every batch */
    _Atomic uint32_t next;
    _Atomic int failed_errno;
};

static void *fill_batches(void *arg)
{
    struct fill *f = arg;
    uint32_t keys[BATCH_KEYS];
    for (;;) {
        uint32_t first = atomic_fetch_add(&f->next, BATCH_KEYS);
        if (first >= f->n_keys)
            return NULL;
        __u32 count = f->n_keys - first < BATCH_KEYS ? f->n_keys - first : BATCH_KEYS;
        for (uint32_t k = 0; k < count; k++)
            keys[k] = first + k;
        if (bpf_map_update_batch(f->fd, keys, f->src, &count, NULL))
            atomic_store(&f->failed_errno, errno);
    }
}

/* one pass over every key on THREADS threads; seconds, or -1 */
static double write_pass(struct fill *f)
{
    atomic_store(&f->next, 0);
    double t0 = qp_now_s();
    pthread_t helpers[THREADS - 1];
    int n = 0;
    while (n < THREADS - 1 && pthread_create(&helpers[n], NULL, fill_batches, f) == 0)
        n++;
    fill_batches(f);
    while (n > 0)
        pthread_join(helpers[--n], NULL);
    return atomic_load(&f->failed_errno) ? -1 : qp_now_s() - t0;
}

int main(int argc, char **argv)
{
    double gb = argc > 1 ? atof(argv[1]) : 2.4;
    if (argc > 2 || gb <= 0 || gb > 16) {
        fprintf(stderr, "usage: qp-bench-map-touch [GB]   (0 < GB <= 16, default 2.4)\n");
        return 2;
    }
    struct fill f = {.n_keys = (uint32_t)(gb * 1e9 / VALUE_BYTES)};
    uint8_t *src = malloc((size_t)BATCH_KEYS * VALUE_BYTES);
    if (!src)
        return fprintf(stderr, "qp-bench-map-touch: out of memory\n"), 1;
    memset(src, 0x5a, (size_t)BATCH_KEYS * VALUE_BYTES);
    f.src = src;
    double t0 = qp_now_s();
    f.fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "touch", 4, VALUE_BYTES, f.n_keys, NULL);
    if (f.fd < 0) {
        fprintf(stderr, "qp-bench-map-touch: creating a %.2f GB array map: %s\n", gb, strerror(errno));
        return 1;
    }
    double create = qp_now_s() - t0, first = write_pass(&f), second = write_pass(&f);
    if (first < 0 || second < 0) {
        fprintf(stderr, "qp-bench-map-touch: writing the map: %s\n", strerror(atomic_load(&f.failed_errno)));
        return 1;
    }
    double bytes = (double)f.n_keys * VALUE_BYTES / 1e9;
    printf("BPF array map of %.2f GB, %d threads: create %.0f ms, first write %.0f ms (%.2f s/GB), "
           "second write %.0f ms (%.2f s/GB)\n",
           bytes, THREADS, create * 1e3, first * 1e3, first / bytes, second * 1e3, second / bytes);
    free(src);
    return 0;
}
