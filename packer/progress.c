/* progress.c - the progress line of `qpack pack` (see progress.h). */
#include "progress.h"
#include "clock.h"

#include <stdio.h>
#include <time.h>

#define PROGRESS_PERIOD 0.25

void progress_start(struct progress *pr, bool on, uint32_t n_tensors, uint64_t bytes_total, double work_total)
{
    *pr = (struct progress){.on = on, .start = qp_now_s(), .n_tensors = n_tensors, .bytes_total = bytes_total,
                            .work_total = work_total};
    pr->shown = pr->start - PROGRESS_PERIOD;
}

/* "qpack: 57/310 tensors, 120.5/446.2 MB, 12 s, about 31 s left" */
static void show(struct progress *pr, uint64_t bytes_done)
{
    double now = qp_now_s(), elapsed = now - pr->start;
    if (now - pr->shown < PROGRESS_PERIOD)
        return;
    pr->shown = now;
    double frac = pr->tensor_bytes ? (double)bytes_done / (double)pr->tensor_bytes : 0;
    double work = pr->work_before + pr->tensor_work * frac;
    fprintf(stderr, "\r\033[Kqpack: %u/%u tensors, %.1f/%.1f MB, %.0f s", pr->tensor, pr->n_tensors,
            (double)(pr->bytes_before + bytes_done) / 1e6, (double)pr->bytes_total / 1e6, elapsed);
    if (elapsed >= 1 && work > 0)
        fprintf(stderr, ", about %.0f s left", (pr->work_total - work) * elapsed / work);
    fflush(stderr);
}

void progress_tensor(struct progress *pr, uint32_t index, uint64_t bytes, double work)
{
    if (!pr->on)
        return;
    if (index > 0) {
        pr->bytes_before += pr->tensor_bytes;
        pr->work_before += pr->tensor_work;
    }
    pr->tensor = index;
    pr->tensor_bytes = bytes;
    pr->tensor_work = work;
    show(pr, 0);
}

void progress_bytes(struct progress *pr, uint64_t bytes_done)
{
    if (pr->on)
        show(pr, bytes_done);
}

void progress_end(struct progress *pr)
{
    if (!pr->on)
        return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    pr->on = false;
}
