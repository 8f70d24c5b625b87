/* test_engine.c: the invariants the serving engine and its prefix cache must
 * keep, on a reference model:
 *   - greedy output identical with the cache on and off; with a seed,
 *     sampled output identical too;
 *   - K/V of a reused block equal the K/V recomputed from scratch, even when
 *     recomputed inside a batch of other sequences;
 *   - a different salt or model never hits, the same salt does;
 *   - under memory pressure (a pool far smaller than the workload) eviction
 *     and preemption keep every output identical, and the pool invariant
 *     holds after every step;
 *   - cancellation at any point (queued, mid-prefill, mid-decode) returns
 *     every block;
 *   - N sequences batched together give the tokens each gives alone;
 *   - counters reconcile (hits + misses = prompt tokens looked up);
 *   - invalid requests are refused with a message.
 */
#include <pthread.h>
#include <unistd.h>

#include "kv/kv_paged.h"
#include "model/model.h"
#include "specula.h"
#include "test.h"

static sp_model *model, *model2;

/* Prompts sharing a long prefix (code-like, so it tokenizes to many tokens). */
static const char *DOC =
    "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), "
    "value.strip()\n\nclass Config:\n    def __init__(self, path):\n        self.items = {}\n"
    "        with open(path) as fh:\n            for line in fh:\n                k, v = "
    "parse(line)\n                self.items[k] = v\n";
static const char *TAILS[] = {
    "\n    def get(self, key):\n",
    "\n    def __len__(self):\n",
    "\n    def keys(self):\n        return",
    "\n# Usage: Config('app.ini').get('port')\n",
    "\n    def __contains__(self, key):\n",
    "\n    def save(self, path):\n",
};
#define NT 6

typedef struct {
    sp_token toks[512];
    int32_t n;
    char text[4096];
    sp_request_stats st;
} result;

static sp_engine *new_engine(sp_engine_params p) {
    char err[256];
    sp_engine *e = sp_engine_create(model, p, err, sizeof(err));
    if (!e) fprintf(stderr, "engine: %s\n", err);
    return e;
}

static sp_engine_params base_params(void) {
    sp_engine_params p = sp_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 512;
    p.max_seqs = 8;
    p.max_batch_tokens = 128;
    p.debug_check = true;
    return p;
}

static char *prompt_of(int i) {
    static char buf[NT][2048];
    snprintf(buf[i], sizeof(buf[i]), "%s%s", DOC, TAILS[i]);
    return buf[i];
}

static sp_request_params req(const char *prompt, int max_tokens, float temp, uint64_t seed) {
    sp_request_params r = sp_request_default_params();
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling = temp > 0 ? sp_sampler_default_params() : sp_sampler_greedy_params();
    if (temp > 0) r.sampling.temperature = temp, r.sampling.seed = seed;
    return r;
}

/* Submits reqs[0..n) (at most conc in flight, in order; polling API) and
 * collects their results. */
static void run_all(sp_engine *e, const sp_request_params *reqs, int n, int conc, result *out) {
    int64_t ids[64];
    int submitted = 0, done = 0;
    char err[256];
    while (done < n) {
        while (submitted < n && submitted - done < conc) {
            ids[submitted] = sp_engine_submit(e, &reqs[submitted], err, sizeof(err));
            CHECK(ids[submitted] > 0, "submit %d: %s", submitted, err);
            submitted++;
        }
        sp_request_status st;
        CHECK(sp_engine_wait(e, ids[done], 1 << 30, -1, &st) == 0, "wait");
        CHECK(st.finished, "request %d not finished", done);
        result *r = &out[done];
        r->n = st.n_tokens;
        r->st = st.stats;
        sp_engine_read(e, ids[done], r->toks, 512, r->text, sizeof(r->text));
        sp_engine_release(e, ids[done]);
        done++;
    }
}

static bool same_tokens(const result *a, const result *b) {
    return a->n == b->n && !memcmp(a->toks, b->toks, (size_t)a->n * sizeof(sp_token));
}

