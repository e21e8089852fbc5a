/* safetensors.c - a validating reader for Hugging Face safetensors files.
 *
 * Reading order: helpers -> one header (st_parse_buffer) -> one file
 * (st_open_file) -> lookups -> provenance. A sharded folder (st_open_dir)
 * is read in safetensors_index.c.
 * The rules a file must satisfy are listed in safetensors.h.
 */
#include "safetensors.h"
#include "safetensors_int.h"

#include "bf16.h"
#include "fsafe.h"
#include "gguf.h"
#include "json_strict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader hands it out in place"
#endif


/* ---------------------------------------------------------------- helpers */

/* every dtype with its ggml type */
static const uint32_t ggml_types[] = {
    [ST_BF16] = GGUF_BF16, [ST_F16] = GGUF_F16, [ST_F32] = GGUF_F32, [ST_Q8_0] = GGUF_Q8_0, [ST_Q4_0] = GGUF_Q4_0,
    [ST_Q4_1] = GGUF_Q4_1, [ST_Q4_K] = GGUF_Q4_K, [ST_Q5_K] = GGUF_Q5_K, [ST_Q6_K] = GGUF_Q6_K,
};

uint32_t st_dtype_ggml(enum st_dtype dt) { return (unsigned)dt < sizeof ggml_types / sizeof *ggml_types ? ggml_types[dt] : 0; }

int st_dtype_from_ggml(uint32_t type, enum st_dtype *dt)
{
    for (unsigned i = 0; i < sizeof ggml_types / sizeof *ggml_types; i++)
        if (ggml_types[i] == type && gguf_type_known(type)) {
            *dt = (enum st_dtype)i;
            return 1;
        }
    return 0;
}

size_t st_dtype_size(enum st_dtype dt)
{
    switch (dt) {
    case ST_BF16: return 2;
    case ST_F16:  return 2;
    case ST_F32:  return 4;
    default:      return 0;
    }
}

const char *st_dtype_name(enum st_dtype dt) { return gguf_type_name(st_dtype_ggml(dt)); }

uint32_t st_dtype_block(enum st_dtype dt) { return gguf_type_block(st_dtype_ggml(dt)); }

uint64_t st_bytes(enum st_dtype dt, uint64_t n)
{
    return n / st_dtype_block(dt) * gguf_type_block_bytes(st_dtype_ggml(dt));
}

static int dtype_from_name(const char *s, enum st_dtype *dt)
{
    static const enum st_dtype all[] = { ST_BF16, ST_F16, ST_F32 };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (strcmp(s, st_dtype_name(all[i])) == 0) {
            *dt = all[i];
            return 1;
        }
    }
    return 0;
}

static uint64_t read_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* UTF-8 as RFC 3629 defines it (no overlongs, surrogates or NUL); empty is valid. */
static int utf8_valid(const char *text, size_t len)
{
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; i < len;) {
        uint8_t c = s[i];
        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t extra = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2
                     : c >= 0xf0 && c <= 0xf4 ? 3 : 0;
        if (extra == 0 || len - i <= extra)
            return 0;
        uint8_t lo = 0x80, hi = 0xbf;                 /* allowed range of the 2nd byte */
        if (c == 0xe0) lo = 0xa0;                     /* overlong */
        if (c == 0xed) hi = 0x9f;                     /* UTF-16 surrogates */
        if (c == 0xf0) lo = 0x90;                     /* overlong */
        if (c == 0xf4) hi = 0x8f;                     /* above U+10FFFF */
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= extra; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
        i += extra + 1;
    }
    return 1;
}

int st_name_valid(const char *name, size_t len)
{
    return len > 0 && utf8_valid(name, len);
}

const char *st_show(const char *name, char out[ST_NAME_SHOWN])
{
    size_t n = 0;
    for (; name[n] && n < ST_NAME_SHOWN - 4; n++)
        out[n] = (unsigned char)name[n] < 0x20 || name[n] == 0x7f ? '?' : name[n];
    if (name[n])
        memcpy(out + n, "...", 3), n += 3;
    out[n] = 0;
    return out;
}

