/* spec.h: speculative-decoding proposers that need no model: n-gram prompt
 * lookup and suffix matching (SuffixDecoding). Both guess the next tokens
 * of a sequence from text seen before; the engine verifies every guess with
 * the target model, so a wrong guess costs time, never correctness.
 *
 * Both are deterministic proposers (a point mass on each proposed token);
 * neither allocates in the per-step path except where noted.
 * Not thread-safe: the engine thread owns them.
 */
#ifndef SP_SPEC_H
#define SP_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "specula.h"

/* ---- n-gram prompt lookup ------------------------------------------------ */

/* toks[0..n) is the sequence so far (prompt then output). For m from n_max
 * down to n_min, finds the most recent earlier occurrence of its last m
 * tokens (an occurrence ending before position n - 1) and copies up to k
 * tokens that followed it into out. Returns how many (0 when nothing
 * matches). 1 <= n_min <= n_max.
 * Precisely: the first m (largest, m <= n - 1) with an occurrence
 * toks[j-m+1..j] == toks[n-m..n-1] at some j <= n - 2 wins, and among its
 * occurrences the largest j. The proposal is k tokens: out[i] =
 * toks[j+1+i] while that is inside the history, then out[j+1+i-n], i.e.
 * the continuation runs on periodically through the proposal itself (in
 * "a b a b a b" the last "a b" matches at j = 3 and k = 5 proposes
 * "a b a b a"), so a loop in the text is proposed to the full k.
 * O(n * n_max) at worst; no allocation. */
int32_t sp_ngram_propose(const sp_token *toks, int32_t n, int32_t n_min, int32_t n_max, int32_t k,
                         sp_token *out);

/* ---- suffix matching ------------------------------------------------------ */

/* A bounded store of earlier requests' token sequences (their outputs, and
 * whatever else the engine adds), indexed so any recent context can be
 * matched against all of them. When it holds more than max_tokens tokens,
 * whole sequences are dropped, least recently added first (propose takes
 * the store const, so use does not refresh a sequence). A sequence longer
 * than max_tokens keeps only its last max_tokens tokens.
 *
 * Both indexes are suffix tries of depth D = max_depth over every suffix
 * start; memory is ~40 bytes per trie node and a sequence of n tokens makes
 * at most n * min(n, D) nodes (fewer where text repeats): budget up to
 * ~40 * D bytes per stored token. Adding n tokens costs O(n * D). */
typedef struct sp_suffix_store sp_suffix_store;
/* max_depth: the longest context match plus proposal considered (e.g. 32;
 * values below 2 are taken as 2). NULL on out of memory. */
sp_suffix_store *sp_suffix_store_create(size_t max_tokens, int32_t max_depth);
void sp_suffix_store_free(sp_suffix_store *s);
/* Adds one finished sequence. 0, or -1 on out of memory (store unchanged). */
int sp_suffix_store_add(sp_suffix_store *s, const sp_token *toks, int32_t n);
size_t sp_suffix_store_tokens(const sp_suffix_store *s);

/* Per-request index over its own prompt and output, grown as tokens are
 * committed. */
typedef struct sp_suffix_seq sp_suffix_seq;
sp_suffix_seq *sp_suffix_seq_create(int32_t max_depth);
void sp_suffix_seq_free(sp_suffix_seq *q);
/* Appends committed tokens (never speculative ones). 0, or -1 on OOM (q
 * unchanged). O(D) per token; allocates only when its arrays grow
 * (amortized doubling). */
int sp_suffix_seq_append(sp_suffix_seq *q, const sp_token *toks, int32_t n);

/* Proposes up to k_max tokens continuing the sequence indexed by q (its own
 * history) using both q and the global store s (either may be NULL): the
 * longest suffix of the history that occurs before (in q) or anywhere (in
 * s) is matched, and the proposal follows the most frequent continuation,
 * token by token, while the estimated probability that the whole proposal
 * so far is accepted (product of continuation frequencies) stays above
 * min_prob; the length limit also grows with the match length (a short
 * match earns a short proposal). prob[i], if not NULL, receives that
 * estimate after i + 1 tokens. Returns the proposal length (0..k_max).
 *
 * Precisely, with h = q's history (n tokens; nothing is proposed without q)
 * and D each index's depth:
 * - Match: in each index, the longest m <= min(n, D - min(k_max, D/2)) (and
 *   >= 1, <= D - 1) such that h[n-m..n) occurred followed by some token, within
 *   the history before its last token (q) or in a stored sequence (s). The
 *   longer of the two matches is used; at equal lengths both are, their
 *   counts summed. No match (m = 0): returns 0.
 * - Walk: from the matched context, repeatedly take the continuation token c
 *   with the highest count (ties: the smallest id), and multiply the
 *   estimate by count(c) / (sum of all continuation counts there); stop
 *   before a token whose estimate would fall below min_prob, when no
 *   continuation was seen (context + proposal reach depth D, or the text
 *   ends), or at min(k_max, 2 * m) tokens.
 * No allocation; cost O(D log D) hash lookups for the match plus, per
 * proposed token, the number of distinct continuations seen there. */
int32_t sp_suffix_propose(const sp_suffix_store *s, const sp_suffix_seq *q, int32_t k_max,
                          float min_prob, sp_token *out, float *prob);

/* For tests: check every internal invariant and recount the tries from the
 * stored sequences / the history. 0, or -1 with a message in err. */
int sp_suffix_store_check(const sp_suffix_store *s, char *err, size_t errlen);
int sp_suffix_seq_check(const sp_suffix_seq *q, char *err, size_t errlen);

#endif
