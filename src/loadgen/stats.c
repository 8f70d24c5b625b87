/* stats.c: percentiles and summaries for the benchmark reports. */
#include <math.h>
#include <stdlib.h>

#include "loadgen/loadgen.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Assumes v sorted. The h = (n-1) q rule ("linear", numpy's default and
 * what vLLM's benchmark reports), so p50 of an even count is the midpoint. */
static double quantile_sorted(const double *v, size_t n, double q) {
    if (n == 0) return NAN;
    if (q <= 0) return v[0];
    if (q >= 1) return v[n - 1];
    double h = (double)(n - 1) * q;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n) return v[n - 1];
    return v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]);
}

double bstat_quantile(double *v, size_t n, double q) {
    if (n == 0) return NAN;
    qsort(v, n, sizeof(double), cmp_double);
    return quantile_sorted(v, n, q);
}

bstat_summary bstat_summarize(double *v, size_t n) {
    bstat_summary s = {.n = n, .mean = NAN, .sd = NAN, .min = NAN, .p50 = NAN, .p90 = NAN,
                       .p99 = NAN, .max = NAN};
    if (n == 0) return s;
    qsort(v, n, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    s.mean = sum / (double)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
    s.min = v[0];
    s.max = v[n - 1];
    s.p50 = quantile_sorted(v, n, 0.50);
    s.p90 = quantile_sorted(v, n, 0.90);
    s.p99 = quantile_sorted(v, n, 0.99);
    return s;
}

int dvec_push(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t c = d->cap ? d->cap * 2 : 16;
        double *nv = realloc(d->v, c * sizeof(double));
        if (!nv) return -1;
        d->v = nv;
        d->cap = c;
    }
    d->v[d->n++] = x;
    return 0;
}

void dvec_free(dvec *d) {
    free(d->v);
    d->v = NULL;
    d->n = d->cap = 0;
}
