/* clock.h - the one clock qpack times things with: monotonic, so a
 * change of the wall clock never makes a duration negative. */
#ifndef QP_CLOCK_H
#define QP_CLOCK_H

#include <time.h>

/* milliseconds since an arbitrary start (the boot) */
static inline double qp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* the same in seconds */
static inline double qp_now_s(void)
{
    return qp_now_ms() / 1e3;
}

#endif
