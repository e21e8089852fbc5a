/* qpk.h - the .qpk container: one self-contained, checksummed file holding a
 * packed Qwen3 model (config, tokenizer, provenance, tensors laid out exactly
 * as the BPF kernels read them). formats/QPK.md describes every byte.
 *
 * Reading: qpk_open() maps the file and validates everything structural
 * (header, directory checksum, config, every offset and size, overlaps,
 * shapes against the config, encodings) before returning. Data checksums are
 * verified either all at once (QPK_VERIFY) or lazily per tensor.
 *
 * Writing: see qpk_write.h.
 */
#ifndef QP_QPK_H
#define QP_QPK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "error.h"

#define QPK_MAGIC            "QPACK\r\n\x1a"   /* 8 bytes; catches text-mode mangling */
#define QPK_VERSION_MAJOR    1
#define QPK_VERSION_MINOR    6                 /* 1.1: the packed encodings i6g, i4k; 1.2: generation_config;
                                                  1.3: pooling; 1.4: task; 1.5: the packed encoding i7g;
                                                  1.6: tensors QPK_DATA_ALIGN-aligned, not page-aligned */
#define QPK_HEADER_SIZE      128
#define QPK_SECTION_SIZE     64
#define QPK_TENSOR_SIZE      128
#define QPK_NAME_MAX         64                /* bytes of a tensor name, NUL included */
#define QPK_DATA_ALIGN       64                /* tensor data alignment: a cache line */
#define QPK_DATA_ALIGN_1_5   4096              /* files before 1.6: a page */
#define QPK_CONFIG_SIZE      128
#define QPK_MAX_SECTIONS     16
#define QPK_MAX_TENSORS      (1u << 16)
#define QPK_MAX_SECTION_RAW  (256u << 20)      /* decompressed section bound */
#define QPK_NO_LAYER         0xFFFFu
#define QPK_Q24_TILE_ROWS    4                 /* rows a kernel step reads together */
#define QPK_Q24_TILE_COLS    16                /* columns of one tile */
#define QPK_I8_MAX_SCALE     (1 << 20)         /* |D| bound: D * sum(q x) fits int64 */
#define QPK_I32S_MAX_MAG     (1 << 30)         /* i32s: |q| bound */
/* q24: a row's sum of |q| stays below this, so that the kernel's int64 sum
 * of q * x over the row (|x| <= 2^24) stays below 2^62 and its rounding
 * into Q32 cannot wrap: sum |w| < 16384 */
#define QPK_Q24_MAX_ROW_SUM  (1ull << 38)
#define QPK_GROUP_MIN        16                /* i8g/i4g group sizes: powers of two in */
#define QPK_GROUP_MAX        256               /*   16..256 (QNT_MAX_GROUP) */
#define QPK_SCALE_EXP_MIN    (-128)            /* i8g/i4g scale_exp range: the quantiser's */
#define QPK_SCALE_EXP_MAX    180               /*   QNT_E_MIN..QNT_E_MAX (packer/quant.h) */

/* Where each field lies, in bytes from the start of its record, in
 * formats/QPK.md's order: the reader and the writer name the same byte. */
enum qpk_header_field {
    QPK_HDR_MAGIC = 0,          /* u8[8] */
    QPK_HDR_VERSION_MAJOR = 8,  /* u16 */
    QPK_HDR_VERSION_MINOR = 10, /* u16 */
    QPK_HDR_HEADER_SIZE = 12,   /* u32 */
    QPK_HDR_FILE_SIZE = 16,     /* u64 */
    QPK_HDR_DIR_OFFSET = 24,    /* u64 */
    QPK_HDR_DIR_SIZE = 32,      /* u64 */
    QPK_HDR_N_SECTIONS = 40,    /* u32 */
    QPK_HDR_N_TENSORS = 44,     /* u32 */
    QPK_HDR_DIR_XXH3 = 48,      /* u64 */
    QPK_HDR_DATA_OFFSET = 56,   /* u64 */
    QPK_HDR_DATA_SIZE = 64,     /* u64 */
    QPK_HDR_RESERVED = 72,      /* u8[48], zero */
    QPK_HDR_XXH3 = 120,         /* u64, of the bytes before it */
};

