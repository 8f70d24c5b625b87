/* report.c: writes the measured results (result.c) out: terminal text,
 * JSON ({"metrics", "contract"}) and Markdown (with plot.c's SVG plots),
 * every output reading the same metric table. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/loadgen.h"
#include "common.h"

/* ---- the metric table: one row per number, shared by every output ----------------- */

typedef struct {
    const char *key;   /* JSON name */
    const char *name;  /* human name */
    const char *unit;
    bool higher_better;
} mrow;

static const mrow ROWS[] = {
    {"requests_ok", "requests ok", "", true},
    {"requests_per_s", "throughput", "req/s", true},
    {"output_tokens_per_s", "output throughput", "tok/s", true},
    {"total_tokens_per_s", "total throughput (prompt + output)", "tok/s", true},
    {"goodput_req_per_s", "goodput (within SLO)", "req/s", true},
    {"goodput_fraction", "goodput fraction (within SLO / all requests)", "", true},
    {"ttft_p50_ms", "TTFT p50", "ms", false},
    {"ttft_p90_ms", "TTFT p90", "ms", false},
    {"ttft_p99_ms", "TTFT p99", "ms", false},
    {"tpot_p50_ms", "TPOT p50", "ms", false},
    {"tpot_p90_ms", "TPOT p90", "ms", false},
    {"tpot_p99_ms", "TPOT p99", "ms", false},
    {"itl_p50_ms", "ITL p50", "ms", false},
    {"itl_p90_ms", "ITL p90", "ms", false},
    {"itl_p99_ms", "ITL p99", "ms", false},
    {"e2e_p50_ms", "E2E latency p50", "ms", false},
    {"e2e_p99_ms", "E2E latency p99", "ms", false},
    {"ttft_cold_p50_ms", "TTFT cold (H_tokens < 0.1) p50", "ms", false},
    {"ttft_warm_p50_ms", "TTFT warm (H_tokens >= 0.1) p50", "ms", false},
    {"cold_requests", "cold requests", "", false},
    {"warm_requests", "warm requests", "", true},
    {"h_tokens_mean", "H_tokens (cached / prompt tokens), all", "", true},
    {"cached_tokens_disk", "cached prompt tokens restored from the disk tier", "tok", true},
    {"acceptance_rate", "acceptance rate (accepted / drafted)", "", true},
    {"mean_acceptance_length", "mean acceptance length (tokens / verification step)", "", true},
    {"kv_peak_in_use", "KV blocks in use, peak fraction", "", false},
    {"kv_mean_in_use", "KV blocks in use, mean fraction", "", false},
    {"kv_peak_cached", "KV blocks cached for reuse, peak fraction", "", false},
    {"srv_prefill_tokens", "server: prompt positions computed (prefill)", "tok", false},
    {"srv_prefill_fraction", "server: prefill computed / prompt tokens", "", false},
    {"srv_cached_tokens", "server: cached prompt tokens", "tok", true},
    {"srv_h_tokens", "server: H_tokens (cached / prompt tokens)", "", true},
    {"replicas", "replicas (--metrics-url)", "", true},
    {"replica_imbalance", "replicas: largest request share / mean", "", false},
    {"srv_decode_tokens", "server: tokens generated", "tok", true},
    {"srv_steps", "server: engine steps (forward passes)", "", false},
    {"srv_steps_per_token", "server: engine steps per generated token", "", false},
    {"srv_recomputed_tokens", "server: positions recomputed (preemption)", "tok", false},
    {"srv_preemptions", "server: preemptions", "", false},
    {"srv_evictions", "server: cached blocks evicted", "", false},
};
#define N_ROWS (sizeof(ROWS) / sizeof(ROWS[0]))

