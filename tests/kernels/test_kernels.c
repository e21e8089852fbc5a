/* test_kernels.c - each kernel alone, BPF against its host twin, bit for
 * bit, on state filled with edge values: zeros, all-negative, the largest
 * magnitudes the formats are specified for, a single massive channel, and
 * random mixtures. Runs on a stress checkpoint (norm scales in the
 * hundreds), packed as q24 and as the mixed int4 preset (i4g products with
 * their 8-bit act blocks, next to i8g ones), and as q24 with the 8-bit KV
 * cache (rope_store8, attention8). Needs root. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "qk_kv8.h"
#include "qpk.h"
#include "qp_test.h"

static char qpk_path[128];
static struct qpk_file file;
static struct qp_plan plan;
static struct qp_backend *bpf, *emu;
static uint64_t rng = 0x1234567887654321ull;

static uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void setup_packed(const char *pack_flags, bool kv8)
{
    snprintf(qpk_path, sizeof qpk_path, "%s", qp_test_model("m", "--preset tiny --seed 5 --stress", pack_flags));
    qp_err err = {{0}};
    ck_assert_msg(qpk_open(&file, qpk_path, QPK_VERIFY, &err) == 0, "%s", err.msg);
    ck_assert_msg(qp_plan_build(&plan, &file, 1280, 2, 4, false, kv8, &err) == 0, "%s", err.msg);
    ck_assert_msg(qp_bpf_create(&bpf, &plan, &err) == 0, "%s", err.msg);
    ck_assert_msg(qp_emu_create(&emu, &plan, &err) == 0, "%s", err.msg);
}

static void setup_q24(void)
{
    setup_packed("", false);
}

/* the 8-bit KV cache and its programs (rope_store8, attention8) */
static void setup_kv8(void)
{
    setup_packed("", true);
}

/* v_proj of layer 0 kept int8: the QKV product mixes i4g and i8g */
static void setup_int4(void)
{
    setup_packed("--format int4 --keep 'model.layers.0.self_attn.v_proj.weight=int8'", false);
}

static void teardown(void)
{
    bpf->destroy(bpf);
    emu->destroy(emu);
    qp_plan_free(&plan);
    qpk_close(&file);
    remove_dir();
}

/* the rope_store and attention programs of the plan's KV cache */
static enum qp_kernel rope_kernel(void)
{
    return plan.cfg.kv8 ? QP_K_ROPE_STORE8 : QP_K_ROPE_STORE;
}

static enum qp_kernel attn_kernel(void)
{
    return plan.cfg.kv8 ? QP_K_ATTENTION8 : QP_K_ATTENTION;
}

/* the byte offset in the K or V cache of position pos of a layer in a
 * slot: the int16 cache's row (every head) or the 8-bit cache's vector of
 * KV head h (qk_kv_row0, qk_kv8_vec), and its bytes */
static size_t kv_offset(uint32_t slot, uint32_t layer, uint32_t h, uint32_t pos)
{
    const struct qk_config *c = &plan.cfg;
    size_t run = (size_t)slot * c->n_layers + layer;
    if (c->kv8)
        run = run * c->n_kv_heads + h;
    return (run * c->ctx + pos) * (((size_t)plan.maps[QP_MAP_KCACHE].value_size + 7) / 8 * 8);
}

static size_t kv_len(void)
{
    return ((size_t)plan.maps[QP_MAP_KCACHE].value_size + 7) / 8 * 8;
}

/* bytes of a state map: its values start 8-byte aligned */
static size_t map_len(enum qp_map_id id)
{
    return ((size_t)plan.maps[id].value_size + 7) / 8 * 8 * plan.maps[id].max_entries;
}

/* the same bytes into a state map of both backends */
static void set_state(enum qp_map_id id, const void *bytes)
{
    memcpy((void *)bpf->state(bpf, id), bytes, map_len(id));
    memcpy((void *)emu->state(emu, id), bytes, map_len(id));
}

/* block entries [0, nb) of backend b at positions pos0.. of KV cache slot `slot` */
static void seq_on(struct qp_backend *b, uint32_t pos0, uint32_t nb, uint32_t slot)
{
    for (uint32_t e = 0; e < nb; e++)
        b->seq[e] = (struct qk_seq){.pos = pos0 + e, .kv_slot = slot};
}

/* the same on both backends */
static void set_seq(uint32_t pos0, uint32_t nb, uint32_t slot)
{
    seq_on(bpf, pos0, nb, slot);
    seq_on(emu, pos0, nb, slot);
}

enum pattern { ZERO, NEGATIVE, LARGEST, MASSIVE, MIXED, PATTERN_COUNT };

/* int64 entries of a pattern; `limit` is the largest magnitude the
 * buffer's format is specified for */
static void fill(int64_t *v, size_t n, enum pattern p, int64_t limit)
{
    for (size_t i = 0; i < n; i++) {
        int64_t r = (int64_t)(next_u64() % (uint64_t)limit);
        switch (p) {
        case ZERO: v[i] = 0; break;
        case NEGATIVE: v[i] = -1 - r; break;
        case LARGEST: v[i] = (i & 1) ? limit : -limit; break;
        case MASSIVE: v[i] = i == 3 ? limit : r >> 20; break;
        default: v[i] = (next_u64() & 1 ? r : -r) >> (next_u64() % 40); break;
        }
    }
}

