/* pack_progress.h - what `qpack pack`'s progress line says while the
 * tensors are written: tensors done, megabytes written, the time taken and
 * left. The line itself is the tools' (tools/cli/progress.h: a terminal
 * only, not with --quiet). The time left comes from an estimate of each
 * tensor's work (its weights times what its encoding costs), scaled by the
 * rate measured so far. */
#ifndef QP_PACK_PROGRESS_H
#define QP_PACK_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct pack_progress {
    double start;                         /* seconds: when writing began */
    uint32_t n_tensors, tensor;           /* tensor: the one being written */
    uint64_t bytes_total, bytes_before;   /* every tensor's bytes; those before this one */
    double work_total, work_before;       /* the same in estimated work */
    uint64_t tensor_bytes;
    double tensor_work;
};

void pack_progress_start(struct pack_progress *pr, uint32_t n_tensors, uint64_t bytes_total, double work_total);

/* Tensor index begins: its bytes and estimated work. */
void pack_progress_tensor(struct pack_progress *pr, uint32_t index, uint64_t bytes, double work);

/* bytes_done of the current tensor are written. */
void pack_progress_bytes(struct pack_progress *pr, uint64_t bytes_done);

/* --calibrate's line: "calibrating on calib.txt: 120/512 tokens, 12.0 s,
 * about 39.0 s left". A calib_progress_fn (calibrate.h) whose arg is a
 * struct calib_progress. */
struct calib_progress {
    double start;     /* seconds: when the reference began */
    const char *text; /* the calibration text's path */
};
void pack_progress_calibration(void *arg, uint64_t done, uint64_t total);

#endif