enum qpk_section_entry_field {   /* a directory's section entry */
    QPK_SE_KIND = 0,            /* u32 */
    QPK_SE_CODEC = 4,           /* u32 */
    QPK_SE_OFFSET = 8,          /* u64 */
    QPK_SE_STORED_SIZE = 16,    /* u64 */
    QPK_SE_RAW_SIZE = 24,       /* u64 */
    QPK_SE_XXH3 = 32,           /* u64 */
    QPK_SE_RESERVED = 40,       /* u8[24], zero */
};

enum qpk_config_field {          /* the config section */
    QPK_CFG_HIDDEN = 0,         /* u32 */
    QPK_CFG_INTERMEDIATE = 4,   /* u32 */
    QPK_CFG_N_LAYERS = 8,       /* u32 */
    QPK_CFG_N_HEADS = 12,       /* u32 */
    QPK_CFG_N_KV_HEADS = 16,    /* u32 */
    QPK_CFG_HEAD_DIM = 20,      /* u32 */
    QPK_CFG_VOCAB = 24,         /* u32 */
    QPK_CFG_MAX_POSITIONS = 28, /* u32 */
    QPK_CFG_ROPE_THETA = 32,    /* f64 */
    QPK_CFG_RMS_EPS = 40,       /* f64 */
    QPK_CFG_FLAGS = 48,         /* u32 */
    QPK_CFG_BOS_ID = 52,        /* i32 */
    QPK_CFG_EOS_ID = 56,        /* i32 */
    QPK_CFG_WEIGHT_FORMAT = 60, /* u32 */
    QPK_CFG_RESERVED = 64,      /* u8[64], zero */
};

enum qpk_tensor_entry_field {    /* a directory's tensor entry */
    QPK_TE_NAME = 0,            /* u8[QPK_NAME_MAX], NUL-padded */
    QPK_TE_ROLE = 64,           /* u16 */
    QPK_TE_LAYER = 66,          /* u16 */
    QPK_TE_ENCODING = 68,       /* u16 */
    QPK_TE_FLAGS = 70,          /* u16 */
    QPK_TE_ROWS = 72,           /* u32 */
    QPK_TE_COLS = 76,           /* u32 */
    QPK_TE_SCALE_EXP = 80,      /* i32 */
    QPK_TE_GROUP_SIZE = 84,     /* u32 */
    QPK_TE_ROW_STRIDE = 88,     /* u64 */
    QPK_TE_OFFSET = 96,         /* u64 */
    QPK_TE_NBYTES = 104,        /* u64 */
    QPK_TE_XXH3 = 112,          /* u64 */
    QPK_TE_ROWS_PER_BLOCK = 120,/* u32 */
    QPK_TE_RESERVED = 124,      /* u32, zero */
};

/* each record's last field ends where the record does */
_Static_assert(QPK_HDR_XXH3 + 8 == QPK_HEADER_SIZE, "header layout");
_Static_assert(QPK_SE_RESERVED + 24 == QPK_SECTION_SIZE, "section entry layout");
_Static_assert(QPK_CFG_RESERVED + 64 == QPK_CONFIG_SIZE, "config layout");
_Static_assert(QPK_TE_ROLE == QPK_NAME_MAX && QPK_TE_RESERVED + 4 == QPK_TENSOR_SIZE, "tensor entry layout");

enum qpk_section_kind {
    QPK_SEC_CONFIG = 1,            /* struct qpk_config, raw, 128 bytes */
    QPK_SEC_TOKENIZER = 2,         /* tokenizer.json, zstd */
    QPK_SEC_TOKENIZER_CONFIG = 3,  /* tokenizer_config.json, zstd */
    QPK_SEC_CHAT_TEMPLATE = 4,     /* chat_template text from tokenizer_config.json, zstd */
    QPK_SEC_PROVENANCE = 5,        /* JSON: sources, packer, settings, per-tensor error; zstd */
    QPK_SEC_GENERATION_CONFIG = 6, /* generation_config.json, zstd */
    QPK_SEC_POOLING = 7,           /* 1_Pooling/config.json (an embedding checkpoint), zstd */
    QPK_SEC_TASK = 8,              /* {"task": "rerank"} (task.h), zstd */
    QPK_SEC_KIND_MAX = 8,
};

enum qpk_codec { QPK_CODEC_RAW = 0, QPK_CODEC_ZSTD = 1 };

