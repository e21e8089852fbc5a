/* plan.h - how a container becomes the kernels' memory: the model constants
 * (struct qk_config, BPF rodata), the size of every map, and which tensor
 * bytes land at which map key. The BPF backend copies by this plan; the host
 * twin reads the container through it without copying. */
#ifndef QP_PLAN_H
#define QP_PLAN_H

#include "error.h"
#include "qpk.h"
#include "qwen3_abi.h"

/* the maps, in QK_MAPS's order (kernels/qwen3_abi.h) */
enum qp_map_id {
#define QP_MAP_ENUM(NAME, name) QP_MAP_##NAME,
    QK_MAPS(QP_MAP_ENUM)
#undef QP_MAP_ENUM
    QP_MAP_COUNT
};

/* a run of map keys filled from one source */
struct qp_segment {
    uint32_t first_key, n_keys;
    const uint8_t *data;        /* n_keys * value_size bytes, or packed's stored row blocks */
    /* a packed tensor (i6g, i7g, i4k) or one to widen (widen4): data holds
     * n_keys of its row blocks, each expanded to value_size bytes as it is
     * copied (qp_segment_expand); NULL: data is the map's bytes verbatim */
    const struct qpk_tensor *packed;
    /* the expanded i8g row blocks are then rewritten as i6 lanes (qwen3_abi.h):
     * an i6g vocabulary projection the i6 kernel reads (cfg.lm_i6) */
    bool lanes6;
    /* the expanded i4g row blocks' pf16 parameters are then widened to int32
     * (qwen3_abi.h, the w4 maps): every tensor whose kernel encoding is i4g
     * (qp_tensor_widened), packed or not */
    bool widen4;
};

/* n packed row blocks of seg from src (stored bytes) into dst, value_size
 * apart: expanded to the kernel encoding, then as i6 lanes or with int32
 * parameters if seg says so */
void qp_segment_expand(const struct qp_segment *seg, const uint8_t *src, uint64_t n, uint8_t *dst,
                       uint64_t value_size);

struct qp_mapspec {
    const char *name;           /* as in qwen3.bpf.c, without the m_ prefix */
    uint32_t value_size, max_entries;
    struct qp_segment *segs;    /* sorted by first_key; NULL for state maps */
    uint32_t n_segs;
};

/* Bytes of the maps by what they hold, values 8-byte aligned as array maps
 * lay them out (the BPF backend rounds each map up to whole pages). */
struct qp_plan_bytes {
    uint64_t weights;           /* matrices and norm scales (w_*, norms; none with --stream) */
    uint64_t kv;                /* kcache and vcache: every KV slot's cache */
    uint64_t state;             /* every other map: per-step buffers, tables, --stream's work map */
};

struct qp_plan {
    const struct qpk_file *file;    /* the container the segments point into */
    struct qk_config cfg;
    struct qp_mapspec maps[QP_MAP_COUNT];
    int32_t *rope_table;        /* [ctx][head_dim / 2][cos, sin] Q30 */
    int32_t *klayout_table;     /* [layer][QK_KL_LEN(head_dim)] K cache layout (qwen3_abi.h) */
    struct qp_plan_bytes bytes;
    uint64_t weight_bytes;      /* bytes.weights */
    uint64_t state_bytes;       /* every other map: bytes.kv + bytes.state */
    uint64_t kv_bytes_per_pos;  /* K and V of one position, all layers (of one slot) */
    bool stream;                /* matrices staged per job into `work` */
    uint32_t kernel_lanes;      /* the kernel schedule's lanes, 1 or 2 (docs/SCHEDULE.md); 0: the host's */
};

/* --stream: bytes of the work map the matrices are staged through */
#define QP_STREAM_WORK_BYTES (64u << 20)

/* Positions a forward block computes by default (see README, "Number
 * formats": measured on the 0.6B shape). */
#define QP_BLOCK_DEFAULT 16

