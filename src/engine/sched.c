/* sched.c: scheduling. Which requests run this step and with how many
 * tokens, under a budget of max_batch_tokens tokens:
 *   1. running requests that decode (1 token each), oldest first;
 *   2. running requests still prefilling, oldest first, in chunks;
 *   3. waiting requests by priority then arrival, while a slot is free and
 *      the pool can hold their whole remaining prompt (admission reuses the
 *      longest cached prefix).
 * When the pool cannot hold a running request's next tokens, the newest
 * running request is preempted: its blocks go back (full ones stay cached,
 * so re-admission usually finds them) and it waits at its old place.
 * Also a request's end (finish) and the prefix cache's commits of the
 * blocks a request filled. Engine thread, under the lock. */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

/* ---- the waiting queue ---------------------------------------------------- */

static bool before(const request *a, const request *b) {
    return a->priority != b->priority ? a->priority > b->priority : a->seqno < b->seqno;
}

void eng_wait_insert(sp_engine *e, request *r) {
    SP_ASSERT(e->n_waiting < e->wait_cap);
    int32_t i = e->n_waiting;
    while (i > 0 && before(r, e->waiting[i - 1])) {
        e->waiting[i] = e->waiting[i - 1];
        i--;
    }
    e->waiting[i] = r;
    e->n_waiting++;
    r->state = RQ_WAITING;
}

static void wait_remove(sp_engine *e, request *r) {
    for (int32_t i = 0; i < e->n_waiting; i++)
        if (e->waiting[i] == r) {
            memmove(e->waiting + i, e->waiting + i + 1,
                    (size_t)(e->n_waiting - i - 1) * sizeof(request *));
            e->n_waiting--;
            return;
        }
}

/* ---- slots ---------------------------------------------------------------- */

/* Returns the slot's blocks to the pool (committed ones stay cached). */
static void release_slot(sp_engine *e, request *r) {
    if (r->slot < 0) return;
    eng_spec_release(e, r);
    sp_seq_clear(e->ctx, r->slot);
    e->slots[r->slot] = NULL;
    r->slot = -1;
    r->n_committed = 0;
    e->n_running--;
}

void eng_finish(sp_engine *e, request *r, sp_finish_reason why) {
    if (r->state == RQ_DONE) return;
    if (r->state == RQ_WAITING) wait_remove(e, r);
    /* the output feeds later suffix proposals of its own salt only */
    if (why != SP_FINISH_ERROR && r->n_all > r->n_prompt) eng_spec_learn(e, r);
    release_slot(e, r);
    eng_grammar_release(e, r);
    r->state = RQ_DONE;
    r->st.finish = why;
    r->text_released = r->text_len;
    double t = time_ms();
    if (r->t_first > 0) {
        r->st.decode_ms = r->t_last - r->t_first;
        int32_t n = r->n_all - r->n_prompt;
        r->st.tpot_ms = n > 1 ? r->st.decode_ms / (n - 1) : 0.0;
    } else if (r->t_sched > 0) {
        r->st.prefill_ms = t - r->t_sched;
    }
    e->st.finished++;
    if (why == SP_FINISH_CANCELLED) e->st.cancelled++;
}

/* ---- the prefix cache ----------------------------------------------------- */

/* Hashes of toks' first n_blocks full blocks into r->hashes; the blocks
 * hashed before are kept (toks only grows), so each is hashed once. */
static int32_t hash_blocks(sp_engine *e, request *r, int32_t n_blocks) {
    if (n_blocks <= r->n_hashed) return n_blocks;
    const size_t sl = r->salt ? strlen(r->salt) : 0;
    int32_t got = block_hash_extend(r->toks, n_blocks * e->p.kv_block_size, e->p.kv_block_size,
                                       e->model_key, sizeof(e->model_key),
                                       (const uint8_t *)r->salt, sl, r->hashes, r->n_hashed);
    if (got > r->n_hashed) r->n_hashed = got; /* -1: libcrypto out of memory */
    return r->n_hashed < n_blocks ? r->n_hashed : n_blocks;
}