enum qpk_role {
    QPK_ROLE_EMBED = 1,        /* model.embed_tokens.weight   [vocab, hidden] */
    QPK_ROLE_LM_HEAD = 2,      /* lm_head.weight              [vocab, hidden] (untied only) */
    QPK_ROLE_FINAL_NORM = 3,   /* model.norm.weight           [hidden] */
    QPK_ROLE_ATTN_NORM = 4,    /* input_layernorm             [hidden] */
    QPK_ROLE_Q = 5,            /* self_attn.q_proj            [heads*head_dim, hidden] */
    QPK_ROLE_K = 6,            /* self_attn.k_proj            [kv_heads*head_dim, hidden] */
    QPK_ROLE_V = 7,            /* self_attn.v_proj            [kv_heads*head_dim, hidden] */
    QPK_ROLE_O = 8,            /* self_attn.o_proj            [hidden, heads*head_dim] */
    QPK_ROLE_Q_NORM = 9,       /* self_attn.q_norm            [head_dim] */
    QPK_ROLE_K_NORM = 10,      /* self_attn.k_norm            [head_dim] */
    QPK_ROLE_MLP_NORM = 11,    /* post_attention_layernorm    [hidden] */
    QPK_ROLE_GATE = 12,        /* mlp.gate_proj               [intermediate, hidden] */
    QPK_ROLE_UP = 13,          /* mlp.up_proj                 [intermediate, hidden] */
    QPK_ROLE_DOWN = 14,        /* mlp.down_proj               [hidden, intermediate] */
    QPK_ROLE_MAX = 14,
};

enum qpk_encoding {
    /* int32 little-endian, value = q * 2^-24, range (-128, 128). Matrices,
     * tiled for the kernels: blocks of 4 rows, each block a sequence of
     * 4-row x 16-column tiles stored row by row (QPK.md, "Layout of q24"). */
    QPK_ENC_Q24 = 1,
    /* int32 little-endian, value = q * 2^-scale_exp with a per-tensor
     * scale_exp in [0, 62] chosen so max |q| <= 2^30. Norm scales: holds
     * any magnitude a real checkpoint has (some exceed 128). */
    QPK_ENC_I32S = 2,
    /* int8 codes q in [-127, 127] with one int32 scale D per group of
     * group_size columns of a row: value = D * q * 2^-scale_exp. Blocks of
     * 4 rows: the codes in 4-row x 16-column tiles (64 bytes each), then
     * the block's scales, for each group the 4 rows' D (QPK.md). */
    QPK_ENC_I8G = 3,
    /* 4-bit codes q in 0..15 with two pf16 parameters d, m (packer/quant.h)
     * per group of group_size columns of a row: value = (D * q - M) *
     * 2^-scale_exp, D = pf16_int(d), M = pf16_int(m). Blocks of 4
     * rows: cols/4 little-endian u64 words, word w holding columns 4w..4w+3
     * of the 4 rows (bits 16k + 4c: row k, column 4w + c), then per group the
     * 4 rows' d, then their m (QPK.md, "Layout of i4g"). */
    QPK_ENC_I4G = 4,
    /* i8g stored in less room (QPK.md, "Packed encodings"): 6-bit codes q
     * in [-32, 31], four to 3 bytes, and one pf16 d per row and group
     * (D = pf16_int(d), |D| <= 2^20). qrun expands it to i8g as it
     * loads; the kernels never see it. */
    QPK_ENC_I6G = 5,
    /* i4g with its parameters in super-blocks of QPK_I4K_GROUPS groups: per
     * row and super-block, pf16 scales for d and m and 6-bit multiples of
     * them per group (0.5 bits per weight instead of 32 / group_size).
     * qrun expands it to i4g as it loads. */
    QPK_ENC_I4K = 6,
    /* i6g with 7-bit codes q in [-64, 63], eight to 7 bytes (QPK.md): half
     * i6g's error for one more bit per weight. Expanded to i8g as i6g. */
    QPK_ENC_I7G = 7,
};

#define QPK_I4K_GROUPS       8                 /* i4k: groups per super-block */
#define QPK_I4K_SUPER_BYTES  64                /* i4k: a super-block's parameters for 4 rows */

#define QPK_CONFIG_TIED 1u         /* qpk_config.flags: lm_head is embed_tokens */

/* The model config section, host-endian in memory (little-endian on disk). */
struct qpk_config {
    uint32_t hidden;          /* d_model */
    uint32_t intermediate;    /* MLP width */
    uint32_t n_layers;
    uint32_t n_heads;         /* query heads */
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t vocab;
    uint32_t max_positions;
    double rope_theta;
    double rms_eps;
    uint32_t flags;           /* QPK_CONFIG_* */
    int32_t bos_id;           /* -1: none */
    int32_t eos_id;           /* -1: none */
    uint32_t weight_format;   /* enum qpk_weight_format, informational */
};

