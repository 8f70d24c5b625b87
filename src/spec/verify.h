/* verify.h: exact verification of proposed tokens (the planner that
 * decides how many to propose is in planner.h, the draft model in draft.h).
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

#endif
