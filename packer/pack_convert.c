/* pack_convert.c - every value converted exactly once and written: Q24 and
 * I32S straight from the source, the quantised encodings through the
 * quantisers of quant.h, each tensor's error against its source kept for
 * the summary (packer.h). A value that does not fit is an error naming the
 * tensor and index. */
#include "packer.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "int4.h"
#include "int8.h"
#include "progress.h"
#include "q24.h"

static void note_error(struct planned *pl, double v, double back)
{
    double e = fabs(v - back);
    pl->sum_sq_err += e * e;
    if (e > pl->max_err)
        pl->max_err = e;
    if (fabs(v) > pl->max_abs)
        pl->max_abs = fabs(v);
}

static int value_error(const struct packer *p, const struct planned *pl, uint64_t i, double v, const char *why,
                       qp_err *err)
{
    return qp_fail(err, "%s: tensor %s[%" PRIu64 ", %" PRIu64 "] = %g %s", p->opt.src, pl->t.name,
                   i / pl->t.cols, i % pl->t.cols, v, why);
}

/* The checked conversion of one element: fits, and its error noted. */
static int convert_one(const struct packer *p, struct planned *pl, uint64_t i, int32_t *q, qp_err *err)
{
    const struct st_tensor *s = pl->src;
    bool ok;
    if (s->dtype == ST_BF16) {
        uint16_t bits = (uint16_t)(s->data[2 * i] | s->data[2 * i + 1] << 8);
        ok = q24_from_bf16(bits, q);
    } else {
        ok = q24_from_float(st_get_f32(s, i), q);
    }
    double v = st_get_f32(s, i);
    if (!ok)
        return value_error(p, pl, i, v, "does not fit q24 (needs a finite |v| < 128)", err);
    note_error(pl, v, ldexp((double)*q, -Q24_FRAC_BITS));
    return 0;
}

/* BF16 magnitudes (bits & 0x7fff) in [QUIET_MIN, QUIET_END) are exact in
 * Q24 (|v| >= 2^-17) and fit (|v| < 128): such an element needs no error
 * accounting, its |v| ordering is its bits' ordering. Every other pattern
 * (small, too large, inf, NaN) takes convert_one. Skipping exact elements
 * leaves the error sums bit for bit what per-element accounting gives: they
 * would add +0.0, and the rest are still added in index order. */
#define QUIET_MIN 0x3700u
#define QUIET_END 0x4300u

/* Converts one block of 4 rows (elements [first, first + 4 * cols)) to Q24,
 * straight into the block's 4 x 16 tiles in out. Elements are visited in
 * index order, so the error sums match an element-by-element pass. */
static int convert_block(const struct packer *p, struct planned *pl, uint64_t first, int32_t *out, qp_err *err)
{
    const struct st_tensor *s = pl->src;
    uint32_t cols = pl->t.cols;
    if (s->dtype == ST_BF16) {
        const uint8_t *src = s->data + 2 * first;
        uint16_t max_mag = 0;
        for (uint32_t k = 0; k < QPK_Q24_TILE_ROWS; k++)
            for (uint32_t c0 = 0; c0 < cols; c0 += QPK_Q24_TILE_COLS) {
                int32_t *dst = out + (uint64_t)c0 * QPK_Q24_TILE_ROWS + k * QPK_Q24_TILE_COLS;
                uint16_t in[QPK_Q24_TILE_COLS], loud = 0;
                memcpy(in, src + 2 * ((uint64_t)k * cols + c0), sizeof in);
                /* branch-free so it vectorizes: a quiet value times 2^24 is
                 * an integer below 2^31, which the float product holds exactly */
                for (uint32_t j = 0; j < QPK_Q24_TILE_COLS; j++) {
                    uint16_t mag = in[j] & 0x7fff;
                    loud |= (uint16_t)(mag - QUIET_MIN) >= (uint16_t)(QUIET_END - QUIET_MIN);
                    max_mag = mag > max_mag ? mag : max_mag;
                    dst[j] = (int32_t)(qp_bf16_to_f32(mag < QUIET_END ? in[j] : 0) * 0x1p24f);
                }
                if (!loud)
                    continue;
                /* redone one by one, in index order (so the error sums match) */
                for (uint32_t j = 0; j < QPK_Q24_TILE_COLS; j++)
                    if ((uint16_t)((in[j] & 0x7fff) - QUIET_MIN) >= (uint16_t)(QUIET_END - QUIET_MIN) &&
                        convert_one(p, pl, first + (uint64_t)k * cols + c0 + j, &dst[j], err))
                        return -1;
            }
        double m = (double)qp_bf16_to_f32((uint16_t)max_mag);
        if (m > pl->max_abs)
            pl->max_abs = m;
        return 0;
    }
    for (uint32_t k = 0; k < QPK_Q24_TILE_ROWS; k++)
        for (uint32_t c = 0; c < cols; c++) {
            int32_t *dst = out + (uint64_t)(c / QPK_Q24_TILE_COLS) * QPK_Q24_TILE_COLS * QPK_Q24_TILE_ROWS +
                           k * QPK_Q24_TILE_COLS + c % QPK_Q24_TILE_COLS;
            if (convert_one(p, pl, first + (uint64_t)k * cols + c, dst, err))
                return -1;
        }
    return 0;
}

