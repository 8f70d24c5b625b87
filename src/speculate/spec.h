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

#include <stdbool.h>
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
int32_t ngram_propose(const sp_token *toks, int32_t n, int32_t n_min, int32_t n_max, int32_t k,
                         sp_token *out);

/* ---- suffix matching ------------------------------------------------------ */

/* A bounded store of earlier requests' token sequences (their outputs, and
 * whatever else the engine adds), indexed so any recent context can be
 * matched against all of them. The engine keeps one per cache salt (see
 * partitions below), never one shared by every request. When it holds
 * more than max_tokens tokens, whole sequences are dropped, least recently
 * added first (propose takes the store const, so use does not refresh a
 * sequence). A sequence longer than max_tokens keeps only its last
 * max_tokens tokens.
 *
 * Both indexes are suffix tries of depth D = max_depth over every suffix
 * start; memory is ~40 bytes per trie node and a sequence of n tokens makes
 * at most n * min(n, D) nodes (fewer where text repeats): budget up to
 * ~40 * D bytes per stored token. Adding n tokens costs O(n * D). */
typedef struct suffix_store suffix_store;
/* max_depth: the longest context match plus proposal considered (e.g. 32;
 * values below 2 are taken as 2). NULL on out of memory. */
suffix_store *suffix_store_create(size_t max_tokens, int32_t max_depth);
void suffix_store_free(suffix_store *s);
/* Adds one finished sequence. 0, or -1 on out of memory (store unchanged). */
int suffix_store_add(suffix_store *s, const sp_token *toks, int32_t n);
size_t suffix_store_tokens(const suffix_store *s);
/* Drops the oldest sequence; returns its token count (0 when empty). */
size_t suffix_store_drop_oldest(suffix_store *s);
/* Dropping frees nodes into a free list but never shrinks the arrays; this
 * rebuilds the index at the present size when its arrays have room for
 * more than 4x the nodes the held sequences could need (so memory follows
 * what the store holds, not its peak). 1 rebuilt, 0 not needed, -1 out of
 * memory (the store is unchanged and still valid). O(tokens * D). */
int suffix_store_shrink(suffix_store *s);
/* Bytes held (index arrays at their capacity, plus the sequences). */
size_t suffix_store_bytes(const suffix_store *s);

/* Per-request index over its own prompt and output, grown as tokens are
 * committed. */
typedef struct suffix_seq suffix_seq;
suffix_seq *suffix_seq_create(int32_t max_depth);
void suffix_seq_free(suffix_seq *q);
/* Appends committed tokens (never speculative ones). 0, or -1 on OOM (q
 * unchanged). O(D) per token; allocates only when its arrays grow
 * (amortized doubling). */
int suffix_seq_append(suffix_seq *q, const sp_token *toks, int32_t n);

/* Proposes up to k_max tokens continuing the sequence indexed by q (its own
 * history) using both q and the store s of earlier outputs (either may be
 * NULL; the engine passes the store of the request's partition): the
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
int32_t suffix_propose(const suffix_store *s, const suffix_seq *q, int32_t k_max,
                          float min_prob, sp_token *out, float *prob);

/* For tests: check every internal invariant and recount the tries from the
 * stored sequences / the history. 0, or -1 with a message in err. */
int suffix_store_check(const suffix_store *s, char *err, size_t errlen);
int suffix_seq_check(const suffix_seq *q, char *err, size_t errlen);

/* ---- partitions: what speculation learns, kept apart per cache salt ------ */

