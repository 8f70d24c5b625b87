/* bench_engine.c: benchmark of the serving engine through the
 * public engine API: token-id prompts submitted with sp_engine_submit,
 * callbacks that only count and time, and the engine's own statistics.
 *
 * usage: bin/bench_engine MODEL [-t THREADS] [--seed S]
 *          [--shared-doc PREFIX,SUFFIX,N [--cold-runs K] [--doc-max-tokens M]]
 *          [--no-reuse N,PROMPT,GEN,CONC [--reps R]]
 *          [--batching GEN,C1,C2,... [--batch-prompt L]]
 *
 * --shared-doc: N requests = one common PREFIX + a SUFFIX of their own
 *   (seeded random token ids, never 0..2), M (8) greedy tokens each, one at a
 *   time. Run (a) with the prefix cache off, the first K (default N) requests,
 *   all cold; (b) with it on, all N in order: request 0 cold, 1..N-1 warm.
 *   Reports cold TTFT (median of (a)), warm TTFT (median of (b) 1..N-1), their
 *   ratio, H_tokens and the prompt positions computed with and without cache.
 * --no-reuse: N requests with distinct random prompts (distinct first token:
 *   nothing can be shared) of PROMPT tokens, GEN tokens each (ignore_eos),
 *   CONC in flight (the next is submitted from the finishing request's
 *   callback). Each repetition runs cache on and cache off on fresh engines,
 *   in alternating order; the best of R (default 3) is reported per mode.
 *   Throughput = (prompt + generated tokens) / wall seconds.
 * --batching: for each C, C requests with distinct L-token (16) prompts are
 *   submitted at once (max_seqs = C, max_batch_tokens >= C*L so that every
 *   prefill is in the first step), GEN tokens each (ignore_eos, greedy).
 *   Decode tokens/s = tokens generated after the last request's first token /
 *   (last token - last first token); "first->last" tokens/s = all generated
 *   tokens / (last token - first token of any request). Mean TPOT and TTFT
 *   come from sp_request_stats.
 *
 * Prints Markdown tables and, last, one JSON line with every number. Progress
 * goes to stderr. Exit status 1 on any engine error, 2 on bad arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "common.h"
#include "kernels/kernels.h"
#include "specula.h"

static size_t kv_bytes_per_block(const sp_model_info *h, int32_t bs) {
    /* K and V, F16, every layer; a little slack for the pool's own layout */
    return (size_t)bs * (size_t)h->n_layer * (size_t)h->n_head_kv * (size_t)h->head_dim * 2 * 2;
}

/* ---- workloads ------------------------------------------------------------------ */

typedef struct {
    int prefix, suffix, n, cold_runs, max_tokens;
    double cold_ttft_med, cold_ttft_min, cold_ttft_max, cold0_on_ttft;
    double warm_ttft_med, warm_ttft_min, warm_ttft_max, ratio;
    double h_tokens_engine, h_tokens_warm;
    uint64_t prefill_off, prefill_on, prefill_off_full, hit_tokens, query_tokens;
    int32_t *cached;
    double *ttft_on, *ttft_off;
} shared_doc_res;

