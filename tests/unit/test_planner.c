/* test_planner.c: the speculation planner's cost model (cost_fit: the
 * startup curve and attention cost, scaled online) and its choice of k per sequence
 * (spec_plan).
 *
 * The plan rows use a curve where a pass of n tokens costs 0.9 + 0.1 n ms
 * (exact at every measured point), so each expected k is the hand-computed
 * point where one more proposed token stops raising expected tokens per ms.
 */
#include <math.h>

#include "common.h"
#include "speculate/planner.h"
#include "test.h"

static cost_model linear_curve(double fixed, double per_token) {
    cost_model c = {0};
    for (int32_t n = 1; n <= 64; n *= 2) {
        c.tok[c.n] = n;
        c.ms[c.n++] = fixed + per_token * n;
    }
    return c;
}

static uint64_t rng = 12345;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* The scale follows passes that vary in size and context when the machine
 * is uniformly slower than at startup, and then a further slowdown. */
static void test_fit_scale(void) {
    const cost_model curve = linear_curve(0.9, 0.1);
    cost_fit f;
    cost_fit_init(&f, &curve, 0.5);
    CHECK(fabs(cost_fit_at(&f, 16, 0) - 2.5) < 1e-9, "initial = curve");
    CHECK(fabs(cost_fit_at(&f, 1, 4000) - 3.0) < 1e-9, "initial attention term");
    for (int i = 0; i < 400; i++) {
        const double n = 1 + floor(urand() * 64), a = urand() * 50000;
        cost_fit_observe(&f, n, a, 2.0 * (cost_at(&curve, n) + 0.5 * a / 1000) * (1 + (urand() - 0.5) * 0.02));
    }
    CHECK(fabs(f.s - 2.0) < 0.03, "s %.4f", f.s);
    for (int i = 0; i < 400; i++) {
        const double n = 1 + floor(urand() * 64), a = urand() * 50000;
        cost_fit_observe(&f, n, a, 3.0 * (cost_at(&curve, n) + 0.5 * a / 1000));
    }
    CHECK(fabs(f.s - 3.0) < 0.03, "s after slowdown %.4f", f.s);
    CHECK(fabs(cost_fit_at(&f, 5, 2000) - 3.0 * (1.4 + 1.0)) < 0.1, "prediction %g", cost_fit_at(&f, 5, 2000));
}

/* Identical passes (steady decoding) keep the prediction for that pass
 * right and the attention term where startup put it; one pass slowed 100x
 * (a preemption, the OS) moves the scale by at most a few percent; garbage
 * is ignored. */
static void test_fit_steady_and_outliers(void) {
    const cost_model curve = linear_curve(0.9, 0.1);
    cost_fit f;
    cost_fit_init(&f, &curve, 0.4);
    for (int i = 0; i < 20000; i++) cost_fit_observe(&f, 1, 400 + (i % 100), 1.2 * (1.0 + 0.4 * (400 + (i % 100)) / 1000));
    CHECK(fabs(f.s - 1.2) < 0.01, "s %.4f", f.s);
    CHECK(f.c_attn == 0.4, "c_attn stays %g", f.c_attn);
    /* verification (5 tokens at 400 positions each) is predicted from the
     * curve and the startup attention cost, not from a drifted split */
    CHECK(fabs(cost_fit_at(&f, 5, 2000) - 1.2 * (1.4 + 0.8)) < 0.03, "verify prediction %g",
          cost_fit_at(&f, 5, 2000));
    const double s = f.s;
    cost_fit_observe(&f, 1, 400, 100.0);
    CHECK(f.s - s <= SP_COST_RATE * (4.0 - s) + 1e-12, "outlier moved s from %g to %g", s, f.s);
    const double s2 = f.s;
    cost_fit_observe(&f, 1, 400, -1);
    cost_fit_observe(&f, 1, 400, NAN);
    cost_fit_observe(&f, 0, 400, 1);
    cost_fit_observe(&f, 1, -5, 1);
    CHECK(f.s == s2, "garbage ignored");
}

