/* metrics.h: the server's Prometheus counters and latency histograms. */
#ifndef SP_SERVER_METRICS_H
#define SP_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "sbuf.h"
#include "specula.h"

#define MET_MAX_BUCKETS 16
typedef struct {
    int n;                       /* finite bucket bounds (seconds) */
    const double *le;
    uint64_t count[MET_MAX_BUCKETS + 1]; /* per bucket (not cumulative); [n]: +Inf */
    double sum;
    uint64_t total;
} met_hist;

#define MET_MAX_CODES 48
typedef struct {
    pthread_mutex_t mu;
    struct {
        const char *endpoint;
        int code;
        uint64_t n;
    } req[MET_MAX_CODES];
    int n_req;
    uint64_t finished[5];        /* by sp_finish_reason */
    uint64_t prompt_tokens, completion_tokens, cached_tokens;
    uint64_t disconnects;        /* requests cancelled because their client went away */
    met_hist ttft, tpot, itl, e2e, queue;
} metrics;

void metrics_init(metrics *m);
void metrics_destroy(metrics *m);
/* endpoint must be a string literal (kept by pointer). */
void metrics_request(metrics *m, const char *endpoint, int code);
void metrics_observe(metrics *m, met_hist *h, double seconds);
/* A finished generation: its tokens, finish reason and TTFT / TPOT / E2E. */
void metrics_finished(metrics *m, const sp_request_stats *st, double ttft_s, double tpot_s,
                      double e2e_s);
void metrics_disconnect(metrics *m);
/* The Prometheus text exposition: the server's metrics, then the engine's
 * (e may be NULL while loading), with gauges for requests in flight. */
void metrics_render(metrics *m, sp_engine *e, int64_t active, sbuf *out);

#endif
