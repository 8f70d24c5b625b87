/* test_sampler.c: sampling transforms and reproducibility. Distributions are
 * checked against probabilities computed here, in double, from the logits
 * and the definitions (softmax of logits / temperature, restricted to the
 * top k), never against the sampler's own sp_sampler_probs. */
#include <math.h>

#include "specula.h"
#include "test.h"

#define NV 50
static float logits[NV];

static void setup(void) {
    for (int i = 0; i < NV; i++) logits[i] = (float)(NV - i) * 0.1f; /* token 0 most likely */
}

/* softmax(logits / temp) over the k largest logits (k <= 0: all), in double */
static void expected_probs(double temp, int k, double *out) {
    double mx = logits[0], z = 0;
    for (int i = 1; i < NV; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < NV; i++) {
        int rank = 0; /* tokens strictly more likely than i */
        for (int j = 0; j < NV; j++) rank += logits[j] > logits[i];
        out[i] = k > 0 && rank >= k ? 0.0 : exp(((double)logits[i] - mx) / temp);
        z += out[i];
    }
    for (int i = 0; i < NV; i++) out[i] /= z;
}

/* The chi-square critical value for df degrees of freedom at a false-failure
 * rate of 1e-6 (Wilson-Hilferty; z = 4.7534). */
static double chi2_crit(int df) {
    const double a = 2.0 / (9.0 * df), z = 4.7534;
    const double c = 1 - a + z * sqrt(a);
    return df * c * c * c;
}

/* Draws n tokens and tests their counts against expected probabilities
 * (chi-square, tail bins with an expected count under 5 pooled); tokens
 * with expected probability 0 must never be drawn. */