void eng_commit_blocks(sp_engine *e, request *r) {
    if (!e->p.prefix_cache) return;
    const int32_t bs = e->p.kv_block_size;
    int32_t full = kv_len(e, r) / bs;
    if (full <= r->n_committed) return;
    full = hash_blocks(e, r, full); /* fewer only when hashing ran out of memory */
    for (int32_t b = r->n_committed; b < full; b++) {
        kv_paged_commit(e->kv, r->slot, b, &r->hashes[b]);
        eng_disk_put(e, r, b); /* a copy, queued for the disk tier */
    }
    if (full > r->n_committed) r->n_committed = full;
}

/* ---- admission and preemption --------------------------------------------- */

static void preempt(sp_engine *e, request *r) {
    release_slot(e, r);
    eng_wait_insert(e, r);
    r->st.preemptions++;
    e->st.preemptions++;
}

static request *newest_running(sp_engine *e) {
    request *best = NULL;
    for (int32_t s = 0; s < e->p.max_seqs; s++) {
        request *r = e->slots[s];
        if (r && (!best || r->admit_no > best->admit_no)) best = r;
    }
    return best;
}

/* The first admission's accounting: queueing time, cache hits, and the
 * acceptance prior it starts from. */
static void first_admission(sp_engine *e, request *r, int32_t hit_tokens, int32_t disk_tokens) {
    r->admitted_once = true;
    /* the prior: how its method has done for requests of the same salt */
    r->alpha = r->part ? spec_part_prior(r->part, r->spec) : SP_SPEC_PRIOR0;
    for (int m = SP_SPEC_NGRAM; r->spec_auto && m <= SP_SPEC_DRAFT; m++) { /* each proposer's */
        r->alpha_by[m] = r->part ? spec_part_prior(r->part, (sp_spec_mode)m) : SP_SPEC_PRIOR0;
        r->n_obs_by[m] = 0;
    }
    r->t_sched = time_ms();
    r->st.queue_ms = r->t_sched - r->t_submit;
    r->st.cached_tokens = hit_tokens;
    r->st.cached_tokens_disk = disk_tokens;
    e->st.prompt_tokens += (uint64_t)r->n_prompt;
    if (e->p.prefix_cache) {
        e->st.cache_query_tokens += (uint64_t)r->n_prompt;
        e->st.cache_hit_tokens += (uint64_t)hit_tokens;
        e->st.cache_hit_tokens_disk += (uint64_t)disk_tokens;
    }
    int32_t bucket = (int32_t)((int64_t)hit_tokens * 10 / r->n_prompt);
    e->st.h_tokens_hist[SP_MIN(bucket, 10)]++;
}

/* Admits r into a free slot, reusing its longest cached prefix (the RAM
 * tier's match, continued in the disk tier when there is one). Returns
 * false (nothing changed) when the pool cannot hold the rest of its prompt
 * beside the `reserved` blocks this step already promised. Counting the
 * matched blocks as if they were taken from the pool too keeps the test
 * simple and errs towards waiting; a lone request always fits, because the
 * pool holds one full context plus a block. */
static bool admit(sp_engine *e, request *r, int32_t reserved) {
    int32_t slot = 0;
    while (e->slots[slot]) slot++;
    const int32_t bs = e->p.kv_block_size;
    /* at least the last token is computed so a full hit still yields logits */
    int32_t hit = 0, usable = 0, from_disk = 0;
    if (e->p.prefix_cache) {
        usable = hash_blocks(e, r, (r->n_all - 1) / bs);
        hit = kv_paged_match(e->kv, r->hashes, usable);
    }
    int32_t need = (r->n_all - hit * bs + bs - 1) / bs + 1; /* +1: room to decode */
    if (hit + need > kv_paged_available(e->kv) - reserved) return false;
    if (hit && kv_paged_attach(e->kv, slot, r->hashes, hit)) hit = 0;
    e->slots[slot] = r;
    e->n_running++;
    r->slot = slot;
    /* the blocks restored take the place of blocks need counted as computed */
    if (hit < usable) hit += eng_disk_restore(e, r, hit, usable, &from_disk);
    r->n_committed = hit;
    r->admit_no = e->next_admit++;
    /* NULL only out of memory: then it speculates from its own text alone */
    eng_spec_admit(e, r);
    if (!r->admitted_once) first_admission(e, r, hit * bs, from_disk * bs);
    return true;
}

