/* quant_jobs.c - every core over the blocks of a matrix, a chunk at a time,
 * and the error bookkeeping, for the int8 and int4 packers. */
#include "quant_jobs.h"

#include "qpk.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(QPK_SCALE_EXP_MIN == QNT_E_MIN && QPK_SCALE_EXP_MAX == QNT_E_MAX,
               "the reader accepts every exponent the quantiser picks, and no other");
_Static_assert(QPK_GROUP_MAX == QNT_MAX_GROUP, "group sizes the quantiser handles");

#define MAX_THREADS 64

/* Source bytes quantised between two writes: the chunk's source and output
 * stay a few MB resident, and starting the threads and writing are a small
 * part of the chunk's time (~50 ms of searching on two cores). */
#define CHUNK_SOURCE_BYTES (4u << 20)

unsigned quant_threads(void)
{
    const char *env = getenv("QPACK_THREADS");
    char *end;
    long n = env ? strtol(env, &end, 10) : 0;
    if (!env || end == env || *end || n < 1 || n > MAX_THREADS)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (unsigned)n;
}

/* A piece at a time, each let go once read, so the tensor never becomes
 * resident whole. */
int quant_tensor_exponent(const struct st_model *model, const struct st_tensor *src)
{
    /* whole rows, so a block type's pieces start on its blocks */
    uint64_t row = src->ndim ? src->shape[src->ndim - 1] : 1;
    uint64_t piece = CHUNK_SOURCE_BYTES / (st_bytes(src->dtype, row) ? st_bytes(src->dtype, row) : 1) * row;
    piece = piece ? piece : row;
    double max_abs = 0;
    for (uint64_t at = 0; at < src->numel; at += piece) {
        uint64_t n = src->numel - at < piece ? src->numel - at : piece;
        max_abs = fmax(max_abs, st_max_abs(src, at, n));
        st_release_part(model, src, at, n);
    }
    return qnt_tensor_exponent(max_abs);
}

/* where a block met a value it cannot quantise */
struct bad_value {
    bool found;
    uint32_t row, col;
    float value;
};

/* a chunk of blocks, taken one by one by the threads */
struct chunk {
    const struct quant_matrix *m;
    quant_row_fn fill;
    uint32_t first_block, n_blocks;
    uint64_t block_bytes;
    uint8_t *out;                 /* n_blocks blocks */
    qnt_damage *dmg;              /* per block */
    struct bad_value *bad;        /* per block */
    atomic_uint next;             /* the next block to take */
};

/* a thread's own rows: the source as floats, and the fill's scratch */
struct worker {
    struct chunk *c;
    float *x;
    uint8_t *scratch;
};

static void quantise_block(struct chunk *c, uint32_t b, const struct worker *wk)
{
    const struct quant_matrix *m = c->m;
    uint8_t *block = c->out + b * c->block_bytes;
    memset(block, 0, c->block_bytes);
    c->dmg[b] = (qnt_damage){0};
    c->bad[b].found = false;
    for (uint32_t k = 0; k < QUANT_BLOCK_ROWS; k++) {
        uint32_t r = (c->first_block + b) * QUANT_BLOCK_ROWS + k;
        st_read_f32(m->src, (uint64_t)r * m->cols, m->cols, wk->x);
        for (uint32_t j = 0; j < m->cols; j++)
            if (!isfinite(wk->x[j])) {
                c->bad[b] = (struct bad_value){true, r, j, wk->x[j]};
                return;
            }
        c->fill(m, wk->x, k, block, wk->scratch, &c->dmg[b]);
    }
}

static void *worker_run(void *arg)
{
    struct worker *wk = arg;
    for (;;) {
        unsigned b = atomic_fetch_add(&wk->c->next, 1);
        if (b >= wk->c->n_blocks)
            return NULL;
        quantise_block(wk->c, b, wk);
    }
}

/* The chunk on n threads: this one and up to n - 1 more (fewer when they
 * cannot be started; the blocks are shared out as they are taken). */
