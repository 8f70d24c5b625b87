/* test_spec_engine.c: speculative decoding keeps the target's output:
 *   - greedy output is identical to plain decoding, token for token, for
 *     every proposer (n-gram, suffix, draft model, and a replay proposer
 *     that mixes right and wrong guesses) and k in {1, 2, 4, 8}, with 1 and
 *     with 8 concurrent sequences, and the pool invariant holds after every
 *     step (rollback returns emptied blocks);
 *   - the acceptance rule (accept what the positional draw gives) samples
 *     exactly the target's distribution: chi-square tests (false-failure
 *     rate 1e-6) on the verifier with synthetic distributions, and end to
 *     end on a model;
 *   - stop tokens, stop strings and max_tokens inside an accepted run end
 *     the request where plain decoding would;
 *   - a lazy grammar (a trigger from the output itself): free, then
 *     constrained from the trigger on, identical with speculation;
 *   - cancellation mid-speculation returns every block;
 *   - counters reconcile with the emitted tokens;
 *   - an incompatible draft model is refused;
 *   - what speculation learns stays within a cache salt: a request of salt
 *     B that continues salt A's output drafts and accepts exactly what it
 *     does on an engine that never saw A, while salt A itself does draft A's
 *     output; acceptance priors are per salt; more salts than partitions
 *     (the cap) keep every invariant.
 * The bundled model pair (models/) is used when present, else the
 * reference models (random weights: their proposals are rarely right, so
 * the replay proposer carries the acceptance paths there).
 */
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include "speculate/verify.h"
#include "specula.h"
#include "test.h"

static sp_model *target, *draft, *other_vocab;
static bool bundled;

/* ---- replay proposer: the true greedy continuation, each token wrong with
 * probability 1 - alpha ------------------------------------------------- */
typedef struct {
    const sp_token *truth; /* greedy output of plain decoding */
    int32_t n_truth, n_prompt;
    uint64_t rng;
    float alpha;
} replay;

