/* qpk_write.h - writes a .qpk atomically.
 *
 *   qpk_writer_open()    plans the layout of every tensor (given up front),
 *                        creates the file beside the destination (fsafe.h:
 *                        unnamed with O_TMPFILE, else a random name) and
 *                        writes the leading sections; refuses a destination
 *                        that exists and is not a regular file;
 *   qpk_writer_begin_tensor() / qpk_writer_write() / qpk_writer_end_tensor()
 *                        stream each tensor's bytes, in directory order;
 *   qpk_writer_finish()  appends the provenance, writes the directory and the
 *                        header, fsyncs and renames over the destination.
 *   qpk_writer_abort()   removes the file (also on any failure).
 *
 * Until finish() returns 0 the destination is untouched. A process killed
 * while writing leaves nothing where O_TMPFILE works; a signal handler that
 * ends the process calls fs_out_remove_temps() for the named fallback.
 */
#ifndef QP_QPK_WRITE_H
#define QP_QPK_WRITE_H

#include "qpk.h"

struct qpk_writer;

struct qpk_blob {
    unsigned kind;            /* enum qpk_section_kind */
    const void *data;
    size_t len;
};

/* tensors: name, role, layer, encoding, rows, cols, scale_exp, group_size,
 * rows_per_block, row_stride filled; offsets, nbytes and checksums are the
 * writer's. sections: every section but config and provenance. */
int qpk_writer_open(struct qpk_writer **w, const char *dest, const struct qpk_config *cfg,
                    const struct qpk_blob *sections, unsigned n_sections,
                    const struct qpk_tensor *tensors, uint32_t n_tensors, qp_err *err);

int qpk_writer_begin_tensor(struct qpk_writer *w, uint32_t index, qp_err *err);
int qpk_writer_write(struct qpk_writer *w, const void *data, size_t len, qp_err *err);
int qpk_writer_end_tensor(struct qpk_writer *w, qp_err *err);

/* provenance: JSON text (compressed by the writer). */
int qpk_writer_finish(struct qpk_writer *w, const char *provenance, qp_err *err);

/* Frees w and removes its temporary file; safe on NULL. */
void qpk_writer_abort(struct qpk_writer *w);

#endif
