/* log.c: the request log on stderr.
 *
 * One line per generation request when it ends, so that an operator can
 * follow a request, a tenant or a slow spell with grep:
 *   specula: request id=cmpl-... tenant=3f2a9c01b7de status=200 prompt=412
 *            cached=384 generated=64 ttft_ms=21.4 duration_ms=310.2 finish=stop
 * and, every SP_LOG_SUMMARY_S seconds in which requests ended, one summary
 * of that window. With --log-format json each is one JSON object a line.
 * The tenant is the first 12 hex digits of the SHA-256 of its API key (the
 * prefix cache's salt), never the key; "-" without keys.
 *
 * Each line is formatted into a buffer and written with one write(2), so
 * lines from the engine thread (requests ending) and the watcher
 * (summaries) never interleave. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/internal.h"

#define SP_LOG_SUMMARY_S 10.0

static void put_line(const char *buf, int n) {
    if (n <= 0) return;
    if (n > 1023) n = 1023; /* snprintf's count when it cut the line */
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w; /* a log that cannot be written is not worth failing a request */
}

void log_request(sp_server *s, const char *rid, const char *tenant, int status, const sreq *r,
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
    char buf[1024];
    int n;
    if (s->o.log_json)
        n = snprintf(buf, sizeof(buf),
                     "{\"event\": \"request\", \"id\": \"%s\", \"tenant\": \"%s\", \"status\": %d, "
                     "\"prompt_tokens\": %d, \"cached_tokens\": %d, \"completion_tokens\": %d, "
                     "\"ttft_ms\": %.1f, \"duration_ms\": %.1f, \"finish_reason\": \"%s\"}\n",
                     rid, tenant, status, prompt, cached, gen, ttft, dur, finish);
    else
        n = snprintf(buf, sizeof(buf),
                     "specula: request id=%s tenant=%s status=%d prompt=%d cached=%d generated=%d "
                     "ttft_ms=%.1f duration_ms=%.1f finish=%s\n",
                     rid, tenant, status, prompt, cached, gen, ttft, dur, finish);
    put_line(buf, n);
}

void log_summary(sp_server *s, double now) {
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
    char buf[1024];
    int n;
    if (s->o.log_json)
        n = snprintf(buf, sizeof(buf),
                     "{\"event\": \"summary\", \"seconds\": %.1f, \"requests\": %llu, \"errors\": "
                     "%llu, \"prompt_tokens\": %llu, \"cached_tokens\": %llu, "
                     "\"completion_tokens\": %llu, \"generated_per_s\": %.1f, \"active\": %lld}\n",
                     secs, (unsigned long long)req, (unsigned long long)err, (unsigned long long)pr,
                     (unsigned long long)ca, (unsigned long long)ge, ge / secs, (long long)active);
    else
        n = snprintf(buf, sizeof(buf),
                     "specula: summary over %.1f s: %llu requests (%llu errors), prompt %llu tokens "
                     "(%llu cached, %.0f%%), generated %llu (%.1f/s), %lld active\n",
                     secs, (unsigned long long)req, (unsigned long long)err, (unsigned long long)pr,
                     (unsigned long long)ca, pr ? 100.0 * (double)ca / (double)pr : 0.0,
                     (unsigned long long)ge, ge / secs, (long long)active);
    put_line(buf, n);
}
