/* test_reference.c: Specula against llama.cpp's golden data in
 * ../shared/reference/generations.jsonl (see its README for what matching
 * means): identical prompt tokens; the same greedy token wherever the
 * reference's top-1/top-2 margin exceeds 1e-3 (after a closer step the rest
 * of the record is not comparable); the log-probabilities of the reference's
 * top-8 tokens within 2e-3 (F16/F32 models) or 2e-2 (quantized). One case
 * per record. */
#include <cjson/cJSON.h>
#include <math.h>

#include "specula.h"
#include "test.h"

#define MAX_MODELS 16

static struct {
    char name[128];
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

static int int_array(const cJSON *a, int32_t *out, int cap) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (n < cap) out[n] = (int32_t)e->valuedouble;
        n++;
    }
    return n;
}

static double worst_lp_err; /* across all records, for the summary line */

static void check_record(const cJSON *rec) {
    const char *model = cJSON_GetObjectItem(rec, "model")->valuestring;
    const char *prompt = cJSON_GetObjectItem(rec, "prompt")->valuestring;
    sp_model *m = get_model(model);
    CHECK(m != NULL, "model %s loads", model);
    if (!m) return;
    const sp_vocab *v = sp_model_get_vocab(m);
    const int32_t V = sp_model_get_info(m)->n_vocab;
    const double tol = strstr(model, "f16") || strstr(model, "f32") ? 2e-3 : 2e-2;

    int32_t ref_prompt[4096], ours[4096];
    int n_ref = int_array(cJSON_GetObjectItem(rec, "prompt_tokens"), ref_prompt, 4096);
    int n = sp_tokenize(v, prompt, strlen(prompt), ours, 4096, true, false);
    CHECK(n == n_ref, "prompt token count %d, reference %d", n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++)
        CHECK(ours[i] == ref_prompt[i], "prompt token %d: %d, reference %d", i, ours[i], ref_prompt[i]);
    if (n != n_ref) return;

    const cJSON *steps = cJSON_GetObjectItem(rec, "steps");
    const int n_steps = cJSON_GetArraySize(steps);
    sp_context_params cp = sp_context_default_params();
    cp.n_threads = 2;
    cp.n_ctx = n_ref + n_steps + 1;
    char err[512];
    sp_context *c = sp_context_create(m, cp, err, sizeof(err));
    CHECK(c != NULL, "context: %s", err);
    if (!c) return;
    int32_t pos[4096], seq[4096] = {0};
    for (int i = 0; i < n_ref; i++) pos[i] = i;
    sp_batch b = {n_ref, ref_prompt, pos, seq, NULL};
    int rc = sp_decode(c, &b, err, sizeof(err));
    CHECK(rc == 0, "prefill: %s", err);
    double max_err = 0;
    int compared = 0;
    for (int s = 0; s < n_steps && rc == 0; s++) {
        const cJSON *st = cJSON_GetArrayItem(steps, s);
        const int32_t ref_id = (int32_t)cJSON_GetObjectItem(st, "id")->valuedouble;
        const cJSON *top = cJSON_GetObjectItem(st, "top");
        const float *logits = sp_get_logits(c, 0);
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        double lp0 = cJSON_GetArrayItem(cJSON_GetArrayItem(top, 0), 1)->valuedouble;
        double lp1 = cJSON_GetArrayItem(cJSON_GetArrayItem(top, 1), 1)->valuedouble;
        const cJSON *pair;
        cJSON_ArrayForEach(pair, top) {
            int32_t id = (int32_t)cJSON_GetArrayItem(pair, 0)->valuedouble;
            double lp = cJSON_GetArrayItem(pair, 1)->valuedouble;
            double got = sp_logprob_of(logits, V, id);
            double e = fabs(got - lp);
            if (e > max_err) max_err = e;
            CHECK(e <= tol, "step %d token %d: logprob %.6f, reference %.6f (tolerance %g)", s, id,
                  got, lp, tol);
        }
        compared++;
        if (lp0 - lp1 <= 1e-3) break; /* a near tie: either choice is right, the rest differs */
        CHECK(best == ref_id, "step %d: greedy token %d, reference %d", s, best, ref_id);
        if (best != ref_id) break;
        int32_t p = n_ref + s;
        sp_batch nb = {1, &ref_id, &p, seq, NULL};
        rc = sp_decode(c, &nb, err, sizeof(err));
        CHECK(rc == 0, "decode: %s", err);
    }
    printf("     %s/%s: %d steps compared, max |logprob error| %.2e (tolerance %g)\n", model,
           cJSON_GetObjectItem(rec, "prompt_id")->valuestring, compared, max_err, tol);
    if (max_err > worst_lp_err) worst_lp_err = max_err;
    sp_context_free(c);
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
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *rec = cJSON_Parse(line);
        if (!rec) continue;
        char name[256];
        snprintf(name, sizeof(name), "%s/%s", cJSON_GetObjectItem(rec, "model")->valuestring,
                 cJSON_GetObjectItem(rec, "prompt_id")->valuestring);
        RUN_NAMED(check_record, rec, name);
        cJSON_Delete(rec);
    }
    printf("     worst |logprob error| over all records: %.2e\n", worst_lp_err);
    for (int i = 0; i < n_models; i++) sp_model_free(models[i].m);
    free(data);
    TEST_END();
}
