/* memory.c - the maps' bytes against MemAvailable, and the default context. */
#include "memory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int qp_mem_available(uint64_t *bytes, qp_err *err)
{
    const char *env = getenv("QP_MEM_AVAILABLE");
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (errno || *end)
            return qp_fail_code(err, QP_E_ARGUMENT, "QP_MEM_AVAILABLE=%s is not a number of bytes", env);
        *bytes = v;
        return 0;
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return qp_fail_code(err, QP_E_IO, "/proc/meminfo: %s", strerror(errno));
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    if (!found)
        return qp_fail_code(err, QP_E_IO, "/proc/meminfo has no MemAvailable line");
    *bytes = kb * 1024;
    return 0;
}

static uint64_t page_round(uint64_t n)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* emu's own copies of the packed tensors (i6g, i7g, i4k) and of every i4g one
 * (a w4 map's blocks, their parameters widened), expanded to map blocks */
static uint64_t packed_copies(const struct qpk_file *f)
{
    uint64_t n = 0;
    for (uint32_t i = 0; f && i < f->n_tensors; i++) {
        const struct qpk_tensor *t = &f->tensors[i];
        if (qpk_encoding_packed(t->encoding) || qp_tensor_widened(t))
            n += (uint64_t)(t->rows / t->rows_per_block) * qp_map_row_block_bytes(t);
    }
    return n;
}

uint64_t qp_mem_need(const struct qp_plan *p, bool bpf)
{
    uint64_t need = bpf ? 0 : packed_copies(p->file);
    for (int i = 0; i < QP_MAP_COUNT; i++) {
        if (bpf && !(p->stream && qp_map_is_matrix(i)))
            need += page_round(qp_map_bytes(&p->maps[i]));
        else if (!bpf && !p->maps[i].segs && !qp_map_is_matrix(i))
            need += qp_map_bytes(&p->maps[i]);
    }
    return need;
}

static uint64_t budget_of(uint64_t avail)
{
    return avail > QP_MEM_RESERVE ? avail - QP_MEM_RESERVE : 0;
}

/* "1.2 GB", "340 MB" or "96 kB" */
static const char *fmt_bytes(char *buf, size_t cap, uint64_t n)
{
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.1f GB", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.0f MB", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.0f kB", (double)n / 1e3);
    return buf;
}

/* bytes the maps of f need at this context, or 0 when it has no layout */
static uint64_t need_at(const struct qpk_file *f, uint32_t ctx, uint32_t slots, uint32_t block, bool stream,
                        bool kv8, bool bpf)
{
    struct qp_plan *p = malloc(sizeof *p);
    qp_err ignored;
    uint64_t need = p && !qp_plan_layout(p, f, ctx, slots, block, stream, kv8, &ignored) ? qp_mem_need(p, bpf) : 0;
    free(p);
    return need;
}

/* the largest context below ctx, a multiple of QK_ATTN_CHUNK, whose maps
 * fit the budget; 0 when none does */
static uint32_t largest_fitting_ctx(const struct qpk_file *f, uint32_t ctx, uint32_t slots, uint32_t block,
                                    bool stream, bool kv8, bool bpf, uint64_t budget)
{
    for (uint32_t c = (ctx - 1) / QK_ATTN_CHUNK * QK_ATTN_CHUNK; c >= QK_ATTN_CHUNK; c -= QK_ATTN_CHUNK) {
        uint64_t need = need_at(f, c, slots, block, stream, kv8, bpf);
        if (need && need <= budget)
            return c;
    }
    return 0;
}

/* the alternatives that fit, with their figures: "--stream (1.2 GB), ..." */
static void alternatives(const struct qp_plan *p, bool bpf, uint64_t budget, char *out, size_t cap)
{
    const struct qk_config *c = &p->cfg;
    size_t at = 0;
    char b[32];
    out[0] = 0;
    uint64_t streamed = p->stream || !bpf ? 0 : need_at(p->file, c->ctx, c->kv_slots, c->block, true, c->kv8, bpf);
    if (streamed)
        at += (size_t)snprintf(out + at, cap - at, "--stream (matrices read from the file per step: %s of maps%s), ",
                               fmt_bytes(b, sizeof b, streamed), streamed <= budget ? "" : ", still too much");
    if (at < cap && bpf && p->file->cfg.weight_format != QPK_FORMAT_INT4)
        at += (size_t)snprintf(out + at, cap - at, "a smaller format (%s), ",
                               p->file->cfg.weight_format == QPK_FORMAT_Q24 ? "int8, int4" : "int4");
    uint32_t fit = largest_fitting_ctx(p->file, c->ctx, c->kv_slots, c->block, p->stream, c->kv8, bpf, budget);
    if (at < cap && fit)
        at += (size_t)snprintf(out + at, cap - at, "-c %u (%s), ", fit,
                               fmt_bytes(b, sizeof b, need_at(p->file, fit, c->kv_slots, c->block, p->stream, c->kv8, bpf)));
    else if (at < cap && c->kv_slots > 1)
        at += (size_t)snprintf(out + at, cap - at, "fewer sessions, ");
    if (at >= 2 && at < cap)
        out[at - 2] = 0;
}

int qp_mem_check(const struct qp_plan *p, bool bpf, uint64_t avail, qp_err *err)
{
    uint64_t need = qp_mem_need(p, bpf), budget = budget_of(avail);
    if (need <= budget)
        return 0;
    const struct qk_config *c = &p->cfg;
    const struct qp_plan_bytes *b = &p->bytes;
    char total[32], w[48] = "", kv[32], st[32], av[32], alt[256];
    alternatives(p, bpf, budget, alt, sizeof alt);
    if (bpf)
        snprintf(w, sizeof w, "weights %s, ", fmt_bytes(st, sizeof st, b->weights));
    return qp_fail_code(err, QP_E_MEMORY,
                        "%s: the %s need %s (%sKV cache %s for %u session%s of %u positions, buffers %s) "
                        "and %s is available (MemAvailable less %llu MiB kept free)%s%s",
                        p->file->path, bpf ? "BPF maps" : "host twin's buffers", fmt_bytes(total, sizeof total, need),
                        w, fmt_bytes(kv, sizeof kv, b->kv), c->kv_slots, c->kv_slots == 1 ? "" : "s", c->ctx,
                        fmt_bytes(st, sizeof st, b->state), fmt_bytes(av, sizeof av, budget), QP_MEM_RESERVE >> 20,
                        alt[0] ? ": try " : "", alt);
}

uint32_t qp_mem_default_ctx(const struct qpk_file *f, uint32_t slots, uint32_t block, bool stream, bool kv8, bool bpf,
                            uint64_t avail)
{
    uint32_t max = f->cfg.max_positions, ctx = max < QPACK_DEFAULT_CTX ? max : QPACK_DEFAULT_CTX;
    uint64_t budget = budget_of(avail), need = need_at(f, ctx, slots, block, stream, kv8, bpf);
    /* a layout error, or maps that do not fit at all, are the caller's
     * plan's to report */
    if (!need || need <= budget || ctx <= QK_ATTN_CHUNK)
        return ctx;
    uint32_t fit = largest_fitting_ctx(f, ctx, slots, block, stream, kv8, bpf, budget);
    return fit ? fit : QK_ATTN_CHUNK;
}
