/* loadgen.c: the benchmark's HTTP client. One thread drives every
 * request through libcurl's multi interface, so arrival times and chunk
 * timestamps are taken on one clock without locks, and a slow or broken
 * server only ever costs its own requests: an error status, garbage in the
 * stream or a connection closed mid-answer is recorded on that request and
 * the run goes on.
 *
 * Timing is the client's view: TTFT is request start to the first chunk
 * carrying text, inter-token gaps are between such chunks (a chunk may carry
 * several tokens when speculation accepted a run; the server's counts come
 * from usage), end-to-end is start to [DONE]. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loadgen/loadgen.h"
#include "common.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- parsing what comes back ------------------------------------------------------ */

static int rec_text(bench_rec *r, const char *s, size_t n, double now) {
    if (n == 0) return 0;
    if (r->t_first < 0) r->t_first = now;
    r->t_last = now;
    if (dvec_push(&r->chunk_t, now)) return -1;
    if (r->text_len + n + 1 > r->text_cap) {
        size_t c = (r->text_len + n + 1) * 2;
        char *nt = realloc(r->text, c);
        if (!nt) return -1;
        r->text = nt;
        r->text_cap = c;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
    r->out_bytes += n;
    return 0;
}

static int32_t get_int(const cJSON *o, const char *k, int32_t dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (int32_t)v->valuedouble : dflt;
}

int bench_rec_event(bench_rec *r, const char *data, size_t len, double now) {
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        r->saw_done = true;
        return 1;
    }
    cJSON *o = cJSON_ParseWithLength(data, len);
    int rc = -1;
    if (!cJSON_IsObject(o)) {
        snprintf(r->err, sizeof(r->err), "not JSON in the stream: %.60s", data);
        goto done;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (e) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        snprintf(r->err, sizeof(r->err), "error in the stream: %.150s",
                 cJSON_IsString(m) ? m->valuestring : cJSON_IsString(e) ? e->valuestring : "?");
        goto done;
    }
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "choices");
    const cJSON *c0 = cJSON_IsArray(ch) ? cJSON_GetArrayItem(ch, 0) : NULL;
    if (cJSON_IsObject(c0)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c0, "text");
        if (!t) t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"),
                                                     "content");
        if (cJSON_IsString(t) && rec_text(r, t->valuestring, strlen(t->valuestring), now)) {
            snprintf(r->err, sizeof(r->err), "out of memory");
            goto done;
        }
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
        if (cJSON_IsString(f)) snprintf(r->finish, sizeof(r->finish), "%s", f->valuestring);
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
    if (cJSON_IsObject(u)) {
        r->prompt_tokens = get_int(u, "prompt_tokens", r->prompt_tokens);
        r->completion_tokens = get_int(u, "completion_tokens", r->completion_tokens);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
        if (cJSON_IsObject(d)) r->cached_tokens = get_int(d, "cached_tokens", r->cached_tokens);
    }
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "specula");
    if (cJSON_IsObject(x)) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(x, "ttft_ms");
        if (cJSON_IsNumber(v)) r->srv_ttft_ms = v->valuedouble;
        v = cJSON_GetObjectItemCaseSensitive(x, "queue_ms");
        if (cJSON_IsNumber(v)) r->srv_queue_ms = v->valuedouble;
        v = cJSON_GetObjectItemCaseSensitive(x, "cached_tokens_disk");
        if (cJSON_IsNumber(v)) r->cached_tokens_disk = (int32_t)v->valuedouble;
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(x, "spec");
        if (cJSON_IsObject(sp)) {
            r->has_spec = true;
            r->spec_steps = get_int(sp, "steps", 0);
            r->spec_drafted = get_int(sp, "drafted", 0);
            r->spec_accepted = get_int(sp, "accepted", 0);
        }
    }
    rc = 0;
done:
    cJSON_Delete(o);
    return rc;
}

