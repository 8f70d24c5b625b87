/* test_reference.c: Specula against llama.cpp's golden data in
 * ../shared/reference/generations.jsonl, one case per record.
 *
 * Asserted:
 *   - prompt tokens identical;
 *   - teacher-forced over every reference step (the reference's tokens are
 *     fed whatever Specula would pick, so every step stays comparable):
 *     the log-probabilities of the reference's top-8 tokens within
 *       tol + 3 * spread
 *     where tol is 2e-3 (F16/F32) or 2e-2 (quantized) and spread is how far
 *     Specula's own kernel levels (plain C, AVX2, AVX-512: all exact to
 *     float32, each summing in its own order) are apart anywhere in the
 *     record, and the greedy token equal to the
 *     reference's wherever its top-1/top-2 margin exceeds 1e-3 + 3 * spread.
 *
 * Why the spread: these reference models have random weights and are
 * chaotic: a float32 summation-order difference (1 ulp) occasionally flips
 * one f16 or q8 rounding of an activation, and the flip moves later
 * log-probabilities by up to ~0.5. Two engines agree bit-for-bit only if
 * they sum in the same order. Specula's kernel levels are all exact to
 * float32 but sum in different orders, so their distance measures what
 * summation order alone does to this record; a real
 * difference in formulas (RoPE layout, scaling, rounding points) stays far
 * outside it. The plain tolerances are also reported (the "strict" line).
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "kernels/kernels.h"
#include "specula.h"
#include "test.h"

#define MAX_MODELS 16
#define TOPN 8

static struct {
    char name[128];
    sp_model *m;
} models[MAX_MODELS];
static int n_models;
static const char *simd_level;
static int strict_steps, all_steps;

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

static int int_array(const cJSON *a, int32_t *out, int cap) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (n < cap) out[n] = (int32_t)e->valuedouble;
        n++;
    }
    return n;
}

typedef struct {
    int n_steps;
    int32_t ids[64][TOPN];  /* the reference's top ids per step */
    int32_t tokens[64];     /* the reference's greedy tokens */
    double lp[64][TOPN];    /* reference logprobs */
    double ours[64][TOPN];  /* filled by run() */
    int32_t argmax[64];
} record;

/* Teacher-forced run at the current kernel level: logprobs of the
 * reference's top ids at every step, and Specula's own argmax. */
static int run(sp_model *m, const int32_t *prompt, int n_prompt, record *r) {
    const int32_t V = sp_model_get_info(m)->n_vocab;
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_ctx = n_prompt + r->n_steps + 1;
    char err[512];
    sp_context *c = sp_context_create(m, cp, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "  context: %s\n", err);
        return -1;
    }
    int32_t pos[4096], seq[4096] = {0};
    for (int i = 0; i < n_prompt; i++) pos[i] = i;
    sp_batch b = {n_prompt, prompt, pos, seq, NULL};
    int rc = sp_decode(c, &b, err, sizeof(err));
    for (int s = 0; s < r->n_steps && rc == 0; s++) {
        const float *logits = sp_get_logits(c, 0);
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        r->argmax[s] = best;
        for (int j = 0; j < TOPN; j++) r->ours[s][j] = sp_logprob_of(logits, V, r->ids[s][j]);
        int32_t p = n_prompt + s;
        sp_batch nb = {1, &r->tokens[s], &p, seq, NULL};
        if (s + 1 < r->n_steps) rc = sp_decode(c, &nb, err, sizeof(err));
    }
    if (rc) fprintf(stderr, "  decode: %s\n", err);
    sp_context_free(c);
    return rc;
}

