/* qpk_read.c - opens a .qpk and validates every byte of its structure before
 * anything uses it. The file is untrusted: each check names the field and
 * the values that fail it. */
#include "qpk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "fsafe.h"
#include "hf_config.h"
#include "le.h"

/* a byte range of the file that one thing owns, for the overlap check */
struct region {
    uint64_t begin, end;
    char what[96];
};

static bool range_inside(uint64_t offset, uint64_t size, uint64_t file_size)
{
    return offset <= file_size && size <= file_size - offset;
}

/* Tensor data alignment: a page before 1.6, then a cache line (the bytes are
 * copied into BPF maps, never mapped in place, so a page bought nothing but
 * ~2 KB of padding per tensor). */
static uint64_t data_align(const struct qpk_file *f)
{
    return f->version_minor < 6 ? QPK_DATA_ALIGN_1_5 : QPK_DATA_ALIGN;
}

static int check_header(struct qpk_file *f, const char *name, qp_err *err)
{
    const uint8_t *h = f->map;
    if (f->size < QPK_HEADER_SIZE)
        return qp_fail(err, "%s: not a .qpk container (%" PRIu64 " bytes, smaller than the %d-byte header)",
                       name, f->size, QPK_HEADER_SIZE);
    if (memcmp(h + QPK_HDR_MAGIC, QPK_MAGIC, 8) != 0)
        return qp_fail(err, "%s: not a .qpk container (bad magic)", name);
    f->version_major = le16(h + QPK_HDR_VERSION_MAJOR);
    f->version_minor = le16(h + QPK_HDR_VERSION_MINOR);
    if (f->version_major != QPK_VERSION_MAJOR)
        return qp_fail(err, "%s: container format version %u.%u is not supported (this build reads %u.x)%s",
                       name, f->version_major, f->version_minor, QPK_VERSION_MAJOR,
                       f->version_major > QPK_VERSION_MAJOR ? "; it was made by a newer qpack" : "");
    if (XXH3_64bits(h, QPK_HDR_XXH3) != le64(h + QPK_HDR_XXH3))
        return qp_fail(err, "%s: header checksum mismatch (header corrupted)", name);
    if (le32(h + QPK_HDR_HEADER_SIZE) != QPK_HEADER_SIZE)
        return qp_fail(err, "%s: header_size is %u, expected %d", name, le32(h + QPK_HDR_HEADER_SIZE),
                       QPK_HEADER_SIZE);
    uint64_t file_size = le64(h + QPK_HDR_FILE_SIZE);
    if (file_size != f->size)
        return qp_fail(err, "%s: %s: header says %" PRIu64 " bytes, file has %" PRIu64, name,
                       f->size < file_size ? "truncated" : "trailing bytes", file_size, f->size);
    f->dir_offset = le64(h + QPK_HDR_DIR_OFFSET);
    f->dir_size = le64(h + QPK_HDR_DIR_SIZE);
    f->n_sections = le32(h + QPK_HDR_N_SECTIONS);
    f->n_tensors = le32(h + QPK_HDR_N_TENSORS);
    f->dir_xxh3 = le64(h + QPK_HDR_DIR_XXH3);
    f->data_offset = le64(h + QPK_HDR_DATA_OFFSET);
    f->data_size = le64(h + QPK_HDR_DATA_SIZE);
    for (int i = QPK_HDR_RESERVED; i < QPK_HDR_XXH3; i++)
        if (h[i])
            return qp_fail(err, "%s: reserved header byte %d is not zero", name, i);
    if (f->n_sections < 1 || f->n_sections > QPK_MAX_SECTIONS)
        return qp_fail(err, "%s: section count %u outside 1..%d", name, f->n_sections, QPK_MAX_SECTIONS);
    if (f->n_tensors < 1 || f->n_tensors > QPK_MAX_TENSORS)
        return qp_fail(err, "%s: tensor count %u outside 1..%u", name, f->n_tensors, QPK_MAX_TENSORS);
    uint64_t want_dir = (uint64_t)f->n_sections * QPK_SECTION_SIZE + (uint64_t)f->n_tensors * QPK_TENSOR_SIZE;
    if (f->dir_size != want_dir)
        return qp_fail(err, "%s: directory size %" PRIu64 " does not match %u sections and %u tensors (%" PRIu64 ")",
                       name, f->dir_size, f->n_sections, f->n_tensors, want_dir);
    if (f->dir_offset < QPK_HEADER_SIZE || !range_inside(f->dir_offset, f->dir_size, f->size))
        return qp_fail(err, "%s: directory [%" PRIu64 ", +%" PRIu64 ") lies outside the file", name,
                       f->dir_offset, f->dir_size);
    if (XXH3_64bits(f->map + f->dir_offset, f->dir_size) != f->dir_xxh3)
        return qp_fail(err, "%s: directory checksum mismatch (directory corrupted)", name);
    if (f->data_offset % data_align(f))
        return qp_fail(err, "%s: tensor data region starts at %" PRIu64 ", not %" PRIu64
                       "-aligned (container format %u.%u)", name, f->data_offset, data_align(f),
                       f->version_major, f->version_minor);
    if (!range_inside(f->data_offset, f->data_size, f->size))
        return qp_fail(err, "%s: tensor data region [%" PRIu64 ", +%" PRIu64 ") lies outside the file", name,
                       f->data_offset, f->data_size);
    return 0;
}

