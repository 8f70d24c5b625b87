/* test_sampler.c: sampling transforms and reproducibility. Distributions are
 * checked against probabilities computed here, in double, from the logits
 * and the definitions (softmax of logits / temperature, restricted to the
 * top k), never against the sampler's own sp_sampler_probs. */
#include <math.h>
#include <stdint.h>

#include "common.h"

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

/* Top-p and min-p (alone and after top-k): sampled frequencies against the
 * kept set and softmax(l / T) computed here from the definitions: top-p
 * keeps the smallest prefix of tokens by descending logit whose softmax
 * mass at temperature 1 reaches top_p; min-p keeps tokens whose probability
 * is at least min_p times the top one's. */
static void filtered_probs(double temp, int k, double top_p, double min_p, double *out) {
    double mx = logits[0];
    for (int i = 1; i < NV; i++) mx = logits[i] > mx ? logits[i] : mx;
    int order[NV], n = 0;
    for (int i = 0; i < NV; i++) order[i] = i;
    for (int i = 1; i < NV; i++) /* insertion sort, descending, ties by id */
        for (int j = i; j > 0 && logits[order[j]] > logits[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    n = k > 0 && k < NV ? k : NV;
    if (top_p < 1) {
        double z = 0, cum = 0;
        for (int i = 0; i < n; i++) z += exp(logits[order[i]] - mx);
        for (int i = 0; i < n; i++) {
            cum += exp(logits[order[i]] - mx) / z;
            if (cum >= top_p) {
                n = i + 1;
                break;
            }
        }
    }
    int keep = n;
    if (min_p > 0)
        for (keep = 1; keep < n && exp(logits[order[keep]] - mx) >= min_p; keep++) {}
    memset(out, 0, NV * sizeof(double));
    double z = 0;
    for (int i = 0; i < keep; i++) z += out[order[i]] = exp((logits[order[i]] - mx) / temp);
    for (int i = 0; i < keep; i++) out[order[i]] /= z;
}

static void test_top_p_min_p_against_independent_probs(void) {
    static const struct {
        float temp;
        int top_k;
        float top_p, min_p;
    } rows[] = {{1.0f, 0, 0.5f, 0}, {0.8f, 0, 0.9f, 0}, {1.0f, 0, 1.0f, 0.3f}, {1.5f, 0, 1.0f, 0.6f},
                {0.8f, 20, 0.7f, 0}, {1.2f, 30, 0.95f, 0.2f}};
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        char what[96];
        snprintf(what, sizeof what, "T=%g top_k=%d top_p=%g min_p=%g", rows[r].temp, rows[r].top_k,
                 rows[r].top_p, rows[r].min_p);
        sp_sampler_params p = sp_sampler_default_params();
        p.temperature = rows[r].temp;
        p.top_k = rows[r].top_k;
        p.top_p = rows[r].top_p;
        p.min_p = rows[r].min_p;
        p.seed = 777 + r;
        sp_sampler *s = mk(p);
        CHECK(s != NULL, "%s: sampler", what);
        if (!s) continue;
        double want[NV];
        filtered_probs(rows[r].temp, rows[r].top_k, rows[r].top_p, rows[r].min_p, want);
        check_draws(s, want, 40000, what);
        sp_sampler_free(s);
    }
}

/* The positional draw: the token at (seed, pos) is a fixed function of the
 * logits, whatever was drawn before and in whatever order; over positions
 * of one seed the draws are independent samples of the distribution (the
 * chi-square, and pairs of neighbours drawn as often as independence says);
 * another seed gives other draws. */
static void test_positional_draw(void) {
    sp_sampler_params p = sp_sampler_default_params();
    p.temperature = 0.9f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 5;
    sp_sampler *a = mk(p), *b = mk(p);
    p.seed = 6;
    sp_sampler *c = mk(p);
    REQUIRE(a && b && c, "samplers");
    enum { N = 40000 };
    static sp_token fwd[N];
    for (int i = 0; i < N; i++) fwd[i] = sp_sampler_sample_at(a, logits, i);
    bool same = true;
    for (int i = N - 1; i >= 0; i--) same &= sp_sampler_sample_at(b, logits, i) == fwd[i];
    for (int i = 0; i < 1000; i++) same &= sp_sampler_sample_at(a, logits, (i * 7919) % N) == fwd[(i * 7919) % N];
    CHECK(same, "a position's token depends on what was drawn before");
    for (int i = 0; i < 50; i++) sp_sampler_sample(b, logits); /* the counter moves, the positions do not */
    for (int i = 0; i < 100; i++) same &= sp_sampler_sample_at(b, logits, i) == fwd[i];
    CHECK(same, "sp_sampler_sample changed a positional draw");
    int differ = 0;
    for (int i = 0; i < 200; i++) differ += sp_sampler_sample_at(c, logits, i) != fwd[i];
    CHECK(differ > 100, "seeds 5 and 6 agree on %d of 200 positions", 200 - differ);
    double want[NV];
    expected_probs(0.9, 0, want);
    int64_t counts[NV] = {0};
    for (int i = 0; i < N; i++) counts[fwd[i]]++;
    double chi = 0, pe = 0, po = 0;
    int bins = 0;
    for (int i = 0; i < NV; i++) {
        const double e = want[i] * N;
        if (e < 5) {
            pe += e;
            po += counts[i];
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pe > 0) chi += (po - pe) * (po - pe) / pe, bins++;
    CHECK(chi <= chi2_crit(bins - 1), "positions: chi-square %.1f over %d bins", chi, bins);
    /* neighbours: token 0 then token 0 as often as p0^2 says */
    int pairs = 0;
    for (int i = 1; i < N; i++) pairs += fwd[i - 1] == 0 && fwd[i] == 0;
    const double ep = want[0] * want[0] * (N - 1), sd = sqrt(ep);
    CHECK(fabs(pairs - ep) < 5 * sd, "pairs (0, 0): %d, independence says %.0f", pairs, ep);
    sp_sampler_free(a);
    sp_sampler_free(b);
    sp_sampler_free(c);
}

/* A model-sized vocabulary, where the draw skips the logarithms of almost
 * every token: its frequencies still follow softmax(l / T), including the
 * tail (tokens far below the top, pooled), and an unpruned Gumbel-max with
 * the same noise would not be needed to see it: the chi-square is against
 * the definition. */
static void test_large_vocab_draw(void) {
    enum { LV = 6000, N = 60000 };
    static float lg[LV];
    static double want[LV];
    static int64_t counts[LV];
    uint64_t x = 42;
    for (int i = 0; i < LV; i++) { /* a spread like a model's: a few high, a long tail */
        double u1 = ((double)(splitmix64(&x) >> 11) + 0.5) * 0x1.0p-53;
        double u2 = ((double)(splitmix64(&x) >> 11) + 0.5) * 0x1.0p-53;
        lg[i] = (float)(3.0 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    lg[17] = 14.0f;
    lg[4000] = 13.0f;
    const double T = 0.8;
    double mx = -1e30, z = 0;
    for (int i = 0; i < LV; i++) mx = fmax(mx, lg[i]);
    for (int i = 0; i < LV; i++) z += want[i] = exp((lg[i] - mx) / T);
    for (int i = 0; i < LV; i++) want[i] /= z;
    sp_sampler_params p = sp_sampler_default_params();
    p.temperature = (float)T;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 31337;
    char err[128];
    sp_sampler *s = sp_sampler_create(p, LV, err, sizeof(err));
    REQUIRE(s, "sampler: %s", err);
    for (int i = 0; i < N; i++) counts[sp_sampler_sample_at(s, lg, i)]++;
    double chi = 0, pe = 0, po = 0;
    int bins = 0;
    for (int i = 0; i < LV; i++) {
        const double e = want[i] * N;
        if (e < 5) {
            pe += e;
            po += (double)counts[i];
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pe > 0) chi += (po - pe) * (po - pe) / pe, bins++;
    printf("  %d tokens, T = %g: chi-square %.1f over %d bins (tail pooled: %.0f expected, %.0f drawn)\n",
           LV, T, chi, bins, pe, po);
    CHECK(bins >= 3, "%d bins", bins);
    CHECK(chi <= chi2_crit(bins - 1), "chi-square %.1f over %d bins exceeds %.1f", chi, bins,
          chi2_crit(bins - 1));
    sp_sampler_free(s);
}

/* A logit of -inf (a grammar's mask) is never drawn, on every path of the
 * draw: the whole vocabulary, top-k, top-p, min-p; when one token is left
 * it is always drawn. */
static void test_masked_never_drawn(void) {
    float l[NV];
    for (int i = 0; i < NV; i++) l[i] = i % 3 ? -INFINITY : logits[i];
    static const struct {
        int top_k;
        float top_p, min_p;
    } rows[] = {{0, 1.0f, 0}, {10, 1.0f, 0}, {0, 0.9f, 0}, {0, 1.0f, 0.01f}, {40, 0.99f, 0.001f}};
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        sp_sampler_params p = sp_sampler_default_params();
        p.temperature = 3.0f;
        p.top_k = rows[r].top_k;
        p.top_p = rows[r].top_p;
        p.min_p = rows[r].min_p;
        sp_sampler *s = mk(p);
        REQUIRE(s, "sampler");
        int bad = 0, seen[NV] = {0};
        for (int i = 0; i < 3000; i++) {
            sp_token t = sp_sampler_sample_at(s, l, i);
            bad += t < 0 || t >= NV || l[t] == -INFINITY;
            if (t >= 0 && t < NV) seen[t] = 1;
        }
        int kinds = 0;
        for (int i = 0; i < NV; i++) kinds += seen[i];
        CHECK(!bad, "row %zu: %d masked draws", r, bad);
        CHECK(kinds > 1, "row %zu: only %d distinct tokens at temperature 3", r, kinds);
        sp_sampler_free(s);
    }
    for (int i = 0; i < NV; i++) l[i] = i == 33 ? -50.0f : -INFINITY;
    sp_sampler *s = mk(sp_sampler_default_params());
    REQUIRE(s, "sampler");
    int hit = 0;
    for (int i = 0; i < 200; i++) hit += sp_sampler_sample_at(s, l, i) == 33;
    CHECK(hit == 200, "the one unmasked token drawn %d of 200 times", hit);
    sp_sampler_free(s);
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
    RUN(test_top_p_min_p_against_independent_probs);
    RUN(test_positional_draw);
    RUN(test_large_vocab_draw);
    RUN(test_masked_never_drawn);
    TEST_END();
}