static void check_draws(sp_sampler *s, const double *want, int n, const char *what) {
    static int counts[NV];
    memset(counts, 0, sizeof(counts));
    for (int i = 0; i < n; i++) {
        const sp_token t = sp_sampler_sample(s, logits);
        CHECK(t >= 0 && t < NV, "%s: token %d out of range", what, t);
        if (t >= 0 && t < NV) counts[t]++;
    }
    double chi2 = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    for (int i = 0; i < NV; i++) {
        if (want[i] == 0) {
            CHECK(counts[i] == 0, "%s: token %d has probability 0 and was drawn %d times", what, i, counts[i]);
            continue;
        }
        const double e = want[i] * n;
        if (e < 5) {
            pool_e += e;
            pool_o += counts[i];
            continue;
        }
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    CHECK(bins >= 2, "%s: %d bins", what, bins);
    CHECK(chi2 <= chi2_crit(bins - 1), "%s: chi-square %.1f over %d bins exceeds %.1f", what, chi2, bins,
          chi2_crit(bins - 1));
}

static sp_sampler *mk(sp_sampler_params p) {
    char err[128];
    sp_sampler *s = sp_sampler_create(p, NV, err, sizeof(err));
    if (!s) fprintf(stderr, "sampler: %s\n", err);
    return s;
}

static void test_greedy(void) {
    sp_sampler *s = mk(sp_sampler_greedy_params());
    float l[NV];
    memcpy(l, logits, sizeof(l));
    l[17] = 100;
    CHECK(sp_sampler_sample(s, l) == 17, "argmax");
    float pr[NV];
    sp_sampler_probs(s, l, pr);
    CHECK(pr[17] == 1.0f, "greedy distribution is one-hot");
    sp_sampler_free(s);
}

static void test_probs_sum_and_filters(void) {
    struct {
        const char *name;
        float temp;
        int top_k;
        float top_p, min_p;
        int expect_nonzero; /* -1: don't check */
    } rows[] = {
        {"plain", 1.0f, 0, 1.0f, 0.0f, NV},
        {"top-k 5", 1.0f, 5, 1.0f, 0.0f, 5},
        {"top-k 1", 0.7f, 1, 1.0f, 0.0f, 1},
        {"top-p small", 1.0f, 0, 0.05f, 0.0f, 1},
        {"min-p 0.5", 1.0f, 0, 1.0f, 0.5f, 7}, /* e^{-0.1 i} >= 0.5 for i <= 6 */
        {"hot", 5.0f, 10, 0.9f, 0.0f, -1},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        sp_sampler_params p = sp_sampler_default_params();
        p.temperature = rows[r].temp;
        p.top_k = rows[r].top_k;
        p.top_p = rows[r].top_p;
        p.min_p = rows[r].min_p;
        sp_sampler *s = mk(p);
        float pr[NV];
        sp_sampler_probs(s, logits, pr);
        double sum = 0;
        int nz = 0;
        for (int i = 0; i < NV; i++) {
            sum += pr[i];
            nz += pr[i] > 0;
        }
        CHECK(fabs(sum - 1) < 1e-5, "%s: probabilities sum to %g", rows[r].name, sum);
        if (rows[r].expect_nonzero >= 0)
            CHECK(nz == rows[r].expect_nonzero, "%s: %d tokens survive, expected %d", rows[r].name,
                  nz, rows[r].expect_nonzero);
        for (int i = 1; i < NV; i++)
            CHECK(pr[i] <= pr[i - 1] + 1e-7, "%s: order broken at %d", rows[r].name, i);
        sp_sampler_free(s);
    }
}

static void test_seed_reproducible_and_matches_distribution(void) {
    sp_sampler_params p = sp_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    sp_sampler *a = mk(p), *b = mk(p);
    int counts[NV] = {0};
    const int N = 20000;
    bool same = true;
    for (int i = 0; i < N; i++) {
        sp_token x = sp_sampler_sample(a, logits), y = sp_sampler_sample(b, logits);
        same &= x == y;
        counts[x]++;
    }
    CHECK(same, "two samplers with one seed diverged");
    double want[NV];
    expected_probs(1.0, 0, want); /* independent of the sampler */
    for (int i = 0; i < 5; i++) {
        double expect = want[i] * N, sd = sqrt(expect);
        CHECK(fabs(counts[i] - expect) < 5 * sd, "token %d drawn %d times, expected %.0f", i,
              counts[i], expect);
    }
    p.seed = 99;
    sp_sampler *c = mk(p);
    sp_sampler_reset(a);
    int differ = 0;
    for (int i = 0; i < 100; i++) differ += sp_sampler_sample(a, logits) != sp_sampler_sample(c, logits);
    CHECK(differ > 0, "different seeds gave the same 100 draws");
    sp_sampler_free(a);
    sp_sampler_free(b);
    sp_sampler_free(c);
}

/* Temperature (and top-k, which keeps the same tokens at any temperature):
 * sp_sampler_probs and the sampled frequencies against softmax(l / T)
 * computed here. */
static void test_temperature_against_independent_probs(void) {
    static const struct {
        float temp;
        int top_k;
    } rows[] = {{0.25f, 0}, {0.5f, 0}, {1.0f, 0}, {1.7f, 0}, {3.0f, 0}, {0.7f, 5}, {2.0f, 12}};
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        char what[64];
        snprintf(what, sizeof what, "T=%g top_k=%d", rows[r].temp, rows[r].top_k);
        sp_sampler_params p = sp_sampler_default_params();
        p.temperature = rows[r].temp;
        p.top_k = rows[r].top_k;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.seed = 4242 + r;
        sp_sampler *s = mk(p);
        CHECK(s != NULL, "%s: sampler", what);
        if (!s) continue;
        double want[NV];
        expected_probs(rows[r].temp, rows[r].top_k, want);
        float pr[NV];
        sp_sampler_probs(s, logits, pr);
        double worst = 0;
        for (int i = 0; i < NV; i++) worst = fmax(worst, fabs(pr[i] - want[i]) / fmax(want[i], 1e-30));
        CHECK(worst <= 1e-5, "%s: sp_sampler_probs differs from softmax(l/T) by %.2e relative", what, worst);
        check_draws(s, want, 40000, what);
        sp_sampler_free(s);
    }
}

static void test_penalties(void) {
    sp_sampler_params p = sp_sampler_greedy_params();
    p.repeat_penalty = 1.5f;
    sp_sampler *s = mk(p);
    float l[NV];
    memcpy(l, logits, sizeof(l)); /* token 0: 5.0, token 1: 4.9 */
    sp_sampler_accept(s, 0);
    CHECK(sp_sampler_sample(s, l) == 1, "repeat penalty should demote token 0");
    sp_sampler_free(s);
    p = sp_sampler_greedy_params();
    p.presence_penalty = 0.05f;
    s = mk(p);
    sp_sampler_accept(s, 0);
    CHECK(sp_sampler_sample(s, l) == 0, "presence 0.05 keeps token 0 (5.0-0.05 > 4.9)");
    sp_sampler_free(s);
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.06f;
    s = mk(p);
    sp_sampler_accept(s, 0);
    sp_sampler_accept(s, 0);
    CHECK(sp_sampler_sample(s, l) == 1, "frequency 2 x 0.06 demotes token 0");
    sp_sampler_free(s);
}

