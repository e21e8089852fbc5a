/* gguf.c - the bounded GGUF reader (gguf.h): a cursor over one part's
 * bytes that refuses to read past the end, the metadata and tensor infos
 * checked as they are read, then the tensors' layout, then the parts of a
 * split file. */
#include "gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "le.h"

#define GGUF_MAGIC "GGUF"

/* what remains of one part */
struct cursor {
    const uint8_t *buf;
    size_t len, at;
    const char *name;
};

static int need(struct cursor *c, uint64_t n, const char *what, qp_err *err)
{
    if (n > c->len - c->at)
        return qp_fail(err, "%s: %s at byte %zu needs %" PRIu64 " bytes, %zu remain", c->name, what, c->at, n,
                       c->len - c->at);
    return 0;
}

static int get_u32(struct cursor *c, uint32_t *v, const char *what, qp_err *err)
{
    if (need(c, 4, what, err))
        return -1;
    *v = le32(c->buf + c->at);
    c->at += 4;
    return 0;
}

static int get_u64(struct cursor *c, uint64_t *v, const char *what, qp_err *err)
{
    if (need(c, 8, what, err))
        return -1;
    *v = le64(c->buf + c->at);
    c->at += 8;
    return 0;
}

/* a string: its bytes stay in the buffer */
static int get_str(struct cursor *c, const uint8_t **s, uint64_t *n, const char *what, qp_err *err)
{
    if (get_u64(c, n, what, err) || need(c, *n, what, err))
        return -1;
    *s = c->buf + c->at;
    c->at += *n;
    return 0;
}