/* A zstd section is exactly one frame that states its content size, and
 * that size is raw_size: checked from the frame header alone, so a forged
 * size or codec is refused at open even when nothing decodes the section. */
static int check_zstd_frame(const struct qpk_file *f, const struct qpk_section *s, const char *name, qp_err *err)
{
    const uint8_t *src = f->map + s->offset;
    unsigned long long content = ZSTD_getFrameContentSize(src, s->stored_size);
    size_t frame = ZSTD_findFrameCompressedSize(src, s->stored_size);
    if (content == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(frame) || frame != s->stored_size)
        return qp_fail(err, "%s: section %s is not one zstd frame of its %" PRIu64 " stored bytes", name,
                       qpk_section_name(s->kind), s->stored_size);
    if (content == ZSTD_CONTENTSIZE_UNKNOWN)
        return qp_fail(err, "%s: section %s: its zstd frame does not state its size", name, qpk_section_name(s->kind));
    if (content != s->raw_size)
        return qp_fail(err, "%s: section %s: its zstd frame holds %llu bytes, the directory says %" PRIu64, name,
                       qpk_section_name(s->kind), content, s->raw_size);
    return 0;
}

static int parse_sections(struct qpk_file *f, const char *name, qp_err *err)
{
    const uint8_t *p = f->map + f->dir_offset;
    unsigned seen = 0;
    for (uint32_t i = 0; i < f->n_sections; i++, p += QPK_SECTION_SIZE) {
        struct qpk_section *s = &f->sections[i];
        qpk_section_decode(p, s);
        if (s->kind < 1 || s->kind > QPK_SEC_KIND_MAX)
            return qp_fail(err, "%s: section %u has unknown kind %u", name, i, s->kind);
        if (seen & (1u << s->kind))
            return qp_fail(err, "%s: section %s appears twice", name, qpk_section_name(s->kind));
        seen |= 1u << s->kind;
        for (int b = QPK_SE_RESERVED; b < QPK_SECTION_SIZE; b++)
            if (p[b])
                return qp_fail(err, "%s: section %s: reserved byte %d is not zero", name,
                               qpk_section_name(s->kind), b);
        if (s->codec != QPK_CODEC_RAW && s->codec != QPK_CODEC_ZSTD)
            return qp_fail(err, "%s: section %s has unknown codec %u", name, qpk_section_name(s->kind), s->codec);
        if (!range_inside(s->offset, s->stored_size, f->size))
            return qp_fail(err, "%s: section %s [%" PRIu64 ", +%" PRIu64 ") lies outside the file", name,
                           qpk_section_name(s->kind), s->offset, s->stored_size);
        if (s->raw_size > QPK_MAX_SECTION_RAW)
            return qp_fail(err, "%s: section %s claims %" PRIu64 " bytes decoded, more than the %u limit", name,
                           qpk_section_name(s->kind), s->raw_size, QPK_MAX_SECTION_RAW);
        if (s->codec == QPK_CODEC_RAW && s->raw_size != s->stored_size)
            return qp_fail(err, "%s: section %s is raw but its sizes differ", name, qpk_section_name(s->kind));
        if (s->codec == QPK_CODEC_ZSTD && check_zstd_frame(f, s, name, err))
            return -1;
    }
    if (!(seen & (1u << QPK_SEC_CONFIG)))
        return qp_fail(err, "%s: no config section", name);
    return 0;
}

