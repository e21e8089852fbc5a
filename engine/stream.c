/* stream.c - --stream's staging of weight row blocks (stream.h). */
#include "stream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* Reads n blocks of `block` bytes from the container, starting at src (a
 * pointer into its mapping), to work keys [key, key + n): one qpk_readv
 * per IOV_BATCH blocks. */
#define IOV_BATCH 256

static int read_blocks(const struct qp_plan *plan, uint8_t *work, const uint8_t *src, uint32_t key, uint32_t n,
                       uint32_t block, qp_err *err)
{
    const struct qpk_file *f = plan->file;
    uint32_t stride = plan->maps[QP_MAP_WORK].value_size;
    uint8_t *dst = work + (uint64_t)key * stride;
    struct iovec iov[IOV_BATCH];
    for (uint32_t done = 0; done < n;) {
        uint32_t count = n - done < IOV_BATCH ? n - done : IOV_BATCH;
        for (uint32_t b = 0; b < count; b++)
            iov[b] = (struct iovec){dst + (uint64_t)(done + b) * stride, block};
        uint64_t at = (uint64_t)(src - f->map) + (uint64_t)done * block;
        if (qpk_readv(f, at, iov, (int)count))
            return errno == EFAULT
                       ? qp_fail(err, "%s: the model file was truncated or changed on disk while qrun was reading it",
                                 f->path)
                       : qp_fail(err, "%s: reading weights at byte %llu: %s", f->path, (unsigned long long)at,
                                 strerror(errno));
        done += count;
    }
    return 0;
}

/* Reads n row blocks of a packed tensor (i6g, i7g, i4k), from block
 * `first` of segment seg, and expands them to work keys [key, key + n),
 * IOV_BATCH blocks per read. */
static int read_packed(const struct qp_plan *plan, uint8_t *work, const struct qp_segment *seg, uint32_t first,
                       uint32_t key, uint32_t n, qp_err *err)
{
    const struct qpk_file *f = plan->file;
    const struct qpk_tensor *t = seg->packed;
    uint32_t stride = plan->maps[QP_MAP_WORK].value_size;
    uint8_t *stored = malloc((size_t)IOV_BATCH * t->row_stride);
    if (!stored)
        return qp_fail(err, "out of memory");
    int rc = 0;
    for (uint32_t done = 0; done < n && !rc;) {
        uint32_t count = n - done < IOV_BATCH ? n - done : IOV_BATCH;
        uint64_t at = (uint64_t)(seg->data - f->map) + (uint64_t)(first + done) * t->row_stride;
        if (qpk_read(f, at, stored, (size_t)count * t->row_stride))
            rc = qp_fail(err, "%s: reading weights at byte %llu: %s", f->path, (unsigned long long)at,
                         errno == EFAULT ? "the model file was truncated or changed on disk" : strerror(errno));
        else    /* the work map's entries are value_size apart, wider than some blocks */
            qp_segment_expand(seg, stored, count, work + (uint64_t)(key + done) * stride, stride);
        done += count;
    }
    free(stored);
    return rc;
}

/* Copies row blocks [first, first + n) of a weight map to work keys
 * [key, key + n): verbatim, one read per run of row blocks in one segment
 * (the run read IOV_BATCH row blocks at a time), or expanded when the
 * segment is a packed tensor's. */
int qp_stream_stage(const struct qp_plan *plan, uint8_t *work, enum qp_map_id map, uint32_t first, uint32_t n,
                    uint32_t key, qp_err *err)
{
    const struct qp_mapspec *w = &plan->maps[QP_MAP_WORK], *m = &plan->maps[map];
    for (uint32_t b = 0; b < n;) {
        const struct qp_segment *seg = qp_plan_segment(plan, map, first + b);
        if (!seg || key + n > w->max_entries)
            return qp_fail(err, "internal: row block %u of %s cannot be staged", first + b, m->name);
        uint32_t i = first + b - seg->first_key, run = n - b < seg->n_keys - i ? n - b : seg->n_keys - i;
        int rc = seg->packed ? read_packed(plan, work, seg, i, key + b, run, err)
                             : read_blocks(plan, work, seg->data + (uint64_t)i * m->value_size, key + b, run, m->value_size,
                                           err);
        if (rc)
            return -1;
        b += run;
    }
    return 0;
}
