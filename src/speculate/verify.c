/* verify.c: the acceptance rule of speculative decoding, one rule for
 * greedy and sampled requests: the target's token at each position is
 * drawn positionally (sp_sampler_sample_at: a fixed function of the
 * position's logits, the seed and the position), and a proposal is
 * accepted exactly when it equals that token. What is committed is then
 * token for token what plain decoding commits; the only thing speculation
 * changes is how many target passes that takes. */
#include "speculate/verify.h"

#include "common.h"

int32_t spec_verify(sp_sampler *s, const float *logits, int32_t V, int64_t pos,
                       const sp_token *draft, int32_t n, sp_token *out) {
    for (int32_t i = 0; i <= n; i++) {
        const sp_token t = sp_sampler_sample_at(s, logits + (size_t)i * V, pos + i);
        sp_sampler_accept(s, t);
        out[i] = t;
        if (i == n || t != draft[i]) return i + 1; /* a correction, or the bonus token */
    }
    return n + 1; /* not reached */
}