static int parse_config(struct qpk_file *f, const char *name, qp_err *err)
{
    const struct qpk_section *s = qpk_section_of(f, QPK_SEC_CONFIG);
    if (s->codec != QPK_CODEC_RAW || s->stored_size != QPK_CONFIG_SIZE)
        return qp_fail(err, "%s: config section must be %d raw bytes", name, QPK_CONFIG_SIZE);
    if (qpk_verify_section(f, s, err))
        return -1;
    const uint8_t *c = f->map + s->offset;
    qpk_config_decode(c, &f->cfg);
    for (int b = QPK_CFG_RESERVED; b < QPK_CONFIG_SIZE; b++)
        if (c[b])
            return qp_fail(err, "%s: config: reserved byte %d is not zero", name, b);
    struct qpk_config *q = &f->cfg;
    if (q->flags & ~QPK_CONFIG_TIED)
        return qp_fail(err, "%s: config: unknown flags 0x%x", name, q->flags);
    if (q->weight_format != QPK_FORMAT_Q24 && q->weight_format != QPK_FORMAT_INT8 &&
        q->weight_format != QPK_FORMAT_INT4)
        return qp_fail(err, "%s: config: unknown weight format %u", name, q->weight_format);
    struct qwen3_config hf = {
        .hidden_size = q->hidden, .intermediate_size = q->intermediate,
        .num_hidden_layers = q->n_layers, .num_attention_heads = q->n_heads,
        .num_key_value_heads = q->n_kv_heads, .head_dim = q->head_dim,
        .vocab_size = q->vocab, .max_position_embeddings = q->max_positions,
        .rope_theta = q->rope_theta, .rms_norm_eps = q->rms_eps,
        .tie_word_embeddings = q->flags & QPK_CONFIG_TIED,
        .bos_token_id = q->bos_id, .eos_token_id = q->eos_id,
    };
    char what[600];
    snprintf(what, sizeof what, "%s: config", name);
    return hf_config_validate(&hf, what, err);
}

static int check_q24(const struct qpk_tensor *t, const char *name, qp_err *err)
{
    uint64_t block = (uint64_t)t->cols * 4 * QPK_Q24_TILE_ROWS;
    if (t->scale_exp != 24)
        return qp_fail(err, "%s: tensor %s: q24 needs scale_exp 24, has %d", name, t->name, t->scale_exp);
    if (t->rows_per_block != QPK_Q24_TILE_ROWS || t->rows % QPK_Q24_TILE_ROWS ||
        t->cols % QPK_Q24_TILE_COLS || t->row_stride != block)
        return qp_fail(err, "%s: tensor %s: q24 [%u, %u] needs %u-row blocks of %" PRIu64
                       " bytes and sizes that are multiples of %u x %u",
                       name, t->name, t->rows, t->cols, QPK_Q24_TILE_ROWS, block, QPK_Q24_TILE_ROWS,
                       QPK_Q24_TILE_COLS);
    return 0;
}

static int check_i32s(const struct qpk_tensor *t, const char *name, qp_err *err)
{
    uint64_t row = ((uint64_t)t->cols * 4 + 7) / 8 * 8;
    if (t->scale_exp < 0 || t->scale_exp > 62)
        return qp_fail(err, "%s: tensor %s: scale_exp %d outside 0..62", name, t->name, t->scale_exp);
    if (t->rows_per_block != 1 || t->row_stride != row)
        return qp_fail(err, "%s: tensor %s: i32s needs single rows of %" PRIu64 " bytes", name, t->name, row);
    return 0;
}