/* KV cache rows (KV slot, layer, position) the kernels address at most */
#define QP_MAX_KV_ROWS (1ull << 31)

/* Builds the plan for kv_slots KV cache slots (one per sequence) of
 * ctx positions (1..max_positions) and blocks of up to `block` positions
 * (1..QK_MAX_BLOCK); with stream, the matrices are not resident but
 * staged through `work`; with kv8, the KV cache holds 8-bit codes
 * (kernels/qk_kv8.h) instead of int16 ones. Only the KV cache grows with kv_slots: weights
 * and the per-step state are shared, one step at a time. */
int qp_plan_build(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block,
                  bool stream, bool kv8, qp_err *err);

/* qp_plan_build (resident) with the KV cache exponents (cfg.k_exp,
 * cfg.v_exp) of a plan built before, for a loaded model's programs: the
 * rest is quick, those read every V matrix (most of 1 s on 0.6B). */
int qp_plan_build_with(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block,
                       bool kv8, const struct qk_config *exponents, qp_err *err);

/* The same checks and map sizes (p->cfg, p->maps, p->bytes) without
 * reading a weight or building a table: what the maps would take, for
 * choosing a context before building (qp_plan_free is not needed). */
int qp_plan_layout(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, uint32_t kv_slots, uint32_t block,
                   bool stream, bool kv8, qp_err *err);

/* bytes a map's values take, each 8-byte aligned (an array map's layout) */
uint64_t qp_map_bytes(const struct qp_mapspec *m);

/* true when t's row blocks go to a w4 map with their parameters widened to
 * int32 (its kernel encoding is i4g: qp_segment.widen4) */
bool qp_tensor_widened(const struct qpk_tensor *t);

/* bytes of one of t's row blocks in its map: its kernel encoding's, with
 * an i4g row block's parameters widened to int32 */
uint64_t qp_map_row_block_bytes(const struct qpk_tensor *t);

/* true for the maps that hold matrices (w_*, w4_*) */
bool qp_map_is_matrix(enum qp_map_id id);

/* The matrix holding row r of product `mode`'s row space (the kernels'
 * rule, qk_mv_tensor_of): which it is (enum qk_matrix), its first row and
 * row count, and its encoding. */
struct qp_matrix_rows {
    uint32_t matrix, row0, rows;
    uint32_t enc;   /* the kernels' encoding: QK_ENC_Q24, _I8G, _I4G (a w4 map) or _I6L (in w_hid) */
};
struct qp_matrix_rows qp_plan_matrix_of(const struct qp_plan *p, uint32_t layer, uint32_t mode, uint32_t r);

/* Whether product `mode` of `layer` reads the quantised act vector (map
 * xq), which quant_x makes first: its 8-bit records for an i4g or i6 lanes
 * matrix, its 16-bit ones for an i8g matrix (the kernels' rule,
 * qk_act_records). */
bool qp_plan_reads_act_records(const struct qp_plan *p, uint32_t layer, uint32_t mode);

/* The map and key of the row block of a product's rows that starts at row
 * `begin` (a multiple of 4). */
void qp_plan_matvec_source(const struct qp_plan *p, uint32_t layer, uint32_t mode, uint32_t begin,
                           enum qp_map_id *map, uint32_t *key);

/* The segment of a weight map that holds key `key` (NULL when none does). */
const struct qp_segment *qp_plan_segment(const struct qp_plan *p, enum qp_map_id id, uint32_t key);

/* The bytes of key `key` in a sorted segment list of a map with value_size
 * bytes; NULL when no segment holds it or the one that does is packed. */
const uint8_t *qp_segments_find(const struct qp_segment *segs, uint32_t n_segs, uint32_t value_size, uint32_t key);
void qp_plan_free(struct qp_plan *p);

/* Host-side softfloat of a positive finite double (load-time constants). */
struct qm_sf qp_sf_from_double(double v);
double qp_sf_to_double(struct qm_sf v);

#endif
