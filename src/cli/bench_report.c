/* bench_report.c: turns measured runs into numbers (throughput, latency
 * percentiles, goodput, cold/warm TTFT, H_tokens, acceptance, KV use, the
 * server's own counters of work done) and writes them: terminal text, JSON
 * ({"metrics", "contract"}), Markdown, and SVG plots drawn by hand. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "common.h"

const char *const bench_counter_names[BENCH_N_COUNTERS] = {
    "specula_requests_finished_total",     "specula_prompt_tokens_total",
    "specula_completion_tokens_total",     "specula_cached_prompt_tokens_total",
    "specula_prefill_tokens_total",        "specula_decode_tokens_total",
    "specula_engine_steps_total",          "specula_recomputed_tokens_total",
    "specula_preemptions_total",           "specula_prefix_cache_hits_total",
    "specula_spec_drafts_total",           "specula_spec_draft_tokens_total",
    "specula_spec_accepted_tokens_total",  "specula_kv_evictions_total",
};
enum {
    C_FINISHED, C_PROMPT, C_COMPLETION, C_CACHED, C_PREFILL, C_DECODE, C_STEPS, C_RECOMPUTED,
    C_PREEMPT, C_HITS, C_SPEC_STEPS, C_SPEC_DRAFTED, C_SPEC_ACCEPTED, C_EVICT
};

int bench_slo_parse(const char *s, bench_slo *slo, char *err, size_t errlen) {
    memset(slo, 0, sizeof(*slo));
    snprintf(slo->text, sizeof(slo->text), "%s", s);
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) goto bad;
        *eq = 0;
        char *end;
        double v = strtod(eq + 1, &end);
        if (end == eq + 1 || !(v > 0) || !isfinite(v)) goto bad;
        if (!strcmp(end, "s")) v *= 1000;
        else if (*end && strcmp(end, "ms")) goto bad;
        if (!strcmp(tok, "ttft")) slo->ttft_ms = v;
        else if (!strcmp(tok, "tpot")) slo->tpot_ms = v;
        else if (!strcmp(tok, "e2e")) slo->e2e_ms = v;
        else goto bad;
    }
    return 0;
bad:
    sp_seterr(err, errlen, "invalid --slo '%s': want e.g. ttft=500ms,tpot=50ms,e2e=10s "
              "(keys ttft, tpot, e2e; units ms or s)", s);
    return -1;
}

void bench_counters_read(const char *text, double *out) {
    for (int i = 0; i < BENCH_N_COUNTERS; i++) out[i] = bench_prom_value(text, bench_counter_names[i]);
}

void bench_result_init(bench_result *r, const char *label, int32_t concurrency, double rate) {
    memset(r, 0, sizeof(*r));
    snprintf(r->label, sizeof(r->label), "%s", label);
    r->concurrency = concurrency;
    r->rate = rate;
    for (int i = 0; i < BENCH_N_COUNTERS; i++) r->counters[i] = NAN;
    /* never sampled is not zero: the KV rows say n/a until a sample has the gauge */
    r->kv_peak_in_use = r->kv_peak_cached = NAN;
}

