/* qwen3_abi.h - what the host and the kernels agree on: the arguments of a
 * kernel invocation (passed as the test run's input data), the layout of
 * the maps, and the sizes that bound every loop. Shared by kernels/qwen3.bpf.c,
 * the host twin (engine/emu.c) and the loader (engine/bpf_backend.c). */
#ifndef QP_QWEN3_ABI_H
#define QP_QWEN3_ABI_H

#include "qmath.h"

#define QK_MAX_LAYERS 256         /* = QWEN3_MAX_LAYERS */
#define QK_MAX_HEADS 256
#define QK_ATTN_CHUNK 256         /* positions per attention task */
#define QK_MAX_BLOCK 64           /* positions one forward block computes at most */
#define QK_MAX_ARGMAX_SLOTS 1024  /* partial argmaxes of one vocabulary pass */
#define QK_ENC_Q24 1              /* = QPK_ENC_Q24 */
#define QK_ENC_I8G 3              /* = QPK_ENC_I8G */
#define QK_ENC_I4G 4              /* = QPK_ENC_I4G */
#define QK_ENC_I6L 8              /* i6 lanes: an i6g vocabulary projection in the kernels' layout (below) */
#define QK_I8_GROUP_SHIFT 12      /* i8g: a group's sum * scale is shifted down this much */
#define QK_MAX_HIDDEN 16384       /* hidden size the kernels' index masks allow */
#define QK_MAX_ACT 32768          /* act vector length (max of hidden, q_dim, inter) */
#define QK_COL_CHUNK_MAX 1024     /* columns per product callback at most (engine/plan.c) */
#define QK_XQ_BLOCK 32            /* i4g: act values per 8-bit block (the smallest group) */
#define QK_XQ_FRAC 12             /* i4g: fraction bits a block sum keeps below the largest block */
#define QK_I4_GROUP_SHIFT 10      /* i4g: a group's D*SP - M*SA is shifted down this much */
#define QK_XQ_MAX_REL 31          /* i4g: blocks further below the largest are dropped */
#define QK_KBOOST_MAX 10          /* K channel boost: at most 2^10 (engine/plan_kv.c) */
#define QK_KEXT_MAX 15            /* K cache: extension bits of one channel at most */
#define QK_K_ACT_BITS 31          /* K head mantissas before the cache: |m| <= 2^31 */
#define QK_Q_ACT_BITS 29          /* query mantissas: q.k stays below 2^29+10+15+7 < 2^63 */

/* An index already checked against a model size, masked to its table's
 * power-of-two length so the verifier sees the bound on all 64 bits (a
 * 32-bit compare alone leaves the upper half unknown to it). The empty asm
 * stops the compiler from dropping the mask as redundant. */
#define QK_IDX(x, len) ({ u64 __qk_v = (x); asm volatile("" : "+r"(__qk_v)); __qk_v & ((len) - 1); })

/* The matrices the kernels multiply by, in the order of the per-layer
 * tables (qk_config.w_key, w_adj, the bits of w_i4): not the container's
 * roles (QPK_ROLE_*, formats/qpk.h), whose 7 is v_proj. The vocabulary
 * projection is in no per-layer table (qk_config.lm_key, lm_i4, lm_i6,
 * lm_adj). */
enum qk_matrix {
    QK_MATRIX_Q, QK_MATRIX_K, QK_MATRIX_V, QK_MATRIX_O,
    QK_MATRIX_GATE, QK_MATRIX_UP, QK_MATRIX_DOWN,
    QK_MATRICES_PER_LAYER,                  /* 7 */
    QK_MATRIX_VOCAB = QK_MATRICES_PER_LAYER,
};
/* entries per layer of w_key and w_adj: the matrices of a layer rounded up
 * to a power of two, the tables' length for QK_IDX */
#define QK_MATRIX_STRIDE 8
#define QK_MATRIX_BIT(m) (1u << (m))   /* a matrix's bit in w_i4 */

/* Model constants, read-only in the kernels (BPF .rodata set before load,
 * so the verifier sees every size as a known constant). */