/* Which matrix encodings a container may hold: q24 only Q24, int8 only I8G,
 * int4 I4G and/or I8G (mixed precision). Each encoding has one group size
 * per container. */
enum qpk_weight_format { QPK_FORMAT_Q24 = 1, QPK_FORMAT_INT8 = 2, QPK_FORMAT_INT4 = 3 };

struct qpk_section {
    uint32_t kind;            /* enum qpk_section_kind */
    uint32_t codec;           /* enum qpk_codec */
    uint64_t offset;          /* absolute, in the file */
    uint64_t stored_size;     /* bytes in the file */
    uint64_t raw_size;        /* bytes after decompression */
    uint64_t xxh3;            /* XXH3-64 of the stored bytes */
};

struct qpk_tensor {
    char name[QPK_NAME_MAX];  /* NUL-terminated Hugging Face name */
    uint16_t role;            /* enum qpk_role */
    uint16_t layer;           /* QPK_NO_LAYER for model-level tensors */
    uint16_t encoding;        /* enum qpk_encoding */
    uint16_t flags;           /* reserved, 0 */
    uint32_t rows, cols;      /* logical shape; a vector has rows == 1 */
    int32_t scale_exp;        /* value = q * 2^-scale_exp */
    uint32_t group_size;      /* 0: no groups */
    uint32_t rows_per_block;  /* rows interleaved per block: 4 for Q24, I8G, I4G; 1 for I32S */
    uint64_t row_stride;      /* bytes from one row block to the next */
    uint64_t offset;          /* absolute, qpk_data_align()-aligned */
    uint64_t nbytes;          /* = (rows / rows_per_block) * row_stride */
    uint64_t xxh3;            /* XXH3-64 of the nbytes at offset */
    const uint8_t *data;      /* reader: points into the mapped file */
};

struct qpk_file {
    char *path;
    uint8_t *map;             /* the whole file, read-only */
    uint64_t size;
    bool owns_map;            /* false for qpk_open_buffer */
    int fd;                   /* the open file when owns_map, else -1: read with pread */
    uint16_t version_major, version_minor;
    uint64_t dir_offset, dir_size, dir_xxh3;
    uint64_t data_offset, data_size;
    struct qpk_config cfg;
    struct qpk_section sections[QPK_MAX_SECTIONS];
    uint32_t n_sections;
    struct qpk_tensor *tensors;
    uint32_t n_tensors;
    /* (role, layer) -> tensor index, -1 when absent: [n_layers + 1][QPK_ROLE_MAX + 1],
     * the last row for model-level tensors. */
    int32_t *by_role;
};

enum qpk_open_flags {
    QPK_VERIFY = 1,           /* verify every section and tensor checksum at open */
};

/* Opens and validates path. On failure nothing stays mapped or allocated. */
int qpk_open(struct qpk_file *f, const char *path, unsigned flags, qp_err *err);

/* Validates an in-memory image (for fuzzing and tests); buf must outlive f. */
int qpk_open_buffer(struct qpk_file *f, const uint8_t *buf, size_t len, const char *name,
                    unsigned flags, qp_err *err);

void qpk_close(struct qpk_file *f);

/* Reads the container's bytes [offset, offset + the iovecs' total) into
 * iov (n <= IOV_MAX, under 2 GiB in all): pread from the file of qpk_open,
 * which maps nothing into the process and takes no page faults, a copy
 * for qpk_open_buffer. 0, or -1 with errno: EFAULT when the file ends
 * early (truncated since it was opened). */
int qpk_readv(const struct qpk_file *f, uint64_t offset, const struct iovec *iov, int n);
int qpk_read(const struct qpk_file *f, uint64_t offset, void *buf, size_t len);

/* The tensor of role in layer (QPK_NO_LAYER for model-level ones), or NULL. */
const struct qpk_tensor *qpk_tensor_of(const struct qpk_file *f, unsigned role, unsigned layer);

/* Recomputes checksums, and for tensors checks the value ranges
 * (qpk_check_values); the message names the first bad section or tensor. */
int qpk_verify_tensor(const struct qpk_file *f, const struct qpk_tensor *t, qp_err *err);
int qpk_verify_section(const struct qpk_file *f, const struct qpk_section *s, qp_err *err);
int qpk_verify_all(const struct qpk_file *f, qp_err *err);