static size_t lcp(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

void bench_result_add(bench_result *r, const bench_run *run, const bench_slo *slo) {
    dvec ttft_rep = {0}, tpot_rep = {0};
    long long out_rep = 0;
    for (int32_t i = 0; i < run->n; i++) {
        const bench_rec *q = &run->recs[i];
        r->n++;
        if (!q->ok) {
            if (!r->first_err[0]) snprintf(r->first_err, sizeof(r->first_err), "%s", q->err);
            continue;
        }
        r->n_ok++;
        /* prefix sharing over what was actually sent, in bytes */
        if (q->prompt) {
            size_t best = 0;
            for (int32_t j = 0; j < i; j++)
                if (run->recs[j].prompt) {
                    size_t l = lcp(q->prompt, run->recs[j].prompt);
                    if (l > best) best = l;
                }
            r->share_num += (long long)best;
            r->share_den += (long long)q->prompt_bytes;
        }
        int32_t out = q->completion_tokens >= 0 ? q->completion_tokens : (int32_t)q->chunk_t.n;
        if (q->prompt_tokens >= 0) {
            r->usage_seen = true;
            r->prompt_tokens += q->prompt_tokens;
            dvec_push(&r->prompt_len, q->prompt_tokens);
        }
        r->output_tokens += out;
        out_rep += out;
        dvec_push(&r->output_len, out);
        double e2e = (q->t_end - q->t_start) * 1e3;
        dvec_push(&r->e2e, e2e);
        double ttft = -1, tpot = -1;
        if (q->t_first >= 0) {
            ttft = (q->t_first - q->t_start) * 1e3;
            dvec_push(&r->ttft, ttft);
            dvec_push(&ttft_rep, ttft);
            if (q->cached_tokens >= 0) {
                r->cached_seen = true;
                r->cached_tokens += q->cached_tokens;
                if (q->cached_tokens_disk > 0) r->cached_tokens_disk += q->cached_tokens_disk;
                /* warm: at least a tenth of the prompt came from the cache (a
                 * shared first block, e.g. a common system line, is not warmth) */
                bool warm = q->prompt_tokens > 0 && 10.0 * q->cached_tokens >= q->prompt_tokens;
                dvec_push(warm ? &r->ttft_warm : &r->ttft_cold, ttft);
                if (q->prompt_tokens > 0) {
                    int b = (int)floor(10.0 * q->cached_tokens / q->prompt_tokens);
                    r->h_hist[b < 0 ? 0 : b > 10 ? 10 : b]++;
                }
            }
        }
        if (out >= 2 && q->t_last > q->t_first && q->t_first >= 0) {
            tpot = (q->t_last - q->t_first) * 1e3 / (out - 1);
            dvec_push(&r->tpot, tpot);
            dvec_push(&tpot_rep, tpot);
        }
        for (size_t k = 1; k < q->chunk_t.n; k++)
            dvec_push(&r->itl, (q->chunk_t.v[k] - q->chunk_t.v[k - 1]) * 1e3);
        bool good = (!slo || slo->ttft_ms <= 0 || (ttft >= 0 && ttft <= slo->ttft_ms)) &&
                    (!slo || slo->tpot_ms <= 0 || tpot < 0 || tpot <= slo->tpot_ms) &&
                    (!slo || slo->e2e_ms <= 0 || e2e <= slo->e2e_ms);
        r->n_good += good;
        if (q->has_spec) {
            r->has_spec = true;
            r->spec_steps += q->spec_steps;
            r->spec_drafted += q->spec_drafted;
            r->spec_accepted += q->spec_accepted;
        }
    }
    r->duration_s += run->duration_s;
    for (int32_t k = 0; k < run->n_kv; k++) {
        const bench_kv_sample *s = &run->kv[k];
        if (!(s->blocks_total > 0)) continue;
        /* each gauge on its own: a server may export the total but not a state */
        double use = s->blocks_in_use / s->blocks_total, cached = s->blocks_cached / s->blocks_total;
        if (!isnan(use)) {
            if (isnan(r->kv_peak_in_use) || use > r->kv_peak_in_use) r->kv_peak_in_use = use;
            r->kv_sum_in_use += use;
            r->n_kv++;
        }
        if (!isnan(cached) && (isnan(r->kv_peak_cached) || cached > r->kv_peak_cached))
            r->kv_peak_cached = cached;
    }
    if (r->reps < BENCH_MAX_REPS) {
        r->rep_out_tok_s[r->reps] = run->duration_s > 0 ? out_rep / run->duration_s : NAN;
        r->rep_ttft_p50[r->reps] = bstat_quantile(ttft_rep.v, ttft_rep.n, 0.5);
        r->rep_tpot_p50[r->reps] = bstat_quantile(tpot_rep.v, tpot_rep.n, 0.5);
    }
    r->reps++;
    dvec_free(&ttft_rep);
    dvec_free(&tpot_rep);
}

void bench_result_add_counters(bench_result *r, const double *before, const double *after) {
    if (isnan(before[C_FINISHED]) || isnan(after[C_FINISHED])) return;
    r->has_server = true;
    for (int i = 0; i < BENCH_N_COUNTERS; i++) {
        double d = after[i] - before[i];
        if (isnan(after[i]) || isnan(before[i])) continue;
        r->counters[i] = isnan(r->counters[i]) ? d : r->counters[i] + d;
    }
}

void bench_result_finish(bench_result *r) {
    r->s_ttft = bstat_summarize(r->ttft.v, r->ttft.n);
    r->s_tpot = bstat_summarize(r->tpot.v, r->tpot.n);
    r->s_itl = bstat_summarize(r->itl.v, r->itl.n);
    r->s_e2e = bstat_summarize(r->e2e.v, r->e2e.n);
    r->s_cold = bstat_summarize(r->ttft_cold.v, r->ttft_cold.n);
    r->s_warm = bstat_summarize(r->ttft_warm.v, r->ttft_warm.n);
    r->s_plen = bstat_summarize(r->prompt_len.v, r->prompt_len.n);
    r->s_olen = bstat_summarize(r->output_len.v, r->output_len.n);
    double d = r->duration_s;
    r->req_s = d > 0 ? r->n_ok / d : NAN;
    r->out_tok_s = d > 0 ? r->output_tokens / d : NAN;
    r->total_tok_s = d > 0 ? (r->output_tokens + r->prompt_tokens) / d : NAN;
    r->goodput_req_s = d > 0 ? r->n_good / d : NAN;
    r->prefix_share = r->share_den ? (double)r->share_num / r->share_den : NAN;
    r->kv_mean_in_use = r->n_kv ? r->kv_sum_in_use / r->n_kv : NAN;
    if (!r->has_server) {
        snprintf(r->reconcile, sizeof(r->reconcile), "no Specula /metrics to reconcile with");
        return;
    }
    /* the client's sums against the server's counters: they must agree when
     * no one else used the server during the run */
    struct {
        int c;
        double client;
        const char *what;
        bool need;
    } chk[] = {
        {C_FINISHED, r->n_ok, "requests", true},
        {C_PROMPT, (double)r->prompt_tokens, "prompt tokens", r->usage_seen},
        {C_COMPLETION, (double)r->output_tokens, "completion tokens", r->usage_seen},
        {C_CACHED, (double)r->cached_tokens, "cached tokens", r->cached_seen},
        {C_SPEC_DRAFTED, (double)r->spec_drafted, "drafted tokens", r->has_spec},
        {C_SPEC_ACCEPTED, (double)r->spec_accepted, "accepted tokens", r->has_spec},
    };
    r->reconciled = true;
    size_t off = 0;
    for (size_t i = 0; i < sizeof(chk) / sizeof(chk[0]); i++) {
        if (!chk[i].need || isnan(r->counters[chk[i].c])) continue;
        if (fabs(r->counters[chk[i].c] - chk[i].client) > 0.5) {
            r->reconciled = false;
            off += (size_t)snprintf(r->reconcile + off, off < sizeof(r->reconcile)
                                    ? sizeof(r->reconcile) - off : 0,
                                    "%s%s: client %.0f, server %.0f", off ? "; " : "",
                                    chk[i].what, chk[i].client, r->counters[chk[i].c]);
            if (off >= sizeof(r->reconcile)) off = sizeof(r->reconcile) - 1;
        }
    }
    if (r->reconciled)
        snprintf(r->reconcile, sizeof(r->reconcile),
                 "requests, prompt/completion/cached tokens%s equal the server's /metrics deltas",
                 r->has_spec ? ", drafted/accepted tokens" : "");
}

void bench_result_free(bench_result *r) {
    dvec_free(&r->ttft);
    dvec_free(&r->tpot);
    dvec_free(&r->itl);
    dvec_free(&r->e2e);
    dvec_free(&r->ttft_cold);
    dvec_free(&r->ttft_warm);
    dvec_free(&r->prompt_len);
    dvec_free(&r->output_len);
}

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
    if (!strcmp(k, "srv_prefill_tokens")) return c[C_PREFILL];
    if (!strcmp(k, "srv_prefill_fraction"))
        return c[C_PROMPT] > 0 ? c[C_PREFILL] / c[C_PROMPT] : NAN;
    if (!strcmp(k, "srv_cached_tokens")) return c[C_CACHED];
    if (!strcmp(k, "srv_h_tokens")) return c[C_PROMPT] > 0 ? c[C_CACHED] / c[C_PROMPT] : NAN;
    if (!strcmp(k, "replicas")) return r->n_replicas ? r->n_replicas : NAN;
    if (!strcmp(k, "replica_imbalance"))
        return r->n_replicas ? bench_imbalance(r->replica_requests, r->n_replicas) : NAN;
    if (!strcmp(k, "srv_decode_tokens")) return c[C_DECODE];
    if (!strcmp(k, "srv_steps")) return c[C_STEPS];
    if (!strcmp(k, "srv_steps_per_token")) return c[C_DECODE] > 0 ? c[C_STEPS] / c[C_DECODE] : NAN;
    if (!strcmp(k, "srv_recomputed_tokens")) return c[C_RECOMPUTED];
    if (!strcmp(k, "srv_preemptions")) return c[C_PREEMPT];
    if (!strcmp(k, "srv_evictions")) return c[C_EVICT];
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
        sp_seterr(err, errlen, "out of memory writing JSON");
        return -1;
    }
    FILE *f = fopen(path, "w");
    int rc = -1;
    if (!f) sp_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
    else {
        fputs(s, f);
        fputc('\n', f);
        rc = fclose(f) ? -1 : 0;
        if (rc) sp_seterr(err, errlen, "cannot write %s", path);
    }
    free(s);
    return rc;
}