static double row_value(const bench_result *r, size_t i) {
    const char *k = ROWS[i].key;
    const double *c = r->counters;
    if (!strcmp(k, "requests_ok")) return r->n_ok;
    if (!strcmp(k, "requests_per_s")) return r->req_s;
    if (!strcmp(k, "output_tokens_per_s")) return r->out_tok_s;
    if (!strcmp(k, "total_tokens_per_s")) return r->usage_seen ? r->total_tok_s : NAN;
    if (!strcmp(k, "goodput_req_per_s")) return r->goodput_req_s;
    if (!strcmp(k, "goodput_fraction")) return r->n ? (double)r->n_good / r->n : NAN;
    if (!strcmp(k, "ttft_p50_ms")) return r->s_ttft.p50;
    if (!strcmp(k, "ttft_p90_ms")) return r->s_ttft.p90;
    if (!strcmp(k, "ttft_p99_ms")) return r->s_ttft.p99;
    if (!strcmp(k, "tpot_p50_ms")) return r->s_tpot.p50;
    if (!strcmp(k, "tpot_p90_ms")) return r->s_tpot.p90;
    if (!strcmp(k, "tpot_p99_ms")) return r->s_tpot.p99;
    if (!strcmp(k, "itl_p50_ms")) return r->s_itl.p50;
    if (!strcmp(k, "itl_p90_ms")) return r->s_itl.p90;
    if (!strcmp(k, "itl_p99_ms")) return r->s_itl.p99;
    if (!strcmp(k, "e2e_p50_ms")) return r->s_e2e.p50;
    if (!strcmp(k, "e2e_p99_ms")) return r->s_e2e.p99;
    if (!strcmp(k, "ttft_cold_p50_ms")) return r->s_cold.p50;
    if (!strcmp(k, "ttft_warm_p50_ms")) return r->s_warm.p50;
    if (!strcmp(k, "cold_requests")) return r->cached_seen ? (double)r->ttft_cold.n : NAN;
    if (!strcmp(k, "warm_requests")) return r->cached_seen ? (double)r->ttft_warm.n : NAN;
    if (!strcmp(k, "h_tokens_mean"))
        return r->cached_seen && r->prompt_tokens ? (double)r->cached_tokens / r->prompt_tokens : NAN;
    if (!strcmp(k, "cached_tokens_disk")) return r->cached_seen ? (double)r->cached_tokens_disk : NAN;
    if (!strcmp(k, "acceptance_rate"))
        return r->has_spec && r->spec_drafted ? (double)r->spec_accepted / r->spec_drafted : NAN;
    if (!strcmp(k, "mean_acceptance_length"))
        return r->has_spec && r->spec_steps ? (double)(r->spec_accepted + r->spec_steps) / r->spec_steps
                                            : NAN;
    if (!strcmp(k, "kv_peak_in_use")) return r->kv_peak_in_use;
    if (!strcmp(k, "kv_mean_in_use")) return r->kv_mean_in_use;
    if (!strcmp(k, "kv_peak_cached")) return r->kv_peak_cached;
    if (!strcmp(k, "srv_prefill_tokens")) return c[BENCH_C_PREFILL];
    if (!strcmp(k, "srv_prefill_fraction"))
        return c[BENCH_C_PROMPT] > 0 ? c[BENCH_C_PREFILL] / c[BENCH_C_PROMPT] : NAN;
    if (!strcmp(k, "srv_cached_tokens")) return c[BENCH_C_CACHED];
    if (!strcmp(k, "srv_h_tokens")) return c[BENCH_C_PROMPT] > 0 ? c[BENCH_C_CACHED] / c[BENCH_C_PROMPT] : NAN;
    if (!strcmp(k, "replicas")) return r->n_replicas ? r->n_replicas : NAN;
    if (!strcmp(k, "replica_imbalance"))
        return r->n_replicas ? bench_imbalance(r->replica_requests, r->n_replicas) : NAN;
    if (!strcmp(k, "srv_decode_tokens")) return c[BENCH_C_DECODE];
    if (!strcmp(k, "srv_steps")) return c[BENCH_C_STEPS];
    if (!strcmp(k, "srv_steps_per_token")) return c[BENCH_C_DECODE] > 0 ? c[BENCH_C_STEPS] / c[BENCH_C_DECODE] : NAN;
    if (!strcmp(k, "srv_recomputed_tokens")) return c[BENCH_C_RECOMPUTED];
    if (!strcmp(k, "srv_preemptions")) return c[BENCH_C_PREEMPT];
    if (!strcmp(k, "srv_evictions")) return c[BENCH_C_EVICT];
    return NAN;
}

