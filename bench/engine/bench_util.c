/* bench_util.c: helpers shared by bench_engine and bench_spec. */
#include "bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- helpers ---------------------------------------------------------------- */

const char *bench_prog = "bench";

void die(const char *what, const char *err) {
    fprintf(stderr, "%s: %s%s%s\n", bench_prog, what, err && err[0] ? ": " : "", err ? err : "");
    exit(1);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory", NULL);
    return p;
}

void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) die("out of memory", NULL);
    return p;
}

uint64_t splitmix(uint64_t *s) { return splitmix64(s); }

uint64_t rng_state = 0x5eed;

sp_token rand_tok_from(uint64_t *s, int32_t n_vocab) {
    return 3 + (sp_token)(splitmix(s) % (uint64_t)(n_vocab - 3));
}
sp_token rand_tok(int32_t n_vocab) { return rand_tok_from(&rng_state, n_vocab); }

int parse_ints(const char *s, int *out, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0 || v > 1000000 || n == cap) return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

int32_t round_up(int32_t x, int32_t to) { return (x + to - 1) / to * to; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
double median(const double *v, int n) {
    if (n <= 0) return NAN;
    double *t = xmalloc(sizeof(double) * (size_t)n);
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

/* ---- running a set of requests ------------------------------------------------ */

static void submit_one(run *r, int i);

static void on_event(const sp_event *ev, void *user) {
    req *q = user;
    if (ev->n_tokens > 0) {
        double now = time_s();
        if (q->n_gen == 0) q->t_first = now;
        q->t_last = now;
        q->n_gen += ev->n_tokens;
        if (q->n_ev < q->cap_ev) {
            q->ev_t[q->n_ev] = now;
            q->ev_n[q->n_ev++] = ev->n_tokens;
        }
    }
    for (int32_t i = 0; i < ev->n_tokens && q->n_out < q->cap_out; i++) q->out[q->n_out++] = ev->tokens[i];
    if (!ev->finished) return;
    run *r = q->r;
    int next = -1;
    pthread_mutex_lock(&r->mu);
    q->st = *ev->stats;
    if (ev->error || ev->stats->finish == SP_FINISH_ERROR ||
        ev->stats->finish == SP_FINISH_CANCELLED) {
        snprintf(q->error, sizeof(q->error), "%s",
                 ev->error ? ev->error : sp_finish_reason_str(ev->stats->finish));
        if (!r->failed) {
            r->failed = true;
            snprintf(r->err, sizeof(r->err), "request %d: %s", q->idx, q->error);
        }
    }
    q->done = true;
    r->n_done++;
    if (!r->failed && r->next < r->n) next = r->next++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (next >= 0) submit_one(r, next);
}

static void submit_one(run *r, int i) {
    sp_request_params rp = r->tmpl;
    rp.tokens = r->prompts[i].toks;
    rp.n_tokens = r->prompts[i].n;
    rp.max_tokens = r->prompts[i].gen;
    rp.on_event = on_event;
    rp.user = &r->q[i];
    char err[256];
    r->q[i].t_submit = time_s();
    if (sp_engine_submit(r->e, &rp, err, sizeof(err)) < 0) {
        pthread_mutex_lock(&r->mu);
        if (!r->failed) {
            r->failed = true;
            snprintf(r->err, sizeof(r->err), "submitting request %d: %s", i, err);
        }
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

double run_requests(sp_engine *e, const prompt_t *prompts, int n, int conc,
                    const sp_request_params *tmpl, req *q) {
    run r;
    memset(&r, 0, sizeof(r));
    r.e = e;
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    r.q = q;
    r.n = n;
    r.prompts = prompts;
    r.tmpl = *tmpl;
    for (int i = 0; i < n; i++) {
        q[i].r = &r;
        q[i].idx = i;
    }
    if (conc > n) conc = n;
    pthread_mutex_lock(&r.mu);
    r.next = conc;
    pthread_mutex_unlock(&r.mu);
    double t0 = time_s();
    for (int i = 0; i < conc; i++) submit_one(&r, i);
    pthread_mutex_lock(&r.mu);
    while (r.n_done < n && !r.failed) pthread_cond_wait(&r.cv, &r.mu);
    bool failed = r.failed;
    pthread_mutex_unlock(&r.mu);
    double wall = time_s() - t0;
    if (failed) die("engine request failed", r.err);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return wall;
}

sp_request_params base_params(void) {
    sp_request_params rp = sp_request_default_params();
    rp.sampling = sp_sampler_greedy_params();
    rp.ignore_eos = true;
    rp.logprobs = -1; /* benchmarks time decoding, not a per-token softmax */
    return rp;
}

sp_engine *make_engine(const sp_model *m, sp_engine_params p) {
    char err[512];
    sp_engine *e = sp_engine_create(m, p, err, sizeof(err));
    if (!e) die("creating the engine", err);
    return e;
}

void warmup(sp_engine *e, int32_t n_vocab, uint64_t *rng) {
    sp_token t[24];
    t[0] = n_vocab - 1;
    for (int i = 1; i < 24; i++) t[i] = rand_tok_from(rng, n_vocab);
    prompt_t p = {t, 24, 2};
    req q;
    memset(&q, 0, sizeof(q));
    sp_request_params rp = base_params();
    rp.spec = SP_SPEC_OFF;
    run_requests(e, &p, 1, 1, &rp, &q);
}
