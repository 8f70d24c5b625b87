/* constrain.c: structured output in the engine. A request with a grammar
 * gets a matcher (src/grammar) at intake; every logits row it samples from
 * or verifies against is masked first (tokens the grammar does not allow
 * set to -inf, as the sampler's logit biases are applied before anything
 * else), so plain decoding, greedy verification and rejection sampling all
 * see the same constrained distribution, and the output equals plain
 * constrained decoding. Proposals are cut before verification at the first
 * token the grammar refuses (eng_grammar_cut), so every verified row has a valid
 * grammar state. Each committed token advances the matcher (eng_grammar_commit);
 * once the grammar is complete the request ends (finish "stop") without
 * another pass.
 *
 * A lazy grammar (a trigger: tool calls in free text) leaves the rows of
 * its free states unmasked: only the few tokens that would complete the
 * trigger with bytes the grammar refuses are set to -inf, and when a step
 * has none of those the logits are not even copied. Tokens the grammar
 * forces are proposed after any proposer's (eng_grammar_forced), for requests that
 * do not speculate too (speculate.c: jump-forward).
 *
 * A request's grammar is compiled and checked when it is submitted, by
 * the submitting thread (the server's are not its HTTP threads); its
 * matcher is made when it is first admitted. The engine keeps the
 * compiled grammars by tenant and text (SP_GCACHE, least recently used
 * out) and one token trie for its vocabulary, under gmu, which is never
 * held while compiling or matching. Grammar memory has one engine-wide cap
 * (grammar_mem), half for compiled grammars and half for matchers: a
 * request holds its compiled grammar's size from submission and its
 * matcher's budget from admission, until it ends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "grammar/grammar.h"

/* ---- the compiled grammars, by tenant ---- */