double bench_prom_value(const char *text, const char *name) {
    size_t nl = strlen(name);
    bool exact = strchr(name, '{') != NULL;
    double sum = 0;
    bool found = false;
    for (const char *l = text; l && *l;) {
        const char *eol = strchr(l, '\n');
        size_t ll = eol ? (size_t)(eol - l) : strlen(l);
        if (*l != '#' && ll > nl && !memcmp(l, name, nl) &&
            (exact ? l[nl] == ' ' : (l[nl] == ' ' || l[nl] == '{'))) {
            const char *v = l + nl;
            if (*v == '{') {
                v = memchr(v, '}', ll - nl);
                if (!v) goto next;
                v++;
            }
            char *end;
            double d = strtod(v, &end);
            if (end != v) {
                sum += d;
                found = true;
            }
        }
    next:
        l = eol ? eol + 1 : NULL;
    }
    return found ? sum : NAN;
}

/* ---- HTTP ----------------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n;
    size_t max;
} membuf;

static size_t membuf_write(char *ptr, size_t size, size_t nmemb, void *user) {
    membuf *b = user;
    size_t n = size * nmemb;
    if (b->n + n > b->max) return 0; /* oversized: abort the transfer */
    char *np = realloc(b->p, b->n + n + 1);
    if (!np) return 0;
    b->p = np;
    memcpy(b->p + b->n, ptr, n);
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

static void url_join(char *out, size_t cap, const char *base, const char *path) {
    size_t n = strlen(base);
    while (n && base[n - 1] == '/') n--;
    if (n >= 3 && !memcmp(base + n - 3, "/v1", 3)) n -= 3;
    snprintf(out, cap, "%.*s%s", (int)n, base, path);
}

static struct curl_slist *auth_headers(const char *api_key, bool json) {
    struct curl_slist *h = NULL, *t;
    if (json) {
        t = curl_slist_append(h, "Content-Type: application/json");
        if (!t) return NULL;
        h = t;
    }
    if (api_key) {
        char buf[1200];
        snprintf(buf, sizeof(buf), "Authorization: Bearer %s", api_key);
        t = curl_slist_append(h, buf);
        if (!t) {
            curl_slist_free_all(h);
            return NULL;
        }
        h = t;
    }
    return h;
}

int bench_http_get(const char *base_url, const char *path, const char *api_key, double timeout_s,
                   char **body, char *err, size_t errlen) {
    *body = NULL;
    char url[2048];
    url_join(url, sizeof(url), base_url, path);
    CURL *c = curl_easy_init();
    if (!c) {
        seterr(err, errlen, "curl_easy_init failed");
        return -1;
    }
    membuf b = {.max = 64u << 20};
    struct curl_slist *h = auth_headers(api_key, false);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (h) curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    CURLcode rc = curl_easy_perform(c);
    long status = -1;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        *body = b.p ? b.p : strdup("");
        b.p = NULL;
    } else {
        seterr(err, errlen, "GET %s: %s", url, curl_easy_strerror(rc));
    }
    free(b.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return (int)status;
}

/* ---- the run ---------------------------------------------------------------------- */

typedef struct {
    CURL *h;
    bench_rec *r;
    sse_parser sse;
    struct curl_slist *hdr;
    double t0;          /* the run's clock origin */
    bool aborted;       /* the write callback stopped the transfer on purpose */
} slot;

static int on_sse(const char *data, size_t len, void *user) {
    slot *s = user;
    int rc = bench_rec_event(s->r, data, len, now_s() - s->t0);
    return rc < 0 ? -1 : 0; /* [DONE] (1) is not an error; more bytes are ignored */
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *user) {
    slot *s = user;
    size_t n = size * nmemb;
    bench_rec *r = s->r;
    if (!r->http_status) {
        long st = 0;
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &st);
        r->http_status = (int)st;
    }
    if (r->http_status != 200) { /* keep the start of an error body for the message */
        size_t room = r->errbody_len < 4096 ? 4096 - r->errbody_len : 0;
        size_t k = n < room ? n : room;
        if (k) {
            char *nb = realloc(r->errbody, r->errbody_len + k + 1);
            if (nb) {
                memcpy(nb + r->errbody_len, ptr, k);
                r->errbody = nb;
                r->errbody_len += k;
                nb[r->errbody_len] = 0;
            }
        }
        return n;
    }
    if (sse_feed(&s->sse, ptr, n) < 0) {
        if (!r->err[0]) snprintf(r->err, sizeof(r->err), "malformed event stream");
        s->aborted = true;
        return 0;
    }
    return n;
}

