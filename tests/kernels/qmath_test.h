/* qmath_test.h - a dispatcher over qmath.h's functions, compiled into a
 * test BPF program (qmath_test.bpf.c) and into the host test, so each
 * function's two builds can be compared on the same inputs. */
#ifndef QP_QMATH_TEST_H
#define QP_QMATH_TEST_H

#include "qmath.h"

#define QMT_BATCH 4096

enum qmt_fn {
    QMT_RSHIFT_ROUND, QMT_SCALE_POW2, QMT_BITLEN, QMT_MUL_Q30, QMT_SF_MAKE, QMT_SF_MUL, QMT_SF_ADD,
    QMT_SF_RSQRT, QMT_EXP2_NEG, QMT_LOG2_ARG, QMT_SIGMOID, QMT_ACT_SHIFT, QMT_ACC_TO_Q32, QMT_CACHE16,
    QMT_V_STRETCH, QMT_V_WEIGHT, QMT_SCALE_CHECKED, QMT_LIN_ARG,
    QMT_COUNT,
};

struct qmt_case {
    s64 a, b, c, d;     /* inputs */
    s64 r0, r1;         /* outputs */
};

QM_INLINE void qmt_eval(u32 fn, struct qmt_case *c)
{
    struct qm_sf x = {(u64)c->a, (s32)c->b}, y = {(u64)c->c, (s32)c->d}, r;
    switch (fn) {
    case QMT_RSHIFT_ROUND: c->r0 = qm_rshift_round(c->a, (u32)c->b); break;
    case QMT_SCALE_POW2: c->r0 = qm_scale_pow2(c->a, (s32)c->b); break;
    case QMT_BITLEN: c->r0 = qm_bitlen((u64)c->a); break;
    case QMT_MUL_Q30: c->r0 = qm_mul_q30(c->a, (u32)c->b); break;
    case QMT_SF_MAKE: r = qm_sf_make((u64)c->a, (s32)c->b); c->r0 = (s64)r.m; c->r1 = r.e; break;
    case QMT_SF_MUL: r = qm_sf_mul(x, y); c->r0 = (s64)r.m; c->r1 = r.e; break;
    case QMT_SF_ADD: r = qm_sf_add(x, y); c->r0 = (s64)r.m; c->r1 = r.e; break;
    case QMT_SF_RSQRT: r = qm_sf_rsqrt(x); c->r0 = (s64)r.m; c->r1 = r.e; break;
    case QMT_EXP2_NEG: c->r0 = qm_exp2_neg_q30((u64)c->a); break;
    case QMT_LOG2_ARG: c->r0 = (s64)qm_log2_arg_q24((u64)c->a, (s32)c->b, y); break;
    case QMT_SIGMOID: c->r0 = qm_sigmoid_q30(c->a); break;
    case QMT_ACT_SHIFT: c->r0 = qm_act_shift((u64)c->a); break;
    case QMT_ACC_TO_Q32: c->r0 = qm_acc_to_q32(c->a, (s32)c->b); break;
    case QMT_CACHE16: {
        u32 l, r2;
        qm_cache_shifts((s32)c->b, (s32)c->c, &l, &r2);
        c->r0 = qm_to_cache16(c->a, l, r2, (u32)c->d);
        break;
    }
    case QMT_V_STRETCH: c->r0 = qm_v_stretch((u64)c->a); break;
    case QMT_V_WEIGHT: c->r0 = qm_v_weight((u64)c->a, (u32)c->b, (u32)c->c); break;
    case QMT_SCALE_CHECKED: {
        u64 bad = 0;
        c->r0 = qm_scale_pow2_checked(c->a, (s32)c->b, &bad);
        c->r1 = (s64)bad;
        break;
    }
    case QMT_LIN_ARG: {
        struct qm_lin l = qm_lin_make((s32)c->b, y);
        c->r0 = (u64)c->a >= l.t_cut ? -1 : (s64)qm_lin_arg_q24(&l, (u64)c->a);
        c->r1 = (s64)l.t_cut;
        break;
    }
    default: break;
    }
}

#endif
