/* engine.c: the serving engine. Requests arrive from any thread; one engine
 * thread runs the step loop (schedule -> one batched forward pass -> sample
 * -> report) over a context whose K/V live in the paged pool.
 *
 * A request is one token array, prompt followed by what it generated
 * (toks[0..n_all)), and a count of positions whose K/V are in its slot
 * (kv_len, the sequence length of its slot). Every step it is given the
 * tokens toks[kv_len .. kv_len + n): a prefill chunk when n > 1, a decode
 * token when n_all - kv_len == 1, and after a preemption the same path
 * recomputes prompt and output alike. Logits are asked for only when the
 * chunk reaches n_all.
 *
 * Scheduling per step, under a budget of max_batch_tokens tokens:
 *   1. running requests that decode (1 token each), oldest first;
 *   2. running requests still prefilling, oldest first, in chunks;
 *   3. waiting requests by priority then arrival, while a slot is free and
 *      the pool can hold their whole remaining prompt.
 * When the pool cannot hold a running request's next tokens, the newest
 * running request is preempted: its blocks go back (full ones stay cached,
 * so re-admission usually finds them) and it waits at its old place.
 *
 * Locking: one mutex guards every request record and queue; the forward
 * pass and the user's callbacks run without it. Only the engine thread
 * changes a running request's tokens, text and slot.
 *
 * Isolation: what speculation learns from one request and uses for another
 * (the suffix store of earlier outputs, the acceptance prior per method)
 * lives in partitions keyed by the request's cache salt (src/spec/parts.c),
 * the same key as the prefix cache: a request is bound to its salt's
 * partition while it holds a slot, proposes from and feeds only that one,
 * so its proposals, drafted and accepted counts and timing never depend on
 * what requests of another salt (tenant) generated. The partitions are
 * touched only by the engine thread, under the mutex (submit does not read
 * them: the prior is taken at admission).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "kv/kv_paged.h"
#include "model/model.h"
#include "spec/spec.h"
#include "spec/verify.h"

typedef enum { RQ_WAITING, RQ_RUNNING, RQ_DONE } rq_state;

typedef struct request request;
struct request {
    int64_t id;
    uint64_t seqno;            /* arrival order (ties between equal priorities) */
    uint64_t admit_no;         /* admission order: the newest is preempted first */
    request *next;             /* all-records list */
    rq_state state;
    /* input */
    sp_token *toks;            /* [cap] prompt then generated tokens */
    int32_t n_prompt, n_all, cap;
    sp_sampler *smp;
    int32_t max_tokens;
    char **stop;               /* [n_stop] */
    int32_t n_stop;
    size_t max_stop_len;
    sp_token *stop_toks;       /* [n_stop_toks] */
    int32_t n_stop_toks;
    bool ignore_eos;
    int32_t n_lp;              /* top logprobs wanted (0 off) */
    char *salt;                /* NULL: none */
    int32_t priority;
    sp_event_cb cb;
    void *user;
    /* output */
    float *lp;                 /* [max_tokens] logprob of each generated token, or NULL
                                  when none was asked for (logprobs < 0) */
    sp_token *top_ids;         /* [max_tokens][n_lp] */
    float *top_lps;            /* [max_tokens][n_lp] */
    char *text;                /* [text_cap] generated text */
    size_t text_len, text_cap, text_released;
    sp_detok dt;
    int32_t ev_tokens;         /* tokens already reported by events */
    size_t ev_text;            /* text bytes already reported */
    /* engine side */
    int32_t slot;              /* -1 when not running */
    sp_block_hash *hashes;     /* [max_blocks_per_seq] chain over toks' full blocks */
    int32_t n_hashed;          /* leading entries of hashes computed */
    int32_t n_committed;       /* leading blocks of the slot committed to the cache */
    int32_t max_computed;      /* furthest kv_len ever reached (recompute accounting) */
    bool admitted_once;
    /* speculative decoding */
    sp_spec_mode spec;         /* resolved: OFF, NGRAM, SUFFIX or DRAFT */
    int32_t spec_k;            /* most proposed per step */
    sp_propose_fn propose;
    void *propose_user;
    bool greedy;
    sp_token draft[SP_SPEC_K_MAX]; /* this step's proposals */
    int32_t n_draft;
    float *q;                  /* [SP_SPEC_K_MAX][V] draft distributions (draft + sampling) */
    float alpha;               /* acceptance estimate (moving average); starts from its
                                  partition's prior at the first admission */
    sp_spec_part *part;        /* its salt's partition, held while it has a slot */
    /* A deterministic proposal the planner chose not to verify is still
     * checked against the token the target then commits: acceptance keeps
     * being measured while speculation is off, so a sequence whose
     * proposals turn good is noticed (else one bad start stops it for good) */
    sp_token shadow;
    int32_t shadow_pos;        /* position shadow guesses, -1 for none */
    int32_t idle_steps;        /* draft: steps in a row planned at k = 0 */
    sp_suffix_seq *sfx;        /* suffix index over prompt + committed output */
    int32_t sfx_len;           /* tokens of toks indexed in sfx */
    sp_sampler *dsmp;          /* the draft's sampler (sampling requests) */
    bool cancel_req, released;
    bool final_sent;           /* the finished event went out (callback requests) */
    sp_request_stats st;
    double t_submit, t_sched, t_first, t_last;
    char err[256];
};

struct sp_engine {
    const sp_model *m;
    const sp_vocab *vocab;
    sp_engine_params p;
    sp_kv *kv;
    sp_context *ctx;
    uint8_t model_key[32];
    int32_t max_blocks;        /* per sequence */
    int32_t n_vocab;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work;       /* engine thread: something to do */
    pthread_cond_t changed;    /* waiters: some request progressed */
    bool stop;
    int64_t next_id;
    uint64_t next_seqno, next_admit;
    request *all;              /* every record */
    request **waiting;         /* [wait_cap] sorted: priority desc, seqno asc */
    int32_t n_waiting, wait_cap;
    request **slots;           /* [max_seqs] running request per slot or NULL */
    int32_t n_running;
    /* per-step buffers, sized at creation */
    sp_token *b_tok;           /* [max_batch_tokens] */
    int32_t *b_pos, *b_seq;    /* [max_batch_tokens] */
    int8_t *b_want;            /* [max_batch_tokens] */
    request **e_req;           /* [max_seqs] batch entries */
    int32_t *e_n;              /* [max_seqs] tokens of each entry */
    sp_event *events;          /* [max_seqs] */
    request **ev_req;          /* [max_seqs] */
    sp_engine_stats st;
    /* speculative decoding */
    const sp_model *draft;
    sp_kv *dkv;                /* the draft's own paged KV, slot i = target slot i */
    sp_context *dctx;
    sp_cost_model cost, dcost; /* measured pass costs of target and draft */
    sp_cost_fit tfit, dfit;    /* the same, refitted to every pass since (see verify.h) */
    bool calibrated, calib_tried; /* tried: at creation or at the first speculating request */
    sp_spec_parts *parts;      /* per cache salt: suffix store and acceptance priors */
    float *probs, *resid;      /* [V] verification scratch */
    sp_token *commit;          /* [SP_SPEC_K_MAX + 1] tokens verification commits */
    sp_token *d_tok;           /* [max_batch_tokens] draft batch */
    int32_t *d_pos, *d_seq;    /* [max_batch_tokens] */
    int8_t *d_want;            /* [max_batch_tokens] */
    request **d_req;           /* [max_seqs] */
    sp_spec_cand *cand;        /* [max_seqs] */
    int32_t *cand_k;           /* [max_seqs] */
    int32_t *cand_entry;       /* [max_seqs] batch entry of each candidate */
    /* The pool changes inside the forward pass, which runs unlocked, so
     * other threads never touch it: they read this snapshot (refreshed
     * after every step) and ask the engine thread to flush or check. */
    sp_kv_paged_stats kv_snap;
    uint64_t ctl_gen;          /* bumped when the engine thread served a control ask */
    bool flush_req, check_req;
    int32_t flush_result;
    int check_rc;
    char check_err[256];
    uint64_t check_failures;   /* debug_check: steps after which the checker failed */
    char first_failure[256];
};

/* ---- small helpers -------------------------------------------------------- */

static double now_ms(void) { return sp_time_s() * 1e3; }

static void rq_free(request *r) {
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
    free(r->q);
    sp_suffix_seq_free(r->sfx);
    sp_sampler_free(r->dsmp);
    free(r);
}