/* msgs: the chat endpoint's conversation (sent instead of "prompt"), or NULL */
static char *request_body(const bench_load_opts *o, const bench_item *it, const char *prompt,
                          const cJSON *msgs) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    if (o->model) cJSON_AddStringToObject(j, "model", o->model);
    if (msgs) cJSON_AddItemToObject(j, "messages", cJSON_Duplicate(msgs, 1));
    else cJSON_AddStringToObject(j, "prompt", prompt);
    cJSON_AddNumberToObject(j, "max_tokens", it->max_tokens);
    cJSON_AddNumberToObject(j, "temperature", o->temperature);
    if (o->top_p < 1) cJSON_AddNumberToObject(j, "top_p", o->top_p);
    if (o->sample_seed >= 0) cJSON_AddNumberToObject(j, "seed", (double)o->sample_seed);
    if (o->salt && it->salt && strcmp(o->salt, it->salt)) {
        /* a run's salt over per-item salts (multi-tenant: one per tenant):
         * both, so the run is cold and the tenants stay apart */
        char *both = malloc(strlen(o->salt) + strlen(it->salt) + 2);
        if (both) {
            sprintf(both, "%s/%s", o->salt, it->salt);
            cJSON_AddStringToObject(j, "cache_salt", both);
            free(both);
        }
    } else if (o->salt || it->salt) {
        cJSON_AddStringToObject(j, "cache_salt", o->salt ? o->salt : it->salt);
    }
    if (o->ignore_eos) cJSON_AddTrueToObject(j, "ignore_eos");
    cJSON_AddTrueToObject(j, "stream");
    cJSON *so = cJSON_AddObjectToObject(j, "stream_options");
    if (so) cJSON_AddTrueToObject(so, "include_usage");
    if (it->extra) { /* a file's own fields win over the command line's */
        cJSON *x = cJSON_Parse(it->extra);
        cJSON *f;
        for (f = x ? x->child : NULL; f; f = f->next) {
            cJSON *dup = cJSON_Duplicate(f, 1);
            if (!dup) continue;
            if (cJSON_GetObjectItemCaseSensitive(j, f->string))
                cJSON_ReplaceItemInObjectCaseSensitive(j, f->string, dup);
            else
                cJSON_AddItemToObject(j, f->string, dup);
        }
        cJSON_Delete(x);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static void finish_rec(slot *s, CURLcode cc, double now) {
    bench_rec *r = s->r;
    r->t_end = now;
    r->done = true;
    if (!r->http_status) {
        long st = 0;
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &st);
        r->http_status = (int)st;
    }
    if (cc == CURLE_OK && r->http_status == 200) sse_finish(&s->sse);
    if (r->err[0]) {
        /* already explained (error event, garbage) */
    } else if (cc != CURLE_OK && !s->aborted) {
        snprintf(r->err, sizeof(r->err), "%s", curl_easy_strerror(cc));
    } else if (r->http_status != 200) {
        cJSON *j = r->errbody ? cJSON_Parse(r->errbody) : NULL;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"),
                                                          "message");
        snprintf(r->err, sizeof(r->err), "HTTP %d: %.160s", r->http_status,
                 cJSON_IsString(m) ? m->valuestring : r->errbody ? r->errbody : "");
        cJSON_Delete(j);
    } else if (!r->saw_done) {
        snprintf(r->err, sizeof(r->err), "the stream ended before [DONE]");
    }
    r->ok = !r->err[0];
    free(r->errbody);
    r->errbody = NULL;
    free(r->body);
    r->body = NULL;
    sse_free(&s->sse);
    curl_slist_free_all(s->hdr);
    s->hdr = NULL;
}