typedef struct {
    const char *name;
    double s, c_attn;         /* target fit */
    double draft_fixed;       /* draft pass: draft_fixed + 0.01 n ms; 0 = no draft */
    int32_t base_tokens;
    double base_attn, base_commit;
    int32_t n;
    spec_cand cand[3];
    int32_t want[3];
} plan_row;

static const plan_row plan_rows[] = {
    /* a sure proposal: every extra token costs 0.1 ms and is kept */
    {"sure proposal takes its cap", 1, 0, 0, 1, 0, 1, 1, {{0.99f, 8, false, 0, 0}}, {8}},
    {"hopeless proposal takes nothing", 1, 0, 0, 1, 0, 1, 1, {{0.0f, 8, false, 0, 0}}, {0}},
    /* alpha 0.5: 1.5/1.1 = 1.36, 1.75/1.2 = 1.46, 1.875/1.3 = 1.44 */
    {"alpha 0.5 stops at 2", 1, 0, 0, 1, 0, 1, 1, {{0.5f, 8, false, 0, 0}}, {2}},
    /* 2000 positions at 1 ms/1k: a verified token costs 2.1 ms against 3
     * for the step, so alpha 0.5 no longer pays (1.5/5.1 < 1/3) */
    {"long context, alpha 0.5: none", 1, 1.0, 0, 1, 2000, 1, 1, {{0.5f, 8, false, 2000, 0}}, {0}},
    /* ... but a nearly sure one still does: .99/2.1 > 1/3 */
    {"long context, alpha 0.99: some", 1, 1.0, 0, 1, 2000, 1, 1, {{0.99f, 8, false, 2000, 0}}, {8}},
    /* 16 decoders cost 2.5 ms (6.4 tokens/ms); a 17th token at 2.6 ms with
     * alpha 0.5 gives 16.5/2.6 = 6.35: speculation stops in a big batch */
    {"big batch: none", 1, 0, 0, 16, 0, 16, 1, {{0.5f, 8, false, 0, 0}}, {0}},
    /* draft pass 0.3 ms: 1.7/1.4 = 1.21 beats 1/1 by the 10% margin, a
     * second token (another draft pass) 2.19/1.8 = 1.217, a third
     * 2.53/2.2 = 1.15 no longer */
    {"draft pass limits k", 1, 0, 0.29, 1, 0, 1, 1, {{0.7f, 4, true, 0, 0}}, {2}},
    /* a draft pass of 0.5 ms: 1.7/1.6 = 1.06 gains, but less than the
     * margin the first token needs */
    {"first token needs the margin", 1, 0, 0.49, 1, 0, 1, 1, {{0.7f, 4, true, 0, 0}}, {0}},
    /* the 0.3 ms draft carrying 40 tokens of catch-up in its first pass
     * (0.7 ms): 1.7/1.8 < 1.1 */
    {"draft catch-up cost counted", 1, 0, 0.29, 1, 0, 1, 1, {{0.7f, 4, true, 0, 40}}, {0}},
    /* the strong candidate takes its cap (ratio 3.75), the weak one's
     * first token (0.3 for 0.1 ms) would lower it: 7.42/2.0 < 7.12/1.9 */
    {"strong before weak", 1, 0, 0, 2, 0, 2, 2, {{0.9f, 8, false, 0, 0}, {0.3f, 8, false, 0, 0}}, {8, 0}},
};

static void test_plan_row(const plan_row *r) {
    const cost_model tc = linear_curve(0.9, 0.1), dc = linear_curve(r->draft_fixed, 0.01);
    cost_fit tf, df;
    cost_fit_init(&tf, &tc, r->c_attn);
    tf.s = r->s;
    cost_fit_init(&df, &dc, 0);
    int32_t k[3] = {-1, -1, -1}, total = 0;
    const int32_t got = spec_plan(&tf, r->draft_fixed > 0 ? &df : NULL, r->base_tokens, r->base_attn,
                                     r->base_commit, r->cand, r->n, k);
    for (int32_t i = 0; i < r->n; i++) {
        CHECK(k[i] == r->want[i], "candidate %d: k %d, want %d", i, k[i], r->want[i]);
        CHECK(k[i] >= 0 && k[i] <= r->cand[i].k_cap, "k within cap");
        total += k[i];
    }
    CHECK(got == total, "returned %d, sum %d", got, total);
}