/* ---- SVG plots ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const double *x, *y;
    size_t n;
} series;

static const char *const COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                     "#9467bd", "#8c564b", "#e377c2", "#17becf"};

static double nice_step(double range) {
    double raw = range / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* An axis that fits the data: [lo, hi] widened to whole nice steps (not
 * stretched to 0); a single value gets a small range around it. */
static void fit_axis(double lo, double hi, double *a0, double *a1, double *step) {
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad, hi += pad;
    }
    double st = nice_step(hi - lo);
    *a0 = floor(lo / st) * st;
    *a1 = ceil(hi / st) * st;
    if (*a1 <= *a0) *a1 = *a0 + st;
    *step = st;
}

enum { PLOT_CDF, PLOT_LINE };

/* A plot: CDFs as step functions (each sample a step up, with a marker on
 * it, so a single sample is a visible step), or lines with markers. Axes fit
 * the data (a CDF's y is [0, 1]); the legend sits below the plot area, never
 * over the data. Elements carry classes (series, sample, xtick, ytick,
 * legend) so tests can read the picture. */
static int svg_plot(const char *path, const char *title, const char *xlab, const char *ylab,
                    const series *s, int ns, int kind) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (size_t k = 0; k < s[i].n; k++) {
            if (isnan(s[i].x[k]) || isnan(s[i].y[k])) continue;
            xmin = fmin(xmin, s[i].x[k]), xmax = fmax(xmax, s[i].x[k]);
            ymin = fmin(ymin, s[i].y[k]), ymax = fmax(ymax, s[i].y[k]);
        }
    if (!isfinite(xmin)) return 0; /* nothing to draw */
    double x0, x1, xs, y0, y1, ys;
    fit_axis(xmin, xmax, &x0, &x1, &xs);
    if (kind == PLOT_CDF) y0 = 0, y1 = 1, ys = 0.2;
    else fit_axis(ymin, ymax, &y0, &y1, &ys);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    const int W = 640, L = 70, R = 20, T = 40, PH = 310;
    const int H = T + PH + 56 + 16 * ns + 8;
    double pw = W - L - R, ph = PH;