struct qk_config {
    u32 hidden, inter, q_dim, kv_dim, head_dim, n_heads, n_kv_heads, vocab, n_layers, ctx;
    u32 kv_slots;               /* KV cache slots (one per sequence): ctx positions each (qk_kv_row0) */
    u32 max_chunks;             /* ceil(ctx / QK_ATTN_CHUNK) */
    u32 embed_key, lm_key;      /* first row block of the embedding / vocabulary projection */
    u32 embed_i4, lm_i4;        /* ... 1 when it is i4g (in a w4_* map), 0 when wide */
    u32 embed_i6, lm_i6;        /* ... 1 when it is an i6g tensor held in w_hid as i6 lanes (QK_I6_*) */
    u32 act_len;                /* entries of x: max(hidden, q_dim, inter) */
    u32 w_enc;                  /* wide matrices (w_hid, w_o, w_down): QK_ENC_Q24 or QK_ENC_I8G */
    u32 w_group;                /* i8g: columns per scale (a power of two) */
    u32 w_group_shift;          /* log2(w_group): the verifier follows shifts, not divisions */
    u32 w4_group, w4_group_shift; /* i4g: columns per (d, m) pair, a power of two >= 16 */
    u32 has_i4;                 /* any i4g matrix: the act vector is quantised (quant_x) */
    u32 block;                  /* positions per block (1..QK_MAX_BLOCK): entries of the per-position maps */
    u32 col_chunk, col_chunk_shift; /* columns a product's callback takes at a time (qk_dot.h) */
    u32 attn_heads;             /* query heads per attention task: 2 when the heads that share a K/V head
                                   come in pairs (one read of K and V serves both), else 1 */
    u32 kv8;                    /* the KV cache holds 8-bit codes (qk_kv8.h); 0: int16 */
    u32 call_budget_ns;         /* a matvec or attention call stops at the first row block or task
                                   that ends past this long after its start (0: no bound; < 2^31) */
    u32 w_key[QK_MAX_LAYERS * QK_MATRIX_STRIDE]; /* [layer * stride + enum qk_matrix]: first row block in its map */
    u32 w_i4[QK_MAX_LAYERS];    /* per layer: bit enum qk_matrix set when that matrix is i4g (w4_* maps) */
    s32 embed_adj, lm_adj;      /* exponent adjustment of a product's accumulator */
    s32 w_adj[QK_MAX_LAYERS * QK_MATRIX_STRIDE]; /* as w_key (see qk_row_adj) */
    s32 norm_exp[4 * QK_MAX_LAYERS];      /* I32S exponents: attn 2l, mlp 2l+1, final 2L */
    s32 qk_norm_exp[2 * QK_MAX_LAYERS];   /* q_norm 2l, k_norm 2l+1 */
    s32 k_exp[QK_MAX_LAYERS];             /* KV cache exponents per layer */
    s32 v_exp[QK_MAX_LAYERS];
    struct qm_sf eps;           /* rms_norm_eps */
    struct qm_sf inv_hidden;    /* 1 / hidden */
    struct qm_sf inv_head_dim;  /* 1 / head_dim */
    struct qm_sf attn_c;        /* log2(e) / sqrt(head_dim) */
};

/* attention tasks per (block entry, chunk): one per attn_heads query heads
 * (a task's heads) */
static inline u32 qk_attn_head_tasks(const struct qk_config *c)
{
    return c->n_heads / c->attn_heads;
}

/* The maps, in the order of the host's enum qp_map_id (M(NAME, name)):
 * the weights first (to QK_NORMS), then the tables, the KV cache and the
 * per-step state; qk_kernels.h says what each holds. */
#define QK_MAPS(M)                                                     \
    M(W_HID, w_hid) M(W_O, w_o) M(W_DOWN, w_down)                      \
    M(W4_HID, w4_hid) M(W4_O, w4_o) M(W4_DOWN, w4_down)                \
    M(NORMS, norms) M(QK_NORMS, qk_norms) M(ROPE, rope)                \
    M(KLAYOUT, klayout) M(KCACHE, kcache) M(VCACHE, vcache)            \
    M(H, h) M(X, x) M(XQ, xq) M(QKV, qkv) M(QROT, qrot) M(GU, gu)      \
    M(SCORES, scores) M(PARTS, parts) M(LOGITS, logits) M(AMAX, amax)  \
    M(SCAL, scal) M(WORK, work) M(UNPK, unpk) M(SEQ, seq)

