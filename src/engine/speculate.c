/* speculate.c: speculative decoding inside the step. Before the pass,
 * eng_spec_prepare gives each decoding request that speculates its proposals
 * (its own proposer, n-gram lookup, suffix match or the draft model), asks
 * the planner (src/speculate/planner.c) how many of them to verify, fits that
 * into the token budget and the pool, and grows the request's batch entry
 * to 1 + k tokens. After the pass, eng_spec_commit verifies them
 * (src/speculate/verify.c), commits what passes, rolls the KV back, and updates
 * the acceptance estimate (eng_spec_observe, the only place that moves it).
 *
 * Isolation: what speculation learns from one request and uses for another
 * (the suffix store of earlier outputs, the acceptance prior per method)
 * lives in partitions keyed by the request's cache salt (src/speculate/parts.c),
 * the same key as the prefix cache: a request is bound to its salt's
 * partition while it holds a slot, proposes from and feeds only that one,
 * so its proposals, drafted and accepted counts and timing never depend on
 * what requests of another salt (tenant) generated. The partitions are
 * touched only by the engine thread, under the mutex (submit does not read
 * them: the prior is taken at admission). */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "speculate/verify.h"

/* A draft sequence the planner keeps at k = 0 drafts one token every this
 * many steps, if a better acceptance estimate could change the plan. */
#define SP_DRAFT_PROBE_EVERY 16
/* ... and if it would draft at this acceptance (probe_pays). */
#define SP_DRAFT_PROBE_ALPHA 0.9f
/* The planner counts at most this many tokens of a draft's backlog. */
#define SP_DRAFT_CATCHUP_PLANNED 4
/* A draft sequence that has verified nothing yet ("cold") with a backlog
 * over this (its prompt, most often: the draft then restarts on a window,
 * draft.h) waits while another cold or warming one of its partition is
 * being measured, i.e. has fewer than SP_DRAFT_WARM_OBS verifications,
 * and then does not probe either; else its probe pays the catch-up once,
 * so that a cold start is never final. */
#define SP_DRAFT_COLD_BACKLOG SP_DRAFT_WINDOW
#define SP_DRAFT_WARM_OBS 4

void eng_spec_observe(request *r, float obs, bool to_prior) {
    r->alpha = SP_ALPHA_KEEP * r->alpha + SP_ALPHA_RATE * obs;
    r->n_obs++;
    if (r->spec_auto) { /* the chosen proposer's own estimate */
        r->alpha_by[r->spec] = r->alpha;
        r->n_obs_by[r->spec] = r->n_obs;
    }
    if (to_prior && r->part) /* the prior of later requests of the same salt */
        spec_part_observe(r->part, r->spec, obs);
}

void eng_spec_check_alt(request *r, int32_t at) {
    if (r->alt_pos == at && r->n_all > at) {
        const float obs = r->toks[at] == r->alt_shadow ? 1.0f : 0.0f;
        r->alpha_by[r->alt_spec] = SP_ALPHA_KEEP * r->alpha_by[r->alt_spec] + SP_ALPHA_RATE * obs;
        r->n_obs_by[r->alt_spec]++;
    }
    r->alt_pos = -1;
}

/* ---- e->spec's life, and what the rest of the engine asks of it ---------- */

int eng_spec_init(sp_engine *e, sp_context_params cp, int64_t n_blocks, char *err, size_t errlen) {
    const sp_engine_params *p = &e->p;
    if (p->draft && !(e->spec.drafter = drafter_create(p->draft, cp, p->kv_type, p->kv_block_size,
                                                      (int32_t)n_blocks, e->max_blocks, e->ctx,
                                                      err, errlen)))
        return -1;
    /* one partition per cache salt; at least max_seqs + 1, so that a request
     * being admitted or finishing always finds one that no running request
     * holds to make room (each running request holds one) */
    const int32_t n_parts = SP_MAX(p->spec_partitions > 0 ? p->spec_partitions : 256, p->max_seqs + 1);
    e->spec.parts = spec_parts_create(p->suffix_store_tokens, n_parts, SP_SUFFIX_DEPTH);
    if (!e->spec.parts) {
        seterr(err, errlen, "out of memory creating the engine");
        return -1;
    }
    spec_guard_init(&e->spec.guard);
    if (p->spec != SP_SPEC_OFF && p->spec_adaptive) eng_spec_calibrate(e);
    return 0;
}

