/* emu.c - the host twin: kernels/qk_kernels.h compiled for the host. A "map" is
 * a bounds-checked view: a lookup past the last entry gives NULL exactly as
 * an array map lookup does, and weight maps read the container in place
 * through the plan's segments (a packed tensor's, i6g, i7g or i4k, from a
 * copy expanded when the emu is made). */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend.h"

struct qk_hmap {
    uint8_t *base;                      /* state maps: value_size * max_entries bytes */
    const struct qp_segment *segs;      /* weight maps: sorted segments */
    uint32_t n_segs, value_size, max_entries;
};

/* one per map, in enum qp_map_id's order */
struct qk_host_maps {
#define QK_HOST_MAP(NAME, name) struct qk_hmap name;
    QK_MAPS(QK_HOST_MAP)
#undef QK_HOST_MAP
};

/* The model the kernels run on, set by every call: per thread, so that two
 * models stepped from two threads each see their own maps. */
static _Thread_local struct qk_host_maps *qk_host;
static _Thread_local const struct qk_config *qk_host_cfg;
#define QK_CFG (*qk_host_cfg)

static void *qk_host_lookup(const struct qk_hmap *m, uint32_t key)
{
    if (key >= m->max_entries)
        return NULL;
    if (!m->segs)   /* an array map's values start 8-byte aligned: the same bytes as BPF's */
        return m->base + (uint64_t)key * ((m->value_size + 7) / 8 * 8);
    return (void *)qp_segments_find(m->segs, m->n_segs, m->value_size, key);
}

/* bpf_loop's count: the iterations run, the one that stopped it included */
static long qk_host_loop(uint64_t n, long (*cb)(uint64_t, void *), void *ctx)
{
    for (uint64_t i = 0; i < n; i++)
        if (cb(i, ctx))
            return (long)i + 1;
    return (long)n;
}

/* bpf_ktime_get_ns's clock */
static uint64_t qk_host_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#include "qk_kernels.h"

struct emu {
    struct qp_backend b;
    struct qk_host_maps maps;
    struct qk_config cfg;
    uint8_t *state;                     /* one allocation for every state map */
    /* a weight map's segments when some were packed: those expanded into
     * buffers of their own, which differ from the plan's data */
    struct qp_segment *own_segs[QP_MAP_COUNT];
    const struct qp_plan *plan;
};

static int emu_run(struct qp_backend *b, enum qp_kernel k, const struct qk_args *a, uint64_t *prog_ns, qp_err *err)
{
    if (prog_ns)
        *prog_ns = 0;   /* no kernel clock: the host twin's time is the call's */
    struct emu *e = (struct emu *)b;
    qk_host = &e->maps;
    qk_host_cfg = &e->cfg;
    int rc;
    switch (k) {
#define QP_EMU_CASE(NAME, name, kernel) case QP_K_##NAME: rc = kernel(a); break;
        QK_PROGRAMS(QP_EMU_CASE)
#undef QP_EMU_CASE
    default: rc = -1;
    }
    if (rc > 0)
        return QK_RET_PARTIAL + rc;     /* what the program returns (qwen3.bpf.c) */
    return rc ? qp_fail(err, "emu kernel %s rejected its arguments", qp_kernel_name(k)) : 0;
}

static void free_own_segs(struct emu *e)
{
    for (int i = 0; i < QP_MAP_COUNT; i++) {
        const struct qp_mapspec *s = &e->plan->maps[i];
        for (uint32_t k = 0; e->own_segs[i] && k < s->n_segs; k++)
            if (e->own_segs[i][k].data != s->segs[k].data)
                free((void *)e->own_segs[i][k].data);
        free(e->own_segs[i]);
    }
}

static void emu_destroy(struct qp_backend *b)
{
    struct emu *e = (struct emu *)b;
    free_own_segs(e);
    free(e->state);
    free(e);
}

/* The segments of a weight map with every packed tensor expanded into
 * memory of its own; NULL when none is packed or on failure (*failed). */
static struct qp_segment *expand_segments(const struct qp_mapspec *s, bool *failed)
{
    bool any = false;
    for (uint32_t k = 0; k < s->n_segs; k++)
        any |= s->segs[k].packed != NULL;
    if (!any)
        return NULL;
    struct qp_segment *own = calloc(s->n_segs, sizeof *own);
    for (uint32_t k = 0; own && k < s->n_segs; k++) {
        own[k] = s->segs[k];
        if (!own[k].packed)
            continue;
        uint8_t *buf = malloc((size_t)own[k].n_keys * s->value_size);
        if (!buf) {
            for (uint32_t j = 0; j < k; j++)
                if (own[j].data != s->segs[j].data)
                    free((void *)own[j].data);
            free(own);
            own = NULL;
            break;
        }
        qp_segment_expand(&own[k], own[k].data, own[k].n_keys, buf, s->value_size);
        own[k].data = buf;
        own[k].packed = NULL;
        own[k].lanes6 = false;
    }
    *failed = !own;
    return own;
}

static void *emu_state(struct qp_backend *b, enum qp_map_id id)
{
    struct emu *e = (struct emu *)b;
    const struct qk_hmap *m = &e->maps.w_hid;
    return id < QP_MAP_COUNT ? m[id].base : NULL;
}

int qp_emu_create(struct qp_backend **out, const struct qp_plan *plan, qp_err *err)
{
    struct emu *e = calloc(1, sizeof *e);
    if (!e)
        return qp_fail(err, "out of memory");
    e->cfg = plan->cfg;
    e->plan = plan;
    struct qk_hmap *m = &e->maps.w_hid;   /* the fields follow enum qp_map_id's order */
    uint64_t state = 0;
    for (int i = 0; i < QP_MAP_COUNT; i++)
        if (!plan->maps[i].segs)
            state += qp_map_bytes(&plan->maps[i]);
    e->state = calloc(1, state);
    if (!e->state) {
        free(e);
        return qp_fail(err, "out of memory for %.1f MB of kernel state", (double)state / 1e6);
    }
    uint64_t at = 0;
    for (int i = 0; i < QP_MAP_COUNT; i++) {
        const struct qp_mapspec *s = &plan->maps[i];
        bool failed = false;
        e->own_segs[i] = expand_segments(s, &failed);
        m[i] = (struct qk_hmap){.segs = e->own_segs[i] ? e->own_segs[i] : s->segs, .n_segs = s->n_segs,
                                .value_size = s->value_size, .max_entries = s->max_entries};
        if (failed) {
            free_own_segs(e);
            free(e->state);
            free(e);
            return qp_fail(err, "out of memory for the expanded weights of map %s", s->name);
        }
        if (!s->segs) {
            m[i].base = e->state + at;
            at += qp_map_bytes(s);
        }
    }
    e->b = (struct qp_backend){.name = "emu", .run = emu_run, .destroy = emu_destroy, .state = emu_state,
                               .logits = (const int64_t *)e->maps.logits.base,
                               .scal = (const struct qk_scalars *)e->maps.scal.base,
                               .h = (const int64_t *)e->maps.h.base, .work = e->maps.work.base,
                               .seq = (struct qk_seq *)e->maps.seq.base};
    *out = &e->b;
    return 0;
}