static int write_matrix(struct packer *p, struct qpk_writer *w, struct planned *pl, qp_err *err)
{
    uint32_t cols = pl->t.cols, blocks = pl->t.rows / QPK_Q24_TILE_ROWS;
    uint64_t block_elems = (uint64_t)cols * QPK_Q24_TILE_ROWS;
    uint64_t released = 0;
    for (uint32_t b = 0; b < blocks; b++) {
        if (convert_block(p, pl, b * block_elems, p->chunk, err) ||
            qpk_writer_write(w, p->chunk, block_elems * 4, err))
            return -1;
        uint64_t done = (b + 1) * block_elems;
        if (st_bytes(pl->src->dtype, done - released) >= RELEASE_BYTES || b + 1 == blocks) {
            st_release_part(&p->model, pl->src, released, done - released);
            released = done;
            pack_progress_bytes(&p->prog, done * 4);
        }
    }
    return 0;
}

static int write_norm(struct packer *p, struct qpk_writer *w, struct planned *pl, qp_err *err)
{
    const struct st_tensor *s = pl->src;
    uint32_t n = pl->t.cols;
    double max_abs = 0;
    for (uint32_t i = 0; i < n; i++) {
        double v = st_get_f32(s, i);
        if (!isfinite(v))
            return value_error(p, pl, i, v, "is not finite", err);
        max_abs = fmax(max_abs, fabs(v));
    }
    int e = i32s_exponent(max_abs);
    if (e < 0)
        return value_error(p, pl, 0, max_abs, "is too large for a norm scale (|v| <= 2^30)", err);
    memset(p->chunk, 0, pl->t.row_stride);
    for (uint32_t i = 0; i < n; i++) {
        double v = st_get_f32(s, i);
        p->chunk[i] = i32s_encode(v, e);
        note_error(pl, v, ldexp((double)p->chunk[i], -e));
    }
    return qpk_writer_write(w, p->chunk, pl->t.row_stride, err);
}

/* The exponent of a norm is part of its directory entry, so it is settled
 * before the writer lays the directory out. */
void pack_settle_norm_exponents(struct packer *p)
{
    for (uint32_t i = 0; i < p->n_plan; i++) {
        struct planned *pl = &p->plan[i];
        if (pl->t.encoding != QPK_ENC_I32S)
            continue;
        double max_abs = 0;
        for (uint32_t k = 0; k < pl->t.cols; k++)
            max_abs = fmax(max_abs, fabs((double)st_get_f32(pl->src, k)));
        pl->t.scale_exp = isfinite(max_abs) ? i32s_exponent(max_abs) : 0;
        st_release(&p->model, pl->src);
    }
}

/* The quantiser of one matrix: int8 is symmetric, so its absmax
 * round-to-nearest is packer/quant.h's QNT_RTN (min/max is the same). */
static qnt_method method_for(qnt_method opt, unsigned encoding)
{
    return qpk_kernel_encoding(encoding) == QPK_ENC_I8G && opt == QNT_ABSMAX ? QNT_RTN : opt;
}

const char *pack_quantiser_name(qnt_method opt)
{
    return opt == QNT_SEARCH ? "search" : opt == QNT_ABSMAX ? "rtn" : "minmax";
}

/* The RMSNorm whose output a matrix multiplies, if any: its gains scale
 * the matrix's input columns, and so the error of each column. */
static const struct st_tensor *input_norm(const struct packer *p, const struct qpk_tensor *t)
{
    unsigned role = t->role == QPK_ROLE_Q || t->role == QPK_ROLE_K || t->role == QPK_ROLE_V ? QPK_ROLE_ATTN_NORM
                    : t->role == QPK_ROLE_GATE || t->role == QPK_ROLE_UP                  ? QPK_ROLE_MLP_NORM
                    : t->role == QPK_ROLE_LM_HEAD || t->role == QPK_ROLE_EMBED            ? QPK_ROLE_FINAL_NORM
                                                                                          : 0;
    unsigned layer = role == QPK_ROLE_FINAL_NORM ? QPK_NO_LAYER : t->layer;
    if (!role || (t->role == QPK_ROLE_EMBED && !(p->cfg.flags & QPK_CONFIG_TIED)))
        return NULL;
    for (uint32_t i = 0; i < p->n_plan; i++)
        if (p->plan[i].t.role == role && p->plan[i].t.layer == layer)
            return p->plan[i].src;
    return NULL;
}

/* A column no input reaches still gets a little weight: a group of zero
 * weights stays an ordinary least-squares fit. The tied embedding is also
 * looked up, where every column counts alike: 1 + w / mean(w). */