void eng_spec_free(sp_engine *e) {
    drafter_free(e->spec.drafter);
    e->spec.drafter = NULL;
    spec_parts_free(e->spec.parts);
    e->spec.parts = NULL;
}

void eng_spec_stats(const sp_engine *e, sp_engine_stats *st) {
    const drafter *d = e->spec.drafter;
    const bool cal = e->spec.calibrated;
    st->cost_scale = cal ? e->spec.tfit.s : 0;
    st->cost_attn_ms_per_1k = cal ? e->spec.tfit.c_attn : 0;
    st->draft_cost_ms_1 = cal && d && d->cost.n ? d->cost.ms[0] : 0;
    st->draft_cost_scale = cal && d && d->cost.n ? d->fit.s : 0;
    st->spec_guard_off_steps = e->spec.guard.off_steps;
    st->spec_guard_switches = e->spec.guard.switches;
}

int eng_spec_check(const sp_engine *e, char *err, size_t errlen) {
    int64_t held = 0; /* every running request holds its partition, nothing else does */
    for (int32_t s = 0; s < e->p.max_seqs; s++) held += e->slots[s] && e->slots[s]->part;
    return spec_parts_check(e->spec.parts, held, false, err, errlen);
}

float eng_spec_prior(const sp_engine *e, const char *cache_salt, sp_spec_mode m) {
    const spec_part *pt = spec_parts_find(e->spec.parts, cache_salt);
    return pt ? spec_part_prior(pt, m) : SP_SPEC_PRIOR0;
}

int32_t eng_spec_draft_vocab(const sp_engine *e) {
    return e->spec.drafter ? e->spec.drafter->n_vocab : 0;
}

void eng_spec_admit(sp_engine *e, request *r) {
    r->part = spec_parts_acquire(e->spec.parts, r->salt);
}

void eng_spec_learn(sp_engine *e, const request *r) {
    /* a request that waits after a preemption holds no partition, so it
     * looks its own up (out of memory: nothing is learned, nothing breaks) */
    spec_part *pt = r->part ? r->part : spec_parts_acquire(e->spec.parts, r->salt);
    spec_parts_add(e->spec.parts, pt, r->toks + r->n_prompt, r->n_all - r->n_prompt);
    if (!r->part) spec_parts_release(e->spec.parts, pt);
}

void eng_spec_release(sp_engine *e, request *r) {
    spec_parts_release(e->spec.parts, r->part);
    r->part = NULL;
    if (e->spec.drafter) drafter_clear(e->spec.drafter, r->slot);
}

bool eng_spec_guard_on(sp_engine *e, int32_t n_dec) { return spec_guard_on(&e->spec.guard, n_dec); }

void eng_spec_observe_pass(sp_engine *e, int32_t n_tok, double attn, double ms) {
    if (e->spec.calibrated) cost_fit_observe(&e->spec.tfit, n_tok, attn, ms);
}

void eng_spec_guard_observe(sp_engine *e, int32_t n_dec, bool measured, int32_t n_tokens, double ms) {
    spec_guard_observe(&e->spec.guard, n_dec, measured, n_tokens, ms);
}

/* Measures target (and draft) pass costs in a free slot; engine thread or
 * creation, pool quiescent. */
