/* qeval_plot.c - the SVG of qeval --plot (qeval_plot.h). */
#include "qeval_plot.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 720
#define H 440
#define LEFT 80           /* room for the y tick labels */
#define RIGHT 40
#define TOP 44            /* the title */
#define BOTTOM 56         /* x tick labels and the axis title */
#define CHAR_W 7          /* a generous width of one 12 px sans-serif character */

struct axes {
    double x0, x1;        /* bits per weight at the left and right edges */
    int d0, d1;           /* decades of KL at the bottom and top edges: 10^d0 .. 10^d1 */
};

/* Text as XML character data: escaped, printable ASCII only. */
static void put_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else fputc(c >= 0x20 && c < 0x7f ? c : '?', f);
    }
}

/* Whole bits per weight around the points, and whole decades of KL around
 * the positive ones (at least two decades). */
static struct axes choose_axes(const struct qe_point *pts, int n)
{
    double xmin = INFINITY, xmax = -INFINITY, kmin = INFINITY, kmax = -INFINITY;
    for (int i = 0; i < n; i++) {
        xmin = fmin(xmin, pts[i].bpw);
        xmax = fmax(xmax, pts[i].bpw);
        if (pts[i].kl > 0) {
            kmin = fmin(kmin, pts[i].kl);
            kmax = fmax(kmax, pts[i].kl);
        }
    }
    struct axes a = {floor(xmin) - 1, ceil(xmax) + 1, -6, -1};
    if (kmin <= kmax) {
        a.d0 = (int)floor(log10(kmin));
        a.d1 = (int)ceil(log10(kmax));
        /* KL 0 sits on the bottom edge: a decade below the smallest positive */
        for (int i = 0; i < n; i++)
            if (pts[i].kl <= 0) {
                a.d0--;
                break;
            }
        if (a.d1 - a.d0 < 2)
            a.d1 = a.d0 + 2;
    }
    return a;
}

static double px(const struct axes *a, double bpw) { return LEFT + (bpw - a->x0) / (a->x1 - a->x0) * (W - LEFT - RIGHT); }

static double py(const struct axes *a, double kl)
{
    double d = kl > 0 ? fmax(log10(kl), a->d0) : a->d0;
    return H - BOTTOM - (d - a->d0) / (a->d1 - a->d0) * (H - TOP - BOTTOM);
}

static void draw_axes(FILE *f, const struct axes *a)
{
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", LEFT, TOP,
            W - LEFT - RIGHT, H - TOP - BOTTOM);
    for (double b = a->x0; b <= a->x1 + 1e-9; b += 1) {
        double x = px(a, b);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, TOP, x, H - BOTTOM);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, H - BOTTOM + 18, b);
    }
    for (int d = a->d0; d <= a->d1; d++) {
        double y = py(a, pow(10, d));
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, y, W - RIGHT, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n", LEFT - 6, y + 4, d);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">bits per weight</text>\n", (LEFT + W - RIGHT) / 2,
            H - 14);
    fprintf(f, "<text x=\"18\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 18 %d)\">"
               "mean KL(reference || model), log scale</text>\n", (TOP + H - BOTTOM) / 2, (TOP + H - BOTTOM) / 2);
}

static void draw_point(FILE *f, const struct axes *a, const struct qe_point *p, int i)
{
    double x = px(a, p->bpw), y = py(a, p->kl);
    char kl[32];
    if (p->kl > 0)
        snprintf(kl, sizeof kl, " (%.3g)", p->kl);
    else
        snprintf(kl, sizeof kl, " (KL 0)");
    /* right of the point, or left of it where the label would leave the
     * picture (the points near the highest bits per weight) */
    double width = (double)(strlen(p->label) + strlen(kl)) * CHAR_W;
    bool left = x + 7 + width > W - 4;
    fprintf(f, "<g class=\"point\"><circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#1f5fa8\"/>", x, y);
    /* labels alternate above and below, so neighbours overlap less */
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\"%s>", left ? x - 7 : x + 7, y + (i % 2 ? 15 : -7),
            left ? " text-anchor=\"end\"" : "");
    put_text(f, p->label);
    fputs(kl, f);
    fputs("</text></g>\n", f);
}

char *qe_plot_svg(const struct qe_point *pts, int n, const char *title, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    struct axes a = choose_axes(pts, n);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
    put_text(f, title);
    fputs("</text>\n", f);
    draw_axes(f, &a);
    for (int i = 0; i < n; i++)
        draw_point(f, &a, &pts[i], i);
    fputs("</svg>\n", f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
