/* plot.c: the SVG plots of a Markdown report, drawn by hand: latency CDFs,
 * cold vs warm TTFT, throughput against concurrency. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/loadgen.h"
#include "common.h"

/* ---- SVG plots ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const double *x, *y;
    size_t n;
} series;

static const char *const COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                     "#9467bd", "#8c564b", "#e377c2", "#17becf"};

static double nice_step(double range) {
    double raw = range / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* An axis that fits the data: [lo, hi] widened to whole nice steps (not
 * stretched to 0); a single value gets a small range around it. */
static void fit_axis(double lo, double hi, double *a0, double *a1, double *step) {
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad, hi += pad;
    }
    double st = nice_step(hi - lo);
    *a0 = floor(lo / st) * st;
    *a1 = ceil(hi / st) * st;
    if (*a1 <= *a0) *a1 = *a0 + st;
    *step = st;
}

enum { PLOT_CDF, PLOT_LINE };

/* A plot: CDFs as step functions (each sample a step up, with a marker on
 * it, so a single sample is a visible step), or lines with markers. Axes fit
 * the data (a CDF's y is [0, 1]); the legend sits below the plot area, never
 * over the data. Elements carry classes (series, sample, xtick, ytick,
 * legend) so tests can read the picture. */
static int svg_plot(const char *path, const char *title, const char *xlab, const char *ylab,
                    const series *s, int ns, int kind) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (size_t k = 0; k < s[i].n; k++) {
            if (isnan(s[i].x[k]) || isnan(s[i].y[k])) continue;
            xmin = fmin(xmin, s[i].x[k]), xmax = fmax(xmax, s[i].x[k]);
            ymin = fmin(ymin, s[i].y[k]), ymax = fmax(ymax, s[i].y[k]);
        }
    if (!isfinite(xmin)) return 0; /* nothing to draw */
    double x0, x1, xs, y0, y1, ys;
    fit_axis(xmin, xmax, &x0, &x1, &xs);
    if (kind == PLOT_CDF) y0 = 0, y1 = 1, ys = 0.2;
    else fit_axis(ymin, ymax, &y0, &y1, &ys);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const int W = 640, L = 70, R = 20, T = 40, PH = 310;
    const int H = T + PH + 56 + 16 * ns + 8;
    double pw = W - L - R, ph = PH;
#define PX(v) (L + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (T + ph - ((v) - y0) / (y1 - y0) * ph)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">", W / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    for (int i = 0; x0 + i * xs <= x1 + xs / 2; i++) {
        double v = x0 + i * xs;
        if (fabs(v) < xs * 1e-9) v = 0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                PX(v), T, PX(v), T + ph, PX(v), T + ph + 16, v);
    }
    for (int i = 0; y0 + i * ys <= y1 + ys / 2; i++) {
        double v = y0 + i * ys;
        if (fabs(v) < ys * 1e-9) v = 0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, PY(v), L + pw, PY(v), L - 6, PY(v) + 4, v);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n",
            L, T, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", L + pw / 2, T + ph + 36);
    xml_text(f, xlab);
    fprintf(f, "</text>\n<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\">",
            T + ph / 2);
    xml_text(f, ylab);
    fprintf(f, "</text>\n");
    for (int i = 0; i < ns; i++) {
        const char *col = COLORS[i % 8];
        fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                   "points=\"", col);
        /* ~600 points are as many as the 550-pixel plot can show; keeps files small */
        size_t stride = s[i].n > 600 ? s[i].n / 600 : 1;
        double prev_y = 0;
        bool first = true;
        for (size_t k = 0; k < s[i].n; k++) {
            if (!(k % stride == 0 || k + 1 == s[i].n) || isnan(s[i].x[k]) || isnan(s[i].y[k]))
                continue;
            if (kind == PLOT_CDF) /* flat to this sample, then up by its share */
                fprintf(f, "%.1f,%.1f ", PX(s[i].x[k]), PY(first ? 0 : prev_y));
            fprintf(f, "%.1f,%.1f ", PX(s[i].x[k]), PY(s[i].y[k]));
            prev_y = s[i].y[k];
            first = false;
        }
        fprintf(f, "\"/>\n");
        size_t mstride = s[i].n > 300 ? s[i].n / 300 : 1;
        for (size_t k = 0; k < s[i].n; k++)
            if ((k % mstride == 0 || k + 1 == s[i].n) && !isnan(s[i].x[k]) && !isnan(s[i].y[k]))
                fprintf(f, "<circle class=\"sample\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"/>\n",
                        PX(s[i].x[k]), PY(s[i].y[k]), kind == PLOT_CDF ? "2.5" : "3.5", col);
        double ly = T + ph + 56 + 16 * i, lx = L;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" fill=\"%s\"/>"
                   "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">", lx, ly - 4, col, lx + 18, ly);
        xml_text(f, s[i].name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    return fclose(f) ? -1 : 0;
}

/* CDF series over sorted samples (bench_result_finish sorted them). */
static int cdf_series(series *s, const char *name, const dvec *d, double **ybuf) {
    *ybuf = malloc((d->n ? d->n : 1) * sizeof(double));
    if (!*ybuf) return -1;
    for (size_t k = 0; k < d->n; k++) (*ybuf)[k] = (double)(k + 1) / (double)d->n;
    *s = (series){name, d->v, *ybuf, d->n};
    return 0;
}

