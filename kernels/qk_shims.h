/* qk_shims.h - what lets one source be both a BPF program and its host
 * twin, and keeps the verifier's work bounded: map lookups and loops
 * (QK_LOOKUP, QK_LOOP: bpf_map_lookup_elem and bpf_loop in BPF, a
 * bounds-checked pointer and a for loop on the host), the register and
 * ordering hints that keep clang's BPF code from spilling (QK_KEEP,
 * QK_MUL_INTO, QK_OPAQUE), and the small tricks that make the verifier see
 * one state where a naive program would show it many (qk_reload,
 * qk_unknown_zero, qk_exp_const). QK_CFG is the model's constants, defined
 * by the includer (a `const volatile` global in BPF, the emu's current config). */
#ifndef QP_QK_SHIMS_H
#define QP_QK_SHIMS_H

#include "qwen3_abi.h"

#ifdef __bpf__
#define QK_LOOKUP(map, key) ({ u32 __qk_key = (key); (void *)bpf_map_lookup_elem(&m_##map, &__qk_key); })
#define QK_LOOP(n, cb, ctx) bpf_loop((n), (cb), (ctx), 0)
/* an empty asm that keeps clang from hoisting every product of an unrolled
 * block and spilling them (1.3x slower, and it overflows the stack) */
#define QK_KEEP(a) asm volatile("" : "+r"(a) : : "memory")
/* w *= x in w's register: BPF's multiply overwrites its first operand,
 * and clang otherwise copies the x it still needs rather than the spent w */
#define QK_MUL_INTO(w, x) asm("%0 *= %1" : "+r"(w) : "r"(x))
/* *p |= v, atomically: both threads' kernels may raise a flag at once */
#define QK_ATOMIC_OR(p, v) __sync_fetch_and_or((p), (v))
/* a global function: the verifier checks its body once, for any arguments */
#define QK_SUBPROG __attribute__((noinline))
#define QK_NOW_NS() bpf_ktime_get_ns()
#else
#define QK_LOOKUP(map, key) qk_host_lookup(&qk_host->map, (key))
#define QK_LOOP(n, cb, ctx) qk_host_loop((n), (cb), (ctx))
#define QK_KEEP(a) ((void)0)
#define QK_MUL_INTO(w, x) ((w) *= (x))
#define QK_ATOMIC_OR(p, v) __atomic_fetch_or((p), (v), __ATOMIC_RELAXED)
#define QK_SUBPROG static
#define QK_NOW_NS() qk_host_now_ns()
#endif
/* Hides a value from clang (QM_OPAQUE). It keeps a pointer's offsets as
 * two additions: clang would otherwise merge a group's offset (low bits
 * zero) and a row index into one OR, whose range the verifier bounds only
 * by its bits (past the value at widths like 2560, where the groups do not
 * fill a power of two); and it keeps a mask clang would drop as known. */
#define QK_OPAQUE(p) QM_OPAQUE(p)

/* Raises scal.range_error when bad (an OR of qm_outside-style tests) is
 * non-zero; unconditional, so no branch depends on a flag in a bpf_loop
 * context (see qk_mv_ctx). */
QM_INLINE void qk_flag_range(struct qk_scalars *sc, u64 bad)
{
    QK_ATOMIC_OR(&sc->range_error, (u32)(bad | bad >> 32));
}

/* acc += w * x for a weight w just loaded: the product lands in w's
 * register, and acc stays in its own (QK_KEEP) */
#define QK_MAC(acc, w_load, x)                                             \
    do {                                                                  \
        s64 w_ = (w_load);                                                \
        QK_MUL_INTO(w_, x);                                               \
        acc += w_;                                                        \
        QK_KEEP(acc);                                                     \
    } while (0)

/* s += l * a in l's register */
#define QK_LANE_MAC(s, l, a)                                              \
    do {                                                                  \
        u64 __qk_l = (l);                                                 \
        QK_MUL_INTO(__qk_l, a);                                           \
        (s) += __qk_l;                                                    \
    } while (0)

/* A softfloat model constant, read field by field: clang for BPF copies a
 * whole `const volatile` struct as zeros (seen with clang 19), so never
 * pass QK_CFG.<sf> by value. */
#define QK_SF(field) qk_sf_fields(QK_CFG.field.m, QK_CFG.field.e)

QM_INLINE struct qm_sf qk_sf_fields(u64 m, s32 e)
{
    struct qm_sf r = {m, e};
    return r;
}

/* A fresh load of an argument: the verifier sees an unknown value, not
 * the constant an earlier test on it (a switch over the modes) made it,
 * so the paths that differ only in that value reach a loop in one state
 * and its callbacks are verified once, not once per value. */
QM_INLINE u32 qk_reload(const u32 *p)
{
    return *(const volatile u32 *)p;
}

/* 0, as a value the verifier does not know: the first state of a loop's
 * context then already has the unknown values its callbacks leave there,
 * and the verifier's second walk of the callback finds that state again
 * instead of walking it once more (a zero it knew is not equivalent). */
QM_INLINE s64 qk_unknown_zero(const struct qk_args *a)
{
    return (s64)qk_reload(&a->begin) - (s64)qk_reload(&a->begin);
}

/* integer model constants that feed arithmetic */
QM_INLINE s32 qk_exp_const(s32 v)
{
    s64 e = v;
    asm volatile("" : "+r"(e));
    return (s32)e;
}

/* Folds |v| into *acc by OR: only the bit length of a vector's largest
 * magnitude is ever needed, and the OR of the magnitudes has the same bit
 * length. Branch-free, so unrolled loops stay one verifier path. */
QM_INLINE void qk_max_abs(u64 *acc, s64 v)
{
    s64 sign = v >> 63;
    *acc |= (u64)((v ^ sign) - sign);
}

/* When an invocation with a time budget must stop (CLOCK_MONOTONIC, the
 * clock of bpf_ktime_get_ns); no budget never stops. On a PREEMPT_NONE
 * kernel a program holds its core until it returns: the budget bounds
 * that wait for every other task, whatever the core's speed that day. */
QM_INLINE u32 qk_deadline(void)
{
    return (u32)QK_NOW_NS() + QK_CFG.call_budget_ns;
}

/* 1 once the deadline has passed (never without a budget): a loop
 * callback's return, ending it. The clock's low 32 bits: a budget below
 * 2^31 ns compares right across their wrap. */
QM_INLINE long qk_past(u32 deadline)
{
    return QK_CFG.call_budget_ns && (s32)((u32)QK_NOW_NS() - deadline) > 0;
}

/* block entries [b0, b0 + nb) exist */
QM_INLINE bool qk_entries_ok(const struct qk_args *a)
{
    return a->nb != 0 && a->nb <= QK_CFG.block && a->b0 <= QK_CFG.block - a->nb;
}

#endif
