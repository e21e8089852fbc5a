/* pack_progress.c - the progress of `qpack pack` (pack_progress.h). */
#include "pack_progress.h"

#include "clock.h"
#include "progress.h"

#include <inttypes.h>
#include <stdio.h>

void pack_progress_start(struct pack_progress *pr, uint32_t n_tensors, uint64_t bytes_total, double work_total)
{
    *pr = (struct pack_progress){.start = qp_now_s(), .n_tensors = n_tensors, .bytes_total = bytes_total,
                                 .work_total = work_total};
}

/* "qpack: 57/310 tensors, 120.5/446.2 MB, 12.0 s, about 31.0 s left" */
static void show(struct pack_progress *pr, uint64_t bytes_done, bool force)
{
    if (!progress_enabled())
        return;
    double elapsed = qp_now_s() - pr->start;
    double frac = pr->tensor_bytes ? (double)bytes_done / (double)pr->tensor_bytes : 0;
    double work = pr->work_before + pr->tensor_work * frac;
    char took[32], left[48] = "";
    progress_duration(took, elapsed);
    if (elapsed >= 1 && work > 0) {
        char t[32];
        progress_duration(t, (pr->work_total - work) * elapsed / work);
        snprintf(left, sizeof left, ", about %s left", t);
    }
    progress_show(force, "%u/%u tensors, %.1f/%.1f MB, %s%s", pr->tensor, pr->n_tensors,
                  (double)(pr->bytes_before + bytes_done) / 1e6, (double)pr->bytes_total / 1e6, took, left);
}

void pack_progress_tensor(struct pack_progress *pr, uint32_t index, uint64_t bytes, double work)
{
    if (index > 0) {
        pr->bytes_before += pr->tensor_bytes;
        pr->work_before += pr->tensor_work;
    }
    pr->tensor = index;
    pr->tensor_bytes = bytes;
    pr->tensor_work = work;
    show(pr, 0, index == 0);
}

void pack_progress_bytes(struct pack_progress *pr, uint64_t bytes_done)
{
    show(pr, bytes_done, false);
}

void pack_progress_calibration(void *arg, uint64_t done, uint64_t total)
{
    const struct calib_progress *cp = arg;
    if (!progress_enabled())
        return;
    double elapsed = qp_now_s() - cp->start;
    char took[32], left[48] = "";
    progress_duration(took, elapsed);
    if (elapsed >= 1 && done > 0 && done < total) {
        char t[32];
        progress_duration(t, (double)(total - done) * elapsed / (double)done);
        snprintf(left, sizeof left, ", about %s left", t);
    }
    progress_show(done == 1 || done == total, "calibrating on %s: %" PRIu64 "/%" PRIu64 " tokens, %s%s", cp->text,
                  done, total, took, left);
}