static void test_invalid_params(void) {
    struct {
        const char *name;
        sp_sampler_params p;
    } rows[6];
    for (int i = 0; i < 6; i++) rows[i].p = sp_sampler_default_params();
    rows[0].name = "NaN temperature"; rows[0].p.temperature = NAN;
    rows[1].name = "negative temperature"; rows[1].p.temperature = -1;
    rows[2].name = "top_p 0"; rows[2].p.top_p = 0;
    rows[3].name = "top_p 1.5"; rows[3].p.top_p = 1.5f;
    rows[4].name = "min_p -1"; rows[4].p.min_p = -1;
    rows[5].name = "infinite penalty"; rows[5].p.frequency_penalty = INFINITY;
    for (int i = 0; i < 6; i++) {
        char err[128] = "";
        sp_sampler *s = sp_sampler_create(rows[i].p, NV, err, sizeof(err));
        CHECK(s == NULL && err[0], "%s accepted", rows[i].name);
        sp_sampler_free(s);
    }
}

static void test_logprob_helpers(void) {
    sp_token ids[4];
    float lps[4];
    int n = sp_top_logprobs(logits, NV, 4, ids, lps);
    CHECK(n == 4 && ids[0] == 0 && ids[1] == 1 && ids[3] == 3, "top ids");
    double z = 0;
    for (int i = 0; i < NV; i++) z += exp(logits[i]);
    CHECK(fabs(lps[0] - (logits[0] - log(z))) < 1e-5, "top logprob %g", lps[0]);
    CHECK(fabs(sp_logprob_of(logits, NV, 7) - (logits[7] - log(z))) < 1e-5, "logprob of 7");
}

/* Logit biases come before everything else, greedy included: -100 bans
 * (the most likely token is never drawn, nor is it the argmax), +100 forces
 * (every draw at temperature 1.5 is it), and a bias of 1 shifts the
 * distribution exactly as adding 1 to the logit does. The sampler keeps
 * its own copy of the array; an id outside the vocabulary is refused. */
static void test_logit_bias(void) {
    sp_logit_bias bias[2] = {{0, -100.0f}, {0, 0}};
    sp_sampler_params p = sp_sampler_greedy_params();
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    sp_sampler *s = mk(p);
    REQUIRE(s, "greedy with a bias");
    bias[0] = (sp_logit_bias){3, 100.0f}; /* the sampler's copy is unchanged */
    CHECK(sp_sampler_sample(s, logits) == 1, "greedy with token 0 banned: %d", sp_sampler_sample(s, logits));
    static float probs[NV];
    sp_sampler_probs(s, logits, probs);
    CHECK(probs[1] == 1.0f && probs[0] == 0.0f, "greedy probs follow the bias");
    sp_sampler_free(s);
    p = sp_sampler_default_params();
    p.temperature = 1.5f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.logit_bias = bias; /* {3, +100} */
    p.n_logit_bias = 1;
    s = mk(p);
    REQUIRE(s, "sampling with a bias");
    int forced = 0;
    for (int i = 0; i < 200; i++) forced += sp_sampler_sample(s, logits) == 3;
    CHECK(forced == 200, "+100 forces token 3: %d of 200", forced);
    sp_sampler_free(s);
    bias[0] = (sp_logit_bias){0, -100.0f};
    bias[1] = (sp_logit_bias){5, 1.0f};
    p.temperature = 1.0f;
    p.n_logit_bias = 2;
    s = mk(p);
    REQUIRE(s, "two biases");
    static float want_l[NV];
    memcpy(want_l, logits, sizeof(logits));
    want_l[0] -= 100.0f;
    want_l[5] += 1.0f;
    double z = 0;
    for (int i = 0; i < NV; i++) z += exp(want_l[i]);
    sp_sampler_probs(s, logits, probs);
    double worst = 0;
    for (int i = 0; i < NV; i++) worst = fmax(worst, fabs(probs[i] - exp(want_l[i]) / z));
    CHECK(worst < 1e-5, "probs equal softmax(logits + bias): off by %g", worst);
    sp_sampler_free(s);
    char err[128] = "";
    bias[0] = (sp_logit_bias){NV, 1.0f};
    p.n_logit_bias = 1;
    CHECK(!sp_sampler_create(p, NV, err, sizeof(err)) && err[0], "an id past the vocabulary accepted");
    bias[0] = (sp_logit_bias){1, NAN};
    CHECK(!sp_sampler_create(p, NV, err, sizeof(err)), "a NaN bias accepted");
}

int main(void) {
    setup();
    RUN(test_greedy);
    RUN(test_probs_sum_and_filters);
    RUN(test_seed_reproducible_and_matches_distribution);
    RUN(test_temperature_against_independent_probs);
    RUN(test_penalties);
    RUN(test_invalid_params);
    RUN(test_logprob_helpers);
    RUN(test_logit_bias);
    TEST_END();
}
