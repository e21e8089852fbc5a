/* pool.h - the threads that share a step's work: the calling thread and at
 * most one worker take the jobs of a list from one counter, each job a
 * kernel invocation of bounded work. Integer sums do not depend on who
 * computes which job, so a list gives the same bits on one thread or two.
 *
 * Sharing the machine: a thread that waits for the other spins only
 * briefly, then sleeps, and the thread that hands out a list never waits
 * for the worker to show up, only for jobs in progress (pool.c says why). */
#ifndef QP_POOL_H
#define QP_POOL_H

#include <stdint.h>

#include "error.h"

struct qp_pool;

/* Runs job `job` of the current list on `thread` (0: the caller of
 * qp_pool_run, 1: the worker); non-zero with *err filled on failure. */
typedef int (*qp_pool_job_fn)(void *ctx, uint32_t job, uint32_t thread, qp_err *err);

/* threads: 1, or 2 (a worker is started; 1 if it cannot be). */
int qp_pool_create(struct qp_pool **pool, unsigned threads, qp_pool_job_fn run, void *ctx, qp_err *err);
void qp_pool_destroy(struct qp_pool *pool);

unsigned qp_pool_threads(const struct qp_pool *pool);

/* Runs jobs [0, n) on every thread and returns when all are done: 0, or -1
 * with the first failure's error (the jobs after a failure are skipped). */
int qp_pool_run(struct qp_pool *pool, uint32_t n, qp_err *err);

#endif
