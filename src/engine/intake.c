/* intake.c: request intake and validation. sp_engine_submit checks every
 * field of a request, builds its record (tokens, sampler, stop rules,
 * output buffers, its proposer's state) and queues it; the other calls of
 * this file find a record by id for any thread: cancel, wait, read,
 * release. Records live on the engine's all-records list until released
 * (callback requests: until their last event). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/internal.h"

void rq_free(request *r) {
    if (!r) return;
    free(r->toks);
    sp_sampler_free(r->smp);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_toks);
    free(r->salt);
    free(r->lp);
    free(r->top_ids);
    free(r->top_lps);
    free(r->text);
    free(r->hashes);
    suffix_seq_free(r->sfx);
    sp_sampler_free(r->dsmp);
    sp_matcher_free(r->gm);
    sp_grammar_free(r->gram);
    free(r->gtrigger);
    free(r->gmask);
    free(r->gtrig);
    free(r);
}

request *eng_find(sp_engine *e, int64_t id) {
    for (request *r = e->all; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

void eng_unlink(sp_engine *e, request *r) {
    for (request **pp = &e->all; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

sp_request_params sp_request_default_params(void) {
    sp_request_params r;
    memset(&r, 0, sizeof(r));
    r.add_bos = true;
    r.sampling = sp_sampler_default_params();
    r.max_tokens = 16;
    r.spec = SP_SPEC_DEFAULT;
    return r;
}

/* ---- sp_engine_submit's parts: each SP_OK or a status (+ err; the caller
 * writes the message for SP_ERR_NOMEM) ---------------------------------- */

/* The prompt's tokens (tokenized text, or checked ids) into r->toks, with
 * room for max_tokens more. */
static int take_prompt(sp_engine *e, request *r, const sp_request_params *rp, char *err,
                       size_t errlen) {
    if (rp->prompt) {
        size_t len = rp->prompt_len ? rp->prompt_len : strlen(rp->prompt);
        if (len > SP_REQ_MAX_PROMPT_BYTES) {
            seterr(err, errlen, "prompt of %zu bytes is too long", len);
            return SP_ERR_INVALID;
        }
        int n = sp_tokenize(e->vocab, rp->prompt, len, NULL, 0, rp->add_bos, rp->parse_special);
        if (n == SP_TOKENIZE_FAILED) return SP_ERR_NOMEM; /* not a count: never negated */
        if (n < 0) n = -n;
        r->cap = n + rp->max_tokens + 1;
        r->toks = malloc((size_t)r->cap * sizeof(sp_token));
        if (!r->toks) return SP_ERR_NOMEM;
        r->n_prompt = sp_tokenize(e->vocab, rp->prompt, len, r->toks, n, rp->add_bos,
                                  rp->parse_special);
        if (r->n_prompt < 0) {
            seterr(err, errlen, "cannot tokenize the prompt");
            return SP_ERR_INVALID;
        }
    } else {
        if (rp->n_tokens < 0 || (rp->n_tokens > 0 && !rp->tokens)) {
            seterr(err, errlen, "prompt tokens missing");
            return SP_ERR_INVALID;
        }
        for (int32_t i = 0; i < rp->n_tokens; i++)
            if (rp->tokens[i] < 0 || rp->tokens[i] >= e->n_vocab) {
                seterr(err, errlen, "prompt token %d at index %d is outside the vocabulary "
                          "(0..%d)", rp->tokens[i], i, e->n_vocab - 1);
                return SP_ERR_INVALID;
            }
        r->cap = rp->n_tokens + rp->max_tokens + 1;
        r->toks = malloc((size_t)r->cap * sizeof(sp_token));
        if (!r->toks) return SP_ERR_NOMEM;
        if (rp->n_tokens) memcpy(r->toks, rp->tokens, (size_t)rp->n_tokens * sizeof(sp_token));
        r->n_prompt = rp->n_tokens;
    }
    if (r->n_prompt == 0) {
        seterr(err, errlen, "the prompt is empty");
        return SP_ERR_INVALID;
    }
    if ((int64_t)r->n_prompt + rp->max_tokens > e->p.n_ctx) {
        seterr(err, errlen, "prompt (%d tokens) + max_tokens (%d) exceeds the context of %d "
                  "positions", r->n_prompt, rp->max_tokens, e->p.n_ctx);
        return SP_ERR_CONTEXT;
    }
    r->n_all = r->n_prompt;
    return SP_OK;
}