void eng_spec_calibrate(sp_engine *e) {
    int32_t slot = 0;
    while (slot < e->p.max_seqs && e->slots[slot]) slot++;
    if (slot == e->p.max_seqs) return;
    const int32_t max_n = SP_MIN(e->p.max_batch_tokens, SP_COST_MAX_TOKENS);
    e->spec.calib_tried = true;
    cost_measure(e->ctx, e->kv, slot, max_n, e->n_vocab, &e->spec.cost);
    const double ta = e->spec.cost.n ? cost_measure_attn(e->ctx, e->kv, slot, e->p.n_ctx, e->n_vocab) : 0;
    if (e->spec.drafter) drafter_calibrate(e->spec.drafter, slot, max_n, e->p.n_ctx);
    e->spec.calibrated = e->spec.cost.n > 0;
    if (e->spec.drafter) e->spec.drafter->fitting = e->spec.calibrated;
    cost_fit_init(&e->spec.tfit, &e->spec.cost, ta);
    if (e->spec.cost.n) e->st.cost_ms_1 = e->spec.cost.ms[0];
    e->st.cost_ms_16 = e->spec.cost.n ? cost_at(&e->spec.cost, 16) : 0;
}

/* Up to cap proposals for r into r->draft from its proposer; a draft-model
 * request gets cap (drafted once k is chosen). */
static int32_t propose(sp_engine *e, request *r, int32_t cap) {
    if (r->propose) {
        int32_t got = r->propose(r->toks, r->n_all, cap, r->draft, r->propose_user);
        got = SP_MAX(0, SP_MIN(got, cap));
        for (int32_t j = 0; j < got; j++)
            if (r->draft[j] < 0 || r->draft[j] >= e->n_vocab) got = j; /* keep the valid prefix */
        return got;
    }
    switch (r->spec) {
    case SP_SPEC_NGRAM:
        return ngram_propose(r->toks, r->n_all, e->p.ngram_min, e->p.ngram_max, cap, r->draft);
    case SP_SPEC_SUFFIX:
        if (r->sfx_len < r->n_all &&
            !suffix_seq_append(r->sfx, r->toks + r->sfx_len, r->n_all - r->sfx_len))
            r->sfx_len = r->n_all;
        return r->sfx_len == r->n_all ? suffix_propose(spec_part_store(r->part), r->sfx, cap,
                                                          SP_SUFFIX_MIN_PROB, r->draft, NULL)
                                      : 0;
    default:
        return cap;
    }
}

/* Tokens a proposal of n is expected to get accepted at acceptance a. */
static double expected_accepted(double a, int32_t n) {
    double g = 0, p = 1;
    for (int32_t i = 0; i < n; i++) g += (p *= a);
    return g;
}

/* auto: committed tokens per unit of time that proposer m would give r
 * this step with n proposals at its measured acceptance: a verification
 * pass of 1 + n tokens, and for the draft n draft passes too (their costs
 * as calibrated; uncalibrated, a draft pass counts a quarter of a target
 * pass). */
static double auto_rate(const sp_engine *e, const request *r, sp_spec_mode m, int32_t n) {
    const bool cal = e->spec.calibrated;
    const double ctx = r->n_all;
    const double t = cal ? cost_fit_at(&e->spec.tfit, 1 + n, ctx * (1 + n)) : 1 + 0.05 * n;
    const double d = m != SP_SPEC_DRAFT ? 0
                   : cal ? n * cost_fit_at(&e->spec.drafter->fit, 1, ctx)
                         : n * 0.25 * (cal ? cost_fit_at(&e->spec.tfit, 1, ctx) : 1);
    return (1 + expected_accepted(r->alpha_by[m], n)) / (t + d > 0 ? t + d : 1);
}

/* auto: this step's proposer and its proposals. The suffix and n-gram
 * matches cost nothing to ask, so both are asked; each proposer's worth is
 * auto_rate at its measured acceptance, and the best proposes: the draft
 * too once it has been measured (until then it proposes only where the
 * matches have nothing, so a cold draft is probed where it is the only
 * help). The best match's first guess, when it does not propose, is still
 * checked against the token committed, so its estimate keeps being
 * measured for free. Sets r->spec, r->alpha and r->n_obs to the chosen
 * proposer's. */