static void check_clean(sp_engine *e, const char *what) {
    char err[256];
    CHECK(sp_engine_check(e, err, sizeof(err)) == 0, "%s: invariant: %s", what, err);
    sp_engine_stats s;
    sp_engine_get_stats(e, &s);
    CHECK(s.blocks_in_use == 0, "%s: %d blocks still in use", what, s.blocks_in_use);
    CHECK(s.blocks_free + s.blocks_cached == s.blocks_total, "%s: block counts", what);
    CHECK(s.running == 0 && s.waiting == 0, "%s: %d running %d waiting", what, s.running,
          s.waiting);
}

/* ---- cases ---------------------------------------------------------------- */

static void cache_on_off_identical(void) {
    sp_request_params reqs[2 * NT];
    for (int i = 0; i < NT; i++) {
        reqs[i] = req(prompt_of(i), 12, 0, 0);          /* greedy */
        reqs[NT + i] = req(prompt_of(i), 12, 0.9f, 42 + i); /* seeded sampling */
    }
    static result on[2 * NT], off[2 * NT];
    sp_engine_params p = base_params();
    sp_engine *e = new_engine(p);
    REQUIRE(e, "the engine could not be created");
    run_all(e, reqs, 2 * NT, 1, on);
    check_clean(e, "cache on");
    sp_engine_stats s;
    sp_engine_get_stats(e, &s);
    sp_engine_free(e);
    p.prefix_cache = false;
    e = new_engine(p);
    REQUIRE(e, "the engine could not be created");
    run_all(e, reqs, 2 * NT, 1, off);
    check_clean(e, "cache off");
    sp_engine_free(e);
    uint64_t hits = 0, prompts = 0;
    for (int i = 0; i < 2 * NT; i++) {
        CHECK(same_tokens(&on[i], &off[i]), "request %d differs with the cache on", i);
        CHECK(!strcmp(on[i].text, off[i].text), "request %d text differs", i);
        CHECK(off[i].st.cached_tokens == 0, "cache off but %d cached", off[i].st.cached_tokens);
        if (i > 0) CHECK(on[i].st.cached_tokens >= 64, "request %d: only %d cached tokens", i,
                         on[i].st.cached_tokens);
        CHECK(on[i].st.cached_tokens < on[i].st.prompt_tokens, "the last prompt token is computed");
        hits += (uint64_t)on[i].st.cached_tokens;
        prompts += (uint64_t)on[i].st.prompt_tokens;
    }
    /* counters reconcile */
    CHECK(s.cache_query_tokens == prompts, "queried %llu of %llu prompt tokens",
          (unsigned long long)s.cache_query_tokens, (unsigned long long)prompts);
    CHECK(s.cache_hit_tokens == hits, "hits %llu vs %llu", (unsigned long long)s.cache_hit_tokens,
          (unsigned long long)hits);
    CHECK(s.prefill_tokens + s.cache_hit_tokens == s.prompt_tokens,
          "computed %llu + hit %llu != prompt %llu", (unsigned long long)s.prefill_tokens,
          (unsigned long long)s.cache_hit_tokens, (unsigned long long)s.prompt_tokens);
    uint64_t h = 0;
    for (int i = 0; i < 11; i++) h += s.h_tokens_hist[i];
    CHECK(h == 2 * NT, "H_tokens histogram counts %llu requests", (unsigned long long)h);
    CHECK(s.decode_tokens == 2 * NT * 12, "decode tokens %llu", (unsigned long long)s.decode_tokens);
}

static void batched_equals_alone(void) {
    sp_request_params reqs[NT];
    for (int i = 0; i < NT; i++) reqs[i] = req(prompt_of(i), 16, i % 2 ? 0.8f : 0, 7 + i);
    static result alone[NT], together[NT];
    sp_engine_params p = base_params();
    p.prefix_cache = false;
    sp_engine *e = new_engine(p);
    REQUIRE(e, "the engine could not be created");
    run_all(e, reqs, NT, 1, alone);
    run_all(e, reqs, NT, NT, together);
    check_clean(e, "batched");
    sp_engine_free(e);
    for (int i = 0; i < NT; i++)
        CHECK(same_tokens(&alone[i], &together[i]), "request %d differs when batched", i);
}

