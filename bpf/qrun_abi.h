/* qrun_abi.h - what the host and the kernels agree on: the arguments of a
 * kernel invocation (passed as the test run's input data), the layout of
 * the maps, and the sizes that bound every loop. Shared by bpf/qrun.bpf.c,
 * the host twin (runtime/emu.c) and the loader (runtime/bpf_backend.c). */
#ifndef QP_QRUN_ABI_H
#define QP_QRUN_ABI_H

#include "qmath.h"

#define QK_MAX_LAYERS 256         /* = QWEN3_MAX_LAYERS */
#define QK_MAX_HEADS 256
#define QK_ATTN_CHUNK 256         /* positions per attention task */
#define QK_MAX_ARGMAX_SLOTS 1024  /* partial argmaxes of one vocabulary pass */
#define QK_ROWS_PER_GROUP 4       /* matrix rows one kernel step reads together */
#define QK_ENC_Q24 1              /* = QPK_ENC_Q24 */
#define QK_ENC_I8G 3              /* = QPK_ENC_I8G */
#define QK_I8_GROUP_SHIFT 12      /* i8g: a group's sum * scale is shifted down this much */
#define QK_KBOOST_MAX 10          /* K channel boost: at most 2^10 (see plan.c) */

/* An index already checked against a model size, masked to its table's
 * power-of-two length so the verifier sees the bound on all 64 bits (a
 * 32-bit compare alone leaves the upper half unknown to it). The empty asm
 * stops the compiler from dropping the mask as redundant. */
#define QK_IDX(x, len) ({ u64 __qk_v = (x); asm volatile("" : "+r"(__qk_v)); __qk_v & ((len) - 1); })

/* Model constants, read-only in the kernels (BPF .rodata set before load,
 * so the verifier sees every size as a known constant). */
struct qk_config {
    u32 hidden, inter, q_dim, kv_dim, head_dim, n_heads, n_kv_heads, vocab, n_layers, ctx;
    u32 max_chunks;             /* ceil(ctx / QK_ATTN_CHUNK) */
    u32 hid_groups_per_layer;   /* 4-row groups of q|k|v|gate|up in w_hid per layer */
    u32 embed_group, lm_group;  /* first w_hid group of the embedding / vocabulary projection */
    u32 act_len;                /* entries of x: max(hidden, q_dim, inter) */
    u32 w_enc;                  /* matrices: QK_ENC_Q24 or QK_ENC_I8G */
    u32 w_group;                /* i8g: columns per scale (a power of two) */
    u32 w_group_shift;          /* log2(w_group): the verifier follows shifts, not divisions */
    u32 pad;
    s32 embed_adj, lm_adj;      /* exponent adjustment of a product's accumulator */
    s32 w_adj[QK_MAX_LAYERS * 8]; /* per layer: q k v o gate up down (see qk_row_adj) */
    s32 norm_exp[4 * QK_MAX_LAYERS];      /* I32S exponents: attn 2l, mlp 2l+1, final 2L */
    s32 qk_norm_exp[2 * QK_MAX_LAYERS];   /* q_norm 2l, k_norm 2l+1 */
    s32 k_exp[QK_MAX_LAYERS];             /* KV cache exponents per layer */
    s32 v_exp[QK_MAX_LAYERS];
    struct qm_sf eps;           /* rms_norm_eps */
    struct qm_sf inv_hidden;    /* 1 / hidden */
    struct qm_sf inv_head_dim;  /* 1 / head_dim */
    struct qm_sf attn_c;        /* log2(e) / sqrt(head_dim) */
};

/* kernel invocation arguments, little-endian, at the start of data_in */
struct qk_args {
    u32 layer;
    u32 begin, end;     /* rows, heads, or (head, chunk) tasks: [begin, end) */
    u32 pos;            /* position of the token being computed */
    u32 token;          /* embed: the token id */
    u32 mode;           /* matvec: enum qk_matvec_mode */
    u32 slot;           /* matvec QK_MV_LOGITS: argmax slot of this invocation */
    u32 n_slots;        /* argmax_reduce: slots to combine */
    u32 streamed;       /* matvec, embed: weights were staged in `work` ... */
    u32 work_key;       /* ... from this key on (--stream) */
};

enum qk_matvec_mode {
    QK_MV_QKV = 0,      /* q|k|v rows of a layer -> qkv (Q32) */
    QK_MV_O = 1,        /* o_proj rows -> h += */
    QK_MV_GATE_UP = 2,  /* gate|up rows -> gu (Q32) */
    QK_MV_DOWN = 3,     /* down_proj rows -> h += */
    QK_MV_LOGITS = 4,   /* vocabulary rows -> logits (Q32) and an argmax slot */
};

enum qk_norm_target {
    QK_NORM_ATTN = 0,   /* h -> x with the layer's input_layernorm */
    QK_NORM_MLP = 1,    /* h -> x with post_attention_layernorm */
    QK_NORM_FINAL = 2,  /* h -> x with model.norm */
};

/* one (head, chunk) attention partial: scores relative to max_score */
struct qk_attn_part {
    s64 max_score;      /* largest raw q.k in the chunk */
    u64 sum;            /* sum of 2^-u, Q30 */
    s64 acc[];          /* head_dim sums of p * v16 */
};

/* an argmax partial: the largest logit of a row range, lowest index on ties */
struct qk_argmax {
    s64 value;
    u32 index;
    u32 valid;
};

/* scalars the kernels pass each other (one map value) */
struct qk_scalars {
    s32 x_exp;                    /* exponent of the act vector in `x` */
    s32 pad;
    s32 q_exp[QK_MAX_HEADS];      /* exponent of each rotated query head */
    u32 argmax_index;             /* result of argmax_reduce */
    s32 pad2;
    s64 argmax_value;
};

#endif