static int32_t propose_auto(sp_engine *e, request *r, int32_t cap) {
    sp_token alt[SP_SPEC_K_MAX];
    r->spec = SP_SPEC_SUFFIX;
    const int32_t ns = propose(e, r, cap);
    const int32_t nn = ngram_propose(r->toks, r->n_all, e->p.ngram_min, e->p.ngram_max, cap, alt);
    const double rs = ns ? auto_rate(e, r, SP_SPEC_SUFFIX, ns) : -1;
    const double rn = nn ? auto_rate(e, r, SP_SPEC_NGRAM, nn) : -1;
    const bool draft = e->spec.drafter != NULL;
    const double rd = draft && (r->n_obs_by[SP_SPEC_DRAFT] >= SP_DRAFT_WARM_OBS || (!ns && !nn))
                          ? auto_rate(e, r, SP_SPEC_DRAFT, cap)
                          : -1;
    /* the best match (suffix on a tie) and whether the draft beats it */
    const bool suffix = ns && rs >= rn;
    const sp_spec_mode match = suffix ? SP_SPEC_SUFFIX : nn ? SP_SPEC_NGRAM : SP_SPEC_OFF;
    const double rm = suffix ? rs : rn;
    const sp_spec_mode pick = rd > rm ? SP_SPEC_DRAFT : match;
    int32_t n = 0;
    r->alt_pos = -1;
    if (pick == SP_SPEC_NGRAM) {
        if (ns) r->alt_shadow = r->draft[0], r->alt_spec = SP_SPEC_SUFFIX, r->alt_pos = r->n_all;
        memcpy(r->draft, alt, (size_t)nn * sizeof(sp_token));
        n = nn;
    } else if (pick == SP_SPEC_SUFFIX) {
        if (nn) r->alt_shadow = alt[0], r->alt_spec = SP_SPEC_NGRAM, r->alt_pos = r->n_all;
        n = ns;
    } else if (pick == SP_SPEC_DRAFT) {
        if (match != SP_SPEC_OFF) {
            r->alt_shadow = suffix ? r->draft[0] : alt[0];
            r->alt_spec = match;
            r->alt_pos = r->n_all;
        }
        n = cap; /* drafted once k is chosen */
    }
    r->spec = pick == SP_SPEC_OFF ? SP_SPEC_SUFFIX : pick;
    r->alpha = r->alpha_by[r->spec];
    r->n_obs = r->n_obs_by[r->spec];
    return n;
}

/* Whether another draft sequence of r's partition is being measured: one
 * with 1..SP_DRAFT_WARM_OBS - 1 verifications, or a cold one gathered
 * earlier in this step (entries before i) that got proposals. */
static bool draft_warming(const step *s, int32_t i, const request *r) {
    for (int32_t j = 0; j < s->n_ent; j++) {
        const request *o = s->ent[j].r;
        if (o == r || o->spec != SP_SPEC_DRAFT || o->propose || o->part != r->part) continue;
        if (o->n_obs > 0 && o->n_obs < SP_DRAFT_WARM_OBS) return true;
        if (j < i && o->n_obs == 0 && o->n_draft > 0) return true;
    }
    return false;
}

/* The batch as the planner sees it before any proposal. */
typedef struct {
    int32_t used;              /* tokens */
    double attn;               /* positions its tokens attend to, summed */
    int32_t reserved;          /* blocks its entries take from the pool */
    int32_t n_dec;             /* decoding entries */
} batch_base;

/* Collects the step's candidates (decoding entries with proposals) into
 * s->cand, and what the batch holds without them into *b. */
