/* bench_util.h: helpers shared by bench_engine and bench_spec: fatal errors,
 * checked allocation, a seeded token generator, option parsing and a runner
 * that drives a set of requests through the public engine API. */
#ifndef SPECULA_BENCH_UTIL_H
#define SPECULA_BENCH_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "specula.h"

/* ---- helpers ---------------------------------------------------------------- */

extern const char *bench_prog; /* the program's name, set in main: die's prefix */

/* "PROG: what: err" on stderr (": err" only where err is non-empty); exit 1 */
void die(const char *what, const char *err) __attribute__((noreturn));
void *xmalloc(size_t n);             /* malloc that dies when out of memory */
void *xcalloc(size_t n, size_t sz);  /* calloc that dies when out of memory */

uint64_t splitmix(uint64_t *s);      /* splitmix64: advances *s */
extern uint64_t rng_state;           /* the benchmark's generator (--seed), 0x5eed */
/* a random non-special token id, 3 .. n_vocab-1, drawn from *s */
sp_token rand_tok_from(uint64_t *s, int32_t n_vocab);
sp_token rand_tok(int32_t n_vocab);  /* rand_tok_from(&rng_state, n_vocab) */

/* parses "a,b,c" into up to cap positive ints (<= 1000000); returns the count or -1 */
int parse_ints(const char *s, int *out, int cap);
int32_t round_up(int32_t x, int32_t to);
double median(const double *v, int n); /* NAN for n <= 0 */

/* ---- running a set of requests ------------------------------------------------ */

typedef struct {
    sp_token *toks;
    int32_t n;   /* prompt tokens */
    int32_t gen; /* max_tokens */
} prompt_t;

typedef struct run run;

typedef struct {
    run *r;
    int idx;
    int32_t n_gen;            /* tokens received */
    double t_submit, t_first, t_last;
    double *ev_t;             /* event times, [cap_ev] (optional: cap_ev 0) */
    int32_t *ev_n;            /* tokens in each event */
    int32_t n_ev, cap_ev;
    sp_token *out;            /* output tokens, [cap_out] (optional: cap_out 0) */
    int32_t n_out, cap_out;
    sp_request_stats st;
    bool done;
    char error[256];
} req;

struct run {
    sp_engine *e;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req *q;
    int n, next, n_done;
    bool failed;
    char err[512];
    const prompt_t *prompts;
    sp_request_params tmpl;
};

/* Runs requests [0, n) (prompts[i]: tokens and max_tokens; the rest from
 * tmpl) with at most conc in flight, the next submitted from the finishing
 * request's callback; returns the wall time from the first submit to the
 * last finish. q must hold n zeroed entries (ev_* and out may be preset).
 * Exits on any error. */
double run_requests(sp_engine *e, const prompt_t *prompts, int n, int conc,
                    const sp_request_params *tmpl, req *q);

/* greedy sampling, ignore_eos */
sp_request_params base_params(void);
sp_engine *make_engine(const sp_model *m, sp_engine_params p); /* dies on failure */

/* One short request, spec off, whose first token no benchmark prompt uses
 * (n_vocab-1), so that its blocks can never be shared: faults in the weights
 * and scratch. Its other tokens are drawn from *rng. */
void warmup(sp_engine *e, int32_t n_vocab, uint64_t *rng);

#endif
