/* sampler.c: turning logits into the next token.
 *
 * Order (llama.cpp's default chain): logit biases -> penalties -> top-k ->
 * top-p -> min-p -> temperature -> draw. Filters run on the penalized logits before
 * temperature, as there. sp_sampler_probs exposes the final distribution
 * over the whole vocabulary (tests, diagnostics).
 *
 * The draw is positional: the token for position pos is the Gumbel-max of
 * the processed logits with noise that is a function of (seed, pos, token
 * id) only (a counter-based generator, no stream state). So the token a
 * request gets at a position depends on its logits there and nothing else:
 * not on how many draws came before, nor on what a speculative proposer
 * guessed. Speculative verification (src/speculate/verify.c) accepts a proposal
 * exactly when it equals that token, and the draft model proposes with the
 * same noise (a coupling that keeps its acceptance high).
 *
 * Working arrays are sized n_vocab at creation; sampling allocates nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "specula.h"

struct sp_sampler {
    sp_sampler_params p;
    int32_t n_vocab;
    int64_t n_draws;    /* sp_sampler_sample's position counter */
    sp_token *hist;     /* [penalty_last_n] ring of recent tokens */
    int32_t n_hist, hist_pos;
    float *work;        /* [V] penalized logits */
    int32_t *idx;       /* [V] candidate ids */
    int32_t *surv;      /* [V] the draw's scratch: candidates that could win */
    int32_t *count;     /* [V] occurrences in the history window */
    sp_logit_bias *bias; /* [p.n_logit_bias] the caller's biases, copied */
};

sp_sampler_params sp_sampler_default_params(void) {
    sp_sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 0xC0FFEEull, NULL, 0};
    return p;
}

sp_sampler_params sp_sampler_greedy_params(void) {
    sp_sampler_params p = {0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0xC0FFEEull, NULL, 0};
    return p;
}

void sp_sampler_reset(sp_sampler *s) {
    s->n_draws = 0;
    s->n_hist = s->hist_pos = 0;
}

sp_sampler *sp_sampler_create(sp_sampler_params p, int32_t n_vocab, char *err, size_t errlen) {
    if (n_vocab <= 0) {
        seterr(err, errlen, "n_vocab must be positive");
        return NULL;
    }
    if (!isfinite(p.temperature) || p.temperature < 0 || p.temperature > 100) {
        seterr(err, errlen, "temperature must be between 0 and 100");
        return NULL;
    }
    if (!isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) {
        seterr(err, errlen, "top_p must be in (0, 1]");
        return NULL;
    }
    if (!isfinite(p.min_p) || p.min_p < 0 || p.min_p > 1) {
        seterr(err, errlen, "min_p must be in [0, 1]");
        return NULL;
    }
    if (!isfinite(p.repeat_penalty) || p.repeat_penalty <= 0 || p.repeat_penalty > 10) {
        seterr(err, errlen, "repeat_penalty must be in (0, 10]");
        return NULL;
    }
    if (!isfinite(p.frequency_penalty) || fabsf(p.frequency_penalty) > 2 ||
        !isfinite(p.presence_penalty) || fabsf(p.presence_penalty) > 2) {
        seterr(err, errlen, "frequency and presence penalties must be in [-2, 2]");
        return NULL;
    }
    if (p.n_logit_bias < 0 || (p.n_logit_bias && !p.logit_bias)) {
        seterr(err, errlen, "logit biases missing");
        return NULL;
    }
    for (int32_t i = 0; i < p.n_logit_bias; i++)
        if (p.logit_bias[i].token < 0 || p.logit_bias[i].token >= n_vocab ||
            !isfinite(p.logit_bias[i].bias)) {
            seterr(err, errlen, "logit bias %d: token %d outside the vocabulary (0..%d) or "
                      "bias not finite", i, p.logit_bias[i].token, n_vocab - 1);
            return NULL;
        }
    if (p.top_k < 0) p.top_k = 0;
    if (p.penalty_last_n < 0 || p.penalty_last_n > (1 << 20)) {
        seterr(err, errlen, "penalty_last_n must be in [0, 1048576]");
        return NULL;
    }
    sp_sampler *s = calloc(1, sizeof(*s));
    if (!s) goto oom;
    s->p = p;
    s->n_vocab = n_vocab;
    s->hist = malloc((size_t)SP_MAX(p.penalty_last_n, 1) * sizeof(sp_token));
    s->work = malloc((size_t)n_vocab * sizeof(float));
    s->idx = malloc((size_t)n_vocab * sizeof(int32_t));
    s->surv = malloc((size_t)n_vocab * sizeof(int32_t));
    s->count = calloc((size_t)n_vocab, sizeof(int32_t));
    if (!s->hist || !s->work || !s->idx || !s->surv || !s->count) goto oom;
    if (p.n_logit_bias) {
        s->bias = malloc((size_t)p.n_logit_bias * sizeof(sp_logit_bias));
        if (!s->bias) goto oom;
        memcpy(s->bias, p.logit_bias, (size_t)p.n_logit_bias * sizeof(sp_logit_bias));
    }
    s->p.logit_bias = s->bias;
    sp_sampler_reset(s);
    return s;
oom:
    seterr(err, errlen, "out of memory");
    sp_sampler_free(s);
    return NULL;
}

