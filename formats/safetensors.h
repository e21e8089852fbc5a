/* safetensors.h - read-only access to a Hugging Face checkpoint's
 * safetensors files, single (model.safetensors) or sharded
 * (model.safetensors.index.json + shards). Files are untrusted: every
 * header is validated before any tensor is handed out. Data is mmapped,
 * never copied.
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 * (UTF-8, may be padded with trailing spaces), then the data area. The
 * JSON is an object; "__metadata__" (an object of strings) is ignored,
 * every other key is a tensor name mapping to
 *   {"dtype": "BF16"|"F16"|"F32", "shape": [d0, ...], "data_offsets": [begin, end]}
 * with offsets relative to the data area.
 *
 * What a file must satisfy (the same rules as the reference Rust reader):
 *   - N <= ST_MAX_HEADER_BYTES and N <= file size - 8; no NUL in the header;
 *   - tensor names non-empty valid UTF-8, unique (across shards too); the
 *     keys of each entry and of __metadata__ unique too;
 *   - dims are integers in [0, 2^53], at most ST_MAX_DIMS, their product
 *     (and product * dtype size) fits 64 bits;
 *   - begin <= end, end - begin == numel * dtype size;
 *   - tensors tile the data area exactly: sorted by offset they start at 0,
 *     each begins where the previous ends (no overlap, no gap), and the
 *     last ends at the end of the file (trailing bytes are rejected).
 * Sharded folders: the index must be an object with a non-empty
 * "weight_map" object {tensor: shard}; shard names are plain file names in
 * the folder (no '/', no ".."), must exist and be regular files (symlinks
 * to regular files are followed, as in a Hugging Face cache snapshot).
 * The index and the shards must agree exactly: every tensor listed is in
 * the shard it names, and every tensor of a shard is listed for it.
 * Shards present in the folder but not named by the index are not opened.
 * Keys are unique at every level of the index, which has no escaped NUL.
 * Every file read must be a regular file: a FIFO or a device is refused at
 * once, never waited on (fsafe.h).
 */
#ifndef QP_SAFETENSORS_H
#define QP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* A header larger than this is refused: the biggest real headers are a few
 * hundred KiB (thousands of tensors). */
#define ST_MAX_HEADER_BYTES (64u << 20)
#define ST_MAX_DIMS 8
#define ST_MAX_SHARDS 4096

/* The element types of a checkpoint: the safetensors ones, then ggml's
 * block types, which a model read from a GGUF holds (formats/gguf.h): their
 * elements come in blocks of 32 or 256, and an element range read must
 * start and end on a block boundary (every row does). */
enum st_dtype { ST_BF16 = 0, ST_F16 = 1, ST_F32 = 2, ST_Q8_0, ST_Q4_0, ST_Q4_1, ST_Q4_K, ST_Q5_K, ST_Q6_K };

struct st_tensor {
    char *name;                 /* e.g. "model.layers.0.self_attn.q_proj.weight" */
    enum st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t numel;             /* product of shape (1 for a scalar) */
    const uint8_t *data;        /* little-endian elements inside the mmapped file */
    uint64_t nbytes;            /* st_bytes(dtype, numel) */
    uint32_t file_index;        /* index into st_model.files */
};

struct st_file {
    char *path;                 /* full path */
    char *name;                 /* file name as in the folder */
    uint64_t size;              /* bytes */
    uint8_t *map;               /* whole file, PROT_READ, MAP_PRIVATE */
};

struct st_model {
    struct st_file *files;      /* sorted by name */
    uint32_t n_files;
    struct st_tensor *tensors;  /* sorted by name, names unique */
    uint32_t n_tensors;
    char *index_path;           /* model.safetensors.index.json when sharded, else NULL */
    uint64_t index_size;        /* its size in bytes */
};

/* Opens a model folder: model.safetensors.index.json when present (every
 * shard it names must exist and every tensor it lists must be in the shard
 * it names), else model.safetensors. */