static int start_rec(CURLM *m, slot *s, const bench_load_opts *o, const char *url, bench_rec *r,
                     double t0) {
    memset(s, 0, sizeof(*s));
    s->r = r;
    s->t0 = t0;
    s->h = curl_easy_init();
    s->hdr = auth_headers(o->api_key, true);
    if (!s->h || !s->hdr) {
        snprintf(r->err, sizeof(r->err), "out of memory");
        goto fail;
    }
    sse_init(&s->sse, on_sse, s);
    curl_easy_setopt(s->h, CURLOPT_URL, url);
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, s->hdr);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (o->timeout_s > 0) curl_easy_setopt(s->h, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000));
    if (curl_multi_add_handle(m, s->h) != CURLM_OK) {
        snprintf(r->err, sizeof(r->err), "curl_multi_add_handle failed");
        goto fail;
    }
    return 0;
fail:
    if (s->h) curl_easy_cleanup(s->h);
    s->h = NULL;
    curl_slist_free_all(s->hdr);
    s->hdr = NULL;
    return -1;
}

static void progress(const bench_load_opts *o, const bench_run *r, int32_t done, int32_t in_flight,
                     double t, bool final) {
    int width = 30, fill = r->n ? (int)((double)done / r->n * width) : width;
    long toks = 0;
    for (int32_t i = 0; i < r->n; i++)
        if (r->recs[i].done) toks += r->recs[i].completion_tokens > 0 ? r->recs[i].completion_tokens : 0;
    fprintf(stderr, "\r%-14.14s [", o->label ? o->label : "bench");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %d/%d done, %d in flight, %.1f s, %.1f tok/s  ", done, r->n, in_flight, t,
            t > 0 ? toks / t : 0.0);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

/* One run's state: the requests' transfers, the conversations, the /metrics
 * sampler, the counts the loop steers by. */
typedef struct {
    const bench_load_opts *o;
    const bench_workload *w;
    bench_run *run;
    slot *slots;         /* one per item */
    char **history;      /* each conversation's text so far */
    int32_t *conv_busy;  /* a turn of the conversation is in flight */
    int32_t *conv_turn;  /* the next turn of the conversation to start */
    cJSON **conv_msgs;   /* chat: each conversation's messages so far */
    CURLM *m;
    CURL *mh;            /* the /metrics request in flight, or NULL */
    membuf mbuf;         /* its answer */
    char url[2048], murl[2048];
    double t0, t_metrics;
    int32_t done_n, in_flight, next_free;
    bool started;
    double first_start, last_end;
} load_state;

/* Starts item i at time t (seconds since the run began): its prompt (a
 * conversation's history, then this turn), its body, its transfer; an item
 * that cannot start is done with an error. */