/* The BPF programs, one per kernel (X(NAME, name, kernel function)): the
 * one list that kernels/qwen3.bpf.c, the host twin and the loader walk.
 * The matrix products have a program per kernel encoding and, for the
 * encodings that unpack a block of positions' weights once, per block:
 * matvec_q24 (q24), matvec_i8 and matvec_i8_block (i8g), matvec_i4 and
 * matvec_i4_block (i4g), matvec_i6 and matvec_i6_block (i6 lanes). Each
 * reads its weights from the resident maps or, with --stream, from the
 * work map (qk_args.streamed). rope_store and attention have a program
 * per KV cache: rope_store8 and attention8 for the 8-bit one (QK_CFG.kv8); the
 * loader loads the pair the model's cache needs. BPF keeps 15 characters
 * of a name. */
#define QK_PROGRAMS(X)                                                 \
    X(EMBED, embed, qk_embed)                                          \
    X(RMSNORM, rmsnorm, qk_rmsnorm)                                    \
    X(QUANT_X, quant_x, qk_quant_x)                                    \
    X(MATVEC_Q24, matvec_q24, qk_matvec_q24)                           \
    X(MATVEC_I8, matvec_i8, qk_matvec_i8)                              \
    X(MATVEC_I8_BLOCK, matvec_i8_block, qk_matvec_i8_block)            \
    X(MATVEC_I4, matvec_i4, qk_matvec_i4)                              \
    X(MATVEC_I4_BLOCK, matvec_i4_block, qk_matvec_i4_block)            \
    X(MATVEC_I6, matvec_i6, qk_matvec_i6)                              \
    X(MATVEC_I6_BLOCK, matvec_i6_block, qk_matvec_i6_block)            \
    X(ROPE_STORE, rope_store, qk_rope_store)                           \
    X(ATTENTION, attention, qk_attention)                              \
    X(ATTN_MERGE, attn_merge, qk_attn_merge)                           \
    X(ROPE_STORE8, rope_store8, qk_rope_store8)                        \
    X(ATTENTION8, attention8, qk_attention8)                           \
    X(SWIGLU, swiglu, qk_swiglu)                                       \
    X(ARGMAX_REDUCE, argmax_reduce, qk_argmax_reduce)

/* the programs' numbers, in QK_PROGRAMS's order (the host's enum qp_kernel) */
enum qk_program {
#define QK_PROGRAM_ENUM(NAME, name, kernel) QK_P_##NAME,
    QK_PROGRAMS(QK_PROGRAM_ENUM)
#undef QK_PROGRAM_ENUM
    QK_PROGRAM_COUNT
};

/* kernel invocation arguments, little-endian, at the start of data_in */
struct qk_args {
    u32 layer;
    u32 begin, end;     /* rows, heads, or (entry, head, chunk) tasks: [begin, end) */
    u32 max_pos;        /* attention: the largest position among the block's entries (its chunks) */
    u32 b0, nb;         /* block entries [b0, b0 + nb), each at its own position (struct qk_seq) */
    u32 token;          /* embed: the token id (of entry b0) */
    u32 mode;           /* matvec: enum qk_matvec_mode */
    u32 amax_slot;      /* matvec QK_MV_LOGITS: this invocation's slot of map `amax` */
    u32 n_amax_slots;   /* argmax_reduce: amax slots to combine */
    u32 streamed;       /* matvec, embed: weights were staged in `work` ... */
    u32 work_key;       /* ... from this key on (--stream) */
    u32 scratch;        /* matvec_*_block: the calling thread's `unpk` entry */
    u32 resume;         /* matvec QK_MV_LOGITS: rows before begin are already in the amax_slot */
};

/* The kernel schedule (docs/SCHEDULE.md): a step's invocations, in the
 * order the host schedule would run them, written by the host into map
 * `jobs` and run by the kernel as chains of BPF work items, one job (or
 * its part within the call budget) per item. A phase is a run of jobs that
 * do not depend on each other (a list the host schedule shares between its
 * threads); each of up to QK_CHAIN_LANES lanes, a chain of work items on
 * its own CPU, claims the next job of the phase, and the next phase opens
 * when the last job of this one is done. */
