/* plan_kv.h - the parts of a plan that attention reads beside the weights
 * (plan_kv.c), for qp_plan_build. Each fills p from the container. */
#ifndef QP_PLAN_KV_H
#define QP_PLAN_KV_H

#include "plan.h"

/* cfg.k_exp and cfg.v_exp of every layer */
int qp_plan_kv_exponents(struct qp_plan *p, const struct qpk_file *f, qp_err *err);

/* p->klayout_table: per layer, the K boosts, extension bits and donors */
int qp_plan_klayout(struct qp_plan *p, const struct qpk_file *f, qp_err *err);

/* p->rope_table: per position and RoPE pair, cos and sin in Q30 */
int qp_plan_rope(struct qp_plan *p, double theta, qp_err *err);

#endif
