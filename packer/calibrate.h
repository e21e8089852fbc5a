/* calibrate.h - `qpack pack --calibrate`: what each matrix's input columns
 * carry on real text (the "importance matrix" idea of llama.cpp's imatrix).
 *
 * The float64 reference (engine/ref.c) runs over the first N tokens of a
 * text, in windows of the model's context (at most CALIB_WINDOW positions,
 * each window from position 0), and keeps, for every matrix, the mean
 * square of each input column: x_j^2 averaged over the positions. The
 * searched quantiser then weights column j's squared error by it, so a
 * group spends its precision on the columns that carry signal. */
#ifndef QP_CALIBRATE_H
#define QP_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ref.h"

/* Positions per window: attention makes the reference's cost grow with it */
#define CALIB_WINDOW 512
#define CALIB_DEFAULT_TOKENS 512
/* the largest calibration text read */
#define CALIB_TEXT_MAX (256u << 20)

struct calib {
    double *mean_sq[REF_N_INPUTS];  /* [layer][width] as ref_input_sumsq, divided by tokens */
    uint32_t n_layers, widths[REF_N_INPUTS];
    uint64_t tokens;                /* positions run */
    uint32_t windows, window;       /* how many windows, positions in a full one */
    uint64_t text_bytes, text_xxh3; /* the text file's size and XXH3-64 */
};

/* Called after each position the reference runs: done of total. */
typedef void calib_progress_fn(void *arg, uint64_t done, uint64_t total);

/* Runs the reference in model_dir over the first max_tokens tokens of the
 * text at text_path, tokenized by tokenizer_json[0..tok_len), calling
 * progress (when not NULL) as it goes. Fails on an unreadable text, one of
 * fewer than 2 tokens, or a token outside the vocabulary. */
int calib_run(struct calib *c, const char *model_dir, const char *tokenizer_json, size_t tok_len,
              const char *text_path, uint64_t max_tokens, calib_progress_fn *progress, void *arg, qp_err *err);

/* The mean squares of the input of a matrix of container role `role`
 * (qpk.h QPK_ROLE_*) in layer `layer`, cols values; NULL for a role that
 * has no matrix input (norms) or the embedding's lookup. */
const double *calib_mean_sq(const struct calib *c, unsigned role, unsigned layer);

void calib_free(struct calib *c);

#endif