void sp_sampler_free(sp_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->work);
    free(s->idx);
    free(s->surv);
    free(s->count);
    free(s->bias);
    free(s);
}

void sp_sampler_accept(sp_sampler *s, sp_token t) {
    if (s->p.penalty_last_n == 0) return;
    s->hist[s->hist_pos] = t;
    s->hist_pos = (s->hist_pos + 1) % s->p.penalty_last_n;
    if (s->n_hist < s->p.penalty_last_n) s->n_hist++;
}

static bool penalties_on(const sp_sampler *s) {
    return s->n_hist > 0 && (s->p.repeat_penalty != 1.0f || s->p.frequency_penalty != 0.0f ||
                             s->p.presence_penalty != 0.0f);
}

/* work = logits plus the logit biases, then with repetition/frequency/
 * presence penalties applied to the tokens of the history window
 * (llama.cpp's rule: a positive logit is divided by the repeat penalty, a
 * negative one multiplied). Every path to a token (sample, probs, and so
 * speculative verification) starts here. */
static void apply_penalties(sp_sampler *s, const float *logits) {
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) s->work[s->bias[i].token] += s->bias[i].bias;
    if (!penalties_on(s)) return;
    for (int32_t i = 0; i < s->n_hist; i++) {
        sp_token t = s->hist[i];
        if (t >= 0 && t < s->n_vocab) s->count[t]++;
    }
    for (int32_t i = 0; i < s->n_hist; i++) {
        sp_token t = s->hist[i];
        if (t < 0 || t >= s->n_vocab || s->count[t] == 0) continue;
        float *l = &s->work[t];
        if (*l <= 0) *l *= s->p.repeat_penalty;
        else *l /= s->p.repeat_penalty;
        *l -= (float)s->count[t] * s->p.frequency_penalty + s->p.presence_penalty;
        s->count[t] = 0; /* apply once per distinct token */
    }
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *w = ctx;
    float x = w[*(const int32_t *)a], y = w[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

/* The first index of the largest value (NaN never wins; 0 when all are
 * NaN). The maximum is found in 8 independent lanes (a chain through one
 * running maximum costs a load's latency per element: two thirds of a
 * full-vocabulary draw), then its first index. */
static sp_token argmax(const float *w, int32_t n) {
    float m[8];
    for (int l = 0; l < 8; l++) m[l] = -INFINITY;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) m[l] = w[i + l] > m[l] ? w[i + l] : m[l];
    for (; i < n; i++) m[0] = w[i] > m[0] ? w[i] : m[0];
    float mx = m[0];
    for (int l = 1; l < 8; l++) mx = m[l] > mx ? m[l] : mx;
    for (i = 0; i < n; i++)
        if (w[i] == mx) return i;
    return 0;
}

/* Fills s->idx[0..n) with the surviving candidates, sorted by descending
 * logit, and probs (may be NULL) with their final probabilities in the
 * same order. Returns n. */