static void memory_pressure(void) {
    /* 12 requests, 8 running at once, against a pool of 20 blocks of 16
     * positions (about two requests' worth): far smaller than the workload,
     * so admission waits, decode growth preempts and cached blocks are
     * evicted. */
    sp_request_params reqs[12];
    for (int i = 0; i < 12; i++) reqs[i] = req(prompt_of(i % NT), 48, i % 3 ? 0.7f : 0, 100 + i);
    static result ref[12], pressed[12];
    sp_engine_params p = base_params();
    sp_engine *e = new_engine(p);
    REQUIRE(e, "the engine could not be created");
    run_all(e, reqs, 12, 1, ref);
    sp_engine_free(e);
    p.n_ctx = 176;
    p.kv_block_size = 16;
    p.max_seqs = 8;
    p.max_batch_tokens = 48;
    const sp_model_info *h = sp_model_get_info(model);
    p.kv_mem = kv_paged_block_bytes(SP_TYPE_F16, h->n_layer, h->n_head_kv * h->head_dim, 16) *
               20;
    e = new_engine(p);
    REQUIRE(e, "the engine could not be created");
    run_all(e, reqs, 12, 12, pressed);
    sp_engine_stats s;
    sp_engine_get_stats(e, &s);
    check_clean(e, "pressure");
    sp_engine_free(e);
    for (int i = 0; i < 12; i++)
        CHECK(same_tokens(&ref[i], &pressed[i]), "request %d differs under memory pressure", i);
    CHECK(s.preemptions > 0, "no request was preempted");
    CHECK(s.evictions_pressure > 0, "no cached block was evicted");
    printf("  pressure: %llu preemptions, %llu evictions, %llu recomputed tokens, %llu steps\n",
           (unsigned long long)s.preemptions, (unsigned long long)s.evictions_pressure,
           (unsigned long long)s.recomputed_tokens, (unsigned long long)s.steps);
}

static void salts(void) {
    sp_engine *e = new_engine(base_params());
    REQUIRE(e, "the engine could not be created");
    const char *salts[] = {NULL, "tenant-a", "tenant-a", "tenant-b", NULL, ""};
    const int32_t expect_hit[] = {0, 0, 1, 0, 1, 1}; /* "" means no salt */
    for (int i = 0; i < 6; i++) {
        sp_request_params r = req(prompt_of(0), 4, 0, 0);
        r.cache_salt = salts[i];
        result res;
        run_all(e, &r, 1, 1, &res);
        if (expect_hit[i]) CHECK(res.st.cached_tokens > 0, "request %d should hit", i);
        else CHECK(res.st.cached_tokens == 0, "request %d (salt %s) hit %d tokens", i,
                   salts[i] ? salts[i] : "none", res.st.cached_tokens);
    }
    /* flush: nothing cached is found afterwards */
    CHECK(sp_engine_flush_cache(e) > 0, "flush dropped nothing");
    sp_request_params r = req(prompt_of(0), 4, 0, 0);
    result res;
    run_all(e, &r, 1, 1, &res);
    CHECK(res.st.cached_tokens == 0, "hit after flush");
    sp_engine_stats s;
    sp_engine_get_stats(e, &s);
    CHECK(s.evictions_flush > 0, "flush not counted");
    check_clean(e, "salts");
    sp_engine_free(e);
}

static void other_model_never_hits(void) {
    uint8_t k1[32], k2[32];
    model_fingerprint(model, k1);
    model_fingerprint(model2, k2);
    CHECK(memcmp(k1, k2, 32) != 0, "two models share a fingerprint");
    sp_token toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 100 + i;
    block_digest h1[4], h2[4];
    block_hash_chain(toks, 64, 16, k1, 32, NULL, 0, h1);
    block_hash_chain(toks, 64, 16, k2, 32, NULL, 0, h2);
    for (int i = 0; i < 4; i++) CHECK(memcmp(&h1[i], &h2[i], 32) != 0, "block %d collides", i);
    /* in a store: blocks committed under model 1 never match model 2's chain */
    kv_paged_params kp = {SP_TYPE_F32, 1, 8, 16, 8, 2, 4, true, 0, NULL, 0};
    char err[256];
    kv_store *kv = kv_paged_create(kp, err, sizeof(err));
    CHECK(kv != NULL, "%s", err);
    REQUIRE(kv, "the KV store could not be created");
    CHECK(kv->ops->reserve(kv, 0, 64) == 0, "reserve");
    kv->ops->set_len(kv, 0, 64);
    for (int b = 0; b < 4; b++) kv_paged_commit(kv, 0, b, &h1[b]);
    CHECK(kv_paged_match(kv, h1, 4) == 4, "same model matches");
    CHECK(kv_paged_match(kv, h2, 4) == 0, "other model matched");
    kv->ops->destroy(kv);
}

