/* verify.c: the acceptance rule of speculative decoding, for greedy and
 * sampled requests. Both commit exactly what plain decoding would commit
 * (greedy) or something distributed exactly like it (sampling); the only
 * thing speculation changes is how many target passes that takes. */
#include "verify.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "tokenizer/tokenizer.h"

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

double sp_cost_at(const sp_cost_model *c, double x) {
    if (c->n == 0) return x; /* unmeasured: pessimistic, every token costs a pass */
    if (c->n == 1) return c->ms[0] * (x / c->tok[0]);
    int32_t i = 1;
    while (i < c->n - 1 && c->tok[i] < x) i++;
    double x0 = c->tok[i - 1], x1 = c->tok[i], y0 = c->ms[i - 1], y1 = c->ms[i];
    double y = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
    return y > 0 ? y : c->ms[0];
}

void sp_cost_fit_init(sp_cost_fit *f, const sp_cost_model *curve, double c_attn) {
    memset(f, 0, sizeof(*f));
    f->curve = *curve;
    f->c_attn = c_attn > 0 ? c_attn : 0;
    f->s = 1.0;
}

static double unscaled(const sp_cost_fit *f, double n_tok, double n_attn) {
    return sp_cost_at(&f->curve, n_tok) + f->c_attn * n_attn * 1e-3;
}

void sp_cost_fit_observe(sp_cost_fit *f, double n_tok, double n_attn, double ms) {
    if (!(ms >= 0) || !(n_tok > 0) || !(n_attn >= 0) || f->curve.n == 0) return;
    const double pred = unscaled(f, n_tok, n_attn);
    if (!(pred > 0)) return;
    double r = ms / pred;
    r = r < 0.25 ? 0.25 : r > 4.0 ? 4.0 : r;
    f->s += SP_COST_RATE * (r - f->s);
    f->n_obs++;
}

double sp_cost_fit_at(const sp_cost_fit *f, double n_tok, double n_attn) {
    const double y = f->s * unscaled(f, n_tok, n_attn);
    return y > 0 ? y : 0;
}

int32_t sp_spec_plan(const sp_cost_fit *target, const sp_cost_fit *draft, int32_t base_tokens,
                     double base_attn, double base_commit, const sp_spec_cand *cand,
                     int32_t n_cand, int32_t *k) {
    int32_t total = 0, kmax_draft = 0, catchup = 0;
    double draft_attn = 0, cu_attn = 0;
    int32_t n_draft = 0;
    for (int32_t i = 0; i < n_cand; i++) {
        k[i] = 0;
        if (cand[i].draft) {
            n_draft++;
            draft_attn += cand[i].ctx;
        }
    }
    double gain = base_commit;                 /* expected tokens committed */
    double gain_next[1024];                    /* alpha^(k+1) for each candidate */
    SP_ASSERT(n_cand <= 1024);
    for (int32_t i = 0; i < n_cand; i++) gain_next[i] = cand[i].alpha;
    /* one draft pass over every drafting candidate (their contexts grow by
     * one position per pass; the mean is close enough) */
    const double draft_pass = draft && n_draft ? sp_cost_fit_at(draft, n_draft, draft_attn) : 0;
    double attn = base_attn;
    double cost = sp_cost_fit_at(target, base_tokens, attn);
    if (gain <= 0 || cost <= 0) return 0;
    for (;;) {
        int32_t best = -1;
        for (int32_t i = 0; i < n_cand; i++)
            if (k[i] < cand[i].k_cap && (best < 0 || gain_next[i] > gain_next[best])) best = i;
        if (best < 0) break;
        const int32_t kmax2 = cand[best].draft ? SP_MAX(kmax_draft, k[best] + 1) : kmax_draft;
        const double attn2 = attn + cand[best].ctx + k[best] + 1;
        /* a draft that has been idle first catches up on what it missed */
        const bool joins = cand[best].draft && k[best] == 0;
        const int32_t cu2 = catchup + (joins ? cand[best].catchup : 0);
        const double cu_attn2 = cu_attn + (joins ? (double)cand[best].catchup * cand[best].ctx : 0);
        /* the first draft pass also feeds the catch-up tokens */
        const double dcost = draft && kmax2 > 0 ? sp_cost_fit_at(draft, n_draft + cu2, draft_attn + cu_attn2) +
                                             (kmax2 - 1) * draft_pass
                                       : 0;
        const double c2 = sp_cost_fit_at(target, base_tokens + total + 1, attn2) + dcost;
        const double g2 = gain + gain_next[best];
        /* the best marginal token no longer pays; the step's first must pay
         * by a margin, since the estimates it rests on (acceptance, pass
         * costs) are noisy and speculating for nothing is the costly error */
        if (g2 / c2 <= gain / cost * (total ? 1.0 : 1.0 + SP_PLAN_MARGIN)) break;
        gain = g2;
        cost = c2;
        attn = attn2;
        total++;
        k[best]++;
        kmax_draft = kmax2;
        catchup = cu2;
        cu_attn = cu_attn2;
        gain_next[best] *= cand[best].alpha;
    }
    return total;
}

int sp_spec_check_draft(const sp_model *target, const sp_model *draft, char *err, size_t errlen) {
    const sp_vocab *vt = sp_model_get_vocab(target), *vd = sp_model_get_vocab(draft);
    if (sp_vocab_kind_of(vt) != sp_vocab_kind_of(vd)) {
        sp_seterr(err, errlen, "the draft's tokenizer type differs from the target's");
        return -1;
    }
    const int32_t nt = sp_vocab_n_tokens(vt), nd = sp_vocab_n_tokens(vd);
    if (nd > nt) {
        sp_seterr(err, errlen, "the draft has %d tokens, more than the target's %d", nd, nt);
        return -1;
    }
    if (sp_vocab_bos(vt) != sp_vocab_bos(vd) || sp_vocab_eos(vt) != sp_vocab_eos(vd)) {
        sp_seterr(err, errlen, "special token ids differ (BOS %d/%d, EOS %d/%d for target/draft)",
                  sp_vocab_bos(vt), sp_vocab_bos(vd), sp_vocab_eos(vt), sp_vocab_eos(vd));
        return -1;
    }
    if (sp_model_get_info(draft)->n_vocab > sp_model_get_info(target)->n_vocab) {
        sp_seterr(err, errlen, "the draft's output has more rows than the target's");
        return -1;
    }
    for (int32_t i = 0; i < nd; i++) {
        const char *a = sp_vocab_token_text(vt, i), *b = sp_vocab_token_text(vd, i);
        if (strcmp(a ? a : "", b ? b : "") || sp_vocab_token_type(vt, i) != sp_vocab_token_type(vd, i)) {
            sp_seterr(err, errlen, "token %d differs between target ('%s') and draft ('%s')", i,
                      a ? a : "", b ? b : "");
            return -1;
        }
    }
    return 0;
}
