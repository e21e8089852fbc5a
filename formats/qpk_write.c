/* qpk_write.c - streams a .qpk into an unnamed file beside the destination
 * (fsafe.h) and publishes it only when every byte is written and synced. */
#include "qpk_write.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "fsafe.h"
#include "le.h"

#define WRITE_BUF_BYTES (4u << 20)
/* Tensor data is pushed to the disk window by window as it is written, and a
 * window leaves the page cache once it is on the disk: a multi-gigabyte
 * container does not pile up as dirty pages for the final fsync, the disk
 * works while the packer converts, and the page cache reuses its own pages
 * (much cheaper in a VM than fresh ones). */
#define WRITEBACK_WINDOW (32ull << 20)
/* zstd level for the tokenizer and provenance: the 11 MB tokenizer.json
 * packs to ~2.5 MB in well under a second at this level. */
#define ZSTD_LEVEL 9

struct qpk_writer {
    char *dest;
    struct fs_out out;        /* the file being written */
    bool out_open;
    uint64_t pos;             /* bytes handed to the file so far (buffer included) */
    uint8_t *buf;
    size_t buf_used;
    uint64_t flushed;         /* bytes handed to write() */
    uint64_t kicked, dropped; /* writeback started up to / pages dropped up to */
    struct qpk_config cfg;
    struct qpk_section sections[QPK_MAX_SECTIONS];
    uint32_t n_sections;
    struct qpk_tensor *tensors;
    uint32_t n_tensors;
    uint64_t data_offset, data_end;
    uint32_t next_tensor;     /* index expected by begin_tensor */
    int64_t open_tensor;      /* index being streamed, -1 when none */
    uint64_t tensor_written;
    uint8_t *block;           /* the open tensor's row block being assembled ... */
    uint64_t block_fill;      /* ... and its bytes so far, for qpk_check_values */
    XXH3_state_t *hash;
};

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Starts writeback of each full window written, then waits for the window
 * before it to reach the disk and drops it from the page cache, so at most
 * two windows are in flight. Failures here only lose a hint: the final
 * fsync reports any write error. */
