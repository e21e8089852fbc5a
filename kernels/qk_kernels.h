/* qk_kernels.h - every kernel of the forward pass, written once.
 *
 * Compiled into the BPF object (kernels/qwen3.bpf.c, where QK_LOOKUP is
 * bpf_map_lookup_elem on an array map and QK_LOOP is bpf_loop) and into the
 * host twin (engine/emu.c, where they are a bounds-checked pointer
 * computation and a for loop). The arithmetic is qmath.h's.
 *
 * Each kernel reads its arguments (struct qk_args), checks every index it
 * was given against the model's sizes (QK_CFG, constants to the verifier)
 * and walks its range with QK_LOOP callbacks. Buffers ("maps"):
 *   w_hid    row blocks (4 rows, q24 or i8g) of every such matrix with `hidden`
 *            columns: per layer q|k|v|gate|up, then the embedding (and
 *            lm_head; i6 lanes when QK_CFG.embed_i6 / QK_CFG.lm_i6, qwen3_abi.h);
 *            where each starts: QK_CFG.w_key, QK_CFG.embed_key, QK_CFG.lm_key
 *   w_o      o_proj row blocks, w_down down_proj row blocks
 *   w4_*     the same for i4g matrices (QK_CFG.w_i4 says which map a matrix is in),
 *            their pf16 parameters widened to int32 as qrun fills the map
 *            (engine/plan_encode.c): a load each, not a decode
 *   norms    I32S vectors: layer l attn 2l, mlp 2l+1, final 2L
 *   qk_norms I32S head vectors: q_norm 2l, k_norm 2l+1
 *   rope     per position: cos, sin (Q30) interleaved for head_dim / 2
 *   kcache, vcache  int16 [(slot * n_layers + layer) * ctx + pos][kv_dim]: one
 *            cache of ctx positions per KV slot (qk_seq.kv_slot, at
 *            most QK_CFG.kv_slots); K laid out by klayout
 * The per-position maps (h, x, xq, qkv, qrot, gu, logits, scal) have one
 * entry per position of the block (QK_CFG.block); scores, parts and amax one
 * range of entries per block position. A kernel computes block entries
 * [b0, b0 + nb) of args, entry b at its own position and KV slot (its
 * struct qk_seq in map `seq`).
 *   h        residual, Q32 [hidden]
 *   x        act vector mantissas (exponent in scal.x_exp) [act_len]
 *   xq       x quantised to 8-bit blocks for i4g products (QK_XQ_*)
 *   qkv      Q32 q|k|v, then normalised mantissas in place
 *   klayout  per layer: K channel boosts and extension bits (qwen3_abi.h)
 *   qrot     rotated query mantissas (exponent per head in scal.q_exp), then
 *            per head the donor corrections of the K extension bits
 *   gu       Q32 gate|up; SiLU(gate) in place
 *   scores   raw q.k per (entry, head) [ctx]; for a head pair, then each
 *            position's V weight in place (qk_attn_weight2_cb)
 *   parts    attention partial per (entry, head, chunk) (struct qk_attn_part)
 *   logits   Q32 [vocab]; amax: argmax partial per (entry, amax slot); scal: scalars
 *   work     --stream: the row blocks of the running job, staged by the
 *            host from the container (value = the widest row block)
 */
#ifndef QP_QK_KERNELS_H
#define QP_QK_KERNELS_H

#include "qk_shims.h"
#include "qk_elementwise.h"
#include "qk_matvec.h"
#include "qk_rope.h"
#include "qk_attention.h"
#include "qk_rope8.h"
#include "qk_attention8.h"

#endif
