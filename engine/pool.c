/* pool.c - two threads taking the jobs of a list (pool.h). */
#include "pool.h"

#include "clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

struct qp_pool {
    qp_pool_job_fn run;
    void *ctx;
    unsigned threads;
    uint32_t n;                 /* jobs of the current list */
    /* (limit << 32) | next job: a taker owns job `next` when next < limit.
     * One word, so that a thread that takes late, after the list is done,
     * sees limit 0 (or a later list's own limit), never a list being
     * rewritten. */
    _Atomic uint64_t ticket;
    atomic_uint done;           /* jobs finished */
    atomic_int failed;
    qp_err err;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    atomic_uint_fast64_t generation;    /* bumped for each list */
    uint64_t seen;              /* the worker's: the last generation it ran */
    atomic_bool worker_asleep;  /* on `wake` */
    atomic_bool main_asleep;    /* on `finished` */
    atomic_bool stop;
};

/* Takes jobs until none are left; wakes the calling thread of qp_pool_run
 * when it finishes the list's last job and that thread sleeps. */
static void drain(struct qp_pool *p, uint32_t thread)
{
    for (;;) {
        uint64_t t = atomic_fetch_add(&p->ticket, 1);
        uint32_t i = (uint32_t)t, limit = (uint32_t)(t >> 32);
        if (i >= limit)
            return;
        qp_err err;
        if (!atomic_load(&p->failed) && p->run(p->ctx, i, thread, &err) != 0 && atomic_exchange(&p->failed, 1) == 0)
            p->err = err;
        if (atomic_fetch_add(&p->done, 1) + 1 == limit && atomic_load(&p->main_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* Sharing the machine. A thread that waits for the other spins only
 * briefly, then sleeps: with another busy process on this 2-core machine
 * the other thread may have lost its core, and a spinning waiter would
 * keep the core it needs. The thread that hands out a list never waits for
 * the worker to show up: it takes every job the worker has not taken, and
 * waits only for jobs in progress. SPIN_US covers the gaps between the
 * lists of a quiet machine (tens of microseconds; a sleeping thread's
 * wake-up costs about as much on a virtual machine). An idle pool (a chat
 * waiting for input) takes no CPU. */
#define SPIN_US 200

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Spins until done(p) holds or SPIN_US pass; returns whether it held. */
static bool spin_until(struct qp_pool *p, bool (*done)(struct qp_pool *))
{
    double deadline = 0;
    for (unsigned i = 1;; i++) {
        if (done(p))
            return true;
        cpu_relax();
        if (i % 64 == 0) {
            double t = qp_now_ms();
            if (deadline == 0)
                deadline = t + SPIN_US / 1e3;
            else if (t > deadline)
                return false;
        }
    }
}

static bool has_work(struct qp_pool *p)
{
    return atomic_load(&p->stop) || atomic_load(&p->generation) != p->seen;
}

static bool list_done(struct qp_pool *p)
{
    return atomic_load(&p->done) == p->n;
}

/* Sleeps on cv until done(p), with *flag set meanwhile so that the
 * other thread knows to signal. */
static void sleep_until(struct qp_pool *p, pthread_cond_t *cv, atomic_bool *flag, bool (*done)(struct qp_pool *))
{
    pthread_mutex_lock(&p->mu);
    atomic_store(flag, true);
    while (!done(p))
        pthread_cond_wait(cv, &p->mu);
    atomic_store(flag, false);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg)
{
    struct qp_pool *p = arg;
    for (;;) {
        if (!spin_until(p, has_work))
            sleep_until(p, &p->wake, &p->worker_asleep, has_work);
        if (atomic_load(&p->stop))
            return NULL;
        p->seen = atomic_load(&p->generation);
        drain(p, 1);
    }
}

int qp_pool_run(struct qp_pool *p, uint32_t n, qp_err *err)
{
    p->n = n;
    atomic_store(&p->done, 0);
    atomic_store(&p->failed, 0);
    atomic_store(&p->ticket, (uint64_t)n << 32);
    if (p->threads > 1 && n > 1) {
        atomic_fetch_add(&p->generation, 1);
        if (atomic_load(&p->worker_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->wake);
            pthread_mutex_unlock(&p->mu);
        }
    }
    drain(p, 0);
    if (!spin_until(p, list_done))
        sleep_until(p, &p->finished, &p->main_asleep, list_done);
    atomic_store(&p->ticket, 0);    /* a late taker finds nothing */
    if (atomic_load(&p->failed)) {
        *err = p->err;
        return -1;
    }
    return 0;
}

unsigned qp_pool_threads(const struct qp_pool *p)
{
    return p->threads;
}

int qp_pool_create(struct qp_pool **out, unsigned threads, qp_pool_job_fn run, void *ctx, qp_err *err)
{
    struct qp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return qp_fail(err, "out of memory");
    p->run = run;
    p->ctx = ctx;
    p->threads = threads > 1 ? 2 : 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    if (p->threads > 1 && pthread_create(&p->worker, NULL, worker_main, p) != 0)
        p->threads = 1;
    *out = p;
    return 0;
}

void qp_pool_destroy(struct qp_pool *p)
{
    if (!p)
        return;
    if (p->threads > 1) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, true);
        pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->worker, NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->finished);
    free(p);
}
