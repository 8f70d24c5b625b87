/* step.c: one step of the engine. The scheduler picks the batch's entries
 * (sched.c), speculation may grow decoding entries to 1 + k tokens
 * (speculate.c), then the step lays the entries out as one batch, runs the
 * target's forward pass unlocked, and commits each entry's result from the
 * logits rows that the batch's layout assigned to it (step_entry.row,
 * .n_rows: the explicit map from output rows to requests).
 *
 * A request is one token array, prompt followed by what it generated
 * (toks[0..n_all)), and a count of positions whose K/V are in its slot
 * (kv_len, the sequence length of its slot). Every step it is given the
 * tokens toks[kv_len .. kv_len + n): a prefill chunk when n > 1, a decode
 * token when n_all - kv_len == 1, and after a preemption the same path
 * recomputes prompt and output alike. Logits are asked for only when the
 * chunk reaches n_all (and for every proposal). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/internal.h"

int step_init(step *s, int32_t B, int32_t S) {
    memset(s, 0, sizeof(*s));
    s->tok = malloc((size_t)B * sizeof(sp_token));
    s->pos = malloc((size_t)B * sizeof(int32_t));
    s->seq = malloc((size_t)B * sizeof(int32_t));
    s->want = malloc((size_t)B);
    s->ent = malloc((size_t)S * sizeof(step_entry));
    s->cand = malloc((size_t)S * sizeof(spec_cand));
    s->cand_k = malloc((size_t)S * sizeof(int32_t));
    s->cand_entry = malloc((size_t)S * sizeof(int32_t));
    s->dseq = malloc((size_t)S * sizeof(draft_seq));
    s->dseq_entry = malloc((size_t)S * sizeof(int32_t));
    s->commit = malloc((SP_SPEC_K_MAX + 1) * sizeof(sp_token));
    s->events = malloc((size_t)S * sizeof(sp_event));
    s->ev_req = malloc((size_t)S * sizeof(request *));
    return s->tok && s->pos && s->seq && s->want && s->ent && s->cand && s->cand_k &&
                   s->cand_entry && s->dseq && s->dseq_entry && s->commit && s->events &&
                   s->ev_req
               ? 0
               : SP_ERR_NOMEM;
}

void step_free(step *s) {
    free(s->tok);
    free(s->pos);
    free(s->seq);
    free(s->want);
    free(s->ent);
    free(s->cand);
    free(s->cand_k);
    free(s->cand_entry);
    free(s->dseq);
    free(s->dseq_entry);
    free(s->commit);
    free(s->events);
    free(s->ev_req);
}

/* Counts the committed tokens [from, from + real) an entry computes as
 * prefill (first time) or recomputation (after a preemption). */
static void account(sp_engine *e, request *r, int32_t from, int32_t real) {
    if (from + real > r->max_computed) {
        int32_t fresh_from = SP_MAX(from, r->max_computed);
        e->st.recomputed_tokens += (uint64_t)(fresh_from - from);
        int32_t pf_end = SP_MIN(from + real, r->n_prompt);
        if (pf_end > fresh_from) e->st.prefill_tokens += (uint64_t)(pf_end - fresh_from);
        r->max_computed = from + real;
    } else {
        e->st.recomputed_tokens += (uint64_t)real;
    }
}

/* Lays the entries out as the target's batch, each entry's tokens in a run,
 * and records which logits rows belong to which entry. Returns how many
 * entries speculate. */
static int32_t build_batch(sp_engine *e, step *s) {
    int32_t nt = 0, rows = 0, n_spec = 0;
    for (int32_t i = 0; i < s->n_ent; i++) {
        step_entry *en = &s->ent[i];
        request *r = en->r;
        const int32_t from = kv_len(e, r);
        en->row = rows;
        for (int32_t j = 0; j < en->n; j++, nt++) {
            const int32_t p = from + j;
            s->tok[nt] = p < r->n_all ? r->toks[p] : r->draft[p - r->n_all];
            s->pos[nt] = p;
            s->seq[nt] = r->slot;
            s->want[nt] = p >= r->n_all - 1; /* proposals are all scored */
            rows += s->want[nt];
        }
        en->n_rows = rows - en->row;
        n_spec += r->n_draft > 0;
        account(e, r, from, en->n - r->n_draft);
    }
    s->n_tok = nt;
    return n_spec;
}

/* Positions a batch's tokens attend to, summed: the cost model's second
 * term. */
