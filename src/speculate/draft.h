/* draft.h: the draft-model proposer. A small model with the target's
 * vocabulary proposes k tokens per sequence by k autoregressive passes,
 * batched across the drafting sequences; it keeps its own paged KV (slot i
 * is the target's slot i) and its own measured pass cost. It never runs
 * the target: its proposals reach the target only as tokens in the
 * engine's verification batch.
 * Not thread-safe: the engine thread owns it.
 */
#ifndef SP_SPEC_DRAFT_H
#define SP_SPEC_DRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "specula.h"
#include "speculate/planner.h"

/* 0 when the draft's vocabulary can propose for the target: same tokenizer
 * kind, same BOS/EOS ids, and identical token texts and types over the
 * ids both have (the draft may not have more tokens than the target).
 * Else -1 + the first difference in err. */
int spec_check_draft(const sp_model *target, const sp_model *draft, char *err, size_t errlen);


typedef struct {
    const sp_model *m;
    struct kv_store *kv;          /* its own paged KV, slot i = target slot i */
    sp_context *ctx;
    int32_t n_vocab;           /* the draft's (<= the target's) */
    int32_t max_batch;         /* tokens per draft pass */
    cost_model cost;        /* measured pass cost (drafter_calibrate) */
    cost_fit fit;           /* the same, refitted to every draft pass since */
    bool fitting;              /* feed passes to fit (set once calibrated) */
    sp_token *tok;             /* [max_batch] the pass's batch */
    int32_t *pos, *seq;        /* [max_batch] */
    int8_t *want;              /* [max_batch] */
    int32_t *off;              /* [n_seq_max] the slot's first position the draft
                                  holds: its KV position i is the sequence's off + i */
} drafter;

/* A backlog over this many tokens (a prompt the draft never saw, or the
 * steps it sat out) is not fed whole: the draft restarts on the last
 * SP_DRAFT_WINDOW committed tokens, its positions re-based so that they
 * start at 0 (attention sees the same relative distances). Its proposals
 * then rest on that window; verification makes any proposal safe, and the
 * catch-up of a cold sequence costs a window, not its prompt. */
#define SP_DRAFT_WINDOW 64

/* Creates the draft's pool (as many blocks as the target's n_blocks plus one
 * spare per sequence) and context; ctx_p is the target's context
 * parameters, run on share_threads' thread pool. NULL + err on failure. */
drafter *drafter_create(const sp_model *draft, sp_context_params ctx_p, sp_kv_type kv_type,
                              int32_t block_size, int32_t n_blocks, int32_t max_blocks_per_seq,
                              const sp_context *share_threads, char *err, size_t errlen);
void drafter_free(drafter *d);

/* One sequence to draft for. */
typedef struct {
    int32_t slot;
    const sp_token *toks;      /* committed tokens [n_all] */
    int32_t n_all;
    int32_t k;                 /* in: tokens to propose; out: proposed (0 on failure) */
    sp_token *out;             /* [k] */
    sp_sampler *smp;           /* the draft's own sampler, or NULL (greedy: the argmax).
                                  Proposal j is its sp_sampler_sample_at at position
                                  n_all + j: with the request's seed, the same noise
                                  the target's token there is drawn with */
} draft_seq;

/* Drafts for seqs[0..n): catches the draft's KV up with each sequence's
 * committed tokens (with its first pass, or in passes of its own when the
 * backlog is larger than a batch), then max k autoregressive passes. On a
 * failed pass every k becomes 0 and the KV is trimmed to the committed
 * tokens. Returns the milliseconds spent. */
double drafter_run(drafter *d, draft_seq *seqs, int32_t n);
/* Committed tokens of slot the draft has not seen yet (counting from the
 * start of its window). */
int32_t drafter_backlog(const drafter *d, int32_t slot, int32_t n_all);
/* Drops what the draft holds of slot past len (rejected proposals). */
void drafter_truncate(drafter *d, int32_t slot, int32_t len);
void drafter_clear(drafter *d, int32_t slot);
/* Measures the draft's pass cost in the empty slot (see cost_measure)
 * and starts its fit; fitting stays off until the caller sets it. */
void drafter_calibrate(drafter *d, int32_t slot, int32_t max_n, int32_t n_ctx);

#endif