static uint64_t xs(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int32_t replay_propose(const sp_token *toks, int32_t n, int32_t k, sp_token *out, void *user) {
    replay *r = user;
    (void)toks;
    int32_t g = n - r->n_prompt, m = 0;
    for (; m < k && g + m < r->n_truth; m++) {
        sp_token t = r->truth[g + m];
        if ((xs(&r->rng) % 1000) >= (uint64_t)(r->alpha * 1000)) t = (t + 1 + (sp_token)(xs(&r->rng) % 50)) % 4000;
        out[m] = t;
    }
    return m;
}

#include "code_prompts.h"
#define GEN 24

static sp_engine *engine(sp_spec_mode mode, int32_t k, bool adaptive, int32_t max_seqs) {
    sp_engine_params p = sp_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 512;
    p.max_seqs = max_seqs;
    p.max_batch_tokens = 256;
    p.debug_check = true;
    p.spec = mode;
    p.spec_k = k;
    p.spec_adaptive = adaptive;
    p.draft = mode == SP_SPEC_DRAFT || mode == SP_SPEC_AUTO ? draft : NULL;
    char err[256];
    sp_engine *e = sp_engine_create(target, p, err, sizeof(err));
    if (!e) fprintf(stderr, "engine: %s\n", err);
    return e;
}

typedef struct {
    sp_token toks[GEN + 8];
    int32_t n;
    char text[2048];
    sp_request_stats st;
} result;

static void run_requests(sp_engine *e, sp_request_params *rq, int n, int conc, result *out) {
    int64_t ids[NPR * 2];
    int sub = 0, done = 0;
    char err[256];
    while (done < n) {
        while (sub < n && sub - done < conc) {
            ids[sub] = sp_engine_submit(e, &rq[sub], err, sizeof(err));
            CHECK(ids[sub] > 0, "submit: %s", err);
            sub++;
        }
        sp_request_status st;
        sp_engine_wait(e, ids[done], 1 << 30, -1, &st);
        out[done].n = st.n_tokens;
        out[done].st = st.stats;
        sp_engine_read(e, ids[done], out[done].toks, GEN + 8, out[done].text, sizeof(out[done].text));
        sp_engine_release(e, ids[done]);
        done++;
    }
}

static sp_request_params greedy_req(int i) {
    sp_request_params r = sp_request_default_params();
    r.prompt = PROMPTS[i];
    r.max_tokens = GEN;
    r.ignore_eos = true;
    r.sampling = sp_sampler_greedy_params();
    return r;
}

static result plain[NPR];
static int32_t n_prompt_of[NPR];

static void reference_outputs(void) {
    sp_engine *e = engine(SP_SPEC_OFF, 4, true, 8);
    REQUIRE(e, "the engine could not be created");
    sp_request_params rq[NPR];
    for (int i = 0; i < NPR; i++) rq[i] = greedy_req(i);
    run_requests(e, rq, NPR, 1, plain);
    for (int i = 0; i < NPR; i++) {
        CHECK(plain[i].n == GEN, "plain run %d made %d tokens", i, plain[i].n);
        n_prompt_of[i] = plain[i].st.prompt_tokens;
    }
    sp_engine_free(e);
}

static void check_clean(sp_engine *e, const char *what) {
    char err[256];
    CHECK(sp_engine_check(e, err, sizeof(err)) == 0, "%s: %s", what, err);
    sp_engine_stats s;
    sp_engine_get_stats(e, &s);
    CHECK(s.blocks_in_use == 0, "%s: %d blocks in use", what, s.blocks_in_use);
}

typedef struct {
    const char *name;
    sp_spec_mode mode;
    bool use_replay;
    float alpha;
} proposer_case;

static void greedy_identical(const proposer_case *pc) {
    /* fixed k in {1, 2, 4, 8}, then the default: the adaptive planner with
     * k up to 8 (it chooses per step, possibly 0) */
    static const int32_t ks[] = {1, 2, 4, 8, 8};
    uint64_t drafted = 0, accepted = 0;
    for (int ki = 0; ki < 5; ki++)
        for (int conc = 1; conc <= 8; conc += 7) {
            const bool adaptive = ki == 4;
            sp_engine *e = engine(pc->mode, ks[ki], adaptive, 8);
            REQUIRE(e, "the engine could not be created");
            sp_request_params rq[NPR];
            replay rp[NPR];
            for (int i = 0; i < NPR; i++) {
                rq[i] = greedy_req(i);
                if (pc->use_replay) {
                    rp[i] = (replay){plain[i].toks, plain[i].n, n_prompt_of[i],
                                     0x9E3779B97F4A7C15ull + (uint64_t)i * 7919 + ks[ki], pc->alpha};
                    rq[i].propose = replay_propose;
                    rq[i].propose_user = &rp[i];
                }
            }
            result res[NPR];
            run_requests(e, rq, NPR, conc, res);
            sp_engine_stats s;
            sp_engine_get_stats(e, &s);
            uint64_t emitted = 0, r_steps = 0, r_drafted = 0, r_acc = 0;
            for (int i = 0; i < NPR; i++) {
                CHECK(res[i].n == plain[i].n &&
                          !memcmp(res[i].toks, plain[i].toks, (size_t)plain[i].n * sizeof(sp_token)),
                      "%s k=%d conc=%d: request %d differs from plain decoding", pc->name, ks[ki],
                      conc, i);
                CHECK(!strcmp(res[i].text, plain[i].text), "text differs");
                const sp_request_stats *t = &res[i].st;
                CHECK(t->spec_accepted <= t->spec_drafted, "accepted > drafted");
                CHECK(t->spec_accepted + t->spec_steps <= res[i].n,
                      "request %d: %d accepted + %d steps > %d tokens", i, t->spec_accepted,
                      t->spec_steps, res[i].n);
                int32_t per = 0;
                for (int j = 0; j < SP_SPEC_K_MAX; j++) {
                    per += t->spec_accepted_per_pos[j];
                    if (j >= ks[ki]) CHECK(t->spec_accepted_per_pos[j] == 0, "position %d > k", j);
                    if (j > 0) CHECK(t->spec_accepted_per_pos[j] <= t->spec_accepted_per_pos[j - 1],
                                     "per-position counts must not increase");
                }
                CHECK(per == t->spec_accepted, "per-position counts %d != accepted %d", per,
                      t->spec_accepted);
                int32_t by_d = 0, by_a = 0; /* by proposer: the same counts */
                for (int m = SP_SPEC_NGRAM; m <= SP_SPEC_DRAFT; m++) {
                    by_d += t->spec_drafted_by[m];
                    by_a += t->spec_accepted_by[m];
                    if (pc->mode != SP_SPEC_AUTO && !pc->use_replay && m != (int)pc->mode)
                        CHECK(!t->spec_drafted_by[m], "%s drafted by %s", pc->name, sp_spec_mode_str(m));
                }
                CHECK(by_d == t->spec_drafted && by_a == t->spec_accepted,
                      "by proposer %d/%d vs %d/%d", by_d, by_a, t->spec_drafted, t->spec_accepted);
                emitted += (uint64_t)res[i].n;
                r_steps += (uint64_t)t->spec_steps;
                r_drafted += (uint64_t)t->spec_drafted;
                r_acc += (uint64_t)t->spec_accepted;
            }
            /* engine counters reconcile with the requests' */
            CHECK(s.spec_steps == r_steps && s.spec_drafted == r_drafted && s.spec_accepted == r_acc,
                  "engine counters (%llu %llu %llu) vs requests (%llu %llu %llu)",
                  (unsigned long long)s.spec_steps, (unsigned long long)s.spec_drafted,
                  (unsigned long long)s.spec_accepted, (unsigned long long)r_steps,
                  (unsigned long long)r_drafted, (unsigned long long)r_acc);
            CHECK(s.decode_tokens == emitted, "decode tokens %llu vs emitted %llu",
                  (unsigned long long)s.decode_tokens, (unsigned long long)emitted);
            drafted += r_drafted;
            accepted += r_acc;
            check_clean(e, pc->name);
            sp_engine_free(e);
        }
    printf("  %s: %llu drafted, %llu accepted (%.0f%%)\n", pc->name, (unsigned long long)drafted,
           (unsigned long long)accepted, drafted ? 100.0 * accepted / drafted : 0.0);
    if (pc->use_replay && pc->alpha > 0.5f) CHECK(accepted > 0, "the replay proposer was never accepted");
    /* a proposer that proposes nothing would pass the equality checks:
     * each real one must draft, and get some of it accepted, on this text */
    if (!pc->use_replay)
        CHECK(drafted > 0 && accepted > 0, "%s drafted %llu, accepted %llu", pc->name,
              (unsigned long long)drafted, (unsigned long long)accepted);
}

/* ---- distribution ----------------------------------------------------------- */

/* Chi-square critical value for a right tail of 1e-6 (Wilson-Hilferty). */
static double chi2_crit(int df) {
    const double z = 4.7534; /* upper 1e-6 quantile of N(0,1) */
    double h = 2.0 / (9.0 * df);
    double c = 1 - h + z * sqrt(h);
    return df * c * c * c;
}

/* Chi-square of counts against probabilities, merging bins with expected
 * count below 5 into one. Returns the statistic; *df gets the degrees. */
static double chi2(const int64_t *count, const double *p, int n, int64_t total, int *df) {
    double stat = 0, rest_e = 0, rest_o = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * total;
        if (e < 5) {
            rest_e += e;
            rest_o += count[i];
            continue;
        }
        stat += (count[i] - e) * (count[i] - e) / e;
        bins++;
    }
    if (rest_e >= 5) {
        stat += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        bins++;
    } else if (rest_o > 20) {
        stat += 1e9; /* mass where there should be almost none */
    }
    *df = bins - 1;
    return stat;
}