/* Stop strings and stop tokens. */
static int take_stops(request *r, const sp_request_params *rp, char *err, size_t errlen) {
    if (rp->n_stop < 0 || rp->n_stop > SP_REQ_MAX_STOPS || (rp->n_stop && !rp->stop)) {
        seterr(err, errlen, "at most %d stop strings", SP_REQ_MAX_STOPS);
        return SP_ERR_INVALID;
    }
    if (rp->n_stop) {
        r->stop = calloc((size_t)rp->n_stop, sizeof(char *));
        if (!r->stop) return SP_ERR_NOMEM;
        for (int32_t i = 0; i < rp->n_stop; i++) {
            if (!rp->stop[i] || !rp->stop[i][0]) {
                seterr(err, errlen, "stop string %d is empty", i);
                return SP_ERR_INVALID;
            }
            if (!(r->stop[r->n_stop++] = strdup(rp->stop[i]))) return SP_ERR_NOMEM;
            r->max_stop_len = SP_MAX(r->max_stop_len, strlen(rp->stop[i]));
        }
    }
    if (rp->n_stop_tokens < 0 || (rp->n_stop_tokens && !rp->stop_tokens)) {
        seterr(err, errlen, "stop tokens missing");
        return SP_ERR_INVALID;
    }
    if (rp->n_stop_tokens) {
        r->stop_toks = malloc((size_t)rp->n_stop_tokens * sizeof(sp_token));
        if (!r->stop_toks) return SP_ERR_NOMEM;
        memcpy(r->stop_toks, rp->stop_tokens, (size_t)rp->n_stop_tokens * sizeof(sp_token));
        r->n_stop_toks = rp->n_stop_tokens;
    }
    return SP_OK;
}

/* The speculation method, k, and the proposer's per-request state. */
static int take_spec(sp_engine *e, request *r, const sp_request_params *rp, char *err,
                     size_t errlen) {
    r->spec = rp->spec == SP_SPEC_DEFAULT ? e->p.spec : rp->spec;
    if (r->spec < SP_SPEC_OFF || r->spec > SP_SPEC_AUTO) {
        seterr(err, errlen, "unknown speculation mode %d", rp->spec);
        return SP_ERR_INVALID;
    }
    if (r->spec == SP_SPEC_DRAFT && !eng_spec_draft_vocab(e)) {
        seterr(err, errlen, "draft speculation asked for, but the engine has no draft model");
        return SP_ERR_UNSUPPORTED;
    }
    if (rp->spec_k < 0 || rp->spec_k > SP_SPEC_K_MAX) {
        seterr(err, errlen, "spec_k must be 0..%d (got %d)", SP_SPEC_K_MAX, rp->spec_k);
        return SP_ERR_INVALID;
    }
    r->spec_k = rp->spec_k ? rp->spec_k : e->p.spec_k;
    r->propose = rp->propose;
    r->propose_user = rp->propose_user;
    if (r->propose && (r->spec == SP_SPEC_OFF || r->spec == SP_SPEC_AUTO))
        r->spec = SP_SPEC_NGRAM; /* a proposer implies speculation, its own */
    r->greedy = rp->sampling.temperature <= 0;
    r->shadow_pos = r->alt_pos = -1;
    /* auto: the suffix match first, the others as the step finds them
     * (speculate.c, propose_auto) */
    r->spec_auto = r->spec == SP_SPEC_AUTO;
    if (r->spec_auto) r->spec = SP_SPEC_SUFFIX;
    if (r->spec == SP_SPEC_SUFFIX && !r->propose && !(r->sfx = suffix_seq_create(SP_SUFFIX_DEPTH)))
        return SP_ERR_NOMEM;
    if ((r->spec == SP_SPEC_DRAFT || (r->spec_auto && eng_spec_draft_vocab(e))) && !r->greedy &&
        !r->propose) {
        /* the draft draws with the request's seed, so with the noise the
         * target's token at each position is drawn with (the coupling that
         * keeps its acceptance high), and without penalties (it keeps no
         * history; what it proposes only changes how much is accepted) */
        sp_sampler_params dp = rp->sampling;
        dp.repeat_penalty = 1.0f;
        dp.frequency_penalty = dp.presence_penalty = 0.0f;
        /* logit biases: the draft proposes with them (more of its tokens are
         * accepted) unless one is past its vocabulary. Either way the output
         * honors them: verification draws from r->smp, which applies them */
        const int32_t dv = eng_spec_draft_vocab(e);
        for (int32_t i = 0; i < dp.n_logit_bias; i++)
            if (dp.logit_bias[i].token >= dv) dp.n_logit_bias = 0;
        r->dsmp = sp_sampler_create(dp, dv, err, errlen);
        if (!r->dsmp) return SP_ERR_NOMEM;
    }
    return SP_OK;
}