static void gather(sp_engine *e, step *s, batch_base *b) {
    *b = (batch_base){0};
    s->n_cand = 0;
    for (int32_t i = 0; i < s->n_ent; i++) {
        request *r = s->ent[i].r;
        const int32_t n = s->ent[i].n, len = kv_len(e, r);
        r->n_draft = 0;
        b->used += n;
        b->attn += (double)n * len + 0.5 * n * (n + 1);
        b->reserved += kv_paged_blocks_needed(e->kv, r->slot, n);
        const bool decoding = r->n_all - len == 1;
        b->n_dec += decoding;
        /* a request that does not speculate still gets the tokens its
         * grammar forces verified in this pass (jump-forward): they are
         * accepted with probability 1, up to SP_SPEC_K_MAX of them */
        const bool forced_only = r->spec == SP_SPEC_OFF && r->gm;
        if ((r->spec == SP_SPEC_OFF && !forced_only) || !decoding) continue;
        int32_t cap = forced_only ? SP_SPEC_K_MAX : r->spec_k;
        cap = SP_MIN(cap, r->max_tokens - (r->n_all - r->n_prompt) - 1);
        cap = SP_MIN(cap, e->p.n_ctx - r->n_all); /* positions up to n_all - 1 + k exist */
        if (cap <= 0) continue;
        r->n_draft = forced_only ? 0 : r->spec_auto ? propose_auto(e, r, cap) : propose(e, r, cap);
        const bool by_draft = r->spec == SP_SPEC_DRAFT && !r->propose;
        r->n_forced = 0;
        if (!by_draft && r->gm) {
            eng_grammar_cut(e, r);         /* proposals the grammar refuses are never verified */
            eng_grammar_forced(e, r, cap); /* what it forces is proposed too (jump-forward) */
        }
        if (!r->n_draft) continue;
        /* The draft's backlog (a prompt it never saw, steps it sat out) is
         * fed once and then never again: an investment the steps after it
         * share. Counting it all would keep a new sequence from ever
         * drafting, so the plan sees what a drafting sequence carries from
         * step to step (the tokens of an accepted run, a few). */
        const int32_t backlog = by_draft ? drafter_backlog(e->spec.drafter, r->slot, r->n_all) : 0;
        if (by_draft && r->n_obs == 0) {
            /* cold: it follows its partition's prior, which the sequences
             * before it keep measuring, and while one of them is still
             * being measured it waits rather than pay for its prompt's
             * catch-up on a guess (at 4 sequences and an acceptance of 0.3
             * those catch-ups had cost 5-8% of the run) */
            if (r->part) r->alpha = spec_part_prior(r->part, SP_SPEC_DRAFT);
            if (backlog > SP_DRAFT_COLD_BACKLOG && draft_warming(s, i, r)) {
                r->n_draft = 0;
                continue;
            }
        }
        s->cand[s->n_cand] = (spec_cand){forced_only ? 1.0f : r->alpha, r->n_draft, by_draft, r->n_all,
                                            SP_MIN(backlog, SP_DRAFT_CATCHUP_PLANNED)};
        s->cand_entry[s->n_cand++] = i;
    }
}

/* Whether candidate c would draft if its acceptance were high: if not, the
 * step's cost (a big batch, a long catch-up) rules drafting out, and
 * measuring acceptance would buy nothing. */
static bool probe_pays(sp_engine *e, const step *s, int32_t c, const batch_base *b) {
    if (!e->spec.calibrated || !e->p.spec_adaptive) return true;
    spec_cand opt = s->cand[c];
    opt.alpha = SP_DRAFT_PROBE_ALPHA;
    int32_t k = 0;
    return spec_plan(&e->spec.tfit, &e->spec.drafter->fit, b->used, b->attn, b->n_dec, &opt, 1, &k) > 0;
}

/* Fits each candidate's planned k into the token budget and the pool, sets
 * up the shadow check or a probe where it is 0, and grows the batch
 * entries; returns the count of draft-model sequences to draft for, in
 * s->dseq. */