static int run_both(enum qp_kernel k, const struct qk_args *a)
{
    qp_err e1 = {{0}}, e2 = {{0}};
    int r1 = bpf->run(bpf, k, a, NULL, &e1), r2 = emu->run(emu, k, a, NULL, &e2);
    ck_assert_msg(r1 == r2, "%s: bpf returned %d (%s), emu %d (%s)", qp_kernel_name(k), r1, e1.msg, r2, e2.msg);
    return r1;
}

/* the same, for arguments the kernel must accept */
static void run_ok(enum qp_kernel k, const struct qk_args *a)
{
    ck_assert_msg(run_both(k, a) == 0, "%s rejected valid arguments", qp_kernel_name(k));
}

/* the one-position program of the matrix holding row r */
static enum qp_kernel program_of(uint32_t layer, uint32_t mode, uint32_t r)
{
    return qp_matvec_kernel(qp_plan_matrix_of(&plan, layer, mode, r).enc, 1);
}

/* rows [begin, end) of one matrix, on both backends: quant_x first when
 * the product reads its records (i4g, i8g), then the i4g kernel or the
 * wide one */
static void run_rows(uint32_t layer, uint32_t mode, uint32_t begin, uint32_t end)
{
    struct qk_args a = {.layer = layer, .mode = mode, .begin = begin, .end = end, .nb = 1};
    if (qp_plan_reads_act_records(&plan, layer, mode))
        run_ok(QP_K_QUANT_X, &(struct qk_args){.layer = layer, .mode = mode, .nb = 1});
    run_ok(program_of(layer, mode, begin), &a);
}

static bool any_nonzero(enum qp_map_id id)
{
    const uint8_t *b = bpf->state(bpf, id);
    for (size_t i = 0; i < map_len(id); i++)
        if (b[i])
            return true;
    return false;
}

static void assert_state_equal(const char *what)
{
    for (int id = QP_MAP_KCACHE; id < QP_MAP_COUNT; id++) {
        const void *a = bpf->state(bpf, id), *b = emu->state(emu, id);
        if (!a || !b)
            continue;
        ck_assert_msg(memcmp(a, b, map_len(id)) == 0, "%s: map %s differs between bpf and emu", what,
                      plan.maps[id].name);
    }
}

/* whether the matrix holding row r has a program for blocks of positions */
static bool has_block_program(uint32_t layer, uint32_t mode, uint32_t r)
{
    uint32_t enc = qp_plan_matrix_of(&plan, layer, mode, r).enc;
    return qp_matvec_kernel(enc, QK_MAX_BLOCK) != qp_matvec_kernel(enc, 1);
}

/* rows [begin, end) for every entry of the block at once (the matrix's
 * block program, each 4-row block unpacked once) give each entry the bits
 * of its one-position program run on it alone; h, which products add into,
 * starts from the same bytes both ways */
static void check_block(uint32_t layer, uint32_t mode, uint32_t begin, uint32_t end)
{
    uint32_t enc = qp_plan_matrix_of(&plan, layer, mode, begin).enc;
    enum qp_kernel one = qp_matvec_kernel(enc, 1), many = qp_matvec_kernel(enc, QK_MAX_BLOCK);
    enum qp_map_id out = mode == QK_MV_QKV ? QP_MAP_QKV : mode == QK_MV_GATE_UP ? QP_MAP_GU : QP_MAP_H;
    uint32_t nb = plan.cfg.block;
    size_t len = map_len(out);
    uint8_t *start = malloc(len), *alone = malloc(len);
    ck_assert(start && alone && nb > 1);
    run_ok(QP_K_QUANT_X, &(struct qk_args){.layer = layer, .mode = mode, .nb = nb});
    memcpy(start, bpf->state(bpf, out), len);
    for (uint32_t b = 0; b < nb; b++)
        run_ok(one, &(struct qk_args){.layer = layer, .mode = mode, .begin = begin, .end = end, .b0 = b, .nb = 1});
    memcpy(alone, bpf->state(bpf, out), len);
    set_state(out, start);
    run_ok(many, &(struct qk_args){.layer = layer, .mode = mode, .begin = begin, .end = end, .nb = nb});
    ck_assert_msg(memcmp(alone, bpf->state(bpf, out), len) == 0, "%s differs from %s (mode %u)", qp_kernel_name(many),
                  qp_kernel_name(one), mode);
    assert_state_equal(qp_kernel_name(many));
    free(start);
    free(alone);
}

/* residual Q32 up to 2^47 (32768 in value: past the largest massive
 * activation a real model has), act mantissas up to 2^24, Q32 vectors up to 2^40 */
