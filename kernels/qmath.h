/* qmath.h - the integer arithmetic of the forward pass, written once.
 *
 * This header is compiled twice: into the BPF kernels (clang -target bpf)
 * and into the host twin ("emu" backend). Every function here is pure
 * integer code with no helpers and no libc, so both builds compute the same
 * bits. The loops that walk rows and positions live in the callers (BPF
 * glue uses bpf_loop, the host uses for loops); integer sums wrap mod 2^64
 * in both, so the order in which slices are visited never changes a result.
 *
 * Number formats (value = integer * 2^exponent; kernels/KERNELS.md says why):
 *   weights      Q24 int32 (2^-24), or group codes with pf16 parameters and
 *                one exponent per tensor (i8g, i4g, i6 lanes: qk_dot_*.h);
 *                norm scales I32S int32 (2^-scale_exp)
 *   residual     Q32 int64 (2^-32): kept within +-2^29 (QM_Q32_LIMIT_BITS;
 *                a model that leaves it is refused) with 2.3e-10 steps, so
 *                massive activations (thousands) and tiny early residuals
 *                (~1e-2) both keep full precision
 *   act vector   int32 mantissas |m| <= 2^24 sharing one exponent: the input
 *                of every matrix product. 24 bits relative to the vector's
 *                largest element; a Q24 row's product stays below 2^62 (the
 *                reader bounds each row's sum of |q|: QPK_Q24_MAX_ROW_SUM);
 *                quant_x also writes it in 8- and 16-bit blocks of 32, each
 *                with its own power-of-two scale, for the narrow encodings
 *   scalars      softfloat {m, e}, m in [2^31, 2^32): norms' 1/rms, constants
 *   probability  Q30 (2^-30) in attention and SiLU
 *   KV cache     int16: per layer one exponent for K and one for V, chosen
 *                at load from bounds that can never be exceeded; per head
 *                vector a 4-bit shift in the lowest bits of its first four
 *                entries (below), V also stretched; K laid out by the
 *                layer's klayout (qwen3_abi.h)
 */
#ifndef QP_QMATH_H
#define QP_QMATH_H

#ifdef __bpf__
#include <linux/types.h>
typedef __s8 s8;
typedef __s16 s16;
typedef __s32 s32;
typedef __s64 s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
#else
#include <stdint.h>
typedef int8_t s8;
typedef int16_t s16;
typedef int32_t s32;
typedef int64_t s64;
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#endif

#define QM_INLINE static inline __attribute__((always_inline))

/* Hides x's value from the compiler in the kernels: a branch-free select
 * written as masks stays masks, where clang would turn it back into a
 * branch that doubles the verifier's paths at every use. Nothing on the
 * host, where the arithmetic is the same. */
#if defined(__bpf__)
#define QM_OPAQUE(x) asm volatile("" : "+r"(x))
#else
#define QM_OPAQUE(x) ((void)0)
#endif

/* fully unroll the next loop (its trip count is a compile-time constant) */
#if defined(__clang__)
#define QK_UNROLL _Pragma("clang loop unroll(full)")
#else
#define QK_UNROLL _Pragma("GCC unroll 16")
#endif

#define QM_ACT_BITS 24          /* act mantissas: |m| <= 2^24 */
#define QM_RESID_FRAC 32        /* residual stream: Q32 */
#define QM_LN2_Q30 744261118ll  /* round(ln 2 * 2^30) */
#define QM_LOG2E_Q30 1549082005ll /* round(log2 e * 2^30) */
#define QM_EXP2_CUTOFF 31       /* 2^-u with u >= 31 is 0 in Q30 */

/* 2^30 * 2^(-k/64), k = 0..63, rounded */
static const u32 qm_exp2_table[64] = {
    1073741824, 1062175491, 1050733751, 1039415261, 1028218693, 1017142735, 1006186087, 995347464,
    984625594,  974019220,  963527098,  953147997,  942880699,  932724001,  922676710,  912737649,
    902905651,  893179563,  883558244,  874040567,  864625413,  855311680,  846098274,  836984114,
    827968132,  819049271,  810226483,  801498734,  792865000,  784324269,  775875538,  767517817,
    759250125,  751071493,  742980960,  734977579,  727060411,  719228525,  711481005,  703816941,
    696235434,  688735596,  681316545,  673977412,  666717336,  659535466,  652430958,  645402981,
    638450708,  631573326,  624770026,  618040012,  611382493,  604796689,  598281827,  591837143,
    585461881,  579155293,  572916640,  566745190,  560640218,  554601009,  548626854,  542717053,
};