/* What a JSON value is, for messages: its number, or its kind. */
const char *st_describe(const cJSON *v, char out[48])
{
    if (cJSON_IsNumber(v))
        snprintf(out, 48, "%.17g", v->valuedouble);
    else
        snprintf(out, 48, "%s", cJSON_IsString(v) ? "a string" : cJSON_IsNull(v) ? "null"
                 : cJSON_IsBool(v) ? "a boolean" : cJSON_IsArray(v) ? "an array" : "an object");
    return out;
}

/* A whole JSON number in [0, 2^53]. */
static int json_count(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_JSON_INT) || d != floor(d))
        return 0;
    *out = (uint64_t)d;
    return 1;
}

char *st_join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

char *st_dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* ------------------------------------------------------------ one header */

/* A tensor's byte range in the data area, for the layout check. */
struct span {
    uint64_t begin, end;
    const char *name;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

/* By name, then file: duplicates across shards are reported in file order. */
int st_cmp_tensor_name_file(const void *a, const void *b)
{
    const struct st_tensor *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->file_index > y->file_index) - (x->file_index < y->file_index);
}

/* Reads the 8-byte header length and bounds it by the limit and the file. */
static int header_length(const uint8_t *buf, size_t len, const char *file, uint64_t *hlen,
                         qp_err *err)
{
    if (len == 0)
        return qp_fail(err, "%s: file is empty", file);
    if (len < 8)
        return qp_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length",
                       file, len);
    *hlen = read_le64(buf);
    if (*hlen > ST_MAX_HEADER_BYTES)
        return qp_fail(err, "%s: header length %llu exceeds the limit of %u bytes", file,
                       (unsigned long long)*hlen, ST_MAX_HEADER_BYTES);
    if (*hlen > len - 8)
        return qp_fail(err, "%s: header length %llu exceeds the file (%zu bytes after the "
                       "length field); truncated?", file, (unsigned long long)*hlen, len - 8);
    return 0;
}

/* Parses the header text into a JSON object. */
static cJSON *header_json(const uint8_t *hdr, size_t hlen, const char *file, qp_err *err)
{
    if (memchr(hdr, 0, hlen)) {
        qp_fail(err, "%s: header contains a NUL byte", file);
        return NULL;
    }
    if (!utf8_valid((const char *)hdr, hlen)) {
        qp_fail(err, "%s: header is not valid UTF-8", file);
        return NULL;
    }
    /* A NUL-terminated copy of the header (not of any tensor) for cJSON. */
    char *text = malloc(hlen + 1);
    if (!text) {
        qp_fail(err, "%s: out of memory for a %zu-byte header", file, hlen);
        return NULL;
    }
    memcpy(text, hdr, hlen);
    text[hlen] = 0;
    const char *end = text;
    cJSON *root = cJSON_ParseWithLengthOpts(text, hlen, &end, 0);
    size_t at = (size_t)(end - text);
    if (!root)
        qp_fail(err, "%s: header is not valid JSON (error near byte %zu)", file, at);
    else if (strspn(end, " \t\r\n") != hlen - at)
        qp_fail(err, "%s: header has bytes after its JSON value (at byte %zu)", file, at);
    else if (!cJSON_IsObject(root))
        qp_fail(err, "%s: header is not a JSON object", file);
    else if (json_has_escaped_nul(text, hlen))
        qp_fail(err, "%s: header contains an escaped NUL (\\u0000)", file);
    else {
        free(text);
        return root;
    }
    free(text);
    cJSON_Delete(root);
    return NULL;
}

static int check_metadata(const cJSON *meta, const char *file, qp_err *err)
{
    char nb[ST_NAME_SHOWN];
    if (!cJSON_IsObject(meta))
        return qp_fail(err, "%s: __metadata__ is not an object", file);
    for (const cJSON *kv = meta->child; kv; kv = kv->next)
        if (!cJSON_IsString(kv))
            return qp_fail(err, "%s: __metadata__ value \"%s\" is not a string", file,
                           st_show(kv->string, nb));
    return 0;
}