/* Builds r from rp: every field checked, every buffer allocated. */
static int build_request(sp_engine *e, request *r, const sp_request_params *rp, char *err,
                         size_t errlen) {
    int rc;
    if (rp->max_tokens < 1) {
        seterr(err, errlen, "max_tokens must be at least 1 (got %d)", rp->max_tokens);
        return SP_ERR_INVALID;
    }
    if (rp->logprobs < -1 || rp->logprobs > SP_REQ_MAX_LOGPROBS) {
        seterr(err, errlen, "logprobs must be -1..%d (got %d)", SP_REQ_MAX_LOGPROBS, rp->logprobs);
        return SP_ERR_INVALID;
    }
    if ((rc = take_prompt(e, r, rp, err, errlen))) return rc;
    r->smp = sp_sampler_create(rp->sampling, e->n_vocab, err, errlen);
    if (!r->smp) return SP_ERR_INVALID;
    for (int32_t i = 0; i < r->n_prompt; i++) sp_sampler_accept(r->smp, r->toks[i]);
    r->max_tokens = rp->max_tokens;
    if ((rc = take_stops(r, rp, err, errlen))) return rc;
    r->ignore_eos = rp->ignore_eos;
    r->n_lp = SP_MAX(rp->logprobs, 0);
    if (rp->cache_salt && rp->cache_salt[0] && !(r->salt = strdup(rp->cache_salt))) return SP_ERR_NOMEM;
    r->priority = rp->priority;
    r->cb = rp->on_event;
    r->user = rp->user;
    if (rp->logprobs >= 0) r->lp = malloc((size_t)r->max_tokens * sizeof(float));
    if (r->n_lp) {
        r->top_ids = malloc((size_t)r->max_tokens * r->n_lp * sizeof(sp_token));
        r->top_lps = malloc((size_t)r->max_tokens * r->n_lp * sizeof(float));
        if (!r->top_ids || !r->top_lps) return SP_ERR_NOMEM;
    }
    if ((rc = take_spec(e, r, rp, err, errlen))) return rc;
    if ((rc = eng_grammar_take(e, r, rp, err, errlen))) return rc;
    r->text_cap = 256;
    r->text = malloc(r->text_cap);
    r->hashes = malloc((size_t)e->max_blocks * sizeof(block_digest));
    if ((rp->logprobs >= 0 && !r->lp) || !r->text || !r->hashes) return SP_ERR_NOMEM;
    r->text[0] = 0;
    sp_detok_init(&r->dt);
    r->st.prompt_tokens = r->n_prompt;
    r->t_submit = time_ms();
    return SP_OK;
}