START_TEST(each_kernel_matches_its_host_twin_on_edge_values)
{
    const struct qk_config *c = &plan.cfg;
    size_t big = map_len(QP_MAP_GU) > map_len(QP_MAP_KCACHE) ? map_len(QP_MAP_GU) : map_len(QP_MAP_KCACHE);
    int64_t *buf = calloc(1, big + map_len(QP_MAP_SCORES) + 4096);
    ck_assert(buf);
    for (int p = 0; p < PATTERN_COUNT; p++) {
        char what[64];
        fill(buf, map_len(QP_MAP_H) / 8, p, 1ll << 47);
        set_state(QP_MAP_H, buf);
        struct qk_args norm = {.layer = 1, .mode = QK_NORM_MLP, .nb = 1};
        run_both(QP_K_RMSNORM, &norm);
        snprintf(what, sizeof what, "rmsnorm, pattern %d", p);
        assert_state_equal(what);
        if (p != ZERO)
            ck_assert_msg(any_nonzero(QP_MAP_X), "rmsnorm wrote nothing (pattern %d)", p);

        fill(buf, map_len(QP_MAP_X) / 8, p, 1ll << 24);
        set_state(QP_MAP_X, buf);
        run_rows(0, QK_MV_QKV, 0, c->q_dim);
        run_rows(0, QK_MV_QKV, c->q_dim, c->q_dim + c->kv_dim);
        run_rows(0, QK_MV_QKV, c->q_dim + c->kv_dim, c->q_dim + 2 * c->kv_dim);
        run_rows(1, QK_MV_GATE_UP, 4, c->inter);
        snprintf(what, sizeof what, "matvec, pattern %d", p);
        assert_state_equal(what);
        if (p != ZERO)
            ck_assert_msg(any_nonzero(QP_MAP_QKV), "matvec wrote nothing (pattern %d)", p);
        fill(buf, map_len(QP_MAP_X) / 8, p, 1ll << 24);
        set_state(QP_MAP_X, buf);
        run_rows(1, QK_MV_DOWN, 4, c->hidden);
        snprintf(what, sizeof what, "matvec down, pattern %d", p);
        assert_state_equal(what);
        if (has_block_program(0, QK_MV_QKV, 0))
            check_block(0, QK_MV_QKV, 0, c->q_dim);
        if (has_block_program(1, QK_MV_DOWN, 4))
            check_block(1, QK_MV_DOWN, 4, c->hidden);

        fill(buf, map_len(QP_MAP_QKV) / 8, p, 1ll << 40);
        set_state(QP_MAP_QKV, buf);
        for (uint32_t pos = 0; pos < 300; pos += 37) {
            struct qk_args rope = {.layer = 1, .nb = 1};
            set_seq(pos, 1, 0);
            run_both(rope_kernel(), &rope);
        }
        struct qk_args att = {.layer = 1, .max_pos = 299, .begin = 0, .end = qk_attn_head_tasks(c) * 2, .nb = 1};
        set_seq(299, 1, 0);
        run_both(attn_kernel(), &att);
        run_both(QP_K_ATTN_MERGE, &(struct qk_args){.layer = 1, .max_pos = 299, .begin = 0, .end = c->n_heads, .nb = 1});
        snprintf(what, sizeof what, "rope/attention, pattern %d", p);
        assert_state_equal(what);

        fill(buf, map_len(QP_MAP_GU) / 8, p, 1ll << 40);
        set_state(QP_MAP_GU, buf);
        run_both(QP_K_SWIGLU, &(struct qk_args){.nb = 1});
        snprintf(what, sizeof what, "swiglu, pattern %d", p);
        assert_state_equal(what);
        if (p != ZERO)
            ck_assert_msg(any_nonzero(QP_MAP_X), "swiglu wrote nothing (pattern %d)", p);
    }
    free(buf);
}
END_TEST

/* K channel i of the vector at `kc`, in its own cache units, decoded by
 * the klayout rules of qwen3_abi.h (the tag bits of channels 0..3 and a
 * donor's lent bit are not part of their values) */
static double decode_k(const int16_t *kc, const int32_t *ext, uint32_t i, uint32_t head_dim)
{
    uint32_t e = (uint32_t)ext[i], x = QK_KEXT_BITS(e);
    if (i < 4 || QK_KEXT_DONOR(e))
        return kc[i] & ~1;
    double low = 0;
    for (uint32_t k = 4; k < head_dim; k++)
        if (QK_KEXT_DONOR(ext[k]) && QK_KEXT_PARTNER(ext[k]) == i)
            low += ldexp(kc[k] & 1, (int)QK_KEXT_BIT(ext[k]) - (int)x);
    return kc[i] + low;
}

/* what the kernels rely on in every layer's klayout: each extended channel
 * has exactly one donor per extension bit, none of them a tag channel */
static void assert_klayout_consistent(const int32_t *kl, uint32_t d)
{
    const int32_t *ext = kl + QK_KL_EXT(d);
    int32_t donors = 0;
    for (uint32_t i = 0; i < d; i++) {
        uint32_t x = QK_KEXT_BITS(ext[i]), seen = 0;
        for (uint32_t k = 0; k < d; k++)
            if (QK_KEXT_DONOR(ext[k]) && QK_KEXT_PARTNER(ext[k]) == i)
                seen |= 1u << QK_KEXT_BIT(ext[k]);
        ck_assert_msg(seen == (x && !QK_KEXT_DONOR(ext[i]) ? (1u << x) - 1 : 0), "channel %u: x %u, bits lent %#x", i,
                      x, seen);
        ck_assert(i >= 4 || ext[i] == 0);
        donors += (int32_t)QK_KEXT_DONOR(ext[i]);
    }
    ck_assert_int_eq(donors, kl[QK_KL_DONORS(d)]);
}

/* The K cache layout against a float64 model of it: at position 0 (where
 * RoPE is the identity), each stored channel of RMSNorm(k) * k_norm * 2^boost
 * lies within half its step of the exact value, where the step is the
 * vector's (its exponent tag) / 2^x for a channel with x extension bits,
 * 2 steps for a donor and 1.5 for a tag channel; plus 2^-13 steps for the
 * kernel's own fixed point (31-bit mantissas). Layer 1 of the stress
 * checkpoint has extended channels: the heavy ones get steps of 2^-6 and finer. */
