/* qeval_cache.c - --ref-cache DIR: the reference's results kept between
 * runs. The float64 reference is by far the slowest model qeval runs; its
 * results depend only on the checkpoint's files and the token sequences,
 * so they are kept in DIR/KEY.qeref, KEY a hash of both (the checkpoint's
 * files by their recorded XXH3, as `qpack pack` records them, tokenizer
 * files aside: the ids are hashed instead).
 *
 * The file, in this host's byte order (the magic names the version):
 *   header                  struct cache_header
 *   per prompt              uint32 n, uint32 gen, int32 ids[n], int32 greedy[gen]
 *   text                    int32 ids[n_text]
 *   trace                   double hidden[trace_positions][n_layers][hidden]
 *   logits                  double [positions][vocab], from the next multiple of 8
 * Everything is compared with what this run would compute from before use;
 * a file that differs is recomputed and replaced. It is written whole or not
 * at all (fsafe.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fsafe.h"
#include "progress.h"
#include "qeval.h"

#define CACHE_MAGIC "QEREF001"

struct cache_header {
    char magic[8];
    uint64_t key;
    uint32_t vocab, n_layers, hidden, n_prompts;
    uint32_t n_text, traced, trace_positions, reserved;
    uint64_t positions;         /* logit rows */
    double text_nll_sum;
    uint64_t text_tokens;
};

static bool is_tokenizer_file(const char *name)
{
    return !strcmp(name, "tokenizer.json") || !strcmp(name, "tokenizer_config.json");
}

static void hash_u32(XXH3_state_t *h, uint32_t v)
{
    XXH3_64bits_update(h, &v, sizeof v);
}

static uint64_t cache_key(const struct ctx *x)
{
    XXH3_state_t *h = XXH3_createState();
    uint64_t key = 0;
    if (!h)
        return 0;
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, CACHE_MAGIC, 8);
    for (size_t i = 0; i < x->n_sources; i++) {
        const qpack_source_file *f = &x->sources[i];
        if (is_tokenizer_file(f->name))
            continue;
        XXH3_64bits_update(h, f->name, strlen(f->name) + 1);
        XXH3_64bits_update(h, &f->size, sizeof f->size);
        XXH3_64bits_update(h, &f->xxh3, sizeof f->xxh3);
    }
    hash_u32(h, x->n_prompts);
    for (uint32_t p = 0; p < x->n_prompts; p++) {
        hash_u32(h, x->prompts[p].n);
        hash_u32(h, x->prompts[p].gen);
        XXH3_64bits_update(h, x->prompts[p].ids, x->prompts[p].n * sizeof(int32_t));
    }
    hash_u32(h, x->n_text);
    XXH3_64bits_update(h, x->text, x->n_text * sizeof(int32_t));
    hash_u32(h, x->o->trace);
    key = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return key;
}

static void cache_path(const struct ctx *x, uint64_t key, char *out, size_t n)
{
    snprintf(out, n, "%s/%016" PRIx64 ".qeref", x->o->ref_cache, key);
}

static uint64_t total_positions(const struct ctx *x)
{
    uint64_t n = 0;
    for (uint32_t p = 0; p < x->n_prompts; p++)
        n += x->prompts[p].n;
    return n;
}

static uint32_t trace_positions(const struct ctx *x)
{
    return x->o->trace ? x->prompts[x->n_prompts - 1].n : 0;
}

static struct cache_header header_of(const struct ctx *x, uint64_t key)
{
    struct cache_header h = {.key = key, .vocab = x->cfg->vocab, .n_layers = x->cfg->n_layers,
                             .hidden = x->cfg->hidden, .n_prompts = x->n_prompts, .n_text = x->n_text,
                             .traced = x->o->trace, .trace_positions = trace_positions(x),
                             .positions = total_positions(x), .text_nll_sum = x->res[0].text_nll_sum,
                             .text_tokens = x->res[0].text_tokens};
    memcpy(h.magic, CACHE_MAGIC, 8);
    return h;
}

static size_t hidden_bytes(const struct ctx *x)
{
    return (size_t)trace_positions(x) * x->cfg->n_layers * x->cfg->hidden * sizeof(double);
}

/* ---- reading ------------------------------------------------------------------ */

static bool read_exact(int fd, void *buf, size_t len, off_t *at)
{
    ssize_t got = pread(fd, buf, len, *at);
    *at += (off_t)len;
    return got == (ssize_t)len;
}

/* The sequences in the file against this run's; the continuations into x. */
static bool read_sequences(struct ctx *x, int fd, off_t *at)
{
    bool ok = true;
    for (uint32_t p = 0; ok && p < x->n_prompts; p++) {
        const struct seq *q = &x->prompts[p];
        uint32_t ng[2];
        int32_t *ids = malloc((q->n ? q->n : 1) * sizeof *ids);
        ok = ids && read_exact(fd, ng, sizeof ng, at) && ng[0] == q->n && ng[1] == q->gen &&
             read_exact(fd, ids, q->n * sizeof *ids, at) && !memcmp(ids, q->ids, q->n * sizeof *ids) &&
             read_exact(fd, x->ref.gen[p], q->gen * sizeof(int32_t), at);
        free(ids);
    }
    if (!ok || !x->n_text)
        return ok;
    int32_t *text = malloc(x->n_text * sizeof *text);
    ok = text && read_exact(fd, text, x->n_text * sizeof *text, at) && !memcmp(text, x->text, x->n_text * sizeof *text);
    free(text);
    return ok;
}

