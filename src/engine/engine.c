/* engine.c: the serving engine's life: creation, the engine thread's loop,
 * the control asks (flush, check) and the stats; the legend of the engine's
 * files.
 *
 * Requests arrive from any thread; one engine thread runs the step loop
 * over a context whose K/V live in the paged pool. The files, by idea:
 *   intake.c     request intake and validation (sp_engine_submit), and the
 *                calls that find a request by id (cancel, wait, read,
 *                release)
 *   sched.c      scheduling: the waiting queue by priority, admission with
 *                prefix-cache reuse, preemption under pool pressure, a
 *                request's end (finish), commits to the prefix cache
 *   step.c       the step: the batch built from the scheduled entries with
 *                an explicit map from logits rows to entries, the forward
 *                pass, the commit of each entry's result; the per-step
 *                buffers (struct step) live here, not in the engine
 *   speculate.c  speculation inside the step: proposals, the plan, the fit
 *                into budget and pool, verification, the acceptance
 *                estimate (eng_spec_observe, its one writer)
 *   output.c     what a committed token becomes: logprobs, text, stop
 *                rules, events
 *   disk.c       the prefix cache's disk tier: blocks written as they are
 *                cached, restored at admission when that costs less than
 *                computing them
 *   constrain.c  structured output inside the step: the grammar cache by
 *                tenant, grammar memory, masked logits rows, proposals cut
 *                at the grammar, jump-forward tokens
 *   internal.h   the records (request, step, sp_engine and the
 *                substructures each glue file owns) the files share
 * and in src/speculate/: draft.c (the draft proposer, its own KV and cost),
 * planner.c (cost model, its measurement and the choice of k), guard.c
 * (speculation on or off per batch shape, by measured throughput), verify.c
 * (the acceptance rule), ngram.c / suffix.c (proposers), parts.c (what
 * speculation learns, per cache salt).
 *
 * One round of the loop (engine_main), under the lock:
 *   serve_controls  flush / check asks, the debug invariant check
 *   reap            cancelled requests finish; final events still owed
 *   eng_step        schedule -> guard -> eng_spec_prepare -> build the batch -> forward
 *                   pass (unlocked) -> commit each entry from its rows
 *                   (verify + roll back when it speculated) -> its event
 *   publish         the pool's stats snapshot (its one writer), the events
 *                   delivered (callbacks run unlocked), waiters woken
 *
 * Locking: one mutex guards every request record and queue; the forward
 * pass and the user's callbacks run without it. Only the engine thread
 * changes a running request's tokens, text and slot, and the pool.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "grammar/grammar.h"

sp_engine_params sp_engine_default_params(void) {
    sp_engine_params p;
    memset(&p, 0, sizeof(p));
    p.n_threads = sp_context_default_params().n_threads;
    p.max_seqs = 16;
    p.max_batch_tokens = 512;
    p.n_ctx = 0;
    p.kv_mem = 0;
    p.kv_block_size = 16;
    p.kv_type = SP_KV_F16;
    p.prefix_cache = true;
    p.spec = SP_SPEC_OFF;
    p.spec_k = 4;
    p.spec_adaptive = true;
    p.ngram_min = 1;
    p.ngram_max = 4;
    p.suffix_store_tokens = 1 << 16;
    p.spec_partitions = 256;
    p.grammar_mem = SP_GRAMMAR_MEM_DEFAULT;
    return p;
}

/* ---- the loop --------------------------------------------------------------- */

/* Serves flush/check asks (the pool is quiescent between steps) and, with
 * debug_check, checks the invariants after every step. */
static void serve_controls(sp_engine *e) {
    if (e->p.debug_check) {
        char err[256];
        if ((kv_paged_check(e->kv, err, sizeof(err)) ||
             eng_spec_check(e, err, sizeof(err))) &&
            !e->ctl.check_failures++)
            snprintf(e->ctl.first_failure, sizeof(e->ctl.first_failure), "%s", err);
    }
    bool served = false;
    if (e->ctl.flush_req) {
        e->ctl.flush_result = kv_paged_flush(e->kv);
        e->ctl.flush_req = false;
        served = true;
    }
    if (e->ctl.check_req) {
        e->ctl.check_rc = kv_paged_check(e->kv, e->ctl.check_err, sizeof(e->ctl.check_err));
        if (!e->ctl.check_rc)
            e->ctl.check_rc = eng_spec_check(e, e->ctl.check_err,
                                              sizeof(e->ctl.check_err));
        e->ctl.check_req = false;
        served = true;
    }
    if (served) e->ctl.gen++; /* publish wakes the asker */
}

/* Finishes what was cancelled since the last step and collects the final
 * events still owed (at most max_seqs per round; the rest wait a round). */
