/* verify.c: the acceptance rule of speculative decoding, for greedy and
 * sampled requests. Both commit exactly what plain decoding would commit
 * (greedy) or something distributed exactly like it (sampling); the only
 * thing speculation changes is how many target passes that takes. */
#include "verify.h"

#include <math.h>
#include <string.h>

#include "common.h"

/* Draws from w[0..V) (non-negative, sum > 0) with a uniform u in [0,1). */
static sp_token draw(const float *w, int32_t V, double u) {
    double z = 0;
    for (int32_t i = 0; i < V; i++) z += w[i];
    double t = u * z, cum = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < V; i++) {
        if (w[i] <= 0) continue;
        cum += w[i];
        last = i;
        if (t < cum) return i;
    }
    return last;
}

int32_t sp_spec_verify(sp_sampler *s, bool greedy, const float *logits, int32_t V,
                       const sp_token *draft, const float *q, int32_t n, sp_token *out,
                       float *probs, float *resid) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * V;
        const sp_token d = draft[i];
        if (greedy) {
            sp_token t = sp_sampler_sample(s, row);
            sp_sampler_accept(s, t);
            out[m++] = t;
            if (t != d) return m;
            continue;
        }
        sp_sampler_probs(s, row, probs);
        const float *qi = q ? q + (size_t)i * V : NULL;
        const double qd = qi ? qi[d] : 1.0;
        const double u = sp_sampler_uniform(s);
        if (qd > 0 && u * qd < probs[d]) { /* accept with probability min(1, p/q) */
            sp_sampler_accept(s, d);
            out[m++] = d;
            continue;
        }
        /* rejected: the residual max(0, p - q), renormalized by draw() */
        double mass = 0;
        for (int32_t j = 0; j < V; j++) {
            float r = probs[j] - (qi ? qi[j] : (j == d ? 1.0f : 0.0f));
            resid[j] = r > 0 ? r : 0;
            mass += resid[j];
        }
        /* mass == 0 only when p == q, where rejection has probability 0;
         * rounding can still land here: fall back to p */
        sp_token t = draw(mass > 0 ? resid : probs, V, sp_sampler_uniform(s));
        sp_sampler_accept(s, t);
        out[m++] = t;
        return m;
    }
    /* every proposal accepted: the bonus token from the last row */
    sp_token t = sp_sampler_sample(s, logits + (size_t)n * V);
    sp_sampler_accept(s, t);
    out[m++] = t;
    return m;
}
