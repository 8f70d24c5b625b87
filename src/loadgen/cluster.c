/* cluster.c: measuring several `specula serve` replicas behind one
 * router (--metrics-url): the work counters of every replica's /metrics,
 * summed into the report (prompt positions computed, cached tokens,
 * H_tokens), and each replica's share of the requests with the imbalance
 * (largest share over the mean). The router itself is measured like any
 * server through --base-url. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/loadgen.h"
#include "common.h"

int bench_metrics_urls(char *s, const char **urls, int cap, char *err, size_t errlen) {
    int n = 0;
    for (char *t = strtok(s, ","); t; t = strtok(NULL, ",")) {
        if (strncmp(t, "http://", 7) && strncmp(t, "https://", 8)) {
            seterr(err, errlen, "--metrics-url: '%s' does not start with http:// or https://", t);
            return -1;
        }
        if (n == cap) {
            seterr(err, errlen, "--metrics-url: at most %d URLs", cap);
            return -1;
        }
        urls[n++] = t;
    }
    if (!n) seterr(err, errlen, "--metrics-url: no URL");
    return n ? n : -1;
}

int bench_cluster_read(const char *const *urls, int n, const char *key, double *sum,
                       double *per_req) {
    int rc = 0;
    for (int i = 0; i < BENCH_N_COUNTERS; i++) sum[i] = 0;
    for (int u = 0; u < n; u++) {
        char *body = NULL, e[256];
        double one[BENCH_N_COUNTERS];
        int st = bench_http_get(urls[u], "/metrics", key, 10, &body, e, sizeof(e));
        if (st == 200) bench_counters_read(body, one);
        else {
            for (int i = 0; i < BENCH_N_COUNTERS; i++) one[i] = NAN;
            rc = -1;
        }
        free(body);
        /* a replica that cannot be read makes the sums unknown, not smaller */
        for (int i = 0; i < BENCH_N_COUNTERS; i++) sum[i] += one[i];
        per_req[u] = one[0]; /* specula_requests_finished_total */
    }
    return rc;
}

void bench_result_add_replicas(bench_result *r, int n, const double *before, const double *after) {
    if (n > BENCH_MAX_REPLICAS) n = BENCH_MAX_REPLICAS;
    r->n_replicas = n;
    for (int i = 0; i < n; i++) r->replica_requests[i] += after[i] - before[i];
}

double bench_imbalance(const double *v, int n) {
    double sum = 0, max = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(v[i])) return NAN;
        sum += v[i];
        if (v[i] > max) max = v[i];
    }
    return n > 0 && sum > 0 ? max / (sum / n) : NAN;
}