/* i8g, i4g, i6g, i7g and i4k: 4-row blocks of codes then per-group parameters
 * (i4k: per super-block of QPK_I4K_GROUPS groups) */
static int check_grouped(const struct qpk_tensor *t, const char *name, qp_err *err)
{
    const char *enc = qpk_encoding_name(t->encoding);
    uint32_t g = t->group_size;
    if (g < QPK_GROUP_MIN || g > QPK_GROUP_MAX || (g & (g - 1)) || t->cols % g)
        return qp_fail(err, "%s: tensor %s: %s group size %u is not a power of two in %d..%d dividing its %u columns",
                       name, t->name, enc, g, QPK_GROUP_MIN, QPK_GROUP_MAX, t->cols);
    if (t->encoding == QPK_ENC_I4K && t->cols % (g * QPK_I4K_GROUPS))
        return qp_fail(err, "%s: tensor %s: i4k's super-blocks of %d groups of %u do not divide its %u columns", name,
                       t->name, QPK_I4K_GROUPS, g, t->cols);
    if (t->scale_exp < QPK_SCALE_EXP_MIN || t->scale_exp > QPK_SCALE_EXP_MAX)
        return qp_fail(err, "%s: tensor %s: %s scale_exp %d outside %d..%d", name, t->name, enc, t->scale_exp,
                       QPK_SCALE_EXP_MIN, QPK_SCALE_EXP_MAX);
    uint64_t block = qpk_block_bytes(t->encoding, t->cols, g);
    if (t->rows_per_block != 4 || t->rows % 4 || t->row_stride != block)
        return qp_fail(err, "%s: tensor %s: %s [%u, %u] with groups of %u needs 4-row blocks of %" PRIu64
                       " bytes (has rows_per_block %u, row_stride %" PRIu64 ")",
                       name, t->name, enc, t->rows, t->cols, g, block, t->rows_per_block, t->row_stride);
    return 0;
}

static int check_tensor_encoding(const struct qpk_tensor *t, const char *name, qp_err *err)
{
    int rc;
    switch (t->encoding) {
    case QPK_ENC_Q24: rc = check_q24(t, name, err); break;
    case QPK_ENC_I32S: rc = check_i32s(t, name, err); break;
    case QPK_ENC_I8G:
    case QPK_ENC_I4G:
    case QPK_ENC_I6G:
    case QPK_ENC_I7G:
    case QPK_ENC_I4K: return check_grouped(t, name, err);
    default:
        return qp_fail(err, "%s: tensor %s has unknown encoding %u (made by a newer qpack?)", name,
                       t->name, t->encoding);
    }
    if (!rc && t->group_size != 0)
        return qp_fail(err, "%s: tensor %s: %s has no groups", name, t->name, qpk_encoding_name(t->encoding));
    return rc;
}

/* Norms are i32s; matrices take the encodings the container's format allows. */
static bool encoding_allowed(unsigned weight_format, unsigned role, unsigned encoding)
{
    if (qpk_role_is_norm(role))
        return encoding == QPK_ENC_I32S;
    switch (weight_format) {
    case QPK_FORMAT_Q24: return encoding == QPK_ENC_Q24;
    case QPK_FORMAT_INT8: return encoding == QPK_ENC_I8G;
    case QPK_FORMAT_INT4: return encoding == QPK_ENC_I4G || encoding == QPK_ENC_I8G || qpk_encoding_packed(encoding);
    default: return false;
    }
}