static void bench_shared_doc(const sp_model *m, int threads, shared_doc_res *R) {
    const sp_model_info *h = sp_model_get_info(m);
    const int P = R->prefix, S = R->suffix, N = R->n, K = R->cold_runs, M = R->max_tokens;
    const int32_t bs = 16;
    sp_token *prefix = xmalloc(sizeof(sp_token) * (size_t)P);
    for (int i = 0; i < P; i++) prefix[i] = rand_tok(h->n_vocab);
    if (prefix[0] == h->n_vocab - 1) prefix[0] = 3;
    prompt_t *prompts = xmalloc(sizeof(prompt_t) * (size_t)N);
    for (int i = 0; i < N; i++) {
        prompts[i].toks = xmalloc(sizeof(sp_token) * (size_t)(P + S));
        memcpy(prompts[i].toks, prefix, sizeof(sp_token) * (size_t)P);
        for (int j = 0; j < S; j++) prompts[i].toks[P + j] = rand_tok(h->n_vocab);
        prompts[i].n = P + S;
        prompts[i].gen = M;
    }
    sp_engine_params ep = sp_engine_default_params();
    ep.n_threads = threads;
    ep.max_seqs = 2;
    ep.max_batch_tokens = 512;
    ep.kv_block_size = bs;
    ep.n_ctx = round_up(P + S + M, bs);
    /* the prefix plus three whole requests */
    ep.kv_mem = kv_bytes_per_block(h, bs) * (size_t)((P + 3 * ep.n_ctx) / bs + 8);
    sp_request_params rp = base_params();
    R->cached = xcalloc((size_t)N, sizeof(int32_t));
    R->ttft_on = xcalloc((size_t)N, sizeof(double));
    R->ttft_off = xcalloc((size_t)K, sizeof(double));
    sp_engine_stats s0, s1;

    /* (a) cache off: K cold requests, one at a time */
    ep.prefix_cache = false;
    sp_engine *e = make_engine(m, ep);
    warmup(e, h->n_vocab, &rng_state);
    sp_engine_get_stats(e, &s0);
    for (int i = 0; i < K; i++) {
        req q;
        memset(&q, 0, sizeof(q));
        run_requests(e, &prompts[i], 1, 1, &rp, &q);
        R->ttft_off[i] = q.st.ttft_ms;
        fprintf(stderr, "shared-doc cache off: request %d ttft %.1f ms\n", i, q.st.ttft_ms);
    }
    sp_engine_get_stats(e, &s1);
    R->prefill_off = s1.prefill_tokens - s0.prefill_tokens;
    sp_engine_free(e);

    /* (b) cache on: all N in order */
    ep.prefix_cache = true;
    e = make_engine(m, ep);
    warmup(e, h->n_vocab, &rng_state);
    sp_engine_get_stats(e, &s0);
    int64_t sum_cached = 0, sum_prompt = 0;
    for (int i = 0; i < N; i++) {
        req q;
        memset(&q, 0, sizeof(q));
        run_requests(e, &prompts[i], 1, 1, &rp, &q);
        R->ttft_on[i] = q.st.ttft_ms;
        R->cached[i] = q.st.cached_tokens;
        if (i > 0) sum_cached += q.st.cached_tokens, sum_prompt += q.st.prompt_tokens;
        fprintf(stderr, "shared-doc cache on: request %d ttft %.1f ms, cached %d of %d\n", i,
                q.st.ttft_ms, q.st.cached_tokens, q.st.prompt_tokens);
    }
    sp_engine_get_stats(e, &s1);
    char err[512];
    if (sp_engine_check(e, err, sizeof(err))) die("engine invariant check", err);
    sp_engine_free(e);
    R->prefill_on = s1.prefill_tokens - s0.prefill_tokens;
    R->hit_tokens = s1.cache_hit_tokens - s0.cache_hit_tokens;
    R->query_tokens = s1.cache_query_tokens - s0.cache_query_tokens;
    R->h_tokens_engine = R->query_tokens ? (double)R->hit_tokens / (double)R->query_tokens : 0;
    R->h_tokens_warm = sum_prompt ? (double)sum_cached / (double)sum_prompt : 0;
    R->prefill_off_full = (uint64_t)N * (uint64_t)(P + S);

    R->cold_ttft_med = median(R->ttft_off, K);
    R->cold_ttft_min = R->cold_ttft_max = R->ttft_off[0];
    for (int i = 1; i < K; i++) {
        R->cold_ttft_min = fmin(R->cold_ttft_min, R->ttft_off[i]);
        R->cold_ttft_max = fmax(R->cold_ttft_max, R->ttft_off[i]);
    }
    R->cold0_on_ttft = R->ttft_on[0];
    if (N > 1) {
        R->warm_ttft_med = median(R->ttft_on + 1, N - 1);
        R->warm_ttft_min = R->warm_ttft_max = R->ttft_on[1];
        for (int i = 2; i < N; i++) {
            R->warm_ttft_min = fmin(R->warm_ttft_min, R->ttft_on[i]);
            R->warm_ttft_max = fmax(R->warm_ttft_max, R->ttft_on[i]);
        }
    } else {
        R->warm_ttft_med = R->warm_ttft_min = R->warm_ttft_max = NAN;
    }
    R->ratio = R->warm_ttft_med / R->cold_ttft_med;
    for (int i = 0; i < N; i++) free(prompts[i].toks);
    free(prompts);
    free(prefix);
}