static int plot_cdf(const char *path, const char *title, const char *xlab, bench_result *res,
                    int n_res, size_t field_off, const char *suffix_b) {
    series s[16];
    double *y[16] = {0};
    char names[16][96];
    int ns = 0, rc = 0;
    for (int j = 0; j < n_res && ns < 16; j++) {
        const dvec *d = (const dvec *)((const char *)&res[j] + field_off);
        snprintf(names[ns], sizeof(names[ns]), "%s%s", res[j].label, suffix_b ? suffix_b : "");
        if (cdf_series(&s[ns], names[ns], d, &y[ns])) {
            rc = -1;
            break;
        }
        ns++;
    }
    if (!rc) rc = svg_plot(path, title, xlab, "fraction of samples", s, ns, PLOT_CDF);
    for (int i = 0; i < ns; i++) free(y[i]);
    return rc;
}

static int plot_cold_warm(const char *path, bench_result *res, int n_res) {
    series s[16];
    double *y[16] = {0};
    char names[16][96];
    int ns = 0, rc = 0;
    for (int j = 0; j < n_res && ns < 15; j++) {
        const dvec *d[2] = {&res[j].ttft_cold, &res[j].ttft_warm};
        for (int k = 0; k < 2; k++) {
            if (!d[k]->n) continue;
            snprintf(names[ns], sizeof(names[ns]), "%s %s (n=%zu)", res[j].label, k ? "warm" : "cold",
                     d[k]->n);
            if (cdf_series(&s[ns], names[ns], d[k], &y[ns])) {
                rc = -1;
                goto done;
            }
            ns++;
        }
    }
    rc = svg_plot(path, "TTFT: cold (H_tokens < 0.1) vs warm", "TTFT (ms)",
                  "fraction of requests", s, ns, PLOT_CDF);
done:
    for (int i = 0; i < ns; i++) free(y[i]);
    return rc;
}

/* Throughput against concurrency, one line per configuration (results of a
 * sweep share their label's part before " c=" ). */
static int plot_throughput(const char *path, bench_result *res, int n_res) {
    series s[8];
    double xs[8][64], ys[8][64];
    char names[8][64];
    int ns = 0;
    for (int j = 0; j < n_res; j++) {
        char base[64];
        snprintf(base, sizeof(base), "%s", res[j].label);
        char *c = strstr(base, " c=");
        if (c) *c = 0;
        int k;
        for (k = 0; k < ns && strcmp(names[k], base); k++) {}
        if (k == ns) {
            if (ns == 8) continue;
            snprintf(names[ns], sizeof(names[ns]), "%s", base);
            s[ns] = (series){names[ns], xs[ns], ys[ns], 0};
            ns++;
        }
        if (s[k].n < 64) {
            xs[k][s[k].n] = res[j].concurrency;
            ys[k][s[k].n] = res[j].out_tok_s;
            s[k].n++;
        }
    }
    return svg_plot(path, "Output throughput vs concurrency", "concurrency (requests in flight)",
                    "output tokens/s", s, ns, PLOT_LINE);
}

/* The plots of a Markdown report (contract in loadgen.h). */
int bench_plots(const char *stem, const char *base, bench_result *res, int n_res,
                char names[BENCH_MAX_PLOTS][BENCH_PLOT_NAME]) {
    struct {
        const char *suffix, *title, *xlab;
        size_t off;
    } cdfs[] = {
        {"ttft", "TTFT CDF", "time to first token (ms)", offsetof(bench_result, ttft)},
        {"tpot", "TPOT CDF", "time per output token (ms)", offsetof(bench_result, tpot)},
        {"itl", "ITL CDF", "inter-token (inter-chunk) latency (ms)", offsetof(bench_result, itl)},
        {"e2e", "E2E latency CDF", "end-to-end latency (ms)", offsetof(bench_result, e2e)},
    };
    int n_plots = 0;
    for (size_t i = 0; i < sizeof(cdfs) / sizeof(cdfs[0]); i++) {
        char p[BENCH_PLOT_NAME];
        snprintf(p, sizeof(p), "%s-cdf-%s.svg", stem, cdfs[i].suffix);
        if (plot_cdf(p, cdfs[i].title, cdfs[i].xlab, res, n_res, cdfs[i].off, NULL) == 0)
            snprintf(names[n_plots++], BENCH_PLOT_NAME, "%s-cdf-%s.svg", base, cdfs[i].suffix);
    }
    bool any_warm = false;
    for (int j = 0; j < n_res; j++) any_warm |= res[j].ttft_warm.n > 0 || res[j].ttft_cold.n > 0;
    if (any_warm) {
        char p[BENCH_PLOT_NAME];
        snprintf(p, sizeof(p), "%s-ttft-cold-warm.svg", stem);
        if (plot_cold_warm(p, res, n_res) == 0)
            snprintf(names[n_plots++], BENCH_PLOT_NAME, "%s-ttft-cold-warm.svg", base);
    }
    int distinct_c = 0;
    for (int j = 0; j < n_res; j++) {
        bool seen = false;
        for (int k = 0; k < j; k++) seen |= res[k].concurrency == res[j].concurrency;
        distinct_c += !seen;
    }
    if (distinct_c >= 2) {
        char p[BENCH_PLOT_NAME];
        snprintf(p, sizeof(p), "%s-throughput.svg", stem);
        if (plot_throughput(p, res, n_res) == 0)
            snprintf(names[n_plots++], BENCH_PLOT_NAME, "%s-throughput.svg", base);
    }
    return n_plots;
}