static int parse_shape(const cJSON *shape, const char *file, const char *tname,
                       struct st_tensor *t, qp_err *err)
{
    char vb[48];
    if (!shape)
        return qp_fail(err, "%s: tensor \"%s\" has no shape", file, tname);
    if (!cJSON_IsArray(shape))
        return qp_fail(err, "%s: tensor \"%s\": shape is %s, not an array", file, tname,
                       st_describe(shape, vb));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return qp_fail(err, "%s: tensor \"%s\": shape has %d dimensions, more than %d",
                       file, tname, ndim, ST_MAX_DIMS);
    t->ndim = (uint32_t)ndim;
    t->numel = 1;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        if (!json_count(d, &t->shape[i]))
            return qp_fail(err, "%s: tensor \"%s\": shape[%d] is %s, not a whole number "
                           "in [0, 2^53]", file, tname, i, st_describe(d, vb));
        if (__builtin_mul_overflow(t->numel, t->shape[i], &t->numel))
            return qp_fail(err, "%s: tensor \"%s\": shape has too many elements "
                           "(the product overflows 64 bits)", file, tname);
    }
    if (__builtin_mul_overflow(t->numel, (uint64_t)st_dtype_size(t->dtype), &t->nbytes))
        return qp_fail(err, "%s: tensor \"%s\": shape has too many bytes "
                       "(the size overflows 64 bits)", file, tname);
    return 0;
}

static int parse_offsets(const cJSON *offs, const char *file, const char *tname,
                         uint64_t data_len, struct span *sp, qp_err *err)
{
    char vb[48];
    if (!offs)
        return qp_fail(err, "%s: tensor \"%s\" has no data_offsets", file, tname);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return qp_fail(err, "%s: tensor \"%s\": data_offsets is not an array of two numbers",
                       file, tname);
    const cJSON *b = offs->child, *e = b->next;
    if (!json_count(b, &sp->begin))
        return qp_fail(err, "%s: tensor \"%s\": data_offsets begin is %s, not a whole number "
                       "in [0, 2^53]", file, tname, st_describe(b, vb));
    if (!json_count(e, &sp->end))
        return qp_fail(err, "%s: tensor \"%s\": data_offsets end is %s, not a whole number "
                       "in [0, 2^53]", file, tname, st_describe(e, vb));
    if (sp->begin > sp->end)
        return qp_fail(err, "%s: tensor \"%s\": data_offsets begin %llu is after end %llu",
                       file, tname, (unsigned long long)sp->begin, (unsigned long long)sp->end);
    if (sp->end > data_len)
        return qp_fail(err, "%s: tensor \"%s\": data_offsets end %llu is past the end of the "
                       "data area (%llu bytes); truncated?", file, tname,
                       (unsigned long long)sp->end, (unsigned long long)data_len);
    return 0;
}