static void start_item(load_state *L, int32_t i, double t) {
    const bench_load_opts *o = L->o;
    bench_rec *r = &L->run->recs[i];
    const bench_item *it = &L->w->items[i];
    const char *prompt = it->prompt;
    char *joined = NULL;
    if (it->conv >= 0 && L->history[it->conv]) {
        size_t hl = strlen(L->history[it->conv]), pl = strlen(it->prompt);
        joined = malloc(hl + pl + 1);
        if (joined) {
            memcpy(joined, L->history[it->conv], hl);
            memcpy(joined + hl, it->prompt, pl + 1);
            prompt = joined;
        }
    }
    r->prompt_bytes = strlen(prompt);
    r->prompt = strdup(prompt);
    if (o->chat) { /* the messages: the conversation so far and this turn */
        cJSON *msgs = it->conv >= 0 ? L->conv_msgs[it->conv] : NULL;
        if (!msgs) msgs = cJSON_CreateArray();
        cJSON *um = cJSON_CreateObject();
        if (um) {
            cJSON_AddStringToObject(um, "role", "user");
            cJSON_AddStringToObject(um, "content", it->prompt);
            cJSON_AddItemToArray(msgs, um);
        }
        r->body = msgs ? request_body(o, it, prompt, msgs) : NULL;
        if (it->conv >= 0) L->conv_msgs[it->conv] = msgs;
        else cJSON_Delete(msgs);
    } else {
        r->body = request_body(o, it, prompt, NULL);
    }
    if (it->conv >= 0) { /* the history the next turn extends */
        free(L->history[it->conv]);
        L->history[it->conv] = joined ? joined : strdup(prompt);
        L->conv_busy[it->conv] = 1;
    } else {
        free(joined);
    }
    r->t_start = t;
    if (L->first_start < 0) L->first_start = t;
    if (!r->body || start_rec(L->m, &L->slots[i], o, L->url, r, L->t0)) {
        if (!r->err[0]) snprintf(r->err, sizeof(r->err), "out of memory");
        r->done = true;
        r->t_end = t;
        free(r->body);
        r->body = NULL;
        L->done_n++;
        if (it->conv >= 0) L->conv_busy[it->conv] = 0, L->conv_turn[it->conv]++;
        return;
    }
    L->in_flight++;
    L->started = true;
}

/* Every metrics_period_s while requests run: GET /metrics (the server's KV
 * gauges), one at a time. */
static void sample_metrics(load_state *L, double t) {
    const bench_load_opts *o = L->o;
    if (o->metrics_period_s > 0 && !L->mh && L->started && t >= L->t_metrics) {
        L->t_metrics = t + o->metrics_period_s;
        L->mh = curl_easy_init();
        if (L->mh) {
            free(L->mbuf.p);
            L->mbuf.p = NULL;
            L->mbuf.n = 0;
            curl_easy_setopt(L->mh, CURLOPT_URL, L->murl);
            curl_easy_setopt(L->mh, CURLOPT_WRITEFUNCTION, membuf_write);
            curl_easy_setopt(L->mh, CURLOPT_WRITEDATA, &L->mbuf);
            curl_easy_setopt(L->mh, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(L->mh, CURLOPT_TIMEOUT_MS, 5000L);
            curl_easy_setopt(L->mh, CURLOPT_PRIVATE, NULL);
            if (curl_multi_add_handle(L->m, L->mh) != CURLM_OK) {
                curl_easy_cleanup(L->mh);
                L->mh = NULL;
            }
        }
    }
}

/* The /metrics request ended: a KV sample when it answered; none again from
 * a server that is not Specula's or not ours to read. */
static void on_metrics(load_state *L, CURL *h, CURLcode cc, double tn) {
    bench_run *run = L->run;
    long st = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    if (cc == CURLE_OK && st == 200 && L->mbuf.p) {
        bench_kv_sample ks = {
            .t = tn,
            .blocks_total = bench_prom_value(L->mbuf.p, "specula_kv_blocks_capacity"),
            .blocks_free = bench_prom_value(L->mbuf.p, "specula_kv_blocks{state=\"free\"}"),
            .blocks_cached = bench_prom_value(L->mbuf.p, "specula_kv_blocks{state=\"cached\"}"),
            .blocks_in_use = bench_prom_value(L->mbuf.p, "specula_kv_blocks{state=\"in_use\"}"),
        };
        if (!isnan(ks.blocks_total)) {
            if (run->n_kv == run->cap_kv) {
                int32_t c = run->cap_kv ? run->cap_kv * 2 : 64;
                bench_kv_sample *nk = realloc(run->kv, (size_t)c * sizeof(*nk));
                if (nk) run->kv = nk, run->cap_kv = c;
            }
            if (run->n_kv < run->cap_kv) run->kv[run->n_kv++] = ks;
        }
    } else if (st == 404 || st == 401) {
        L->t_metrics = INFINITY; /* not a Specula server, or not ours to read */
    }
    curl_multi_remove_handle(L->m, h);
    curl_easy_cleanup(h);
    L->mh = NULL;
}

/* A request ended: its record finished, and for a conversation its answer
 * appended to the history the next turn extends. */
static void on_done(load_state *L, CURL *h, CURLcode cc, double tn) {
    const bench_load_opts *o = L->o;
    const bench_workload *w = L->w;
    slot *s = NULL;
    curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&s);
    curl_multi_remove_handle(L->m, h);
    finish_rec(s, cc, tn);
    curl_easy_cleanup(h);
    s->h = NULL;
    bench_rec *r = s->r;
    if (r->t_end > L->last_end) L->last_end = r->t_end;
    const bench_item *it = &w->items[r->idx];
    if (it->conv >= 0) {
        char *h2 = NULL;
        size_t hl = strlen(L->history[it->conv]);
        h2 = realloc(L->history[it->conv], hl + r->text_len + 1);
        if (h2) {
            memcpy(h2 + hl, r->text ? r->text : "", r->text_len);
            h2[hl + r->text_len] = 0;
            L->history[it->conv] = h2;
        }
        if (o->chat && L->conv_msgs[it->conv]) {
            cJSON *am = cJSON_CreateObject();
            if (am) {
                cJSON_AddStringToObject(am, "role", "assistant");
                cJSON_AddStringToObject(am, "content", r->text ? r->text : "");
                cJSON_AddItemToArray(L->conv_msgs[it->conv], am);
            }
        }
        L->conv_busy[it->conv] = 0;
        L->conv_turn[it->conv]++;
    }
    L->in_flight--;
    L->done_n++;
}