START_TEST(k_cache_extension_bits_narrow_the_heavy_channels)
{
    const struct qk_config *c = &plan.cfg;
    uint32_t d = c->head_dim, half = d / 2, layer = 1;
    for (uint32_t l = 0; l < c->n_layers; l++)
        assert_klayout_consistent(plan.klayout_table + l * QK_KL_LEN(d), d);
    const int32_t *kl = plan.klayout_table + layer * QK_KL_LEN(d), *ext = kl + QK_KL_EXT(d);
    ck_assert_int_gt(kl[QK_KL_DONORS(d)], 0);
    int64_t *qkv = calloc(1, map_len(QP_MAP_QKV));
    ck_assert(qkv);
    int64_t *k = qkv + c->q_dim;   /* K head 0, Q32 */
    double sumsq = 0;
    for (uint32_t i = 0; i < d; i++) {
        k[i] = (int64_t)(next_u64() % (1ull << 37)) - (1ll << 36);
        sumsq += ldexp((double)k[i], -32) * ldexp((double)k[i], -32);
    }
    set_state(QP_MAP_QKV, qkv);
    set_seq(0, 1, 0);
    run_ok(QP_K_ROPE_STORE, &(struct qk_args){.layer = layer, .nb = 1});
    assert_state_equal("rope_store at position 0");
    const int16_t *kc = (const int16_t *)emu->state(emu, QP_MAP_KCACHE) + (uint64_t)layer * c->ctx * c->kv_dim;
    uint32_t sh = qm_cache_untag(kc);
    double unit = ldexp(1.0, c->k_exp[layer] - (int)sh), inv_rms = 1 / sqrt(sumsq / d + file.cfg.rms_eps);
    const struct qpk_tensor *g = qpk_tensor_of(&file, QPK_ROLE_K_NORM, layer);
    uint32_t finest = 0;
    for (uint32_t i = 0; i < d; i++) {
        int32_t gq;
        memcpy(&gq, g->data + 4 * (uint64_t)i, 4);
        double exact = ldexp((double)k[i], -32) * inv_rms * ldexp(gq, -g->scale_exp) *
                       ldexp(1.0, kl[i % half]) / unit;
        uint32_t x = QK_KEXT_BITS(ext[i]);
        double step = i < 4 ? 3 : QK_KEXT_DONOR(ext[i]) ? 2 : ldexp(1.0, -(int)x);
        double err = fabs(decode_k(kc, ext, i, d) - exact);
        ck_assert_msg(err <= step / 2 + 0x1p-13, "channel %u (x %u): error %g steps of the vector, bound %g", i,
                      x, err, step / 2 + 0x1p-13);
        finest = x > finest ? x : finest;
    }
    ck_assert_uint_ge(finest, 6);
    free(qkv);
}
END_TEST

/* The V cache layout against a float64 model of it: at position 0, each
 * stored entry of random V heads lies within half its step of the exact
 * value, the step being the vector's (its shift, entries 0..3) over its
 * stretch (16 + st) / 16 (entries 4..7); entries 0..7 give their lowest
 * bit to those tags, so 1.5 steps there. And the stretch is the largest
 * that fits: the largest entry reaches 32767 (16 + st) / (17 + st), less
 * the rounding of qm_v_stretch, unless st is already 15. */
START_TEST(v_cache_vectors_fill_their_int16_range)
{
    const struct qk_config *c = &plan.cfg;
    uint32_t d = c->head_dim, layer = 0;
    int64_t *qkv = calloc(1, map_len(QP_MAP_QKV));
    ck_assert(qkv);
    uint32_t stretches = 0;
    for (int trial = 0; trial < 24; trial++) {
        int64_t *v = qkv + c->q_dim + c->kv_dim;   /* V heads, Q32 */
        uint32_t bits = 20 + (uint32_t)trial % 12; /* magnitudes 2^-13 .. 2^-1 */
        for (uint32_t i = 0; i < c->kv_dim; i++)
            v[i] = (int64_t)(next_u64() % (1ull << bits)) - (1ll << (bits - 1));
        set_state(QP_MAP_QKV, qkv);
        set_seq(0, 1, 0);
    run_ok(QP_K_ROPE_STORE, &(struct qk_args){.layer = layer, .nb = 1});
        assert_state_equal("rope_store of V at position 0");
        const int16_t *vc = (const int16_t *)emu->state(emu, QP_MAP_VCACHE) + (uint64_t)layer * c->ctx * c->kv_dim;
        for (uint32_t h = 0; h < c->n_kv_heads; h++) {
            const int16_t *e = vc + h * d;
            uint32_t sh = qm_cache_untag(e), st = qm_cache_untag(e + 4);
            double unit = ldexp(1.0, c->v_exp[layer] - (int)sh) * 16 / (16 + st);
            int largest = 0;
            for (uint32_t i = 0; i < d; i++) {
                double exact = ldexp((double)v[h * d + i], -32) / unit, err = fabs(e[i] - exact);
                double bound = (i < 8 ? 1.5 : 0.5) + 1e-9;
                ck_assert_msg(err <= bound, "head %u entry %u (shift %u, stretch %u): error %g steps, bound %g", h, i,
                              sh, st, err, bound);
                largest = abs(e[i]) > largest ? abs(e[i]) : largest;
            }
            ck_assert_msg(st == 15 || sh == QM_CACHE_SH_MAX || largest >= 32767.0 * (16 + st) / (17 + st) - 3,
                          "head %u: stretch %u leaves the largest entry at %d", h, st, largest);
            stretches += st > 0;
        }
    }
    ck_assert_uint_gt(stretches, 0);
    free(qkv);
}
END_TEST

/* the attention output in x, every query head's entries, within one unit
 * of its last place of want (per KV head: each query head of a group gets
 * its KV head's) */