typedef struct {
    int n, prompt, gen, conc, reps;
    double tps_on[16], tps_off[16];
    double best_on, best_off, ratio;
    uint64_t hit_tokens_on, evictions_on;
} no_reuse_res;

static double no_reuse_once(const sp_model *m, int threads, bool cache, const prompt_t *prompts,
                            no_reuse_res *R) {
    const sp_model_info *h = sp_model_get_info(m);
    sp_engine_params ep = sp_engine_default_params();
    ep.n_threads = threads;
    ep.max_seqs = R->conc;
    ep.max_batch_tokens = 512 > R->conc ? 512 : R->conc;
    ep.n_ctx = round_up(R->prompt + R->gen, 16);
    ep.prefix_cache = cache;
    sp_engine *e = make_engine(m, ep);
    warmup(e, h->n_vocab, &rng_state);
    sp_engine_stats s0, s1;
    sp_engine_get_stats(e, &s0);
    req *q = xcalloc((size_t)R->n, sizeof(req));
    sp_request_params rp = base_params();
    double wall = run_requests(e, prompts, R->n, R->conc, &rp, q);
    sp_engine_get_stats(e, &s1);
    uint64_t toks = 0;
    for (int i = 0; i < R->n; i++) toks += (uint64_t)(q[i].st.prompt_tokens + q[i].st.completion_tokens);
    if (cache) {
        R->hit_tokens_on += s1.cache_hit_tokens - s0.cache_hit_tokens;
        R->evictions_on += s1.evictions_pressure - s0.evictions_pressure;
    }
    free(q);
    sp_engine_free(e);
    return (double)toks / wall;
}

static void bench_no_reuse(const sp_model *m, int threads, no_reuse_res *R) {
    const sp_model_info *h = sp_model_get_info(m);
    prompt_t *prompts = xmalloc(sizeof(prompt_t) * (size_t)R->n);
    for (int i = 0; i < R->n; i++) {
        prompts[i].toks = xmalloc(sizeof(sp_token) * (size_t)R->prompt);
        prompts[i].toks[0] = 3 + (sp_token)(i % (h->n_vocab - 4)); /* distinct, never n_vocab-1 */
        for (int j = 1; j < R->prompt; j++) prompts[i].toks[j] = rand_tok(h->n_vocab);
        prompts[i].n = R->prompt;
        prompts[i].gen = R->gen;
    }
    R->best_on = R->best_off = 0;
    for (int rep = 0; rep < R->reps; rep++) {
        for (int k = 0; k < 2; k++) {
            bool cache = (rep + k) % 2 == 0;
            double tps = no_reuse_once(m, threads, cache, prompts, R);
            if (cache) R->tps_on[rep] = tps, R->best_on = fmax(R->best_on, tps);
            else R->tps_off[rep] = tps, R->best_off = fmax(R->best_off, tps);
            fprintf(stderr, "no-reuse rep %d cache %s: %.2f tokens/s\n", rep, cache ? "on" : "off",
                    tps);
        }
    }
    R->ratio = R->best_on / R->best_off;
    for (int i = 0; i < R->n; i++) free(prompts[i].toks);
    free(prompts);
}

