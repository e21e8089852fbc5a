/* plan.h - how a container becomes the kernels' memory: the model constants
 * (struct qk_config, BPF rodata), the size of every map, and which tensor
 * bytes land at which map key. The BPF backend copies by this plan; the host
 * twin reads the container through it without copying. */
#ifndef QP_PLAN_H
#define QP_PLAN_H

#include "error.h"
#include "qpk.h"
#include "qrun_abi.h"

enum qp_map_id {
    QP_MAP_W_HID, QP_MAP_W_O, QP_MAP_W_DOWN, QP_MAP_W4_HID, QP_MAP_W4_O, QP_MAP_W4_DOWN, QP_MAP_NORMS,
    QP_MAP_QK_NORMS, QP_MAP_ROPE, QP_MAP_KLAYOUT, QP_MAP_KCACHE, QP_MAP_VCACHE, QP_MAP_H, QP_MAP_X, QP_MAP_XQ, QP_MAP_QKV, QP_MAP_QROT, QP_MAP_GU,
    QP_MAP_SCORES, QP_MAP_PARTS, QP_MAP_LOGITS, QP_MAP_AMAX, QP_MAP_SCAL, QP_MAP_WORK, QP_MAP_COUNT,
};

/* a run of map keys filled from one source */
struct qp_segment {
    uint32_t first_key, n_keys;
    const uint8_t *data;        /* n_keys * value_size bytes */
};

struct qp_mapspec {
    const char *name;           /* as in qrun.bpf.c, without the m_ prefix */
    uint32_t value_size, max_entries;
    struct qp_segment *segs;    /* sorted by first_key; NULL for state maps */
    uint32_t n_segs;
};

struct qp_plan {
    const struct qpk_file *file;    /* the container the segments point into */
    struct qk_config cfg;
    struct qp_mapspec maps[QP_MAP_COUNT];
    int32_t *rope_table;        /* [ctx][head_dim / 2][cos, sin] Q30 */
    int32_t *klayout_table;     /* [layer][QK_KL_LEN(head_dim)] K cache layout (qrun_abi.h) */
    uint64_t weight_bytes;      /* bytes of weight maps (w_*, norms) */
    uint64_t state_bytes;       /* every other map */
    uint64_t kv_bytes_per_pos;  /* K and V of one position, all layers */
    bool stream;                /* matrices staged per job into `work` */
};

/* --stream: bytes of the work map the matrices are staged through */
#define QP_STREAM_WORK_BYTES (64u << 20)

/* Builds the plan for a context of ctx positions (1..max_positions); with
 * stream, the matrices are not resident but staged through `work`. */
int qp_plan_build(struct qp_plan *p, const struct qpk_file *f, uint32_t ctx, bool stream, qp_err *err);

/* true for the maps that hold matrices (w_*, w4_*) */
bool qp_map_is_matrix(enum qp_map_id id);

/* The matrix holding row r of product `mode`'s row space (the kernels'
 * rule, qk_mv_tensor_of): its index in w_key / w_i4 order (7: the
 * vocabulary projection), its first row and row count, and its encoding. */
struct qp_matrix_rows {
    uint32_t role, row0, rows;
    bool i4;
};
struct qp_matrix_rows qp_plan_matrix_of(const struct qp_plan *p, uint32_t layer, uint32_t mode, uint32_t r);

/* The map and key of the block of a product's rows that starts at row
 * `begin` (a multiple of 4). */
void qp_plan_matvec_source(const struct qp_plan *p, uint32_t layer, uint32_t mode, uint32_t begin,
                           enum qp_map_id *map, uint32_t *key);

/* The bytes of key `key` of a weight map (NULL when no segment holds it). */
const uint8_t *qp_plan_block(const struct qp_plan *p, enum qp_map_id id, uint32_t key);

/* The same over any sorted segment list of a map with value_size bytes. */
const uint8_t *qp_segments_find(const struct qp_segment *segs, uint32_t n_segs, uint32_t value_size, uint32_t key);
void qp_plan_free(struct qp_plan *p);

/* Host-side softfloat of a positive finite double (load-time constants). */
struct qm_sf qp_sf_from_double(double v);
double qp_sf_to_double(struct qm_sf v);

#endif