/* 2^30 / sqrt(x) at the middle of [i/8, (i+1)/8), i = 8..31: Newton's start */
static const u32 qm_rsqrt_seed[24] = {
    1041682578, 985333074, 937238702, 895562589, 858993459, 826566842, 797555404, 771398898,
    747657839,  725981977, 706088274, 687745184, 670761200, 654976372, 640255922, 626485368,
    613566757,  601415717, 589959130, 579133272, 568882316, 559157115, 549914212, 541115017,
};

/* ---- shifts and bit lengths ------------------------------------------ */

/* x / 2^s rounded half up, for 0 <= s <= 63 (s is masked to that range).
 * No branch: unrolled loops of it stay one path for the verifier. */
QM_INLINE s64 qm_rshift_round(s64 x, u32 s)
{
    s &= 63;
    return (s64)((u64)x + ((1ull << s) >> 1)) >> s;
}

/* x * 2^s for s >= 0 (s capped at 62) and x / 2^-s rounded for s < 0
 * (0 once -s > 62) */
QM_INLINE s64 qm_scale_pow2(s64 x, s32 s)
{
    if (s >= 0)
        return (s64)((u64)x << (s > 62 ? 62 : s));
    if (s < -62)
        return 0;
    return qm_rshift_round(x, (u32)-s);
}

/* number of significant bits: 0 for 0, 64 for 2^63 and up. Branch-free
 * (smear the top bit down, then count): every branch of the scalar code
 * doubles the paths the verifier walks. */
QM_INLINE u32 qm_bitlen(u64 x)
{
    x |= x >> 1;
    x |= x >> 2;
    x |= x >> 4;
    x |= x >> 8;
    x |= x >> 16;
    x |= x >> 32;
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (u32)((x * 0x0101010101010101ull) >> 56);
}

/* max(v, 0) without a branch */
QM_INLINE s32 qm_pos(s32 v)
{
    return v & ~(v >> 31);
}

QM_INLINE u64 qm_abs(s64 x) { return x < 0 ? 0 - (u64)x : (u64)x; }

/* (a * f) >> 30 exactly (floor) for any int64 a and f <= 2^31, without the
 * 94-bit intermediate: a = hi * 2^30 + lo with 0 <= lo < 2^30. */
QM_INLINE s64 qm_mul_q30(s64 a, u32 f)
{
    s64 hi = a >> 30;
    s64 lo = a - (s64)((u64)hi << 30);
    return (s64)((u64)hi * f) + (s64)(((u64)lo * f) >> 30);
}

/* floor(h * c / 2^32) exactly, for |c| < 2^31 and |h| < 2^62, without a
 * 96-bit intermediate: h = hi * 2^32 + lo with 0 <= lo < 2^32. */
QM_INLINE s64 qm_mulhi32(s64 h, s64 c)
{
    s64 hi = h >> 32;
    s64 lo = (s64)((u64)h & 0xffffffffull);
    return (s64)((u64)hi * (u64)c) + ((lo * c) >> 32);
}

/* ---- softfloat scalars ----------------------------------------------- */

struct qm_sf {
    u64 m;   /* 0, or in [2^31, 2^32) */
    s32 e;   /* value = m * 2^e */
};

QM_INLINE struct qm_sf qm_sf_make(u64 m, s32 e)
{
    s32 n = (s32)qm_bitlen(m);
    u32 r = (u32)qm_pos(n - 32), l = (u32)qm_pos(32 - n);
    /* round to 32 bits (bit r-1 decides; none when r = 0) */
    u64 q = ((m >> r) + (((m << 1) >> r) & 1)) << l;
    u64 carry = q >> 32;            /* rounding reached 2^32 */
    q >>= carry;
    u64 nonzero = (u64)(n + 63) >> 6;  /* 1 unless m == 0 */
    struct qm_sf res = {q, (s32)((u64)(e + (s32)r - (s32)l + (s32)carry) & (0 - nonzero))};
    return res;
}