static void assert_output_is(const double *want, int which)
{
    const struct qk_config *c = &plan.cfg;
    uint32_t d = c->head_dim, group = c->n_heads / c->n_kv_heads;
    const int64_t *x = emu->state(emu, QP_MAP_X);
    int32_t x_exp = emu->scal->x_exp;
    for (uint32_t hq = 0; hq < c->n_heads; hq++)
        for (uint32_t i = 0; i < d; i++) {
            double got = ldexp((double)x[hq * d + i], x_exp), exact = want[(hq / group) * d + i];
            ck_assert_msg(fabs(got - exact) <= ldexp(1.0, x_exp) * (1 + 1e-9),
                          "case %d, head %u entry %u: %.17g, want %.17g (unit 2^%d)", which, hq, i, got, exact, x_exp);
        }
}

/* Attention and its merge against the exact weighted mean, on a cache
 * written directly: K all zero, so every position weighs the same, and V
 * vectors at the top of their range. Five chunks of positions (1280), in
 * two cases: every entry at +32767 with shift and stretch 0 (the largest
 * sums the accumulators are specified for: 2^61 per chunk, and five chunks
 * of them would overflow a plain sum), and random
 * entries, shifts 0..5 and stretches. The output, value x * 2^x_exp, lies
 * within one unit of its last place of the mean of the stored values
 * (raw int16, tag bits included) * 16 / (16 + st) * 2^(v_exp - shift). */
START_TEST(attention_is_the_weighted_mean_of_the_cache)
{
    const struct qk_config *c = &plan.cfg;
    uint32_t d = c->head_dim, layer = 1;
    ck_assert_uint_ge(c->ctx, 1280);
    int16_t *kc = calloc(1, map_len(QP_MAP_KCACHE)), *vc = calloc(1, map_len(QP_MAP_VCACHE));
    double *want = calloc((size_t)c->n_kv_heads * d, sizeof *want);
    ck_assert(kc && vc && want);
    for (int random = 0; random < 2; random++) {
        /* 5 full chunks for the largest sums; then a partial last chunk */
        uint32_t n = random ? 1279 : 1280, chunks = (n + QK_ATTN_CHUNK - 1) / QK_ATTN_CHUNK;
        memset(want, 0, (size_t)c->n_kv_heads * d * sizeof *want);
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t h = 0; h < c->n_kv_heads; h++) {
                int16_t *e = vc + ((uint64_t)layer * c->ctx + j) * c->kv_dim + h * d;
                uint32_t sh = random ? (uint32_t)(next_u64() % 6) : 0, st = random ? (uint32_t)(next_u64() % 16) : 0;
                for (uint32_t i = 0; i < d; i++) {
                    int32_t raw = random ? (int32_t)(next_u64() % 65535) - 32767 : 32767;
                    e[i] = (int16_t)(i < 4 ? qm_cache_tag(raw, i, sh) : i < 8 ? qm_cache_tag(raw, i - 4, st) : raw);
                    want[h * d + i] += ldexp(e[i], c->v_exp[layer] - (int)sh) * 16 / (16 + st) / n;
                }
            }
        set_state(QP_MAP_KCACHE, kc);
        set_state(QP_MAP_VCACHE, vc);
        set_seq(n - 1, 1, 0);
        run_ok(QP_K_ATTENTION, &(struct qk_args){.layer = layer, .max_pos = n - 1, .begin = 0, .end = qk_attn_head_tasks(c) * chunks, .nb = 1});
        run_ok(QP_K_ATTN_MERGE, &(struct qk_args){.layer = layer, .max_pos = n - 1, .begin = 0, .end = c->n_heads, .nb = 1});
        assert_state_equal("attention over a written cache");
        assert_output_is(want, random);
    }
    free(kc);
    free(vc);
    free(want);
}
END_TEST

/* The 8-bit cache: attention8 over V codes written by hand, K codes all 0
 * (every score equal, so every weight the same), is the mean of the
 * stored values c * 2^(v_exp + 8 - sh) within one unit of the output's
 * last place. Five chunks (1280 positions) of codes at +127 with shift 0,
 * the largest sums the value lanes are specified for, and random codes
 * with shifts 0..5 over a partial last chunk. */
START_TEST(kv8_attention_is_the_mean_of_the_cache)
{
    const struct qk_config *c = &plan.cfg;
    uint32_t d = c->head_dim, layer = 1;
    uint8_t *kc = malloc(map_len(QP_MAP_KCACHE)), *vc = calloc(1, map_len(QP_MAP_VCACHE));
    double *want = calloc((size_t)c->n_kv_heads * d, sizeof *want);
    ck_assert(kc && vc && want && c->kv8);
    memset(kc, QK_KV8_BIAS, map_len(QP_MAP_KCACHE));     /* codes 0; shifts 128 & 15 = 0 */
    for (int random = 0; random < 2; random++) {
        uint32_t n = random ? 1279 : 1280, chunks = (n + QK_ATTN_CHUNK - 1) / QK_ATTN_CHUNK;
        memset(want, 0, (size_t)c->n_kv_heads * d * sizeof *want);
        for (uint32_t j = 0; j < n; j++) {
            for (uint32_t h = 0; h < c->n_kv_heads; h++) {
                uint8_t *r = vc + kv_offset(0, layer, h, j);
                uint32_t sh = random ? (uint32_t)(next_u64() % 6) : 0;
                r[d] = (uint8_t)sh;
                for (uint32_t i = 0; i < d; i++) {
                    int code = random ? (int)(next_u64() % 255) - 127 : 127;
                    r[i] = (uint8_t)(code + QK_KV8_BIAS);
                    want[h * d + i] += ldexp(code, c->v_exp[layer] + 8 - (int)sh) / n;
                }
            }
        }
        set_state(QP_MAP_KCACHE, kc);
        set_state(QP_MAP_VCACHE, vc);
        set_seq(n - 1, 1, 0);
        run_ok(QP_K_ATTENTION8, &(struct qk_args){.layer = layer, .max_pos = n - 1, .begin = 0,
                                                  .end = qk_attn_head_tasks(c) * chunks, .nb = 1});
        run_ok(QP_K_ATTN_MERGE, &(struct qk_args){.layer = layer, .max_pos = n - 1, .begin = 0, .end = c->n_heads, .nb = 1});
        assert_state_equal("attention8 over a written cache");
        assert_output_is(want, random);
    }
    free(kc);
    free(vc);
    free(want);
}
END_TEST