#define PX(v) (L + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (T + ph - ((v) - y0) / (y1 - y0) * ph)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">", W / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    for (int i = 0; x0 + i * xs <= x1 + xs / 2; i++) {
        double v = x0 + i * xs;
        if (fabs(v) < xs * 1e-9) v = 0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                PX(v), T, PX(v), T + ph, PX(v), T + ph + 16, v);
    }
    for (int i = 0; y0 + i * ys <= y1 + ys / 2; i++) {
        double v = y0 + i * ys;
        if (fabs(v) < ys * 1e-9) v = 0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, PY(v), L + pw, PY(v), L - 6, PY(v) + 4, v);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n",
            L, T, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", L + pw / 2, T + ph + 36);
    xml_text(f, xlab);
    fprintf(f, "</text>\n<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\">",
            T + ph / 2);
    xml_text(f, ylab);
    fprintf(f, "</text>\n");
    for (int i = 0; i < ns; i++) {
        const char *col = COLORS[i % 8];
        fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                   "points=\"", col);
        /* ~600 points are as many as the 550-pixel plot can show; keeps files small */
        size_t stride = s[i].n > 600 ? s[i].n / 600 : 1;
        double prev_y = 0;
        bool first = true;
        for (size_t k = 0; k < s[i].n; k++) {
            if (!(k % stride == 0 || k + 1 == s[i].n) || isnan(s[i].x[k]) || isnan(s[i].y[k]))
                continue;
            if (kind == PLOT_CDF) /* flat to this sample, then up by its share */
                fprintf(f, "%.1f,%.1f ", PX(s[i].x[k]), PY(first ? 0 : prev_y));
            fprintf(f, "%.1f,%.1f ", PX(s[i].x[k]), PY(s[i].y[k]));
            prev_y = s[i].y[k];
            first = false;
        }
        fprintf(f, "\"/>\n");
        size_t mstride = s[i].n > 300 ? s[i].n / 300 : 1;
        for (size_t k = 0; k < s[i].n; k++)
            if ((k % mstride == 0 || k + 1 == s[i].n) && !isnan(s[i].x[k]) && !isnan(s[i].y[k]))
                fprintf(f, "<circle class=\"sample\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"/>\n",
                        PX(s[i].x[k]), PY(s[i].y[k]), kind == PLOT_CDF ? "2.5" : "3.5", col);
        double ly = T + ph + 56 + 16 * i, lx = L;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" fill=\"%s\"/>"
                   "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">", lx, ly - 4, col, lx + 18, ly);
        xml_text(f, s[i].name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    return fclose(f) ? -1 : 0;
}