static int32_t fit(sp_engine *e, step *s, const batch_base *b) {
    int32_t room = e->p.max_batch_tokens - b->used;
    int32_t avail = kv_paged_available(e->kv) - b->reserved, n_d = 0;
    for (int32_t c = 0; c < s->n_cand; c++) {
        step_entry *en = &s->ent[s->cand_entry[c]];
        request *r = en->r;
        int32_t k = SP_MIN(s->cand_k[c], room);
        const int32_t base = kv_paged_blocks_needed(e->kv, r->slot, 1);
        while (k > 0 && kv_paged_blocks_needed(e->kv, r->slot, 1 + k) - base > avail) k--;
        avail -= kv_paged_blocks_needed(e->kv, r->slot, 1 + k) - base;
        room -= k;
        if (k == 0) {
            if (!s->cand[c].draft) { /* proposals exist: check the first one later */
                r->shadow = r->draft[0];
                r->shadow_pos = r->n_all;
            } else if (++r->idle_steps >= SP_DRAFT_PROBE_EVERY && room > 0 &&
                       (r->n_obs > 0 || drafter_backlog(e->spec.drafter, r->slot, r->n_all) <= SP_DRAFT_COLD_BACKLOG ||
                        !draft_warming(s, s->cand_entry[c], r)) &&
                       kv_paged_blocks_needed(e->kv, r->slot, 2) - base <= avail &&
                       probe_pays(e, s, c, b)) {
                /* nothing to check without drafting: every so often draft
                 * one token anyway, so that acceptance keeps being measured
                 * and a bad start (or a draft that gets better as the text
                 * goes on) is not final */
                r->idle_steps = 0;
                k = 1;
                avail -= kv_paged_blocks_needed(e->kv, r->slot, 2) - base;
                room -= 1;
            }
            if (k == 0) e->st.spec_planned_zero++;
        } else {
            r->idle_steps = 0;
        }
        r->n_forced = SP_MAX(0, r->n_forced - (r->n_draft - k)); /* the grammar's are last */
        r->n_draft = k;
        en->n = 1 + k;
        if (k && s->cand[c].draft) {
            s->dseq[n_d] = (draft_seq){r->slot, r->toks, r->n_all, k, r->draft, r->dsmp};
            s->dseq_entry[n_d++] = s->cand_entry[c];
        }
    }
    return n_d;
}

void eng_spec_prepare(sp_engine *e, step *s) {
    if (e->p.spec_adaptive && !e->spec.calib_tried) /* an engine without a default method
                                                  meets its first speculating request */
        for (int32_t i = 0; i < s->n_ent; i++)
            if (s->ent[i].r->spec != SP_SPEC_OFF) {
                eng_spec_calibrate(e);
                break;
            }
    batch_base b;
    gather(e, s, &b);
    if (!s->n_cand) return;
    if (e->p.spec_adaptive && e->spec.calibrated)
        spec_plan(&e->spec.tfit, e->spec.drafter ? &e->spec.drafter->fit : NULL, b.used, b.attn, b.n_dec,
                     s->cand, s->n_cand, s->cand_k);
    else
        for (int32_t c = 0; c < s->n_cand; c++) s->cand_k[c] = s->cand[c].k_cap;
    const int32_t n_d = fit(e, s, &b);
    int64_t k_sum = 0; /* the plan, for the dashboard (specula_spec_planned_k) */
    for (int32_t c = 0; c < s->n_cand; c++) k_sum += s->ent[s->cand_entry[c]].r->n_draft;
    e->st.spec_plans += (uint64_t)s->n_cand;
    e->st.spec_plan_k_sum += (uint64_t)k_sum;
    e->st.spec_last_k = (float)k_sum / (float)s->n_cand;
    if (!n_d) return;
    e->st.draft_ms += drafter_run(e->spec.drafter, s->dseq, n_d);
    for (int32_t i = 0; i < n_d; i++) { /* what was drafted (0 for all when a pass failed) */
        step_entry *en = &s->ent[s->dseq_entry[i]];
        const int32_t planned = en->n - 1;
        en->r->n_draft = s->dseq[i].k;
        eng_grammar_cut(e, en->r);
        /* where the grammar cut the draft short, what it forces fills the
         * room the plan made (its batch tokens and blocks are reserved) */
        eng_grammar_forced(e, en->r, planned);
        en->n = 1 + en->r->n_draft;
    }
}

