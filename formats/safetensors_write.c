/* safetensors_write.c - streaming, atomic safetensors writer (see the header). */
#include "safetensors_write.h"
#include "buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STW_BUFFER (4u << 20)
/* Dirty pages are handed to writeback every this many bytes, so the disk
 * works while the caller computes and the final fsync has little left. */
#define STW_WRITEBACK_STEP (64u << 20)
/* The reader refuses offsets a JSON double cannot hold exactly. */
#define STW_MAX_DATA (1ull << 53)

struct stw_writer {
    char *path;                 /* final name */
    char *tmp_path;             /* where the bytes go until stw_finish */
    int fd;
    int failed;                 /* a write failed: only stw_abort/finish from here */
    char **names;               /* copies, for messages */
    uint64_t *ends;             /* end offset of each tensor in the data area */
    uint32_t n;
    uint64_t total;             /* declared data bytes */
    uint64_t written;           /* data bytes taken so far */
    uint64_t file_pos;          /* bytes flushed to fd */
    uint64_t writeback_pos;     /* bytes handed to writeback */
    uint8_t *buf;
    size_t fill;
};

/* ------------------------------------------- the header's growing string */

static void text_json_string(struct qp_buf *t, const char *s)
{
    qp_buf_add(t, "\"", 1);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            qp_buf_printf(t, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            qp_buf_printf(t, "\\u%04x", (unsigned char)*s);
        else
            qp_buf_add(t, s, 1);
    }
    qp_buf_add(t, "\"", 1);
}

/* -------------------------------------------------------- declarations */

static int tensor_bytes(const struct stw_tensor *t, uint64_t *bytes)
{
    uint64_t numel = 1;
    for (uint32_t d = 0; d < t->ndim; d++)
        if (__builtin_mul_overflow(numel, t->shape[d], &numel))
            return -1;
    return __builtin_mul_overflow(numel, (uint64_t)st_dtype_size(t->dtype), bytes) ? -1 : 0;
}

int stw_data_size(const struct stw_tensor *tensors, uint32_t n, uint64_t *bytes, qp_err *err)
{
    uint64_t total = 0, b;
    *bytes = 0;
    for (uint32_t i = 0; i < n; i++)
        if (tensor_bytes(&tensors[i], &b) || __builtin_add_overflow(total, b, &total))
            return qp_fail(err, "tensor \"%s\": size overflows 64 bits", tensors[i].name);
    *bytes = total;
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int check_decls(const struct stw_tensor *t, uint32_t n, const char *path, qp_err *err)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!t[i].name || !st_name_valid(t[i].name, strlen(t[i].name)) ||
            strcmp(t[i].name, "__metadata__") == 0)
            return qp_fail(err, "%s: tensor %u has an empty, invalid or reserved name", path, i);
        if (t[i].ndim > ST_MAX_DIMS)
            return qp_fail(err, "%s: tensor \"%s\" has %u dimensions, more than %d", path,
                           t[i].name, t[i].ndim, ST_MAX_DIMS);
        if (st_dtype_size(t[i].dtype) == 0)
            return qp_fail(err, "%s: tensor \"%s\" has an unknown dtype %d", path, t[i].name,
                           (int)t[i].dtype);
    }
    uint64_t total = 0, bytes;
    for (uint32_t i = 0; i < n; i++)
        if (tensor_bytes(&t[i], &bytes) || __builtin_add_overflow(total, bytes, &total))
            return qp_fail(err, "%s: tensor \"%s\": size overflows 64 bits", path, t[i].name);
    if (total > STW_MAX_DATA)
        return qp_fail(err, "%s: %llu bytes of tensors, more than a header can address",
                       path, (unsigned long long)total);
    return 0;
}