QM_INLINE struct qm_sf qm_sf_mul(struct qm_sf a, struct qm_sf b)
{
    return qm_sf_make(a.m * b.m >> 32, a.e + b.e + 32);
}

/* a + b for non-negative values */
QM_INLINE struct qm_sf qm_sf_add(struct qm_sf a, struct qm_sf b)
{
    if (a.m == 0)
        return b;
    if (b.m == 0)
        return a;
    if (a.e < b.e) {
        struct qm_sf t = a;
        a = b;
        b = t;
    }
    u32 d = (u32)(a.e - b.e);
    /* keep 30 guard bits below the larger mantissa */
    u64 am = a.m << 30, bm = d >= 62 ? 0 : (b.m << 30) >> d;
    return qm_sf_make(am + bm, a.e - 30);
}

/* 1 / sqrt(a) for a > 0: seed from a table, four Newton steps in Q30
 * (relative error below 2e-9). a = 0 returns 0. */
QM_INLINE struct qm_sf qm_sf_rsqrt(struct qm_sf a)
{
    struct qm_sf r = {0, 0};
    if (a.m == 0)
        return r;
    /* a = (m / 2^31) * 2^(e + 31); make the exponent even, x in [1, 4) */
    s32 e = a.e + 31;
    u64 x30 = a.m >> 1;             /* m / 2^31 in Q30 */
    if (e & 1) {
        x30 <<= 1;
        e -= 1;
    }
    u32 idx = (u32)(x30 >> 27) - 8; /* 0..23 */
    u64 y = qm_rsqrt_seed[idx < 24 ? idx : 23];
    for (int i = 0; i < 4; i++) {
        u64 xy2 = ((x30 * y) >> 30) * y >> 30;   /* x * y^2, Q30 */
        y = (y * ((3ull << 30) - xy2)) >> 31;
    }
    return qm_sf_make(y, -30 - e / 2);
}

/* ---- exponentials ---------------------------------------------------- */

/* 2^-u in Q30 for u >= 0 in Q24. The integer part shifts; the fraction's
 * top 6 bits index qm_exp2_table and the remaining 2^-18 step goes through
 * e^-y ~ 1 - y + y^2/2 - y^3/6 (y < 0.011, truncation error < 6e-10). */
QM_INLINE u32 qm_exp2_neg_q30(u64 u24)
{
    if (u24 >= ((u64)QM_EXP2_CUTOFF << 24))
        return 0;
    u32 n = (u32)(u24 >> 24);
    u32 frac = (u32)(u24 & 0xffffff);
    u32 k = frac >> 18;
    u64 r = frac & 0x3ffff;
    u64 y = (r * QM_LN2_Q30) >> 24;              /* r * 2^-24 * ln 2, Q30 */
    u64 y2 = (y * y) >> 30;
    u64 y3 = (y2 * y) >> 30;
    /* y3 <= 1364 here, and y3 / 6 == (y3 * 10923) >> 16 for every
     * y3 < 2^15: no 64-bit division (tens of cycles on x86) */
    u64 poly = (1ull << 30) - y + (y2 >> 1) - ((y3 * 10923) >> 16);
    u64 p = (qm_exp2_table[k & 63] * poly + (1ull << 29)) >> 30;
    if (n)
        p = (p + (1ull << (n - 1))) >> n;
    return (u32)p;
}

/* Q24 log2-domain argument from a non-negative value t * 2^e scaled by the
 * softfloat c: u = t * 2^e * c * 2^24, saturated at the exp2 cutoff. */
QM_INLINE u64 qm_log2_arg_q24(u64 t, s32 e, struct qm_sf c)
{
    struct qm_sf v = qm_sf_mul(qm_sf_make(t, e), c);
    if (v.m == 0)
        return 0;
    s32 sh = v.e + 24;                 /* u = v.m * 2^sh; v.m >= 2^31 */
    if (sh >= 0)
        return (u64)QM_EXP2_CUTOFF << 24;
    u64 q = sh <= -63 ? 0 : v.m >> (u32)-sh;
    return q > ((u64)QM_EXP2_CUTOFF << 24) ? ((u64)QM_EXP2_CUTOFF << 24) : q;
}