#define QK_CHAIN_MAX_JOBS 16384
#define QK_CHAIN_LANES 2
/* work items per lane (map `wq`, lane * QK_LANE_ITEMS + program): one per
 * kernel, then the lane's idle item, which waits for a job to claim */
#define QK_LANE_ITEMS (QK_PROGRAM_COUNT + 1)

struct qk_job {
    u32 program;        /* enum qk_program */
    u32 phase_end;      /* the first job after this job's phase */
    struct qk_args args;
};

enum qk_chain_status {
    QK_CHAIN_IDLE = 0,
    QK_CHAIN_RUNNING = 1,
    QK_CHAIN_DONE = 2,
    QK_CHAIN_REFUSED = 3,   /* job stop_job's kernel refused its arguments */
    QK_CHAIN_FLAGGED = 4,   /* job stop_job raised scal.range_error or scal.seq_error */
    QK_CHAIN_CANCELLED = 5, /* the host set cancel */
    QK_CHAIN_BROKEN = 6,    /* a job or work item could not be found or started */
};

/* the chains' state (map `chain`, one value): the host writes n, lanes,
 * phase_end, status and cancel before it starts the lanes, the work items
 * the rest; the lanes' last item ends the step (lanes reaches 0) */
struct qk_chain {
    u32 n;              /* jobs in the list */
    u32 lanes;          /* lanes still running */
    u32 status;         /* enum qk_chain_status: the first lane to stop the step sets it */
    u32 cancel;         /* set by the host: every lane stops before its next work item */
    u32 claim;          /* the next job a lane may claim ... */
    u32 phase_end;      /* ... when below this */
    u32 done;           /* jobs finished */
    u32 stop_job;       /* where the step stopped, when not DONE */
    u32 items;          /* work items run (a job's parts count each) */
    u32 max_item_job;   /* the job of the longest item */
    u64 max_item_ns;    /* the longest item's kernel time */
    u32 lane_job[QK_CHAIN_LANES];       /* the job each lane runs */
    u64 lane_t0[QK_CHAIN_LANES];        /* the start of each lane's running item */
    u32 lane_cpu[QK_CHAIN_LANES];       /* the CPU each lane's last item ran on */
    u32 lane_items[QK_CHAIN_LANES];     /* items each lane ran */
    u32 lane_state[QK_CHAIN_LANES];     /* QK_LANE_*: whether lane_start or the host took the lane */
    u32 listen;         /* a listen step (below): the last lane starts the listen item, no record */
    u32 kick;           /* lane_kick's step whose lane 1 lane_kicked may still start (0: none); the
                           host takes it back when the step stops */    u32 gen;            /* a listen step's number in its request (qk_listen.gen) */
};

enum qk_lane_state {
    QK_LANE_WAITING = 0,    /* not started yet */
    QK_LANE_STARTED = 1,    /* lane_start ran it */
    QK_LANE_DROPPED = 2,    /* the host gave up on it: the step stopped before it started */
};

/* lane_start's context: the lane it starts (on the CPU that runs it) */
struct qk_lane_start {
    u32 lane;
};

/* qrun listen (docs/LISTEN.md): a UDP packet to the listening port, taken
 * by XDP program listen_xdp, starts the listen item (map `wq`, key
 * QK_LISTEN_ITEM), which builds a one-position step from a job list
 * template (map `tmpl`: the host records two per attention chunk count,
 * QK_LISTEN_TMPL_JOBS jobs apart, at listen's start), runs it on lane 0
 * and, when the step's last lane ends, takes its argmax and starts the
 * next step, until the request's tokens are there. The answer leaves on a
 * later packet, the client's poll, turned round by XDP. */