/* K/V of blocks a later request reuses are bit-identical to K/V computed
 * from scratch, alone or inside a batch of other sequences. */
static void reused_kv_equals_recomputed(void) {
    const sp_model_info *h = sp_model_get_info(model);
    const int32_t kvd = h->n_head_kv * h->head_dim, bs = 16;
    kv_paged_params kp = {SP_TYPE_F16, h->n_layer, kvd, bs, 64, 3, 16, true, 0, NULL, 0};
    char err[256];
    kv_store *kv = kv_paged_create(kp, err, sizeof(err));
    CHECK(kv != NULL, "%s", err);
    REQUIRE(kv, "the KV store could not be created");
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_seq_max = 3;
    cp.n_ctx = 256;
    cp.n_batch = 256;
    sp_context *c = context_create_with_kv(model, cp, kv, NULL, err, sizeof(err));
    CHECK(c != NULL, "%s", err);
    if (!c) {
        kv->ops->destroy(kv);
        return;
    }
    sp_token toks[128];
    int n = sp_tokenize(sp_model_get_vocab(model), DOC, strlen(DOC), toks, 128, true, false);
    CHECK(n >= 48, "prompt of %d tokens", n);
    n = 48; /* three full blocks */
    int32_t pos[256], seq[256];
    /* seq 0: alone, one chunk */
    for (int i = 0; i < n; i++) pos[i] = i, seq[i] = 0;
    sp_batch b = {n, toks, pos, seq, NULL};
    CHECK(sp_decode(c, &b, err, sizeof(err)) == 0, "%s", err);
    /* seq 1 (other tokens) and seq 2 (the same prompt, in 16-token chunks)
     * batched together */
    sp_token mix[256];
    int nb = 0;
    for (int i = 0; i < 16; i++) mix[nb] = toks[i], pos[nb] = i, seq[nb++] = 2;
    for (int i = 0; i < 40; i++) mix[nb] = 500 + i, pos[nb] = i, seq[nb++] = 1;
    for (int i = 16; i < n; i++) mix[nb] = toks[i], pos[nb] = i, seq[nb++] = 2;
    sp_batch b2 = {nb, mix, pos, seq, NULL};
    CHECK(sp_decode(c, &b2, err, sizeof(err)) == 0, "%s", err);
    size_t row = (size_t)kvd * 2;
    int bad = 0;
    for (int l = 0; l < h->n_layer; l++)
        for (int p = 0; p < n; p++) {
            const void *k0, *v0, *k2, *v2;
            kv->ops->span(kv, l, 0, p, p + 1, &k0, &v0);
            kv->ops->span(kv, l, 2, p, p + 1, &k2, &v2);
            bad += memcmp(k0, k2, row) != 0 || memcmp(v0, v2, row) != 0;
        }
    CHECK(bad == 0, "%d rows differ between the cached and the recomputed K/V", bad);
    sp_context_free(c);
    kv->ops->destroy(kv);
}

static int cb_events; /* written by the engine thread: atomics only */
static void count_cb(const sp_event *ev, void *user) {
    (void)ev;
    (void)user;
    __atomic_add_fetch(&cb_events, 1, __ATOMIC_SEQ_CST);
}

