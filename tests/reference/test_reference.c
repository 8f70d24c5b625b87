/* test_reference.c: Specula against llama.cpp's golden data for the
 * random-weight models, ../shared/reference/generations.jsonl.
 *
 * Asserted, with no tolerance derived from anything Specula computes:
 *   - prompt tokens identical (one case per record);
 *   - teacher-forced on llama.cpp's greedy tokens, Specula's greedy token
 *     equal to llama.cpp's at every step before the record's first near-tie
 *     (a step whose top-1/top-2 log-probability margin is 1e-3 or less:
 *     there either choice is acceptable and, these models being chaotic,
 *     the rest of the record is not comparable). One case per record and
 *     kernel level (plain C, AVX2, AVX-512); each level runs in a child
 *     process of this binary started with SPECULA_KERNELS=<level>, so that
 *     the matmul kernels and the attention/SwiGLU operations both come from
 *     that level; a level the CPU lacks is a counted skip.
 *
 * Measured, not asserted: how many steps have the log-probabilities of
 * llama.cpp's top-8 tokens within 2e-3 (F16) / 2e-2 (quantized). These
 * models have random weights and are chaotic: a 1-ulp summation-order
 * difference now and then flips one f16 or Q8 rounding of an activation,
 * and the flip moves later log-probabilities by up to ~1 nat, so the
 * log-probability agreement is judged on the trained model instead
 * (test_reference_trained). The line "log-probabilities within ... on N of
 * M steps" reports it per level. The ref level sums in llama.cpp's order
 * (docs/correctness.md) and passes every record; the avx2 level does too
 * but for its packed Q8_0, Q4_K and Q6_K matrices, and the avx512 level has
 * an order of its own: their failures are listed in tests/known_failures.
 */
#include <math.h>

#include "ref_records.h"
#include "specula.h"

#define MAX_MODELS 16
#define TIE_MARGIN 1e-3

static struct {
    char name[96];
    sp_model *m;
} models[MAX_MODELS];
static int n_models;

static sp_model *get_model(const char *name) {
    for (int i = 0; i < n_models; i++)
        if (!strcmp(models[i].name, name)) return models[i].m;
    if (n_models == MAX_MODELS) return NULL;
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/models/%s.gguf", t_ref_dir(), name);
    sp_model *m = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    if (!m) fprintf(stderr, "  cannot load %s: %s\n", path, err);
    snprintf(models[n_models].name, sizeof(models[n_models].name), "%s", name);
    models[n_models++].m = m;
    return m;
}

/* ---- parent: prompt tokens ---------------------------------------------- */

static void check_prompt_tokens(const record *r) {
    sp_model *m = get_model(r->model);
    CHECK(m != NULL, "model %s loads", r->model);
    if (!m) return;
    static int32_t ours[4096];
    const int n = sp_tokenize(sp_model_get_vocab(m), r->prompt, strlen(r->prompt), ours, 4096, true, false);
    CHECK(n == r->n_prompt, "prompt token count %d, llama.cpp %d", n, r->n_prompt);
    for (int i = 0; i < n && i < r->n_prompt; i++)
        CHECK(ours[i] == r->prompt_tokens[i], "prompt token %d: %d, llama.cpp %d", i, ours[i], r->prompt_tokens[i]);
}

/* ---- child: greedy tokens at one kernel level --------------------------- */

static const char *level_name;
static int within_steps, all_steps;