#define QK_LISTEN_ITEM (QK_CHAIN_LANES * QK_LANE_ITEMS)
#define QK_LISTEN_TMPL_JOBS 2048  /* jobs of one template at most */
#define QK_LISTEN_MAX_CHUNKS 256  /* attention chunk counts, so ctx <= 65536 */
/* template 2 k + logits: k + 1 attention chunks, with the vocabulary
 * projection and argmax (logits 1: the steps whose token is asked) or
 * without (0: the request's ids before its last) */
#define QK_LISTEN_TMPL(k, logits) (2 * (k) + (logits))
#define QK_LISTEN_MAX_IDS 16      /* ids a packet carries at most, tokens a request asks at most */
#define QK_LISTEN_HDR 20          /* the packet header's bytes */
#define QK_LISTEN_POLL_BYTES (QK_LISTEN_HDR + 4 * QK_LISTEN_MAX_IDS) /* a poll: room for the answer */
#define QK_LISTEN_MAGIC 0x51504b4cu /* "QPKL", big endian on the wire */
#define QK_LISTEN_VERSION 1

enum qk_listen_kind {
    QK_LK_STEP = 1, QK_LK_POLL = 2,
    QK_LK_ANSWER = 0x81, QK_LK_BUSY = 0x82, QK_LK_REFUSED = 0x83, QK_LK_ACCEPTED = 0x84,
    QK_LK_REPLY = 0x80,     /* the bit of every reply's kind: a reply is never answered */
};

/* why a packet was refused (a refusal's byte 6) */
enum qk_listen_reason {
    QK_LR_LENGTH = 1,       /* the UDP payload's length disagrees with the kind and n */
    QK_LR_VERSION = 2,
    QK_LR_KIND = 3,
    QK_LR_COUNT = 4,        /* n ids: 0 or above QK_LISTEN_MAX_IDS */
    QK_LR_WANT = 5,         /* tokens asked: 0 or above QK_LISTEN_MAX_IDS */
    QK_LR_SESSION = 6,      /* session id at or above the model's KV slots */
    QK_LR_POSITION = 7,     /* neither 0 nor the session's next position */
    QK_LR_CONTEXT = 8,      /* the request runs past the context */
    QK_LR_TOKEN = 9,        /* an id at or above the vocabulary */
    QK_LR_SENDER = 10,      /* the session belongs to another address and port */
    QK_LR_REQUEST = 11,     /* a poll for a request the session is not running or answering */
    QK_LR_FAILED = 12,      /* the step failed in the kernel (a flag, a broken chain) */
};

enum qk_session_state { QK_SS_IDLE = 0, QK_SS_RUNNING = 1, QK_SS_DONE = 2, QK_SS_FAILED = 3 };

/* one session: a KV cache slot (map `sessions`, key = slot) */
struct qk_session {
    u32 state;          /* enum qk_session_state */
    u32 req;            /* the request it runs or answered */
    u32 pos0;           /* the request's first position */
    u32 next_pos;       /* the position the next request starts at */
    u32 n_ids, want;    /* the request's ids and tokens asked */
    u32 status;         /* QK_SS_FAILED: the chain's status */
    u32 addr;           /* the sender's IPv4 address and UDP port (network order), taken at position 0 */
    u32 port;
    u32 ids[QK_LISTEN_MAX_IDS];
    u32 out[QK_LISTEN_MAX_IDS];
    u64 t_packet, t_done;   /* the request's arrival and its last token (kernel clock) */
};

/* the listener (map `listen`, one value): the host writes open, port and
 * the templates' job counts; the rest is the packets' and the item's */