static void cancellation(void) {
    sp_engine_params p = base_params();
    p.max_seqs = 2;
    p.max_batch_tokens = 16; /* prefill of ~100 tokens takes several steps */
    sp_engine *e = new_engine(p);
    REQUIRE(e, "the engine could not be created");
    char err[256];
    /* mid-decode: a long request cancelled after some tokens */
    sp_request_params r = req(prompt_of(1), 400, 0, 0);
    int64_t a = sp_engine_submit(e, &r, err, sizeof(err));
    /* queued: two more behind it, one cancelled while it waits */
    int64_t b = sp_engine_submit(e, &r, err, sizeof(err));
    int64_t q = sp_engine_submit(e, &r, err, sizeof(err));
    CHECK(a > 0 && b > 0 && q > 0, "submit: %s", err);
    CHECK(sp_engine_cancel(e, q) == 0, "cancel queued");
    sp_request_status st;
    sp_engine_wait(e, a, 3, -1, &st);
    CHECK(st.n_tokens > 3 || st.finished, "decode progressed");
    CHECK(sp_engine_cancel(e, a) == 0, "cancel mid-decode");
    sp_engine_wait(e, a, 1 << 30, -1, &st);
    CHECK(st.finished && st.stats.finish == SP_FINISH_CANCELLED, "a cancelled (%d)",
          st.stats.finish);
    sp_engine_wait(e, q, 1 << 30, -1, &st);
    CHECK(st.finished && st.stats.finish == SP_FINISH_CANCELLED && st.n_tokens == 0,
          "queued request cancelled");
    sp_engine_cancel(e, b);
    sp_engine_wait(e, b, 1 << 30, -1, &st);
    CHECK(st.finished, "b finished");
    /* mid-prefill: cancel as soon as the engine has taken a step for it.
     * The prompt needs ~12 chunks of 16 tokens, but a descheduled test
     * thread can still find the prefill done (a busy machine): then the
     * request may have a token, or on a fast quiet machine have finished
     * all 8 before the cancel arrived (which the contract allows: "unless
     * it finished first"), and the case is tried again with a prompt
     * nothing before it shares. A cancel that is honoured only after the
     * prefill, or never, would give tokens in every attempt. */
    int64_t c = 0;
    int mid_prefill = 0, attempts = 0;
    for (; attempts < 20 && !mid_prefill; attempts++) {
        if (c > 0) sp_engine_release(e, c);
        char prompt[1024];
        int n = snprintf(prompt, sizeof prompt, "Attempt %d. ", attempts);
        for (int i = 0; i < 4; i++)
            n += snprintf(prompt + n, sizeof prompt - (size_t)n,
                          "A prompt that nothing before it shares, long enough to need several prefill "
                          "chunks of sixteen tokens: %d one, two, three, four, five, six. ", i);
        sp_engine_stats s0, s1;
        sp_engine_get_stats(e, &s0);
        sp_request_params rn = req(prompt, 8, 0, 0);
        c = sp_engine_submit(e, &rn, err, sizeof(err));
        CHECK(c > 0, "submit: %s", err);
        if (c <= 0) break;
        do {
            sp_engine_get_stats(e, &s1);
        } while (s1.steps == s0.steps);
        sp_engine_cancel(e, c);
        sp_engine_wait(e, c, 1 << 30, -1, &st);
        const int finished_first = st.finished && st.stats.finish == SP_FINISH_LENGTH && st.n_tokens == 8;
        if (!finished_first)
            CHECK(st.finished && st.stats.finish == SP_FINISH_CANCELLED, "c cancelled (finish %d, %d tokens)",
                  st.stats.finish, st.n_tokens);
        mid_prefill = st.finished && st.stats.finish == SP_FINISH_CANCELLED && st.n_tokens == 0;
    }
    CHECK(mid_prefill, "no request cancelled during its prefill ended with 0 tokens (%d attempts)", attempts);
    /* a callback request cancelled while queued still gets its last event */
    sp_request_params rc = r;
    rc.on_event = count_cb;
    __atomic_store_n(&cb_events, 0, __ATOMIC_SEQ_CST);
    int64_t d = sp_engine_submit(e, &rc, err, sizeof(err));
    sp_engine_cancel(e, d);
    /* up to 20 s: the engine may be in the middle of a step, which a
     * sanitizer build on a loaded machine can stretch past a second */
    for (int i = 0; i < 20000 && !__atomic_load_n(&cb_events, __ATOMIC_SEQ_CST); i++) usleep(1000);
    /* the engine thread may still be counting: read atomically (TSan) */
    CHECK(__atomic_load_n(&cb_events, __ATOMIC_SEQ_CST) >= 1,
          "no final event for a cancelled callback request");
    sp_engine_release(e, a);
    sp_engine_release(e, b);
    sp_engine_release(e, c);
    sp_engine_release(e, q);
    check_clean(e, "cancellation");
    /* and freeing an engine with work in flight cancels it cleanly */
    sp_engine_submit(e, &r, err, sizeof(err));
    sp_engine_submit(e, &rc, err, sizeof(err));
    sp_engine_free(e);
}