/* kernel k on backend b, which must accept it */
static void run_on(struct qp_backend *b, enum qp_kernel k, const struct qk_args *a)
{
    qp_err err = {{0}};
    ck_assert_msg(b->run(b, k, a, NULL, &err) == 0, "%s on %s: %s", qp_kernel_name(k), b->name, err.msg);
}

/* An entry whose qk_seq is outside the model (its slot, its position, or
 * past args.max_pos) is skipped by both backends, which raise
 * scal.seq_error and write no row of the KV cache; the flag is cleared
 * again for the checks that follow. */
static void assert_skipped(enum qp_kernel k, const struct qk_args *a, const char *what)
{
    size_t kv = map_len(QP_MAP_KCACHE);
    uint8_t *kc = malloc(kv), *vc = malloc(kv);
    ck_assert(kc && vc);
    memcpy(kc, bpf->state(bpf, QP_MAP_KCACHE), kv);
    memcpy(vc, bpf->state(bpf, QP_MAP_VCACHE), kv);
    struct qp_backend *both[2] = {bpf, emu};
    for (int i = 0; i < 2; i++) {
        run_on(both[i], k, a);
        struct qk_scalars *sc = (struct qk_scalars *)both[i]->state(both[i], QP_MAP_SCAL);
        ck_assert_msg(sc->seq_error, "%s: %s raised no seq_error", what, both[i]->name);
        sc->seq_error = 0;
        ck_assert_msg(!memcmp(kc, both[i]->state(both[i], QP_MAP_KCACHE), kv) &&
                      !memcmp(vc, both[i]->state(both[i], QP_MAP_VCACHE), kv), "%s: %s wrote the cache", what,
                      both[i]->name);
    }
    free(kc);
    free(vc);
}

/* The query heads that share a K/V head are taken two to a task (one read
 * of each K and V entry serves both): taken one at a time instead, on both
 * backends, the block's attention output is the same to the bit. The cache
 * is written by rope_store from act values of every pattern size, over
 * three chunks, and read by a block of entries. */
START_TEST(attention_in_head_pairs_equals_one_head_at_a_time)
{
    static struct qp_plan single;
    const struct qk_config *c = &plan.cfg;
    ck_assert_uint_eq(c->attn_heads, 2);    /* tiny: 4 query heads on 2 K/V heads */
    single = plan;
    single.cfg.attn_heads = 1;
    struct qp_backend *pairs[2] = {bpf, emu}, *ones[2], *all[4];
    qp_err err = {{0}};
    ck_assert_msg(qp_bpf_create(&ones[0], &single, &err) == 0 && qp_emu_create(&ones[1], &single, &err) == 0, "%s",
                  err.msg);
    memcpy(all, pairs, sizeof pairs);
    memcpy(all + 2, ones, sizeof ones);
    uint32_t nb = c->block, pos0 = 596, chunks = (pos0 + nb - 1) / QK_ATTN_CHUNK + 1;
    size_t qkv_len = map_len(QP_MAP_QKV), x_len = map_len(QP_MAP_X);
    int64_t *qkv = malloc(qkv_len);
    uint8_t *x = malloc(x_len);
    ck_assert(qkv && x);
    fill(qkv, qkv_len / 8, MIXED, 1ll << 40);
    /* the odd heads' queries 0, so their weights stay flat, and the even
     * heads' scaled up by 2^12 after rope_store (their exponents), so their
     * weights underflow at most positions: pairs meet positions that one of
     * their heads skips */
    size_t row = c->q_dim + 2 * c->kv_dim, scal_stride = (plan.maps[QP_MAP_SCAL].value_size + 7) / 8 * 8;
    for (uint32_t b = 0; b < nb; b++)
        for (uint32_t h = 1; h < c->n_heads; h += 2)
            memset(qkv + b * row + h * c->head_dim, 0, c->head_dim * sizeof *qkv);
    for (int i = 0; i < 4; i++) {
        /* every state map as bpf's, which earlier tests left in use */
        for (int id = 0; id < QP_MAP_COUNT; id++)
            if (i && bpf->state(bpf, id))
                memcpy((void *)all[i]->state(all[i], id), bpf->state(bpf, id), map_len(id));
        memcpy((void *)all[i]->state(all[i], QP_MAP_QKV), qkv, qkv_len);
        for (uint32_t pos = 0; pos <= pos0; pos += nb) {
            seq_on(all[i], pos, nb, 0);
            run_on(all[i], rope_kernel(), &(struct qk_args){.layer = 1, .nb = nb});
        }
        for (uint32_t b = 0; b < nb; b++) {
            struct qk_scalars *sc = (void *)((uint8_t *)all[i]->state(all[i], QP_MAP_SCAL) + b * scal_stride);
            for (uint32_t h = 0; h < c->n_heads; h += 2)
                sc->q_exp[h] += 12;
        }
        uint32_t heads_a_task = i < 2 ? 2 : 1;
        run_on(all[i], attn_kernel(), &(struct qk_args){.layer = 1, .max_pos = pos0 + nb - 1, .nb = nb, .begin = 0,
                                                         .end = nb * c->n_heads / heads_a_task * chunks});
        run_on(all[i], QP_K_ATTN_MERGE, &(struct qk_args){.layer = 1, .max_pos = pos0 + nb - 1, .nb = nb, .begin = 0,
                                                          .end = c->n_heads});
        if (i == 0)
            memcpy(x, all[i]->state(all[i], QP_MAP_X), x_len);
        ck_assert_msg(memcmp(x, all[i]->state(all[i], QP_MAP_X), x_len) == 0,
                      "attention output of %s, %u head(s) a task, differs from bpf's with 2", all[i]->name,
                      heads_a_task);
    }
    ck_assert(any_nonzero(QP_MAP_X));
    ones[0]->destroy(ones[0]);
    ones[1]->destroy(ones[1]);
    free(qkv);
    free(x);
}
END_TEST

