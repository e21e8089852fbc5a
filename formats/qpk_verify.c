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

/* one tensor's checksum: read through buf (VERIFY_CHUNK bytes) and st from
 * a file, hashed where it lies for a container already in memory */
static int verify_tensor_with(const struct qpk_file *f, const struct qpk_tensor *t, uint8_t *buf,
                              XXH3_state_t *st, qp_err *err)
{
    uint64_t h;
    if (!f->owns_map) {
        h = XXH3_64bits(f->map + t->offset, t->nbytes);
    } else {
        XXH3_64bits_reset(st);
        for (uint64_t at = 0; at < t->nbytes;) {
            size_t n = t->nbytes - at < VERIFY_CHUNK ? (size_t)(t->nbytes - at) : VERIFY_CHUNK;
            if (qpk_read(f, t->offset + at, buf, n))
                return qp_fail(err, "%s: tensor %s: %s", f->path, t->name,
                               errno == EFAULT ? "the file ends early (truncated while being read?)"
                                               : strerror(errno));
            XXH3_64bits_update(st, buf, n);
            at += n;
        }
        h = XXH3_64bits_digest(st);
    }
    if (h != t->xxh3)
        return qp_fail(err, "%s: tensor %s: checksum mismatch (data corrupted)", f->path, t->name);
    return 0;
}

/* a read buffer and a hash state for one thread (none for a container in
 * memory) */
struct reader {
    uint8_t *buf;
    XXH3_state_t *st;
};

static int reader_open(struct reader *r, const struct qpk_file *f)
{
    r->buf = f->owns_map ? malloc(VERIFY_CHUNK) : NULL;
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
};

static void mark_bad(struct tensor_check *c, uint32_t i)
{
    uint32_t bad = atomic_load(&c->first_bad);
    while (i < bad && !atomic_compare_exchange_weak(&c->first_bad, &bad, i))
        ;
}

static void *check_tensors(void *arg)
{
    struct tensor_check *c = arg;
    struct reader r;
    bool ok = reader_open(&r, c->f) == 0;
    for (;;) {
        uint32_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->f->n_tensors || i > atomic_load(&c->first_bad))
            break;
        qp_err ignored;
        if (!ok || verify_tensor_with(c->f, &c->f->tensors[i], r.buf, r.st, &ignored))
            mark_bad(c, i);     /* the caller checks it again for the message */
    }
    reader_close(&r);
    return NULL;
}

int qpk_verify_all(const struct qpk_file *f, qp_err *err)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < f->n_sections; i++)
        if (qpk_verify_section(f, &f->sections[i], err))
            return -1;
    for (uint32_t i = 0; i < f->n_tensors; i++)
        bytes += f->tensors[i].nbytes;
    struct tensor_check c = {.f = f, .first_bad = f->n_tensors};
    pthread_t helpers[VERIFY_THREADS - 1];
    int n_helpers = 0;
    while (bytes >= VERIFY_PARALLEL_BYTES && n_helpers < VERIFY_THREADS - 1 &&
           pthread_create(&helpers[n_helpers], NULL, check_tensors, &c) == 0)
        n_helpers++;
    check_tensors(&c);
    while (n_helpers > 0)
        pthread_join(helpers[--n_helpers], NULL);
    uint32_t bad = atomic_load(&c.first_bad);
    return bad < f->n_tensors ? qpk_verify_tensor(f, &f->tensors[bad], err) : 0;
}