/* Queues r; its id, or SP_ERR_NOMEM when the queue cannot grow. */
static int64_t enqueue(sp_engine *e, request *r) {
    pthread_mutex_lock(&e->mu);
    if (e->n_waiting == e->wait_cap) {
        request **nw = realloc(e->waiting, (size_t)e->wait_cap * 2 * sizeof(request *));
        if (!nw) {
            pthread_mutex_unlock(&e->mu);
            return SP_ERR_NOMEM;
        }
        e->waiting = nw;
        e->wait_cap *= 2;
    }
    r->id = e->next_id++;
    r->seqno = e->next_seqno++;
    r->next = e->all;
    e->all = r;
    eng_wait_insert(e, r);
    e->st.submitted++;
    const int64_t id = r->id;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    return id;
}

int64_t sp_engine_submit(sp_engine *e, const sp_request_params *rp, char *err, size_t errlen) {
    request *r = calloc(1, sizeof(*r));
    int64_t rc = r ? SP_OK : SP_ERR_NOMEM;
    if (r) {
        r->slot = -1;
        r->gtrig_tok = -1;
        rc = build_request(e, r, rp, err, errlen);
    }
    if (rc == SP_OK) rc = enqueue(e, r);
    if (rc > 0) return rc;
    if (rc == SP_ERR_NOMEM) seterr(err, errlen, "out of memory queueing the request");
    if (r) eng_grammar_release(e, r);
    rq_free(r);
    return rc;
}

/* ---- any thread: a request by id ---------------------------------------- */

int sp_engine_cancel(sp_engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    request *r = eng_find(e, id);
    if (r && r->state != RQ_DONE) {
        r->cancel_req = true;
        pthread_cond_signal(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
    return r ? SP_OK : SP_ERR_NOT_FOUND;
}

static void fill_status(const request *r, sp_request_status *st) {
    st->n_tokens = r->n_all - r->n_prompt;
    st->text_len = r->text_released;
    st->finished = r->state == RQ_DONE;
    st->stats = r->st;
    st->stats.completion_tokens = r->n_all - r->n_prompt;
}

int sp_engine_wait(sp_engine *e, int64_t id, int32_t have_tokens, int timeout_ms,
                   sp_request_status *st) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    if (timeout_ms > 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->mu);
    request *r;
    for (;;) {
        r = eng_find(e, id);
        if (!r || r->state == RQ_DONE || r->n_all - r->n_prompt > have_tokens || timeout_ms == 0)
            break;
        if (timeout_ms < 0) {
            pthread_cond_wait(&e->changed, &e->mu);
        } else if (pthread_cond_timedwait(&e->changed, &e->mu, &dl) == ETIMEDOUT) {
            r = eng_find(e, id);
            break;
        }
    }
    if (r && st) fill_status(r, st);
    pthread_mutex_unlock(&e->mu);
    return r ? SP_OK : SP_ERR_NOT_FOUND;
}

int sp_engine_read(sp_engine *e, int64_t id, sp_token *tokens, int32_t cap, char *text,
                   size_t text_cap) {
    pthread_mutex_lock(&e->mu);
    request *r = eng_find(e, id);
    if (r) {
        int32_t n = SP_MIN(cap, r->n_all - r->n_prompt);
        if (tokens && n > 0) memcpy(tokens, r->toks + r->n_prompt, (size_t)n * sizeof(sp_token));
        if (text && text_cap) {
            size_t t = SP_MIN(text_cap - 1, r->text_released);
            memcpy(text, r->text, t);
            text[t] = 0;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return r ? SP_OK : SP_ERR_NOT_FOUND;
}

void sp_engine_release(sp_engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    request *r = eng_find(e, id);
    if (r && !r->cb) {
        if (r->state == RQ_DONE) {
            eng_unlink(e, r); /* not in any queue or batch once done */
            rq_free(r);
        } else {
            r->cancel_req = r->released = true; /* the engine thread frees it */
            pthread_cond_signal(&e->work);
        }
    }
    pthread_mutex_unlock(&e->mu);
}