/* Fills t (and its byte range sp) from one header entry. */
static int parse_tensor(const cJSON *entry, const char *file, uint64_t data_len,
                        struct st_tensor *t, struct span *sp, qp_err *err)
{
    char nb[ST_NAME_SHOWN], vb[ST_NAME_SHOWN];
    const char *key = entry->string;
    if (!st_name_valid(key, strlen(key)))
        return qp_fail(err, "%s: a tensor name is empty or not valid UTF-8", file);
    const char *tname = st_show(key, nb);
    if (!cJSON_IsObject(entry))
        return qp_fail(err, "%s: tensor \"%s\": entry is not an object", file, tname);

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!dtype)
        return qp_fail(err, "%s: tensor \"%s\" has no dtype", file, tname);
    if (!cJSON_IsString(dtype))
        return qp_fail(err, "%s: tensor \"%s\": dtype is not a string", file, tname);
    if (!dtype_from_name(dtype->valuestring, &t->dtype))
        return qp_fail(err, "%s: tensor \"%s\" has unsupported dtype %s (BF16, F16 and F32 "
                       "are read)", file, tname, st_show(dtype->valuestring, vb));

    if (parse_shape(cJSON_GetObjectItemCaseSensitive(entry, "shape"), file, tname, t, err) ||
        parse_offsets(cJSON_GetObjectItemCaseSensitive(entry, "data_offsets"), file, tname,
                      data_len, sp, err))
        return -1;
    if (sp->end - sp->begin != t->nbytes)
        return qp_fail(err, "%s: tensor \"%s\": %llu elements of %s need %llu bytes but "
                       "data_offsets span %llu", file, tname, (unsigned long long)t->numel,
                       st_dtype_name(t->dtype), (unsigned long long)t->nbytes,
                       (unsigned long long)(sp->end - sp->begin));
    t->name = st_dup_str(key);
    if (!t->name)
        return qp_fail(err, "%s: out of memory", file);
    sp->name = t->name;
    return 0;
}

/* Tensors must tile the data area: no overlap, no gap, nothing after. */
static int check_layout(struct span *sp, uint32_t n, uint64_t data_len, const char *file,
                        qp_err *err)
{
    char a[ST_NAME_SHOWN], b[ST_NAME_SHOWN];
    qsort(sp, n, sizeof(*sp), cmp_span);
    uint64_t at = 0;
    const struct span *prev = NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (sp[i].begin < at)
            return qp_fail(err, "%s: tensors \"%s\" (bytes %llu..%llu) and \"%s\" (bytes "
                           "%llu..%llu) overlap", file, st_show(prev->name, a),
                           (unsigned long long)prev->begin, (unsigned long long)prev->end,
                           st_show(sp[i].name, b), (unsigned long long)sp[i].begin,
                           (unsigned long long)sp[i].end);
        if (sp[i].begin > at)
            return qp_fail(err, "%s: gap of %llu unused bytes before tensor \"%s\" (data "
                           "bytes %llu..%llu); tensors must be contiguous", file,
                           (unsigned long long)(sp[i].begin - at), st_show(sp[i].name, a),
                           (unsigned long long)at, (unsigned long long)sp[i].begin);
        at = sp[i].end;
        prev = &sp[i];
    }
    if (at != data_len)
        return qp_fail(err, "%s: %llu trailing bytes after the last tensor (tensors end at "
                       "data byte %llu, the data area has %llu)", file,
                       (unsigned long long)(data_len - at), (unsigned long long)at,
                       (unsigned long long)data_len);
    return 0;
}

static int check_unique(const struct st_tensor *t, uint32_t n, const char *file, qp_err *err)
{
    char nb[ST_NAME_SHOWN];
    for (uint32_t i = 1; i < n; i++)
        if (strcmp(t[i - 1].name, t[i].name) == 0)
            return qp_fail(err, "%s: tensor \"%s\" appears twice in the header", file,
                           st_show(t[i].name, nb));
    return 0;
}