static void fmt_num(char *buf, size_t cap, double v) {
    if (isnan(v)) snprintf(buf, cap, "n/a"); /* not measured, never shown as 0 */
    else if (v == floor(v) && fabs(v) < 1e12) snprintf(buf, cap, "%.0f", v);
    else if (fabs(v) >= 100) snprintf(buf, cap, "%.1f", v);
    else if (fabs(v) >= 1) snprintf(buf, cap, "%.2f", v);
    else snprintf(buf, cap, "%.3f", v);
}

static void spread(const double *v, int n, double *mean, double *sd, double *lo, double *hi) {
    double s = 0, ss = 0;
    int k = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int i = 0; i < n && i < BENCH_MAX_REPS; i++) {
        if (isnan(v[i])) continue;
        s += v[i];
        k++;
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
    *mean = k ? s / k : NAN;
    for (int i = 0; i < n && i < BENCH_MAX_REPS; i++)
        if (!isnan(v[i])) ss += (v[i] - *mean) * (v[i] - *mean);
    *sd = k > 1 ? sqrt(ss / (k - 1)) : k ? 0 : NAN;
    if (!k) *lo = *hi = NAN;
}

/* ---- contract text (terminal and Markdown share it) ------------------------------------ */

static void contract_lines(FILE *f, const bench_report_info *ri) {
    for (int i = 0; i < ri->n_cfg; i++) {
        const bench_contract *c = &ri->cfg[i];
        const char *p = ri->n_cfg > 1 ? (i ? "[B] " : "[A] ") : "";
        fprintf(f, "%smodel:          %s\n", p, c->model_file);
        fprintf(f, "%smodel sha256:   %s\n", p, c->model_sha256[0] ? c->model_sha256 : "unknown");
        if (c->model_desc[0]) fprintf(f, "%smodel:          %s\n", p, c->model_desc);
        if (c->max_model_len > 0)
            fprintf(f, "%sserved as:      %s (max_model_len %d)\n", p, c->served_model,
                    c->max_model_len);
        else
            fprintf(f, "%sserved as:      %s (max_model_len not reported)\n", p, c->served_model);
        fprintf(f, "%sproposer:       %s\n", p, c->proposer);
        fprintf(f, "%sdraft model:    %s%s%s\n", p, c->draft_file, c->draft_sha256[0] ? " sha256 " : "",
                c->draft_sha256);
        fprintf(f, "%sverification:   %s\n", p, c->verification);
        if (c->block_size > 0)
            fprintf(f, "%sKV:             %s, block size %d\n", p, c->kv_type, c->block_size);
        else
            fprintf(f, "%sKV:             %s\n", p, c->kv_type);
        fprintf(f, "%sprefix cache:   %s; salts: %s\n", p, c->prefix_cache,
                c->salt_use[0] ? c->salt_use : "none");
        fprintf(f, "%sserver:         %s\n", p, c->server_args[0] ? c->server_args : "unknown");
        fprintf(f, "%sengine:         %s\n", p, c->engine[0] ? c->engine : "not reported by the server");
    }
    const bench_contract *h = &ri->cfg[0];
    fprintf(f, "tokenizer:      %s\n", ri->tokenizer);
    fprintf(f, "bench tool:     %s\n", h->tool);
    fprintf(f, "endpoint:       %s\n", ri->endpoint ? ri->endpoint : "/v1/completions");
    fprintf(f, "CPU:            %s, %d cores online, memcpy %.1f GB/s (1 thread, 256 MiB, best of 5)\n",
            h->cpu_model, h->cores, h->membw_gbs);
    fprintf(f, "workload:       %s (seed %llu): %s\n", ri->workload, (unsigned long long)ri->seed,
            ri->workload_params);
    fprintf(f, "prompt tokens:  %s\n", ri->prompt_lens);
    fprintf(f, "output tokens:  %s\n", ri->output_lens);
    fprintf(f, "prefix sharing: %s\n", ri->prefix_sharing);
    fprintf(f, "load:           %s\n", ri->load);
    fprintf(f, "sampling:       %s\n", ri->sampling);
    fprintf(f, "SLO:            %s\n", ri->slo && ri->slo->text[0] ? ri->slo->text : "none");
    fprintf(f, "warm-up:        %d requests (not measured)\n", ri->warmup);
    fprintf(f, "repetitions:    %d; %s\n", ri->reps, ri->reps_note);
    fprintf(f, "date:           %s\n", ri->when);
}