/* bytes of one sequence slot's rows in a KV cache map */
static size_t slot_len(enum qp_map_id id)
{
    return map_len(id) / plan.cfg.kv_slots;
}

static void fill_random(void *p, size_t len)
{
    uint8_t *b = p;
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)next_u64();
}

/* Sequence slots: rope_store into slot 1 writes slot 1's rows only, the
 * rows slot 0 gets from the same input; attention in slot 0 reads slot
 * 0's rows only (slot 1 refilled with other bytes changes no bit of its
 * output); a slot the model does not have is refused. */
START_TEST(a_slots_cache_is_untouched_by_another_slots_steps)
{
    const struct qk_config *c = &plan.cfg;
    ck_assert_uint_eq(c->kv_slots, 2);
    size_t kv = map_len(QP_MAP_KCACHE), half = slot_len(QP_MAP_KCACHE), qkv_len = map_len(QP_MAP_QKV);
    uint8_t *kc = malloc(kv), *vc = malloc(kv), *qkv = calloc(1, qkv_len), *x0 = malloc(map_len(QP_MAP_X));
    ck_assert(kc && vc && qkv && x0);
    fill_random(kc, kv);
    fill_random(vc, kv);
    set_state(QP_MAP_KCACHE, kc);
    set_state(QP_MAP_VCACHE, vc);
    int64_t *q = (int64_t *)qkv;
    for (size_t i = 0; i < qkv_len / 8; i++)
        q[i] = (int64_t)(next_u64() % (1ull << 37)) - (1ll << 36);
    const uint32_t positions[] = {0, 37, 299};
    for (int i = 0; i < 3; i++) {
        set_state(QP_MAP_QKV, qkv);     /* rope_store normalises q|k|v in place */
        set_seq(positions[i], 1, 1);
        run_ok(rope_kernel(), &(struct qk_args){.layer = 1, .nb = 1});
    }
    assert_state_equal("rope_store into slot 1");
    const uint8_t *k_now = bpf->state(bpf, QP_MAP_KCACHE), *v_now = bpf->state(bpf, QP_MAP_VCACHE);
    ck_assert_msg(memcmp(k_now, kc, half) == 0 && memcmp(v_now, vc, half) == 0, "slot 1's step wrote into slot 0");
    /* slot 0 at the same positions, from the same input, stores the same rows */
    for (int i = 0; i < 3; i++) {
        set_state(QP_MAP_QKV, qkv);
        set_seq(positions[i], 1, 0);
        run_ok(rope_kernel(), &(struct qk_args){.layer = 1, .nb = 1});
    }
    size_t row = kv_len();
    for (int i = 0; i < 3; i++)
        for (uint32_t h = 0; h < (c->kv8 ? c->n_kv_heads : 1); h++) {
            size_t at = kv_offset(0, 1, h, positions[i]), at1 = kv_offset(1, 1, h, positions[i]);
            ck_assert_msg(memcmp(k_now + at, k_now + at1, row) == 0 && memcmp(v_now + at, v_now + at1, row) == 0,
                          "position %u: slots 0 and 1 store different rows", positions[i]);
            ck_assert_msg(memcmp(k_now + at1, kc + at1, row) != 0, "position %u: slot 1 not written", positions[i]);
        }
    /* attention of slot 0 at position 299, then again with slot 1 refilled */
    struct qk_args att = {.layer = 1, .max_pos = 299, .begin = 0, .end = qk_attn_head_tasks(c) * 2, .nb = 1};
    struct qk_args merge = {.layer = 1, .max_pos = 299, .begin = 0, .end = c->n_heads, .nb = 1};
    set_seq(299, 1, 0);
    run_ok(attn_kernel(), &att);
    run_ok(QP_K_ATTN_MERGE, &merge);
    memcpy(x0, bpf->state(bpf, QP_MAP_X), map_len(QP_MAP_X));
    memcpy(kc, k_now, kv);
    memcpy(vc, v_now, kv);
    fill_random(kc + half, kv - half);
    fill_random(vc + half, kv - half);
    set_state(QP_MAP_KCACHE, kc);
    set_state(QP_MAP_VCACHE, vc);
    run_ok(attn_kernel(), &att);
    run_ok(QP_K_ATTN_MERGE, &merge);
    assert_state_equal("attention of slot 0");
    ck_assert_msg(memcmp(x0, bpf->state(bpf, QP_MAP_X), map_len(QP_MAP_X)) == 0,
                  "slot 0's attention changed with slot 1's cache");
    /* a slot the model does not have: skipped, said, nothing written */
    set_seq(0, 1, c->kv_slots);
    assert_skipped(rope_kernel(), &(struct qk_args){.layer = 0, .nb = 1}, "rope_store into a slot past the model's");
    set_seq(299, 1, c->kv_slots);
    assert_skipped(attn_kernel(), &att, "attention of a slot past the model's");
    free(kc);
    free(vc);
    free(qkv);
    free(x0);
}
END_TEST

