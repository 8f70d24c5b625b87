/* verify.h: exact verification of proposed tokens (the planner that
 * decides how many to propose is in planner.h, the draft model in draft.h).
 *
 * Dimension legend: V n_vocab, n proposed tokens (draft[0..n)), logits
 * rows 0..n of the target for positions "after the last committed token",
 * "after draft[0]", ..., "after draft[n-1]"; pos the sequence position row 0
 * draws (the request's committed length).
 */
#ifndef SP_SPEC_VERIFY_H
#define SP_SPEC_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "specula.h"

/* Verifies draft[0..n) against the target's logits ([n+1][V], row i scores
 * the position draft[i] would take, pos + i) under the request's sampler s,
 * and writes the tokens to commit to out (1..n+1 of them: the accepted
 * prefix of draft, then one token of the target's: the correction at the
 * first rejection, or the bonus token when all were accepted).
 *   Row i's token is sp_sampler_sample_at(s, row i, pos + i), the token
 *   plain decoding draws there (argmax when greedy; the Gumbel-max with the
 *   noise of (seed, pos + i) when sampling), and draft[i] is accepted
 *   exactly when it equals it. The output is then token for token that of
 *   plain decoding with the same seed, whoever proposed, and distributed
 *   exactly as plain sampling. A proposer that guesses with the same noise
 *   (the draft model does: sp_sampler_sample_at with the request's seed on
 *   its own logits) is accepted with probability at least
 *   (1 - TV) / (1 + TV), TV the total variation between the two
 *   distributions (the Gumbel coupling); at most 1 - TV, what rejection
 *   sampling reaches, which cannot reproduce a seeded text.
 * Every committed token is recorded with sp_sampler_accept, in order, so
 * penalties see the same history as plain decoding. Returns the count
 * written. */
int32_t spec_verify(sp_sampler *s, const float *logits, int32_t n_vocab, int64_t pos,
                       const sp_token *draft, int32_t n, sp_token *out);

#endif