/* qm_log2_arg_q24 for many t at one e and c (attention's scores of a
 * head): the factor 2^e c 2^24 = c.m 2^-s is fixed, so u = t c.m 2^-s is a
 * multiply and two shifts, u = ((t >> pre) c.m) >> post, and t >= t_cut
 * is past the exp2 cutoff (a weight of 0) without computing u. */
struct qm_lin {
    u64 t_cut;      /* the least t whose u reaches the cutoff; ~0 for none */
    u32 m;          /* c.m */
    u16 pre, post;  /* pre + post = s; post <= 34 unless pre = 32 */
};

/* t < t_cut keeps (t >> pre) c.m below 2^64: u < cutoff = 31 2^24 < 2^29
 * means t < 2^(s-2), so (t >> pre) c.m < 2^(s+30-pre) <= 2^64 for
 * pre >= s - 34. Dropping those pre bits of t moves u by less than
 * 2^(pre+32-s) <= 1/4 of its last unit. */
QM_INLINE struct qm_lin qm_lin_make(s32 e, struct qm_sf c)
{
    struct qm_lin l = {~0ull, (u32)c.m, 0, 0};
    s32 s = -(c.e + e + 24);
    if (c.m == 0)
        return l;                       /* u = 0 for every t */
    if (s <= 0) {
        l.t_cut = 1;                    /* u >= 2^31 for every t > 0 */
        return l;
    }
    u32 pre = s > 34 ? (u32)(s - 34) : 0;
    if (pre > 32)
        pre = 32;                       /* (t >> 32) c.m < 2^64 for every t */
    u32 post = (u32)s - pre;
    l.pre = (u16)pre;
    l.post = (u16)(post & 63);
    if (post > 63)
        l.m = 0;                        /* (t >> 32) c.m < 2^64: u = 0 */
    if (post <= 34) {
        u64 x_cut = (u64)QM_EXP2_CUTOFF << (24 + post);     /* < 2^63 */
        l.t_cut = ((x_cut + c.m - 1) / c.m) << pre;         /* < 2^32 before the shift */
    }
    return l;
}

/* u (Q24) for a t below l->t_cut */
QM_INLINE u64 qm_lin_arg_q24(const struct qm_lin *l, u64 t)
{
    return ((t >> (l->pre & 63)) * (u64)l->m) >> (l->post & 63);
}

/* sigmoid(x) in Q30 for x = x_q32 * 2^-32: 1 / (1 + 2^(-|x| log2 e)),
 * mirrored for negative x. */
QM_INLINE u32 qm_sigmoid_q30(s64 x_q32)
{
    u64 ax = qm_abs(x_q32);
    u64 u24;
    if (ax >= (64ull << 32)) {
        u24 = (u64)QM_EXP2_CUTOFF << 24;
    } else {
        u64 x24 = ax >> 8;                          /* Q24, < 2^30 */
        u24 = (x24 * QM_LOG2E_Q30) >> 30;
    }
    u64 e = qm_exp2_neg_q30(u24);
    u64 s = ((1ull << 60) + ((1ull << 30) + e) / 2) / ((1ull << 30) + e);
    return (u32)(x_q32 >= 0 ? s : (1ull << 30) - s);
}

/* ---- activation vectors ---------------------------------------------- */

/* The shift that brings a vector whose largest magnitude is max_abs to
 * mantissas of at most `bits` bits. */
QM_INLINE u32 qm_shift_to_bits(u64 max_abs, u32 bits)
{
    u32 n = qm_bitlen(max_abs);
    return n > bits ? n - bits : 0;
}

/* ... of at most QM_ACT_BITS bits, the act vectors' width */
QM_INLINE u32 qm_act_shift(u64 max_abs)
{
    return qm_shift_to_bits(max_abs, QM_ACT_BITS);
}

/* Matrix-product accumulator -> Q32, for weights Q24 and an act vector
 * with exponent x_exp: value = acc * 2^(x_exp - 24). */
QM_INLINE s64 qm_acc_to_q32(s64 acc, s32 x_exp)
{
    return qm_scale_pow2(acc, x_exp - 24 + QM_RESID_FRAC);
}

/* The range every stored Q32 value keeps (a product's output, the
 * residual stream): |v| < 2^QM_Q32_LIMIT_BITS, a value of 2^29 = 5.4e8.
 * Then a residual add cannot wrap and every later step's bounds hold. A
 * model whose activations leave it cannot be computed exactly: the kernels
 * raise a flag (qk_scalars.range_error) and the host refuses the model. */