static void finish_importance(float *w, uint32_t cols, bool embed)
{
    double sum = 0;
    for (uint32_t j = 0; j < cols; j++)
        sum += w[j];
    float floor = (float)(1e-4 * sum / cols);
    for (uint32_t j = 0; j < cols; j++)
        w[j] = embed ? 1.0f + (sum > 0 ? (float)(w[j] * cols / sum) : 0.0f)
                     : fmaxf(w[j], floor) + (sum > 0 ? 0.0f : 1.0f);
}

/* The searched quantiser's weight of each input column. Calibrated
 * (--calibrate): the column's mean square on the calibration text, what
 * its error is multiplied by on real inputs. Otherwise the squared gain of
 * the norm feeding the matrix (a column amplified 300x by its norm costs
 * 300x the logit error), so groups spend their precision where it counts;
 * uniform (NULL) for o_proj and down_proj. NULL also for an untied
 * embedding (only looked up) and the round-to-nearest quantisers. */
static float *column_importance(const struct packer *p, const struct planned *pl)
{
    bool search = p->opt.quant == QNT_SEARCH, embed = pl->t.role == QPK_ROLE_EMBED;
    if (!search || (embed && !(p->cfg.flags & QPK_CONFIG_TIED)))
        return NULL;
    const double *calibrated = p->calibrated ? calib_mean_sq(&p->calib, pl->t.role, pl->t.layer) : NULL;
    const struct st_tensor *g = calibrated ? NULL : input_norm(p, &pl->t);
    float *w = calibrated || g ? malloc(sizeof(float) * pl->t.cols) : NULL;
    if (!w)
        return NULL;
    for (uint32_t j = 0; j < pl->t.cols; j++) {
        double v = calibrated ? calibrated[j] : st_get_f32(g, j);
        v = calibrated ? v : v * v;
        w[j] = isfinite(v) ? (float)v : 0.0f;
    }
    if (g)
        st_release(&p->model, g);
    finish_importance(w, pl->t.cols, embed);
    return w;
}

static void quant_progress(void *ctx, uint64_t bytes_done)
{
    pack_progress_bytes(ctx, bytes_done);
}

static int write_quantised(struct packer *p, struct qpk_writer *w, struct planned *pl, qp_err *err)
{
    qnt_damage d = {0};
    float *importance = column_importance(p, pl);
    bool int4 = qpk_kernel_encoding(pl->t.encoding) == QPK_ENC_I4G;
    struct quant_matrix m = {.model = &p->model, .src = pl->src, .rows = pl->t.rows, .cols = pl->t.cols,
                             .group = pl->t.group_size, .E = pl->t.scale_exp,
                             .method = method_for(p->by_source_type ? pack_gguf_method(pl->src, p->opt.quant)
                                                                    : p->opt.quant, pl->t.encoding),
                             .importance = importance,
                             .format = int4 ? "int4" : "int8", .encoding = pl->t.encoding};
    struct quant_progress progress = {quant_progress, &p->prog};
    int rc = int4 ? i4_write_matrix(w, &m, &progress, &d, err) : i8_write_matrix(w, &m, &progress, &d, err);
    free(importance);
    pl->max_abs = d.max_abs;
    pl->max_err = d.max_err;
    pl->sum_sq_err = d.sum_sq;
    return rc;
}

uint64_t pack_planned_bytes(const struct planned *pl)
{
    return (uint64_t)(pl->t.rows / pl->t.rows_per_block) * pl->t.row_stride;
}

/* A tensor's work for the progress line's estimate of the time left: its
 * weights times what one costs in its encoding (ns of CPU here; only the
 * ratios matter). */
static double tensor_work(const struct packer *p, const struct planned *pl)
{
    double n = (double)pl->t.rows * pl->t.cols;
    bool search = p->opt.quant == QNT_SEARCH;
    switch (qpk_kernel_encoding(pl->t.encoding)) {
    case QPK_ENC_I4G: return n * (search ? 40 : 10);
    case QPK_ENC_I8G: return n * (search ? 20 : 8);
    default: return n * 2;
    }
}

int pack_write_tensors(struct packer *p, struct qpk_writer *w, qp_err *err)
{
    uint64_t bytes = 0;
    double work = 0;
    for (uint32_t i = 0; i < p->n_plan; i++) {
        bytes += pack_planned_bytes(&p->plan[i]);
        work += tensor_work(p, &p->plan[i]);
    }
    pack_progress_start(&p->prog, p->n_plan, bytes, work);
    for (uint32_t i = 0; i < p->n_plan; i++) {
        struct planned *pl = &p->plan[i];
        pack_progress_tensor(&p->prog, i, pack_planned_bytes(pl), tensor_work(p, pl));
        int rc = qpk_writer_begin_tensor(w, i, err);
        if (!rc)
            rc = pl->t.encoding == QPK_ENC_I32S ? write_norm(p, w, pl, err)
                 : pl->t.encoding == QPK_ENC_Q24 ? write_matrix(p, w, pl, err)
                                                 : write_quantised(p, w, pl, err);
        if (!rc)
            rc = qpk_writer_end_tensor(w, err);
        st_release(&p->model, pl->src);
        if (rc)
            return -1;
    }
    progress_clear();
    return 0;
}