static void reap(sp_engine *e) {
    for (request *r = e->all, *nx; r; r = nx) {
        nx = r->next;
        if (r->cancel_req && r->state != RQ_DONE) eng_finish(e, r, SP_FINISH_CANCELLED);
        if (r->state == RQ_DONE && r->cb && !r->final_sent && e->step.n_ev < e->p.max_seqs)
            eng_make_event(e, r);
        if (r->released && r->state == RQ_DONE) {
            eng_unlink(e, r);
            rq_free(r);
        }
    }
}

/* Runs the callbacks of the round's events, unlocked. */
static void deliver(sp_engine *e) {
    step *s = &e->step;
    if (!s->n_ev) return;
    pthread_mutex_unlock(&e->mu);
    for (int32_t i = 0; i < s->n_ev; i++) s->ev_req[i]->cb(&s->events[i], s->ev_req[i]->user);
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < s->n_ev; i++) {
        request *r = s->ev_req[i];
        if (r->final_sent) { /* a callback request is forgotten after its last event */
            eng_unlink(e, r);
            rq_free(r);
        }
    }
}

/* The end of every round (and creation): the pool's stats snapshot is
 * refreshed (before anyone hears of the round; the only place it is written),
 * the events go out, and every waiter looks again. */
static void publish(sp_engine *e) {
    kv_paged_get_stats(e->kv, &e->ctl.kv_snap);
    deliver(e);
    pthread_cond_broadcast(&e->changed);
}

static bool idle(const sp_engine *e) {
    return !e->n_running && !e->n_waiting && !e->ctl.flush_req && !e->ctl.check_req && !e->stop;
}

static void *engine_main(void *arg) {
    sp_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        e->step.n_ev = 0;
        serve_controls(e);
        reap(e);
        const bool owed = e->step.n_ev > 0; /* final events first, then a step */
        if (!owed && (e->n_running || e->n_waiting)) eng_step(e);
        publish(e);
        if (!owed && idle(e)) pthread_cond_wait(&e->work, &e->mu);
    }
    /* shutting down: everything still alive is cancelled and told so; a
     * control ask still waiting is answered */
    serve_controls(e);
    for (request *r = e->all; r; r = r->next) r->cancel_req = true;
    do {
        e->step.n_ev = 0;
        reap(e);
        publish(e);
    } while (e->step.n_ev);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- creation --------------------------------------------------------------- */

static int check_params(const sp_engine_params *p, char *err, size_t errlen) {
    if (p->max_seqs <= 0 || p->max_seqs > SP_ENGINE_MAX_SEQS || p->max_batch_tokens <= 0 ||
        p->max_batch_tokens > SP_ENGINE_MAX_BATCH || p->n_ctx > SP_ENGINE_MAX_CTX ||
        p->kv_block_size <= 0 || p->kv_block_size > SP_ENGINE_MAX_BLOCK ||
        (p->kv_type != SP_KV_F16 && p->kv_type != SP_KV_F32 && p->kv_type != SP_KV_Q8_0) || p->n_threads <= 0 ||
        p->n_threads > SP_ENGINE_MAX_THREADS) {
        seterr(err, errlen, "invalid engine parameters (max_seqs %d, max_batch_tokens %d, "
                  "n_ctx %d, block size %d, threads %d)", p->max_seqs, p->max_batch_tokens,
                  p->n_ctx, p->kv_block_size, p->n_threads);
        return SP_ERR_INVALID;
    }
    if (p->spec < SP_SPEC_OFF || p->spec > SP_SPEC_AUTO || p->spec_k < 1 ||
        p->spec_k > SP_SPEC_K_MAX || p->ngram_min < 1 || p->ngram_max < p->ngram_min ||
        p->ngram_max > SP_ENGINE_MAX_NGRAM) {
        seterr(err, errlen, "invalid speculation parameters (mode %d, k %d, n-gram %d..%d; k "
                  "must be 1..%d)", p->spec, p->spec_k, p->ngram_min, p->ngram_max, SP_SPEC_K_MAX);
        return SP_ERR_INVALID;
    }
    if (p->grammar_mem && p->grammar_mem < 2 * GR_MATCHER_MAX_BYTES) {
        seterr(err, errlen, "grammar_mem must be at least %zu MiB (two matchers' budgets)",
                  2 * GR_MATCHER_MAX_BYTES >> 20);
        return SP_ERR_INVALID;
    }
    if (p->spec == SP_SPEC_DRAFT && !p->draft) {
        seterr(err, errlen, "draft speculation needs a draft model (--draft)");
        return SP_ERR_INVALID;
    }
    return SP_OK;
}

/* The target's pool (kv_mem, or enough for every sequence's full context up
 * to 1 GiB) and context. The pool's block count goes to *n_blocks. */