/* "%.*f" of v, or n/a when nothing was measured (never "nan") */
static const char *fmt_fix(char *buf, size_t cap, double v, int prec) {
    if (isnan(v) || isinf(v)) snprintf(buf, cap, "n/a");
    else snprintf(buf, cap, "%.*f", prec, v);
    return buf;
}

static void rep_spread_line(FILE *f, const bench_result *r) {
    double m, sd, lo, hi;
    char a[32], b[32], c[32], d[32];
    spread(r->rep_out_tok_s, r->reps, &m, &sd, &lo, &hi);
    fprintf(f, "%s: output tok/s over %d repetition(s): mean %s, sd %s, min %s, max %s", r->label,
            r->reps, fmt_fix(a, 32, m, 1), fmt_fix(b, 32, sd, 1), fmt_fix(c, 32, lo, 1),
            fmt_fix(d, 32, hi, 1));
    spread(r->rep_ttft_p50, r->reps, &m, &sd, &lo, &hi);
    fprintf(f, "; TTFT p50 ms: mean %s, sd %s, min %s, max %s", fmt_fix(a, 32, m, 1),
            fmt_fix(b, 32, sd, 1), fmt_fix(c, 32, lo, 1), fmt_fix(d, 32, hi, 1));
    spread(r->rep_tpot_p50, r->reps, &m, &sd, &lo, &hi);
    fprintf(f, "; TPOT p50 ms: mean %s, sd %s\n", fmt_fix(a, 32, m, 2), fmt_fix(b, 32, sd, 2));
}

static void h_line(FILE *f, const bench_result *r) {
    fprintf(f, "%s: H_tokens histogram [0-.1 .1-.2 ... .9-1 =1]:", r->label);
    for (int i = 0; i < 11; i++) fprintf(f, " %lld", r->h_hist[i]);
    fputc('\n', f);
}

/* A table: metrics down, runs across (and B/A when comparing two). */
static void table(FILE *f, bench_result *res, int n_res, bool compare, bool md) {
    char buf[64];
    if (md) {
        fprintf(f, "| metric |");
        for (int j = 0; j < n_res; j++) fprintf(f, " %s |", res[j].label);
        if (compare && n_res == 2) fprintf(f, " B / A |");
        fprintf(f, "\n|---|");
        for (int j = 0; j < n_res; j++) fprintf(f, "---|");
        if (compare && n_res == 2) fprintf(f, "---|");
        fputc('\n', f);
    } else {
        fprintf(f, "%-52s", "metric");
        for (int j = 0; j < n_res; j++) fprintf(f, " %14.14s", res[j].label);
        if (compare && n_res == 2) fprintf(f, " %9s", "B/A");
        fputc('\n', f);
    }
    for (size_t i = 0; i < N_ROWS; i++) {
        bool any = false;
        for (int j = 0; j < n_res; j++) any |= !isnan(row_value(&res[j], i));
        if (!any) continue;
        char name[96];
        snprintf(name, sizeof(name), "%s%s%s%s", ROWS[i].name, ROWS[i].unit[0] ? " (" : "",
                 ROWS[i].unit, ROWS[i].unit[0] ? ")" : "");
        if (md) fprintf(f, "| %s |", name);
        else fprintf(f, "%-52.52s", name);
        for (int j = 0; j < n_res; j++) {
            fmt_num(buf, sizeof(buf), row_value(&res[j], i));
            if (md) fprintf(f, " %s |", buf);
            else fprintf(f, " %14s", buf);
        }
        if (compare && n_res == 2) {
            double a = row_value(&res[0], i), b = row_value(&res[1], i);
            if (a != 0 && !isnan(a) && !isnan(b)) snprintf(buf, sizeof(buf), "%.3fx", b / a);
            else snprintf(buf, sizeof(buf), "-");
            if (md) fprintf(f, " %s |", buf);
            else fprintf(f, " %9s", buf);
        }
        fputc('\n', f);
    }
}