#define QM_Q32_LIMIT_BITS 61

/* non-zero when v is outside [-2^bits, 2^bits) */
QM_INLINE u64 qm_outside(s64 v, u32 bits)
{
    return (u64)((v >> bits) + 1) >> 1;
}

/* qm_scale_pow2 for a value headed into Q32 storage: *bad becomes non-zero
 * when the shift loses bits or the result leaves the Q32 range. For
 * |x| < 2^62, which every product's accumulator keeps (qk_matvec.h). */
QM_INLINE s64 qm_scale_pow2_checked(s64 x, s32 s, u64 *bad)
{
    s64 y;
    if (s >= 0) {
        u32 k = s > 62 ? 62 : (u32)s;
        y = (s64)((u64)x << k);
        *bad |= (u64)((y >> k) ^ x);
    } else {
        y = s < -62 ? 0 : qm_rshift_round(x, (u32)-s);
    }
    *bad |= qm_outside(y, QM_Q32_LIMIT_BITS);
    return y;
}

QM_INLINE s64 qm_acc_to_q32_checked(s64 acc, s32 x_exp, u64 *bad)
{
    return qm_scale_pow2_checked(acc, x_exp - 24 + QM_RESID_FRAC, bad);
}

/* v clamped to [lo, hi] without a branch, for |v|, |lo|, |hi| < 2^62
 * (wrapping arithmetic: any input gives the same bits on host and BPF) */
QM_INLINE s64 qm_clamp(s64 v, s64 lo, s64 hi)
{
    u64 uv = (u64)v, above = (u64)((s64)((u64)hi - (u64)v) >> 63);
    QM_OPAQUE(above);
    uv -= ((u64)v - (u64)hi) & above;
    u64 below = (u64)((s64)(uv - (u64)lo) >> 63);
    QM_OPAQUE(below);
    uv += ((u64)lo - uv) & below;
    return (s64)uv;
}

/* The shifts that take a value m * 2^m_exp to the int16 cache exponent
 * c_exp: left by *l, then right (rounded) by *r. Computed once per vector. */
QM_INLINE void qm_cache_shifts(s32 m_exp, s32 c_exp, u32 *l, u32 *r)
{
    s32 d = m_exp - c_exp;
    *l = d > 0 ? (u32)(d > 40 ? 40 : d) : 0;
    *r = d < 0 ? (u32)(-d > 63 ? 63 : -d) : 0;
}

/* cache value m * 2^l / 2^r * (16 + st) / 16 (st: the vector's stretch,
 * below; 0 for none) rounded once (twice only for r > 40, which no model
 * reaches), saturating at 32767 * 2^x (x extra fraction bits, qwen3_abi.h
 * klayout; the load-time bounds make saturation unreachable); branch-free
 * for the verifier, wrapping arithmetic */
QM_INLINE s64 qm_to_cache_wide(s64 m, u32 l, u32 r, u32 x, u32 st)
{
    s64 t = (s64)((u64)m << (l & 63)), lim = (s64)32767 << (x & 31);
    u32 pre = r > 40 ? r - 40 : 0;
    t = qm_rshift_round(t, pre);
    t = qm_rshift_round((s64)((u64)t * (16 + (st & 15))), r - pre + 4);
    return qm_clamp(t, -lim, lim);
}

/* int16 cache entry of m * 2^l / 2^r * (16 + st) / 16 */
QM_INLINE s16 qm_to_cache16(s64 m, u32 l, u32 r, u32 st)
{
    return (s16)qm_to_cache_wide(m, l, r, 0, st);
}

/* ---- per-vector exponents inside an int16 cache vector -------------- */

/* A cache vector (one head of V at one position) carries its own 4-bit
 * exponent shift in the lowest bit of its first four entries, so a vector
 * whose largest value is far below the layer's static bound still keeps
 * 15 significant bits, at no extra bytes. The stolen bits move those four
 * entries by at most one step. The vector's value is v16 * 2^(c_exp - sh). */
#define QM_CACHE_SH_MAX 15