/* ---- the guard on realized throughput ------------------------------------- */

/* Simulates steps of one shape: off commits 1 token per ms; on commits
 * gain tokens per ms (gain may change at step `change` to gain2), in steps
 * of 1 or 3 tokens. Each
 * step's time gets +-20% noise and, one step in 20, a 5x stall (a
 * descheduled step). Returns the fraction of the last `tail` steps that
 * ran on. */
static double simulate(spec_guard *g, int32_t n_dec, double gain, int change, double gain2,
                       int steps, int tail) {
    int on_tail = 0;
    for (int i = 0; i < steps; i++) {
        const bool on = spec_guard_on(g, n_dec);
        const double G = i < change ? gain : gain2;
        /* on: 1 or 3 tokens (2 on average) in 2 / G ms */
        const int tok = on ? (urand() < 0.5 ? 3 : 1) : 1;
        double ms = on ? 2.0 / G : 1.0;
        ms *= 1 + (urand() - 0.5) * 0.4;
        if (urand() < 0.05) ms *= 5;
        spec_guard_observe(g, n_dec, true, tok, ms);
        if (i >= steps - tail) on_tail += on;
    }
    return (double)on_tail / tail;
}

/* Speculation that gains is kept on, one that loses is kept off (the
 * stalls notwithstanding), each in its own shape; a shape whose gain turns
 * into a loss is switched off within a few hundred steps; steps that are
 * not measured (prefill in the batch) do not move the phases; the off
 * steps are counted. */
static void test_guard(void) {
    spec_guard g;
    spec_guard_init(&g);
    CHECK(spec_guard_on(&g, 1) && spec_guard_on(&g, 16), "a new shape starts on");
    CHECK(!spec_guard_on(&g, 0), "no decoding sequence: nothing to speculate");
    double f = simulate(&g, 1, 1.4, 1 << 30, 0, 3000, 2000);
    CHECK(f > 0.9, "1.4x: on in %.0f%% of the last steps", 100 * f);
    f = simulate(&g, 16, 0.85, 1 << 30, 0, 3000, 2000);
    CHECK(f < 0.1, "0.85x: on in %.0f%% of the last steps", 100 * f);
    CHECK(spec_guard_on(&g, 1) && spec_guard_on(&g, 3) != spec_guard_on(&g, 16),
          "shapes 1 and 16 are apart");
    double off, on;
    spec_guard_rates(&g, 16, &off, &on);
    CHECK(on > 0 && off > on, "shape 16's estimates: off %.3f on %.3f", off, on);
    CHECK(g.off_steps > 1500, "off steps counted: %llu", (unsigned long long)g.off_steps);
    /* a loss that starts late: mostly off in the last 1000 of 3000 */
    spec_guard_init(&g);
    f = simulate(&g, 4, 1.5, 1500, 0.8, 3000, 1000);
    CHECK(f < 0.2, "1.5x then 0.8x: on in %.0f%% of the last steps", 100 * f);
    /* unmeasured steps leave the phase where it was */
    spec_guard_init(&g);
    for (int i = 0; i < 1000; i++) spec_guard_observe(&g, 2, false, 1, 1.0);
    CHECK(spec_guard_on(&g, 2) && g.shape[1].steps == 0, "unmeasured steps moved the phase");
    /* the cost of a settled shape: a loss of 20% costs under 2% once settled */
    spec_guard_init(&g);
    f = simulate(&g, 1, 0.8, 1 << 30, 0, 6000, 4000);
    CHECK(f * 0.2 < 0.02, "0.8x: on in %.1f%% of the settled steps", 100 * f);
}

int main(void) {
    RUN(test_fit_scale);
    RUN(test_fit_steady_and_outliers);
    for (size_t i = 0; i < sizeof plan_rows / sizeof plan_rows[0]; i++)
        RUN_NAMED(test_plan_row, &plan_rows[i], plan_rows[i].name);
    RUN(test_guard);
    TEST_END();
}