/* Turns the header object into tensors pointing into data. */
static int collect_tensors(const cJSON *root, const uint8_t *data, uint64_t data_len,
                           const char *file, uint32_t file_index, struct st_tensor **out,
                           uint32_t *n_out, qp_err *err)
{
    uint32_t n = 0, n_meta = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0)
            n_meta++;
        else
            n++;
    }
    if (n_meta > 1)
        return qp_fail(err, "%s: __metadata__ appears twice in the header", file);
    struct st_tensor *t = calloc(n + 1, sizeof(*t));
    struct span *sp = calloc(n + 1, sizeof(*sp));
    if (!t || !sp) {
        free(t), free(sp);
        return qp_fail(err, "%s: out of memory for %u tensors", file, n);
    }
    uint32_t i = 0;
    int rc = 0;
    for (const cJSON *e = root->child; e && rc == 0; e = e->next) {
        /* a field twice in an entry: the Rust reader refuses it too */
        if (json_refuse_duplicate_keys(e, file, err)) {
            rc = -1;
            break;
        }
        if (strcmp(e->string, "__metadata__") == 0) {
            rc = check_metadata(e, file, err);
            continue;
        }
        rc = parse_tensor(e, file, data_len, &t[i], &sp[i], err);
        t[i].data = data + sp[i].begin;
        t[i].file_index = file_index;
        i++;
    }
    if (rc == 0)
        rc = check_layout(sp, n, data_len, file, err);
    if (rc == 0) {
        qsort(t, n, sizeof(*t), cmp_tensor_name);
        rc = check_unique(t, n, file, err);
    }
    free(sp);
    if (rc) {
        st_free_tensors(t, n);
        return -1;
    }
    *out = t;
    *n_out = n;
    return 0;
}

int st_parse_buffer(const uint8_t *buf, size_t len, const char *name, uint32_t file_index,
                    struct st_tensor **tensors, uint32_t *n_tensors, qp_err *err)
{
    uint64_t hlen = 0;
    *tensors = NULL;
    *n_tensors = 0;
    if (header_length(buf, len, name, &hlen, err))
        return -1;
    cJSON *root = header_json(buf + 8, (size_t)hlen, name, err);
    if (!root)
        return -1;
    int rc = collect_tensors(root, buf + 8 + hlen, len - 8 - hlen, name, file_index,
                             tensors, n_tensors, err);
    cJSON_Delete(root);
    return rc;
}

void st_free_tensors(struct st_tensor *tensors, uint32_t n)
{
    if (!tensors)
        return;
    for (uint32_t i = 0; i < n; i++)
        free(tensors[i].name);
    free(tensors);
}

/* --------------------------------------------------------------- one file */

/* Maps f->path whole, read-only; the file must be a regular file. */
int st_mmap_path(struct st_file *f, qp_err *err)
{
    struct stat st;
    int fd = fs_open_input(f->path, &st, err);
    if (fd < 0)
        return -1;
    f->size = (uint64_t)st.st_size;
    if (f->size == 0) {                               /* mmap refuses length 0 */
        close(fd);
        return qp_fail(err, "%s: file is empty", f->path);
    }
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return qp_fail(err, "%s: mmap of %llu bytes failed: %s", f->path,
                       (unsigned long long)f->size, strerror(map_errno));
    f->map = map;
    return 0;
}

static int init_file(struct st_file *f, const char *path, const char *name, qp_err *err)
{
    f->path = st_dup_str(path);
    f->name = st_dup_str(name);
    if (!f->path || !f->name)
        return qp_fail(err, "%s: out of memory", path);
    return 0;
}

int st_file_map(struct st_file *f, const char *path, const char *name, qp_err *err)
{
    return init_file(f, path, name, err) || st_mmap_path(f, err) ? -1 : 0;
}

int st_open_file(struct st_model *m, const char *path, qp_err *err)
{
    memset(m, 0, sizeof(*m));
    const char *slash = strrchr(path, '/');
    m->files = calloc(1, sizeof(*m->files));
    if (!m->files)
        return qp_fail(err, "%s: out of memory", path);
    m->n_files = 1;
    struct st_file *f = &m->files[0];
    if (init_file(f, path, slash ? slash + 1 : path, err) || st_mmap_path(f, err) ||
        st_parse_buffer(f->map, f->size, f->path, 0, &m->tensors, &m->n_tensors, err)) {
        st_close(m);
        return -1;
    }
    return 0;
}

void st_close(struct st_model *m)
{
    for (uint32_t i = 0; m->files && i < m->n_files; i++) {
        if (m->files[i].map)
            munmap(m->files[i].map, m->files[i].size);
        free(m->files[i].path);
        free(m->files[i].name);
    }
    free(m->files);
    st_free_tensors(m->tensors, m->n_tensors);
    free(m->index_path);
    memset(m, 0, sizeof(*m));
}