static void run_chunk(struct chunk *c, struct worker *workers, unsigned n)
{
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    atomic_store(&c->next, 0);
    for (unsigned i = 1; i < n; i++) {
        workers[i].c = c;
        started[i] = pthread_create(&th[i], NULL, worker_run, &workers[i]) == 0;
    }
    workers[0].c = c;
    worker_run(&workers[0]);
    for (unsigned i = 1; i < n; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

/* the chunk's damage, block by block in order, or its first bad value */
static int finish_chunk(const struct chunk *c, qnt_damage *dmg, qp_err *err)
{
    const struct quant_matrix *m = c->m;
    for (uint32_t b = 0; b < c->n_blocks; b++) {
        const struct bad_value *v = &c->bad[b];
        if (v->found)
            return qp_fail(err, "tensor %s[%u, %u] = %g does not fit %s (not finite)", m->src->name, v->row, v->col,
                           (double)v->value, m->format);
        dmg->sum_sq += c->dmg[b].sum_sq;
        dmg->max_err = fmax(dmg->max_err, c->dmg[b].max_err);
        dmg->max_abs = fmax(dmg->max_abs, c->dmg[b].max_abs);
    }
    return 0;
}

static void free_workers(struct worker *workers, unsigned n)
{
    for (unsigned i = 0; workers && i < n; i++) {
        free(workers[i].x);
        free(workers[i].scratch);
    }
    free(workers);
}

static struct worker *alloc_workers(unsigned n, uint32_t cols)
{
    struct worker *workers = calloc(n, sizeof *workers);
    for (unsigned i = 0; workers && i < n; i++) {
        workers[i].x = malloc(sizeof(float) * cols);
        workers[i].scratch = malloc(QUANT_SCRATCH_BYTES(cols));
        if (!workers[i].x || !workers[i].scratch) {
            free_workers(workers, n);
            return NULL;
        }
    }
    return workers;
}

int quant_write_matrix(struct qpk_writer *w, const struct quant_matrix *m, uint64_t block_bytes,
                       quant_row_fn fill, const struct quant_progress *progress, qnt_damage *dmg, qp_err *err)
{
    uint32_t blocks = m->rows / QUANT_BLOCK_ROWS;
    uint64_t block_elems = (uint64_t)m->cols * QUANT_BLOCK_ROWS;
    uint64_t src_block_bytes = st_bytes(m->src->dtype, block_elems);
    uint32_t per_chunk = (uint32_t)(CHUNK_SOURCE_BYTES / src_block_bytes);
    per_chunk = per_chunk < 1 ? 1 : per_chunk > blocks ? (blocks ? blocks : 1) : per_chunk;
    unsigned threads = quant_threads();
    threads = threads > per_chunk ? per_chunk : threads;
    struct chunk c = {.m = m, .fill = fill, .block_bytes = block_bytes};
    c.out = malloc(block_bytes * per_chunk);
    c.dmg = malloc(sizeof *c.dmg * per_chunk);
    c.bad = malloc(sizeof *c.bad * per_chunk);
    struct worker *workers = alloc_workers(threads, m->cols);
    int rc = c.out && c.dmg && c.bad && workers ? 0 : qp_fail(err, "out of memory for %s", m->src->name);
    for (uint32_t first = 0; !rc && first < blocks; first += per_chunk) {
        c.first_block = first;
        c.n_blocks = blocks - first < per_chunk ? blocks - first : per_chunk;
        run_chunk(&c, workers, threads);
        rc = finish_chunk(&c, dmg, err);
        if (!rc)
            rc = qpk_writer_write(w, c.out, block_bytes * c.n_blocks, err);
        /* this chunk's source is done with: let its pages go */
        st_release_part(m->model, m->src, first * block_elems, c.n_blocks * block_elems);
        if (!rc && progress && progress->fn)
            progress->fn(progress->ctx, block_bytes * (first + c.n_blocks));
    }
    free_workers(workers, threads);
    free(c.out);
    free(c.dmg);
    free(c.bad);
    return rc;
}