static void stop_rules(void) {
    sp_engine *e = new_engine(base_params());
    REQUIRE(e, "the engine could not be created");
    /* find what greedy decoding says, then stop on a piece of it */
    sp_request_params r = req(prompt_of(2), 12, 0, 0);
    result full, cut;
    run_all(e, &r, 1, 1, &full);
    CHECK(full.st.finish == SP_FINISH_LENGTH && full.n == 12, "length finish");
    size_t tl = strlen(full.text);
    if (tl >= 4) {
        char stop[8];
        memcpy(stop, full.text + tl / 2, 2);
        stop[2] = 0;
        const char *stops[] = {"\x01never", stop};
        r.stop = stops;
        r.n_stop = 2;
        run_all(e, &r, 1, 1, &cut);
        const char *at = strstr(full.text, stop);
        CHECK(cut.st.finish == SP_FINISH_STOP, "stop string did not stop (%d)", cut.st.finish);
        CHECK(at && strlen(cut.text) == (size_t)(at - full.text) &&
                  !strncmp(cut.text, full.text, strlen(cut.text)),
              "text cut at the stop string: '%s' vs '%s'", cut.text, full.text);
    }
    /* a stop token ends the request without emitting it */
    sp_request_params r2 = req(prompt_of(2), 12, 0, 0);
    r2.stop_tokens = &full.toks[3];
    r2.n_stop_tokens = 1;
    result st;
    run_all(e, &r2, 1, 1, &st);
    int first = 0;
    while (first < full.n && full.toks[first] != full.toks[3]) first++;
    CHECK(st.st.finish == SP_FINISH_STOP && st.n == first, "stop token: %d tokens, expected %d",
          st.n, first);
    sp_engine_free(e);
}

static void invalid_requests(void) {
    sp_engine *e = new_engine(base_params());
    REQUIRE(e, "the engine could not be created");
    char err[256];
    sp_request_params r = req("", 4, 0, 0);
    r.add_bos = false;
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) == SP_ERR_INVALID && strstr(err, "empty"), "empty: %s", err);
    r = req("hello", 0, 0, 0);
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) < 0 && strstr(err, "max_tokens"), "%s", err);
    r = req("hello", 600, 0, 0);
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) == SP_ERR_CONTEXT && strstr(err, "context"), "%s", err);
    sp_token bad[2] = {1, 1 << 30};
    r = req(NULL, 4, 0, 0);
    r.tokens = bad;
    r.n_tokens = 2;
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) == SP_ERR_INVALID && strstr(err, "vocabulary"), "%s", err);
    r = req("hello", 4, 0, 0);
    r.sampling.temperature = -1;
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) < 0, "negative temperature accepted");
    r = req("hello", 4, 0, 0);
    r.logprobs = -2;
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) < 0 && strstr(err, "logprobs"), "%s", err);
    r.logprobs = 21;
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) < 0 && strstr(err, "logprobs"), "%s", err);
    CHECK(sp_engine_cancel(e, 12345) == SP_ERR_NOT_FOUND, "unknown id");
    sp_engine_params p = base_params();
    p.kv_mem = 1000;
    CHECK(sp_engine_create(model, p, err, sizeof(err)) == NULL && strstr(err, "kv-mem"), "%s", err);
    p = base_params();
    p.max_seqs = 0;
    CHECK(sp_engine_create(model, p, err, sizeof(err)) == NULL, "max_seqs 0 accepted");
    sp_engine_free(e);
}

int main(void) {
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/models/ref-llama-spm-q8_0.gguf", t_ref_dir());
    model = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    snprintf(path, sizeof(path), "%s/models/ref-llama-spm-f16.gguf", t_ref_dir());
    model2 = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    if (!model || !model2) {
        printf("FAIL test_engine: cannot load the reference models: %s\n", err);
        printf("RESULT 0 1\n");
        return 1;
    }
    RUN(cache_on_off_identical);
    RUN(batched_equals_alone);
    RUN(memory_pressure);
    RUN(salts);
    RUN(other_model_never_hits);
    RUN(reused_kv_equals_recomputed);
    RUN(cancellation);
    RUN(stop_rules);
    RUN(invalid_requests);
    sp_model_free(model);
    sp_model_free(model2);
    TEST_END();
}
