/* gguf.h - read-only access to a GGUF file (llama.cpp's format), one file
 * or split into "-00001-of-0000N.gguf" parts, and the ggml block types a
 * Qwen3 GGUF holds, dequantised as ggml's reference code does.
 *
 * The format (versions 2 and 3, little-endian): "GGUF", u32 version, u64
 * n_tensors, u64 n_kv; n_kv key-value pairs (a string key, a u32 type, the
 * value); n_tensors tensor infos (a string name, u32 n_dims, u64 ne[n_dims],
 * u32 ggml type, u64 offset); padding to the alignment (general.alignment,
 * else 32); the data region, each tensor at its offset from the region's
 * start. A string is a u64 length and that many bytes (no NUL). ne[0] is the
 * fastest-moving dimension: a matrix [rows, cols] has ne = {cols, rows}.
 *
 * Files are untrusted: every count and length is checked against the bytes
 * that remain before it is used; every key's type against the type it must
 * have; keys and tensor names unique; tensors aligned, of the size their
 * type and shape imply, inside the data region and not overlapping. The
 * maps stay valid while the struct gguf lives; nothing is copied but the
 * keys and names. */
#ifndef QP_GGUF_H
#define QP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "safetensors.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64            /* ggml's GGML_MAX_NAME, the NUL included */
#define GGUF_MAX_KEY 65535u         /* a key's bytes: gguf.cpp reads up to 65,535 */
#define GGUF_MAX_TENSORS 65536u
#define GGUF_MAX_KV 65536u
#define GGUF_MAX_SPLITS 256u
#define GGUF_DEFAULT_ALIGNMENT 32u

/* ggml's tensor type numbers (the ones a Qwen3 GGUF uses) */
enum gguf_type {
    GGUF_F32 = 0, GGUF_F16 = 1, GGUF_Q4_0 = 2, GGUF_Q4_1 = 3, GGUF_Q8_0 = 8,
    GGUF_Q4_K = 12, GGUF_Q5_K = 13, GGUF_Q6_K = 14, GGUF_BF16 = 30,
};

/* the types of a metadata value */
enum gguf_value_type {
    GGUF_V_U8 = 0, GGUF_V_I8, GGUF_V_U16, GGUF_V_I16, GGUF_V_U32, GGUF_V_I32, GGUF_V_F32, GGUF_V_BOOL,
    GGUF_V_STRING, GGUF_V_ARRAY, GGUF_V_U64, GGUF_V_I64, GGUF_V_F64, GGUF_V_COUNT
};

struct gguf_kv {
    char *key;                  /* NUL-terminated copy */
    uint32_t type;              /* enum gguf_value_type */
    uint32_t elem_type;         /* of an array's elements */
    uint64_t count;             /* an array's elements; 1 otherwise */
    const uint8_t *data;        /* the value's bytes in the map (a string's after its length) */
    uint64_t bytes;
};

struct gguf_tensor {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* 1 past n_dims */
    uint32_t type;              /* enum gguf_type */
    uint64_t numel, nbytes;
    uint64_t offset;            /* from the start of its part's data region */
    const uint8_t *data;
    uint32_t file;              /* index into files */
};

struct gguf {
    char *name;                 /* the path opened, for messages */
    struct st_file *files;      /* the parts in order */
    uint32_t n_files;
    uint32_t version;
    struct gguf_kv *kv;         /* the first part's metadata */
    uint32_t n_kv;
    struct gguf_tensor *tensors;/* every part's, in file order */
    uint32_t n_tensors;
};

/* Opens path; a name ending in -00001-of-0000N.gguf opens its N parts (each
 * must exist and say which part it is, split.no, and agree with the first
 * on split.count and split.tensors.count, which must be the tensors of all
 * the parts). */
int gguf_open(struct gguf *g, const char *path, qp_err *err);
void gguf_close(struct gguf *g);

/* Parses one part held whole in buf (for fuzzing and gguf_open); file is
 * the index its tensors get. Appends to g's tensors; the metadata is kept
 * for part 0 only. name is for messages. */
int gguf_parse(struct gguf *g, const uint8_t *buf, size_t len, const char *name, uint32_t file, qp_err *err);

const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

/* Typed reads of g's metadata: missing keys fail naming the key unless
 * optional (then *out is left as it was and 1 is returned); a value of
 * another type fails naming both types. Integers are accepted from any
 * integer type whose value fits; floats from f32 or f64. */
int gguf_get_u32(const struct gguf *g, const char *key, bool optional, uint32_t *out, qp_err *err);
int gguf_get_f64(const struct gguf *g, const char *key, bool optional, double *out, qp_err *err);
int gguf_get_bool(const struct gguf *g, const char *key, bool optional, bool *out, qp_err *err);
int gguf_get_str(const struct gguf *g, const char *key, bool optional, const char **s, size_t *len, qp_err *err);
/* a string that is a name (an architecture, a tokenizer's, a scaling
 * type): one holding a NUL fails saying so, not quoting the part before */
int gguf_get_name(const struct gguf *g, const char *key, bool optional, const char **s, size_t *len, qp_err *err);
/* an array of the given element type; *kv is its entry */
int gguf_get_array(const struct gguf *g, const char *key, uint32_t elem_type, bool optional,
                   const struct gguf_kv **kv, qp_err *err);

/* Walks the strings of an array of strings: *at starts at 0 and moves past
 * each string read (the lengths were checked when the file was parsed). */
void gguf_next_str(const struct gguf_kv *kv, uint64_t *at, const char **s, size_t *len);
/* element i of an array of i32 or u32 */
int64_t gguf_array_int(const struct gguf_kv *kv, uint64_t i);

const char *gguf_value_type_name(uint32_t type);

/* ------------------------------------------------------------ block types */

/* 1 when the reader knows the type (the list above) */
bool gguf_type_known(uint32_t type);
const char *gguf_type_name(uint32_t type);   /* "Q4_K", or "type 23" */
uint32_t gguf_type_block(uint32_t type);     /* elements per block: 1, 32 or 256 */
uint32_t gguf_type_block_bytes(uint32_t type);

/* Elements [0, n) of the blocks at src as floats, as ggml's dequantize_row
 * functions compute them (the same float operations in the same order);
 * n a multiple of the type's block. */
void gguf_dequantize(uint32_t type, const uint8_t *src, uint64_t n, float *out);

#endif