static request *find(sp_engine *e, int64_t id) {
    for (request *r = e->all; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

static void unlink_record(sp_engine *e, request *r) {
    for (request **pp = &e->all; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

static bool before(const request *a, const request *b) {
    return a->priority != b->priority ? a->priority > b->priority : a->seqno < b->seqno;
}

static void wait_insert(sp_engine *e, request *r) {
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

static int32_t kv_len(sp_engine *e, const request *r) {
    return r->slot < 0 ? 0 : sp_seq_len(e->ctx, r->slot);
}

/* Returns the slot's blocks to the pool (committed ones stay cached). */
static void release_slot(sp_engine *e, request *r) {
    if (r->slot < 0) return;
    sp_spec_parts_release(e->parts, r->part);
    r->part = NULL;
    sp_seq_clear(e->ctx, r->slot);
    if (e->dctx) sp_seq_clear(e->dctx, r->slot);
    e->slots[r->slot] = NULL;
    r->slot = -1;
    r->n_committed = 0;
    e->n_running--;
}

static void finish(sp_engine *e, request *r, sp_finish_reason why) {
    if (r->state == RQ_DONE) return;
    if (r->state == RQ_WAITING) wait_remove(e, r);
    /* the output feeds later suffix proposals of its own salt only; a
     * request that waits after a preemption holds no partition, so it
     * looks its own up (out of memory: nothing is learned, nothing breaks) */
    if (why != SP_FINISH_ERROR && r->n_all > r->n_prompt) {
        sp_spec_part *pt = r->part ? r->part : sp_spec_parts_acquire(e->parts, r->salt);
        sp_spec_parts_add(e->parts, pt, r->toks + r->n_prompt, r->n_all - r->n_prompt);
        if (!r->part) sp_spec_parts_release(e->parts, pt);
    }
    release_slot(e, r);
    r->state = RQ_DONE;
    r->st.finish = why;
    r->text_released = r->text_len;
    double t = now_ms();
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

/* ---- creation ------------------------------------------------------------- */

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
    return p;
}

/* Times one pass of n tokens in an empty slot for n = 1, 2, 4, ... so the
 * planner knows what verifying k more tokens costs. Attention over a long
 * context is not in these passes; measure_attn adds it. */
static void measure(sp_context *c, sp_kv *kv, int32_t slot, int32_t max_n, int32_t n_vocab,
                    sp_cost_model *out) {
    sp_token toks[64];
    int32_t pos[64], seq[64];
    int8_t want[64] = {0};
    out->n = 0;
    for (int32_t n = 1; n <= max_n && n <= 64 && out->n < SP_COST_POINTS; n *= 2) {
        if (sp_kv_paged_blocks_needed(kv, slot, n) > sp_kv_paged_available(kv)) break;
        /* rep 0 warms up (first touch of the pool's pages, cold caches: it
         * was up to 10x slower, and a draft measured that slow would never
         * draft, so never be measured again); the best of the rest counts */
        double best = 1e30;
        for (int rep = 0; rep < 4; rep++) {
            for (int32_t i = 0; i < n; i++) {
                toks[i] = (sp_token)((7 + 31 * i) % n_vocab);
                pos[i] = i;
                seq[i] = slot;
            }
            want[n - 1] = 1;
            sp_batch b = {n, toks, pos, seq, want};
            char err[128];
            double t0 = now_ms();
            int rc = sp_decode(c, &b, err, sizeof(err));
            double t = now_ms() - t0;
            want[n - 1] = 0;
            sp_seq_clear(c, slot);
            if (rc) return;
            if (rep && t < best) best = t;
        }
        out->tok[out->n] = n;
        out->ms[out->n++] = best;
    }
}

/* The cost of attention per 1000 positions attended: one token at position
 * P against one at position 0, interleaved, best of 5 each (one quiet pass
 * of each is enough; a single early sample was often slower than the long
 * one). The P positions are only reserved, not computed (what they hold
 * does not change the time), so this costs ten passes whatever the model.
 * 0 when the pool or context is too small. */
static double time_one(sp_context *c, int32_t slot, int32_t pos, int32_t n_vocab) {
    sp_token tok = (sp_token)(17 % n_vocab);
    int32_t seq = slot;
    int8_t want = 1;
    sp_batch b = {1, &tok, &pos, &seq, &want};
    char err[128];
    const double t0 = now_ms();
    const int rc = sp_decode(c, &b, err, sizeof(err));
    const double t = now_ms() - t0;
    return rc ? -1 : t;
}

static double measure_attn(sp_context *c, sp_kv *kv, int32_t slot, int32_t n_ctx, int32_t n_vocab) {
    const int32_t P = SP_MIN(n_ctx - 1, 1024);
    if (P < 64 || sp_kv_paged_blocks_needed(kv, slot, P + 1) > sp_kv_paged_available(kv)) return 0;
    double best0 = 1e30, bestP = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = time_one(c, slot, 0, n_vocab);
        sp_seq_clear(c, slot);
        if (t0 < 0 || kv->ops->reserve(kv, slot, P)) return 0;
        kv->ops->set_len(kv, slot, P);
        const double tP = time_one(c, slot, P, n_vocab);
        sp_seq_clear(c, slot);
        if (tP < 0) return 0;
        best0 = SP_MIN(best0, t0);
        bestP = SP_MIN(bestP, tP);
    }
    return bestP > best0 ? (bestP - best0) / (P * 1e-3) : 0;
}

/* Measures target (and draft) pass costs in a free slot; engine thread or
 * creation, pool quiescent. */
static void calibrate(sp_engine *e) {
    int32_t slot = 0;
    while (slot < e->p.max_seqs && e->slots[slot]) slot++;
    if (slot == e->p.max_seqs) return;
    int32_t max_n = SP_MIN(e->p.max_batch_tokens, 64);
    e->calib_tried = true;
    measure(e->ctx, e->kv, slot, max_n, e->n_vocab, &e->cost);
    double ta = e->cost.n ? measure_attn(e->ctx, e->kv, slot, e->p.n_ctx, e->n_vocab) : 0, da = 0;
    if (e->dctx) {
        const int32_t dv = sp_model_get_info(e->draft)->n_vocab;
        measure(e->dctx, e->dkv, slot, max_n, dv, &e->dcost);
        if (e->dcost.n) da = measure_attn(e->dctx, e->dkv, slot, e->p.n_ctx, dv);
    }
    e->calibrated = e->cost.n > 0;
    sp_cost_fit_init(&e->tfit, &e->cost, ta);
    sp_cost_fit_init(&e->dfit, &e->dcost, da);
    if (e->cost.n) e->st.cost_ms_1 = e->cost.ms[0];
    e->st.cost_ms_16 = e->cost.n ? sp_cost_at(&e->cost, 16) : 0;
}

static void *engine_main(void *arg);

sp_engine *sp_engine_create(const sp_model *m, sp_engine_params p, char *err, size_t errlen) {
    const sp_model_info *h = sp_model_get_info(m);
    if (h->n_layer <= 0) { /* loaded vocab_only / meta_only: no weights to run */
        sp_seterr(err, errlen, "the model was loaded without its weights (vocab_only)");
        return NULL;
    }
    if (p.n_ctx <= 0) p.n_ctx = SP_MIN(h->n_ctx_train > 0 ? h->n_ctx_train : 2048, 8192);
    if (p.max_seqs <= 0 || p.max_seqs > 1024 || p.max_batch_tokens <= 0 ||
        p.max_batch_tokens > 65536 || p.n_ctx > (1 << 20) || p.kv_block_size <= 0 ||
        p.kv_block_size > 4096 || (p.kv_type != SP_KV_F16 && p.kv_type != SP_KV_F32) ||
        p.n_threads <= 0 || p.n_threads > 256) {
        sp_seterr(err, errlen, "invalid engine parameters (max_seqs %d, max_batch_tokens %d, "
                  "n_ctx %d, block size %d, threads %d)", p.max_seqs, p.max_batch_tokens,
                  p.n_ctx, p.kv_block_size, p.n_threads);
        return NULL;
    }
    if (p.spec < SP_SPEC_OFF || p.spec > SP_SPEC_DRAFT || p.spec_k < 1 || p.spec_k > SP_SPEC_K_MAX ||
        p.ngram_min < 1 || p.ngram_max < p.ngram_min || p.ngram_max > 64) {
        sp_seterr(err, errlen, "invalid speculation parameters (mode %d, k %d, n-gram %d..%d; k "
                  "must be 1..%d)", p.spec, p.spec_k, p.ngram_min, p.ngram_max, SP_SPEC_K_MAX);
        return NULL;
    }
    if (p.spec == SP_SPEC_DRAFT && !p.draft) {
        sp_seterr(err, errlen, "draft speculation needs a draft model (--draft)");
        return NULL;
    }
    if (p.draft && sp_spec_check_draft(m, p.draft, err, errlen)) return NULL;
    sp_engine *e = calloc(1, sizeof(*e));
    if (!e) {
        sp_seterr(err, errlen, "out of memory creating the engine");
        return NULL;
    }
    e->m = m;
    e->vocab = sp_model_get_vocab(m);
    e->n_vocab = h->n_vocab;
    e->p = p;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->changed, NULL);
    const sp_type kt = p.kv_type == SP_KV_F16 ? SP_TYPE_F16 : SP_TYPE_F32;
    const int32_t kv_dim = h->n_head_kv * h->head_dim;
    const size_t bb = sp_kv_paged_block_bytes(kt, h->n_layer, kv_dim, p.kv_block_size);
    e->max_blocks = (p.n_ctx + p.kv_block_size - 1) / p.kv_block_size;
    size_t mem = p.kv_mem;
    if (!mem) mem = SP_MIN((size_t)p.max_seqs * e->max_blocks * bb, (size_t)1 << 30);
    int64_t nb = (int64_t)(mem / bb);
    if (nb < e->max_blocks + 1) {
        /* one request of a full context must always fit, or the scheduler
         * could wait forever */
        if (p.kv_mem) {
            sp_seterr(err, errlen, "--kv-mem %zu bytes holds %lld blocks of %zu bytes; one "
                      "context of %d positions needs %d", p.kv_mem, (long long)nb, bb, p.n_ctx,
                      e->max_blocks + 1);
            goto fail;
        }
        nb = e->max_blocks + 1;
    }
    if (nb > INT32_MAX / 2) nb = INT32_MAX / 2;
    sp_kv_paged_params kp = {kt, h->n_layer, kv_dim, p.kv_block_size, (int32_t)nb, p.max_seqs,
                             e->max_blocks, p.prefix_cache};
    e->kv = sp_kv_paged_create(kp, err, errlen);
    if (!e->kv) goto fail;
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = p.n_threads;
    cp.n_seq_max = p.max_seqs;
    cp.n_ctx = p.n_ctx;
    cp.n_batch = p.max_batch_tokens;
    cp.kv_type = p.kv_type;
    e->ctx = sp_context_create_with_kv(m, cp, e->kv, NULL, err, errlen);
    if (!e->ctx) goto fail;
    sp_model_fingerprint(m, e->model_key);
    if (p.draft) {
        const sp_model_info *dh = sp_model_get_info(p.draft);
        const int32_t dkd = dh->n_head_kv * dh->head_dim;
        /* as many blocks as the target (a draft position never outnumbers a
         * target one, bar k - 1 in flight) plus one spare per slot */
        sp_kv_paged_params dp = {kt, dh->n_layer, dkd, p.kv_block_size, (int32_t)nb + p.max_seqs,
                                 p.max_seqs, e->max_blocks + 1, false};
        e->dkv = sp_kv_paged_create(dp, err, errlen);
        if (!e->dkv) goto fail;
        sp_context_params dcp = cp;
        dcp.n_ctx = p.n_ctx + SP_SPEC_K_MAX;
        e->dctx = sp_context_create_with_kv(p.draft, dcp, e->dkv, e->ctx, err, errlen);
        if (!e->dctx) goto fail;
        e->draft = p.draft;
    }
    /* one partition per cache salt; at least max_seqs + 1, so that a request
     * being admitted or finishing always finds one that no running request
     * holds to make room (each running request holds one) */
    const int32_t n_parts = SP_MAX(p.spec_partitions > 0 ? p.spec_partitions : 256, p.max_seqs + 1);
    e->parts = sp_spec_parts_create(p.suffix_store_tokens, n_parts, 24);
    e->probs = malloc((size_t)e->n_vocab * sizeof(float));
    e->resid = malloc((size_t)e->n_vocab * sizeof(float));
    e->commit = malloc((SP_SPEC_K_MAX + 1) * sizeof(sp_token));
    e->d_tok = malloc((size_t)p.max_batch_tokens * sizeof(sp_token));
    e->d_pos = malloc((size_t)p.max_batch_tokens * sizeof(int32_t));
    e->d_seq = malloc((size_t)p.max_batch_tokens * sizeof(int32_t));
    e->d_want = malloc((size_t)p.max_batch_tokens);
    e->d_req = malloc((size_t)p.max_seqs * sizeof(request *));
    e->cand = malloc((size_t)p.max_seqs * sizeof(sp_spec_cand));
    e->cand_k = malloc((size_t)p.max_seqs * sizeof(int32_t));
    e->cand_entry = malloc((size_t)p.max_seqs * sizeof(int32_t));
    if (!e->parts || !e->probs || !e->resid || !e->commit || !e->d_tok || !e->d_pos ||
        !e->d_seq || !e->d_want || !e->d_req || !e->cand || !e->cand_k || !e->cand_entry) {
        sp_seterr(err, errlen, "out of memory creating the engine");
        goto fail;
    }
    sp_kv_paged_get_stats(e->kv, &e->kv_snap);
    const int32_t B = p.max_batch_tokens, S = p.max_seqs;
    e->wait_cap = 64;
    e->waiting = malloc((size_t)e->wait_cap * sizeof(request *));
    e->slots = calloc((size_t)S, sizeof(request *));
    e->b_tok = malloc((size_t)B * sizeof(sp_token));
    e->b_pos = malloc((size_t)B * sizeof(int32_t));
    e->b_seq = malloc((size_t)B * sizeof(int32_t));
    e->b_want = malloc((size_t)B);
    e->e_req = malloc((size_t)S * sizeof(request *));
    e->e_n = malloc((size_t)S * sizeof(int32_t));
    e->events = malloc((size_t)S * sizeof(sp_event));
    e->ev_req = malloc((size_t)S * sizeof(request *));
    if (!e->waiting || !e->slots || !e->b_tok || !e->b_pos || !e->b_seq || !e->b_want ||
        !e->e_req || !e->e_n || !e->events || !e->ev_req) {
        sp_seterr(err, errlen, "out of memory creating the engine");
        goto fail;
    }
    e->next_id = 1;
    if (p.spec != SP_SPEC_OFF && p.spec_adaptive) calibrate(e);
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
        sp_seterr(err, errlen, "cannot start the engine thread");
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
    sp_context_free(e->dctx); /* first: it runs on the target context's threads */
    if (e->dkv) e->dkv->ops->destroy(e->dkv);
    sp_context_free(e->ctx);
    if (e->kv) e->kv->ops->destroy(e->kv);
    sp_spec_parts_free(e->parts);
    free(e->probs);
    free(e->resid);
    free(e->commit);
    free(e->d_tok);
    free(e->d_pos);
    free(e->d_seq);
    free(e->d_want);
    free(e->d_req);
    free(e->cand);
    free(e->cand_k);
    free(e->cand_entry);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->changed);
    free(e->waiting);
    free(e->slots);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->e_req);
    free(e->e_n);
    free(e->events);
    free(e->ev_req);
    free(e);
}

/* ---- submission ----------------------------------------------------------- */

sp_request_params sp_request_default_params(void) {
    sp_request_params r;
    memset(&r, 0, sizeof(r));
    r.add_bos = true;
    r.sampling = sp_sampler_default_params();
    r.max_tokens = 16;
    r.spec = SP_SPEC_DEFAULT;
    return r;
}

const char *sp_status_str(int status) {
    switch (status) {
    case SP_OK: return "ok";
    case SP_ERR_INVALID: return "invalid";
    case SP_ERR_CONTEXT: return "context";
    case SP_ERR_NOMEM: return "nomem";
    case SP_ERR_BUSY: return "busy";
    case SP_ERR_CANCELLED: return "cancelled";
    case SP_ERR_UNSUPPORTED: return "unsupported";
    case SP_ERR_IO: return "io";
    case SP_ERR_NOT_FOUND: return "not_found";
    case SP_ERR_INTERNAL: return "internal";
    default: return "unknown";
    }
}

const char *sp_finish_reason_str(sp_finish_reason r) {
    switch (r) {
    case SP_FINISH_STOP: return "stop";
    case SP_FINISH_LENGTH: return "length";
    case SP_FINISH_CANCELLED: return "cancelled";
    case SP_FINISH_ERROR: return "error";
    default: return "none";
    }
}

int64_t sp_engine_submit(sp_engine *e, const sp_request_params *rp, char *err, size_t errlen) {
    int64_t rc = SP_ERR_INVALID;
    request *r = calloc(1, sizeof(*r));
    if (!r) goto oom;
    r->slot = -1;
    const int32_t n_ctx = e->p.n_ctx;
    if (rp->max_tokens < 1) {
        sp_seterr(err, errlen, "max_tokens must be at least 1 (got %d)", rp->max_tokens);
        goto fail;
    }
    if (rp->logprobs < -1 || rp->logprobs > 20) {
        sp_seterr(err, errlen, "logprobs must be -1..20 (got %d)", rp->logprobs);
        goto fail;
    }
    /* prompt tokens */
    if (rp->prompt) {
        size_t len = rp->prompt_len ? rp->prompt_len : strlen(rp->prompt);
        if (len > (size_t)64 << 20) {
            sp_seterr(err, errlen, "prompt of %zu bytes is too long", len);
            goto fail;
        }
        int n = sp_tokenize(e->vocab, rp->prompt, len, NULL, 0, rp->add_bos, rp->parse_special);
        if (n == SP_TOKENIZE_FAILED) goto oom; /* not a count: never negated */
        if (n < 0) n = -n;
        r->cap = n + rp->max_tokens + 1;
        r->toks = malloc((size_t)r->cap * sizeof(sp_token));
        if (!r->toks) goto oom;
        r->n_prompt = sp_tokenize(e->vocab, rp->prompt, len, r->toks, n, rp->add_bos,
                                  rp->parse_special);
        if (r->n_prompt < 0) {
            sp_seterr(err, errlen, "cannot tokenize the prompt");
            goto fail;
        }
    } else {
        if (rp->n_tokens < 0 || (rp->n_tokens > 0 && !rp->tokens)) {
            sp_seterr(err, errlen, "prompt tokens missing");
            goto fail;
        }
        for (int32_t i = 0; i < rp->n_tokens; i++)
            if (rp->tokens[i] < 0 || rp->tokens[i] >= e->n_vocab) {
                sp_seterr(err, errlen, "prompt token %d at index %d is outside the vocabulary "
                          "(0..%d)", rp->tokens[i], i, e->n_vocab - 1);
                goto fail;
            }
        r->cap = rp->n_tokens + rp->max_tokens + 1;
        r->toks = malloc((size_t)r->cap * sizeof(sp_token));
        if (!r->toks) goto oom;
        if (rp->n_tokens) memcpy(r->toks, rp->tokens, (size_t)rp->n_tokens * sizeof(sp_token));
        r->n_prompt = rp->n_tokens;
    }
    if (r->n_prompt == 0) {
        sp_seterr(err, errlen, "the prompt is empty");
        goto fail;
    }
    if ((int64_t)r->n_prompt + rp->max_tokens > n_ctx) {
        sp_seterr(err, errlen, "prompt (%d tokens) + max_tokens (%d) exceeds the context of %d "
                  "positions", r->n_prompt, rp->max_tokens, n_ctx);
        rc = SP_ERR_CONTEXT;
        goto fail;
    }
    r->n_all = r->n_prompt;
    r->smp = sp_sampler_create(rp->sampling, e->n_vocab, err, errlen);
    if (!r->smp) goto fail;
    for (int32_t i = 0; i < r->n_prompt; i++) sp_sampler_accept(r->smp, r->toks[i]);
    r->max_tokens = rp->max_tokens;
    if (rp->n_stop < 0 || rp->n_stop > 64 || (rp->n_stop && !rp->stop)) {
        sp_seterr(err, errlen, "at most 64 stop strings");
        goto fail;
    }
    if (rp->n_stop) {
        r->stop = calloc((size_t)rp->n_stop, sizeof(char *));
        if (!r->stop) goto oom;
        for (int32_t i = 0; i < rp->n_stop; i++) {
            if (!rp->stop[i] || !rp->stop[i][0]) {
                sp_seterr(err, errlen, "stop string %d is empty", i);
                goto fail;
            }
            if (!(r->stop[r->n_stop++] = strdup(rp->stop[i]))) goto oom;
            r->max_stop_len = SP_MAX(r->max_stop_len, strlen(rp->stop[i]));
        }
    }
    if (rp->n_stop_tokens < 0 || (rp->n_stop_tokens && !rp->stop_tokens)) {
        sp_seterr(err, errlen, "stop tokens missing");
        goto fail;
    }
    if (rp->n_stop_tokens) {
        r->stop_toks = malloc((size_t)rp->n_stop_tokens * sizeof(sp_token));
        if (!r->stop_toks) goto oom;
        memcpy(r->stop_toks, rp->stop_tokens, (size_t)rp->n_stop_tokens * sizeof(sp_token));
        r->n_stop_toks = rp->n_stop_tokens;
    }
    r->ignore_eos = rp->ignore_eos;
    r->n_lp = SP_MAX(rp->logprobs, 0);
    if (rp->cache_salt && rp->cache_salt[0] && !(r->salt = strdup(rp->cache_salt))) goto oom;
    r->priority = rp->priority;
    r->cb = rp->on_event;
    r->user = rp->user;
    if (rp->logprobs >= 0) r->lp = malloc((size_t)r->max_tokens * sizeof(float));
    if (r->n_lp) {
        r->top_ids = malloc((size_t)r->max_tokens * r->n_lp * sizeof(sp_token));
        r->top_lps = malloc((size_t)r->max_tokens * r->n_lp * sizeof(float));
        if (!r->top_ids || !r->top_lps) goto oom;
    }
    r->spec = rp->spec == SP_SPEC_DEFAULT ? e->p.spec : rp->spec;
    if (r->spec < SP_SPEC_OFF || r->spec > SP_SPEC_DRAFT) {
        sp_seterr(err, errlen, "unknown speculation mode %d", rp->spec);
        goto fail;
    }
    if (r->spec == SP_SPEC_DRAFT && !e->draft) {
        sp_seterr(err, errlen, "draft speculation asked for, but the engine has no draft model");
        rc = SP_ERR_UNSUPPORTED;
        goto fail;
    }
    if (rp->spec_k < 0 || rp->spec_k > SP_SPEC_K_MAX) {
        sp_seterr(err, errlen, "spec_k must be 0..%d (got %d)", SP_SPEC_K_MAX, rp->spec_k);
        goto fail;
    }
    r->spec_k = rp->spec_k ? rp->spec_k : e->p.spec_k;
    r->propose = rp->propose;
    r->propose_user = rp->propose_user;
    if (r->propose && r->spec == SP_SPEC_OFF) r->spec = SP_SPEC_NGRAM; /* a proposer implies speculation */
    r->greedy = rp->sampling.temperature <= 0;
    r->shadow_pos = -1;
    if (r->spec == SP_SPEC_SUFFIX && !r->propose && !(r->sfx = sp_suffix_seq_create(24))) goto oom;
    if (r->spec == SP_SPEC_DRAFT && !r->greedy && !r->propose) {
        r->q = malloc((size_t)SP_SPEC_K_MAX * e->n_vocab * sizeof(float));
        sp_sampler_params dp = rp->sampling; /* the draft samples without penalties: q must be
                                                exactly what its token was drawn from */
        dp.repeat_penalty = 1.0f;
        dp.frequency_penalty = dp.presence_penalty = 0.0f;
        dp.seed = rp->sampling.seed ^ 0x9E3779B97F4A7C15ull;
        /* logit biases: the draft proposes with them (more of its tokens are
         * accepted) unless one is past its vocabulary. Either way the output
         * honors them: verification draws from r->smp, which applies them */
        const int32_t dv = sp_model_get_info(e->draft)->n_vocab;
        for (int32_t i = 0; i < dp.n_logit_bias; i++)
            if (dp.logit_bias[i].token >= dv) dp.n_logit_bias = 0;
        r->dsmp = sp_sampler_create(dp, dv, err, errlen);
        if (!r->q || !r->dsmp) goto oom;
    }
    r->text_cap = 256;
    r->text = malloc(r->text_cap);
    r->hashes = malloc((size_t)e->max_blocks * sizeof(sp_block_hash));
    if ((rp->logprobs >= 0 && !r->lp) || !r->text || !r->hashes) goto oom;
    r->text[0] = 0;
    sp_detok_init(&r->dt);
    r->st.prompt_tokens = r->n_prompt;
    r->t_submit = now_ms();

    pthread_mutex_lock(&e->mu);
    if (e->n_waiting == e->wait_cap) {
        request **nw = realloc(e->waiting, (size_t)e->wait_cap * 2 * sizeof(request *));
        if (!nw) {
            pthread_mutex_unlock(&e->mu);
            goto oom;
        }
        e->waiting = nw;
        e->wait_cap *= 2;
    }
    r->id = e->next_id++;
    r->seqno = e->next_seqno++;
    r->next = e->all;
    e->all = r;
    wait_insert(e, r);
    e->st.submitted++;
    int64_t id = r->id;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    return id;
oom:
    sp_seterr(err, errlen, "out of memory queueing the request");
    rc = SP_ERR_NOMEM;
fail:
    rq_free(r);
    return rc;
}

int sp_engine_cancel(sp_engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    request *r = find(e, id);
    if (r && r->state != RQ_DONE) {
        r->cancel_req = true;
        pthread_cond_signal(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
    return r ? 0 : -1;
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
        r = find(e, id);
        if (!r || r->state == RQ_DONE || r->n_all - r->n_prompt > have_tokens || timeout_ms == 0)
            break;
        if (timeout_ms < 0) {
            pthread_cond_wait(&e->changed, &e->mu);
        } else if (pthread_cond_timedwait(&e->changed, &e->mu, &dl) == ETIMEDOUT) {
            r = find(e, id);
            break;
        }
    }
    if (r && st) fill_status(r, st);
    pthread_mutex_unlock(&e->mu);
    return r ? 0 : -1;
}

int sp_engine_read(sp_engine *e, int64_t id, sp_token *tokens, int32_t cap, char *text,
                   size_t text_cap) {
    pthread_mutex_lock(&e->mu);
    request *r = find(e, id);
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
    return r ? 0 : -1;
}

void sp_engine_release(sp_engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    request *r = find(e, id);
    if (r && !r->cb) {
        if (r->state == RQ_DONE) {
            unlink_record(e, r); /* not in any queue or batch once done */
            rq_free(r);
        } else {
            r->cancel_req = r->released = true; /* the engine thread frees it */
            pthread_cond_signal(&e->work);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

void sp_engine_get_stats(sp_engine *e, sp_engine_stats *st) {
    pthread_mutex_lock(&e->mu);
    *st = e->st;
    const sp_kv_paged_stats ks = e->kv_snap;
    st->cost_scale = e->calibrated ? e->tfit.s : 0;
    st->cost_attn_ms_per_1k = e->calibrated ? e->tfit.c_attn : 0;
    st->draft_cost_ms_1 = e->calibrated && e->dcost.n ? e->dcost.ms[0] : 0;
    st->draft_cost_scale = e->calibrated && e->dcost.n ? e->dfit.s : 0;
    st->evictions_pressure = ks.evictions;
    st->evictions_flush = ks.flushed;
    st->blocks_total = ks.n_blocks;
    st->blocks_free = ks.n_free;
    st->blocks_cached = ks.n_cached;
    st->blocks_in_use = ks.n_in_use;
    st->block_size = ks.block_size;
    st->kv_bytes_total = (size_t)ks.n_blocks * ks.block_bytes;
    st->kv_bytes_cached = ks.cached_bytes;
    st->running = e->n_running;
    st->waiting = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
}

float sp_engine_spec_prior(sp_engine *e, const char *cache_salt, sp_spec_mode m) {
    if (m <= SP_SPEC_OFF || m > SP_SPEC_DRAFT) return -1.0f;
    /* the engine thread changes the partitions only under the lock */
    pthread_mutex_lock(&e->mu);
    const sp_spec_part *pt = sp_spec_parts_find(e->parts, cache_salt);
    const float a = pt ? sp_spec_part_prior(pt, m) : SP_SPEC_PRIOR0;
    pthread_mutex_unlock(&e->mu);
    return a;
}

/* Asks the engine thread for a control action and waits until it is done. */
static void control(sp_engine *e, bool *flag) {
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->ctl_gen;
    *flag = true;
    pthread_cond_signal(&e->work);
    while (e->ctl_gen == gen) pthread_cond_wait(&e->changed, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

int32_t sp_engine_flush_cache(sp_engine *e) {
    control(e, &e->flush_req);
    pthread_mutex_lock(&e->mu);
    int32_t n = e->flush_result;
    pthread_mutex_unlock(&e->mu);
    return n;
}

int sp_engine_check(sp_engine *e, char *err, size_t errlen) {
    control(e, &e->check_req);
    pthread_mutex_lock(&e->mu);
    int rc = e->check_rc;
    if (!rc && e->check_failures) {
        rc = -1;
        sp_seterr(err, errlen, "%llu step(s) broke the pool invariant; first: %s",
                  (unsigned long long)e->check_failures, e->first_failure);
    } else if (rc) {
        sp_seterr(err, errlen, "%s", e->check_err);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* Engine thread, locked: serves flush/check asks and refreshes the stats
 * snapshot (the pool is quiescent between steps). */
static int64_t parts_held(const sp_engine *e) {
    int64_t n = 0; /* every running request holds its partition, nothing else does */
    for (int32_t s = 0; s < e->p.max_seqs; s++) n += e->slots[s] && e->slots[s]->part;
    return n;
}

static void between_steps(sp_engine *e) {
    if (e->p.debug_check) {
        char err[256];
        if ((sp_kv_paged_check(e->kv, err, sizeof(err)) ||
             sp_spec_parts_check(e->parts, parts_held(e), false, err, sizeof(err))) &&
            !e->check_failures++)
            snprintf(e->first_failure, sizeof(e->first_failure), "%s", err);
    }
    bool served = false;
    if (e->flush_req) {
        e->flush_result = sp_kv_paged_flush(e->kv);
        e->flush_req = false;
        served = true;
    }
    if (e->check_req) {
        e->check_rc = sp_kv_paged_check(e->kv, e->check_err, sizeof(e->check_err));
        if (!e->check_rc)
            e->check_rc = sp_spec_parts_check(e->parts, parts_held(e), false, e->check_err,
                                              sizeof(e->check_err));
        e->check_req = false;
        served = true;
    }
    sp_kv_paged_get_stats(e->kv, &e->kv_snap);
    if (served) {
        e->ctl_gen++;
        pthread_cond_broadcast(&e->changed);
    }
}

/* ---- the step loop -------------------------------------------------------- */

static const uint8_t *salt_of(const request *r, size_t *len) {
    *len = r->salt ? strlen(r->salt) : 0;
    return (const uint8_t *)r->salt;
}

/* Hashes of toks' first n_blocks full blocks into r->hashes; the blocks
 * hashed before are kept (toks only grows), so each is hashed once. */
static int32_t hash_blocks(sp_engine *e, request *r, int32_t n_blocks) {
    if (n_blocks <= r->n_hashed) return n_blocks;
    size_t sl;
    const uint8_t *salt = salt_of(r, &sl);
    int32_t got = sp_block_hash_extend(r->toks, n_blocks * e->p.kv_block_size, e->p.kv_block_size,
                                       e->model_key, sizeof(e->model_key), salt, sl, r->hashes,
                                       r->n_hashed);
    if (got > r->n_hashed) r->n_hashed = got; /* -1: libcrypto out of memory */
    return r->n_hashed < n_blocks ? r->n_hashed : n_blocks;
}

/* Commits the slot's blocks that became full of computed tokens. */
static void commit_full_blocks(sp_engine *e, request *r) {
    if (!e->p.prefix_cache) return;
    const int32_t bs = e->p.kv_block_size;
    int32_t full = kv_len(e, r) / bs;
    if (full <= r->n_committed) return;
    full = hash_blocks(e, r, full); /* fewer only when hashing ran out of memory */
    for (int32_t b = r->n_committed; b < full; b++) sp_kv_paged_commit(e->kv, r->slot, b, &r->hashes[b]);
    if (full > r->n_committed) r->n_committed = full;
}

static void preempt(sp_engine *e, request *r) {
    release_slot(e, r);
    wait_insert(e, r);
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

/* Admits r into a free slot, reusing its longest cached prefix. Returns
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
    int32_t hit = 0;
    if (e->p.prefix_cache) {
        int32_t usable = hash_blocks(e, r, (r->n_all - 1) / bs);
        hit = sp_kv_paged_match(e->kv, r->hashes, usable);
    }
    int32_t need = (r->n_all - hit * bs + bs - 1) / bs + 1; /* +1: room to decode */
    if (hit + need > sp_kv_paged_available(e->kv) - reserved) return false;
    if (hit && sp_kv_paged_attach(e->kv, slot, r->hashes, hit)) hit = 0;
    e->slots[slot] = r;
    e->n_running++;
    r->slot = slot;
    r->n_committed = hit;
    r->admit_no = e->next_admit++;
    /* NULL only out of memory: then it speculates from its own text alone */
    r->part = sp_spec_parts_acquire(e->parts, r->salt);
    if (!r->admitted_once) {
        r->admitted_once = true;
        /* the prior: how its method has done for requests of the same salt */
        r->alpha = r->part ? sp_spec_part_prior(r->part, r->spec) : SP_SPEC_PRIOR0;
        r->t_sched = now_ms();
        r->st.queue_ms = r->t_sched - r->t_submit;
        r->st.cached_tokens = hit * bs;
        e->st.prompt_tokens += (uint64_t)r->n_prompt;
        if (e->p.prefix_cache) {
            e->st.cache_query_tokens += (uint64_t)r->n_prompt;
            e->st.cache_hit_tokens += (uint64_t)hit * bs;
        }
        int32_t bucket = (int32_t)((int64_t)hit * bs * 10 / r->n_prompt);
        e->st.h_tokens_hist[SP_MIN(bucket, 10)]++;
    }
    return true;
}

static bool in_batch(const sp_engine *e, int32_t n_e, const request *r) {
    for (int32_t i = 0; i < n_e; i++)
        if (e->e_req[i] == r) return true;
    return false;
}

/* Forms this step's batch; returns the number of entries. `reserved` counts
 * the blocks the batch's reservations will take from the pool. */
static int32_t schedule(sp_engine *e) {
    int32_t budget = e->p.max_batch_tokens, n_e = 0, reserved = 0;
    /* passes 0 and 1: running requests, decoders first, oldest first */
    for (int pass = 0; pass < 2; pass++) {
        while (budget > 0) {
            request *pick = NULL;
            for (int32_t s = 0; s < e->p.max_seqs; s++) {
                request *r = e->slots[s];
                if (!r || (r->n_all - kv_len(e, r) == 1) != (pass == 0) || in_batch(e, n_e, r))
                    continue;
                if (!pick || r->admit_no < pick->admit_no) pick = r;
            }
            if (!pick) break;
            int32_t n = SP_MIN(pick->n_all - kv_len(e, pick), budget);
            int32_t need = sp_kv_paged_blocks_needed(e->kv, pick->slot, n);
            while (pick->slot >= 0 && need > sp_kv_paged_available(e->kv) - reserved) {
                /* take blocks back from the newest request not yet in the
                 * batch (pick itself when it is the newest) */
                request *victim = newest_running(e);
                if (in_batch(e, n_e, victim)) victim = pick;
                preempt(e, victim);
            }
            if (pick->slot < 0) continue;
            reserved += need;
            budget -= n;
            e->e_req[n_e] = pick;
            e->e_n[n_e++] = n;
        }
    }
    /* pass 2: admission, by priority then arrival; the head of the line
     * waits for blocks rather than letting later requests overtake it */
    while (budget > 0 && e->n_waiting > 0 && e->n_running < e->p.max_seqs) {
        request *r = e->waiting[0];
        if (!admit(e, r, reserved)) break;
        wait_remove(e, r);
        r->state = RQ_RUNNING;
        int32_t n = SP_MIN(r->n_all - kv_len(e, r), budget);
        reserved += sp_kv_paged_blocks_needed(e->kv, r->slot, n);
        budget -= n;
        e->e_req[n_e] = r;
        e->e_n[n_e++] = n;
    }
    return n_e;
}

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
static void emit_token(sp_engine *e, request *r, sp_token t, const float *logits) {
    double now = now_ms();
    if (r->t_first == 0) {
        r->t_first = now;
        r->st.ttft_ms = now - r->t_submit;
        r->st.prefill_ms = now - r->t_sched;
    }
    r->t_last = now;
    bool stop_tok = !r->ignore_eos && sp_vocab_is_eog(e->vocab, t);
    for (int32_t i = 0; i < r->n_stop_toks; i++) stop_tok |= r->stop_toks[i] == t;
    if (stop_tok) {
        finish(e, r, SP_FINISH_STOP);
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
    bool last = r->n_all - r->n_prompt >= r->max_tokens || r->n_all >= e->p.n_ctx;
    if (last && np >= 0) {
        int nf = sp_detok_flush(&r->dt, piece + np, (int)sizeof(piece) - np);
        if (nf > 0) np += nf;
    }
    size_t old = r->text_len;
    if (np > 0) {
        if (!text_grow(r, (size_t)np)) {
            snprintf(r->err, sizeof(r->err), "out of memory for the output text");
            finish(e, r, SP_FINISH_ERROR);
            return;
        }
        memcpy(r->text + r->text_len, piece, (size_t)np);
        r->text_len += (size_t)np;
        r->text[r->text_len] = 0;
    }
    if (check_stop_strings(r, old)) finish(e, r, SP_FINISH_STOP);
    else if (last) finish(e, r, SP_FINISH_LENGTH);
}

static void take_token(sp_engine *e, request *r, const float *logits) {
    sp_token t = sp_sampler_sample(r->smp, logits);
    sp_sampler_accept(r->smp, t);
    emit_token(e, r, t, logits);
}

/* ---- speculation ------------------------------------------------------------ */

static sp_token argmax_row(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Positions a batch's tokens attend to, summed: the cost model's second
 * term. */
static double batch_attn(const sp_batch *b) {
    double a = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) a += b->pos[i] + 1;
    return a;
}

/* One draft pass, timed into the draft's cost fit. */
static int draft_pass(sp_engine *e, const sp_batch *b, char *err, size_t errlen) {
    const double t0 = now_ms();
    const int rc = sp_decode(e->dctx, b, err, errlen);
    if (!rc && e->calibrated) sp_cost_fit_observe(&e->dfit, b->n_tokens, batch_attn(b), now_ms() - t0);
    return rc;
}

/* Runs the draft model for rs[0..n): catches its KV up with the committed
 * tokens, then r->n_draft autoregressive passes (batched across requests),
 * leaving the proposals in r->draft (and their distributions in r->q when
 * sampling). On failure every proposal is dropped. */
static void draft_run(sp_engine *e, request **rs, int32_t n) {
    const double t0 = now_ms();
    const int32_t B = e->p.max_batch_tokens, Vd = sp_model_get_info(e->draft)->n_vocab;
    char err[200];
    bool ok = true;
    /* Catch up on committed tokens the draft has not seen. The first
     * drafting pass feeds them along with each sequence's last token (one
     * pass per step, not two: after an accepted run there is always some);
     * only a backlog too big for one batch gets passes of its own first. */
    for (;;) {
        int32_t backlog = n;
        for (int32_t i = 0; i < n; i++) {
            request *r = rs[i];
            int32_t dl = sp_seq_len(e->dctx, r->slot);
            if (dl > r->n_all - 1) sp_seq_truncate(e->dctx, r->slot, dl = r->n_all - 1);
            backlog += r->n_all - 1 - dl;
        }
        if (backlog <= B) break;
        int32_t nt = 0;
        for (int32_t i = 0; i < n && nt < B; i++) {
            request *r = rs[i];
            for (int32_t p = sp_seq_len(e->dctx, r->slot); p < r->n_all - 1 && nt < B; p++, nt++) {
                e->d_tok[nt] = r->toks[p];
                e->d_pos[nt] = p;
                e->d_seq[nt] = r->slot;
                e->d_want[nt] = 0;
            }
        }
        if (!nt) break;
        sp_batch b = {nt, e->d_tok, e->d_pos, e->d_seq, e->d_want};
        if (draft_pass(e, &b, err, sizeof(err))) {
            ok = false;
            break;
        }
    }
    int32_t kmax = 0;
    for (int32_t i = 0; i < n; i++) kmax = SP_MAX(kmax, rs[i]->n_draft);
    for (int32_t j = 0; ok && j < kmax; j++) {
        int32_t nt = 0;
        for (int32_t i = 0; i < n; i++) {
            request *r = rs[i];
            if (r->n_draft <= j) continue;
            if (j == 0) /* the rest of the catch-up */
                for (int32_t p = sp_seq_len(e->dctx, r->slot); p < r->n_all - 1; p++, nt++) {
                    e->d_tok[nt] = r->toks[p];
                    e->d_pos[nt] = p;
                    e->d_seq[nt] = r->slot;
                    e->d_want[nt] = 0;
                }
            e->d_tok[nt] = j == 0 ? r->toks[r->n_all - 1] : r->draft[j - 1];
            e->d_pos[nt] = r->n_all - 1 + j;
            e->d_seq[nt] = r->slot;
            e->d_want[nt++] = 1;
        }
        sp_batch b = {nt, e->d_tok, e->d_pos, e->d_seq, e->d_want};
        if (draft_pass(e, &b, err, sizeof(err))) {
            ok = false;
            break;
        }
        int32_t o = 0;
        for (int32_t i = 0; i < n; i++) {
            request *r = rs[i];
            if (r->n_draft <= j) continue;
            const float *row = sp_get_logits(e->dctx, o++);
            if (!r->dsmp) {
                r->draft[j] = argmax_row(row, Vd);
            } else {
                float *q = r->q + (size_t)j * e->n_vocab;
                sp_sampler_probs(r->dsmp, row, q);
                for (int32_t v = Vd; v < e->n_vocab; v++) q[v] = 0;
                double u = sp_sampler_uniform(r->dsmp), cum = 0;
                sp_token t = Vd - 1;
                for (int32_t v = 0; v < Vd; v++) {
                    cum += q[v];
                    if (u < cum) {
                        t = v;
                        break;
                    }
                }
                r->draft[j] = t;
            }
        }
    }
    if (!ok) /* keep going without proposals; the next step catches up again */
        for (int32_t i = 0; i < n; i++) {
            rs[i]->n_draft = 0;
            int32_t dl = sp_seq_len(e->dctx, rs[i]->slot);
            if (dl > rs[i]->n_all - 1) sp_seq_truncate(e->dctx, rs[i]->slot, rs[i]->n_all - 1);
        }
    e->st.draft_ms += now_ms() - t0;
}

/* After scheduling: gives decoding entries their proposals and grows their
 * batch entries to 1 + k tokens, within the token budget and the pool. */
/* A draft sequence the planner keeps at k = 0 drafts one token every this
 * many steps, if a better acceptance estimate could change the plan. */
#define SP_DRAFT_PROBE_EVERY 16

/* Whether candidate c would draft if its acceptance were 0.9: if not, the
 * step's cost (a big batch, a long catch-up) rules drafting out, and
 * measuring acceptance would buy nothing. */
static bool probe_pays(sp_engine *e, int32_t c, int32_t used, double attn, int32_t n_dec) {
    if (!e->calibrated || !e->p.spec_adaptive) return true;
    sp_spec_cand opt = e->cand[c];
    opt.alpha = 0.9f;
    int32_t k = 0;
    return sp_spec_plan(&e->tfit, &e->dfit, used, attn, n_dec, &opt, 1, &k) > 0;
}

static void spec_prepare(sp_engine *e, int32_t n_e) {
    int32_t used = 0, reserved = 0, n_c = 0, n_dec = 0;
    if (e->p.spec_adaptive && !e->calib_tried) /* an engine without a default method
                                                  meets its first speculating request */
        for (int32_t i = 0; i < n_e; i++)
            if (e->e_req[i]->spec != SP_SPEC_OFF) {
                calibrate(e);
                break;
            }
    double attn = 0; /* positions the batch's tokens attend to, summed */
    for (int32_t i = 0; i < n_e; i++) {
        request *r = e->e_req[i];
        r->n_draft = 0;
        used += e->e_n[i];
        attn += (double)e->e_n[i] * kv_len(e, r) + 0.5 * e->e_n[i] * (e->e_n[i] + 1);
        reserved += sp_kv_paged_blocks_needed(e->kv, r->slot, e->e_n[i]);
        const bool decoding = r->n_all - kv_len(e, r) == 1;
        n_dec += decoding;
        if (r->spec == SP_SPEC_OFF || !decoding) continue;
        int32_t cap = SP_MIN(r->spec_k, r->max_tokens - (r->n_all - r->n_prompt) - 1);
        cap = SP_MIN(cap, e->p.n_ctx - r->n_all); /* positions up to n_all - 1 + k exist */
        if (cap <= 0) continue;
        if (r->propose) {
            int32_t got = r->propose(r->toks, r->n_all, cap, r->draft, r->propose_user);
            got = SP_MAX(0, SP_MIN(got, cap));
            for (int32_t j = 0; j < got; j++)
                if (r->draft[j] < 0 || r->draft[j] >= e->n_vocab) got = j; /* keep the valid prefix */
            r->n_draft = got;
        } else if (r->spec == SP_SPEC_NGRAM) {
            r->n_draft = sp_ngram_propose(r->toks, r->n_all, e->p.ngram_min, e->p.ngram_max, cap,
                                          r->draft);
        } else if (r->spec == SP_SPEC_SUFFIX) {
            if (r->sfx_len < r->n_all &&
                !sp_suffix_seq_append(r->sfx, r->toks + r->sfx_len, r->n_all - r->sfx_len))
                r->sfx_len = r->n_all;
            r->n_draft = r->sfx_len == r->n_all
                             ? sp_suffix_propose(sp_spec_part_store(r->part), r->sfx, cap, 0.1f,
                                                 r->draft, NULL)
                             : 0;
        } else {
            r->n_draft = cap; /* drafted below, once k is chosen */
        }
        if (!r->n_draft) continue;
        const bool by_draft = r->spec == SP_SPEC_DRAFT && !r->propose;
        /* The draft's backlog (a prompt it never saw, steps it sat out) is
         * fed once and then never again: an investment the steps after it
         * share. Counting it all would keep a new sequence from ever
         * drafting, so the plan sees what a drafting sequence carries from
         * step to step (the tokens of an accepted run, a few). */
        const int32_t backlog = by_draft ? SP_MAX(0, r->n_all - 1 - sp_seq_len(e->dctx, r->slot)) : 0;
        e->cand[n_c] = (sp_spec_cand){r->alpha, r->n_draft, by_draft, r->n_all, SP_MIN(backlog, 4)};
        e->cand_entry[n_c++] = i;
    }
    if (!n_c) return;
    if (e->p.spec_adaptive && e->calibrated)
        sp_spec_plan(&e->tfit, e->dctx ? &e->dfit : NULL, used, attn, n_dec, e->cand, n_c, e->cand_k);
    else
        for (int32_t c = 0; c < n_c; c++) e->cand_k[c] = e->cand[c].k_cap;
    int32_t room = e->p.max_batch_tokens - used;
    int32_t avail = sp_kv_paged_available(e->kv) - reserved, n_d = 0;
    for (int32_t c = 0; c < n_c; c++) {
        const int32_t i = e->cand_entry[c];
        request *r = e->e_req[i];
        int32_t k = SP_MIN(e->cand_k[c], room);
        const int32_t base = sp_kv_paged_blocks_needed(e->kv, r->slot, 1);
        while (k > 0 && sp_kv_paged_blocks_needed(e->kv, r->slot, 1 + k) - base > avail) k--;
        avail -= sp_kv_paged_blocks_needed(e->kv, r->slot, 1 + k) - base;
        room -= k;
        if (k == 0) {
            if (!e->cand[c].draft) { /* proposals exist: check the first one later */
                r->shadow = r->draft[0];
                r->shadow_pos = r->n_all;
            } else if (++r->idle_steps >= SP_DRAFT_PROBE_EVERY && room > 0 &&
                       sp_kv_paged_blocks_needed(e->kv, r->slot, 2) - base <= avail &&
                       probe_pays(e, c, used, attn, n_dec)) {
                /* nothing to check without drafting: every so often draft
                 * one token anyway, so that acceptance keeps being measured
                 * and a bad start (or a draft that gets better as the text
                 * goes on) is not final */
                r->idle_steps = 0;
                k = 1;
                avail -= sp_kv_paged_blocks_needed(e->kv, r->slot, 2) - base;
                room -= 1;
            }
            if (k == 0) e->st.spec_planned_zero++;
        } else {
            r->idle_steps = 0;
        }
        r->n_draft = k;
        e->e_n[i] = 1 + k;
        if (k && e->cand[c].draft) e->d_req[n_d++] = r;
    }
    int64_t k_sum = 0; /* the plan, for the dashboard (specula_spec_planned_k) */
    for (int32_t c = 0; c < n_c; c++) k_sum += e->e_req[e->cand_entry[c]]->n_draft;
    e->st.spec_plans += (uint64_t)n_c;
    e->st.spec_plan_k_sum += (uint64_t)k_sum;
    e->st.spec_last_k = (float)k_sum / (float)n_c;
    if (n_d) {
        draft_run(e, e->d_req, n_d);
        for (int32_t c = 0; c < n_c; c++) e->e_n[e->cand_entry[c]] = 1 + e->e_req[e->cand_entry[c]]->n_draft;
    }
}

/* Verifies r's proposals against the target's rows and commits what
 * passes; rows [1 + n_draft][V] start at logits output *out. */
static void spec_commit(sp_engine *e, request *r, int32_t *out) {
    const int32_t n = r->n_draft, V = e->n_vocab;
    const float *rows = sp_get_logits(e->ctx, *out);
    *out += n + 1;
    const int32_t kv_before = kv_len(e, r) - 1 - n;
    const int32_t m = sp_spec_verify(r->smp, r->greedy, rows, V, r->draft, r->q, n, e->commit,
                                     e->probs, e->resid);
    const int32_t acc = m - 1;
    r->st.spec_steps++;
    r->st.spec_drafted += n;
    r->st.spec_accepted += acc;
    e->st.spec_steps++;
    e->st.spec_drafted += (uint64_t)n;
    e->st.spec_accepted += (uint64_t)acc;
    e->st.spec_steps_by[r->spec]++;
    e->st.spec_drafted_by[r->spec] += (uint64_t)n;
    e->st.spec_accepted_by[r->spec] += (uint64_t)acc;
    for (int32_t j = 0; j < acc; j++) {
        r->st.spec_accepted_per_pos[j]++;
        e->st.spec_accepted_per_pos[j]++;
    }
    /* acceptance per proposed token, as a moving average that forgets in
     * ~10 steps: accepted tokens are successes, the first rejection one
     * failure, tokens after it unobserved */
    const float obs = (float)acc / (float)(acc + (acc < n));
    r->alpha = 0.8f * r->alpha + 0.2f * obs;
    if (r->part) { /* the prior of later requests of the same salt */
        float *prior = sp_spec_part_priors(r->part);
        prior[r->spec] = 0.95f * prior[r->spec] + 0.05f * obs;
    }
    /* roll back what was not accepted: target KV keeps the input token and
     * the accepted proposals; the draft keeps no more than that */
    sp_seq_truncate(e->ctx, r->slot, kv_before + m);
    if (e->dctx && sp_seq_len(e->dctx, r->slot) > kv_before + m)
        sp_seq_truncate(e->dctx, r->slot, kv_before + m);
    r->n_draft = 0;
    for (int32_t j = 0; j < m && r->state == RQ_RUNNING; j++)
        emit_token(e, r, e->commit[j], rows + (size_t)j * V);
    /* only now are the accepted tokens in r->toks, which the hashes cover */
    if (r->state == RQ_RUNNING) commit_full_blocks(e, r);
}

/* Event of what r produced since its last event (callback requests). */
static void make_event(sp_engine *e, request *r, int32_t *n_ev) {
    if (!r->cb) return;
    int32_t n_tok = r->n_all - r->n_prompt;
    bool done = r->state == RQ_DONE;
    if (n_tok == r->ev_tokens && r->text_released == r->ev_text && !done) return;
    sp_event *ev = &e->events[*n_ev];
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
    r->ev_tokens = n_tok;
    r->ev_text = r->text_released;
    e->ev_req[(*n_ev)++] = r;
}

/* Finishes what was cancelled since the last step and collects the final
 * events still owed (at most max_seqs per round; the rest wait a round). */
static void reap(sp_engine *e, int32_t *n_ev) {
    for (request *r = e->all, *nx; r; r = nx) {
        nx = r->next;
        if (r->cancel_req && r->state != RQ_DONE) finish(e, r, SP_FINISH_CANCELLED);
        if (r->state == RQ_DONE && r->cb && !r->final_sent && *n_ev < e->p.max_seqs)
            make_event(e, r, n_ev);
        if (r->released && r->state == RQ_DONE) {
            unlink_record(e, r);
            rq_free(r);
        }
    }
}

static void deliver(sp_engine *e, int32_t n_ev) {
    if (!n_ev) return;
    pthread_mutex_unlock(&e->mu);
    for (int32_t i = 0; i < n_ev; i++) e->ev_req[i]->cb(&e->events[i], e->ev_req[i]->user);
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < n_ev; i++) {
        request *r = e->ev_req[i];
        if (r->final_sent) { /* a callback request is forgotten after its last event */
            unlink_record(e, r);
            rq_free(r);
        }
    }
}

static void *engine_main(void *arg) {
    sp_engine *e = arg;
    char err[200];
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        int32_t n_ev = 0;
        between_steps(e);
        reap(e, &n_ev);
        if (n_ev) {
            sp_kv_paged_get_stats(e->kv, &e->kv_snap);
            deliver(e, n_ev);
            pthread_cond_broadcast(&e->changed);
            continue;
        }
        if (e->n_running == 0 && e->n_waiting == 0) {
            if (!e->flush_req && !e->check_req) pthread_cond_wait(&e->work, &e->mu);
            continue;
        }
        int32_t n_e = schedule(e);
        if (n_e) spec_prepare(e, n_e);
        if (n_e == 0) { /* nothing fits (cannot happen with a pool sized for one
                           full context, but never spin) */
            struct timespec ts = {0, 1000000};
            pthread_mutex_unlock(&e->mu);
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        int32_t nt = 0, n_spec = 0;
        for (int32_t i = 0; i < n_e; i++) {
            request *r = e->e_req[i];
            int32_t from = kv_len(e, r);
            for (int32_t j = 0; j < e->e_n[i]; j++, nt++) {
                e->b_tok[nt] = from + j < r->n_all ? r->toks[from + j] : r->draft[from + j - r->n_all];
                e->b_pos[nt] = from + j;
                e->b_seq[nt] = r->slot;
                e->b_want[nt] = from + j >= r->n_all - 1; /* proposals are all scored */
            }
            n_spec += r->n_draft > 0;
            const int32_t real = e->e_n[i] - r->n_draft; /* committed tokens computed */
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
        e->st.steps++;
        sp_batch b = {nt, e->b_tok, e->b_pos, e->b_seq, e->b_want};
        pthread_mutex_unlock(&e->mu);
        const double t_pass = now_ms();
        int rc = sp_decode(e->ctx, &b, err, sizeof(err));
        const double ms_pass = now_ms() - t_pass;
        pthread_mutex_lock(&e->mu);
        if (n_spec) e->st.verify_ms += ms_pass;
        if (!rc && e->calibrated) sp_cost_fit_observe(&e->tfit, nt, batch_attn(&b), ms_pass);
        int32_t out = 0;
        for (int32_t i = 0; i < n_e; i++) {
            request *r = e->e_req[i];
            if (rc) {
                snprintf(r->err, sizeof(r->err), "forward pass failed: %s", err);
                finish(e, r, SP_FINISH_ERROR);
            } else if (r->state == RQ_RUNNING && r->n_draft > 0) {
                spec_commit(e, r, &out);
            } else if (r->state == RQ_RUNNING) {
                commit_full_blocks(e, r);
                if (kv_len(e, r) == r->n_all) {
                    const int32_t at = r->n_all;
                    take_token(e, r, sp_get_logits(e->ctx, out++));
                    if (r->shadow_pos == at && r->n_all > at) {
                        const float obs = r->toks[at] == r->shadow ? 1.0f : 0.0f;
                        r->alpha = 0.8f * r->alpha + 0.2f * obs;
                    }
                    r->shadow_pos = -1;
                }
            } else if (r->n_draft > 0) {
                out += r->n_draft + 1; /* finished meanwhile: skip its rows */
            } else if (kv_len(e, r) == r->n_all) {
                out++;
            }
            make_event(e, r, &n_ev);
        }
        sp_kv_paged_get_stats(e->kv, &e->kv_snap); /* before anyone hears of it */
        deliver(e, n_ev);
        pthread_cond_broadcast(&e->changed);
    }
    /* shutting down: everything still alive is cancelled and told so; a
     * control ask still waiting is answered */
    between_steps(e);
    for (request *r = e->all; r; r = r->next) r->cancel_req = true;
    for (;;) {
        int32_t n_ev = 0;
        reap(e, &n_ev);
        if (!n_ev) break;
        deliver(e, n_ev);
    }
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}
