/* test_seeded.c: seeded sampling reproduces with speculation on.
 *   - Sampled requests (temperature 0.8, each with its own seed; some with
 *     top-k / top-p, min-p or penalties) give token for token and byte for
 *     byte the text of plain decoding, with every proposer (n-gram, suffix,
 *     draft model) and k fixed at 1, 2, 4 and 8, run one at a time and 16
 *     at a time; plain decoding one at a time and 16 at a time agree too.
 *     Each proposer drafts and has some of it accepted, so the comparison
 *     is not vacuous.
 *   - The acceptance of the draft model's proposals, measured on the
 *     pair's real distributions along sampled texts: the Gumbel coupling
 *     (the draft proposes with the request's noise; what verification
 *     does now) over many noise draws per position, against the rejection
 *     rule's expected acceptance sum_v min(p, q) = 1 - TV (what verification
 *     did before, and the most any coupling can give). Printed; the
 *     coupling must land between its bound (1 - TV) / (1 + TV) and 1 - TV.
 * The bundled pair (models/) is used when present, else the reference
 * models.
 */
#include <math.h>
#include <unistd.h>

#include "specula.h"
#include "test.h"

static sp_model *target, *draft;

#include "code_prompts.h"
#define NREQ 16 /* each prompt with two seeds */
#define GEN 32

static sp_engine *engine(sp_spec_mode mode, int32_t k, int32_t max_seqs) {
    sp_engine_params p = sp_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 512;
    p.max_seqs = max_seqs;
    p.max_batch_tokens = 512;
    p.debug_check = true;
    p.spec = mode;
    p.spec_k = k;
    p.spec_adaptive = false; /* k proposals every step: drafting by construction */
    p.draft = mode == SP_SPEC_DRAFT ? draft : NULL;
    char err[256];
    sp_engine *e = sp_engine_create(target, p, err, sizeof(err));
    if (!e) fprintf(stderr, "engine: %s\n", err);
    return e;
}

static sp_request_params request(int i) {
    sp_request_params r = sp_request_default_params();
    r.prompt = PROMPTS[i % NPR];
    r.max_tokens = GEN;
    r.ignore_eos = true;
    r.sampling = sp_sampler_default_params();
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 0; /* OpenAI's defaults: the whole vocabulary */
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.seed = 5 + 1000 * (uint64_t)i;
    switch (i % 4) {
    case 1: r.sampling.top_k = 40; r.sampling.top_p = 0.9f; break;
    case 2: r.sampling.min_p = 0.05f; r.sampling.presence_penalty = 0.5f; break;
    case 3: r.sampling.temperature = 1.2f; r.sampling.repeat_penalty = 1.1f; break;
    default: break;
    }
    return r;
}

typedef struct {
    sp_token toks[GEN];
    int32_t n;
    char text[4096];
    sp_request_stats st;
} result;

/* Runs the NREQ requests with at most conc in flight; false on a failed submit. */
static bool run(sp_engine *e, int conc, result *out) {
    int64_t ids[NREQ];
    int sub = 0, done = 0;
    char err[256];
    while (done < NREQ) {
        while (sub < NREQ && sub - done < conc) {
            sp_request_params rq = request(sub);
            ids[sub] = sp_engine_submit(e, &rq, err, sizeof(err));
            if (ids[sub] <= 0) {
                CHECK(false, "submit: %s", err);
                return false;
            }
            sub++;
        }
        sp_request_status st;
        sp_engine_wait(e, ids[done], 1 << 30, -1, &st);
        out[done].n = st.n_tokens;
        out[done].st = st.stats;
        sp_engine_read(e, ids[done], out[done].toks, GEN, out[done].text, sizeof(out[done].text));
        sp_engine_release(e, ids[done]);
        done++;
    }
    return true;
}

static result plain[NREQ];

static void plain_reference(void) {
    sp_engine *e = engine(SP_SPEC_OFF, 4, 16);
    REQUIRE(e, "the engine could not be created");
    static result batch[NREQ];
    if (run(e, 1, plain) && run(e, 16, batch))
        for (int i = 0; i < NREQ; i++) {
            CHECK(plain[i].n == GEN, "request %d made %d tokens", i, plain[i].n);
            CHECK(batch[i].n == plain[i].n && !memcmp(batch[i].toks, plain[i].toks, sizeof(plain[i].toks)) &&
                      !strcmp(batch[i].text, plain[i].text),
                  "request %d: 16 at a time differs from one at a time", i);
        }
    /* the seeds matter: two seeds of one prompt give two texts */
    int same = 0;
    for (int i = 0; i < NPR; i++) same += !memcmp(plain[i].toks, plain[i + NPR].toks, sizeof(plain[i].toks));
    CHECK(same < NPR / 2, "%d of %d prompts gave one text for two seeds", same, NPR);
    sp_engine_free(e);
}