static bool same(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

/* The cached grammar of (salt, text) with a reference for the caller, or
 * NULL. Under gmu. */
static sp_grammar *cache_find(sp_engine *e, const char *salt, const char *text) {
    for (int i = 0; i < SP_GCACHE; i++) {
        struct gcache_entry *c = &e->gram.cache[i];
        if (c->text && same(c->salt, salt) && !strcmp(c->text, text)) {
            c->used = ++e->gram.clock;
            gr_retain(c->g);
            return c->g;
        }
    }
    return NULL;
}

/* Keeps g for (salt, text) in place of the least recently used entry
 * (nothing when out of memory: it is only a cache). Under gmu. */
static void cache_put(sp_engine *e, const char *salt, const char *text, sp_grammar *g) {
    struct gcache_entry *old = &e->gram.cache[0];
    for (int i = 1; i < SP_GCACHE; i++)
        if (e->gram.cache[i].used < old->used) old = &e->gram.cache[i];
    char *t = strdup(text), *sl = salt ? strdup(salt) : NULL;
    if (!t || (salt && !sl)) {
        free(t), free(sl);
        return;
    }
    free(old->text), free(old->salt);
    sp_grammar_free(old->g);
    *old = (struct gcache_entry){sl, t, g, ++e->gram.clock};
    gr_retain(g);
}

/* The compiled grammar of text for the tenant of salt (a reference the
 * caller releases). A tenant's grammars, and the masks their matchers
 * share, are its own: what another tenant compiled is never found, so its
 * cost cannot tell anyone what others asked for. Compiling (linear in the
 * text) runs outside gmu: other requests never wait for it. */
static sp_grammar *grammar_for(sp_engine *e, const char *salt, const char *text, char *err,
                               size_t errlen) {
    pthread_mutex_lock(&e->gram.mu);
    sp_grammar *g = cache_find(e, salt, text);
    pthread_mutex_unlock(&e->gram.mu);
    if (g) return g;
    if (!(g = sp_grammar_compile(text, 0, err, errlen))) return NULL;
    __atomic_add_fetch(&e->gram.compiles, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&e->gram.mu);
    sp_grammar *had = cache_find(e, salt, text); /* compiled meanwhile by another request */
    if (had) {
        sp_grammar_free(g);
        g = had;
    } else {
        cache_put(e, salt, text, g);
    }
    pthread_mutex_unlock(&e->gram.mu);
    return g;
}

/* ---- grammar memory: one engine-wide cap ---- */

/* Counts bytes against one half of the engine's grammar memory (used);
 * false (nothing counted) when they do not fit. Compiled grammars and
 * matchers have a half each, so queued requests' grammars can never keep
 * the running ones from getting matchers. */
static bool gmem_take(sp_engine *e, size_t *used, size_t bytes) {
    const size_t cap = e->p.grammar_mem / 2;
    size_t have = __atomic_load_n(used, __ATOMIC_RELAXED);
    do {
        if (have + bytes > cap) return false;
    } while (!__atomic_compare_exchange_n(used, &have, have + bytes, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return true;
}

void eng_grammar_release(sp_engine *e, request *r) {
    __atomic_sub_fetch(&e->gram.mem_gram, r->gmem_gram, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&e->gram.mem_match, r->gmem_match, __ATOMIC_RELAXED);
    r->gmem_gram = r->gmem_match = 0;
}

/* A matcher for r, set up as the request asked (jump-forward, a trigger). */
static sp_matcher *matcher_of(sp_engine *e, const request *r, char *err, size_t errlen, int *rc) {
    sp_matcher *m = sp_matcher_create(r->gram, e->gram.trie, err, errlen);
    *rc = m ? sp_matcher_error(m, err, errlen) : SP_ERR_NOMEM;
    if (*rc) {
        sp_matcher_free(m);
        return NULL;
    }
    sp_matcher_set_jump_forward(m, true);
    if (r->gtrigger && (*rc = sp_matcher_set_trigger(m, r->gtrigger, strlen(r->gtrigger),
                                                     r->gat_start, err, errlen))) {
        sp_matcher_free(m);
        return NULL;
    }
    return m;
}

/* The checks a grammar must pass before its request is queued, on a
 * matcher of its own dropped after (a queued request holds none): its
 * start and first mask within the budgets, and some token allowed. The
 * first mask stays in the grammar's shared masks, so the matcher made at
 * admission finds it. */
static int check_start(sp_engine *e, request *r, char *err, size_t errlen) {
    int rc;
    sp_matcher *m = matcher_of(e, r, err, errlen, &rc);
    if (!m || r->gtrigger) { /* lazy: free until the trigger, so no first-position check */
        sp_matcher_free(m);
        return rc;
    }
    if (!sp_matcher_mask(m, r->gmask)) {
        rc = sp_matcher_error(m, err, errlen);
        if (!rc) {
            seterr(err, errlen, "the grammar allows no token of the vocabulary at the first "
                      "position (no token's text begins a string of the grammar)");
            rc = SP_ERR_INVALID;
        }
    }
    sp_matcher_free(m);
    return rc;
}

int eng_grammar_take(sp_engine *e, request *r, const sp_request_params *rp, char *err, size_t errlen) {
    const char *trig = rp->grammar_trigger;
    if (!rp->grammar && trig && trig[0]) {
        seterr(err, errlen, "grammar_trigger needs a grammar");
        return SP_ERR_INVALID;
    }
    if (!rp->grammar) return SP_OK;
    pthread_mutex_lock(&e->gram.mu);
    int rc = SP_OK;
    if (!e->gram.trie && !(e->gram.trie = sp_token_trie_create(e->vocab, err, errlen))) rc = SP_ERR_NOMEM;
    if (!rc && !e->gram.mrows &&
        !(e->gram.mrows = malloc((size_t)(SP_SPEC_K_MAX + 1) * e->n_vocab * sizeof(float))))
        rc = SP_ERR_NOMEM;
    pthread_mutex_unlock(&e->gram.mu);
    if (rc) return rc;
    if (!(r->gram = grammar_for(e, r->salt, rp->grammar, err, errlen))) return SP_ERR_GRAMMAR;
    if (!gmem_take(e, &e->gram.mem_gram, gr_bytes(r->gram))) {
        seterr(err, errlen, "the engine's memory for compiled grammars (%zu MiB) is held by "
                  "other requests' grammars; retry later", e->p.grammar_mem / 2 >> 20);
        return SP_ERR_BUSY;
    }
    r->gmem_gram = gr_bytes(r->gram);
    r->gmask = malloc((size_t)(e->n_vocab + 31) / 32 * sizeof(uint32_t));
    if (!r->gmask || (trig && trig[0] && !(r->gtrigger = strdup(trig)))) return SP_ERR_NOMEM;
    r->gat_start = rp->grammar_at_start;
    const int rc2 = check_start(e, r, err, errlen);
    return rc2 == SP_ERR_INVALID ? SP_ERR_GRAMMAR : rc2; /* the grammar's own fault */
}

int eng_grammar_admit(sp_engine *e, request *r) {
    if (!r->gram || r->gm) return 1;
    if (!gmem_take(e, &e->gram.mem_match, GR_MATCHER_MAX_BYTES)) { /* waits for others' to end */
        e->st.grammar_waits++;
        return 0;
    }
    r->gmem_match = GR_MATCHER_MAX_BYTES;
    int rc;
    if (!(r->gm = matcher_of(e, r, r->err, sizeof(r->err), &rc))) {
        r->err_status = rc == SP_ERR_INVALID ? SP_ERR_GRAMMAR : rc;
        return -1;
    }
    r->gtrig_tok = sp_matcher_trigger_token(r->gm);
    if (r->gtrig_tok >= 0 && !(r->gtrig = strdup(r->gtrigger))) {
        snprintf(r->err, sizeof(r->err), "out of memory");
        return -1;
    }
    return 1;
}

/* Fairness: grammar work is the engine thread's, so every request waits
 * while another's masks are computed. A request whose grammar spends more
 * than GR_STEP_ALLOWANCE units a step (ordinary schemas: a few hundred,
 * after their first masks) sits out steps until the excess is repaid, so
 * an expensive grammar slows its own request, not the others. */
#define GR_STEP_ALLOWANCE (1 << 14)

bool eng_grammar_throttled(request *r) {
    if (!r->gm) return false;
    const int64_t w = sp_matcher_work(r->gm);
    r->gdebt += w - r->gwork_seen - GR_STEP_ALLOWANCE;
    r->gwork_seen = w;
    /* repaid within 16 steps at most: what it spent long ago is not held
     * against it forever */
    r->gdebt = SP_MIN(SP_MAX(r->gdebt, 0), 16 * (int64_t)GR_STEP_ALLOWANCE);
    return r->gdebt > 0;
}

void eng_grammar_init(sp_engine *e) { pthread_mutex_init(&e->gram.mu, NULL); }

void eng_grammar_stats(sp_engine *e, sp_engine_stats *st) {
    st->grammar_compiles = __atomic_load_n(&e->gram.compiles, __ATOMIC_RELAXED);
    st->grammar_mem_used = __atomic_load_n(&e->gram.mem_gram, __ATOMIC_RELAXED) +
                           __atomic_load_n(&e->gram.mem_match, __ATOMIC_RELAXED);
}

void eng_grammar_free(sp_engine *e) {
    for (int i = 0; i < SP_GCACHE; i++) {
        free(e->gram.cache[i].text);
        free(e->gram.cache[i].salt);
        sp_grammar_free(e->gram.cache[i].g);
    }
    sp_token_trie_free(e->gram.trie);
    free(e->gram.mrows);
    pthread_mutex_destroy(&e->gram.mu);
}

void eng_grammar_dead_end(request *r) {
    if (r->gm && sp_matcher_error(r->gm, r->err, sizeof(r->err)))
        r->err_status = SP_ERR_GRAMMAR; /* the request's grammar: its fault, a 400 */
    else
        snprintf(r->err, sizeof(r->err), "no token of the vocabulary can continue the output here");
    /* the prefix says where the message comes from */
    char msg[sizeof(r->err)];
    snprintf(msg, sizeof(msg), "grammar: %.*s", (int)sizeof(msg) - 10, r->err);
    memcpy(r->err, msg, sizeof(msg));
}

/* The tokens allowed at lookahead state i into r->gmask; their count
 * (the request's stop tokens too, where the grammar may end). */
static int32_t mask_at(request *r, int32_t i) {
    int32_t n = sp_matcher_mask_ahead(r->gm, i, r->gmask);
    return n + (sp_matcher_can_end_at(r->gm, i) ? r->n_stop_toks : 0);
}

/* Whether the rows [0, n] need no mask: a lazy grammar's free states that
 * refuse nothing (the common case: no copy of the logits then). */
static bool all_free(const request *r, int32_t n) {
    const sp_token *ref;
    for (int32_t i = 0; i <= n; i++)
        if (sp_matcher_free_at(r->gm, i, &ref) != 0) return false;
    return true;
}

const float *eng_grammar_mask_rows(sp_engine *e, request *r, const float *rows, int32_t *n) {
    if (!r->gm || all_free(r, *n)) return rows;
    const int32_t V = e->n_vocab;
    for (int32_t i = 0; i <= *n; i++) {
        const sp_token *ref;
        const int32_t n_ref = sp_matcher_free_at(r->gm, i, &ref);
        if (n_ref >= 0) { /* free (lazy grammar): only the listed tokens are refused */
            float *o = e->gram.mrows + (size_t)i * V;
            memcpy(o, rows + (size_t)i * V, (size_t)V * sizeof(float));
            for (int32_t j = 0; j < n_ref; j++) o[ref[j]] = -INFINITY;
            continue;
        }
        if (mask_at(r, i) == 0) { /* a dead end: no proposal may lead here */
            *n = i - 1;
            break;
        }
        float *o = e->gram.mrows + (size_t)i * V;
        memcpy(o, rows + (size_t)i * V, (size_t)V * sizeof(float));
        sp_mask_apply(r->gmask, o, V);
        if (sp_matcher_can_end_at(r->gm, i)) /* the request's stop tokens end it as EOG does */
            for (int32_t j = 0; j < r->n_stop_toks; j++)
                if (r->stop_toks[j] >= 0 && r->stop_toks[j] < V)
                    o[r->stop_toks[j]] = rows[(size_t)i * V + r->stop_toks[j]];
    }
    return *n < 0 ? NULL : e->gram.mrows;
}

void eng_grammar_cut(sp_engine *e, request *r) {
    if (!r->gm) return;
    r->n_draft = sp_matcher_lookahead(r->gm, r->draft, SP_MAX(r->n_draft, 0));
}

/* Jump-forward: while the state after the proposals allows one token only
 * (and the output may not end there), propose it too, up to cap. */
void eng_grammar_forced(sp_engine *e, request *r, int32_t cap) {
    r->n_forced = 0;
    if (!r->gm) return;
    const int32_t words = (e->n_vocab + 31) / 32;
    while (r->n_draft < cap) {
        const int32_t i = r->n_draft;
        if (sp_matcher_can_end_at(r->gm, i) || mask_at(r, i) != 1) break;
        int32_t w = 0;
        while (w < words && !r->gmask[w]) w++;
        if (w == words) break;
        r->draft[i] = w * 32 + __builtin_ctz(r->gmask[w]);
        if (sp_matcher_lookahead(r->gm, r->draft, i + 1) != i + 1) break;
        r->n_draft = i + 1;
        r->n_forced++;
    }
}

bool eng_grammar_commit(sp_engine *e, request *r, sp_token t) {
    return !r->gm || sp_matcher_accept_token(r->gm, t);
}