/* Everything speculative decoding learns from one request and uses for
 * another (the suffix store of earlier outputs, the acceptance prior per
 * method) lives in a partition keyed by the request's cache salt, the same
 * string that isolates the prefix cache; requests without a salt share the
 * partition "". A request reads and feeds only its own partition, so what
 * it is proposed, how many tokens are drafted and accepted, and how long
 * that takes, depend only on requests of its own salt (tenant): a
 * different salt can never tell whether a text was generated before.
 *
 * Bounds: at most max_parts partitions (the least recently used one that no
 * request holds is dropped, with everything it learned, to make room) and
 * max_tokens stored tokens in all (when an add goes over, the least
 * recently used partitions lose their oldest sequences first; one
 * partition alone keeps at most max_tokens, dropping its own oldest).
 * Stores are created at their first add, freed when emptied and rebuilt
 * smaller when trimmed well below their peak (suffix_store_shrink), so
 * memory is proportional to the tokens held, ~40 * D bytes per token at
 * worst (x2 for array growth, x4 before a shrink), plus ~100 bytes and the
 * salt per partition. A lookup hashes the salt (FNV-1a: a tenant that
 * forges colliding salts only lengthens its own lookups, at most max_parts
 * long); nothing is allocated except when a partition or a store is
 * created or an add grows a store.
 * Not thread-safe: the engine touches it only under its lock (in practice
 * on its thread: admission, proposals, verification, finish). */
#define SP_SPEC_PRIOR0 0.5f /* a new partition's acceptance prior, every method */
#define SP_SPEC_PRIOR_RATE 0.05f /* its moving average's rate, once settled */
#define SP_SPEC_N_METHODS 4 /* priors indexed by sp_spec_mode: OFF (unused) .. DRAFT */

typedef struct spec_parts spec_parts;
typedef struct spec_part spec_part;

/* max_parts >= 1 (values below are taken as 1); max_tokens 0 stores
 * nothing; depth as suffix_store_create. NULL on out of memory. */
spec_parts *spec_parts_create(size_t max_tokens, int32_t max_parts, int32_t depth);
void spec_parts_free(spec_parts *m);
/* The partition of salt (NULL = ""), created if missing, made the most
 * recently used, and held: it is not dropped until every holder released
 * it (its store can still be trimmed). NULL when out of memory, or when all
 * max_parts partitions are held (a caller that holds fewer than max_parts
 * at a time never sees this). */
spec_part *spec_parts_acquire(spec_parts *m, const char *salt);
void spec_parts_release(spec_parts *m, spec_part *p);
/* The partition of salt if it exists (no side effects), else NULL. */
const spec_part *spec_parts_find(const spec_parts *m, const char *salt);
/* Adds a finished sequence to p's store within the bounds above; the store
 * is created on the first add. 0, or -1 on out of memory (nothing
 * changed). */
int spec_parts_add(spec_parts *m, spec_part *p, const sp_token *toks, int32_t n);
/* p's store for suffix_propose; NULL when it holds nothing. Valid until
 * the next add, acquire or release on the map. */
const suffix_store *spec_part_store(const spec_part *p);
/* p's acceptance prior per method ([SP_SPEC_N_METHODS], indexed by
 * sp_spec_mode), which the engine moves with every verification. */
float *spec_part_priors(spec_part *p);
float spec_part_prior(const spec_part *p, sp_spec_mode m); /* priors[m] */
/* Folds one acceptance observation of method m into p's prior: the mean of
 * SP_SPEC_PRIOR0 and the observations while there are fewer than
 * 1 / SP_SPEC_PRIOR_RATE, then a moving average at that rate. */
void spec_part_observe(spec_part *p, sp_spec_mode m, float obs);
const char *spec_part_salt(const spec_part *p);
int32_t spec_parts_count(const spec_parts *m);
size_t spec_parts_tokens(const spec_parts *m);
size_t spec_parts_bytes(const spec_parts *m);
/* For tests and sp_engine_check: the lookup table, LRU list, counts, token
 * total and bounds agree; held partitions number `holds` in total (-1: not
 * checked); with deep, each store is also recounted (suffix_store_check,
 * O(tokens * D)). 0, or -1 with a message in err. */
int spec_parts_check(const spec_parts *m, int64_t holds, bool deep, char *err,
                        size_t errlen);

#endif