int st_open_dir(struct st_model *m, const char *dir, qp_err *err);

/* Opens one safetensors file (for tests and tools). */
int st_open_file(struct st_model *m, const char *path, qp_err *err);

void st_close(struct st_model *m);

/* Maps the regular file at path whole into f (read-only); name is its file
 * name. The caller unmaps it (st_close does, for a model's files). */
int st_file_map(struct st_file *f, const char *path, const char *name, qp_err *err);

/* Finds a tensor by exact name; NULL when absent. O(log n). */
const struct st_tensor *st_find(const struct st_model *m, const char *name);

/* Element i of t as a float (BF16 and F16 convert exactly, F32 as is). */
float st_get_f32(const struct st_tensor *t, uint64_t i);

/* Elements [first, first + n) of t as floats into out (exact, as
 * st_get_f32, a whole row at a time); first + n <= t->numel. */
void st_read_f32(const struct st_tensor *t, uint64_t first, uint64_t n, float *out);

/* The largest |element| of elements [first, first + n) of t (NaNs ignored,
 * as fmax does; an infinity counts), in one pass over their bytes; 0 when
 * n is 0. first + n <= t->numel. */
double st_max_abs(const struct st_tensor *t, uint64_t first, uint64_t n);

/* Bytes per element of a dtype that has elements of whole bytes (BF16, F16,
 * F32); 0 for a block type. */
size_t st_dtype_size(enum st_dtype dt);
const char *st_dtype_name(enum st_dtype dt);
/* Elements per block (1 for BF16, F16, F32), and the bytes of n elements (n
 * a multiple of the block). */
uint32_t st_dtype_block(enum st_dtype dt);
uint64_t st_bytes(enum st_dtype dt, uint64_t n);
/* The ggml type (formats/gguf.h) of dt, and back: 0 when there is none. */
uint32_t st_dtype_ggml(enum st_dtype dt);
int st_dtype_from_ggml(uint32_t type, enum st_dtype *dt);

/* Tells the kernel we are done with t's bytes for now, so a streaming
 * reader's resident memory stays small (madvise DONTNEED on the range). */
void st_release(const struct st_model *m, const struct st_tensor *t);

/* The same for elements [first, first + n) of t: a streaming reader lets go
 * of what it has read. Both release whole 2 MB blocks of the file around the
 * bytes (what a fault may have mapped); a neighbour's bytes among them are
 * refaulted from the file when next read. */
void st_release_part(const struct st_model *m, const struct st_tensor *t, uint64_t first, uint64_t n);

/* Parses a safetensors header in memory (for fuzzing): buf holds the
 * whole file. On success fills tensors (caller frees with st_free_tensors). */
int st_parse_buffer(const uint8_t *buf, size_t len, const char *name, uint32_t file_index,
                    struct st_tensor **tensors, uint32_t *n_tensors, qp_err *err);
void st_free_tensors(struct st_tensor *tensors, uint32_t n);

/* 1 when name is a tensor name the format accepts: non-empty, valid UTF-8
 * (no overlongs, no surrogates), no NUL within its len bytes. */
int st_name_valid(const char *name, size_t len);

/* One file a model was read from, for provenance records. */
struct st_source {
    const char *path;           /* points into the st_model */
    const char *name;           /* file name in the folder */
    uint64_t size;              /* bytes */
};

/* Lists the files m was read from: the index first when sharded, then the
 * safetensors files in name order. Writes at most cap entries to out and
 * returns the total count (call with cap 0 to size the array). */
uint32_t st_list_sources(const struct st_model *m, struct st_source *out, uint32_t cap);

/* XXH3-64 (seed 0) of the whole file at path, read sequentially in 8 MiB
 * chunks so the file never becomes resident in this process; *size gets
 * the number of bytes hashed (either pointer may be NULL). */
int st_file_xxh3(const char *path, uint64_t *hash, uint64_t *size, qp_err *err);

#endif
