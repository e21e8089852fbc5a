/* safetensors_write.h - writes one safetensors file as a stream.
 *
 * The caller declares every tensor (name, dtype, shape) up front; the
 * writer lays them out contiguously in the given order, writes the header
 * ({"__metadata__":{"format":"pt"}, then the tensors in that order, padded
 * with spaces so the data area starts 8-byte aligned) and then takes the
 * tensors' bytes as a stream: stw_write() any number of times, in
 * declaration order, little-endian elements. Writes need not match tensor
 * boundaries; the writer only counts bytes and refuses more than declared.
 *
 * Atomic: everything goes to a temporary file next to path; stw_finish()
 * checks that exactly the declared bytes arrived, fsyncs, and renames it
 * onto path. Any failure (or stw_abort) removes the temporary file, so
 * path is either the old file or the complete new one.
 *
 *     struct stw_writer *w;
 *     if (stw_open(&w, "out.safetensors", decls, n, &err)) ...
 *     for each tensor: stw_write(w, bytes, nbytes, &err) ...
 *     if (stw_finish(w, &err)) ...      // w is freed either way
 */
#ifndef QP_SAFETENSORS_WRITE_H
#define QP_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "safetensors.h"

struct stw_tensor {
    const char *name;           /* non-empty UTF-8, unique in the file */
    enum st_dtype dtype;
    uint32_t ndim;              /* 0 (scalar) .. ST_MAX_DIMS */
    uint64_t shape[ST_MAX_DIMS];
};

struct stw_writer;

/* Validates the declarations (names, dims, size overflow), creates the
 * temporary file and writes the header. The writer keeps no pointer to
 * tensors after returning. On failure *w is NULL and nothing is left. */
int stw_open(struct stw_writer **w, const char *path, const struct stw_tensor *tensors,
             uint32_t n, qp_err *err);

/* Appends len bytes of tensor data. Fails when the bytes would run past
 * the last declared tensor, or on an I/O error; w then refuses further
 * writes and the caller ends it with stw_abort (or stw_finish, which fails). */
int stw_write(struct stw_writer *w, const void *bytes, size_t len, qp_err *err);

/* Index of the tensor the next byte belongs to (n when all are complete). */
uint32_t stw_current(const struct stw_writer *w);

/* Checks every declared byte was written, fsyncs, renames into place and
 * frees w. On failure the temporary file is removed and w freed too. */
int stw_finish(struct stw_writer *w, qp_err *err);

/* Drops the temporary file and frees w (NULL is fine). */
void stw_abort(struct stw_writer *w);

/* Bytes the data area of these tensors takes (the sum of their sizes), as
 * an index's "total_size" counts them; fails when a size overflows. */
int stw_data_size(const struct stw_tensor *tensors, uint32_t n, uint64_t *bytes, qp_err *err);

#endif