static const uint8_t value_sizes[GGUF_V_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_value_type_name(uint32_t type)
{
    static const char *const names[GGUF_V_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                    "bool", "string", "array", "u64", "i64", "f64"};
    return type < GGUF_V_COUNT ? names[type] : "unknown type";
}

/* A key or a tensor name: non-empty, printable ASCII, at most max bytes;
 * its bytes stay in the buffer. */
static int get_name_bytes(struct cursor *c, const uint8_t **s, uint64_t *n, uint64_t max, const char *what,
                          qp_err *err)
{
    if (get_str(c, s, n, what, err))
        return -1;
    if (*n == 0 || *n > max)
        return qp_fail(err, "%s: a %s of %" PRIu64 " bytes at byte %zu (1..%" PRIu64 " allowed)", c->name, what,
                       *n, c->at - *n, max);
    for (uint64_t i = 0; i < *n; i++)
        if ((*s)[i] < 0x20 || (*s)[i] > 0x7e)
            return qp_fail(err, "%s: a %s at byte %zu holds byte 0x%02x (printable ASCII only)", c->name, what,
                           c->at - *n, (*s)[i]);
    return 0;
}

/* a tensor name, into out of cap bytes (the NUL included) */
static int get_name(struct cursor *c, char *out, size_t cap, const char *what, qp_err *err)
{
    const uint8_t *s;
    uint64_t n;
    if (get_name_bytes(c, &s, &n, cap - 1, what, err))
        return -1;
    memcpy(out, s, n);
    out[n] = 0;
    return 0;
}

/* One value of a scalar or string type; a bool must be 0 or 1. */
static int skip_value(struct cursor *c, uint32_t type, const char *key, qp_err *err)
{
    if (type == GGUF_V_STRING) {
        const uint8_t *s;
        uint64_t n;
        return get_str(c, &s, &n, key, err);
    }
    if (need(c, value_sizes[type], key, err))
        return -1;
    if (type == GGUF_V_BOOL && c->buf[c->at] > 1)
        return qp_fail(err, "%s: key %s: a bool of %u", c->name, key, c->buf[c->at]);
    c->at += value_sizes[type];
    return 0;
}

static int parse_kv(struct cursor *c, struct gguf_kv *kv, qp_err *err)
{
    const uint8_t *s;
    uint64_t n;
    if (get_name_bytes(c, &s, &n, GGUF_MAX_KEY, "metadata key", err))
        return -1;
    if (!(kv->key = malloc(n + 1)))
        return qp_fail(err, "out of memory");
    memcpy(kv->key, s, n); /* not strndup: the bytes are not NUL-terminated */
    kv->key[n] = 0;
    const char *key = kv->key;
    if (get_u32(c, &kv->type, key, err))
        return -1;
    if (kv->type >= GGUF_V_COUNT)
        return qp_fail(err, "%s: key %s has value type %u (0..12 exist)", c->name, key, kv->type);
    kv->count = 1;
    if (kv->type == GGUF_V_ARRAY) {
        if (get_u32(c, &kv->elem_type, key, err) || get_u64(c, &kv->count, key, err))
            return -1;
        if (kv->elem_type >= GGUF_V_COUNT || kv->elem_type == GGUF_V_ARRAY)
            return qp_fail(err, "%s: key %s is an array of %s (arrays of arrays are not read)", c->name, key,
                           gguf_value_type_name(kv->elem_type));
        /* a count no bigger than the bytes left, before the loop */
        uint64_t least = kv->elem_type == GGUF_V_STRING ? 8 : value_sizes[kv->elem_type];
        if (kv->count > (c->len - c->at) / least)
            return qp_fail(err, "%s: key %s: an array of %" PRIu64 " %s does not fit in the %zu bytes left",
                           c->name, key, kv->count, gguf_value_type_name(kv->elem_type), c->len - c->at);
    }
    size_t start = c->at;
    if (kv->type == GGUF_V_STRING) {
        uint64_t n;
        if (get_u64(c, &n, key, err) || need(c, n, key, err))
            return -1;
        start = c->at;
        c->at += n;
    } else if (kv->type == GGUF_V_ARRAY) {
        for (uint64_t i = 0; i < kv->count; i++)
            if (skip_value(c, kv->elem_type, key, err))
                return -1;
    } else if (skip_value(c, kv->type, key, err)) {
        return -1;
    }
    kv->data = c->buf + start;
    kv->bytes = c->at - start;
    return 0;
}

static int parse_tensor_info(struct cursor *c, struct gguf_tensor *t, uint64_t *offset, qp_err *err)
{
    if (get_name(c, t->name, sizeof t->name, "tensor name", err) || get_u32(c, &t->n_dims, t->name, err))
        return -1;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return qp_fail(err, "%s: tensor %s has %u dimensions (1..%d)", c->name, t->name, t->n_dims, GGUF_MAX_DIMS);
    t->numel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && get_u64(c, &t->ne[d], t->name, err))
            return -1;
        if (t->ne[d] == 0 || t->ne[d] > (UINT64_C(1) << 40) || t->numel > (UINT64_C(1) << 62) / t->ne[d])
            return qp_fail(err, "%s: tensor %s: dimension %u of %" PRIu64 " (1..2^40, product below 2^62)",
                           c->name, t->name, d, t->ne[d]);
        t->numel *= t->ne[d];
    }
    if (get_u32(c, &t->type, t->name, err) || get_u64(c, offset, t->name, err))
        return -1;
    if (!gguf_type_known(t->type))
        return qp_fail(err, "%s: tensor %s has ggml type %s, which qpack does not read (it reads F32, F16, BF16, "
                       "Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K)", c->name, t->name, gguf_type_name(t->type));
    uint32_t blk = gguf_type_block(t->type);
    if (t->ne[0] % blk)
        return qp_fail(err, "%s: tensor %s is %s with %" PRIu64 " columns, not a multiple of its %u-element "
                       "blocks", c->name, t->name, gguf_type_name(t->type), t->ne[0], blk);
    /* the bytes bounded like the elements: an F32 tensor of 2^62 elements
     * would be 2^64 bytes, which wraps to 0 */
    uint64_t blocks = t->numel / blk, block_bytes = gguf_type_block_bytes(t->type);
    if (blocks > (UINT64_C(1) << 62) / block_bytes)
        return qp_fail(err, "%s: tensor %s: %" PRIu64 " elements of %s take 2^62 bytes or more", c->name, t->name,
                       t->numel, gguf_type_name(t->type));
    t->nbytes = blocks * block_bytes;
    return 0;
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const struct gguf_kv *)a)->key, ((const struct gguf_kv *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const struct gguf_tensor *const *)a)[0]->name, ((const struct gguf_tensor *const *)b)[0]->name);
}

