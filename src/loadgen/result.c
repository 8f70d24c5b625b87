/* result.c: turns measured runs into numbers: each configuration's
 * throughput, latency percentiles, goodput against the SLO, cold/warm TTFT,
 * H_tokens, acceptance, KV use, and the server's own counters of work done
 * (read from /metrics and reconciled with what the client saw). report.c
 * writes them out, plot.c draws them. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/loadgen.h"
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
    seterr(err, errlen, "invalid --slo '%s': want e.g. ttft=500ms,tpot=50ms,e2e=10s "
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
    if (isnan(before[BENCH_C_FINISHED]) || isnan(after[BENCH_C_FINISHED])) return;
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
        {BENCH_C_FINISHED, r->n_ok, "requests", true},
        {BENCH_C_PROMPT, (double)r->prompt_tokens, "prompt tokens", r->usage_seen},
        {BENCH_C_COMPLETION, (double)r->output_tokens, "completion tokens", r->usage_seen},
        {BENCH_C_CACHED, (double)r->cached_tokens, "cached tokens", r->cached_seen},
        {BENCH_C_SPEC_DRAFTED, (double)r->spec_drafted, "drafted tokens", r->has_spec},
        {BENCH_C_SPEC_ACCEPTED, (double)r->spec_accepted, "accepted tokens", r->has_spec},
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