static bool read_entry(struct ctx *x, int fd, uint64_t key)
{
    struct cache_header want = header_of(x, key), got;
    off_t at = 0;
    if (!read_exact(fd, &got, sizeof got, &at) || memcmp(got.magic, want.magic, 8) || got.key != want.key ||
        got.vocab != want.vocab || got.n_layers != want.n_layers || got.hidden != want.hidden ||
        got.n_prompts != want.n_prompts || got.n_text != want.n_text || got.traced != want.traced ||
        got.trace_positions != want.trace_positions || got.positions != want.positions)
        return false;
    if (!read_sequences(x, fd, &at) || (hidden_bytes(x) && !read_exact(fd, x->ref.hidden, hidden_bytes(x), &at)))
        return false;
    at = (at + 7) & ~(off_t)7;
    struct stat st;
    if (fstat(fd, &st) || (uint64_t)st.st_size != (uint64_t)at + got.positions * x->cfg->vocab * sizeof(double))
        return false;
    struct result *r = &x->res[0];
    r->cached = true;
    r->prompt_tokens = got.positions;
    r->text_nll_sum = got.text_nll_sum;
    r->text_tokens = got.text_tokens;
    x->ref.rows_off = at;
    return true;
}

int qe_cache_load(struct ctx *x)
{
    uint64_t key = cache_key(x);
    char path[4200];
    cache_path(x, key, path, sizeof path);
    int fd = fs_open_input(path, NULL, &(qp_err){{0}});
    if (fd < 0)
        return 0;
    if (!read_entry(x, fd, key)) {
        close(fd);
        progress_clear();
        fprintf(stderr, "qeval: note: %s is not this run's reference: computing it again\n", path);
        return 0;
    }
    close(x->ref.fd);
    x->ref.fd = fd;
    return 1;
}

/* ---- writing ------------------------------------------------------------------- */

static int put(struct fs_out *out, const void *p, size_t n, qp_err *e)
{
    return n ? fs_out_write(out, p, n, e) : 0;
}

/* the logit rows from the temporary file, a MB at a time */
static int copy_rows(const struct ctx *x, struct fs_out *out, qp_err *e)
{
    uint64_t left = total_positions(x) * x->cfg->vocab * sizeof(double), at = 0;
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    int rc = buf ? 0 : qp_fail(e, "out of memory");
    while (!rc && left) {
        size_t n = left < cap ? (size_t)left : cap;
        if (pread(x->ref.fd, buf, n, (off_t)at) != (ssize_t)n)
            rc = qp_fail(e, "reading back the reference's logits: %s", strerror(errno ? errno : EIO));
        else
            rc = put(out, buf, n, e);
        at += n;
        left -= n;
    }
    free(buf);
    return rc;
}

static int write_entry(const struct ctx *x, struct fs_out *out, uint64_t key, qp_err *e)
{
    struct cache_header h = header_of(x, key);
    uint64_t at = sizeof h;
    int rc = put(out, &h, sizeof h, e);
    for (uint32_t p = 0; !rc && p < x->n_prompts; p++) {
        const struct seq *q = &x->prompts[p];
        uint32_t ng[2] = {q->n, q->gen};
        rc = put(out, ng, sizeof ng, e) || put(out, q->ids, q->n * sizeof(int32_t), e) ||
             put(out, x->ref.gen[p], q->gen * sizeof(int32_t), e);
        at += sizeof ng + (q->n + q->gen) * sizeof(int32_t);
    }
    if (!rc)
        rc = put(out, x->text, x->n_text * sizeof(int32_t), e) || put(out, x->ref.hidden, hidden_bytes(x), e);
    at += x->n_text * sizeof(int32_t) + hidden_bytes(x);
    static const char pad[8];
    if (!rc)
        rc = put(out, pad, (8 - at % 8) % 8, e);
    return rc || copy_rows(x, out, e);
}

int qe_cache_store(struct ctx *x)
{
    uint64_t key = cache_key(x);
    char path[4200];
    cache_path(x, key, path, sizeof path);
    struct fs_out out;
    qp_err e = {{0}};
    int rc = fs_out_open(&out, path, 0, &e);
    if (!rc && write_entry(x, &out, key, &e)) {
        fs_out_abort(&out);
        rc = -1;
    } else if (!rc) {
        rc = fs_out_commit(&out, &e);
    }
    if (rc) {
        /* the evaluation goes on: only the next run loses */
        progress_clear();
        fprintf(stderr, "qeval: warning: --ref-cache: %s\n", e.msg);
    }
    return 0;
}