static int32_t candidates(sp_sampler *s, float *probs_sorted) {
    const int32_t V = s->n_vocab;
    float *w = s->work;
    int32_t n = V;
    int32_t k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    if (k < V) {
        /* keep the k largest with a min-heap of k ids (O(V log k)), then
         * sort only those */
        int32_t *hp = s->idx;
        for (int32_t i = 0; i < k; i++) { /* sift up */
            int32_t j = i;
            hp[j] = i;
            while (j > 0 && cmp_desc(&hp[(j - 1) / 2], &hp[j], w) < 0) {
                int32_t t = hp[j]; hp[j] = hp[(j - 1) / 2]; hp[(j - 1) / 2] = t;
                j = (j - 1) / 2;
            }
        }
        for (int32_t i = k; i < V; i++) {
            if (cmp_desc(&i, &hp[0], w) >= 0) continue; /* not above the smallest kept */
            hp[0] = i;
            int32_t j = 0; /* sift down */
            for (;;) {
                int32_t l = 2 * j + 1, r = l + 1, m = j;
                if (l < k && cmp_desc(&hp[l], &hp[m], w) > 0) m = l;
                if (r < k && cmp_desc(&hp[r], &hp[m], w) > 0) m = r;
                if (m == j) break;
                int32_t t = hp[j]; hp[j] = hp[m]; hp[m] = t;
                j = m;
            }
        }
        n = k;
    }
    if (k == V)
        for (int32_t i = 0; i < V; i++) s->idx[i] = i;
    qsort_r(s->idx, (size_t)n, sizeof(int32_t), cmp_desc, w);
    /* softmax over the candidates (before temperature, as llama.cpp) */
    float max = w[s->idx[0]];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(w[s->idx[i]] - max));
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)(w[s->idx[i]] - max)) / sum;
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (s->p.min_p > 0.0f) {
        /* keep tokens whose probability is at least min_p times the top one */
        const float thresh = max + logf(s->p.min_p);
        int32_t keep = 1;
        while (keep < n && w[s->idx[keep]] >= thresh) keep++;
        n = keep;
    }
    if (probs_sorted) {
        const double inv_t = 1.0 / s->p.temperature;
        double z = 0;
        for (int32_t i = 0; i < n; i++) {
            double e = exp((double)(w[s->idx[i]] - max) * inv_t);
            probs_sorted[i] = (float)e;
            z += e;
        }
        for (int32_t i = 0; i < n; i++) probs_sorted[i] = (float)(probs_sorted[i] / z);
    }
    return n;
}

void sp_sampler_probs(sp_sampler *s, const float *logits, float *probs) {
    apply_penalties(s, logits);
    const int32_t V = s->n_vocab;
    if (s->p.temperature <= 0.0f) {
        memset(probs, 0, (size_t)V * sizeof(float));
        probs[argmax(s->work, V)] = 1.0f;
        return;
    }
    /* probs doubles as the sorted-probability buffer, then is scattered */
    int32_t n = candidates(s, probs);
    float *tmp = s->work; /* the logits are no longer needed */
    for (int32_t i = 0; i < n; i++) tmp[i] = probs[i];
    memset(probs, 0, (size_t)V * sizeof(float));
    for (int32_t i = 0; i < n; i++) probs[s->idx[i]] = tmp[i];
}

/* ---- the positional draw --------------------------------------------------
 *
 * Noise: entry v at position pos gets 53 random bits, SplitMix64's output
 * number v + 1 from a state that hashes (seed, pos), read as the uniform
 * u = (bits + 1/2) / 2^53 in (0, 1). Counter-based: any (pos, v) costs the
 * same few multiplies, in any order, with no state. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t pos_key(uint64_t seed, int64_t pos) {
    return mix64(mix64(seed ^ 0x6A09E667F3BCC909ull) + (uint64_t)pos * SP_GOLDEN64);
}

static inline uint64_t noise_bits(uint64_t key, int32_t v) {
    return mix64(key + (uint64_t)(v + 1) * SP_GOLDEN64) >> 11;
}

/* Standard Gumbel noise G(u) = -log(-log u) of those bits. */
static inline double gumbel(uint64_t bits) {
    return -log(-log(((double)bits + 0.5) * 0x1.0p-53));
}

/* Candidates are binned by how far below the top their scaled logit is,
 * in whole units; the last bin takes everything further down. */
#define NOISE_BINS 40
/* The bins' thresholds are computed for a best score this much lower than
 * the top's: it absorbs the float rounding of the bins (relative 1e-7 of at
 * most NOISE_BINS units), so a threshold never skips a candidate that could
 * win. */
#define NOISE_MARGIN 1e-4