/* The verifier alone, on synthetic distributions: over seeds, the first
 * committed token is distributed as p whether the proposal is a fixed guess
 * or drawn at random from a skewed distribution q. */
static void verifier_distribution(void) {
    enum { V = 12, N = 60000 };
    float logits[3 * V];
    double p[V];
    for (int i = 0; i < 3 * V; i++) logits[i] = (float)sin(i * 1.7) * 2.0f;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i]);
    for (int i = 0; i < V; i++) p[i] = exp(logits[i]) / z;
    float q[2 * V];
    for (int mode = 0; mode < 2; mode++) {
        int64_t count[V] = {0};
        sp_sampler_params sp = sp_sampler_default_params();
        sp.temperature = 1.0f;
        sp.top_k = 0;
        sp.top_p = 1.0f;
        sp.min_p = 0.0f;
        uint64_t rs = 12345 + mode;
        for (int it = 0; it < N; it++) {
            sp.seed = 1000003ull * it + mode;
            char err[64];
            sp_sampler *s = sp_sampler_create(sp, V, err, sizeof(err));
            sp_token d[2];
            if (mode == 0) { /* deterministic proposer: a fixed guess */
                d[0] = 3;
                d[1] = 5;
            } else { /* draft distribution q: skewed, then sampled */
                for (int j = 0; j < 2 * V; j++) q[j] = (j % V) < 4 ? 0.2f : 0.2f / (V - 4);
                for (int j = 0; j < 2; j++) {
                    double u = (double)(xs(&rs) >> 11) * 0x1.0p-53, cum = 0;
                    d[j] = V - 1;
                    for (int v = 0; v < V; v++) {
                        cum += q[j * V + v];
                        if (u < cum) {
                            d[j] = v;
                            break;
                        }
                    }
                }
            }
            sp_token out[3];
            int32_t m = spec_verify(s, logits, V, 5, d, 2, out);
            CHECK(m >= 1 && m <= 3, "m = %d", m);
            count[out[0]]++;
            sp_sampler_free(s);
        }
        int df;
        double st = chi2(count, p, V, N, &df);
        CHECK(st < chi2_crit(df), "mode %d: chi-square %.1f over %d df (critical %.1f)", mode, st,
              df, chi2_crit(df));
        printf("  verifier mode %d: chi-square %.1f, %d df, critical %.1f\n", mode, st, df,
               chi2_crit(df));
    }
}

/* End to end: with temperature 1, token 2 of requests whose token 1 is the
 * most likely one follows the target's exact conditional distribution, when
 * every token 2 went through verification (a one-token proposal of the
 * most likely token 2: accepted often, corrected otherwise). */
static int32_t dist_guess;
static int32_t fixed_propose(const sp_token *toks, int32_t n, int32_t k, sp_token *out, void *user) {
    (void)toks;
    (void)n;
    (void)user;
    for (int32_t i = 0; i < k; i++) out[i] = dist_guess;
    return k;
}

/* Softmax of the target's logits after tokens[0..n). */
static void exact_next(const sp_token *toks, int n, double *p) {
    const int32_t V = sp_model_get_info(target)->n_vocab;
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_ctx = 64;
    char err[256];
    sp_context *c = sp_context_create(target, cp, err, sizeof(err));
    int32_t pos[64], seq[64] = {0};
    for (int i = 0; i < n; i++) pos[i] = i;
    sp_batch b = {n, toks, pos, seq, NULL};
    CHECK(c && sp_decode(c, &b, err, sizeof(err)) == 0, "%s", err);
    const float *lg = sp_get_logits(c, 0);
    double mx = lg[0], z = 0;
    for (int i = 1; i < V; i++) mx = fmax(mx, lg[i]);
    for (int i = 0; i < V; i++) z += exp(lg[i] - mx);
    for (int i = 0; i < V; i++) p[i] = exp(lg[i] - mx) / z;
    sp_context_free(c);
}

/* Sampled output (temperature 1) follows the target's exact distribution
 * end to end: token 2 given token 1, against probabilities computed by a
 * plain forward pass. With mode NGRAM a fixed one-token guess is verified
 * (a point-mass proposal, k = 1); with mode DRAFT the draft model proposes
 * k = 4 tokens with the request's noise and verification must still give
 * the target's. */