static int create_target(sp_engine *e, sp_context_params *cp, int64_t *n_blocks, char *err,
                         size_t errlen) {
    const sp_model_info *h = sp_model_get_info(e->m);
    const sp_engine_params *p = &e->p;
    const tensor_type kt = kv_tensor_type(p->kv_type);
    const int32_t kv_dim = h->n_head_kv * h->head_dim, bs = p->kv_block_size;
    if (kt == SP_TYPE_Q8_0 && h->head_dim % 32) {
        seterr(err, errlen, "a q8_0 KV cache needs a head size that is a multiple of 32 (this model's: %d)",
                  h->head_dim);
        return SP_ERR_INVALID;
    }
    e->max_blocks = (p->n_ctx + bs - 1) / bs;
    /* Sliding layers keep their K/V in a pool of their own, sized so that it
     * never decides admission: each running sequence holds at most its
     * window, a prefill chunk and a verification (plus two partial blocks),
     * and as much again stays cached for prefixes to find their last
     * window. The main pool (the other layers) gets the rest of the memory. */
    bool slides[1024] = {false};
    int32_t n_win = 0;
    for (int32_t l = 0; l < h->n_layer; l++) n_win += slides[l] = e->m->layers[l].window > 0 && h->n_swa < p->n_ctx;
    const int64_t per_seq = n_win ? (h->n_swa + p->max_batch_tokens + SP_SPEC_K_MAX + bs - 1) / bs + 2 : 0;
    const int64_t win_nb = SP_MIN(2 * per_seq * p->max_seqs, (int64_t)INT32_MAX / 2);
    const size_t wbb = kv_paged_block_bytes(kt, n_win, kv_dim, bs);
    const size_t bb = kv_paged_block_bytes(kt, h->n_layer - n_win, kv_dim, bs), win_bytes = (size_t)win_nb * wbb;
    size_t mem = p->kv_mem;
    if (!mem) mem = SP_MIN((size_t)p->max_seqs * e->max_blocks * bb + win_bytes, ((size_t)1 << 30) + win_bytes);
    if (mem < win_bytes) {
        seterr(err, errlen, "--kv-mem %zu bytes cannot hold the sliding layers' %zu (a window of %d "
                  "positions for each of %d sequences)", p->kv_mem, win_bytes, h->n_swa, p->max_seqs);
        return SP_ERR_INVALID;
    }
    /* every layer slides: the main pool's blocks hold no data (a table only) */
    int64_t nb = bb ? (int64_t)((mem - win_bytes) / bb) : (int64_t)p->max_seqs * e->max_blocks + e->max_blocks + 1;
    if (nb < e->max_blocks + 1) {
        /* one request of a full context must always fit, or the scheduler
         * could wait forever */
        if (p->kv_mem) {
            seterr(err, errlen, "--kv-mem %zu bytes holds %lld blocks of %zu bytes; one "
                      "context of %d positions needs %d", p->kv_mem, (long long)nb, bb, p->n_ctx,
                      e->max_blocks + 1);
            return SP_ERR_INVALID;
        }
        nb = e->max_blocks + 1;
    }
    if (nb > INT32_MAX / 2) nb = INT32_MAX / 2;
    *n_blocks = nb;
    kv_paged_params kp = {kt, h->n_layer, kv_dim, bs, (int32_t)nb, p->max_seqs,
                             e->max_blocks, p->prefix_cache, n_win ? h->n_swa : 0, slides, (int32_t)win_nb};
    e->kv = kv_paged_create(kp, err, errlen);
    if (!e->kv) return SP_ERR_NOMEM;
    *cp = sp_context_default_params();
    cp->n_threads = p->n_threads;
    cp->n_seq_max = p->max_seqs;
    cp->n_ctx = p->n_ctx;
    cp->n_batch = p->max_batch_tokens;
    cp->kv_type = p->kv_type;
    e->ctx = context_create_with_kv(e->m, *cp, e->kv, NULL, err, errlen);
    if (!e->ctx) return SP_ERR_NOMEM;
    model_fingerprint(e->m, e->model_key);
    return SP_OK;
}

static void *engine_main(void *arg);

