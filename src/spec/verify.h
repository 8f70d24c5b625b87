/* verify.h: exact verification of proposed tokens, the cost model that
 * decides how many to propose, and the draft-model compatibility check.
 *
 * Dimension legend: V n_vocab, n proposed tokens (draft[0..n)), logits
 * rows 0..n of the target for positions "after the last committed token",
 * "after draft[0]", ..., "after draft[n-1]".
 */
#ifndef SP_SPEC_VERIFY_H
#define SP_SPEC_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "specula.h"

/* Verifies draft[0..n) against the target's logits ([n+1][V], row i scores
 * the position draft[i] would take) under the request's sampler s, and
 * writes the tokens to commit to out (1..n+1 of them: the accepted prefix
 * of draft, then one token of the target's: the correction at the first
 * rejection, or the bonus token when all were accepted). Every committed
 * token is recorded with sp_sampler_accept, in order, so penalties see the
 * same history as plain decoding.
 *   Greedy sampler (temperature <= 0): accept while draft[i] equals what
 *   the sampler picks; the output is token for token that of plain decoding.
 *   Otherwise the speculative-sampling rule (Leviathan et al. 2023; Chen et
 *   al. 2023): accept draft[i] with probability min(1, p(d)/q(d)); at the
 *   first rejection draw from max(0, p - q) renormalized. q ([n][V]) is the
 *   distribution draft[i] was drawn from, or NULL for a deterministic
 *   proposer (a point mass on draft[i]). p is the sampler's final
 *   distribution (sp_sampler_probs). The committed tokens are then
 *   distributed exactly as plain sampling's.
 * probs and resid are [V] scratch buffers. Returns the count written. */
int32_t sp_spec_verify(sp_sampler *s, bool greedy, const float *logits, int32_t n_vocab,
                       const sp_token *draft, const float *q, int32_t n, sp_token *out,
                       float *probs, float *resid);

/* ---- cost model and the choice of k ------------------------------------- */

#define SP_COST_POINTS 12

/* Milliseconds of one forward pass as a function of the tokens in it,
 * measured at startup: piecewise linear between measured points, linear
 * extrapolation past the last. */
typedef struct {
    int32_t n;                    /* points measured */
    int32_t tok[SP_COST_POINTS];  /* increasing */
    double ms[SP_COST_POINTS];
} sp_cost_model;

double sp_cost_at(const sp_cost_model *c, double tokens);

/* What a pass costs while serving: s x (curve(n) + c_attn x A / 1000) for
 * n tokens attending A positions in total (the sum over the pass's tokens
 * of the positions each one attends to). The curve is measured at startup
 * in an empty context and c_attn from a pass at a long context: the curve
 * alone misses the attention that every verified token pays (at 400
 * positions about a third of a token's cost on the bundled model). The
 * scale s follows every measured pass (a moving average of measured /
 * predicted with weight SP_COST_RATE, each ratio clamped to [1/4, 4] so a
 * pass slowed by a preemption or the OS moves it little): whatever slows
 * the machine down since startup. One parameter, so it is identified by any
 * pass; fitting c_attn online as well was tried and is not: in steady
 * decoding the two terms move together and the fit drifted to
 * "everything is attention", which made verification look 5x dearer. */
#define SP_COST_RATE 0.05
typedef struct {
    sp_cost_model curve;
    double c_attn;    /* ms per 1000 attended positions (startup) */
    double s;         /* fitted scale */
    int64_t n_obs;
} sp_cost_fit;

/* s = 1; curve and c_attn (>= 0) copied. */
void sp_cost_fit_init(sp_cost_fit *f, const sp_cost_model *curve, double c_attn);
/* A measured pass of n_tok tokens attending n_attn positions in total
 * (nonsense values are ignored). */
void sp_cost_fit_observe(sp_cost_fit *f, double n_tok, double n_attn, double ms);
/* Predicted milliseconds of such a pass (>= 0). */
double sp_cost_fit_at(const sp_cost_fit *f, double n_tok, double n_attn);

/* One speculating sequence as the planner sees it. */
typedef struct {
    float alpha;     /* estimated probability each proposed token is accepted */
    int32_t k_cap;   /* most tokens it may propose this step */
    bool draft;      /* proposals cost draft-model passes */
    int32_t ctx;     /* positions its next token attends to (its length) */
    int32_t catchup; /* draft: committed tokens the draft has not seen yet,
                        fed with its first drafting pass */
} sp_spec_cand;

/* Chooses k[i] in 0..cand[i].k_cap for every candidate to maximize the
 * expected tokens committed per millisecond of the step: the batch already
 * holds base_tokens tokens attending base_attn positions (every decoder's
 * own token and any prefill), committing base_commit tokens for sure;
 * proposing k tokens for candidate i adds alpha + alpha^2 + ... + alpha^k
 * expected tokens and k tokens (attending about ctx positions each) to the
 * verification pass; draft proposals also cost one draft pass over the
 * drafting candidates per token of the longest draft, the first one also
 * over the tokens they must catch up on (draft may be NULL).
 * Greedy on the marginal gain, which is optimal here because each
 * candidate's gains decrease with k; the step's first proposed token must
 * raise tokens per ms by SP_PLAN_MARGIN. Returns the total proposed. */
#define SP_PLAN_MARGIN 0.10
int32_t sp_spec_plan(const sp_cost_fit *target, const sp_cost_fit *draft, int32_t base_tokens,
                     double base_attn, double base_commit, const sp_spec_cand *cand,
                     int32_t n_cand, int32_t *k);

/* ---- draft model ---------------------------------------------------------- */

/* 0 when the draft's vocabulary can propose for the target: same tokenizer
 * kind, same BOS/EOS ids, and identical token texts and types over the
 * ids both have (the draft may not have more tokens than the target).
 * Else -1 + the first difference in err. */
int sp_spec_check_draft(const sp_model *target, const sp_model *draft, char *err, size_t errlen);

#endif
