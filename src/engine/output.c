/* output.c: what a request produces. A committed token becomes its
 * logprobs, its text (detokenized, cut at a stop string, held back while it
 * may still become one), the stop rules' verdict, and the events that tell
 * a callback request what is new. Engine thread, under the lock. */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

static bool text_grow(request *r, size_t add) {
    if (r->text_len + add + 1 <= r->text_cap) return true;
    size_t cap = r->text_cap;
    while (r->text_len + add + 1 > cap) cap *= 2;
    char *t = realloc(r->text, cap);
    if (!t) return false;
    r->text = t;
    r->text_cap = cap;
    return true;
}

/* After new text: cut at a stop string (true) or hold back a suffix that
 * may still become one. */
static bool check_stop_strings(request *r, size_t old_len) {
    if (!r->n_stop) {
        r->text_released = r->text_len;
        return false;
    }
    size_t from = old_len >= r->max_stop_len ? old_len - r->max_stop_len + 1 : 0;
    size_t cut = SIZE_MAX;
    for (int32_t i = 0; i < r->n_stop; i++) {
        const char *p = memmem(r->text + from, r->text_len - from, r->stop[i], strlen(r->stop[i]));
        if (p && (size_t)(p - r->text) < cut) cut = (size_t)(p - r->text);
    }
    if (cut != SIZE_MAX) {
        r->text_len = cut;
        r->text[cut] = 0;
        r->text_released = cut;
        return true;
    }
    size_t hold = 0;
    for (int32_t i = 0; i < r->n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        for (size_t k = SP_MIN(sl - 1, r->text_len); k > hold; k--)
            if (!memcmp(r->text + r->text_len - k, r->stop[i], k)) {
                hold = k;
                break;
            }
    }
    r->text_released = r->text_len - hold;
    return false;
}

/* Commits token t (chosen from the distribution in logits) to r and
 * applies the stop rules. The sampler has already recorded t. */
void eng_emit_token(sp_engine *e, request *r, sp_token t, const float *logits) {
    double now = time_ms();
    if (r->t_first == 0) {
        r->t_first = now;
        r->st.ttft_ms = now - r->t_submit;
        r->st.prefill_ms = now - r->t_sched;
    }
    r->t_last = now;
    bool stop_tok = !r->ignore_eos && sp_vocab_is_eog(e->vocab, t);
    for (int32_t i = 0; i < r->n_stop_toks; i++) stop_tok |= r->stop_toks[i] == t;
    if (stop_tok) {
        eng_finish(e, r, SP_FINISH_STOP);
        return;
    }
    const int32_t g = r->n_all - r->n_prompt;
    /* a softmax over the vocabulary per token: only when asked for */
    if (r->lp) r->lp[g] = sp_logprob_of(logits, e->n_vocab, t);
    if (r->n_lp)
        sp_top_logprobs(logits, e->n_vocab, r->n_lp, r->top_ids + (size_t)g * r->n_lp,
                        r->top_lps + (size_t)g * r->n_lp);
    r->toks[r->n_all++] = t;
    e->st.decode_tokens++;
    char piece[1024];
    int np = sp_detok_push(e->vocab, &r->dt, t, piece, sizeof(piece));
    if (t == r->gtrig_tok && np >= 0 && np + strlen(r->gtrig) <= sizeof(piece)) {
        /* a control token standing for a lazy grammar's trigger (no text of
         * its own): the output holds the trigger, as the grammar reads it */
        memcpy(piece + np, r->gtrig, strlen(r->gtrig));
        np += (int)strlen(r->gtrig);
    }
    bool last = r->n_all - r->n_prompt >= r->max_tokens || r->n_all >= e->p.n_ctx;
    if (last && np >= 0) {
        int nf = sp_detok_flush(&r->dt, piece + np, (int)sizeof(piece) - np);
        if (nf > 0) np += nf;
    }
    size_t old = r->text_len;
    if (np > 0) {
        if (!text_grow(r, (size_t)np)) {
            snprintf(r->err, sizeof(r->err), "out of memory for the output text");
            eng_finish(e, r, SP_FINISH_ERROR);
            return;
        }
        memcpy(r->text + r->text_len, piece, (size_t)np);
        r->text_len += (size_t)np;
        r->text[r->text_len] = 0;
    }
    if (!eng_grammar_commit(e, r, t)) { /* the row was masked: only a budget can refuse it */
        eng_grammar_dead_end(r);
        eng_finish(e, r, SP_FINISH_ERROR);
    } else if (check_stop_strings(r, old) || (r->gm && sp_matcher_done(r->gm))) {
        eng_finish(e, r, SP_FINISH_STOP); /* a stop string, or the grammar's output is complete */
    } else if (last) {
        eng_finish(e, r, SP_FINISH_LENGTH);
    }
}

/* Event of what r produced since its last event (callback requests). */
void eng_make_event(sp_engine *e, request *r) {
    if (!r->cb) return;
    int32_t n_tok = r->n_all - r->n_prompt;
    bool done = r->state == RQ_DONE;
    if (n_tok == r->ev_tokens && r->text_released == r->ev_text && !done) return;
    step *s = &e->step;
    sp_event *ev = &s->events[s->n_ev];
    memset(ev, 0, sizeof(*ev));
    ev->id = r->id;
    ev->n_tokens = n_tok - r->ev_tokens;
    ev->tokens = r->toks + r->n_prompt + r->ev_tokens;
    ev->logprobs = r->lp ? r->lp + r->ev_tokens : NULL;
    ev->top_logprobs = r->n_lp;
    if (r->n_lp) {
        ev->top_ids = r->top_ids + (size_t)r->ev_tokens * r->n_lp;
        ev->top_lps = r->top_lps + (size_t)r->ev_tokens * r->n_lp;
    }
    ev->text = r->text + r->ev_text;
    ev->text_len = r->text_released - r->ev_text;
    ev->finished = done;
    r->final_sent = done;
    r->st.completion_tokens = n_tok;
    ev->stats = &r->st;
    ev->error = r->st.finish == SP_FINISH_ERROR ? r->err : NULL;
    ev->error_status = !ev->error ? SP_OK : r->err_status ? r->err_status : SP_ERR_INTERNAL;
    r->ev_tokens = n_tok;
    r->ev_text = r->text_released;
    s->ev_req[s->n_ev++] = r;
}