/* CDF series over sorted samples (bench_result_finish sorted them). */
static int cdf_series(series *s, const char *name, const dvec *d, double **ybuf) {
    *ybuf = malloc((d->n ? d->n : 1) * sizeof(double));
    if (!*ybuf) return -1;
    for (size_t k = 0; k < d->n; k++) (*ybuf)[k] = (double)(k + 1) / (double)d->n;
    *s = (series){name, d->v, *ybuf, d->n};
    return 0;
}

static int plot_cdf(const char *path, const char *title, const char *xlab, bench_result *res,
                    int n_res, size_t field_off, const char *suffix_b) {
    series s[16];
    double *y[16] = {0};
    char names[16][96];
    int ns = 0, rc = 0;
    for (int j = 0; j < n_res && ns < 16; j++) {
        const dvec *d = (const dvec *)((const char *)&res[j] + field_off);
        snprintf(names[ns], sizeof(names[ns]), "%s%s", res[j].label, suffix_b ? suffix_b : "");
        if (cdf_series(&s[ns], names[ns], d, &y[ns])) {
            rc = -1;
            break;
        }
        ns++;
    }
    if (!rc) rc = svg_plot(path, title, xlab, "fraction of samples", s, ns, PLOT_CDF);
    for (int i = 0; i < ns; i++) free(y[i]);
    return rc;
}

static int plot_cold_warm(const char *path, bench_result *res, int n_res) {
    series s[16];
    double *y[16] = {0};
    char names[16][96];
    int ns = 0, rc = 0;
    for (int j = 0; j < n_res && ns < 15; j++) {
        const dvec *d[2] = {&res[j].ttft_cold, &res[j].ttft_warm};
        for (int k = 0; k < 2; k++) {
            if (!d[k]->n) continue;
            snprintf(names[ns], sizeof(names[ns]), "%s %s (n=%zu)", res[j].label, k ? "warm" : "cold",
                     d[k]->n);
            if (cdf_series(&s[ns], names[ns], d[k], &y[ns])) {
                rc = -1;
                goto done;
            }
            ns++;
        }
    }
    rc = svg_plot(path, "TTFT: cold (H_tokens < 0.1) vs warm", "TTFT (ms)",
                  "fraction of requests", s, ns, PLOT_CDF);
done:
    for (int i = 0; i < ns; i++) free(y[i]);
    return rc;
}