static void check_record(const cJSON *rec) {
    const char *model = cJSON_GetObjectItem(rec, "model")->valuestring;
    const char *prompt = cJSON_GetObjectItem(rec, "prompt")->valuestring;
    sp_model *m = get_model(model);
    CHECK(m != NULL, "model %s loads", model);
    if (!m) return;
    const sp_vocab *v = sp_model_get_vocab(m);
    const double tol = strstr(model, "f16") || strstr(model, "f32") ? 2e-3 : 2e-2;

    static int32_t ref_prompt[4096], ours[4096];
    int n_ref = int_array(cJSON_GetObjectItem(rec, "prompt_tokens"), ref_prompt, 4096);
    int n = sp_tokenize(v, prompt, strlen(prompt), ours, 4096, true, false);
    CHECK(n == n_ref, "prompt token count %d, reference %d", n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++)
        CHECK(ours[i] == ref_prompt[i], "prompt token %d: %d, reference %d", i, ours[i], ref_prompt[i]);
    if (n != n_ref) return;

    static record simd, other[2];
    const cJSON *steps = cJSON_GetObjectItem(rec, "steps");
    simd.n_steps = SP_MIN(cJSON_GetArraySize(steps), 64);
    for (int s = 0; s < simd.n_steps; s++) {
        const cJSON *st = cJSON_GetArrayItem(steps, s);
        simd.tokens[s] = (int32_t)cJSON_GetObjectItem(st, "id")->valuedouble;
        const cJSON *top = cJSON_GetObjectItem(st, "top");
        for (int j = 0; j < TOPN; j++) {
            const cJSON *pair = cJSON_GetArrayItem(top, j);
            simd.ids[s][j] = pair ? (int32_t)cJSON_GetArrayItem(pair, 0)->valuedouble : 0;
            simd.lp[s][j] = pair ? cJSON_GetArrayItem(pair, 1)->valuedouble : 0;
        }
    }
    sp_kernels_force(simd_level);
    int rc = run(m, ref_prompt, n_ref, &simd);
    /* the other levels this CPU has: each sums in its own order */
    static const char *levels[] = {"ref", "avx2", "avx512"};
    int n_other = 0;
    for (int i = 0; i < 3; i++) {
        if (!strcmp(levels[i], simd_level) || !sp_kernels_available(levels[i])) continue;
        other[n_other] = simd;
        sp_kernels_force(levels[i]);
        rc |= run(m, ref_prompt, n_ref, &other[n_other++]);
    }
    sp_kernels_force(simd_level);
    CHECK(rc == 0, "forward pass failed");
    if (rc) return;

    /* spread: how far Specula's own summation orders are apart anywhere in
     * this record, i.e. how strongly this trajectory amplifies 1-ulp
     * differences (a flip at one step perturbs every later step, and which
     * step flips depends on the order) */
    double max_err = 0, spread = 0;
    for (int s = 0; s < simd.n_steps; s++)
        for (int o = 0; o < n_other; o++)
            for (int j = 0; j < TOPN; j++)
                spread = fmax(spread, fabs(simd.ours[s][j] - other[o].ours[s][j]));
    const double max_spread = spread;
    int strict = 0;
    for (int s = 0; s < simd.n_steps; s++) {
        double err = 0;
        for (int j = 0; j < TOPN; j++) err = fmax(err, fabs(simd.ours[s][j] - simd.lp[s][j]));
        max_err = fmax(max_err, err);
        strict += err <= tol;
        CHECK(err <= tol + 3 * spread,
              "step %d: |logprob error| %.4f exceeds %g + 3 x spread %.4f", s, err, tol, spread);
        const double margin = simd.lp[s][0] - simd.lp[s][1];
        if (margin > 1e-3 + 3 * spread)
            CHECK(simd.argmax[s] == simd.tokens[s], "step %d: greedy token %d, reference %d (margin %.4f)",
                  s, simd.argmax[s], simd.tokens[s], margin);
    }
    strict_steps += strict;
    all_steps += simd.n_steps;
    printf("     %-22s %-10s %2d steps: max |error| %.1e, max spread %.1e, within %g: %d/%d\n",
           model, cJSON_GetObjectItem(rec, "prompt_id")->valuestring, simd.n_steps, max_err,
           max_spread, tol, strict, simd.n_steps);
}

int main(void) {
    char path[512];
    snprintf(path, sizeof(path), "%s/generations.jsonl", t_ref_dir());
    size_t len;
    char *data = t_read_file(path, &len);
    if (!data) {
        fprintf(stderr, "cannot read %s\n", path);
        printf("RESULT 0 1\n");
        return 1;
    }
    simd_level = sp_kernels_init();
    printf("     kernels: %s (spread measured against the other levels)\n", simd_level);
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *rec = cJSON_Parse(line);
        if (!rec) continue;
        char name[256];
        snprintf(name, sizeof(name), "%s/%s", cJSON_GetObjectItem(rec, "model")->valuestring,
                 cJSON_GetObjectItem(rec, "prompt_id")->valuestring);
        RUN_NAMED(check_record, rec, name);
        cJSON_Delete(rec);
    }
    printf("     strict tolerances (2e-3 F16, 2e-2 quantized) met on %d of %d steps\n", strict_steps,
           all_steps);
    for (int i = 0; i < n_models; i++) sp_model_free(models[i].m);
    free(data);
    TEST_END();
}
