/* qeval_plot.h - `qeval --plot FILE.svg`: mean KL divergence (log scale)
 * against bits per weight, one labelled point per container, as one
 * self-contained SVG document (no scripts, fonts or external references). */
#ifndef QP_QEVAL_PLOT_H
#define QP_QEVAL_PLOT_H

#include <stddef.h>

struct qe_point {
    const char *label;   /* shown beside the point; bytes outside printable ASCII become '?' */
    double bpw;          /* x: bits per weight */
    double kl;           /* y: mean KL(ref || model), >= 0; 0 sits on the bottom edge, labelled so */
};

/* The SVG text of the plot of pts[0..n) (n >= 1) with a title; malloc'ed,
 * NUL-terminated, its length in *len. NULL when memory runs out. */
char *qe_plot_svg(const struct qe_point *pts, int n, const char *title, size_t *len);

#endif