static double batch_attn(const step *s) {
    double a = 0;
    for (int32_t i = 0; i < s->n_tok; i++) a += s->pos[i] + 1;
    return a;
}

/* Commits one entry that did not speculate: its blocks to the cache, and a
 * token when its chunk reached the end. */
static void commit_plain(sp_engine *e, const step_entry *en) {
    request *r = en->r;
    eng_commit_blocks(e, r);
    if (!en->n_rows) return; /* a prefill chunk short of the end */
    const int32_t at = r->n_all;
    int32_t none = 0;
    const float *logits = eng_grammar_mask_rows(e, r, sp_get_logits(e->ctx, en->row), &none);
    if (!logits) {
        eng_grammar_dead_end(r);
        eng_finish(e, r, SP_FINISH_ERROR);
        return;
    }
    const sp_token t = sp_sampler_sample_at(r->smp, logits, at);
    sp_sampler_accept(r->smp, t);
    eng_emit_token(e, r, t, logits);
    if (r->shadow_pos == at && r->n_all > at) /* the proposal it did not verify */
        eng_spec_observe(r, r->toks[at] == r->shadow ? 1.0f : 0.0f, false);
    r->shadow_pos = -1;
    eng_spec_check_alt(r, at);
}

/* The step's shape for the guard: its decoding entries (*n_dec), whether
 * it has nothing else (*dec_only), and whether any entry may speculate. */
static bool shape(sp_engine *e, const step *s, int32_t *n_dec, bool *dec_only) {
    bool any = false;
    *n_dec = 0;
    *dec_only = true;
    for (int32_t i = 0; i < s->n_ent; i++) {
        const request *r = s->ent[i].r;
        const bool decoding = r->n_all - kv_len(e, r) == 1;
        *n_dec += decoding;
        *dec_only &= decoding;
        any |= decoding && r->spec != SP_SPEC_OFF;
    }
    return any;
}

/* Schedules, runs and commits one step; locked, with requests running or
 * waiting. Its events are left in e->step for the loop to deliver. */
void eng_step(sp_engine *e) {
    step *s = &e->step;
    if (!eng_schedule(e, s)) { /* nothing fits (cannot happen with a pool sized for one
                                  full context, but never spin) */
        struct timespec ts = {0, 1000000};
        pthread_mutex_unlock(&e->mu);
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&e->mu);
        return;
    }
    const double t_step = time_ms();
    const uint64_t tok0 = e->st.decode_tokens;
    int32_t n_dec;
    bool dec_only;
    /* the guard decides for adaptive engines whether this shape speculates;
     * when it does not, the step does no speculative work at all */
    const bool guarded = e->p.spec_adaptive && shape(e, s, &n_dec, &dec_only);
    if (!guarded || eng_spec_guard_on(e, n_dec))
        eng_spec_prepare(e, s);
    else
        for (int32_t i = 0; i < s->n_ent; i++) s->ent[i].r->n_draft = 0;
    const int32_t n_spec = build_batch(e, s);
    e->st.steps++;
    sp_batch b = {s->n_tok, s->tok, s->pos, s->seq, s->want};
    char err[200];
    pthread_mutex_unlock(&e->mu);
    const double t_pass = time_ms();
    const int rc = sp_decode(e->ctx, &b, err, sizeof(err));
    const double ms_pass = time_ms() - t_pass;
    pthread_mutex_lock(&e->mu);
    if (n_spec) e->st.verify_ms += ms_pass;
    if (!rc) eng_spec_observe_pass(e, s->n_tok, batch_attn(s), ms_pass);
    if (!rc) eng_disk_observe(e, s->n_tok, ms_pass);
    for (int32_t i = 0; i < s->n_ent; i++) {
        const step_entry *en = &s->ent[i];
        request *r = en->r;
        SP_ASSERT(r->state == RQ_RUNNING); /* nothing ends a request between schedule and here */
        if (rc) {
            snprintf(r->err, sizeof(r->err), "forward pass failed: %s", err);
            eng_finish(e, r, SP_FINISH_ERROR);
        } else if (r->n_draft > 0) {
            eng_spec_commit(e, s, en);
        } else {
            commit_plain(e, en);
        }
        eng_make_event(e, r);
    }
    if (guarded)
        eng_spec_guard_observe(e, n_dec, dec_only && !rc, (int32_t)(e->st.decode_tokens - tok0),
                              time_ms() - t_step);
}