void bench_report_text(FILE *f, const bench_report_info *ri, bench_result *res, int n_res,
                       bool compare) {
    fprintf(f, "\n== reproducibility contract ==\n");
    contract_lines(f, ri);
    fprintf(f, "\n== results ==\n");
    table(f, res, n_res, compare, false);
    fputc('\n', f);
    for (int j = 0; j < n_res; j++) {
        if (res[j].cached_seen) h_line(f, &res[j]);
        rep_spread_line(f, &res[j]);
        fprintf(f, "%s: server counters: %s\n", res[j].label, res[j].reconcile);
        if (res[j].n_replicas) {
            double tot = 0;
            for (int i = 0; i < res[j].n_replicas; i++) tot += res[j].replica_requests[i];
            fprintf(f, "%s: requests per replica (share):", res[j].label);
            for (int i = 0; i < res[j].n_replicas; i++)
                fprintf(f, " %.0f (%.1f%%)", res[j].replica_requests[i],
                        tot > 0 ? 100 * res[j].replica_requests[i] / tot : 0.0);
            fprintf(f, "; imbalance %.2f\n", bench_imbalance(res[j].replica_requests, res[j].n_replicas));
        }
        if (res[j].n_ok < res[j].n)
            fprintf(f, "%s: %d of %d requests failed; first: %s\n", res[j].label,
                    res[j].n - res[j].n_ok, res[j].n, res[j].first_err);
    }
}

/* ---- JSON --------------------------------------------------------------------------- */

static void jnum(cJSON *o, const char *k, double v) {
    if (isnan(v) || isinf(v)) cJSON_AddNullToObject(o, k);
    else cJSON_AddNumberToObject(o, k, v);
}

static void jsummary(cJSON *o, const char *k, const bstat_summary *s) {
    cJSON *x = cJSON_AddObjectToObject(o, k);
    if (!x) return;
    jnum(x, "n", (double)s->n);
    jnum(x, "mean", s->mean);
    jnum(x, "sd", s->sd);
    jnum(x, "min", s->min);
    jnum(x, "p50", s->p50);
    jnum(x, "p90", s->p90);
    jnum(x, "p99", s->p99);
    jnum(x, "max", s->max);
}

