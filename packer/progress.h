/* progress.h - the progress line of `qpack pack` on a terminal: tensors
 * done, megabytes written and the time taken and left, rewritten in place
 * at most every PROGRESS_PERIOD seconds on stderr; nothing when off (stderr
 * not a terminal, or --quiet). The time left comes from an estimate of each
 * tensor's work (its weights times what its encoding costs), scaled by the
 * rate measured so far. */
#ifndef QP_PACK_PROGRESS_H
#define QP_PACK_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct progress {
    bool on;
    double start, shown;                  /* seconds: when writing began, the last line */
    uint32_t n_tensors, tensor;           /* tensor: the one being written */
    uint64_t bytes_total, bytes_before;   /* every tensor's bytes; those before this one */
    double work_total, work_before;       /* the same in estimated work */
    uint64_t tensor_bytes;
    double tensor_work;
};

void progress_start(struct progress *pr, bool on, uint32_t n_tensors, uint64_t bytes_total, double work_total);

/* Tensor index begins: its bytes and estimated work. */
void progress_tensor(struct progress *pr, uint32_t index, uint64_t bytes, double work);

/* bytes_done of the current tensor are written. */
void progress_bytes(struct progress *pr, uint64_t bytes_done);

/* Clears the line (before the summary, or an error). */
void progress_end(struct progress *pr);

#endif