static void end_to_end_distribution_mode(sp_spec_mode mode) {
    const char *prompt = bundled ? "def " : "The";
    const int32_t V = sp_model_get_info(target)->n_vocab;
    enum { N = 1200 };
    double *p1 = calloc((size_t)V, sizeof(double)), *p2 = calloc((size_t)V, sizeof(double));
    int64_t *count = calloc((size_t)V, sizeof(int64_t));
    sp_token toks[64];
    int n = sp_tokenize(sp_model_get_vocab(target), prompt, strlen(prompt), toks, 60, true, true);
    exact_next(toks, n, p1);
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (p1[i] > p1[best]) best = i;
    toks[n] = best;
    exact_next(toks, n + 1, p2);
    dist_guess = 0;
    for (int i = 1; i < V; i++)
        if (p2[i] > p2[dist_guess]) dist_guess = i;
    sp_sampler_params sp = sp_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    /* auto: its own proposers (the matches, else the draft), no fixed guess */
    const bool drafting = mode == SP_SPEC_DRAFT || mode == SP_SPEC_AUTO;
    sp_engine *e = engine(mode, drafting ? 4 : 1, false, 16);
    REQUIRE(e, "the engine could not be created");
    static int64_t ids[N];
    char err[256];
    for (int i = 0; i < N; i++) {
        sp_request_params r = sp_request_default_params();
        r.prompt = prompt;
        r.max_tokens = drafting ? 6 : 3; /* after token 1, proposals for token 2 on */
        r.ignore_eos = true;
        r.sampling = sp;
        r.sampling.seed = 77 + i;
        if (!drafting) r.propose = fixed_propose;
        ids[i] = sp_engine_submit(e, &r, err, sizeof(err));
        CHECK(ids[i] > 0, "%s", err);
    }
    int64_t best_n = 0;
    for (int i = 0; i < N; i++) {
        sp_request_status st;
        sp_engine_wait(e, ids[i], 1 << 30, -1, &st);
        sp_token tk[3] = {-1, -1, -1};
        sp_engine_read(e, ids[i], tk, 3, NULL, 0);
        CHECK(st.stats.spec_steps >= 1, "request %d did not speculate", i);
        if (tk[0] == best) {
            best_n++;
            count[tk[1]]++;
        }
        sp_engine_release(e, ids[i]);
    }
    sp_engine_stats s;
    sp_engine_get_stats(e, &s);
    check_clean(e, "distribution");
    sp_engine_free(e);
    int df;
    double st = chi2(count, p2, V, best_n, &df);
    printf("  end-to-end (%s): p(token 1) = %.2f, %lld samples of token 2, accepted %llu of %llu "
           "drafted: chi-square %.1f, %d df, critical %.1f\n", mode == SP_SPEC_AUTO ? "auto, k = 4" :
           drafting ? "draft model, k = 4" :
           "one fixed guess", p1[best], (long long)best_n,
           (unsigned long long)s.spec_accepted, (unsigned long long)s.spec_drafted, st, df,
           chi2_crit(df));
    CHECK(best_n >= 100, "too few samples (%lld) for a test", (long long)best_n);
    if (df >= 1) CHECK(st < chi2_crit(df), "chi-square %.1f over %d df", st, df);
    if (drafting) CHECK(s.spec_accepted > 0, "the draft's proposals were never accepted");
    free(p1);
    free(p2);
    free(count);
}

static void end_to_end_distribution(void) { end_to_end_distribution_mode(SP_SPEC_NGRAM); }

static void end_to_end_distribution_auto(void) { end_to_end_distribution_mode(SP_SPEC_AUTO); }

static void end_to_end_distribution_draft(void) {
    if (!draft) {
        SKIP("no draft model beside this target");
        return;
    }
    end_to_end_distribution_mode(SP_SPEC_DRAFT);
}

static void stops_inside_runs(void) {
    /* replay with every guess right: long accepted runs; a stop token, a
     * stop string and max_tokens must cut them exactly where plain decoding
     * stops */
    sp_engine *e = engine(SP_SPEC_NGRAM, 8, false, 4);
    sp_engine *e0 = engine(SP_SPEC_OFF, 8, false, 4);
    REQUIRE(e && e0, "cannot create the engines");
    for (int i = 0; i < 3; i++) {
        replay rp = {plain[i].toks, plain[i].n, n_prompt_of[i], 99, 1.0f};
        sp_request_params variants[3];
        for (int v = 0; v < 3; v++) {
            variants[v] = greedy_req(i);
            variants[v].propose = replay_propose;
            variants[v].propose_user = &rp;
        }
        variants[0].max_tokens = 13;                 /* inside a run of 8 */
        variants[1].stop_tokens = &plain[i].toks[9]; /* a token inside a run */
        variants[1].n_stop_tokens = 1;
        char stop[16] = "";
        size_t tl = strlen(plain[i].text);
        if (tl > 12) memcpy(stop, plain[i].text + tl / 2, 3);
        const char *stops[1] = {stop};
        if (stop[0]) {
            variants[2].stop = stops;
            variants[2].n_stop = 1;
        }
        for (int v = 0; v < 3; v++) {
            result a, b;
            rp.rng = 99;
            run_requests(e, &variants[v], 1, 1, &a);
            sp_request_params pl = variants[v];
            pl.propose = NULL;
            pl.spec = SP_SPEC_OFF;
            run_requests(e0, &pl, 1, 1, &b);
            CHECK(a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * sizeof(sp_token)) &&
                      !strcmp(a.text, b.text) && a.st.finish == b.st.finish,
                  "prompt %d variant %d: %d tokens (finish %d) vs plain %d (finish %d)", i, v, a.n,
                  a.st.finish, b.n, b.st.finish);
            CHECK(a.n <= variants[v].max_tokens, "more than max_tokens");
        }
    }
    check_clean(e, "stops");
    sp_engine_free(e);
    sp_engine_free(e0);
}

static void cancel_mid_speculation(void) {
    sp_engine *e = engine(SP_SPEC_NGRAM, 8, false, 4);
    REQUIRE(e, "the engine could not be created");
    char err[256];
    replay rp[4];
    int64_t ids[4];
    for (int i = 0; i < 4; i++) {
        rp[i] = (replay){plain[i].toks, plain[i].n, n_prompt_of[i], 5 + i, 0.8f};
        sp_request_params r = greedy_req(i);
        r.propose = replay_propose;
        r.propose_user = &rp[i];
        ids[i] = sp_engine_submit(e, &r, err, sizeof(err));
    }
    sp_request_status st;
    for (int i = 0; i < 4; i++) REQUIRE(ids[i] > 0, "submit %d: %s", i, err);
    sp_engine_wait(e, ids[0], 5, -1, &st);
    for (int i = 0; i < 4; i++) sp_engine_cancel(e, ids[i]);
    int cancelled = 0;
    for (int i = 0; i < 4; i++) {
        sp_engine_wait(e, ids[i], 1 << 30, -1, &st);
        CHECK(st.finished, "request %d not finished", i);
        /* a request cancelled mid-way has fewer tokens than plain decoding
         * gave and says so; one that finished first is whole */
        if (st.stats.finish == SP_FINISH_CANCELLED) {
            cancelled++;
            CHECK(st.n_tokens < plain[i].n, "request %d cancelled with all %d tokens", i, st.n_tokens);
        } else {
            CHECK(st.n_tokens == plain[i].n, "request %d: %d tokens, finish %d", i, st.n_tokens,
                  (int)st.stats.finish);
        }
        sp_engine_release(e, ids[i]);
    }
    /* request 0 was waited for until it had 5 of its tokens, far from its
     * end: at least it was cut while speculating */
    CHECK(cancelled >= 1, "no request was cancelled");
    check_clean(e, "cancel");
    sp_engine_free(e);
}