typedef struct {
    int c;
    int64_t gen_tokens, decode_tokens;
    double decode_s, first_last_s, decode_tps, first_last_tps, tpot_ms, ttft_ms;
} batching_res;

static void bench_batching(const sp_model *m, int threads, int gen, int plen_each, int c,
                           batching_res *R) {
    const sp_model_info *h = sp_model_get_info(m);
    prompt_t *prompts = xmalloc(sizeof(prompt_t) * (size_t)c);
    for (int i = 0; i < c; i++) {
        prompts[i].toks = xmalloc(sizeof(sp_token) * (size_t)plen_each);
        prompts[i].toks[0] = 3 + (sp_token)(i % (h->n_vocab - 4));
        for (int j = 1; j < plen_each; j++) prompts[i].toks[j] = rand_tok(h->n_vocab);
        prompts[i].n = plen_each;
        prompts[i].gen = gen;
    }
    sp_engine_params ep = sp_engine_default_params();
    ep.n_threads = threads;
    ep.max_seqs = c;
    ep.max_batch_tokens = c * plen_each > 512 ? c * plen_each : 512;
    ep.n_ctx = round_up(plen_each + gen, 16);
    sp_engine *e = make_engine(m, ep);
    warmup(e, h->n_vocab, &rng_state);
    req *q = xcalloc((size_t)c, sizeof(req));
    for (int i = 0; i < c; i++) {
        q[i].cap_ev = gen + 1;
        q[i].ev_t = xmalloc(sizeof(double) * (size_t)(gen + 1));
        q[i].ev_n = xmalloc(sizeof(int32_t) * (size_t)(gen + 1));
    }
    sp_request_params rp = base_params();
    run_requests(e, prompts, c, c, &rp, q);
    sp_engine_free(e);
    double first_min = 1e300, first_max = 0, last = 0, tpot = 0, ttft = 0;
    int64_t total = 0;
    for (int i = 0; i < c; i++) {
        first_min = fmin(first_min, q[i].t_first);
        first_max = fmax(first_max, q[i].t_first);
        last = fmax(last, q[i].t_last);
        total += q[i].n_gen;
        tpot += q[i].st.tpot_ms;
        ttft += q[i].st.ttft_ms;
    }
    int64_t after = 0;
    for (int i = 0; i < c; i++)
        for (int j = 0; j < q[i].n_ev; j++)
            if (q[i].ev_t[j] > first_max) after += q[i].ev_n[j];
    R->c = c;
    R->gen_tokens = total;
    R->decode_tokens = after;
    R->decode_s = last - first_max;
    R->first_last_s = last - first_min;
    R->decode_tps = R->decode_s > 0 ? (double)after / R->decode_s : NAN;
    R->first_last_tps = R->first_last_s > 0 ? (double)total / R->first_last_s : NAN;
    R->tpot_ms = tpot / c;
    R->ttft_ms = ttft / c;
    for (int i = 0; i < c; i++) {
        free(q[i].ev_t);
        free(q[i].ev_n);
        free(prompts[i].toks);
    }
    free(q);
    free(prompts);
}

