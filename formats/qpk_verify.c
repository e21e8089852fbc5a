/* qpk_verify.c - the checksums of a .qpk's sections and tensors. Tensors
 * of a file are read (qpk_read) through a small buffer rather than through
 * its mapping: the check then leaves nothing of the model in the process's
 * memory and takes no page faults (on a VM with shadow page tables they
 * cost more than the reads). A whole model is checked on two
 * threads: XXH3 runs at memory speed, so one core leaves half the time on
 * the table. */
#include "qpk.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define VERIFY_THREADS 2
#define VERIFY_PARALLEL_BYTES (64u << 20)   /* below this a thread costs more than it saves */
#define VERIFY_CHUNK (4u << 20)             /* read and hashed while it sits in cache */

int qpk_verify_section(const struct qpk_file *f, const struct qpk_section *s, qp_err *err)
{
    if (XXH3_64bits(f->map + s->offset, s->stored_size) != s->xxh3)
        return qp_fail(err, "%s: section %s: checksum mismatch (data corrupted)", f->path,
                       qpk_section_name(s->kind));
    return 0;
}

/* Bytes of whole row blocks of t read at once: about VERIFY_CHUNK, at
 * least one block. */
static uint64_t chunk_bytes(const struct qpk_tensor *t)
{
    uint64_t blocks = VERIFY_CHUNK / t->row_stride;
    return (blocks ? blocks : 1) * t->row_stride;
}

/* One tensor's checksum and value ranges: read through buf (at least
 * chunk_bytes(t)) and st from a file, hashed and checked where it lies for
 * a container already in memory. A corrupted tensor is named by its
 * checksum; a value out of range in one whose checksum holds is a forgery
 * (or a packer's bug) and named by the value. */
static int verify_tensor_with(const struct qpk_file *f, const struct qpk_tensor *t, uint8_t *buf,
                              XXH3_state_t *st, qp_err *err)
{
    uint64_t h;
    qp_err values;
    int values_rc = 0;
    if (!f->owns_map) {
        h = XXH3_64bits(f->map + t->offset, t->nbytes);
        values_rc = qpk_check_values(f->path, t, 0, f->map + t->offset, t->nbytes / t->row_stride, &values);
    } else {
        XXH3_64bits_reset(st);
        uint64_t chunk = chunk_bytes(t);
        for (uint64_t at = 0; at < t->nbytes;) {
            size_t n = t->nbytes - at < chunk ? (size_t)(t->nbytes - at) : (size_t)chunk;
            if (qpk_read(f, t->offset + at, buf, n))
                return qp_fail(err, "%s: tensor %s: %s", f->path, t->name,
                               errno == EFAULT ? "the file ends early (truncated while being read?)"
                                               : strerror(errno));
            XXH3_64bits_update(st, buf, n);
            if (!values_rc)
                values_rc = qpk_check_values(f->path, t, at / t->row_stride, buf, n / t->row_stride, &values);
            at += n;
        }
        h = XXH3_64bits_digest(st);
    }
    if (h != t->xxh3)
        return qp_fail(err, "%s: tensor %s: checksum mismatch (data corrupted)", f->path, t->name);
    if (values_rc)
        *err = values;
    return values_rc;
}

/* a read buffer and a hash state for one thread (none for a container in
 * memory) */
struct reader {
    uint8_t *buf;
    XXH3_state_t *st;
};

static int reader_open(struct reader *r, const struct qpk_file *f)
{
    uint64_t size = VERIFY_CHUNK;
    for (uint32_t i = 0; i < f->n_tensors; i++)
        size = f->tensors[i].row_stride > size ? f->tensors[i].row_stride : size;
    r->buf = f->owns_map ? malloc(size) : NULL;
    r->st = f->owns_map ? XXH3_createState() : NULL;
    return f->owns_map && (!r->buf || !r->st) ? -1 : 0;
}

static void reader_close(struct reader *r)
{
    free(r->buf);
    XXH3_freeState(r->st);
}

int qpk_verify_tensor(const struct qpk_file *f, const struct qpk_tensor *t, qp_err *err)
{
    struct reader r;
    int rc = reader_open(&r, f) ? qp_fail(err, "%s: out of memory", f->path)
                                : verify_tensor_with(f, t, r.buf, r.st, err);
    reader_close(&r);
    return rc;
}

/* the tensors, taken in turn by every thread; the first bad one in
 * directory order is the one reported, however the threads interleave */
struct tensor_check {
    const struct qpk_file *f;
    _Atomic uint32_t next;
    _Atomic uint32_t first_bad;     /* n_tensors while none is */
    _Atomic uint64_t done;          /* bytes checked so far */
    uint64_t total;
    qpk_progress_fn progress;       /* called by the calling thread only */
    void *user;
};

struct checker {
    struct tensor_check *c;
    bool reports;                   /* the calling thread: reports progress */
};

static void mark_bad(struct tensor_check *c, uint32_t i)
{
    uint32_t bad = atomic_load(&c->first_bad);
    while (i < bad && !atomic_compare_exchange_weak(&c->first_bad, &bad, i))
        ;
}

static void *check_tensors(void *arg)
{
    const struct checker *who = arg;
    struct tensor_check *c = who->c;
    struct reader r;
    bool ok = reader_open(&r, c->f) == 0;
    for (;;) {
        uint32_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->f->n_tensors || i > atomic_load(&c->first_bad))
            break;
        qp_err ignored;
        if (!ok || verify_tensor_with(c->f, &c->f->tensors[i], r.buf, r.st, &ignored))
            mark_bad(c, i);     /* the caller checks it again for the message */
        uint64_t done = atomic_fetch_add(&c->done, c->f->tensors[i].nbytes) + c->f->tensors[i].nbytes;
        if (who->reports && c->progress)
            c->progress(c->user, done, c->total);
    }
    reader_close(&r);
    return NULL;
}

int qpk_verify_all_progress(const struct qpk_file *f, qpk_progress_fn progress, void *user, qp_err *err)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < f->n_sections; i++)
        if (qpk_verify_section(f, &f->sections[i], err))
            return -1;
    for (uint32_t i = 0; i < f->n_tensors; i++)
        bytes += f->tensors[i].nbytes;
    struct tensor_check c = {.f = f, .first_bad = f->n_tensors, .total = bytes, .progress = progress,
                             .user = user};
    struct checker helper = {&c, false}, caller = {&c, true};
    pthread_t helpers[VERIFY_THREADS - 1];
    int n_helpers = 0;
    while (bytes >= VERIFY_PARALLEL_BYTES && n_helpers < VERIFY_THREADS - 1 &&
           pthread_create(&helpers[n_helpers], NULL, check_tensors, &helper) == 0)
        n_helpers++;
    check_tensors(&caller);
    while (n_helpers > 0)
        pthread_join(helpers[--n_helpers], NULL);
    uint32_t bad = atomic_load(&c.first_bad);
    return bad < f->n_tensors ? qpk_verify_tensor(f, &f->tensors[bad], err) : 0;
}

int qpk_verify_all(const struct qpk_file *f, qp_err *err)
{
    return qpk_verify_all_progress(f, NULL, NULL, err);
}