/* Blocks filled during speculation enter the prefix cache only with the
 * committed tokens: a later request whose prompt is an earlier prompt plus
 * its output reuses them and still gives what an uncached engine gives. */
static void speculated_blocks_cache_correctly(void) {
    sp_engine *e = engine(SP_SPEC_NGRAM, 8, false, 4);
    REQUIRE(e, "the engine could not be created");
    sp_engine_params p0 = sp_engine_default_params();
    p0.n_threads = 2;
    p0.n_ctx = 512;
    p0.prefix_cache = false;
    char err[256];
    sp_engine *plain_e = sp_engine_create(target, p0, err, sizeof(err));
    for (int i = 0; i < 3; i++) {
        replay rp = {plain[i].toks, plain[i].n, n_prompt_of[i], 11 + i, 0.9f};
        sp_request_params r = greedy_req(i);
        r.propose = replay_propose;
        r.propose_user = &rp;
        result a;
        run_requests(e, &r, 1, 1, &a);
        /* prompt = tokens of prompt i + its output */
        sp_token toks[512];
        int n = sp_tokenize(sp_model_get_vocab(target), PROMPTS[i], strlen(PROMPTS[i]), toks, 400,
                            true, true);
        memcpy(toks + n, a.toks, (size_t)a.n * sizeof(sp_token));
        n += a.n;
        sp_request_params r2 = greedy_req(i);
        r2.prompt = NULL;
        r2.tokens = toks;
        r2.n_tokens = n;
        r2.max_tokens = 8;
        r2.spec = SP_SPEC_OFF;
        result b, c;
        run_requests(e, &r2, 1, 1, &b);
        run_requests(plain_e, &r2, 1, 1, &c);
        /* every full block of A's prompt and output (its last token never
         * entered the KV) is found again */
        CHECK(b.st.cached_tokens == (n - 1) / 16 * 16, "request %d: %d cached of %d, expected %d",
              i, b.st.cached_tokens, n, (n - 1) / 16 * 16);
        CHECK(b.n == c.n && !memcmp(b.toks, c.toks, (size_t)b.n * sizeof(sp_token)),
              "request %d: output after reusing speculated blocks differs", i);
    }
    check_clean(e, "spec cache");
    sp_engine_free(e);
    sp_engine_free(plain_e);
}

/* ---- isolation of what speculation learns ------------------------------------ */

static sp_engine *suffix_engine(int32_t partitions) {
    sp_engine_params p = sp_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 512;
    p.max_seqs = 4;
    p.max_batch_tokens = 256;
    p.debug_check = true;
    p.spec = SP_SPEC_SUFFIX;
    p.spec_k = 8;
    p.spec_adaptive = false; /* k = what the proposer has: counts are deterministic */
    p.spec_partitions = partitions;
    char err[256];
    sp_engine *e = sp_engine_create(target, p, err, sizeof(err));
    if (!e) fprintf(stderr, "engine: %s\n", err);
    return e;
}

/* Prompt i's tokens followed by the first half of its greedy output: what
 * someone who suspects another tenant sent prompt i would send. */
static int32_t probe_tokens(int i, sp_token *toks) {
    int32_t n = sp_tokenize(sp_model_get_vocab(target), PROMPTS[i], strlen(PROMPTS[i]), toks, 400,
                            true, true);
    memcpy(toks + n, plain[i].toks, (GEN / 2) * sizeof(sp_token));
    return n + GEN / 2;
}

static result run_salted(sp_engine *e, const sp_token *toks, int32_t n, const char *salt,
                         int32_t max_tokens) {
    sp_request_params r = greedy_req(0);
    r.prompt = NULL;
    r.tokens = toks;
    r.n_tokens = n;
    r.max_tokens = max_tokens;
    r.cache_salt = salt;
    result out;
    run_requests(e, &r, 1, 1, &out);
    return out;
}

static bool same_spec(const result *a, const result *b) {
    return a->n == b->n && !memcmp(a->toks, b->toks, (size_t)a->n * sizeof(sp_token)) &&
           a->st.spec_steps == b->st.spec_steps && a->st.spec_drafted == b->st.spec_drafted &&
           a->st.spec_accepted == b->st.spec_accepted;
}

/* The cross-tenant attack on the suffix store: tenant A generates; tenant B sends A's prompt
 * plus half of A's output with suffix speculation. B's drafted and accepted
 * counts (and so its timing) must be those of an engine that never saw A;
 * A's own salt must still draft its output (the feature), and requests
 * without a salt share one partition ("" and NULL alike). */