static int check_unique(char **names, uint32_t n, const char *path, qp_err *err)
{
    char **sorted = malloc((n + 1) * sizeof(*sorted));
    if (!sorted)
        return qp_fail(err, "%s: out of memory", path);
    memcpy(sorted, names, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), cmp_name);
    int rc = 0;
    for (uint32_t i = 1; i < n && rc == 0; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            rc = qp_fail(err, "%s: tensor \"%s\" is declared twice", path, sorted[i]);
    free(sorted);
    return rc;
}

/* The JSON header, padded with spaces so the data starts 8-byte aligned. */
static int build_header(const struct stw_tensor *t, uint32_t n, struct qp_buf *h)
{
    uint64_t at = 0, bytes = 0;
    static const char meta[] = "{\"__metadata__\":{\"format\":\"pt\"}";
    qp_buf_add(h, meta, sizeof(meta) - 1);
    for (uint32_t i = 0; i < n; i++) {
        tensor_bytes(&t[i], &bytes);
        qp_buf_add(h, ",", 1);
        text_json_string(h, t[i].name);
        qp_buf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t[i].dtype));
        for (uint32_t d = 0; d < t[i].ndim; d++)
            qp_buf_printf(h, d ? ",%llu" : "%llu", (unsigned long long)t[i].shape[d]);
        qp_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                      (unsigned long long)(at + bytes));
        at += bytes;
    }
    qp_buf_add(h, "}", 1);
    while (!h->oom && (8 + h->len) % 8)      /* a failed append adds nothing */
        qp_buf_add(h, " ", 1);
    return h->oom ? -1 : 0;
}

/* ----------------------------------------------------------------- output */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int emit(struct stw_writer *w, const uint8_t *p, size_t n, qp_err *err)
{
    if (write_all(w->fd, p, n)) {
        w->failed = 1;
        return qp_fail(err, "%s: write failed after %llu bytes: %s", w->path,
                       (unsigned long long)w->file_pos, strerror(errno ? errno : EIO));
    }
    w->file_pos += n;
    if (w->file_pos - w->writeback_pos >= STW_WRITEBACK_STEP) {
        sync_file_range(w->fd, (off64_t)w->writeback_pos,
                        (off64_t)(w->file_pos - w->writeback_pos), SYNC_FILE_RANGE_WRITE);
        w->writeback_pos = w->file_pos;
    }
    return 0;
}

static int flush(struct stw_writer *w, qp_err *err)
{
    int rc = w->fill ? emit(w, w->buf, w->fill, err) : 0;
    w->fill = 0;
    return rc;
}

static int put(struct stw_writer *w, const uint8_t *p, size_t n, qp_err *err)
{
    if (n >= STW_BUFFER)                              /* big block: skip the copy */
        return flush(w, err) || emit(w, p, n, err) ? -1 : 0;
    if (w->fill + n > STW_BUFFER && flush(w, err))
        return -1;
    memcpy(w->buf + w->fill, p, n);
    w->fill += n;
    return 0;
}

static void writer_free(struct stw_writer *w)
{
    for (uint32_t i = 0; w->names && i < w->n; i++)
        free(w->names[i]);
    free(w->names);
    free(w->ends);
    free(w->buf);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

void stw_abort(struct stw_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp_path);
    }
    writer_free(w);
}

static int writer_init(struct stw_writer *w, const char *path, const struct stw_tensor *t,
                       uint32_t n, qp_err *err)
{
    size_t plen = strlen(path);
    w->fd = -1;
    w->n = n;
    w->path = strdup(path);
    w->tmp_path = malloc(plen + sizeof(".tmp-XXXXXX"));
    w->names = calloc(n + 1, sizeof(*w->names));
    w->ends = calloc(n + 1, sizeof(*w->ends));
    w->buf = malloc(STW_BUFFER);
    if (!w->path || !w->tmp_path || !w->names || !w->ends || !w->buf)
        return qp_fail(err, "%s: out of memory", path);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t bytes = 0;
        tensor_bytes(&t[i], &bytes);
        w->total += bytes;
        w->ends[i] = w->total;
        if (!(w->names[i] = strdup(t[i].name)))
            return qp_fail(err, "%s: out of memory", path);
    }
    if (check_unique(w->names, n, path, err))
        return -1;
    memcpy(w->tmp_path, path, plen);
    memcpy(w->tmp_path + plen, ".tmp-XXXXXX", sizeof(".tmp-XXXXXX"));
    w->fd = mkstemp(w->tmp_path);
    if (w->fd < 0)
        return qp_fail(err, "%s: cannot create a temporary file next to it: %s", path,
                       strerror(errno));
    fchmod(w->fd, 0644);                              /* mkstemp makes it 0600 */
    return 0;
}