static void check_greedy(const record *r) {
    sp_model *m = get_model(r->model);
    CHECK(m != NULL, "model %s loads", r->model);
    if (!m) return;
    const int32_t V = sp_model_get_info(m)->n_vocab;
    /* the steps before the first near-tie */
    int n_cmp = 0;
    while (n_cmp < r->n_steps && r->lp[n_cmp][0] - r->lp[n_cmp][1] > TIE_MARGIN) n_cmp++;
    CHECK(n_cmp > 0, "the first step is already a near-tie: nothing to compare");
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_ctx = r->n_prompt + r->n_steps + 1;
    char err[512];
    sp_context *c = sp_context_create(m, cp, err, sizeof(err));
    CHECK(c != NULL, "context: %s", err);
    if (!c) return;
    static int32_t pos[4096], seq[4096];
    for (int i = 0; i < r->n_prompt; i++) pos[i] = i, seq[i] = 0;
    sp_batch b = {r->n_prompt, r->prompt_tokens, pos, seq, NULL};
    int rc = sp_decode(c, &b, err, sizeof(err));
    CHECK(rc == 0, "prefill: %s", err);
    const double tol = strstr(r->model, "f16") || strstr(r->model, "f32") ? 2e-3 : 2e-2;
    int matched = 0, within = 0;
    for (int s = 0; s < n_cmp && rc == 0; s++) {
        const float *l = sp_get_logits(c, 0);
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        CHECK(best == r->tokens[s], "step %d: greedy token %d, llama.cpp %d (llama.cpp's margin %.4f)", s, best,
              r->tokens[s], r->lp[s][0] - r->lp[s][1]);
        matched += best == r->tokens[s];
        /* measured only: the log-probabilities, in double from the logits */
        double mx = l[best], sum = 0, err_s = 0;
        for (int32_t i = 0; i < V; i++) sum += exp((double)l[i] - mx);
        const double lse = mx + log(sum);
        for (int k = 0; k < TOPN; k++) err_s = fmax(err_s, fabs((double)l[r->ids[s][k]] - lse - r->lp[s][k]));
        within += err_s <= tol;
        if (s + 1 == n_cmp) break;
        const int32_t p = r->n_prompt + s;
        sp_batch nb = {1, &r->tokens[s], &p, seq, NULL};
        rc = sp_decode(c, &nb, err, sizeof(err));
        CHECK(rc == 0, "step %d: %s", s, err);
    }
    sp_context_free(c);
    within_steps += within;
    all_steps += n_cmp;
    printf("     %-6s %-22s %-10s greedy %2d/%2d steps before the first near-tie; log-probabilities within %g: "
           "%2d\n",
           level_name, r->model, r->prompt_id, matched, n_cmp, tol, within);
}

static int run_level(int l) {
    level_name = LEVELS[l];
    const char *got = kernels_init();
    if (strcmp(got, LEVELS[l])) {
        printf("FAIL level %s: SPECULA_KERNELS gave %s\nRESULT 0 1 0\n", LEVELS[l], got);
        return 1;
    }
    for (int i = 0; i < n_recs; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s %s", LEVELS[l], recs[i].name);
        RUN_NAMED(check_greedy, &recs[i], name);
    }
    printf("     %s: log-probabilities within 2e-3 (F16) / 2e-2 (quantized) on %d of %d steps (measured, not "
           "asserted)\n",
           LEVELS[l], within_steps, all_steps);
    TEST_END();
}

/* The parent runs one child per level and adds up their results. */
static void spawn_level(int l) {
    if (run_level_child(l)) return;
    for (int i = 0; i < n_recs; i++) {
        t_cases_skipped++;
        printf("SKIP check_greedy[%s %s]: this CPU cannot run the %s kernels\n", LEVELS[l], recs[i].name,
               LEVELS[l]);
    }
}

int main(int argc, char **argv) {
    char path[512];
    snprintf(path, sizeof(path), "%s/generations.jsonl", t_ref_dir());
    char *data = t_read_file(path, NULL);
    if (!data || parse_records(data)) {
        printf("FAIL %s: cannot read or parse\nRESULT 0 1 0\n", path);
        return 1;
    }
    free(data);
    int rc;
    if (argc == 3 && !strcmp(argv[1], "--level")) {
        int l = 0;
        while (l < NL && strcmp(LEVELS[l], argv[2])) l++;
        if (l == NL) {
            printf("FAIL unknown level %s\nRESULT 0 1 0\n", argv[2]);
            return 1;
        }
        rc = run_level(l);
    } else {
        for (int i = 0; i < n_recs; i++) RUN_NAMED(check_prompt_tokens, &recs[i], recs[i].name);
        for (int l = 0; l < NL; l++) spawn_level(l);
        printf("RESULT %d %d %d\n", t_cases_passed, t_cases_failed, t_cases_skipped);
        rc = t_cases_failed ? 1 : 0;
    }
    for (int i = 0; i < n_models; i++) sp_model_free(models[i].m);
    for (int i = 0; i < n_recs; i++) free(recs[i].prompt);
    return rc;
}