static void suffix_store_partitioned(void) {
    int32_t ctl_acc = 0, same_acc = 0;
    for (int i = 0; i < 4; i++) {
        sp_token probe[512];
        const int32_t np = probe_tokens(i, probe);
        sp_token prompt[512];
        const int32_t n0 = np - GEN / 2;
        memcpy(prompt, probe, (size_t)n0 * sizeof(sp_token));
        /* control: B's probe on an engine where A never ran */
        sp_engine *e0 = suffix_engine(0);
        sp_engine *e = suffix_engine(0);
        REQUIRE(e0 && e, "cannot create the engines");
        const result ctl = run_salted(e0, probe, np, "tenant-b", GEN / 2);
        const result ctl_none = run_salted(e0, probe, np, NULL, GEN / 2);
        /* A generates (its output goes to A's partition), then B probes */
        const result a = run_salted(e, prompt, n0, "tenant-a", GEN);
        CHECK(a.n == GEN && !memcmp(a.toks, plain[i].toks, GEN * sizeof(sp_token)),
              "prompt %d: A's output differs from plain decoding", i);
        const result b = run_salted(e, probe, np, "tenant-b", GEN / 2);
        const result none = run_salted(e, probe, np, NULL, GEN / 2);
        const result sub = run_salted(e, probe, np, "tenant-a:sub", GEN / 2);
        CHECK(same_spec(&b, &ctl),
              "prompt %d: salt B after A: %d steps, %d drafted, %d accepted; never saw A: %d, %d, %d",
              i, b.st.spec_steps, b.st.spec_drafted, b.st.spec_accepted, ctl.st.spec_steps,
              ctl.st.spec_drafted, ctl.st.spec_accepted);
        CHECK(same_spec(&none, &ctl_none), "prompt %d: no salt after A: %d drafted, %d accepted; "
              "never saw A: %d, %d", i, none.st.spec_drafted, none.st.spec_accepted,
              ctl_none.st.spec_drafted, ctl_none.st.spec_accepted);
        CHECK(same_spec(&sub, &ctl), "prompt %d: a salt extending A's learned from A", i);
        /* A's own salt drafts from A's output */
        const result same = run_salted(e, probe, np, "tenant-a", GEN / 2);
        CHECK(same.n == ctl.n && !memcmp(same.toks, ctl.toks, (size_t)ctl.n * sizeof(sp_token)),
              "prompt %d: output differs", i);
        CHECK(same.st.spec_accepted >= ctl.st.spec_accepted,
              "prompt %d: same salt accepted %d, fewer than without A's output (%d)", i,
              same.st.spec_accepted, ctl.st.spec_accepted);
        printf("  prompt %d: salt B after A %d/%d drafted/accepted, never saw A %d/%d, salt A %d/%d\n",
               i, b.st.spec_drafted, b.st.spec_accepted, ctl.st.spec_drafted, ctl.st.spec_accepted,
               same.st.spec_drafted, same.st.spec_accepted);
        ctl_acc += ctl.st.spec_accepted;
        same_acc += same.st.spec_accepted;
        /* no salt and "" are one partition: "" learns from NULL's output
         * just as salt A from A's */
        sp_engine *e3 = suffix_engine(0);
        REQUIRE(e3, "the engine could not be created");
        run_salted(e3, prompt, n0, NULL, GEN);
        const result n2 = run_salted(e3, probe, np, "", GEN / 2);
        CHECK(same_spec(&n2, &same), "prompt %d: \"\" after no salt accepted %d, salt A after A %d",
              i, n2.st.spec_accepted, same.st.spec_accepted);
        check_clean(e, "partitioned");
        check_clean(e3, "partitioned");
        sp_engine_free(e3);
        sp_engine_free(e);
        sp_engine_free(e0);
    }
    CHECK(same_acc > ctl_acc, "the same salt never gained from its own earlier output (%d vs %d)",
          same_acc, ctl_acc);
}

/* The acceptance prior a new request starts from is learned per salt (and
 * per method): one salt's bad proposals do not lower another's. */
static void prior_partitioned(void) {
    sp_engine *e = engine(SP_SPEC_NGRAM, 4, false, 2);
    REQUIRE(e, "the engine could not be created");
    CHECK(sp_engine_spec_prior(e, "tenant-a", SP_SPEC_NGRAM) == 0.5f, "initial prior");
    CHECK(sp_engine_spec_prior(e, NULL, SP_SPEC_OFF) < 0, "off is not a method");
    for (int i = 0; i < 2; i++) { /* salt A: every proposal wrong */
        replay rp = {plain[i].toks, plain[i].n, n_prompt_of[i], 3 + i, 0.0f};
        sp_request_params r = greedy_req(i);
        r.propose = replay_propose;
        r.propose_user = &rp;
        r.cache_salt = "tenant-a";
        result out;
        run_requests(e, &r, 1, 1, &out);
        CHECK(out.st.spec_drafted > 0 && out.st.spec_accepted == 0, "A: %d drafted, %d accepted",
              out.st.spec_drafted, out.st.spec_accepted);
    }
    const float pa = sp_engine_spec_prior(e, "tenant-a", SP_SPEC_NGRAM);
    CHECK(pa < 0.1f, "A's prior after rejections: %g", pa);
    CHECK(sp_engine_spec_prior(e, "tenant-b", SP_SPEC_NGRAM) == 0.5f &&
              sp_engine_spec_prior(e, NULL, SP_SPEC_NGRAM) == 0.5f &&
              sp_engine_spec_prior(e, "tenant-a", SP_SPEC_SUFFIX) == 0.5f,
          "other salts (and A's other methods) keep the default: B %g, none %g, A suffix %g",
          sp_engine_spec_prior(e, "tenant-b", SP_SPEC_NGRAM), sp_engine_spec_prior(e, NULL, SP_SPEC_NGRAM),
          sp_engine_spec_prior(e, "tenant-a", SP_SPEC_SUFFIX));
    /* salt B: every proposal right; A's prior does not move */
    replay rp = {plain[2].toks, plain[2].n, n_prompt_of[2], 7, 1.0f};
    sp_request_params r = greedy_req(2);
    r.propose = replay_propose;
    r.propose_user = &rp;
    r.cache_salt = "tenant-b";
    result out;
    run_requests(e, &r, 1, 1, &out);
    CHECK(sp_engine_spec_prior(e, "tenant-b", SP_SPEC_NGRAM) > 0.5f, "B's prior after acceptances: %g",
          sp_engine_spec_prior(e, "tenant-b", SP_SPEC_NGRAM));
    CHECK(sp_engine_spec_prior(e, "tenant-a", SP_SPEC_NGRAM) == pa, "A's prior moved with B's requests");
    check_clean(e, "prior");
    sp_engine_free(e);
}

