/* log.c: the request log on stderr.
 *
 * One line per generation request when it ends, so that an operator can
 * follow a request, a tenant or a slow spell with grep:
 *   specula: request id=cmpl-... tenant=3f2a9c01b7de status=200 prompt=412
 *            cached=384 generated=64 ttft_ms=21.4 duration_ms=310.2 finish=stop
 * and, every SP_LOG_SUMMARY_S seconds in which requests ended, one summary
 * of that window:
 *   specula: summary seconds=10.0 requests=12 errors=0 prompt=4800 cached=3900
 *            generated=768 generated_per_s=76.8 active=2
 * With --log-format json each is one JSON object a line ({"event": "request",
 * "id": ..., "prompt_tokens": ...}). A line is one record, a list of fields
 * (log_field: its JSON key, its text key, its value), written by one of two
 * encoders. The tenant is the first 12 hex digits of the SHA-256 of its API
 * key (the prefix cache's salt), never the key; "-" without keys.
 *
 * Each line is formatted into a buffer and written with one write(2), so
 * lines from the engine thread (requests ending) and the watcher
 * (summaries) never interleave. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sbuf.h"
#include "server/internal.h"

#define SP_LOG_SUMMARY_S 10.0

/* One field of a log record. */
typedef struct {
    const char *key;  /* in JSON */
    const char *tkey; /* in text (NULL: key) */
    enum { LF_STR, LF_INT, LF_DEC } kind; /* LF_DEC: one decimal */
    const char *str;
    long long i;
    double f;
} log_field;

#define LOG_STR(k, tk, v) {k, tk, LF_STR, (v), 0, 0}
#define LOG_INT(k, tk, v) {k, tk, LF_INT, NULL, (long long)(v), 0}
#define LOG_DEC(k, tk, v) {k, tk, LF_DEC, NULL, 0, (v)}

/* The record as one line, text ("specula: EVENT key=value ...") or JSON
 * ({"event": EVENT, "key": value, ...}), written with one write(2). */
static void log_emit(const http_server *s, const char *event, const log_field *f, int n) {
    const bool json = s->o.log_json;
    sbuf b = {0};
    if (json) {
        sb_str(&b, "{\"event\": ");
        sb_json_str(&b, event, strlen(event));
    } else {
        sb_printf(&b, "specula: %s", event);
    }
    for (int i = 0; i < n; i++) {
        if (json) {
            sb_str(&b, ", ");
            sb_json_str(&b, f[i].key, strlen(f[i].key));
            sb_str(&b, ": ");
        } else {
            sb_printf(&b, " %s=", f[i].tkey ? f[i].tkey : f[i].key);
        }
        if (f[i].kind == LF_INT) sb_printf(&b, "%lld", f[i].i);
        else if (f[i].kind == LF_DEC) sb_printf(&b, "%.1f", f[i].f);
        else if (json) sb_json_str(&b, f[i].str, strlen(f[i].str));
        else sb_str(&b, f[i].str);
    }
    sb_str(&b, json ? "}\n" : "\n");
    if (!b.oom) {
        ssize_t w = write(STDERR_FILENO, b.p, b.len);
        (void)w; /* a log that cannot be written is not worth failing a request */
    }
    sb_free(&b);
}

void log_request(http_server *s, const char *rid, const char *tenant, int status, const sreq *r,
                 double t_arrive, double t_end) {
    const sp_request_stats *st = r ? &r->st : NULL;
    const int32_t prompt = st ? st->prompt_tokens : 0, cached = st ? st->cached_tokens : 0;
    const int32_t gen = r ? r->n_tok : 0;
    const double ttft = r && r->n_tok ? r->t_first - t_arrive : -1, dur = t_end - t_arrive;
    const char *finish = st ? sp_finish_reason_str(st->finish) : "refused";
    pthread_mutex_lock(&s->mu);
    if (s->logw.t0 == 0) s->logw.t0 = t_arrive;
    s->logw.requests++;
    s->logw.errors += status != 200 || (st && st->finish == SP_FINISH_ERROR);
    s->logw.prompt += (uint64_t)prompt;
    s->logw.cached += (uint64_t)cached;
    s->logw.generated += (uint64_t)gen;
    pthread_mutex_unlock(&s->mu);
    if (s->o.no_request_log) return;
    const log_field f[] = {
        LOG_STR("id", NULL, rid),
        LOG_STR("tenant", NULL, tenant),
        LOG_INT("status", NULL, status),
        LOG_INT("prompt_tokens", "prompt", prompt),
        LOG_INT("cached_tokens", "cached", cached),
        LOG_INT("completion_tokens", "generated", gen),
        LOG_DEC("ttft_ms", NULL, ttft),
        LOG_DEC("duration_ms", NULL, dur),
        LOG_STR("finish_reason", "finish", finish),
    };
    log_emit(s, "request", f, (int)(sizeof(f) / sizeof(f[0])));
}

void log_summary(http_server *s, double now) {
    pthread_mutex_lock(&s->mu);
    if (s->logw.t0 == 0 || now - s->logw.t0 < SP_LOG_SUMMARY_S * 1e3) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    const double secs = (now - s->logw.t0) / 1e3;
    const uint64_t req = s->logw.requests, err = s->logw.errors, pr = s->logw.prompt,
                   ca = s->logw.cached, ge = s->logw.generated;
    const int64_t active = s->active;
    memset(&s->logw, 0, sizeof(s->logw)); /* the next window starts at the next request */
    pthread_mutex_unlock(&s->mu);
    if (s->o.no_request_log) return;
    const log_field f[] = {
        LOG_DEC("seconds", NULL, secs),
        LOG_INT("requests", NULL, req),
        LOG_INT("errors", NULL, err),
        LOG_INT("prompt_tokens", "prompt", pr),
        LOG_INT("cached_tokens", "cached", ca),
        LOG_INT("completion_tokens", "generated", ge),
        LOG_DEC("generated_per_s", NULL, ge / secs),
        LOG_INT("active", NULL, active),
    };
    log_emit(s, "summary", f, (int)(sizeof(f) / sizeof(f[0])));
}
