/* ref_records.h: llama.cpp's reference generations (a generations.jsonl of
 * ../shared/reference, one record per line: model, prompt_id, prompt,
 * prompt_tokens, and per step the greedy id with the top-8 [id, logprob]
 * pairs), read by test_reference and test_reference_trained; and the
 * child process that runs one kernel level. */
#ifndef SP_TEST_REF_RECORDS_H
#define SP_TEST_REF_RECORDS_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"

#define TOPN 8
#define MAX_REC 64
#define MAX_STEPS 64
#define MAX_PROMPT 1024

static const char *LEVELS[] = {"ref", "avx2", "avx512"};
#define NL 3

typedef struct {
    char model[96], prompt_id[64], name[192]; /* name: "model/prompt_id" */
    char *prompt;
    int32_t prompt_tokens[MAX_PROMPT];
    int n_prompt;
    int n_steps;
    int32_t tokens[MAX_STEPS];    /* llama.cpp's greedy tokens */
    int32_t ids[MAX_STEPS][TOPN]; /* llama.cpp's top ids per step */
    double lp[MAX_STEPS][TOPN];   /* and their log-probabilities */
} record;

static record recs[MAX_REC];
static int n_recs;

/* Parses the JSON lines of data (modified) into recs; -1 on any record
 * that is malformed or too large. */
static int parse_records(char *data) {
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j || n_recs == MAX_REC) {
            cJSON_Delete(j);
            return -1;
        }
        record *r = &recs[n_recs++];
        const cJSON *model = cJSON_GetObjectItem(j, "model"), *pid = cJSON_GetObjectItem(j, "prompt_id"),
                    *prompt = cJSON_GetObjectItem(j, "prompt"), *pt = cJSON_GetObjectItem(j, "prompt_tokens"),
                    *steps = cJSON_GetObjectItem(j, "steps");
        if (!cJSON_IsString(model) || !cJSON_IsString(pid) || !cJSON_IsString(prompt) || !cJSON_IsArray(pt) ||
            !cJSON_IsArray(steps) || cJSON_GetArraySize(pt) > MAX_PROMPT ||
            cJSON_GetArraySize(steps) > MAX_STEPS) {
            cJSON_Delete(j);
            return -1;
        }
        snprintf(r->model, sizeof r->model, "%s", model->valuestring);
        snprintf(r->prompt_id, sizeof r->prompt_id, "%s", pid->valuestring);
        snprintf(r->name, sizeof r->name, "%.95s/%.63s", model->valuestring, pid->valuestring);
        r->prompt = strdup(prompt->valuestring);
        const cJSON *e;
        cJSON_ArrayForEach(e, pt) r->prompt_tokens[r->n_prompt++] = (int32_t)e->valuedouble;
        cJSON_ArrayForEach(e, steps) {
            const int s = r->n_steps++;
            r->tokens[s] = (int32_t)cJSON_GetObjectItem(e, "id")->valuedouble;
            const cJSON *top = cJSON_GetObjectItem(e, "top");
            if (cJSON_GetArraySize(top) < TOPN) {
                cJSON_Delete(j);
                return -1;
            }
            for (int k = 0; k < TOPN; k++) {
                const cJSON *pair = cJSON_GetArrayItem(top, k);
                r->ids[s][k] = (int32_t)cJSON_GetArrayItem(pair, 0)->valuedouble;
                r->lp[s][k] = cJSON_GetArrayItem(pair, 1)->valuedouble;
            }
        }
        cJSON_Delete(j);
    }
    return n_recs ? 0 : -1;
}

/* Runs this binary again as "--level L" with SPECULA_KERNELS=L and adds up
 * the child's results; false (nothing run) when the CPU cannot run the
 * level, and the caller reports its cases as skipped. */
static bool run_level_child(int l) {
    if (!kernels_available(LEVELS[l])) return false;
    char env[64];
    snprintf(env, sizeof env, "SPECULA_KERNELS=%s", LEVELS[l]);
    t_run_child(env, "--level", LEVELS[l], LEVELS[l]);
    return true;
}

#endif