int stw_open(struct stw_writer **out, const char *path, const struct stw_tensor *tensors,
             uint32_t n, qp_err *err)
{
    *out = NULL;
    if (check_decls(tensors, n, path, err))
        return -1;
    struct stw_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return qp_fail(err, "%s: out of memory", path);
    if (writer_init(w, path, tensors, n, err)) {
        stw_abort(w);
        return -1;
    }
    struct qp_buf h = { 0 };
    uint8_t len_le[8];
    int rc = build_header(tensors, n, &h) ? qp_fail(err, "%s: out of memory for the header", path) : 0;
    for (int i = 0; i < 8; i++)
        len_le[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    if (rc == 0 && h.len > ST_MAX_HEADER_BYTES)
        rc = qp_fail(err, "%s: header of %zu bytes is above the readers' limit", path, h.len);
    if (rc == 0)
        rc = put(w, len_le, 8, err) || put(w, (const uint8_t *)h.s, h.len, err) ? -1 : 0;
    qp_buf_free(&h);
    if (rc) {
        stw_abort(w);
        return -1;
    }
    *out = w;
    return 0;
}

int stw_write(struct stw_writer *w, const void *bytes, size_t len, qp_err *err)
{
    if (w->failed)
        return qp_fail(err, "%s: writer already failed", w->path);
    if (len > w->total - w->written) {
        w->failed = 1;
        return qp_fail(err, "%s: %zu bytes written when only %llu of the declared %llu remain",
                       w->path, len, (unsigned long long)(w->total - w->written),
                       (unsigned long long)w->total);
    }
    if (put(w, bytes, len, err))
        return -1;
    w->written += len;
    return 0;
}

uint32_t stw_current(const struct stw_writer *w)
{
    uint32_t i = 0;
    while (i < w->n && w->ends[i] <= w->written)      /* zero-size tensors are done at once */
        i++;
    return i;
}

/* Makes the rename itself durable. */
static void sync_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
    int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int stw_finish(struct stw_writer *w, qp_err *err)
{
    int rc = 0;
    if (w->failed)
        rc = qp_fail(err, "%s: writer already failed", w->path);
    else if (w->written != w->total) {
        uint32_t i = stw_current(w);
        uint64_t begin = i ? w->ends[i - 1] : 0;
        rc = qp_fail(err, "%s: tensor \"%s\" got %llu of its %llu bytes (%llu of %llu bytes "
                     "written in all)", w->path, w->names[i],
                     (unsigned long long)(w->written - begin),
                     (unsigned long long)(w->ends[i] - begin),
                     (unsigned long long)w->written, (unsigned long long)w->total);
    }
    if (rc == 0 && flush(w, err))
        rc = -1;
    if (rc == 0 && fsync(w->fd) != 0)
        rc = qp_fail(err, "%s: fsync failed: %s", w->path, strerror(errno));
    if (rc) {
        stw_abort(w);
        return -1;
    }
    close(w->fd);
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0) {
        rc = qp_fail(err, "%s: rename from %s failed: %s", w->path, w->tmp_path, strerror(errno));
        unlink(w->tmp_path);
    } else {
        sync_parent_dir(w->path);
    }
    writer_free(w);
    return rc;
}
