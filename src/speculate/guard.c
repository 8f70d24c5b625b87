/* guard.c: the guard on speculation's realized throughput (planner.h):
 * per batch shape, phases of steps with speculation on and off, and the
 * choice of the state whose measured tokens per millisecond is higher. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "speculate/planner.h"

static int32_t bucket(int32_t n_dec) {
    int32_t b = 0;
    while (n_dec > 1 && b < SP_GUARD_BUCKETS - 1) {
        n_dec >>= 1;
        b++;
    }
    return b;
}

void spec_guard_init(spec_guard *g) {
    memset(g, 0, sizeof(*g));
    for (int32_t b = 0; b < SP_GUARD_BUCKETS; b++) {
        spec_guard_shape *s = &g->shape[b];
        s->on = true;
        s->len = SP_GUARD_EXPLOIT_MIN;
        s->exploit = SP_GUARD_EXPLOIT_MIN;
    }
}

bool spec_guard_on(const spec_guard *g, int32_t n_dec) {
    return n_dec > 0 && g->shape[bucket(n_dec)].on;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Tokens per ms of the phase, each step's ms capped at twice the median. */
static double phase_rate(const spec_guard_shape *s) {
    float sorted[SP_GUARD_EXPLOIT_MAX];
    memcpy(sorted, s->ms, (size_t)s->steps * sizeof(float));
    qsort(sorted, (size_t)s->steps, sizeof(float), cmp_float);
    const double cap = 2.0 * sorted[s->steps / 2];
    double ms = 0;
    for (int32_t i = 0; i < s->steps; i++) ms += SP_MIN((double)s->ms[i], cap);
    return s->tok / ms;
}

/* The phase just ended: its rate into its state's estimate, then the next
 * phase. */
static void next_phase(spec_guard *g, spec_guard_shape *s) {
    const double r = phase_rate(s);
    double *est = &s->est[s->on];
    *est = *est > 0 ? 0.5 * (*est + r) : r;
    s->tok = 0;
    s->steps = 0;
    if (!s->exploring) { /* after exploiting, measure the other state */
        s->on = !s->on;
        s->exploring = true;
        s->len = SP_GUARD_EXPLORE;
        return;
    }
    const bool was = !s->on; /* the state exploited before this exploration */
    const bool better = s->est[1] > s->est[0] * (1.0 + SP_GUARD_MARGIN);
    if (better == was) {
        s->exploit = SP_MIN(2 * s->exploit, SP_GUARD_EXPLOIT_MAX);
    } else {
        s->exploit = SP_GUARD_EXPLOIT_MIN;
        g->switches++;
    }
    s->on = better;
    s->exploring = false;
    s->len = s->exploit;
}

void spec_guard_observe(spec_guard *g, int32_t n_dec, bool measured, int32_t tokens,
                           double ms) {
    if (n_dec <= 0) return;
    spec_guard_shape *s = &g->shape[bucket(n_dec)];
    if (!s->on) g->off_steps++;
    if (!measured || !(ms > 0) || tokens <= 0) return;
    s->tok += tokens;
    s->ms[s->steps] = (float)ms;
    if (++s->steps >= s->len) next_phase(g, s);
}

void spec_guard_rates(const spec_guard *g, int32_t n_dec, double *off, double *on) {
    const spec_guard_shape *s = &g->shape[bucket(SP_MAX(n_dec, 1))];
    *off = s->est[0];
    *on = s->est[1];
}
