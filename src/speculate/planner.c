/* planner.c: the cost model of a forward pass (measured at startup,
 * refitted online) and the choice of k per speculating sequence. */
#include "speculate/planner.h"

#include <string.h>

#include "common.h"
#include "kv/kv_paged.h"

double cost_at(const cost_model *c, double x) {
    if (c->n == 0) return x; /* unmeasured: pessimistic, every token costs a pass */
    if (c->n == 1) return c->ms[0] * (x / c->tok[0]);
    int32_t i = 1;
    while (i < c->n - 1 && c->tok[i] < x) i++;
    double x0 = c->tok[i - 1], x1 = c->tok[i], y0 = c->ms[i - 1], y1 = c->ms[i];
    double y = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
    return y > 0 ? y : c->ms[0];
}

void cost_fit_init(cost_fit *f, const cost_model *curve, double c_attn) {
    memset(f, 0, sizeof(*f));
    f->curve = *curve;
    f->c_attn = c_attn > 0 ? c_attn : 0;
    f->s = 1.0;
}

static double unscaled(const cost_fit *f, double n_tok, double n_attn) {
    return cost_at(&f->curve, n_tok) + f->c_attn * n_attn * 1e-3;
}

void cost_fit_observe(cost_fit *f, double n_tok, double n_attn, double ms) {
    if (!(ms >= 0) || !(n_tok > 0) || !(n_attn >= 0) || f->curve.n == 0) return;
    const double pred = unscaled(f, n_tok, n_attn);
    if (!(pred > 0)) return;
    double r = ms / pred;
    r = r < 0.25 ? 0.25 : r > 4.0 ? 4.0 : r;
    f->s += SP_COST_RATE * (r - f->s);
    f->n_obs++;
}

double cost_fit_at(const cost_fit *f, double n_tok, double n_attn) {
    const double y = f->s * unscaled(f, n_tok, n_attn);
    return y > 0 ? y : 0;
}

int32_t spec_plan(const cost_fit *target, const cost_fit *draft, int32_t base_tokens,
                     double base_attn, double base_commit, const spec_cand *cand,
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
    double gain_next[SP_PLAN_MAX_CANDS];       /* alpha^(k+1) for each candidate */
    SP_ASSERT(n_cand <= SP_PLAN_MAX_CANDS);
    for (int32_t i = 0; i < n_cand; i++) gain_next[i] = cand[i].alpha;
    /* one draft pass over every drafting candidate (their contexts grow by
     * one position per pass; the mean is close enough) */
    const double draft_pass = draft && n_draft ? cost_fit_at(draft, n_draft, draft_attn) : 0;
    double attn = base_attn;
    double cost = cost_fit_at(target, base_tokens, attn);
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
        const double dcost = draft && kmax2 > 0 ? cost_fit_at(draft, n_draft + cu2, draft_attn + cu_attn2) +
                                             (kmax2 - 1) * draft_pass
                                       : 0;
        const double c2 = cost_fit_at(target, base_tokens + total + 1, attn2) + dcost;
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

/* ---- measuring pass costs ------------------------------------------------- */

/* Times one pass of n tokens in an empty slot for n = 1, 2, 4, ... so the
 * planner knows what verifying k more tokens costs. Attention over a long
 * context is not in these passes; cost_measure_attn adds it. */
void cost_measure(sp_context *c, kv_store *kv, int32_t slot, int32_t max_n, int32_t n_vocab,
                     cost_model *out) {
    sp_token toks[SP_COST_MAX_TOKENS];
    int32_t pos[SP_COST_MAX_TOKENS], seq[SP_COST_MAX_TOKENS];
    int8_t want[SP_COST_MAX_TOKENS] = {0};
    out->n = 0;
    for (int32_t n = 1; n <= max_n && n <= SP_COST_MAX_TOKENS && out->n < SP_COST_POINTS; n *= 2) {
        if (kv_paged_blocks_needed(kv, slot, n) > kv_paged_available(kv)) break;
        /* rep 0 warms up (first touch of the pool's pages, cold caches: it
         * is up to 10x slower, and a draft measured that slow would never
         * draft, so never be measured again); the best of the rest counts */
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            for (int32_t i = 0; i < n; i++) {
                toks[i] = (sp_token)((7 + 31 * i) % n_vocab);
                pos[i] = i;
                seq[i] = slot;
            }
            want[n - 1] = 1;
            sp_batch b = {n, toks, pos, seq, want};
            char err[128];
            double t0 = time_ms();
            int rc = sp_decode(c, &b, err, sizeof(err));
            double t = time_ms() - t0;
            want[n - 1] = 0;
            sp_seq_clear(c, slot);
            if (rc) return;
            if (rep && t < best) best = t;
        }
        out->tok[out->n] = n;
        out->ms[out->n++] = best;
    }
}

/* The cost of attention per 1000 positions attended: one token at position
 * P against one at position 0, interleaved, best of 5 each (one quiet pass
 * of each is enough; a single early sample is often slower than the long
 * one). The P positions are only reserved, not computed (what they hold
 * does not change the time), so this costs ten passes whatever the model.
 * 0 when the pool or context is too small. */
static double time_one(sp_context *c, int32_t slot, int32_t pos, int32_t n_vocab) {
    sp_token tok = (sp_token)(17 % n_vocab);
    int32_t seq = slot;
    int8_t want = 1;
    sp_batch b = {1, &tok, &pos, &seq, &want};
    char err[128];
    const double t0 = time_ms();
    const int rc = sp_decode(c, &b, err, sizeof(err));
    const double t = time_ms() - t0;
    return rc ? -1 : t;
}

double cost_measure_attn(sp_context *c, kv_store *kv, int32_t slot, int32_t n_ctx, int32_t n_vocab) {
    const int32_t P = SP_MIN(n_ctx - 1, 1024);
    if (P < 64 || kv_paged_blocks_needed(kv, slot, P + 1) > kv_paged_available(kv)) return 0;
    double best0 = 1e30, bestP = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = time_one(c, slot, 0, n_vocab);
        sp_seq_clear(c, slot);
        if (t0 < 0 || kv->ops->reserve(kv, slot, P)) return 0;
        kv->ops->set_len(kv, slot, P);
        const double tP = time_one(c, slot, P, n_vocab);
        sp_seq_clear(c, slot);
        if (tP < 0) return 0;
        best0 = SP_MIN(best0, t0);
        bestP = SP_MIN(bestP, tP);
    }
    return bestP > best0 ? (bestP - best0) / (P * 1e-3) : 0;
}