sp_engine *sp_engine_create(const sp_model *m, sp_engine_params p, char *err, size_t errlen) {
    const sp_model_info *h = sp_model_get_info(m);
    if (h->n_layer <= 0) { /* loaded vocab_only / meta_only: no weights to run */
        seterr(err, errlen, "the model was loaded without its weights (vocab_only)");
        return NULL;
    }
    if (p.n_ctx <= 0) p.n_ctx = SP_MIN(h->n_ctx_train > 0 ? h->n_ctx_train : 2048, 8192);
    if (check_params(&p, err, errlen)) return NULL;
    if (p.draft && spec_check_draft(m, p.draft, err, errlen)) return NULL;
    sp_engine *e = calloc(1, sizeof(*e));
    if (!e) {
        seterr(err, errlen, "out of memory creating the engine");
        return NULL;
    }
    e->m = m;
    e->vocab = sp_model_get_vocab(m);
    e->n_vocab = h->n_vocab;
    e->p = p;
    if (!e->p.grammar_mem) e->p.grammar_mem = SP_GRAMMAR_MEM_DEFAULT;
    pthread_mutex_init(&e->mu, NULL);
    eng_grammar_init(e);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->changed, NULL);
    sp_context_params cp;
    int64_t nb;
    if (create_target(e, &cp, &nb, err, errlen)) goto fail;
    if (eng_disk_open(e, err, errlen)) goto fail;
    e->wait_cap = 64;
    e->waiting = malloc((size_t)e->wait_cap * sizeof(request *));
    e->slots = calloc((size_t)p.max_seqs, sizeof(request *));
    if (!e->waiting || !e->slots ||
        step_init(&e->step, p.max_batch_tokens, p.max_seqs)) {
        seterr(err, errlen, "out of memory creating the engine");
        goto fail;
    }
    publish(e); /* the first snapshot, before any caller can read it */
    e->next_id = 1;
    if (eng_spec_init(e, cp, nb, err, errlen)) goto fail;
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
        seterr(err, errlen, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    return e;
fail:
    sp_engine_free(e);
    return NULL;
}

void sp_engine_free(sp_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_broadcast(&e->work);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    while (e->all) {
        request *r = e->all;
        e->all = r->next;
        rq_free(r);
    }
    eng_disk_close(e); /* its writer drains the queue of block copies first */
    eng_spec_free(e); /* before the context: the draft runs on its threads */
    sp_context_free(e->ctx);
    if (e->kv) e->kv->ops->destroy(e->kv);
    step_free(&e->step);
    eng_grammar_free(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->changed);
    free(e->waiting);
    free(e->slots);
    free(e);
}

/* ---- stats and control asks (any thread) ------------------------------------- */

void sp_engine_get_stats(sp_engine *e, sp_engine_stats *st) {
    pthread_mutex_lock(&e->mu);
    *st = e->st;
    const kv_paged_stats ks = e->ctl.kv_snap;
    eng_spec_stats(e, st);
    st->evictions_pressure = ks.evictions;
    st->evictions_flush = ks.flushed;
    st->blocks_total = ks.n_blocks;
    st->blocks_free = ks.n_free;
    st->blocks_cached = ks.n_cached;
    st->blocks_in_use = ks.n_in_use;
    st->block_size = ks.block_size;
    st->kv_bytes_total = ks.pool_bytes;
    st->window_blocks_total = ks.win_blocks;
    st->window_blocks_in_use = ks.win_in_use;
    st->kv_bytes_window = (size_t)ks.win_blocks * ks.win_block_bytes;
    st->kv_bytes_cached = ks.cached_bytes;
    st->running = e->n_running;
    st->waiting = e->n_waiting;
    eng_grammar_stats(e, st);
    eng_disk_stats(e, st);
    pthread_mutex_unlock(&e->mu);
}

float sp_engine_spec_prior(sp_engine *e, const char *cache_salt, sp_spec_mode m) {
    if (m <= SP_SPEC_OFF || m > SP_SPEC_DRAFT) return -1.0f;
    /* the engine thread changes the partitions only under the lock */
    pthread_mutex_lock(&e->mu);
    const float a = eng_spec_prior(e, cache_salt, m);
    pthread_mutex_unlock(&e->mu);
    return a;
}

/* Asks the engine thread for a control action and waits until it is done. */
static void control(sp_engine *e, bool *flag) {
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->ctl.gen;
    *flag = true;
    pthread_cond_signal(&e->work);
    while (e->ctl.gen == gen) pthread_cond_wait(&e->changed, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

int32_t sp_engine_flush_cache(sp_engine *e) {
    control(e, &e->ctl.flush_req);
    pthread_mutex_lock(&e->mu);
    int32_t n = e->ctl.flush_result;
    pthread_mutex_unlock(&e->mu);
    return n;
}

int sp_engine_check(sp_engine *e, char *err, size_t errlen) {
    control(e, &e->ctl.check_req);
    pthread_mutex_lock(&e->mu);
    int rc = e->ctl.check_rc ? SP_ERR_INTERNAL : SP_OK;
    if (!rc && e->ctl.check_failures) {
        rc = SP_ERR_INTERNAL;
        seterr(err, errlen, "%llu step(s) broke the pool invariant; first: %s",
                  (unsigned long long)e->ctl.check_failures, e->ctl.first_failure);
    } else if (rc) {
        seterr(err, errlen, "%s", e->ctl.check_err);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}