/* How long to sleep: until something arrives, the next arrival is due or a
 * tick (0.1 s at most). */
static double next_wait(const load_state *L) {
    const bench_load_opts *o = L->o;
    const bench_run *run = L->run;
    int32_t n = run->n;
    double wait = 0.1;
    if (o->rate > 0) {
        for (int32_t i = L->next_free; i < n; i++)
            if (!run->recs[i].body && !run->recs[i].done) {
                double d = run->recs[i].t_sched - (now_s() - L->t0);
                if (d < wait) wait = d < 0 ? 0 : d;
                break;
            }
    }
    if (o->metrics_period_s > 0 && !L->mh && L->started) {
        double d = L->t_metrics - (now_s() - L->t0);
        if (d < wait) wait = d < 0 ? 0 : d;
    }
    return wait;
}

/* Frees what a run held besides its records. */
static void load_free(load_state *L) {
    const bench_workload *w = L->w;
    int32_t n = w->n;
    if (L->mh) {
        curl_multi_remove_handle(L->m, L->mh);
        curl_easy_cleanup(L->mh);
    }
    free(L->mbuf.p);
    for (int32_t i = 0; L->slots && i < n; i++)
        if (L->slots[i].h) { /* only on an internal failure: nothing left running otherwise */
            curl_multi_remove_handle(L->m, L->slots[i].h);
            curl_easy_cleanup(L->slots[i].h);
            sse_free(&L->slots[i].sse);
            curl_slist_free_all(L->slots[i].hdr);
        }
    if (L->m) curl_multi_cleanup(L->m);
    for (int32_t k = 0; L->history && k < (w->n_convs ? w->n_convs : 1); k++) free(L->history[k]);
    free(L->history);
    for (int32_t k = 0; L->conv_msgs && k < (w->n_convs ? w->n_convs : 1); k++) cJSON_Delete(L->conv_msgs[k]);
    free(L->conv_msgs);
    free(L->conv_busy);
    free(L->conv_turn);
    free(L->slots);
}