/* More salts than partitions, concurrently: running requests hold theirs,
 * the least recently used free ones make room, outputs are unchanged and
 * the partitions' invariants (checked after every step) hold. */
static void partitions_bounded(void) {
    sp_engine *e = suffix_engine(1); /* raised to max_seqs + 1 = 5 */
    REQUIRE(e, "the engine could not be created");
    sp_request_params rq[NPR * 2];
    char salts[NPR * 2][16];
    for (int i = 0; i < NPR * 2; i++) {
        rq[i] = greedy_req(i % NPR);
        snprintf(salts[i], sizeof(salts[i]), "salt-%d", i % 7);
        rq[i].cache_salt = salts[i];
    }
    result res[NPR * 2];
    run_requests(e, rq, NPR * 2, 4, res);
    for (int i = 0; i < NPR * 2; i++)
        CHECK(res[i].n == plain[i % NPR].n &&
                  !memcmp(res[i].toks, plain[i % NPR].toks, (size_t)res[i].n * sizeof(sp_token)),
              "request %d differs from plain decoding", i);
    check_clean(e, "bounded");
    sp_engine_free(e);
}

/* ---- lazy grammars ---------------------------------------------------------- */

/* A lazy grammar's trigger taken from the model's own greedy output (the
 * text of two of its tokens, first met there): the output equals plain
 * decoding up to and including the trigger (the free part is unconstrained),
 * then follows the grammar ("=>" forced, digits, "!") and ends with "stop";
 * with speculation (n-gram, a replay of the plain continuation, the draft
 * model) it is identical, token for token, and the forced "=>" is proposed
 * by the grammar (jump-forward). A trigger that never appears leaves the
 * output as plain decoding's. */
static int lazy_trigger(int i, char *trig, size_t cap, size_t *end) {
    const sp_vocab *v = sp_model_get_vocab(target);
    char seen[2048] = "";
    size_t n_seen = 0;
    for (int j = 0; j < 12; j++) {
        char a[64], b[64];
        const int na = sp_token_to_piece(v, plain[i].toks[j], a, sizeof(a), false);
        const int nb = sp_token_to_piece(v, plain[i].toks[j + 1], b, sizeof(b), false);
        if (na > 0 && nb > 0 && (size_t)(na + nb) < cap && j >= 4) {
            memcpy(trig, a, (size_t)na);
            memcpy(trig + na, b, (size_t)nb);
            trig[na + nb] = 0;
            bool plain_ascii = strlen(trig) == (size_t)(na + nb);
            for (const char *c = trig; *c; c++) plain_ascii &= *c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\';
            memcpy(seen + n_seen, trig, (size_t)(na + nb)); /* the text up to the trigger's end */
            seen[n_seen + na + nb] = 0;
            if (plain_ascii && strstr(seen, trig) == seen + n_seen) {
                *end = n_seen + (size_t)(na + nb);
                return j;
            }
        }
        if (na > 0 && n_seen + (size_t)na + 128 < sizeof(seen)) memcpy(seen + n_seen, a, (size_t)na), n_seen += (size_t)na;
        seen[n_seen] = 0;
    }
    return -1;
}

static bool lazy_rest_ok(const char *s) {
    if (strncmp(s, "=>", 2)) return false;
    int d = 0;
    for (s += 2; *s >= '0' && *s <= '9'; s++) d++;
    return d >= 1 && d <= 3 && !strcmp(s, "!");
}