/* The Gumbel-max draw from softmax(w / T) over the candidates (ids[0..n),
 * or 0..n when ids is NULL, minus those with w < w_min): the argmax of
 * c_i + G(u_i), with c_i = (w_i - w_top) / T <= 0, top the candidate with
 * the largest w (scored first; ties in score go to the first scored, then
 * to candidate order).
 * Cost: every candidate's bits are hashed (a few multiplies), but the two
 * logarithms are taken only for candidates that could beat the top. A
 * candidate in bin j (j <= -c_i < j + 1) scores at most b0 = G(u_top) when
 * u_i <= exp(-exp(-(b0 + j))): one pass keeps the candidates above their
 * bin's threshold (on a model's logits a handful of thousands: most sit
 * units below the top), the second scores those. Nothing skipped could
 * have won, so the result is the plain argmax over every candidate. surv is
 * [n] scratch. */
static sp_token gumbel_max(const float *w, const int32_t *ids, int32_t n, sp_token top,
                           float w_min, double inv_t, uint64_t key, int32_t *surv) {
    const double b0 = gumbel(noise_bits(key, top));
    /* skip when bits < lim[j]: u <= T_j = exp(-a), a = e^{-(b0 - margin + j)};
     * with y = 2^53 (1 - T_j), that is bits <= 2^53 - 1/2 - y */
    uint64_t lim[NOISE_BINS];
    double a = exp(-(b0 - NOISE_MARGIN));
    for (int j = 0; j < NOISE_BINS; j++, a *= 0.36787944117144233 /* e^-1 */) {
        const double y = -expm1(-a) * 0x1.0p53;
        lim[j] = y >= 0x1.0p53 ? 0 : (1ull << 53) + 1 - (uint64_t)ceil(y + 0.5);
    }
    const float w_top = w[top], inv_tf = (float)inv_t;
    int32_t m = 0;
    for (int32_t k = 0; k < n; k++) {
        const int32_t i = ids ? ids[k] : k;
        if (!(w[i] >= w_min)) continue;
        const float d = (w_top - w[i]) * inv_tf; /* >= 0; +inf for a -inf logit */
        const int j = d < NOISE_BINS - 1 ? (int)d : NOISE_BINS - 1;
        if (noise_bits(key, i) >= lim[j] && i != top) surv[m++] = i;
    }
    double best = b0;
    sp_token arg = top;
    for (int32_t k = 0; k < m; k++) {
        const int32_t i = surv[k];
        const double sc = gumbel(noise_bits(key, i)) - ((double)w_top - w[i]) * inv_t;
        if (sc > best) {
            best = sc;
            arg = i;
        }
    }
    return arg;
}

sp_token sp_sampler_sample_at(sp_sampler *s, const float *logits, int64_t pos) {
    apply_penalties(s, logits);
    const int32_t V = s->n_vocab;
    const bool truncated = (s->p.top_k > 0 && s->p.top_k < V) || s->p.top_p < 1.0f;
    const double inv_t = 1.0 / s->p.temperature;
    if (s->p.temperature > 0.0f && truncated) {
        const int32_t n = candidates(s, NULL); /* sorted: idx[0] is the top */
        if (!isfinite(s->work[s->idx[0]])) return s->idx[0];
        return gumbel_max(s->work, s->idx, n, s->idx[0], -INFINITY, inv_t,
                          pos_key(s->p.seed, pos), s->surv);
    }
    const sp_token top = argmax(s->work, V);
    if (s->p.temperature <= 0.0f || !isfinite(s->work[top])) return top;
    /* no top-k or top-p: every token is a candidate, min-p is a threshold
     * (the same set candidates() keeps), and nothing needs sorting */
    const float w_min = s->p.min_p > 0.0f ? s->work[top] + logf(s->p.min_p) : -INFINITY;
    return gumbel_max(s->work, NULL, V, top, w_min, inv_t, pos_key(s->p.seed, pos), s->surv);
}

sp_token sp_sampler_sample(sp_sampler *s, const float *logits) {
    return sp_sampler_sample_at(s, logits, s->n_draws++);
}

float sp_logprob_of(const float *logits, int32_t n_vocab, sp_token t) {
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - max));
    return (float)((double)(logits[t] - max) - log(sum));
}

int sp_top_logprobs(const float *logits, int32_t n_vocab, int k, sp_token *ids, float *lps) {
    if (k > n_vocab) k = n_vocab;
    if (k <= 0) return 0;
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - max));
    const double lse = log(sum);
    int n = 0; /* insertion into a small sorted list: k is small */
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (n == k && l <= logits[ids[n - 1]]) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && logits[ids[j - 1]] < l) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    for (int j = 0; j < n; j++) lps[j] = (float)((double)(logits[ids[j]] - max) - lse);
    return n;
}