/* sh for a vector with largest magnitude max_abs (value max_abs * 2^m_exp)
 * against the layer's exponent c_exp: the most that keeps it below 2^15 */
QM_INLINE u32 qm_cache_vector_shift(u64 max_abs, s32 m_exp, s32 c_exp)
{
    s32 bits = (s32)qm_bitlen(max_abs) + m_exp - c_exp;  /* bits at c_exp */
    s32 sh = qm_pos(15 - bits);
    return (u32)(sh > QM_CACHE_SH_MAX ? QM_CACHE_SH_MAX : sh);
}

/* entry k < 4 with bit k of sh in its lowest bit */
QM_INLINE s16 qm_cache_tag(s16 v, u32 k, u32 sh)
{
    return (s16)((v & ~1) | (s16)((sh >> k) & 1));
}

QM_INLINE u32 qm_cache_untag(const s16 *v)
{
    return (u32)((v[0] & 1) | (v[1] & 1) << 1 | (v[2] & 1) << 2 | (v[3] & 1) << 3);
}

/* ---- a stretch on top of the exponent -------------------------------- */

/* A power-of-two shift leaves a vector's largest entry anywhere in
 * [2^14, 2^15): half a bit unused on average. A V vector is also stored
 * times (16 + st) / 16, st in 0..15 the most that keeps that entry within
 * int16; st rides in the lowest bit of entries 4..7 (qm_cache_tag, read
 * with qm_cache_untag(v + 4)). On the stress checkpoint it cuts the mean
 * KL more than tenfold; on K it buys nothing measurable for more attention
 * time, so K is not stretched (kernels/KERNELS.md). */
#define QM_V_WEIGHT_FRAC 8      /* extra fraction bits of qm_v_weight */

/* st for a V vector whose largest entry, at the vector's shift and rounded,
 * is max16: (max16 + 1) (16 + st) <= 32767 * 16, so even the unrounded
 * entry stays within int16 */
QM_INLINE u32 qm_v_stretch(u64 max16)
{
    u64 s = (u64)32767 * 16 / (max16 + 1);
    return s < 16 ? 0 : s > 31 ? 15 : (u32)(s - 16);
}

/* qm_v_weight's division by m = 16 + st, st = 0..15: 2^22 = q m + r, and
 * ceil(2^33 / m) */
static const u32 qm_div_q[16] = {
    262144, 246723, 233016, 220752, 209715, 199728, 190650, 182361,
    174762, 167772, 161319, 155344, 149796, 144631, 139810, 135300,
};
static const u32 qm_div_r[16] = {
    0, 13, 16, 16, 4, 16, 4, 1,
    16, 4, 10, 16, 16, 5, 4, 4,
};
static const u32 qm_div_magic[16] = {
    536870912, 505290271, 477218589, 452101821, 429496730, 409044505, 390451573, 373475418,
    357913942, 343597384, 330382100, 318145726, 306783379, 296204642, 286331154, 277094665,
};

/* attention weight p (Q30) for a V vector at shift sh and stretch st:
 * p * 16 / (16 + st) / 2^sh with QM_V_WEIGHT_FRAC more fraction bits,
 * rounded once. Undoing the vector's scale in its weight, once per
 * position, leaves the loop over its entries a multiply-add. */
QM_INLINE s64 qm_v_weight(u64 p, u32 st, u32 sh)
{
    /* round(p 2^12 / ((16 + st) 2^sh)) = floor(n / m) for m = 16 + st and
     * n = (p 2^12 + m 2^sh / 2) >> sh < 2^43 (p <= 2^30), without a 64-bit
     * division: n = a 2^22 + b, and 2^22 = q m + r, so floor(n / m) =
     * a q + floor((a r + b) / m), the last with a numerator below 2^27,
     * where the multiply by ceil(2^33 / m) and shift is exact
     * (tests/kernels/test_qmath.c checks it against the division) */
    u32 i = st & 15;
    u64 m = 16 + (u64)i;
    u64 n = ((p << (4 + QM_V_WEIGHT_FRAC)) + ((m << (sh & 15)) >> 1)) >> (sh & 15);
    u64 a = n >> 22, b = n & ((1u << 22) - 1);
    return (s64)(a * qm_div_q[i] + (((a * qm_div_r[i] + b) * qm_div_magic[i]) >> 33));
}

#endif