/* tensor data, sorted by where it starts */
struct span {
    uint64_t begin, end;
    const char *name;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static void free_kv(struct gguf_kv *kv, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(kv[i].key);
    free(kv);
}

static int read_kvs(struct cursor *c, uint64_t n_kv, struct gguf_kv **out, qp_err *err)
{
    struct gguf_kv *kv = calloc(n_kv ? n_kv : 1, sizeof *kv);
    if (!kv)
        return qp_fail(err, "out of memory");
    uint32_t done = 0;
    int rc = 0;
    for (; done < n_kv && !rc; done++)
        rc = parse_kv(c, &kv[done], err); /* a failed entry's key is freed with the rest */
    if (!rc) {
        qsort(kv, done, sizeof *kv, cmp_kv);
        for (uint32_t i = 1; i < done && !rc; i++)
            if (!strcmp(kv[i].key, kv[i - 1].key))
                rc = qp_fail(err, "%s: key %s appears twice", c->name, kv[i].key);
    }
    if (rc) {
        free_kv(kv, done);
        return -1;
    }
    *out = kv;
    return 0;
}

static const struct gguf_kv *find_in(const struct gguf_kv *kv, uint32_t n, const char *key)
{
    struct gguf_kv probe = {.key = (char *)key};
    return bsearch(&probe, kv, n, sizeof *kv, cmp_kv);
}

/* general.alignment: a u32 power of two */
static int alignment_of(const struct gguf_kv *kv, uint32_t n, const char *name, uint64_t *align, qp_err *err)
{
    const struct gguf_kv *a = find_in(kv, n, "general.alignment");
    *align = GGUF_DEFAULT_ALIGNMENT;
    if (!a)
        return 0;
    if (a->type != GGUF_V_U32)
        return qp_fail(err, "%s: key general.alignment is %s, not u32", name, gguf_value_type_name(a->type));
    *align = le32(a->data);
    if (*align == 0 || (*align & (*align - 1)) || *align > (1u << 20))
        return qp_fail(err, "%s: general.alignment %" PRIu64 " is not a power of two up to 2^20", name, *align);
    return 0;
}

/* every tensor aligned, inside the data region, none overlapping */
static int check_layout(struct span *sp, uint32_t n, uint64_t data_len, uint64_t align, const char *name, qp_err *err)
{
    for (uint32_t i = 0; i < n; i++) {
        if (sp[i].begin % align)
            return qp_fail(err, "%s: tensor %s at data offset %" PRIu64 " is not aligned to %" PRIu64, name,
                           sp[i].name, sp[i].begin, align);
        if (sp[i].begin > data_len || sp[i].end - sp[i].begin > data_len - sp[i].begin)
            return qp_fail(err, "%s: tensor %s (data bytes %" PRIu64 "..%" PRIu64 ") ends past the file's %" PRIu64
                           " bytes of data", name, sp[i].name, sp[i].begin, sp[i].end, data_len);
    }
    qsort(sp, n, sizeof *sp, cmp_span);
    for (uint32_t i = 1; i < n; i++)
        if (sp[i].begin < sp[i - 1].end)
            return qp_fail(err, "%s: tensors %s and %s overlap", name, sp[i - 1].name, sp[i].name);
    return 0;
}

static int parse_tensors(struct gguf *g, struct cursor *c, uint64_t n_tensors, uint64_t align, uint32_t file,
                         qp_err *err)
{
    if (n_tensors > GGUF_MAX_TENSORS - g->n_tensors)
        return qp_fail(err, "%s: %" PRIu64 " tensors (at most %u in all parts)", c->name, n_tensors, GGUF_MAX_TENSORS);
    struct gguf_tensor *all = realloc(g->tensors, (g->n_tensors + n_tensors + 1) * sizeof *all);
    struct span *sp = calloc(n_tensors + 1, sizeof *sp);
    if (all)
        g->tensors = all;
    if (!all || !sp) {
        free(sp);
        return qp_fail(err, "out of memory");
    }
    struct gguf_tensor *t = all + g->n_tensors;
    memset(t, 0, n_tensors * sizeof *t);
    int rc = 0;
    for (uint64_t i = 0; i < n_tensors && !rc; i++) {
        rc = parse_tensor_info(c, &t[i], &t[i].offset, err);
        t[i].file = file;
        if (!rc && t[i].offset > (UINT64_C(1) << 62))
            rc = qp_fail(err, "%s: tensor %s at data offset %" PRIu64, c->name, t[i].name, t[i].offset);
        sp[i] = (struct span){t[i].offset, t[i].offset + t[i].nbytes, t[i].name};
    }
    uint64_t data_at = (c->at + align - 1) / align * align;
    if (!rc && data_at > c->len)
        rc = qp_fail(err, "%s: the data region (at byte %" PRIu64 ") starts past the end of the file", c->name, data_at);
    if (!rc)
        rc = check_layout(sp, (uint32_t)n_tensors, c->len - data_at, align, c->name, err);
    for (uint64_t i = 0; !rc && i < n_tensors; i++)
        t[i].data = c->buf + data_at + t[i].offset;
    free(sp);
    if (!rc)
        g->n_tensors += (uint32_t)n_tensors;
    return rc;
}

static int check_unique_names(struct gguf *g, const char *name, qp_err *err)
{
    const struct gguf_tensor **by = malloc((g->n_tensors + 1) * sizeof *by);
    if (!by)
        return qp_fail(err, "out of memory");
    for (uint32_t i = 0; i < g->n_tensors; i++)
        by[i] = &g->tensors[i];
    qsort(by, g->n_tensors, sizeof *by, cmp_tensor_name);
    int rc = 0;
    for (uint32_t i = 1; i < g->n_tensors && !rc; i++)
        if (!strcmp(by[i]->name, by[i - 1]->name))
            rc = qp_fail(err, "%s: tensor %s appears twice", name, by[i]->name);
    free(by);
    return rc;
}

/* an integer value; *too_big for a u64 past INT64_MAX */
static int64_t scalar_int(uint32_t type, const uint8_t *p, bool *too_big)
{
    *too_big = false;
    switch (type) {
    case GGUF_V_U8: return p[0];
    case GGUF_V_I8: return (int8_t)p[0];
    case GGUF_V_U16: return le16(p);
    case GGUF_V_I16: return (int16_t)le16(p);
    case GGUF_V_U32: return le32(p);
    case GGUF_V_I32: return (int32_t)le32(p);
    case GGUF_V_U64: *too_big = le64(p) > INT64_MAX; return (int64_t)(le64(p) & INT64_MAX);
    default: return (int64_t)le64(p);
    }
}

/* an integer key of one part's metadata: 1 when present, 0 when absent */
static int part_int(const struct gguf_kv *kv, uint32_t n, const char *key, const char *name, int64_t *v, qp_err *err)
{
    const struct gguf_kv *e = find_in(kv, n, key);
    if (!e)
        return 0;
    bool too_big;
    if (e->type != GGUF_V_U16 && e->type != GGUF_V_I32 && e->type != GGUF_V_U32)
        return qp_fail(err, "%s: key %s is %s, not u16, u32 or i32", name, key, gguf_value_type_name(e->type));
    *v = scalar_int(e->type, e->data, &too_big);
    return 1;
}

/* A later part of a split file says which it is (split.no, a u16) and
 * agrees with the first part on the split's counts. */
static int check_part(const struct gguf *g, const struct gguf_kv *kv, uint32_t n, const char *name, uint32_t file,
                      qp_err *err)
{
    const struct gguf_kv *no = find_in(kv, n, "split.no");
    if (!no || no->type != GGUF_V_U16)
        return qp_fail(err, "%s: part %u of a split GGUF has no u16 split.no", name, file + 1);
    if (le16(no->data) != file)
        return qp_fail(err, "%s: split.no is %u where part %u was expected", name, le16(no->data) + 1, file + 1);
    static const char *const counts[] = {"split.count", "split.tensors.count"};
    for (int k = 0; k < 2; k++) {
        int64_t first = 0, here = 0;
        int in_first = part_int(g->kv, g->n_kv, counts[k], g->name, &first, err);
        int in_part = part_int(kv, n, counts[k], name, &here, err);
        if (in_first < 0 || in_part < 0)
            return -1;
        if (in_first != in_part)
            return qp_fail(err, "%s: %s is %s here and %s in the first part", name, counts[k],
                           in_part ? "present" : "absent", in_first ? "present" : "absent");
        if (first != here)
            return qp_fail(err, "%s: %s is %" PRId64 " where the first part's is %" PRId64, name, counts[k], here,
                           first);
    }
    return 0;
}

int gguf_parse(struct gguf *g, const uint8_t *buf, size_t len, const char *name, uint32_t file, qp_err *err)
{
    struct cursor c = {buf, len, 0, name};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (len < 4 || memcmp(buf, GGUF_MAGIC, 4))
        return qp_fail(err, "%s: not a GGUF file (it does not start with \"GGUF\")", name);
    c.at = 4;
    if (get_u32(&c, &version, "version", err))
        return -1;
    if (version != 2 && version != 3)
        return qp_fail(err, "%s: GGUF version %u (qpack reads versions 2 and 3)", name, version);
    if (get_u64(&c, &n_tensors, "tensor count", err) || get_u64(&c, &n_kv, "key count", err))
        return -1;
    if (n_kv > GGUF_MAX_KV)
        return qp_fail(err, "%s: %" PRIu64 " metadata keys (at most %u)", name, n_kv, GGUF_MAX_KV);
    /* each key takes at least 12 bytes, each tensor info 24 */
    if (n_kv > (len - c.at) / 12 || n_tensors > (len - c.at) / 24)
        return qp_fail(err, "%s: %" PRIu64 " keys and %" PRIu64 " tensors do not fit in %zu bytes", name, n_kv,
                       n_tensors, len);
    struct gguf_kv *kv = NULL;
    if (read_kvs(&c, n_kv, &kv, err))
        return -1;
    uint64_t align;
    int rc = alignment_of(kv, (uint32_t)n_kv, name, &align, err);
    uint32_t first = g->n_tensors;
    if (!rc)
        rc = parse_tensors(g, &c, n_tensors, align, file, err);
    if (!rc)
        rc = check_unique_names(g, name, err);
    if (!rc && file != 0)
        rc = check_part(g, kv, (uint32_t)n_kv, name, file, err);
    if (rc || file != 0) {
        g->n_tensors = rc ? first : g->n_tensors;
        free_kv(kv, (uint32_t)n_kv);
        return rc;
    }
    g->version = version;
    g->kv = kv;
    g->n_kv = (uint32_t)n_kv;
    return 0;
}

void gguf_close(struct gguf *g)
{
    for (uint32_t i = 0; g->files && i < g->n_files; i++) {
        if (g->files[i].map)
            munmap(g->files[i].map, g->files[i].size);
        free(g->files[i].path);
        free(g->files[i].name);
    }
    free(g->files);
    free(g->name);
    free_kv(g->kv, g->n_kv);
    free(g->tensors);
    memset(g, 0, sizeof *g);
}

/* "NAME-00001-of-00003.gguf": the parts' count and where "00001" starts */
static uint32_t split_parts(const char *path, size_t *digits_at)
{
    size_t n = strlen(path);
    static const char tail[] = "-00001-of-NNNNN.gguf";
    if (n < sizeof tail - 1 || strcmp(path + n - 5, ".gguf") || strncmp(path + n - 20, "-00001-of-", 10))
        return 0;
    uint32_t parts = 0;
    for (size_t i = n - 10; i < n - 5; i++) {
        if (path[i] < '0' || path[i] > '9')
            return 0;
        parts = parts * 10 + (uint32_t)(path[i] - '0');
    }
    *digits_at = n - 19;
    return parts;
}

static int open_part(struct gguf *g, const char *path, uint32_t file, qp_err *err)
{
    struct st_file *f = &g->files[file];
    const char *slash = strrchr(path, '/');
    g->n_files = file + 1;
    if (st_file_map(f, path, slash ? slash + 1 : path, err))
        return -1;
    return gguf_parse(g, f->map, f->size, f->path, file, err);
}

int gguf_open(struct gguf *g, const char *path, qp_err *err)
{
    memset(g, 0, sizeof *g);
    size_t digits_at = 0;
    uint32_t parts = split_parts(path, &digits_at);
    if (parts > GGUF_MAX_SPLITS)
        return qp_fail(err, "%s: split into %u parts (at most %u)", path, parts, GGUF_MAX_SPLITS);
    g->files = calloc(parts ? parts : 1, sizeof *g->files);
    g->name = strdup(path);
    char *part = strdup(path);
    int rc = g->files && g->name && part ? open_part(g, path, 0, err) : qp_fail(err, "out of memory");
    uint32_t count = 1;
    if (!rc && gguf_get_u32(g, "split.count", true, &count, err) < 0)
        rc = -1;
    if (!rc && count != (parts ? parts : 1))
        rc = qp_fail(err, "%s: split.count says %u part(s), the file name %u", path, count, parts ? parts : 1);
    for (uint32_t i = 1; !rc && i < parts; i++) {
        char no[8];
        snprintf(no, sizeof no, "%05u", i + 1);
        memcpy(part + digits_at, no, 5);
        rc = open_part(g, part, i, err);
    }
    free(part);
    int64_t tensors = 0;
    if (!rc && part_int(g->kv, g->n_kv, "split.tensors.count", g->name, &tensors, err) < 0)
        rc = -1;
    else if (!rc && gguf_find_kv(g, "split.tensors.count") && tensors != g->n_tensors)
        rc = qp_fail(err, "%s: split.tensors.count says %" PRId64 " tensors, the parts hold %u", path, tensors,
                     g->n_tensors);
    if (rc)
        gguf_close(g);
    return rc;
}

/* ---------------------------------------------------------------- metadata */

const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key)
{
    return g->kv ? find_in(g->kv, g->n_kv, key) : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    for (uint32_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

/* the entry for key, of one of the types allowed (a bit mask); 1 when an
 * optional key is absent */
static const char *name_of(const struct gguf *g)
{
    return g->name ? g->name : "GGUF";
}

static int lookup(const struct gguf *g, const char *key, bool optional, unsigned types, const char *want,
                  const struct gguf_kv **kv, qp_err *err)
{
    const char *name = name_of(g);
    *kv = gguf_find_kv(g, key);
    if (!*kv)
        return optional ? 1 : qp_fail(err, "%s: key %s is missing", name, key);
    if (!(types >> (*kv)->type & 1))
        return qp_fail(err, "%s: key %s is %s, not %s", name, key, gguf_value_type_name((*kv)->type), want);
    return 0;
}

#define INT_TYPES (1u << GGUF_V_U8 | 1u << GGUF_V_I8 | 1u << GGUF_V_U16 | 1u << GGUF_V_I16 | 1u << GGUF_V_U32 | \
                   1u << GGUF_V_I32 | 1u << GGUF_V_U64 | 1u << GGUF_V_I64)

int gguf_get_u32(const struct gguf *g, const char *key, bool optional, uint32_t *out, qp_err *err)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, optional, INT_TYPES, "an integer", &kv, err);
    if (rc)
        return rc;
    bool too_big;
    int64_t v = scalar_int(kv->type, kv->data, &too_big);
    if (too_big || v < 0 || v > UINT32_MAX)
        return qp_fail(err, "%s: key %s is out of range (0..2^32-1)", name_of(g), key);
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f64(const struct gguf *g, const char *key, bool optional, double *out, qp_err *err)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, optional, 1u << GGUF_V_F32 | 1u << GGUF_V_F64, "a float", &kv, err);
    if (rc)
        return rc;
    if (kv->type == GGUF_V_F64) {
        *out = lef64(kv->data);
    } else {
        uint32_t u = le32(kv->data);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
    }
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool optional, bool *out, qp_err *err)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, optional, 1u << GGUF_V_BOOL, "a bool", &kv, err);
    if (!rc)
        *out = kv->data[0] != 0;
    return rc;
}