/* Verifies the entry's proposals against the target's rows and commits
 * what passes. */
void eng_spec_commit(sp_engine *e, step *s, const step_entry *en) {
    request *r = en->r;
    const int32_t V = e->n_vocab;
    SP_ASSERT(en->n_rows == r->n_draft + 1);
    const int32_t kv_before = kv_len(e, r) - 1 - r->n_draft;
    int32_t n = r->n_draft;
    /* masked to the grammar (a copy), and fewer proposals if one leads to a
     * dead end; the rows beyond are dropped with the KV below */
    const float *rows = eng_grammar_mask_rows(e, r, sp_get_logits(e->ctx, en->row), &n);
    if (!rows) {
        eng_grammar_dead_end(r);
        sp_seq_truncate(e->ctx, r->slot, kv_before + 1);
        if (e->spec.drafter) drafter_truncate(e->spec.drafter, r->slot, kv_before + 1);
        r->n_draft = 0;
        eng_finish(e, r, SP_FINISH_ERROR);
        return;
    }
    const int32_t m = spec_verify(r->smp, rows, V, r->n_all, r->draft, n, s->commit);
    const int32_t acc = m - 1;
    /* accepted proposals the grammar forced: the last n_forced of r->n_draft */
    const int32_t forced = SP_MAX(0, acc - (r->n_draft - r->n_forced));
    r->st.spec_grammar += forced;
    e->st.spec_grammar += (uint64_t)forced;
    r->st.spec_steps++;
    r->st.spec_drafted += n;
    r->st.spec_accepted += acc;
    r->st.spec_drafted_by[r->spec] += n;
    r->st.spec_accepted_by[r->spec] += acc;
    e->st.spec_steps++;
    e->st.spec_drafted += (uint64_t)n;
    e->st.spec_accepted += (uint64_t)acc;
    if (r->spec != SP_SPEC_OFF) { /* not a grammar's forced tokens alone */
        e->st.spec_steps_by[r->spec]++;
        e->st.spec_drafted_by[r->spec] += (uint64_t)n;
        e->st.spec_accepted_by[r->spec] += (uint64_t)acc;
    }
    for (int32_t j = 0; j < acc; j++) {
        r->st.spec_accepted_per_pos[j]++;
        e->st.spec_accepted_per_pos[j]++;
    }
    /* acceptance per proposed token: accepted tokens are successes, the
     * first rejection one failure, tokens after it unobserved */
    eng_spec_observe(r, (float)acc / (float)(acc + (acc < n)), r->spec != SP_SPEC_OFF);
    /* roll back what was not accepted: target KV keeps the input token and
     * the accepted proposals; the draft keeps no more than that, and none
     * of the grammar's forced tokens, which it never saw (it catches up on
     * them next time) */
    sp_seq_truncate(e->ctx, r->slot, kv_before + m);
    if (e->spec.drafter) drafter_truncate(e->spec.drafter, r->slot, kv_before + SP_MIN(m, 1 + r->n_draft - r->n_forced));
    r->n_draft = 0;
    const int32_t at = r->n_all;
    for (int32_t j = 0; j < m && r->state == RQ_RUNNING; j++)
        eng_emit_token(e, r, s->commit[j], rows + (size_t)j * V);
    eng_spec_check_alt(r, at);
    /* only now are the accepted tokens in r->toks, which the hashes cover */
    if (r->state == RQ_RUNNING) eng_commit_blocks(e, r);
}