/* Throughput against concurrency, one line per configuration (results of a
 * sweep share their label's part before " c=" ). */
static int plot_throughput(const char *path, bench_result *res, int n_res) {
    series s[8];
    double xs[8][64], ys[8][64];
    char names[8][64];
    int ns = 0;
    for (int j = 0; j < n_res; j++) {
        char base[64];
        snprintf(base, sizeof(base), "%s", res[j].label);
        char *c = strstr(base, " c=");
        if (c) *c = 0;
        int k;
        for (k = 0; k < ns && strcmp(names[k], base); k++) {}
        if (k == ns) {
            if (ns == 8) continue;
            snprintf(names[ns], sizeof(names[ns]), "%s", base);
            s[ns] = (series){names[ns], xs[ns], ys[ns], 0};
            ns++;
        }
        if (s[k].n < 64) {
            xs[k][s[k].n] = res[j].concurrency;
            ys[k][s[k].n] = res[j].out_tok_s;
            s[k].n++;
        }
    }
    return svg_plot(path, "Output throughput vs concurrency", "concurrency (requests in flight)",
                    "output tokens/s", s, ns, PLOT_LINE);
}

int bench_report_md(const char *path, const bench_report_info *ri, bench_result *res, int n_res,
                    bool compare, char *err, size_t errlen) {
    char stem[4096];
    snprintf(stem, sizeof(stem), "%s", path);
    size_t l = strlen(stem);
    if (l > 3 && !strcmp(stem + l - 3, ".md")) stem[l - 3] = 0;
    const char *base = strrchr(stem, '/');
    base = base ? base + 1 : stem;
    struct {
        const char *suffix, *title, *xlab;
        size_t off;
    } cdfs[] = {
        {"ttft", "TTFT CDF", "time to first token (ms)", offsetof(bench_result, ttft)},
        {"tpot", "TPOT CDF", "time per output token (ms)", offsetof(bench_result, tpot)},
        {"itl", "ITL CDF", "inter-token (inter-chunk) latency (ms)", offsetof(bench_result, itl)},
        {"e2e", "E2E latency CDF", "end-to-end latency (ms)", offsetof(bench_result, e2e)},
    };
    char plots[8][4200];
    int n_plots = 0;
    for (size_t i = 0; i < sizeof(cdfs) / sizeof(cdfs[0]); i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s-cdf-%s.svg", stem, cdfs[i].suffix);
        if (plot_cdf(p, cdfs[i].title, cdfs[i].xlab, res, n_res, cdfs[i].off, NULL) == 0)
            snprintf(plots[n_plots++], sizeof(plots[0]), "%s-cdf-%s.svg", base, cdfs[i].suffix);
    }
    bool any_warm = false;
    for (int j = 0; j < n_res; j++) any_warm |= res[j].ttft_warm.n > 0 || res[j].ttft_cold.n > 0;
    if (any_warm) {
        char p[4200];
        snprintf(p, sizeof(p), "%s-ttft-cold-warm.svg", stem);
        if (plot_cold_warm(p, res, n_res) == 0)
            snprintf(plots[n_plots++], sizeof(plots[0]), "%s-ttft-cold-warm.svg", base);
    }
    int distinct_c = 0;
    for (int j = 0; j < n_res; j++) {
        bool seen = false;
        for (int k = 0; k < j; k++) seen |= res[k].concurrency == res[j].concurrency;
        distinct_c += !seen;
    }
    if (distinct_c >= 2) {
        char p[4200];
        snprintf(p, sizeof(p), "%s-throughput.svg", stem);
        if (plot_throughput(p, res, n_res) == 0)
            snprintf(plots[n_plots++], sizeof(plots[0]), "%s-throughput.svg", base);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        sp_seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
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
    if (rc) sp_seterr(err, errlen, "cannot write %s", path);
    return rc;
}