/* ----------------------------------------------------------------- lookups */

const struct st_tensor *st_find(const struct st_model *m, const char *name)
{
    struct st_tensor key = { .name = (char *)name };
    return bsearch(&key, m->tensors, m->n_tensors, sizeof(key), cmp_tensor_name);
}

float st_get_f32(const struct st_tensor *t, uint64_t i)
{
    uint16_t h;
    float f;
    switch (t->dtype) {
    case ST_BF16:
        memcpy(&h, t->data + 2 * i, 2);
        return qp_bf16_to_f32(h);
    case ST_F16:
        memcpy(&h, t->data + 2 * i, 2);
        return qp_f16_to_f32(h);
    case ST_F32:
        memcpy(&f, t->data + 4 * i, 4);             /* data may be unaligned */
        return f;
    default: {
        float block[256];
        uint64_t b = i / st_dtype_block(t->dtype);
        gguf_dequantize(st_dtype_ggml(t->dtype), t->data + st_bytes(t->dtype, b * st_dtype_block(t->dtype)),
                        st_dtype_block(t->dtype), block);
        return block[i % st_dtype_block(t->dtype)];
    }
    }
}

/* 128-bit vectors for the whole-row helpers below (every x86-64 has them) */
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef int16_t v8i16 __attribute__((vector_size(16)));

/* n BF16 values to float: a BF16 is the top half of a float32, so 8 at a
 * time each is interleaved with a zero low half */
static void bf16_to_f32(const uint8_t *src, uint64_t n, float *out)
{
    uint64_t i = 0;
    const v8u16 zero = {0};
    for (; i + 8 <= n; i += 8) {
        v8u16 h, lo, hi;
        memcpy(&h, src + 2 * i, sizeof h);
        lo = __builtin_shufflevector(zero, h, 0, 8, 1, 9, 2, 10, 3, 11);
        hi = __builtin_shufflevector(zero, h, 4, 12, 5, 13, 6, 14, 7, 15);
        memcpy(out + i, &lo, sizeof lo);
        memcpy(out + i + 4, &hi, sizeof hi);
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        out[i] = qp_bf16_to_f32(h);
    }
}

void st_read_f32(const struct st_tensor *t, uint64_t first, uint64_t n, float *out)
{
    const uint8_t *src = t->data + st_bytes(t->dtype, first);
    switch (t->dtype) {
    case ST_BF16:
        bf16_to_f32(src, n, out);
        return;
    case ST_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = qp_f16_to_f32(h);
        }
        return;
    case ST_F32:
        memcpy(out, src, n * 4);                    /* data may be unaligned */
        return;
    default:
        gguf_dequantize(st_dtype_ggml(t->dtype), src, n, out);
        return;
    }
}

/* Largest magnitude pattern (bits & 0x7fff) of 16-bit floats, NaNs (patterns
 * above inf) skipped: for these formats the magnitude order is the order of
 * the patterns, and below 0x8000 it is also their order as int16. */
static uint16_t max_mag16(const uint8_t *data, uint64_t n, uint16_t inf)
{
    const v8i16 mask = (v8i16){0} + 0x7fff, vinf = (v8i16){0} + (int16_t)inf;
    v8i16 best = {0};
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8i16 h;
        memcpy(&h, data + 2 * i, sizeof h);
        h &= mask;
        v8i16 take = (h > best) & (h <= vinf);
        best = (take & h) | (~take & best);
    }
    uint16_t top = 0;
    for (int k = 0; k < 8; k++)
        top = (uint16_t)best[k] > top ? (uint16_t)best[k] : top;
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, data + 2 * i, 2);
        h &= 0x7fff;
        top = h > top && h <= inf ? h : top;
    }
    return top;
}