int gguf_get_str(const struct gguf *g, const char *key, bool optional, const char **s, size_t *len, qp_err *err)
{
    const struct gguf_kv *kv;
    int rc = lookup(g, key, optional, 1u << GGUF_V_STRING, "a string", &kv, err);
    if (!rc) {
        *s = (const char *)kv->data;
        *len = (size_t)kv->bytes;
    }
    return rc;
}

int gguf_get_name(const struct gguf *g, const char *key, bool optional, const char **s, size_t *len, qp_err *err)
{
    int rc = gguf_get_str(g, key, optional, s, len, err);
    const char *nul = rc ? NULL : memchr(*s, 0, *len);
    if (nul)
        return qp_fail(err, "%s: key %s holds a NUL at byte %td of its %zu", name_of(g), key, nul - *s, *len);
    return rc;
}

int gguf_get_array(const struct gguf *g, const char *key, uint32_t elem_type, bool optional,
                   const struct gguf_kv **kv, qp_err *err)
{
    int rc = lookup(g, key, optional, 1u << GGUF_V_ARRAY, "an array", kv, err);
    if (!rc && (*kv)->elem_type != elem_type)
        return qp_fail(err, "%s: key %s is an array of %s, not of %s", name_of(g), key,
                       gguf_value_type_name((*kv)->elem_type), gguf_value_type_name(elem_type));
    return rc;
}

void gguf_next_str(const struct gguf_kv *kv, uint64_t *at, const char **s, size_t *len)
{
    uint64_t n = le64(kv->data + *at);
    *s = (const char *)kv->data + *at + 8;
    *len = (size_t)n;
    *at += 8 + n;
}

int64_t gguf_array_int(const struct gguf_kv *kv, uint64_t i)
{
    bool too_big;
    return scalar_int(kv->elem_type, kv->data + i * value_sizes[kv->elem_type], &too_big);
}