typedef struct {
    const char *name;
    sp_spec_mode mode;
} proposer_case;

static void seeded_identical(const proposer_case *pc) {
    static const int32_t ks[] = {1, 2, 4, 8};
    uint64_t drafted = 0, accepted = 0, drafted1 = 0, accepted1 = 0;
    for (int ki = 0; ki < 4; ki++)
        for (int conc = 1; conc <= 16; conc += 15) {
            sp_engine *e = engine(pc->mode, ks[ki], 16);
            REQUIRE(e, "the engine could not be created");
            static result res[NREQ];
            if (!run(e, conc, res)) {
                sp_engine_free(e);
                return;
            }
            int differ = 0;
            for (int i = 0; i < NREQ; i++) {
                if (res[i].n != plain[i].n || memcmp(res[i].toks, plain[i].toks, sizeof(plain[i].toks)) ||
                    strcmp(res[i].text, plain[i].text))
                    differ++;
                drafted += (uint64_t)res[i].st.spec_drafted;
                accepted += (uint64_t)res[i].st.spec_accepted;
                if (ks[ki] == 1) {
                    drafted1 += (uint64_t)res[i].st.spec_drafted;
                    accepted1 += (uint64_t)res[i].st.spec_accepted;
                }
            }
            CHECK(!differ, "%s k=%d, %d at a time: %d of %d texts differ from plain decoding",
                  pc->name, ks[ki], conc, differ, NREQ);
            char err[256];
            CHECK(sp_engine_check(e, err, sizeof(err)) == 0, "%s: %s", pc->name, err);
            sp_engine_free(e);
        }
    printf("  %s: %llu drafted, %llu accepted (%.0f%%); at k = 1, per proposed token: %.3f\n",
           pc->name, (unsigned long long)drafted, (unsigned long long)accepted,
           drafted ? 100.0 * accepted / drafted : 0.0, drafted1 ? (double)accepted1 / drafted1 : 0.0);
    CHECK(drafted > 0 && accepted > 0, "%s drafted %llu, accepted %llu", pc->name,
          (unsigned long long)drafted, (unsigned long long)accepted);
}

/* Logits of m after each token of toks[0..n) (rows [n][V]), or NULL. */
static float *all_logits(sp_model *m, const sp_token *toks, int n) {
    const int32_t V = sp_model_get_info(m)->n_vocab;
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_ctx = 512;
    char err[256];
    sp_context *c = sp_context_create(m, cp, err, sizeof(err));
    if (!c) return NULL;
    int32_t pos[512], seq[512] = {0};
    int8_t want[512];
    for (int i = 0; i < n; i++) pos[i] = i, want[i] = 1;
    sp_batch b = {n, toks, pos, seq, want};
    float *rows = malloc((size_t)n * V * sizeof(float));
    if (rows && sp_decode(c, &b, err, sizeof(err)) == 0)
        for (int i = 0; i < n; i++) memcpy(rows + (size_t)i * V, sp_get_logits(c, i), V * sizeof(float));
    else {
        free(rows);
        rows = NULL;
    }
    sp_context_free(c);
    return rows;
}

/* Per position along the plain texts of the first NPR requests: p (the
 * target's final distribution), q (the draft's, as the draft samples), and
 *   rejection rule: sum_v min(p_v, q_v), the probability that the draft's
 *     sampled token survives min(1, p/q) (exact, no draws needed);
 *   Gumbel coupling: over S noise draws (positions of one seed), how often
 *     the draft's positional draw equals the target's;
 *   bound: (1 - TV) / (1 + TV). */