static cJSON *result_json(const bench_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "label", r->label);
    jnum(o, "concurrency", r->concurrency);
    jnum(o, "rate", r->rate > 0 ? r->rate : NAN);
    jnum(o, "requests", r->n);
    jnum(o, "duration_s", r->duration_s);
    for (size_t i = 0; i < N_ROWS; i++) jnum(o, ROWS[i].key, row_value(r, i));
    jnum(o, "prompt_tokens", r->usage_seen ? (double)r->prompt_tokens : NAN);
    jnum(o, "output_tokens", (double)r->output_tokens);
    jnum(o, "cached_tokens", r->cached_seen ? (double)r->cached_tokens : NAN);
    jnum(o, "spec_steps", r->has_spec ? (double)r->spec_steps : NAN);
    jnum(o, "spec_drafted", r->has_spec ? (double)r->spec_drafted : NAN);
    jnum(o, "spec_accepted", r->has_spec ? (double)r->spec_accepted : NAN);
    jnum(o, "prefix_sharing", r->prefix_share);
    jsummary(o, "ttft_ms", &r->s_ttft);
    jsummary(o, "tpot_ms", &r->s_tpot);
    jsummary(o, "itl_ms", &r->s_itl);
    jsummary(o, "e2e_ms", &r->s_e2e);
    jsummary(o, "ttft_cold_ms", &r->s_cold);
    jsummary(o, "ttft_warm_ms", &r->s_warm);
    jsummary(o, "prompt_len", &r->s_plen);
    jsummary(o, "output_len", &r->s_olen);
    cJSON *h = cJSON_AddArrayToObject(o, "h_tokens_hist");
    for (int i = 0; h && i < 11; i++) cJSON_AddItemToArray(h, cJSON_CreateNumber((double)r->h_hist[i]));
    if (r->n_replicas) {
        cJSON *rq = cJSON_AddArrayToObject(o, "replica_requests");
        for (int i = 0; rq && i < r->n_replicas; i++)
            cJSON_AddItemToArray(rq, cJSON_CreateNumber(r->replica_requests[i]));
    }
    cJSON *sv = cJSON_AddObjectToObject(o, "server_counters");
    if (sv) {
        for (int i = 0; i < BENCH_N_COUNTERS; i++) jnum(sv, bench_counter_names[i], r->counters[i]);
        cJSON_AddBoolToObject(sv, "reconciled", r->has_server && r->reconciled);
        cJSON_AddStringToObject(sv, "note", r->reconcile);
    }
    cJSON *rp = cJSON_AddObjectToObject(o, "repetitions");
    if (rp) {
        jnum(rp, "n", r->reps);
        cJSON *a = cJSON_AddArrayToObject(rp, "output_tokens_per_s");
        cJSON *b = cJSON_AddArrayToObject(rp, "ttft_p50_ms");
        cJSON *c = cJSON_AddArrayToObject(rp, "tpot_p50_ms");
        for (int i = 0; i < r->reps && i < BENCH_MAX_REPS; i++) {
            if (a) cJSON_AddItemToArray(a, isnan(r->rep_out_tok_s[i]) ? cJSON_CreateNull()
                                                                     : cJSON_CreateNumber(r->rep_out_tok_s[i]));
            if (b) cJSON_AddItemToArray(b, isnan(r->rep_ttft_p50[i]) ? cJSON_CreateNull()
                                                                    : cJSON_CreateNumber(r->rep_ttft_p50[i]));
            if (c) cJSON_AddItemToArray(c, isnan(r->rep_tpot_p50[i]) ? cJSON_CreateNull()
                                                                    : cJSON_CreateNumber(r->rep_tpot_p50[i]));
        }
        double m, sd, lo, hi;
        spread(r->rep_out_tok_s, r->reps, &m, &sd, &lo, &hi);
        jnum(rp, "output_tokens_per_s_sd", sd);
        jnum(rp, "output_tokens_per_s_min", lo);
        jnum(rp, "output_tokens_per_s_max", hi);
    }
    if (r->first_err[0]) cJSON_AddStringToObject(o, "first_error", r->first_err);
    return o;
}

static cJSON *contract_json(const bench_report_info *ri) {
    cJSON *o = cJSON_CreateObject();
    cJSON *cf = cJSON_AddArrayToObject(o, "configs");
    for (int i = 0; cf && i < ri->n_cfg; i++) {
        const bench_contract *c = &ri->cfg[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "model_file", c->model_file);
        cJSON_AddStringToObject(x, "model_sha256", c->model_sha256);
        cJSON_AddStringToObject(x, "model", c->model_desc);
        cJSON_AddStringToObject(x, "served_model", c->served_model);
        jnum(x, "max_model_len", c->max_model_len > 0 ? c->max_model_len : NAN);
        cJSON_AddStringToObject(x, "proposer", c->proposer);
        cJSON_AddStringToObject(x, "draft_model_file", c->draft_file);
        cJSON_AddStringToObject(x, "draft_model_sha256", c->draft_sha256);
        cJSON_AddStringToObject(x, "verification", c->verification);
        cJSON_AddStringToObject(x, "kv_type", c->kv_type);
        jnum(x, "kv_block_size", c->block_size > 0 ? c->block_size : NAN);
        cJSON_AddStringToObject(x, "engine", c->engine[0] ? c->engine : "not reported by the server");
        cJSON_AddStringToObject(x, "prefix_cache", c->prefix_cache);
        cJSON_AddStringToObject(x, "salts", c->salt_use[0] ? c->salt_use : "none");
        cJSON_AddStringToObject(x, "server_args", c->server_args);
        cJSON_AddItemToArray(cf, x);
    }
    const bench_contract *h = &ri->cfg[0];
    cJSON_AddStringToObject(o, "tokenizer", ri->tokenizer);
    cJSON_AddStringToObject(o, "bench_tool", h->tool);
    cJSON_AddStringToObject(o, "endpoint", ri->endpoint ? ri->endpoint : "/v1/completions");
    cJSON_AddStringToObject(o, "cpu_model", h->cpu_model);
    jnum(o, "cores", h->cores);
    jnum(o, "memcpy_gb_per_s", h->membw_gbs);
    cJSON_AddStringToObject(o, "workload", ri->workload);
    cJSON_AddStringToObject(o, "workload_params", ri->workload_params);
    jnum(o, "seed", (double)ri->seed);
    cJSON_AddStringToObject(o, "prompt_tokens", ri->prompt_lens);
    cJSON_AddStringToObject(o, "output_tokens", ri->output_lens);
    cJSON_AddStringToObject(o, "prefix_sharing", ri->prefix_sharing);
    cJSON_AddStringToObject(o, "load", ri->load);
    cJSON_AddStringToObject(o, "sampling", ri->sampling);
    cJSON_AddStringToObject(o, "slo", ri->slo && ri->slo->text[0] ? ri->slo->text : "");
    jnum(o, "warmup_requests", ri->warmup);
    jnum(o, "repetitions", ri->reps);
    cJSON_AddStringToObject(o, "repetitions_note", ri->reps_note);
    cJSON_AddStringToObject(o, "date", ri->when);
    return o;
}