static void lazy_grammar(void) {
    int found = 0;
    uint64_t forced = 0;
    for (int i = 0; i < 4; i++) {
        char trig[128], gbnf[512];
        size_t end = 0;
        const int j = lazy_trigger(i, trig, sizeof(trig), &end);
        if (j < 0) continue;
        found++;
        snprintf(gbnf, sizeof(gbnf), "root ::= \"%s\" \"=>\" [0-9]{1,3} \"!\"", trig);
        for (int absent = 0; absent < 2; absent++) {
            static const struct {
                sp_spec_mode mode;
                bool replay;
            } modes[] = {{SP_SPEC_OFF, false}, {SP_SPEC_NGRAM, false}, {SP_SPEC_NGRAM, true}, {SP_SPEC_DRAFT, false}};
            result ref = {0};
            for (int mi = 0; mi < 4; mi++) {
                sp_engine *e = engine(modes[mi].mode, 4, false, 2);
                REQUIRE(e, "the engine could not be created");
                sp_request_params r = greedy_req(i);
                r.grammar = absent ? "root ::= \"\\x01zz\" [0-9]" : gbnf;
                r.grammar_trigger = absent ? "\x01zz" : trig;
                replay rp = {plain[i].toks, plain[i].n, n_prompt_of[i], 11 + (uint64_t)i, 0.8f};
                if (modes[mi].replay) r.propose = replay_propose, r.propose_user = &rp;
                result out;
                run_requests(e, &r, 1, 1, &out);
                check_clean(e, "lazy");
                sp_engine_free(e);
                if (mi == 0) {
                    ref = out;
                    if (absent)
                        CHECK(out.n == plain[i].n && !memcmp(out.toks, plain[i].toks, (size_t)out.n * sizeof(sp_token)) &&
                                  out.st.finish == SP_FINISH_LENGTH,
                              "prompt %d: no trigger, yet the output differs from plain decoding", i);
                    else
                        CHECK(!memcmp(out.toks, plain[i].toks, (size_t)(j + 2) * sizeof(sp_token)) &&
                                  !strncmp(out.text, plain[i].text, end) && lazy_rest_ok(out.text + end) &&
                                  out.st.finish == SP_FINISH_STOP,
                              "prompt %d: trigger '%s' at token %d: %s (plain %s)", i, trig, j, out.text, plain[i].text);
                    continue;
                }
                CHECK(out.n == ref.n && !memcmp(out.toks, ref.toks, (size_t)out.n * sizeof(sp_token)) &&
                          !strcmp(out.text, ref.text) && out.st.finish == ref.st.finish,
                      "prompt %d mode %d%s: speculative output %s differs from plain %s", i, mi,
                      absent ? " (no trigger)" : "", out.text, ref.text);
                if (!absent && mi == 1) forced += (uint64_t)out.st.spec_grammar;
            }
        }
    }
    /* a trigger needs a grammar (the grammar must begin with it) */
    sp_engine *e = engine(SP_SPEC_OFF, 4, false, 2);
    REQUIRE(e, "the engine could not be created");
    sp_request_params r = greedy_req(0);
    char err[256];
    r.grammar_trigger = "def";
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) < 0 && strstr(err, "needs a grammar"), "%s", err);
    r.grammar = "root ::= \"x\" [0-9]";
    CHECK(sp_engine_submit(e, &r, err, sizeof(err)) < 0 && strstr(err, "does not begin with its trigger"), "%s", err);
    sp_engine_free(e);
    CHECK(found >= 2, "only %d prompts had a usable trigger", found);
    CHECK(forced > 0, "n-gram speculation: the grammar's forced \"=>\" was never proposed and accepted");
    printf("  lazy: %d prompts, %llu forced tokens accepted\n", found, (unsigned long long)forced);
}

static void incompatible_draft_refused(void) {
    sp_engine_params p = sp_engine_default_params();
    p.spec = SP_SPEC_DRAFT;
    p.draft = other_vocab;
    char err[256];
    sp_engine *e = sp_engine_create(target, p, err, sizeof(err));
    CHECK(e == NULL, "an incompatible draft was accepted");
    if (e) sp_engine_free(e);
    else printf("  refused: %s\n", err);
    p.draft = NULL;
    e = sp_engine_create(target, p, err, sizeof(err));
    CHECK(e == NULL && strstr(err, "draft"), "draft mode without a draft: %s", err);
    if (e) sp_engine_free(e);
    /* a request asking for the draft on an engine without one */
    sp_engine *e2 = engine(SP_SPEC_NGRAM, 4, true, 2);
    sp_request_params r = greedy_req(0);
    r.spec = SP_SPEC_DRAFT;
    CHECK(sp_engine_submit(e2, &r, err, sizeof(err)) < 0 && strstr(err, "draft"), "%s", err);
    r.spec = SP_SPEC_NGRAM;
    r.spec_k = 99;
    CHECK(sp_engine_submit(e2, &r, err, sizeof(err)) < 0 && strstr(err, "spec_k"), "%s", err);
    sp_engine_free(e2);
}

int main(void) {
    char path[512], err[256];
    const char *t = "models/specula-code-target-f16.gguf", *d = "models/specula-code-draft-f16.gguf";
    bundled = access(t, R_OK) == 0 && access(d, R_OK) == 0;
    if (bundled) {
        target = sp_model_load(t, sp_model_default_params(), err, sizeof(err));
        draft = sp_model_load(d, sp_model_default_params(), err, sizeof(err));
    } else {
        snprintf(path, sizeof(path), "%s/models/ref-llama-spm-q8_0.gguf", t_ref_dir());
        target = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
        snprintf(path, sizeof(path), "%s/models/ref-llama-spm-f16.gguf", t_ref_dir());
        draft = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    }
    snprintf(path, sizeof(path), "%s/models/ref-qwen2-gpt2-q4_0.gguf", t_ref_dir());
    other_vocab = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    if (!target || !draft || !other_vocab) {
        printf("FAIL test_spec_engine: cannot load models: %s\nRESULT 0 1\n", err);
        return 1;
    }
    printf("  models: %s\n", bundled ? "the bundled pair" : "reference models");
    RUN(reference_outputs);
    static const proposer_case cases[] = {
        {"ngram", SP_SPEC_NGRAM, false, 0},
        {"suffix", SP_SPEC_SUFFIX, false, 0},
        {"draft", SP_SPEC_DRAFT, false, 0},
        {"auto", SP_SPEC_AUTO, false, 0},
        {"replay-0.8", SP_SPEC_NGRAM, true, 0.8f},
        {"replay-0.3", SP_SPEC_NGRAM, true, 0.3f},
    };
    for (int i = 0; i < 6; i++) RUN_NAMED(greedy_identical, &cases[i], cases[i].name);
    RUN(verifier_distribution);
    RUN(end_to_end_distribution);
    RUN(end_to_end_distribution_draft);
    RUN(end_to_end_distribution_auto);
    RUN(stops_inside_runs);
    RUN(lazy_grammar);
    RUN(cancel_mid_speculation);
    RUN(speculated_blocks_cache_correctly);
    RUN(incompatible_draft_refused);
    RUN(suffix_store_partitioned);
    RUN(prior_partitioned);
    RUN(partitions_bounded);
    sp_model_free(target);
    sp_model_free(draft);
    sp_model_free(other_vocab);
    TEST_END();
}