START_TEST(kernels_reject_arguments_outside_the_model)
{
    const struct qk_config *c = &plan.cfg;
    const struct qk_args bad[] = {
        {.layer = c->n_layers, .mode = QK_MV_QKV, .begin = 0, .end = 4, .nb = 1},
        {.layer = 0, .mode = QK_MV_QKV, .begin = 0, .end = c->q_dim + 2 * c->kv_dim + 4, .nb = 1},
        {.layer = 0, .mode = QK_MV_O, .begin = 2, .end = 6, .nb = 1},
        {.layer = 0, .mode = 99, .begin = 0, .end = 4, .nb = 1},
        /* a job spans two matrices (q and k): never one kernel's */
        {.layer = 0, .mode = QK_MV_QKV, .begin = c->q_dim - 4, .end = c->q_dim + 4, .nb = 1},
        /* block entries past the block, or none */
        {.layer = 0, .mode = QK_MV_QKV, .begin = 0, .end = 4, .b0 = c->block - 1, .nb = 2},
        {.layer = 0, .mode = QK_MV_QKV, .begin = 0, .end = 4, .nb = 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        qp_err err = {{0}};
        ck_assert_int_ne(bpf->run(bpf, program_of(0, QK_MV_QKV, 0), &bad[i], NULL, &err), 0);
        ck_assert_msg(strstr(err.msg, "rejected its arguments"), "%s", err.msg);
    }
    /* each product kernel refuses the other encoding's matrices */
    qp_err err = {{0}};
    enum qp_kernel other = program_of(0, QK_MV_O, 0) == QP_K_MATVEC_Q24 ? QP_K_MATVEC_I4 : QP_K_MATVEC_Q24;
    ck_assert_int_ne(bpf->run(bpf, other, &(struct qk_args){.layer = 0, .mode = QK_MV_O, .begin = 0, .end = 4, .nb = 1},
                              NULL, &err), 0);
    ck_assert_int_ne(bpf->run(bpf, QP_K_EMBED, &(struct qk_args){.token = c->vocab, .nb = 1}, NULL, &err), 0);
    set_seq(c->ctx, 1, 0);
    assert_skipped(rope_kernel(), &(struct qk_args){.layer = 0, .nb = 1}, "rope_store past the context");
    /* a block whose second entry is past the context: the first is
     * written, the second skipped and said */
    set_seq(c->ctx - 1, 2, 0);
    struct qp_backend *both[2] = {bpf, emu};
    for (int i = 0; i < 2; i++) {
        run_on(both[i], rope_kernel(), &(struct qk_args){.layer = 0, .nb = 2});
        struct qk_scalars *sc = (struct qk_scalars *)both[i]->state(both[i], QP_MAP_SCAL);
        ck_assert_msg(sc->seq_error, "an entry past the context: %s raised no seq_error", both[i]->name);
        sc->seq_error = 0;
    }
    assert_state_equal("rope_store of a block past the context");
    /* an entry past the position the attention was told of */
    set_seq(10, 1, 0);
    assert_skipped(attn_kernel(), &(struct qk_args){.layer = 0, .max_pos = 9, .begin = 0, .end = qk_attn_head_tasks(c),
                                                     .nb = 1}, "attention past max_pos");
    set_seq(0, 1, 0);
    ck_assert_int_ne(bpf->run(bpf, attn_kernel(), &(struct qk_args){.layer = 0, .max_pos = 0, .begin = 0,
                                                                   .end = qk_attn_head_tasks(c) + 1, .nb = 1}, NULL, &err), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels");
    void (*setups[2])(void) = {setup_q24, setup_int4};
    const char *names[2] = {"q24", "int4"};
    TCase *kv8 = tcase_create("kv8");
    tcase_set_timeout(kv8, 600);
    tcase_add_unchecked_fixture(kv8, setup_kv8, teardown);
    tcase_add_test(kv8, each_kernel_matches_its_host_twin_on_edge_values);
    tcase_add_test(kv8, kernels_reject_arguments_outside_the_model);
    tcase_add_test(kv8, kv8_attention_is_the_mean_of_the_cache);
    tcase_add_test(kv8, attention_in_head_pairs_equals_one_head_at_a_time);
    tcase_add_test(kv8, a_slots_cache_is_untouched_by_another_slots_steps);
    suite_add_tcase(s, kv8);
    for (int k = 0; k < 2; k++) {
        TCase *tc = tcase_create(names[k]);
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, setups[k], teardown);
        tcase_add_test(tc, each_kernel_matches_its_host_twin_on_edge_values);
        tcase_add_test(tc, kernels_reject_arguments_outside_the_model);
        tcase_add_test(tc, k_cache_extension_bits_narrow_the_heavy_channels);
        tcase_add_test(tc, v_cache_vectors_fill_their_int16_range);
        tcase_add_test(tc, attention_is_the_weighted_mean_of_the_cache);
        tcase_add_test(tc, attention_in_head_pairs_equals_one_head_at_a_time);
        tcase_add_test(tc, a_slots_cache_is_untouched_by_another_slots_steps);
        suite_add_tcase(s, tc);
    }
    return qp_test_main_nofork(s);
}