struct qk_listen {
    u32 open;           /* 1 while qrun listen runs */
    u32 port;           /* the UDP port, network order */
    u32 busy;           /* a request runs (one at a time) */
    u32 session;        /* ... of this session */
    u32 step;           /* its step: position pos0 + step */
    u32 stepping;       /* the step's chain runs */
    u32 requests, answered;     /* counters */
    u32 tmpl_jobs[2 * QK_LISTEN_MAX_CHUNKS];    /* jobs of each template (QK_LISTEN_TMPL) */
    /* two lanes (the host sets lanes and cpu): the step packet's frame goes
     * through map lane_cpus to the other CPU, where lane_kicked starts the
     * request's second lane by taking ticket kick (the request's number).
     * Both lanes live until the request ends: a lane that leaves a step
     * while the other still runs it parks (its idle item looks again) and
     * joins the next; the last to leave starts the listen item on its CPU,
     * which starts that lane (lead) on the next step. */
    u32 lanes;          /* 2: the packet starts a second lane; 1: one lane */
    u32 cpu[QK_CHAIN_LANES];    /* the lanes' CPUs (the CPU map's entries) */
    u32 kick;           /* the request whose second lane lane_kicked may start (0: none) */
    u32 lead;           /* the lane the listen item starts */
    u32 gen;            /* steps built in this request (qk_chain.gen the latest's) */
    u32 parked[QK_CHAIN_LANES];     /* the request whose next step the lane waits for (0: none) */
    u32 left_gen[QK_CHAIN_LANES];   /* ... having left this one */
    u32 joined;         /* steps a parked lane joined (a counter) */
};

/* lane_kick's frame after its Ethernet header: the step's number (as in
 * qk_chain.kick, never 0) and the two lanes' CPUs; lane 1 starts on the
 * one lane_kick does not run on (cpu[0] when it runs on neither) */
struct qk_lane_kick {
    u32 step;
    u32 cpu[QK_CHAIN_LANES];
};

/* A program's return value: 0 done, 1 arguments refused, and from
 * QK_RET_PARTIAL up a matvec or attention that ran out of QK_CFG.call_budget_ns
 * after QK_RET_PARTIAL + n units (row blocks, tasks) from begin; the
 * host runs the rest in another call. Units are independent and a
 * resumed argmax keeps the earlier rows' best, so the bits are those of
 * one call. */
#define QK_RET_PARTIAL 2

/* Where block entry b runs (map `seq`, one value per block entry, written
 * by the host before each block): the KV cache slot of its sequence and
 * its position there. A block may hold the entries of several sequences
 * in any order (a batch of sessions): rope_store writes each entry's K and
 * V at its own position of its own slot, and attention reads each entry's
 * slot up to its position, so an entry never sees another sequence. Every
 * other kernel works on each entry alone: an entry's values are the same
 * bits whatever shares its block. */
struct qk_seq {
    u32 pos;
    u32 kv_slot;
};

enum qk_matvec_mode {
    QK_MV_QKV = 0,      /* q|k|v rows of a layer -> qkv (Q32) */
    QK_MV_O = 1,        /* o_proj rows -> h += */
    QK_MV_GATE_UP = 2,  /* gate|up rows -> gu (Q32) */
    QK_MV_DOWN = 3,     /* down_proj rows -> h += */
    QK_MV_LOGITS = 4,   /* vocabulary rows -> logits (Q32) and an amax slot */
};

enum qk_norm_target {
    QK_NORM_ATTN = 0,   /* h -> x with the layer's input_layernorm */
    QK_NORM_MLP = 1,    /* h -> x with post_attention_layernorm */
    QK_NORM_FINAL = 2,  /* h -> x with model.norm */
};

/* The quantised act vector (map `xq`, one value per block entry) for the
 * i4g and i6 lanes products, made by quant_x from `x` (the i8g products'
 * 16-bit records follow it in the same value, QK_XP_*): x_j ~ a_j * 2^(sh_b + x_exp) per 32-entry block b,
 * |a_j| <= 127. One record of QK_XQ_REC 64-bit words per block, so that a
 * product walks the act vector with a single pointer:
 *   u64 pk[2][4]   per 16-entry half h, word j packs a_(32b + 16h + 4L + j)
 *                  for L = 0..3 into 16-bit lane 3 - L (two's complement
 *                  lanes: the word is the integer sum of a * 2^(16 (3 - L)))
 *   s64 sa         (A_b << QK_XQ_FRAC) >> r_b, A_b = sum of a_j in b
 *   u64 r          r_b = min(sh_max - sh_b, QK_XQ_MAX_REL): the products
 *                  shift by it unmasked, so nothing else writes it
 *   s64 a          A_b
 * and scal.xq_exp = x_exp + sh_max - QK_XQ_FRAC. */
#define QK_XQ_REC 11
#define QK_XQ_SA 8                /* word of a record */
#define QK_XQ_R 9
#define QK_XQ_A 10