double st_max_abs(const struct st_tensor *t, uint64_t first, uint64_t n)
{
    switch (t->dtype) {
    case ST_BF16: return qp_bf16_to_f32(max_mag16(t->data + 2 * first, n, 0x7f80));
    case ST_F16: return qp_f16_to_f32(max_mag16(t->data + 2 * first, n, 0x7c00));
    default: break;
    }
    double best = 0;
    uint32_t blk = st_dtype_block(t->dtype);
    if (blk > 1) {
        float v[256];
        for (uint64_t i = first; i < first + n; i += blk) {
            st_read_f32(t, i, blk, v);
            for (uint32_t k = 0; k < blk; k++)
                best = fmax(best, fabs((double)v[k]));
        }
        return best;
    }
    for (uint64_t i = first; i < first + n; i++)
        best = fmax(best, fabs((double)st_get_f32(t, i)));
    return best;
}

/* What a reader lets go is widened to whole ST_RELEASE_ALIGN blocks of the
 * file: a fault maps the whole large folio of the page cache around the page
 * it needs (up to 2 MB), so releasing only a small tensor's own pages would
 * leave its neighbours' mapped (~100 MB over a Qwen3-0.6B pack). Releasing
 * more is harmless: the read-only private mapping refaults from the page
 * cache. */
#define ST_RELEASE_ALIGN ((uint64_t)2 << 20)

void st_release_part(const struct st_model *m, const struct st_tensor *t, uint64_t first, uint64_t n)
{
    if (n == 0 || first >= t->numel || t->file_index >= m->n_files)
        return;
    n = n > t->numel - first ? t->numel - first : n;
    const struct st_file *f = &m->files[t->file_index];
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t begin = (uint64_t)(t->data - f->map) + st_bytes(t->dtype, first);
    uint64_t end = begin + st_bytes(t->dtype, n + st_dtype_block(t->dtype) - 1);
    uint64_t limit = (f->size + page - 1) & ~(page - 1);
    begin &= ~(ST_RELEASE_ALIGN - 1);
    end = (end + ST_RELEASE_ALIGN - 1) & ~(ST_RELEASE_ALIGN - 1);
    madvise(f->map + begin, (end < limit ? end : limit) - begin, MADV_DONTNEED);
}

void st_release(const struct st_model *m, const struct st_tensor *t)
{
    st_release_part(m, t, 0, t->numel);
}

/* -------------------------------------------------------------- provenance */

uint32_t st_list_sources(const struct st_model *m, struct st_source *out, uint32_t cap)
{
    uint32_t n = 0;
    if (m->index_path) {
        if (n < cap) {
            const char *slash = strrchr(m->index_path, '/');
            out[n] = (struct st_source){ m->index_path, slash ? slash + 1 : m->index_path,
                                         m->index_size };
        }
        n++;
    }
    for (uint32_t i = 0; i < m->n_files; i++, n++)
        if (n < cap)
            out[n] = (struct st_source){ m->files[i].path, m->files[i].name, m->files[i].size };
    return n;
}

int st_file_xxh3(const char *path, uint64_t *hash, uint64_t *size, qp_err *err)
{
    int fd = fs_open_input(path, NULL, err);
    if (fd < 0)
        return -1;
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint8_t *buf = malloc(ST_HASH_CHUNK);
    XXH3_state_t *state = XXH3_createState();
    uint64_t total = 0;
    int rc = buf && state && XXH3_64bits_reset(state) == XXH_OK ? 0
           : qp_fail(err, "%s: out of memory for hashing", path);
    while (rc == 0) {
        ssize_t r = read(fd, buf, ST_HASH_CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = qp_fail(err, "%s: read failed at byte %llu: %s", path,
                         (unsigned long long)total, strerror(errno));
        if (r <= 0)
            break;
        XXH3_64bits_update(state, buf, (size_t)r);
        total += (uint64_t)r;
    }
    if (rc == 0 && hash)
        *hash = XXH3_64bits_digest(state);
    if (rc == 0 && size)
        *size = total;
    XXH3_freeState(state);
    free(buf);
    close(fd);
    return rc;
}
