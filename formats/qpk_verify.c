/* qpk_verify.c - the checksums of a .qpk's sections and tensors. A whole
 * model is checked on two threads: XXH3 runs at memory speed, so one core
 * alone leaves half of a 2.4 GB check's time on the table. */
#include "qpk.h"

#include <pthread.h>
#include <stdatomic.h>
#include <xxhash.h>

#define VERIFY_THREADS 2
#define VERIFY_PARALLEL_BYTES (64u << 20)   /* below this a thread costs more than it saves */

int qpk_verify_tensor(const struct qpk_file *f, const struct qpk_tensor *t, qp_err *err)
{
    if (XXH3_64bits(f->map + t->offset, t->nbytes) != t->xxh3)
        return qp_fail(err, "%s: tensor %s: checksum mismatch (data corrupted)", f->path, t->name);
    return 0;
}

int qpk_verify_section(const struct qpk_file *f, const struct qpk_section *s, qp_err *err)
{
    if (XXH3_64bits(f->map + s->offset, s->stored_size) != s->xxh3)
        return qp_fail(err, "%s: section %s: checksum mismatch (data corrupted)", f->path,
                       qpk_section_name(s->kind));
    return 0;
}

/* the tensors, taken in turn by every thread; the first corrupt one in
 * directory order is the one reported, however the threads interleave */
struct tensor_check {
    const struct qpk_file *f;
    _Atomic uint32_t next;
    _Atomic uint32_t first_bad;     /* n_tensors while none is */
};

static void *check_tensors(void *arg)
{
    struct tensor_check *c = arg;
    for (;;) {
        uint32_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->f->n_tensors || i > atomic_load(&c->first_bad))
            return NULL;
        const struct qpk_tensor *t = &c->f->tensors[i];
        if (XXH3_64bits(c->f->map + t->offset, t->nbytes) == t->xxh3)
            continue;
        uint32_t bad = atomic_load(&c->first_bad);
        while (i < bad && !atomic_compare_exchange_weak(&c->first_bad, &bad, i))
            ;
    }
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