static int parse_tensor(struct qpk_file *f, uint32_t i, const char *name, qp_err *err)
{
    const uint8_t *p = f->map + f->dir_offset + (uint64_t)f->n_sections * QPK_SECTION_SIZE +
                       (uint64_t)i * QPK_TENSOR_SIZE;
    struct qpk_tensor *t = &f->tensors[i];
    const uint8_t *tname = p + QPK_TE_NAME;
    size_t name_len = strnlen((const char *)tname, QPK_NAME_MAX);
    if (name_len == 0 || name_len == QPK_NAME_MAX)
        return qp_fail(err, "%s: tensor entry %u: name is empty or not NUL-terminated", name, i);
    memcpy(t->name, tname, name_len);
    t->name[name_len] = 0;
    for (size_t b = name_len; b < QPK_NAME_MAX; b++)
        if (tname[b])
            return qp_fail(err, "%s: tensor %s: name padding is not zero", name, t->name);
    for (size_t b = 0; b < name_len; b++)
        if (tname[b] < 0x20 || tname[b] > 0x7e)
            return qp_fail(err, "%s: tensor entry %u: name has a non-printable byte", name, i);
    qpk_tensor_decode_fields(p, t);
    if (le32(p + QPK_TE_RESERVED) || t->flags)
        return qp_fail(err, "%s: tensor %s: reserved fields are not zero", name, t->name);

    uint32_t rows, cols;
    if (!qpk_role_shape(&f->cfg, t->role, &rows, &cols))
        return qp_fail(err, "%s: tensor %s has unknown role %u", name, t->name, t->role);
    bool per_layer = qpk_role_is_layer(t->role);
    if (per_layer ? t->layer >= f->cfg.n_layers : t->layer != QPK_NO_LAYER)
        return qp_fail(err, "%s: tensor %s: layer %u is invalid for role %s", name, t->name, t->layer,
                       qpk_role_name(t->role));
    if (t->rows != rows || t->cols != cols)
        return qp_fail(err, "%s: tensor %s: shape [%u, %u] does not match the config's [%u, %u] for %s",
                       name, t->name, t->rows, t->cols, rows, cols, qpk_role_name(t->role));
    if (check_tensor_encoding(t, name, err))
        return -1;
    if (!encoding_allowed(f->cfg.weight_format, t->role, t->encoding))
        return qp_fail(err, "%s: tensor %s: encoding %s is not allowed for role %s in %s containers", name,
                       t->name, qpk_encoding_name(t->encoding), qpk_role_name(t->role),
                       qpk_format_name(f->cfg.weight_format));
    uint64_t want = (uint64_t)(t->rows / t->rows_per_block) * t->row_stride;
    if (t->nbytes != want)
        return qp_fail(err, "%s: tensor %s: %" PRIu64 " bytes, its shape needs %" PRIu64, name, t->name,
                       t->nbytes, want);
    if (t->offset % data_align(f))
        return qp_fail(err, "%s: tensor %s: offset %" PRIu64 " is not %" PRIu64 "-aligned (container format %u.%u)",
                       name, t->name, t->offset, data_align(f), f->version_major, f->version_minor);
    if (t->offset < f->data_offset || !range_inside(t->offset - f->data_offset, t->nbytes, f->data_size))
        return qp_fail(err, "%s: tensor %s [%" PRIu64 ", +%" PRIu64 ") lies outside the data region", name,
                       t->name, t->offset, t->nbytes);
    t->data = f->map + t->offset;

    uint32_t slot = (per_layer ? t->layer : f->cfg.n_layers) * (QPK_ROLE_MAX + 1) + t->role;
    if (f->by_role[slot] >= 0)
        return qp_fail(err, "%s: tensor %s: a second %s for the same layer", name, t->name, qpk_role_name(t->role));
    f->by_role[slot] = (int32_t)i;
    return 0;
}

static int check_complete(const struct qpk_file *f, const char *name, qp_err *err)
{
    bool tied = f->cfg.flags & QPK_CONFIG_TIED;
    for (unsigned role = 1; role <= QPK_ROLE_MAX; role++) {
        if (qpk_role_is_layer(role)) {
            for (unsigned l = 0; l < f->cfg.n_layers; l++)
                if (!qpk_tensor_of(f, role, l))
                    return qp_fail(err, "%s: layer %u has no %s tensor", name, l, qpk_role_name(role));
        } else if (role == QPK_ROLE_LM_HEAD) {
            if (tied != !qpk_tensor_of(f, role, QPK_NO_LAYER))
                return qp_fail(err, "%s: %s", name, tied ? "lm_head is stored but the config says tied"
                                                         : "no lm_head tensor and the config is not tied");
        } else if (!qpk_tensor_of(f, role, QPK_NO_LAYER)) {
            return qp_fail(err, "%s: no %s tensor", name, qpk_role_name(role));
        }
    }
    return 0;
}