int bench_report_json(const char *path, const bench_report_info *ri, bench_result *res, int n_res,
                      bool compare, char *err, size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(root, "metrics");
    cJSON *runs = cJSON_AddArrayToObject(m, "runs");
    for (int j = 0; runs && j < n_res; j++) cJSON_AddItemToArray(runs, result_json(&res[j]));
    if (compare && n_res == 2) {
        cJSON *c = cJSON_AddObjectToObject(m, "compare_b_over_a");
        for (size_t i = 0; c && i < N_ROWS; i++) {
            double a = row_value(&res[0], i), b = row_value(&res[1], i);
            jnum(c, ROWS[i].key, a != 0 ? b / a : NAN);
        }
    }
    cJSON_AddItemToObject(root, "contract", contract_json(ri));
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) {
        seterr(err, errlen, "out of memory writing JSON");
        return -1;
    }
    FILE *f = fopen(path, "w");
    int rc = -1;
    if (!f) seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
    else {
        fputs(s, f);
        fputc('\n', f);
        rc = fclose(f) ? -1 : 0;
        if (rc) seterr(err, errlen, "cannot write %s", path);
    }
    free(s);
    return rc;
}

int bench_report_md(const char *path, const bench_report_info *ri, bench_result *res, int n_res,
                    bool compare, char *err, size_t errlen) {
    char stem[4096];
    snprintf(stem, sizeof(stem), "%s", path);
    size_t l = strlen(stem);
    if (l > 3 && !strcmp(stem + l - 3, ".md")) stem[l - 3] = 0;
    const char *base = strrchr(stem, '/');
    base = base ? base + 1 : stem;
    char plots[BENCH_MAX_PLOTS][BENCH_PLOT_NAME];
    int n_plots = bench_plots(stem, base, res, n_res, plots);
    FILE *f = fopen(path, "w");
    if (!f) {
        seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "## %s\n\n", ri->workload);
    table(f, res, n_res, compare, true);
    fprintf(f, "\n");
    for (int j = 0; j < n_res; j++) {
        fprintf(f, "- ");
        rep_spread_line(f, &res[j]);
        if (res[j].cached_seen) {
            fprintf(f, "- ");
            h_line(f, &res[j]);
        }
        fprintf(f, "- %s: server counters: %s\n", res[j].label, res[j].reconcile);
        if (res[j].n_ok < res[j].n)
            fprintf(f, "- %s: %d of %d requests failed; first: %s\n", res[j].label,
                    res[j].n - res[j].n_ok, res[j].n, res[j].first_err);
    }
    fprintf(f, "\nReproducibility contract:\n\n```\n");
    contract_lines(f, ri);
    fprintf(f, "```\n\n");
    for (int i = 0; i < n_plots; i++) fprintf(f, "![%s](%s)\n", plots[i], plots[i]);
    int rc = fclose(f) ? -1 : 0;
    if (rc) seterr(err, errlen, "cannot write %s", path);
    return rc;
}
