/* ref.h - the float reference: a float64 Qwen3 forward pass straight from a
 * Hugging Face checkpoint folder (BF16/F16/F32 safetensors) or a Qwen3 GGUF
 * file (its values as its types decode them), sharing no code with the
 * fixed-point path. It is what accuracy is measured against. */
#ifndef QP_REF_H
#define QP_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "hf_config.h"

struct ref_model;

/* Opens path, a folder (config.json + safetensors) or a GGUF file (one, or
 * the first part of a split), with room for ctx positions. */
int ref_open(struct ref_model **m, const char *path, uint32_t ctx, qp_err *err);

/* path names a GGUF file rather than a checkpoint folder: a regular file
 * whose name ends in .gguf */
bool ref_is_gguf(const char *path);
void ref_close(struct ref_model *m);

const struct qwen3_config *ref_config(const struct ref_model *m);

/* Runs token at position pos (positions must come in order 0, 1, 2, ...;
 * pos 0 starts over) and writes vocab logits (logits NULL: skips the
 * vocabulary projection, e.g. when only collecting inputs). */
int ref_forward(struct ref_model *m, uint32_t token, uint32_t pos, double *logits, qp_err *err);

/* A measurement, never used by qrun: rounds every K and V head vector the
 * reference caches to `bits` bits (sign included; 0 keeps float64), as a
 * block float with one exponent per head vector, so qp-accuracy can show
 * what a cache of that width costs with no other error. K channel pairs are
 * first scaled as k_scale says; V vectors are also stretched as qrun's are
 * (qmath.h qm_v_stretch). */
enum ref_k_scale {
    REF_K_FLAT,         /* as they are */
    REF_K_NORM,         /* by the power of two of their k_norm gain (qrun's kboost) */
    REF_K_IMPORTANCE,   /* variable width: pair i gets k_bits + log2(gk_i gq_i / geomean) */
};
void ref_round_kv(struct ref_model *m, int k_bits, int v_bits, enum ref_k_scale k_scale);

/* After ref_forward: the residual stream after layer l (hidden doubles),
 * l = n_layers meaning after the final norm. */
const double *ref_hidden_after(const struct ref_model *m, uint32_t layer);

/* The inputs of the matrices, for calibrating a quantiser (`qpack pack
 * --calibrate`): q/k/v read the attention-normed residual, o_proj the
 * attention output, gate/up the MLP-normed residual, down_proj
 * silu(gate) * up, the vocabulary projection the final-normed residual. */
enum ref_input {
    REF_IN_ATTN,   /* [layer][hidden] */
    REF_IN_O,      /* [layer][n_heads * head_dim] */
    REF_IN_MLP,    /* [layer][hidden] */
    REF_IN_DOWN,   /* [layer][intermediate] */
    REF_IN_HEAD,   /* [1][hidden], layer 0 */
    REF_N_INPUTS
};

/* From now on every ref_forward adds the square of each input value of every
 * matrix, per input column (starts from zero). */
int ref_collect_inputs(struct ref_model *m, qp_err *err);

/* Σ x_j^2 of input `in` of layer `layer` over the *count positions run
 * since ref_collect_inputs; NULL when not collecting or out of range. */
const double *ref_input_sumsq(const struct ref_model *m, enum ref_input in, uint32_t layer, uint64_t *count);

#endif