/* The kernels keep one group size per encoding: every i8g tensor of a
 * container has the same one, and every i4g tensor; i6g and i7g count as
 * i8g and i4k as i4g, which they are expanded to. */
static int check_groups(const struct qpk_file *f, const char *name, qp_err *err)
{
    const struct qpk_tensor *first[QPK_ENC_I4G + 1] = {0};
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        unsigned enc = qpk_kernel_encoding(t->encoding);
        if (enc != QPK_ENC_I8G && enc != QPK_ENC_I4G)
            continue;
        const struct qpk_tensor *ref = first[enc];
        if (!ref)
            first[enc] = t;
        else if (t->group_size != ref->group_size)
            return qp_fail(err, "%s: tensor %s: %s group size %u differs from the %u of %s (one group size per "
                           "encoding)", name, t->name, qpk_encoding_name(t->encoding), t->group_size,
                           ref->group_size, ref->name);
    }
    return 0;
}

static int cmp_region(const void *a, const void *b)
{
    const struct region *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int check_overlaps(const struct qpk_file *f, const char *name, qp_err *err)
{
    uint32_t n = 2 + f->n_sections + f->n_tensors;
    struct region *r = calloc(n, sizeof *r);
    if (!r)
        return qp_fail(err, "%s: out of memory", name);
    uint32_t k = 0;
    r[k++] = (struct region){0, QPK_HEADER_SIZE, "header"};
    r[k++] = (struct region){f->dir_offset, f->dir_offset + f->dir_size, "directory"};
    for (uint32_t i = 0; i < f->n_sections; i++, k++) {
        const struct qpk_section *s = &f->sections[i];
        r[k].begin = s->offset;
        r[k].end = s->offset + s->stored_size;
        snprintf(r[k].what, sizeof r[k].what, "section %s", qpk_section_name(s->kind));
    }
    for (uint32_t i = 0; i < f->n_tensors; i++, k++) {
        const struct qpk_tensor *t = &f->tensors[i];
        r[k].begin = t->offset;
        r[k].end = t->offset + t->nbytes;
        snprintf(r[k].what, sizeof r[k].what, "tensor %s", t->name);
    }
    qsort(r, n, sizeof *r, cmp_region);
    int rc = 0;
    for (uint32_t i = 1; i < n && !rc; i++)
        if (r[i].begin < r[i - 1].end)
            rc = qp_fail(err, "%s: %s overlaps %s", name, r[i].what, r[i - 1].what);
    free(r);
    return rc;
}

static int validate(struct qpk_file *f, const char *name, unsigned flags, qp_err *err)
{
    if (check_header(f, name, err) || parse_sections(f, name, err) || parse_config(f, name, err))
        return -1;
    f->tensors = calloc(f->n_tensors, sizeof *f->tensors);
    size_t slots = (size_t)(f->cfg.n_layers + 1) * (QPK_ROLE_MAX + 1);
    f->by_role = malloc(slots * sizeof *f->by_role);
    if (!f->tensors || !f->by_role)
        return qp_fail(err, "%s: out of memory", name);
    for (size_t i = 0; i < slots; i++)
        f->by_role[i] = -1;
    for (uint32_t i = 0; i < f->n_tensors; i++)
        if (parse_tensor(f, i, name, err))
            return -1;
    if (check_complete(f, name, err) || check_groups(f, name, err) || check_overlaps(f, name, err))
        return -1;
    if ((flags & QPK_VERIFY) && qpk_verify_all(f, err))
        return -1;
    return 0;
}

int qpk_open_buffer(struct qpk_file *f, const uint8_t *buf, size_t len, const char *name,
                    unsigned flags, qp_err *err)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(name);
    f->map = (uint8_t *)buf;
    f->size = len;
    if (!f->path)
        return qp_fail(err, "%s: out of memory", name);
    if (validate(f, name, flags, err)) {
        qpk_close(f);
        return -1;
    }
    return 0;
}