/* i6 lanes: the vocabulary projection's layout of an i6g matrix (container:
 * formats/QPK.md), made by qrun as it fills w_hid. A row block is an i8g
 * row block (codes at 64 t + 16 k + j for column 16 t + j of row k, then the
 * int32 scales) with each row's 16 code bytes of a chunk reordered and
 * biased: byte QK_I6_BYTE(j) holds q_j + QK_I6_BIAS (0..63). A 64-bit word
 * then holds columns j, j + 4, j + 8, j + 12 of j = 0, 1 (word 0) or 2, 3
 * (word 1) in its even and odd bytes: masked to 16-bit lanes they meet the
 * act words pk[j] of the quantised act vector (qk_dot_i6_word). */
#define QK_I6_BIAS 32
#define QK_I6_BYTE(j) (8 * (((j) & 3) >> 1) + 2 * ((j) >> 2) + ((j) & 1))
#define QK_XQ_BYTES(act_len) (8 * QK_XQ_REC * ((act_len) / QK_XQ_BLOCK))

/* The act vector in 16-bit blocks for the i8g products, in the same map
 * value after the 8-bit records (from byte QK_XQ_BYTES(act_len) on): x_j ~
 * a_j * 2^(sh_b + x_exp) per 32-entry block b, |a_j| <= 2^15 - 1. One
 * record of QK_XP_REC 64-bit words per block:
 *   s64 pk[16]     word 4 i + j (i = 0..3, j = 0..3) pairs entries
 *                  c = 32 b + 8 i + j and c + 4 as a_(c+4) + a_c * 2^32
 *                  (the integer: two's complement lanes borrow)
 *   s64 a          A_b = sum of a_j in b
 *   u64 r          r_b = min(sh_max - sh_b, QK_XQ_MAX_REL)
 * and scal.xp_exp = x_exp + sh_max - QK_XP_FRAC. An i8g code word (8
 * columns of a row) with its sign bits flipped, u = q + 128, masked with
 * QK_PAIR_LANES after shifts of 0, 8, 16, 24 bits holds u_c + u_(c+4) *
 * 2^32 for j = 0..3: its product with pk[4 i + j] has u_c a_c + u_(c+4)
 * a_(c+4) as the coefficient of 2^32 (qk_dot_i8_block). */
#define QK_XP_REC 18
#define QK_XP_A 16                /* word of a record */
#define QK_XP_R 17
#define QK_XP_FRAC 8              /* i8g: fraction bits a block sum keeps below the largest block */
#define QK_XP_BYTES(act_len) (8 * QK_XP_REC * ((act_len) / QK_XQ_BLOCK))

/* An i4g row block unpacked for a block of positions (map `unpk`, one
 * value per thread), for a matrix of `cols` columns, QK_UNPK_I4_UNIT
 * words per act block b (32 columns):
 *   u64 lanes[2][4][4]   half h, j = 0..3, row k: ((w >> 4j) &
 *                        QK_NIBBLE_LANES) - QK_I4_LANE_BIAS of row k's code
 *                        word w of chunk 2b + h
 *   s64 par[4][2]        row k: the two parameters (D, M) of the group
 *                        b starts; not used when b starts none
 * An i6 lanes row block unpacks row by row: u64 lanes[4][cols / 16][4], lane
 * word j of row k, chunk t holding the signed codes of the columns that
 * meet act word j (qk_unpack_i6_chunk), and s64 dm[4][groups][2] from u64
 * entry act_len, dm[k][g][0] the group's int32 scale and dm[k][g][1] not
 * used; its groups have at least 32 columns, so dm fits. An i8g row block,
 * QK_UNPK_I8_UNIT words per act block b:
 *   u64 pairs[16][4]     pair word p = 4 i + j, row k: q_c + q_(c+4) * 2^32
 *                        for c = 32 b + 8 i + j (qk_unpack_i8_chunk)
 *   s64 d[4]             row k: the int32 scale of the group b starts;
 *                        not used when b starts none
 * All three fit QK_UNPK_BYTES for matrices of up to act_len columns. */