/* ---- the batch's entries -------------------------------------------------- */

static bool in_batch(const step *s, const request *r) {
    for (int32_t i = 0; i < s->n_ent; i++)
        if (s->ent[i].r == r) return true;
    return false;
}

static void add_entry(step *s, request *r, int32_t n) {
    s->ent[s->n_ent++] = (step_entry){r, n, 0, 0};
}

/* The running request of the given kind (decoding or prefilling) admitted
 * first that is not in the batch yet, or NULL. */
static request *oldest_running(sp_engine *e, const step *s, bool decoding) {
    request *pick = NULL;
    for (int32_t i = 0; i < e->p.max_seqs; i++) {
        request *r = e->slots[i];
        if (!r || r->throttled || (r->n_all - kv_len(e, r) == 1) != decoding || in_batch(s, r))
            continue;
        if (!pick || r->admit_no < pick->admit_no) pick = r;
    }
    return pick;
}

/* Marks the running requests that sit this step out to repay their
 * grammar's work (constrain.c), unless all would: then none does (there
 * is nobody to make room for). */
static void mark_throttled(sp_engine *e) {
    int32_t n_run = 0, n_thr = 0;
    for (int32_t i = 0; i < e->p.max_seqs; i++) {
        request *r = e->slots[i];
        if (!r) continue;
        n_run++;
        n_thr += r->throttled = eng_grammar_throttled(r);
    }
    if (n_thr < n_run) {
        e->st.grammar_throttled += (uint64_t)n_thr;
        return;
    }
    for (int32_t i = 0; i < e->p.max_seqs; i++)
        if (e->slots[i]) e->slots[i]->throttled = false;
}

/* Forms this step's batch entries in s->ent; returns their count. */
int32_t eng_schedule(sp_engine *e, step *s) {
    int32_t budget = e->p.max_batch_tokens, reserved = 0; /* blocks the entries will take */
    s->n_ent = 0;
    mark_throttled(e);
    /* passes 0 and 1: running requests, decoders first, oldest first */
    for (int pass = 0; pass < 2; pass++) {
        request *pick;
        while (budget > 0 && (pick = oldest_running(e, s, pass == 0))) {
            int32_t n = SP_MIN(pick->n_all - kv_len(e, pick), budget);
            int32_t need = kv_paged_blocks_needed(e->kv, pick->slot, n);
            while (pick->slot >= 0 && need > kv_paged_available(e->kv) - reserved) {
                /* take blocks back from the newest request not yet in the
                 * batch (pick itself when it is the newest) */
                request *victim = newest_running(e);
                if (in_batch(s, victim)) victim = pick;
                preempt(e, victim);
            }
            if (pick->slot < 0) continue;
            reserved += need;
            budget -= n;
            add_entry(s, pick, n);
        }
    }
    /* pass 2: admission, by priority then arrival; the head of the line
     * waits for blocks rather than letting later requests overtake it */
    while (budget > 0 && e->n_waiting > 0 && e->n_running < e->p.max_seqs) {
        request *r = e->waiting[0];
        const int g = eng_grammar_admit(e, r); /* its grammar's matcher, first */
        if (g < 0) {
            eng_finish(e, r, SP_FINISH_ERROR);
            continue;
        }
        if (!g || !admit(e, r, reserved)) break;
        wait_remove(e, r);
        r->state = RQ_RUNNING;
        int32_t n = SP_MIN(r->n_all - kv_len(e, r), budget);
        reserved += kv_paged_blocks_needed(e->kv, r->slot, n);
        budget -= n;
        add_entry(s, r, n);
    }
    return s->n_ent;
}