/* The same, calling progress(user, bytes checked, bytes in all) on the
 * calling thread after each tensor it checks. */
typedef void (*qpk_progress_fn)(void *user, uint64_t done, uint64_t total);
int qpk_verify_all_progress(const struct qpk_file *f, qpk_progress_fn progress, void *user, qp_err *err);

/* The value ranges the kernels' exactness proofs assume (QPK.md, "Value
 * ranges"), over n_blocks whole row blocks of t starting at block
 * first_block, held at data; path names the file in messages.
 * qpk_verify_tensor checks them with the checksum, the writer as tensors
 * are streamed. */
int qpk_check_values(const char *path, const struct qpk_tensor *t, uint64_t first_block,
                     const uint8_t *data, uint64_t n_blocks, qp_err *err);

/* The section of a kind, or NULL when the file has none. */
const struct qpk_section *qpk_section_of(const struct qpk_file *f, unsigned kind);

/* Verifies and decodes a section into a new NUL-terminated buffer (*out,
 * *len without the NUL; free() it). Missing section: returns 0, *out NULL. */
int qpk_read_section(const struct qpk_file *f, unsigned kind, char **out, size_t *len,
                     qp_err *err);

/* Names for messages and `qpack info`. */
const char *qpk_role_name(unsigned role);
const char *qpk_encoding_name(unsigned encoding);
const char *qpk_section_name(unsigned kind);
const char *qpk_format_name(unsigned weight_format);

/* Bytes of one 4-row block of a grouped matrix (i8g, i4g, i6g, i7g, i4k) of
 * cols columns in groups of group; 0 for other encodings. */
uint64_t qpk_block_bytes(unsigned encoding, uint32_t cols, uint32_t group);

/* The encoding the kernels read for a stored one: i6g and i7g are run as i8g and
 * i4k as i4g (qpk_expand_blocks); every other encoding as itself. */
unsigned qpk_kernel_encoding(unsigned encoding);
bool qpk_encoding_packed(unsigned encoding);

/* Bytes of one row block of t in its kernel encoding. */
uint64_t qpk_kernel_stride(const struct qpk_tensor *t);

/* Rewrites n_blocks row blocks of t, read from src (t->row_stride bytes
 * each), into its kernel encoding at dst (qpk_kernel_stride bytes each).
 * For an encoding that is not packed this is a copy. Every bit pattern of
 * a checked tensor expands to a valid block: the reader's shape checks
 * are all it relies on. */
void qpk_expand_blocks(const struct qpk_tensor *t, const uint8_t *src, uint64_t n_blocks, uint8_t *dst);

/* The 6-bit fields of the packed encodings: field i of a little-endian bit
 * stream, bits [6i, 6i + 6), four fields to 3 bytes. */
unsigned qpk_bits6_get(const uint8_t *stream, uint64_t i);
void qpk_bits6_put(uint8_t *stream, uint64_t i, unsigned v);

/* The 7-bit fields of i7g: field i of a little-endian bit stream, bits
 * [7i, 7i + 7), eight fields to 7 bytes. */
unsigned qpk_bits7_get(const uint8_t *stream, uint64_t i);
void qpk_bits7_put(uint8_t *stream, uint64_t i, unsigned v);

/* Expected logical shape of a role under cfg; false for unknown roles. */
bool qpk_role_shape(const struct qpk_config *cfg, unsigned role, uint32_t *rows, uint32_t *cols);

/* Whether a role is a per-layer tensor; whether it is a norm scale vector. */
bool qpk_role_is_layer(unsigned role);
bool qpk_role_is_norm(unsigned role);

/* Little-endian (de)serialisation of fixed records, shared with the writer. */
void qpk_config_encode(const struct qpk_config *cfg, uint8_t out[QPK_CONFIG_SIZE]);
void qpk_config_decode(const uint8_t in[QPK_CONFIG_SIZE], struct qpk_config *cfg);
void qpk_section_encode(const struct qpk_section *s, uint8_t out[QPK_SECTION_SIZE]);
void qpk_section_decode(const uint8_t in[QPK_SECTION_SIZE], struct qpk_section *s);
void qpk_tensor_encode(const struct qpk_tensor *t, uint8_t out[QPK_TENSOR_SIZE]);
/* every field but the name, which the reader checks byte by byte */
void qpk_tensor_decode_fields(const uint8_t in[QPK_TENSOR_SIZE], struct qpk_tensor *t);

#endif