static void acceptance_comparison(void) {
    if (!draft) {
        SKIP("no draft model");
        return;
    }
    enum { S = 300 };
    const int32_t V = sp_model_get_info(target)->n_vocab, DV = sp_model_get_info(draft)->n_vocab;
    const sp_vocab *voc = sp_model_get_vocab(target);
    float *p = malloc(V * sizeof(float)), *q = malloc(V * sizeof(float));
    double rej = 0, gum = 0, lo = 0;
    int64_t npos = 0;
    for (int i = 0; i < NPR; i++) {
        sp_request_params rq = request(i);
        rq.sampling.repeat_penalty = 1.0f; /* the same distribution as the draft's */
        rq.sampling.presence_penalty = 0.0f;
        sp_sampler_params dp = rq.sampling;
        char err[128];
        sp_sampler *ts = sp_sampler_create(rq.sampling, V, err, sizeof(err));
        sp_sampler *ds = sp_sampler_create(dp, DV, err, sizeof(err));
        sp_token toks[512];
        int n = sp_tokenize(voc, PROMPTS[i], strlen(PROMPTS[i]), toks, 400, false, false);
        REQUIRE(ts && ds && n > 0, "setup");
        memcpy(toks + n, plain[i].toks, GEN * sizeof(sp_token));
        float *tr = all_logits(target, toks, n + GEN), *dr = all_logits(draft, toks, n + GEN);
        REQUIRE(tr && dr, "logits");
        for (int j = n - 1; j < n + GEN - 1; j++) { /* rows that draw generated tokens */
            const float *lt = tr + (size_t)j * V, *ld = dr + (size_t)j * DV;
            sp_sampler_probs(ts, lt, p);
            sp_sampler_probs(ds, ld, q);
            double m = 0, tv = 0;
            for (int v = 0; v < V; v++) {
                const double qv = v < DV ? q[v] : 0;
                m += fmin(p[v], qv);
                tv += 0.5 * fabs(p[v] - qv);
            }
            int same = 0;
            for (int s = 0; s < S; s++)
                same += sp_sampler_sample_at(ts, lt, s) == sp_sampler_sample_at(ds, ld, s);
            rej += m;
            gum += (double)same / S;
            lo += (1 - tv) / (1 + tv);
            npos++;
        }
        free(tr);
        free(dr);
        sp_sampler_free(ts);
        sp_sampler_free(ds);
    }
    free(p);
    free(q);
    REQUIRE(npos > 0, "no positions");
    rej /= npos;
    gum /= npos;
    lo /= npos;
    printf("  draft acceptance per proposed token, %lld positions of sampled text: Gumbel coupling "
           "%.3f, rejection rule %.3f (ratio %.3f); coupling bound (1-TV)/(1+TV) %.3f\n",
           (long long)npos, gum, rej, gum / rej, lo);
    /* S draws per position: the mean's standard error is below 0.5/sqrt(S npos) */
    const double tol = 4 * 0.5 / sqrt((double)S * npos) + 1e-3;
    CHECK(gum <= rej + tol, "the coupling (%.4f) beats 1 - TV (%.4f)", gum, rej);
    CHECK(gum >= lo - tol, "the coupling (%.4f) is below its bound (%.4f)", gum, lo);
}

int main(void) {
    char path[512], err[256];
    const char *t = "models/specula-code-target-f16.gguf", *d = "models/specula-code-draft-f16.gguf";
    const bool bundled = access(t, R_OK) == 0 && access(d, R_OK) == 0;
    if (bundled) {
        target = sp_model_load(t, sp_model_default_params(), err, sizeof(err));
        draft = sp_model_load(d, sp_model_default_params(), err, sizeof(err));
    } else {
        snprintf(path, sizeof(path), "%s/models/ref-llama-spm-q8_0.gguf", t_ref_dir());
        target = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
        snprintf(path, sizeof(path), "%s/models/ref-llama-spm-f16.gguf", t_ref_dir());
        draft = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    }
    if (!target || !draft) {
        printf("FAIL test_seeded: cannot load models: %s\nRESULT 0 1\n", err);
        return 1;
    }
    printf("  models: %s\n", bundled ? "the bundled pair" : "reference models");
    RUN(plain_reference);
    static const proposer_case cases[] = {
        {"ngram", SP_SPEC_NGRAM},
        {"suffix", SP_SPEC_SUFFIX},
        {"draft", SP_SPEC_DRAFT},
    };
    for (int i = 0; i < 3; i++) RUN_NAMED(seeded_identical, &cases[i], cases[i].name);
    RUN(acceptance_comparison);
    sp_model_free(target);
    sp_model_free(draft);
    TEST_END();
}