#define QK_UNPK_I4_UNIT 40
#define QK_UNPK_I4_PAR 32
#define QK_UNPK_I8_UNIT 68
#define QK_UNPK_I8_PAR 64
#define QK_UNPK_DM_OFF(act_len) (act_len)
#define QK_UNPK_BYTES(act_len) (8 * QK_UNPK_I8_UNIT * (((act_len) + 31) / 32))

/* The K cache layout of one layer (map `klayout`, one value per layer,
 * engine/plan_kv.c), s32 entries:
 *   boost[head_dim / 2]  per RoPE pair: K is stored * 2^boost, the query
 *                        * 2^(QK_KBOOST_MAX - boost)
 *   ext[head_dim]        per channel: QK_KEXT_* fields
 *   n_donors             channels that lend their lowest bit (0: plain int16)
 * A channel the query weighs heavily (a large q_norm scale) gets x extra
 * bits: its int16 entry holds floor(w / 2^x) of its value w at 2^x finer
 * steps, and the x bits below lie in the lowest bit of x donor channels,
 * whose own values are rounded to even steps. The score then reads
 * sum q_k k16_k + sum over donors (k16_e & 1) * (round(q_d / 2^(x - j)) - q_e). */
#define QK_KL_EXT(head_dim) ((head_dim) / 2)
#define QK_KL_DONORS(head_dim) ((head_dim) / 2 + (head_dim))
#define QK_KL_LEN(head_dim) ((head_dim) / 2 + (head_dim) + 1)
#define QK_KEXT_BITS(e) ((u32)(e) & 31)           /* x: extension bits of this channel */
#define QK_KEXT_DONOR(e) (((u32)(e) >> 5) & 1)    /* lends its lowest bit ... */
#define QK_KEXT_BIT(e) (((u32)(e) >> 8) & 31)     /* ... as bit j of the extension ... */
#define QK_KEXT_PARTNER(e) (((u32)(e) >> 16) & 1023) /* ... of this channel */
#define QK_KEXT_MAKE_DONOR(partner, j) (s32)(1u << 5 | (u32)(j) << 8 | (u32)(partner) << 16)

/* The 8-bit KV cache (QK_CFG.kv8, kernels/qk_kv8.h) holds one head vector per
 * value: head_dim biased codes, then the vector's shift in a byte of its
 * own 8 (the rest 0). Values ((slot * n_layers + layer) * n_kv_heads +
 * kv_head) * ctx + pos: the positions an attention task reads, one head's
 * over a chunk, lie one after the other, which the CPU streams from memory
 * (the int16 cache's rows, all heads of a position, are read a head's
 * slice at a time: a stride that prefetching follows poorly). */
#define QK_KV8_VEC_BYTES(head_dim) ((head_dim) + 8)

/* one (head, chunk) attention partial: scores relative to max_score */
struct qk_attn_part {
    s64 max_score;      /* largest raw q.k in the chunk */
    u64 sum;            /* sum of 2^-u, Q30 */
    s64 min_shift;      /* smallest V vector shift it read: |acc| <= sum 2^(15 - min_shift) */
    s64 acc[];          /* head_dim sums of p * v16 */
};
#define QK_PART_ACC 3   /* acc's index in the map value (s64 entries) */

/* an argmax partial: the largest logit of a row range, lowest index on ties */
struct qk_argmax {
    s64 value;
    u32 index;
    u32 valid;
};

/* scalars the kernels pass each other (one map value) */
struct qk_scalars {
    s32 x_exp;                    /* exponent of the act vector in `x` */
    s32 xq_exp;                   /* exponent of the quantised act vector in `xq` (i4g) */
    s32 xp_exp;                   /* exponent of its 16-bit blocks (QK_XP_*, i8g) */
    s32 q_exp[QK_MAX_HEADS];      /* exponent of each rotated query head */
    u32 argmax_index;             /* result of argmax_reduce */
    u32 range_error;              /* sticky: non-zero once a Q32 value left its range
                                   * (QM_Q32_LIMIT_BITS): the results are not exact */
    u32 seq_error;                /* sticky: an entry's qk_seq was outside the model (its
                                   * slot, its position, or past args.max_pos): skipped */
    s64 argmax_value;
};

#endif