int qpk_open(struct qpk_file *f, const char *path, unsigned flags, qp_err *err)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    struct stat st;
    int fd = fs_open_input(path, &st, err); /* a FIFO or device is refused, not waited on */
    if (fd < 0)
        return -1;
    if (st.st_size < QPK_HEADER_SIZE) {
        close(fd);
        return qp_fail(err, "%s: not a .qpk container (%lld bytes, smaller than the %d-byte header)", path,
                       (long long)st.st_size, QPK_HEADER_SIZE);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        return qp_fail(err, "%s: mmap: %s", path, strerror(e));
    }
    f->path = strdup(path);
    f->fd = fd;
    f->map = map;
    f->size = (uint64_t)st.st_size;
    f->owns_map = true;
    if (!f->path || validate(f, path, flags, err)) {
        if (!f->path)
            qp_fail(err, "%s: out of memory", path);
        qpk_close(f);
        return -1;
    }
    return 0;
}

void qpk_close(struct qpk_file *f)
{
    if (f->owns_map) {
        munmap(f->map, f->size);
        close(f->fd);
    }
    free(f->tensors);
    free(f->by_role);
    free(f->path);
    memset(f, 0, sizeof *f);
}

int qpk_readv(const struct qpk_file *f, uint64_t offset, const struct iovec *iov, int n)
{
    uint64_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    if (offset > f->size || len > f->size - offset) {
        errno = EFAULT;
        return -1;
    }
    if (!f->owns_map) {
        for (int i = 0; i < n; offset += iov[i++].iov_len)
            memcpy(iov[i].iov_base, f->map + offset, iov[i].iov_len);
        return 0;
    }
    ssize_t got;
    do
        got = preadv(f->fd, iov, n, (off_t)offset);
    while (got < 0 && errno == EINTR);
    if (got >= 0 && (uint64_t)got != len)   /* a regular file reads short only at its end */
        errno = EFAULT;
    return got >= 0 && (uint64_t)got == len ? 0 : -1;
}

int qpk_read(const struct qpk_file *f, uint64_t offset, void *buf, size_t len)
{
    struct iovec iov = {buf, len};
    return qpk_readv(f, offset, &iov, 1);
}

const struct qpk_tensor *qpk_tensor_of(const struct qpk_file *f, unsigned role, unsigned layer)
{
    if (role < 1 || role > QPK_ROLE_MAX)
        return NULL;
    unsigned row = layer == QPK_NO_LAYER ? f->cfg.n_layers : layer;
    if (row > f->cfg.n_layers || (layer != QPK_NO_LAYER) != qpk_role_is_layer(role))
        return NULL;
    int32_t i = f->by_role[row * (QPK_ROLE_MAX + 1) + role];
    return i < 0 ? NULL : &f->tensors[i];
}

const struct qpk_section *qpk_section_of(const struct qpk_file *f, unsigned kind)
{
    for (uint32_t i = 0; i < f->n_sections; i++)
        if (f->sections[i].kind == kind)
            return &f->sections[i];
    return NULL;
}

int qpk_read_section(const struct qpk_file *f, unsigned kind, char **out, size_t *len, qp_err *err)
{
    *out = NULL;
    *len = 0;
    const struct qpk_section *s = qpk_section_of(f, kind);
    if (!s)
        return 0;
    if (qpk_verify_section(f, s, err))
        return -1;
    char *buf = malloc(s->raw_size + 1);
    if (!buf)
        return qp_fail(err, "%s: section %s: out of memory", f->path, qpk_section_name(kind));
    const uint8_t *src = f->map + s->offset;
    if (s->codec == QPK_CODEC_RAW) {
        memcpy(buf, src, s->raw_size);
    } else {
        unsigned long long frame = ZSTD_getFrameContentSize(src, s->stored_size);
        size_t got = frame == s->raw_size ? ZSTD_decompress(buf, s->raw_size + 1, src, s->stored_size) : 0;
        if (frame != s->raw_size || ZSTD_isError(got) || got != s->raw_size) {
            free(buf);
            return qp_fail(err, "%s: section %s: zstd data does not decode to its %" PRIu64 " bytes", f->path,
                           qpk_section_name(kind), s->raw_size);
        }
    }
    buf[s->raw_size] = 0;
    *out = buf;
    *len = s->raw_size;
    return 0;
}
