/* ngram.c: n-gram prompt lookup (see spec.h).
 *
 * One backward scan over the end positions j = n-2 .. 0 computes L(j), the
 * length of the longest common suffix of toks[0..j] and toks[0..n-1], capped
 * at n_max. The search "for m from n_max down to n_min, the most recent
 * occurrence of the last m tokens" picks m* = min(n_max, max_j L(j)) and the
 * largest j with L(j) >= m*; the scan keeps the first (most recent) j that
 * reaches each new maximum, and stops early once n_max is reached.
 * Cost: O(n * n_max) comparisons at worst, no allocation.
 */
#include "speculate/spec.h"

#include "common.h"

int32_t ngram_propose(const sp_token *toks, int32_t n, int32_t n_min, int32_t n_max, int32_t k,
                         sp_token *out) {
    if (!toks || !out || k <= 0 || n < 2) return 0;
    if (n_min < 1) n_min = 1;
    if (n_max < n_min) return 0;
    /* An occurrence ends at j <= n - 2, so m <= j + 1 <= n - 1. */
    if (n_max > n - 1) n_max = n - 1;
    if (n_max < n_min) return 0;

    const sp_token *tail = toks + n - 1; /* tail[-t] is the t-th token from the end */
    int32_t best_len = 0, best_j = -1;
    for (int32_t j = n - 2; j >= 0; j--) {
        if (toks[j] != tail[0]) continue;
        int32_t lim = SP_MIN(n_max, j + 1), len = 1;
        while (len < lim && toks[j - len] == tail[-len]) len++;
        if (len > best_len) {
            best_len = len;
            best_j = j;
            if (len == n_max) break;
        }
    }
    if (best_len < n_min) return 0;
    /* The continuation starts at best_j + 1 <= n - 1. When it runs into the
     * end of the history it goes on through the proposal itself: the
     * history, extended by the proposal, repeats with period n - 1 - best_j,
     * which is what a loop in the text (a repeated line, a copied block
     * with its own repeats) continues with; a plain copy would stop after
     * one period. */
    const int32_t cnt = k;
    for (int32_t i = 0; i < cnt; i++) {
        int32_t src = best_j + 1 + i;
        out[i] = src < n ? toks[src] : out[src - n];
    }
    return cnt;
}
