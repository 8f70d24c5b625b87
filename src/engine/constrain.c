/* constrain.c: structured output in the engine. A request with a grammar
 * gets a matcher (src/grammar) at intake; every logits row it samples from
 * or verifies against is masked first (tokens the grammar does not allow
 * set to -inf, as the sampler's logit biases are applied before anything
 * else), so plain decoding, greedy verification and rejection sampling all
 * see the same constrained distribution, and the output equals plain
 * constrained decoding. Proposals are cut before verification at the first
 * token the grammar refuses (gr_cut), so every verified row has a valid
 * grammar state. Each committed token advances the matcher (gr_commit);
 * once the grammar is complete the request ends (finish "stop") without
 * another pass.
 *
 * A lazy grammar (a trigger: tool calls in free text) leaves the rows of
 * its free states unmasked: only the few tokens that would complete the
 * trigger with bytes the grammar refuses are set to -inf, and when a step
 * has none of those the logits are not even copied. Tokens the grammar
 * forces are proposed after any proposer's (gr_forced), for requests that
 * do not speculate too (speculate.c: jump-forward).
 *
 * The engine keeps the compiled grammars by their text (SP_GCACHE, least
 * recently used out) and one token trie for its vocabulary, both under
 * gmu, built by the submitting thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "grammar/grammar.h"

/* The compiled grammar of text (a reference the caller releases), from the
 * cache or compiled now. Under gmu. */
static sp_grammar *grammar_for(sp_engine *e, const char *text, char *err, size_t errlen) {
    struct gcache_entry *old = &e->gcache[0];
    for (int i = 0; i < SP_GCACHE; i++) {
        struct gcache_entry *c = &e->gcache[i];
        if (c->text && !strcmp(c->text, text)) {
            c->used = ++e->gcache_clock;
            gr_retain(c->g);
            return c->g;
        }
        if (c->used < old->used) old = c;
    }
    sp_grammar *g = sp_grammar_compile(text, 0, err, errlen);
    if (!g) return NULL;
    char *t = strdup(text);
    if (t) {
        free(old->text);
        sp_grammar_free(old->g);
        old->text = t;
        old->g = g;
        old->used = ++e->gcache_clock;
        gr_retain(g);
    }
    return g;
}

int gr_take(sp_engine *e, request *r, const sp_request_params *rp, char *err, size_t errlen) {
    if (!rp->grammar && rp->grammar_trigger && rp->grammar_trigger[0]) {
        sp_seterr(err, errlen, "grammar_trigger needs a grammar");
        return SP_ERR_INVALID;
    }
    if (!rp->grammar) return SP_OK;
    pthread_mutex_lock(&e->gmu);
    int rc = SP_OK;
    if (!e->trie && !(e->trie = sp_token_trie_create(e->vocab, err, errlen))) rc = SP_ERR_NOMEM;
    if (!rc && !e->mrows &&
        !(e->mrows = malloc((size_t)(SP_SPEC_K_MAX + 1) * e->n_vocab * sizeof(float))))
        rc = SP_ERR_NOMEM;
    sp_grammar *g = rc ? NULL : grammar_for(e, rp->grammar, err, errlen);
    if (!rc && !g) rc = SP_ERR_INVALID;
    pthread_mutex_unlock(&e->gmu);
    if (rc) return rc;
    r->gm = sp_matcher_create(g, e->trie, err, errlen);
    sp_grammar_free(g); /* the matcher holds its own reference */
    r->gmask = malloc((size_t)(e->n_vocab + 31) / 32 * sizeof(uint32_t));
    if (!r->gm || !r->gmask) return SP_ERR_NOMEM;
    sp_matcher_set_jump_forward(r->gm, true);
    const char *trig = rp->grammar_trigger;
    if (trig && trig[0]) { /* lazy: free until the trigger, so no first-position check */
        rc = sp_matcher_set_trigger(r->gm, trig, strlen(trig), rp->grammar_at_start, err, errlen);
        r->gtrig_tok = rc ? -1 : sp_matcher_trigger_token(r->gm);
        if (!rc && r->gtrig_tok >= 0 && !(r->gtrig = strdup(trig))) rc = SP_ERR_NOMEM;
        return rc;
    }
    if (!sp_matcher_mask(r->gm, r->gmask)) {
        sp_seterr(err, errlen, "the grammar allows no token of the vocabulary at the first "
                  "position (no token's text begins a string of the grammar)");
        return SP_ERR_INVALID;
    }
    return SP_OK;
}

void gr_engine_free(sp_engine *e) {
    for (int i = 0; i < SP_GCACHE; i++) {
        free(e->gcache[i].text);
        sp_grammar_free(e->gcache[i].g);
    }
    sp_token_trie_free(e->trie);
    free(e->mrows);
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

const float *gr_mask_rows(sp_engine *e, request *r, const float *rows, int32_t *n) {
    if (!r->gm || all_free(r, *n)) return rows;
    const int32_t V = e->n_vocab;
    for (int32_t i = 0; i <= *n; i++) {
        const sp_token *ref;
        const int32_t n_ref = sp_matcher_free_at(r->gm, i, &ref);
        if (n_ref >= 0) { /* free (lazy grammar): only the listed tokens are refused */
            float *o = e->mrows + (size_t)i * V;
            memcpy(o, rows + (size_t)i * V, (size_t)V * sizeof(float));
            for (int32_t j = 0; j < n_ref; j++) o[ref[j]] = -INFINITY;
            continue;
        }
        if (mask_at(r, i) == 0) { /* a dead end: no proposal may lead here */
            *n = i - 1;
            break;
        }
        float *o = e->mrows + (size_t)i * V;
        memcpy(o, rows + (size_t)i * V, (size_t)V * sizeof(float));
        sp_mask_apply(r->gmask, o, V);
        if (sp_matcher_can_end_at(r->gm, i)) /* the request's stop tokens end it as EOG does */
            for (int32_t j = 0; j < r->n_stop_toks; j++)
                if (r->stop_toks[j] >= 0 && r->stop_toks[j] < V)
                    o[r->stop_toks[j]] = rows[(size_t)i * V + r->stop_toks[j]];
    }
    return *n < 0 ? NULL : e->mrows;
}

void gr_cut(sp_engine *e, request *r) {
    if (!r->gm) return;
    r->n_draft = sp_matcher_lookahead(r->gm, r->draft, SP_MAX(r->n_draft, 0));
}

/* Jump-forward: while the state after the proposals allows one token only
 * (and the output may not end there), propose it too, up to cap. */
void gr_forced(sp_engine *e, request *r, int32_t cap) {
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

bool gr_commit(sp_engine *e, request *r, sp_token t) {
    return !r->gm || sp_matcher_accept_token(r->gm, t);
}