/* ---- main ------------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f, "usage: bench_engine MODEL [-t THREADS] [--seed S]\n"
               "         [--shared-doc PREFIX,SUFFIX,N [--cold-runs K] [--doc-max-tokens M]]\n"
               "         [--no-reuse N,PROMPT,GEN,CONC [--reps R]]\n"
               "         [--batching GEN,C1,C2,... [--batch-prompt L]]\n");
}

int main(int argc, char **argv) {
    bench_prog = "bench_engine";
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *path = argv[1];
    int threads = 2, cold_runs = -1, doc_max = 8, reps = 3, batch_prompt = 16;
    int sd[3] = {0}, nr[4] = {0}, bt[33] = {0}, n_bt = 0;
    bool do_sd = false, do_nr = false, do_bt = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool bad = false;
        if (!v) bad = true;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = (threads = atoi(v)) < 1;
        else if (!strcmp(a, "--seed")) rng_state = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--shared-doc")) bad = !(do_sd = parse_ints(v, sd, 3) == 3);
        else if (!strcmp(a, "--cold-runs")) bad = (cold_runs = atoi(v)) < 1;
        else if (!strcmp(a, "--doc-max-tokens")) bad = (doc_max = atoi(v)) < 1;
        else if (!strcmp(a, "--no-reuse")) bad = !(do_nr = parse_ints(v, nr, 4) == 4);
        else if (!strcmp(a, "--reps")) bad = (reps = atoi(v)) < 1 || reps > 16;
        else if (!strcmp(a, "--batching")) bad = !(do_bt = (n_bt = parse_ints(v, bt, 33)) >= 2);
        else if (!strcmp(a, "--batch-prompt")) bad = (batch_prompt = atoi(v)) < 1;
        else bad = true;
        if (bad) {
            fprintf(stderr, "bench_engine: bad option %s%s%s\n", a, v ? " " : "", v ? v : "");
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!do_sd && !do_nr && !do_bt) {
        fprintf(stderr, "bench_engine: choose at least one of --shared-doc, --no-reuse, "
                        "--batching\n");
        usage(stderr);
        return 2;
    }
    if (do_sd && (cold_runs < 0 || cold_runs > sd[2])) cold_runs = sd[2];

    const char *level = kernels_init();
    char err[512];
    double t0 = time_s();
    sp_model *m = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    if (!m) die("loading the model", err);
    const double load_s = time_s() - t0;
    const sp_model_info *h = sp_model_get_info(m);
    if (h->n_vocab < 64) die("the model's vocabulary is too small for random prompts", NULL);

    printf("## engine benchmark: %s\n\n", path);
    printf("| metric | value |\n|---|---|\n");
    printf("| model | %s (%s, %.0f MiB of weights, %d layers, n_embd %d, %d/%d heads, "
           "n_ctx_train %d) |\n",
           path, h->arch, h->weight_bytes / 1048576.0, h->n_layer, h->n_embd, h->n_head,
           h->n_head_kv, h->n_ctx_train);
    printf("| kernels / threads | %s / %d |\n", level, threads);
    printf("| load | %.0f ms |\n", load_s * 1e3);
    fflush(stdout);

    /* JSON pieces, joined at the end */
    char js_sd[4096] = "null", js_nr[2048] = "null", js_bt[8192] = "null";

    if (do_sd) {
        shared_doc_res R;
        memset(&R, 0, sizeof(R));
        R.prefix = sd[0], R.suffix = sd[1], R.n = sd[2], R.cold_runs = cold_runs,
        R.max_tokens = doc_max;
        if ((int64_t)R.prefix + R.suffix + R.max_tokens > (1 << 20))
            die("--shared-doc: prompt too long", NULL);
        if (R.n < 2) die("--shared-doc: N must be at least 2 (one cold, then warm ones)", NULL);
        bench_shared_doc(m, threads, &R);
        printf("\n### shared document: %d-token prefix + %d-token suffix, %d requests, "
               "%d tokens each, one at a time\n\n",
               R.prefix, R.suffix, R.n, R.max_tokens);
        printf("| metric | value |\n|---|---|\n");
        printf("| cold TTFT, cache off (median of %d) | %.1f ms (min %.1f, max %.1f) |\n", R.cold_runs,
               R.cold_ttft_med, R.cold_ttft_min, R.cold_ttft_max);
        printf("| cold TTFT, cache on, request 0 | %.1f ms |\n", R.cold0_on_ttft);
        printf("| warm TTFT, cache on (median of requests 1..%d) | %.1f ms (min %.1f, max %.1f) |\n",
               R.n - 1, R.warm_ttft_med, R.warm_ttft_min, R.warm_ttft_max);
        printf("| warm / cold TTFT (target <= 0.10) | %.3f |\n", R.ratio);
        printf("| H_tokens, warm requests (cached / prompt tokens) | %.3f |\n", R.h_tokens_warm);
        printf("| H_tokens, engine stats (hit / query tokens, all %d) | %.3f (%llu / %llu) |\n",
               R.n, R.h_tokens_engine, (unsigned long long)R.hit_tokens,
               (unsigned long long)R.query_tokens);
        printf("| cached_tokens per request | ");
        for (int i = 0; i < R.n; i++) printf("%s%d", i ? ", " : "", R.cached[i]);
        printf(" |\n");
        printf("| prefill tokens computed, cache off | %llu for %d requests (%llu for all %d) |\n",
               (unsigned long long)R.prefill_off, R.cold_runs,
               (unsigned long long)(R.cold_runs == R.n ? R.prefill_off
                                                       : R.prefill_off / R.cold_runs * R.n),
               R.n);
        printf("| prefill tokens computed, cache on | %llu for %d requests (%.1f%% of cache off) |\n",
               (unsigned long long)R.prefill_on, R.n,
               100.0 * (double)R.prefill_on / (double)R.prefill_off_full);
        fflush(stdout);
        int o = snprintf(js_sd, sizeof(js_sd),
                         "{\"prefix\": %d, \"suffix\": %d, \"n\": %d, \"max_tokens\": %d, "
                         "\"cold_runs\": %d, \"cold_ttft_ms\": %.2f, \"cold_on_ttft_ms\": %.2f, "
                         "\"warm_ttft_ms\": %.2f, \"warm_cold_ratio\": %.4f, "
                         "\"h_tokens_warm\": %.4f, \"h_tokens_engine\": %.4f, "
                         "\"prefill_tokens_off\": %llu, \"prefill_tokens_on\": %llu, "
                         "\"ttft_off_ms\": [",
                         R.prefix, R.suffix, R.n, R.max_tokens, R.cold_runs, R.cold_ttft_med,
                         R.cold0_on_ttft, R.warm_ttft_med, R.ratio, R.h_tokens_warm,
                         R.h_tokens_engine, (unsigned long long)R.prefill_off,
                         (unsigned long long)R.prefill_on);
        for (int i = 0; i < R.cold_runs && o < (int)sizeof(js_sd) - 64; i++)
            o += snprintf(js_sd + o, sizeof(js_sd) - (size_t)o, "%s%.2f", i ? ", " : "",
                          R.ttft_off[i]);
        o += snprintf(js_sd + o, sizeof(js_sd) - (size_t)o, "], \"ttft_on_ms\": [");
        for (int i = 0; i < R.n && o < (int)sizeof(js_sd) - 64; i++)
            o += snprintf(js_sd + o, sizeof(js_sd) - (size_t)o, "%s%.2f", i ? ", " : "",
                          R.ttft_on[i]);
        o += snprintf(js_sd + o, sizeof(js_sd) - (size_t)o, "], \"cached_tokens\": [");
        for (int i = 0; i < R.n && o < (int)sizeof(js_sd) - 64; i++)
            o += snprintf(js_sd + o, sizeof(js_sd) - (size_t)o, "%s%d", i ? ", " : "", R.cached[i]);
        snprintf(js_sd + o, sizeof(js_sd) - (size_t)o, "]}");
        free(R.cached);
        free(R.ttft_on);
        free(R.ttft_off);
    }

    if (do_nr) {
        no_reuse_res R;
        memset(&R, 0, sizeof(R));
        R.n = nr[0], R.prompt = nr[1], R.gen = nr[2], R.conc = nr[3], R.reps = reps;
        if (R.conc > 1024) die("--no-reuse: concurrency above 1024", NULL);
        if (R.n > h->n_vocab - 4) die("--no-reuse: more requests than distinct first tokens", NULL);
        bench_no_reuse(m, threads, &R);
        printf("\n### no reuse: %d requests of %d prompt + %d generated tokens, %d in flight, "
               "best of %d\n\n",
               R.n, R.prompt, R.gen, R.conc, R.reps);
        printf("| metric | value |\n|---|---|\n");
        printf("| throughput, cache on | %.2f tokens/s (runs:", R.best_on);
        for (int i = 0; i < R.reps; i++) printf(" %.2f", R.tps_on[i]);
        printf(") |\n| throughput, cache off | %.2f tokens/s (runs:", R.best_off);
        for (int i = 0; i < R.reps; i++) printf(" %.2f", R.tps_off[i]);
        printf(") |\n| on / off (target >= 0.99) | %.4f |\n", R.ratio);
        printf("| cache hit tokens / pressure evictions, cache on | %llu / %llu |\n",
               (unsigned long long)R.hit_tokens_on, (unsigned long long)R.evictions_on);
        fflush(stdout);
        snprintf(js_nr, sizeof(js_nr),
                 "{\"n\": %d, \"prompt\": %d, \"gen\": %d, \"conc\": %d, \"reps\": %d, "
                 "\"tps_on\": %.3f, \"tps_off\": %.3f, \"ratio\": %.4f, \"hit_tokens_on\": %llu}",
                 R.n, R.prompt, R.gen, R.conc, R.reps, R.best_on, R.best_off, R.ratio,
                 (unsigned long long)R.hit_tokens_on);
    }

    if (do_bt) {
        const int gen = bt[0];
        const int nc = n_bt - 1;
        batching_res *R = xcalloc((size_t)nc, sizeof(batching_res));
        for (int k = 0; k < nc; k++) {
            if (bt[1 + k] > 1024) die("--batching: concurrency above 1024", NULL);
            bench_batching(m, threads, gen, batch_prompt, bt[1 + k], &R[k]);
            fprintf(stderr, "batching C=%d: %.2f decode tokens/s\n", R[k].c, R[k].decode_tps);
        }
        printf("\n### continuous batching: C requests of %d prompt tokens at once, %d tokens each\n\n",
               batch_prompt, gen);
        printf("| C | decode tokens/s | vs C=%d | first->last tokens/s | mean TPOT | mean TTFT |\n",
               R[0].c);
        printf("|---|---|---|---|---|---|\n");
        int o = snprintf(js_bt, sizeof(js_bt), "{\"gen\": %d, \"prompt\": %d, \"runs\": [", gen,
                         batch_prompt);
        for (int k = 0; k < nc; k++) {
            printf("| %d | %.2f | %.2fx | %.2f | %.1f ms | %.1f ms |\n", R[k].c, R[k].decode_tps,
                   R[k].decode_tps / R[0].decode_tps, R[k].first_last_tps, R[k].tpot_ms,
                   R[k].ttft_ms);
            if (o < (int)sizeof(js_bt) - 256)
                o += snprintf(js_bt + o, sizeof(js_bt) - (size_t)o,
                              "%s{\"c\": %d, \"decode_tps\": %.3f, \"first_last_tps\": %.3f, "
                              "\"tpot_ms\": %.3f, \"ttft_ms\": %.3f, \"gen_tokens\": %lld}",
                              k ? ", " : "", R[k].c, R[k].decode_tps, R[k].first_last_tps,
                              R[k].tpot_ms, R[k].ttft_ms, (long long)R[k].gen_tokens);
        }
        snprintf(js_bt + o, sizeof(js_bt) - (size_t)o, "]}");
        free(R);
    }

    printf("{\"model\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"shared_doc\": %s, "
           "\"no_reuse\": %s, \"batching\": %s}\n",
           path, threads, level, js_sd, js_nr, js_bt);
    sp_model_free(m);
    return 0;
}