int bench_load_run(const bench_load_opts *o, const bench_workload *w, bench_run *run, char *err,
                   size_t errlen) {
    memset(run, 0, sizeof(*run));
    int32_t n = w->n, rc = -1;
    const size_t n_convs = (size_t)(w->n_convs ? w->n_convs : 1);
    load_state L = {.o = o, .w = w, .run = run, .mbuf = {.max = 16u << 20}, .first_start = -1};
    url_join(L.url, sizeof(L.url), o->base_url, o->chat ? "/v1/chat/completions" : "/v1/completions");
    url_join(L.murl, sizeof(L.murl), o->base_url, "/metrics");
    run->recs = calloc((size_t)(n ? n : 1), sizeof(bench_rec));
    L.slots = calloc((size_t)(n ? n : 1), sizeof(slot));
    L.history = calloc(n_convs, sizeof(char *));
    L.conv_busy = calloc(n_convs, sizeof(int32_t));
    L.conv_turn = calloc(n_convs, sizeof(int32_t));
    L.conv_msgs = o->chat ? calloc(n_convs, sizeof(cJSON *)) : NULL;
    L.m = curl_multi_init();
    if (!run->recs || !L.slots || !L.history || !L.conv_busy || !L.conv_turn || !L.m ||
        (o->chat && !L.conv_msgs)) {
        seterr(err, errlen, "out of memory");
        goto done;
    }
    run->n = n;
    /* Poisson arrivals: exponential gaps drawn from the seed */
    uint64_t rs = o->seed ^ 0xa0761d6478bd642full;
    double t_arr = 0;
    for (int32_t i = 0; i < n; i++) {
        bench_rec *r = &run->recs[i];
        r->idx = i;
        r->conv = w->items[i].conv;
        r->turn = w->items[i].turn;
        r->t_first = r->t_last = -1;
        r->prompt_tokens = r->completion_tokens = r->cached_tokens = -1;
        r->srv_ttft_ms = r->srv_queue_ms = -1;
        if (o->rate > 0) {
            t_arr += -log(1.0 - bench_rng_uniform(&rs)) / o->rate;
            r->t_sched = t_arr;
        }
    }
    L.t0 = now_s();
    double t_prog = 0;
    int32_t cap = o->concurrency > 0 ? o->concurrency : (o->rate > 0 ? n : 1);
    while (L.done_n < n) {
        double t = now_s() - L.t0;
        /* start what may start: in item order, a turn only after its conversation's previous */
        for (int32_t i = L.next_free; i < n && L.in_flight < cap; i++) {
            bench_rec *r = &run->recs[i];
            if (r->body || r->done) {
                if (i == L.next_free) L.next_free++;
                continue;
            }
            if (o->rate > 0 && r->t_sched > t) break; /* items arrive in order */
            const bench_item *it = &w->items[i];
            if (it->conv >= 0 && (L.conv_busy[it->conv] || L.conv_turn[it->conv] != it->turn)) continue;
            start_item(&L, i, t);
        }
        sample_metrics(&L, t);
        int running = 0;
        curl_multi_perform(L.m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(L.m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            CURL *h = msg->easy_handle;
            CURLcode cc = msg->data.result;
            double tn = now_s() - L.t0;
            if (h == L.mh) on_metrics(&L, h, cc, tn);
            else on_done(&L, h, cc, tn);
        }
        if (o->progress && (t >= t_prog || L.done_n == n)) {
            progress(o, run, L.done_n, L.in_flight, t, L.done_n == n);
            t_prog = t + 0.25;
        }
        if (L.done_n == n) break;
        curl_multi_poll(L.m, NULL, 0, (int)(next_wait(&L) * 1000), NULL);
    }
    run->duration_s = L.first_start >= 0 ? L.last_end - L.first_start : 0;
    rc = 0;
done:
    load_free(&L);
    if (rc) bench_run_free(run);
    return rc;
}

void bench_run_free(bench_run *r) {
    for (int32_t i = 0; r->recs && i < r->n; i++) {
        dvec_free(&r->recs[i].chunk_t);
        free(r->recs[i].body);
        free(r->recs[i].text);
        free(r->recs[i].prompt);
        free(r->recs[i].errbody);
    }
    free(r->recs);
    free(r->kv);
    memset(r, 0, sizeof(*r));
}