static void push_writeback(struct qpk_writer *w)
{
    while (w->flushed - w->kicked >= WRITEBACK_WINDOW) {
        sync_file_range(w->out.fd, (off_t)w->kicked, WRITEBACK_WINDOW, SYNC_FILE_RANGE_WRITE);
        w->kicked += WRITEBACK_WINDOW;
        if (w->kicked - w->dropped > WRITEBACK_WINDOW) {
            sync_file_range(w->out.fd, (off_t)w->dropped, WRITEBACK_WINDOW,
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
            posix_fadvise(w->out.fd, (off_t)w->dropped, WRITEBACK_WINDOW, POSIX_FADV_DONTNEED);
            w->dropped += WRITEBACK_WINDOW;
        }
    }
}

static int flush_buf(struct qpk_writer *w, qp_err *err)
{
    if (fs_out_write(&w->out, w->buf, w->buf_used, err))
        return -1;
    w->flushed += w->buf_used;
    w->buf_used = 0;
    push_writeback(w);
    return 0;
}

static int put_bytes(struct qpk_writer *w, const void *data, size_t len, qp_err *err)
{
    const uint8_t *p = data;
    while (len) {
        size_t room = WRITE_BUF_BYTES - w->buf_used;
        size_t n = len < room ? len : room;
        memcpy(w->buf + w->buf_used, p, n);
        w->buf_used += n;
        w->pos += n;
        p += n;
        len -= n;
        if (w->buf_used == WRITE_BUF_BYTES && flush_buf(w, err))
            return -1;
    }
    return 0;
}

static int put_zeros_to(struct qpk_writer *w, uint64_t offset, qp_err *err)
{
    static const uint8_t zeros[4096];
    while (w->pos < offset) {
        uint64_t n = offset - w->pos;
        if (put_bytes(w, zeros, n < sizeof zeros ? n : sizeof zeros, err))
            return -1;
    }
    return 0;
}

static int add_section(struct qpk_writer *w, unsigned kind, const void *data, size_t len, bool compress,
                       qp_err *err)
{
    struct qpk_section *s = &w->sections[w->n_sections++];
    void *packed = NULL;
    const void *stored = data;
    size_t stored_len = len;
    if (compress) {
        size_t cap = ZSTD_compressBound(len);
        packed = malloc(cap ? cap : 1);
        if (!packed)
            return qp_fail(err, "%s: out of memory compressing section %s", w->dest, qpk_section_name(kind));
        stored_len = ZSTD_compress(packed, cap, data, len, ZSTD_LEVEL);
        if (ZSTD_isError(stored_len)) {
            free(packed);
            return qp_fail(err, "%s: zstd: %s", w->dest, ZSTD_getErrorName(stored_len));
        }
        stored = packed;
    }
    if (put_zeros_to(w, align_up(w->pos, 8), err)) {
        free(packed);
        return -1;
    }
    *s = (struct qpk_section){
        .kind = kind, .codec = compress ? QPK_CODEC_ZSTD : QPK_CODEC_RAW, .offset = w->pos,
        .stored_size = stored_len, .raw_size = len, .xxh3 = XXH3_64bits(stored, stored_len),
    };
    int rc = put_bytes(w, stored, stored_len, err);
    free(packed);
    return rc;
}

/* Assigns every tensor its QPK_DATA_ALIGN-aligned offset after the leading sections. */
static int plan_tensors(struct qpk_writer *w, const struct qpk_tensor *tensors, uint32_t n, qp_err *err)
{
    w->tensors = calloc(n, sizeof *w->tensors);
    if (!w->tensors)
        return qp_fail(err, "%s: out of memory", w->dest);
    memcpy(w->tensors, tensors, n * sizeof *tensors);
    w->n_tensors = n;
    uint64_t at = w->data_offset;
    for (uint32_t i = 0; i < n; i++) {
        struct qpk_tensor *t = &w->tensors[i];
        if (t->rows_per_block == 0 || t->rows % t->rows_per_block || t->row_stride == 0)
            return qp_fail(err, "%s: tensor %s: %u rows do not split into blocks of %u", w->dest, t->name,
                           t->rows, t->rows_per_block);
        t->nbytes = (uint64_t)(t->rows / t->rows_per_block) * t->row_stride;
        t->offset = at;
        t->data = NULL;
        at = align_up(at + t->nbytes, QPK_DATA_ALIGN);
    }
    w->data_end = n ? w->tensors[n - 1].offset + w->tensors[n - 1].nbytes : w->data_offset;
    return 0;
}

int qpk_writer_open(struct qpk_writer **out, const char *dest, const struct qpk_config *cfg,
                    const struct qpk_blob *sections, unsigned n_sections,
                    const struct qpk_tensor *tensors, uint32_t n_tensors, qp_err *err)
{
    *out = NULL;
    if (n_sections + 2 > QPK_MAX_SECTIONS || n_tensors < 1 || n_tensors > QPK_MAX_TENSORS)
        return qp_fail(err, "%s: too many sections or tensors", dest);
    struct qpk_writer *w = calloc(1, sizeof *w);
    if (!w)
        return qp_fail(err, "%s: out of memory", dest);
    w->open_tensor = -1;
    w->cfg = *cfg;
    w->dest = strdup(dest);
    w->buf = malloc(WRITE_BUF_BYTES);
    w->hash = XXH3_createState();
    if (!w->dest || !w->buf || !w->hash) {
        qpk_writer_abort(w);
        return qp_fail(err, "%s: out of memory", dest);
    }
    if (fs_out_open(&w->out, dest, 0, err)) {
        qpk_writer_abort(w);
        return -1;
    }
    w->out_open = true;
    /* header and directory are written last, at the front */
    uint64_t dir_size = (uint64_t)(n_sections + 2) * QPK_SECTION_SIZE + (uint64_t)n_tensors * QPK_TENSOR_SIZE;
    uint8_t cfg_bytes[QPK_CONFIG_SIZE];
    qpk_config_encode(cfg, cfg_bytes);
    int rc = put_zeros_to(w, QPK_HEADER_SIZE + dir_size, err) ||
             add_section(w, QPK_SEC_CONFIG, cfg_bytes, sizeof cfg_bytes, false, err);
    for (unsigned i = 0; i < n_sections && !rc; i++)
        rc = add_section(w, sections[i].kind, sections[i].data, sections[i].len, true, err);
    if (!rc) {
        w->data_offset = align_up(w->pos, QPK_DATA_ALIGN);
        rc = plan_tensors(w, tensors, n_tensors, err);
    }
    if (rc) {
        qpk_writer_abort(w);
        return -1;
    }
    *out = w;
    return 0;
}

int qpk_writer_begin_tensor(struct qpk_writer *w, uint32_t index, qp_err *err)
{
    if (w->open_tensor >= 0 || index != w->next_tensor || index >= w->n_tensors)
        return qp_fail(err, "%s: tensor %u written out of order", w->dest, index);
    if (put_zeros_to(w, w->tensors[index].offset, err))
        return -1;
    uint64_t stride = w->tensors[index].row_stride;
    uint8_t *block = realloc(w->block, stride ? stride : 1);
    if (!block)
        return qp_fail(err, "%s: out of memory", w->dest);
    w->block = block;
    w->block_fill = 0;
    XXH3_64bits_reset(w->hash);
    w->open_tensor = index;
    w->tensor_written = 0;
    return 0;
}

/* Checks the value ranges a reader will check (qpk_check_values) on every
 * whole row block of [data, data + len), the open tensor's next bytes:
 * whole blocks where they lie, pieces assembled in w->block. */
static int check_written(struct qpk_writer *w, const struct qpk_tensor *t, const uint8_t *data, size_t len,
                         qp_err *err)
{
    uint64_t stride = t->row_stride;
    while (len) {
        uint64_t block_index = (w->tensor_written - w->block_fill) / stride;
        if (w->block_fill == 0 && len >= stride) {
            uint64_t n = len / stride;
            if (qpk_check_values(w->dest, t, block_index, data, n, err))
                return -1;
            data += n * stride;
            len -= n * stride;
            w->tensor_written += n * stride;
            continue;
        }
        size_t n = stride - w->block_fill < len ? (size_t)(stride - w->block_fill) : len;
        memcpy(w->block + w->block_fill, data, n);
        w->block_fill += n;
        w->tensor_written += n;
        data += n;
        len -= n;
        if (w->block_fill == stride) {
            w->block_fill = 0;
            if (qpk_check_values(w->dest, t, block_index, w->block, 1, err))
                return -1;
        }
    }
    return 0;
}

int qpk_writer_write(struct qpk_writer *w, const void *data, size_t len, qp_err *err)
{
    if (w->open_tensor < 0)
        return qp_fail(err, "%s: tensor bytes written outside a tensor", w->dest);
    const struct qpk_tensor *t = &w->tensors[w->open_tensor];
    if (len > t->nbytes - w->tensor_written)
        return qp_fail(err, "%s: tensor %s: more than its %" PRIu64 " bytes written", w->dest, t->name,
                       t->nbytes);
    if (check_written(w, t, data, len, err))
        return -1;
    XXH3_64bits_update(w->hash, data, len);
    return put_bytes(w, data, len, err);
}

int qpk_writer_end_tensor(struct qpk_writer *w, qp_err *err)
{
    if (w->open_tensor < 0)
        return qp_fail(err, "%s: no tensor is open", w->dest);
    struct qpk_tensor *t = &w->tensors[w->open_tensor];
    if (w->tensor_written != t->nbytes)
        return qp_fail(err, "%s: tensor %s: %" PRIu64 " of %" PRIu64 " bytes written", w->dest, t->name,
                       w->tensor_written, t->nbytes);
    t->xxh3 = XXH3_64bits_digest(w->hash);
    w->open_tensor = -1;
    w->next_tensor++;
    return 0;
}

static int pwrite_all(struct qpk_writer *w, const void *data, size_t len, uint64_t offset, qp_err *err)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t n = pwrite(w->out.fd, p, len, (off_t)offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return qp_fail(err, "%s: write: %s", w->dest, n < 0 ? strerror(errno) : "no progress");
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

static int write_front(struct qpk_writer *w, qp_err *err)
{
    uint64_t dir_size = (uint64_t)w->n_sections * QPK_SECTION_SIZE + (uint64_t)w->n_tensors * QPK_TENSOR_SIZE;
    uint8_t *dir = calloc(1, dir_size);
    if (!dir)
        return qp_fail(err, "%s: out of memory", w->dest);
    for (uint32_t i = 0; i < w->n_sections; i++)
        qpk_section_encode(&w->sections[i], dir + (uint64_t)i * QPK_SECTION_SIZE);
    for (uint32_t i = 0; i < w->n_tensors; i++)
        qpk_tensor_encode(&w->tensors[i],
                          dir + (uint64_t)w->n_sections * QPK_SECTION_SIZE + (uint64_t)i * QPK_TENSOR_SIZE);
    uint8_t h[QPK_HEADER_SIZE] = {0};
    memcpy(h + QPK_HDR_MAGIC, QPK_MAGIC, 8);
    put16(h + QPK_HDR_VERSION_MAJOR, QPK_VERSION_MAJOR);
    put16(h + QPK_HDR_VERSION_MINOR, QPK_VERSION_MINOR);
    put32(h + QPK_HDR_HEADER_SIZE, QPK_HEADER_SIZE);
    put64(h + QPK_HDR_FILE_SIZE, w->pos);
    put64(h + QPK_HDR_DIR_OFFSET, QPK_HEADER_SIZE);
    put64(h + QPK_HDR_DIR_SIZE, dir_size);
    put32(h + QPK_HDR_N_SECTIONS, w->n_sections);
    put32(h + QPK_HDR_N_TENSORS, w->n_tensors);
    put64(h + QPK_HDR_DIR_XXH3, XXH3_64bits(dir, dir_size));
    put64(h + QPK_HDR_DATA_OFFSET, w->data_offset);
    put64(h + QPK_HDR_DATA_SIZE, w->data_end - w->data_offset);
    put64(h + QPK_HDR_XXH3, XXH3_64bits(h, QPK_HDR_XXH3));
    int rc = pwrite_all(w, dir, dir_size, QPK_HEADER_SIZE, err) || pwrite_all(w, h, sizeof h, 0, err);
    free(dir);
    return rc;
}

int qpk_writer_finish(struct qpk_writer *w, const char *provenance, qp_err *err)
{
    int rc = 0;
    if (w->next_tensor != w->n_tensors || w->open_tensor >= 0)
        rc = qp_fail(err, "%s: %u of %u tensors written", w->dest, w->next_tensor, w->n_tensors);
    if (!rc)
        rc = add_section(w, QPK_SEC_PROVENANCE, provenance, strlen(provenance), true, err);
    if (!rc)
        rc = flush_buf(w, err) || write_front(w, err);
    if (!rc) {
        w->out_open = false; /* committed or, on failure, removed */
        rc = fs_out_commit(&w->out, err);
    }
    qpk_writer_abort(w);
    return rc;
}

void qpk_writer_abort(struct qpk_writer *w)
{
    if (!w)
        return;
    if (w->out_open)
        fs_out_abort(&w->out);
    free(w->dest);
    free(w->buf);
    free(w->block);
    free(w->tensors);
    if (w->hash)
        XXH3_freeState(w->hash);
    free(w);
}
