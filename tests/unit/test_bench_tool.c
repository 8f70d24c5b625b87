/* test_bench_tool.c: the harness of `specula bench` itself: percentiles
 * against hand-computed values, the SSE parser under every split of a
 * stream, the stream-event parser, /metrics parsing, SLO parsing, the
 * held-out rule and corpus rebuild, deterministic workloads, the file:
 * workload, the result arithmetic (TTFT, TPOT, ITL, cold/warm,
 * reconciliation) on a synthetic run, the report's rows (the goodput
 * fraction, n/a for what was never measured, never nan) and the SVG plots
 * (step CDFs with a marker per sample, axes that fit, the legend outside). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadgen/loadgen.h"
#include "test.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

static void test_percentiles(void) {
    double v[] = {5, 1, 4, 2, 3};
    CHECK(near(bstat_quantile(v, 5, 0.5), 3), "p50 of 1..5");
    CHECK(near(bstat_quantile(v, 5, 0.9), 4.6), "p90 of 1..5: %g", bstat_quantile(v, 5, 0.9));
    CHECK(near(bstat_quantile(v, 5, 0.99), 4.96), "p99 of 1..5");
    CHECK(near(bstat_quantile(v, 5, 0), 1) && near(bstat_quantile(v, 5, 1), 5), "ends");
    double e[] = {4, 1, 3, 2};
    CHECK(near(bstat_quantile(e, 4, 0.5), 2.5), "even count: midpoint");
    double one[] = {7};
    CHECK(near(bstat_quantile(one, 1, 0.99), 7), "one sample");
    CHECK(isnan(bstat_quantile(NULL, 0, 0.5)), "empty is NaN");
    /* numpy.percentile(range(100), [50, 90, 99]) = 49.5, 89.1, 98.01 */
    double h[100];
    for (int i = 0; i < 100; i++) h[i] = 99 - i;
    bstat_summary s = bstat_summarize(h, 100);
    CHECK(near(s.p50, 49.5) && near(s.p90, 89.1) && near(s.p99, 98.01), "0..99: %g %g %g", s.p50,
          s.p90, s.p99);
    CHECK(near(s.mean, 49.5) && near(s.min, 0) && near(s.max, 99), "mean/min/max");
    CHECK(near(s.sd, sqrt(841.6666666666666)), "sample sd %g", s.sd);
    bstat_summary z = bstat_summarize(NULL, 0);
    CHECK(z.n == 0 && isnan(z.p50) && isnan(z.mean), "empty summary");
}

typedef struct {
    char ev[16][256];
    int n;
} events;

static int collect(const char *data, size_t len, void *user) {
    events *e = user;
    if (e->n < 16) {
        snprintf(e->ev[e->n], sizeof(e->ev[0]), "%.*s", (int)len, data);
        e->n++;
    }
    return 0;
}

static void test_sse_splits(void) {
    /* LF, CRLF and CR endings, a comment, a multi-line event, an ignored
     * field, an event without data, a final event without a blank line */
    const char *stream = "data: {\"a\":1}\n\n"
                         ": keep-alive\r\n"
                         "data: x\r\ndata:y\r\n\r\n"
                         "event: ping\nid: 3\n\n"
                         "data: z\r\r"
                         "data: [DONE]";
    const char *want[] = {"{\"a\":1}", "x\ny", "z", "[DONE]"};
    size_t n = strlen(stream);
    /* every split into two pieces, and byte by byte */
    for (size_t cut = 0; cut <= n + 1; cut++) {
        events e = {0};
        sse_parser p;
        sse_init(&p, collect, &e);
        if (cut <= n) {
            CHECK(sse_feed(&p, stream, cut) == 0, "feed");
            CHECK(sse_feed(&p, stream + cut, n - cut) == 0, "feed");
        } else {
            for (size_t i = 0; i < n; i++) sse_feed(&p, stream + i, 1);
        }
        CHECK(sse_finish(&p) == 0, "finish");
        CHECK(e.n == 4, "cut %zu: %d events", cut, e.n);
        for (int i = 0; i < 4 && i < e.n; i++)
            CHECK(!strcmp(e.ev[i], want[i]), "cut %zu event %d: '%s'", cut, i, e.ev[i]);
        sse_free(&p);
    }
    /* an oversized line is an error, not unbounded memory */
    events e = {0};
    sse_parser p;
    sse_init(&p, collect, &e);
    p.max_bytes = 64;
    char big[200];
    memset(big, 'a', sizeof(big));
    CHECK(sse_feed(&p, big, sizeof(big)) < 0, "oversized line refused");
    sse_free(&p);
}

static void test_stream_events(void) {
    bench_rec r;
    memset(&r, 0, sizeof(r));
    r.t_first = r.t_last = -1;
    r.prompt_tokens = r.completion_tokens = r.cached_tokens = -1;
    const char *c1 = "{\"choices\": [{\"index\": 0, \"text\": \"def\", \"finish_reason\": null}]}";
    const char *c2 = "{\"choices\": [{\"index\": 0, \"delta\": {\"content\": \" f\"}}]}";
    const char *c3 = "{\"choices\": [{\"text\": \"\", \"finish_reason\": \"length\"}], \"specula\": "
                     "{\"queue_ms\": 1.5, \"ttft_ms\": 9, \"spec\": {\"steps\": 3, \"drafted\": 8, "
                     "\"accepted\": 5}}}";
    const char *c4 = "{\"choices\": [], \"usage\": {\"prompt_tokens\": 40, \"completion_tokens\": 6, "
                     "\"prompt_tokens_details\": {\"cached_tokens\": 32}}}";
    CHECK(bench_rec_event(&r, c1, strlen(c1), 1.0) == 0, "chunk 1");
    CHECK(bench_rec_event(&r, c2, strlen(c2), 1.5) == 0, "chat-style chunk");
    CHECK(bench_rec_event(&r, c3, strlen(c3), 1.6) == 0, "final chunk");
    CHECK(bench_rec_event(&r, c4, strlen(c4), 1.6) == 0, "usage chunk");
    CHECK(bench_rec_event(&r, "[DONE]", 6, 1.7) == 1 && r.saw_done, "[DONE]");
    CHECK(r.t_first == 1.0 && r.t_last == 1.5 && r.chunk_t.n == 2, "text chunks timed: %zu",
          r.chunk_t.n);
    CHECK(r.text && !strcmp(r.text, "def f"), "text '%s'", r.text ? r.text : "");
    CHECK(!strcmp(r.finish, "length"), "finish");
    CHECK(r.prompt_tokens == 40 && r.completion_tokens == 6 && r.cached_tokens == 32, "usage");
    CHECK(r.has_spec && r.spec_steps == 3 && r.spec_drafted == 8 && r.spec_accepted == 5, "spec");
    CHECK(r.srv_ttft_ms == 9 && r.srv_queue_ms == 1.5, "server timings");
    CHECK(bench_rec_event(&r, "{not json", 9, 2) < 0 && r.err[0], "garbage is an error");
    r.err[0] = 0;
    const char *e = "{\"error\": {\"message\": \"boom\", \"type\": \"server_error\"}}";
    CHECK(bench_rec_event(&r, e, strlen(e), 2) < 0 && strstr(r.err, "boom"), "error event: %s", r.err);
    dvec_free(&r.chunk_t);
    free(r.text);
}

static void test_prometheus_and_slo(void) {
    const char *m = "# HELP specula_requests_finished_total x\n"
                    "# TYPE specula_requests_finished_total counter\n"
                    "specula_requests_finished_total{reason=\"stop\"} 3\n"
                    "specula_requests_finished_total{reason=\"length\"} 4\n"
                    "specula_requests_finished_total_other 100\n"
                    "specula_kv_blocks{state=\"free\"} 10\n"
                    "specula_kv_blocks{state=\"in_use\"} 6\n"
                    "specula_kv_blocks_capacity 16\n";
    CHECK(bench_prom_value(m, "specula_requests_finished_total") == 7, "labels summed");
    CHECK(bench_prom_value(m, "specula_kv_blocks{state=\"in_use\"}") == 6, "exact label");
    CHECK(bench_prom_value(m, "specula_kv_blocks_capacity") == 16, "plain");
    CHECK(isnan(bench_prom_value(m, "specula_nope")), "absent is NaN");
    bench_slo s;
    char err[256];
    CHECK(bench_slo_parse("ttft=500ms,tpot=50,e2e=2s", &s, err, sizeof(err)) == 0 &&
          s.ttft_ms == 500 && s.tpot_ms == 50 && s.e2e_ms == 2000, "slo");
    CHECK(bench_slo_parse("ttft=fast", &s, err, sizeof(err)) < 0, "bad value");
    CHECK(bench_slo_parse("latency=1s", &s, err, sizeof(err)) < 0, "bad key");
    CHECK(bench_slo_parse("ttft=5h", &s, err, sizeof(err)) < 0, "bad unit");
}

static void test_held_out_rule(void) {
    /* tools/train/corpus.py's split of Debian 12's Python 3.11 */
    const char *in[] = {"json", "queue", "struct", "logging", "collections", "operator", "cmd"};
    const char *out[] = {"os", "re", "asyncio", "typing", "heapq"};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
        CHECK(bench_corpus_held_out(in[i]), "%s is held out", in[i]);
    for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
        CHECK(!bench_corpus_held_out(out[i]), "%s is not held out", out[i]);
    /* the fallback rebuilds heldout.txt byte for byte, where both exist */
    size_t a_len = 0, b_len = 0;
    char err[256];
    FILE *f = fopen("build/corpus/heldout.txt", "rb");
    if (!f || access("/usr/lib/python3.11/json/__init__.py", R_OK)) {
        if (f) fclose(f);
        printf("  (no build/corpus/heldout.txt or /usr/lib/python3.11: rebuild not compared)\n");
        return;
    }
    fclose(f);
    char *a = bench_corpus_load("build/corpus/heldout.txt", &a_len, err, sizeof(err));
    char *b = bench_corpus_from_src("/usr/lib/python3.11", &b_len, err, sizeof(err));
    CHECK(a && b && a_len == b_len && !memcmp(a, b, a_len), "rebuilt corpus equals heldout.txt "
          "(%zu vs %zu bytes)", a_len, b_len);
    free(a);
    free(b);
}

/* A small corpus in heldout.txt's format, so the test needs nothing else. */
static char *tiny_corpus(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *t = malloc(cap);
    for (int f = 0; f < 4; f++) {
        n += (size_t)snprintf(t + n, cap - n, "# ==== file: mod%d/x.py ====\n\"\"\"doc %d\"\"\"\n", f, f);
        for (int d = 0; d < 6; d++)
            n += (size_t)snprintf(t + n, cap - n,
                                  "def fn_%d_%d(a, b):\n    x = a + %d\n    y = b * x\n"
                                  "    return fn_%d_%d(y, x)\n\nclass K%d%d:\n    pass\n\n",
                                  f, d, d, f, d, f, d);
    }
    *len = n;
    return t;
}

static bool same_workload(const bench_workload *a, const bench_workload *b) {
    if (a->n != b->n || a->n_convs != b->n_convs) return false;
    for (int32_t i = 0; i < a->n; i++)
        if (strcmp(a->items[i].prompt, b->items[i].prompt) ||
            a->items[i].max_tokens != b->items[i].max_tokens || a->items[i].conv != b->items[i].conv ||
            a->items[i].turn != b->items[i].turn)
            return false;
    return true;
}

static void check_workloads(const char *corpus, size_t len, const sp_vocab *v, const char *what) {
    char err[256];
    for (int k = 0; bench_workload_names[k]; k++) {
        bench_workload_opts o = {.name = bench_workload_names[k], .n = 12, .seed = 7,
                                 .max_model_len = 512, .vocab = v};
        bench_workload a, b, c;
        int ra = bench_workload_make(&o, corpus, len, &a, err, sizeof(err));
        int rb = bench_workload_make(&o, corpus, len, &b, err, sizeof(err));
        o.seed = 8;
        int rc = bench_workload_make(&o, corpus, len, &c, err, sizeof(err));
        CHECK(ra == 0 && rb == 0 && rc == 0, "%s/%s: %s", what, o.name, err);
        if (ra || rb || rc) continue;
        CHECK(a.n == 12, "%s/%s: %d items", what, o.name, a.n);
        CHECK(same_workload(&a, &b), "%s/%s: same seed, same prompts", what, o.name);
        CHECK(!same_workload(&a, &c), "%s/%s: another seed, other prompts", what, o.name);
        for (int32_t i = 0; i < a.n; i++) {
            CHECK(a.items[i].prompt[0] && a.items[i].max_tokens >= 1, "%s/%s: item %d", what,
                  o.name, i);
            /* what is sent must fit the context: prompt + max_tokens */
            if (v && a.items[i].conv < 0) {
                int n = sp_tokenize(v, a.items[i].prompt, strlen(a.items[i].prompt), NULL, 0, true,
                                    false);
                CHECK(n != SP_TOKENIZE_FAILED, "%s/%s: item %d: tokenizing failed", what,
                      o.name, i);
                n = n == SP_TOKENIZE_FAILED ? 0 : n < 0 ? -n : n;
                CHECK(n + a.items[i].max_tokens <= 512, "%s/%s: item %d: %d + %d tokens", what,
                      o.name, i, n, a.items[i].max_tokens);
            }
        }
        if (!strcmp(o.name, "shared-prefix")) {
            size_t l = 0;
            while (a.items[0].prompt[l] && a.items[0].prompt[l] == a.items[1].prompt[l]) l++;
            CHECK(l > strlen(a.items[0].prompt) / 2, "%s: a long common prefix (%zu bytes)", what, l);
            CHECK(strcmp(a.items[0].prompt, a.items[1].prompt), "%s: distinct suffixes", what);
        }
        if (!strcmp(o.name, "multi-turn")) {
            CHECK(a.n_convs == 3 && a.items[0].turn == 0 && a.items[3].turn == 1 &&
                  a.items[3].conv == 0, "%s: 3 conversations x 4 turns, turn-major", what);
        }
        bench_workload_free(&a);
        bench_workload_free(&b);
        bench_workload_free(&c);
    }
}

static void test_workloads_deterministic(void) {
    size_t len;
    char *t = tiny_corpus(&len);
    check_workloads(t, len, NULL, "tiny corpus");
    sp_model *m = NULL;
    const char *paths[] = {"models/specula-code-target-f16.gguf", "../models/specula-code-target-f16.gguf"};
    char err[256];
    for (size_t i = 0; i < 2 && !m; i++) {
        sp_model_params p = sp_model_default_params();
        p.vocab_only = true;
        if (!access(paths[i], R_OK)) m = sp_model_load(paths[i], p, err, sizeof(err));
    }
    if (m) check_workloads(t, len, sp_model_get_vocab(m), "tiny corpus + bundled vocab");
    free(t);
    char *c = bench_corpus_load(NULL, &len, err, sizeof(err));
    if (c) check_workloads(c, len, m ? sp_model_get_vocab(m) : NULL, "held-out corpus");
    else printf("  (no held-out corpus here: %s)\n", err);
    free(c);
    sp_model_free(m);
    bench_workload w;
    bench_workload_opts o = {.name = "nonsense"};
    CHECK(bench_workload_make(&o, "", 0, &w, err, sizeof(err)) < 0, "unknown workload refused");
    o.name = "shared-prefix";
    CHECK(bench_workload_make(&o, "no markers\n", 11, &w, err, sizeof(err)) < 0,
          "a corpus without files refused");
}

static void test_file_workload(void) {
    char path[] = "/tmp/test_bench_tool_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    const char *good = "{\"prompt\": \"a\", \"max_tokens\": 5, \"temperature\": 0.5}\n\n"
                       "{\"prompt\": \"b\"}\n";
    CHECK(write(fd, good, strlen(good)) == (ssize_t)strlen(good), "write");
    close(fd);
    char name[64], err[256];
    snprintf(name, sizeof(name), "file:%s", path);
    bench_workload_opts o = {.name = name, .output_tokens = 9};
    bench_workload w;
    CHECK(bench_workload_make(&o, NULL, 0, &w, err, sizeof(err)) == 0, "%s", err);
    CHECK(w.n == 2 && !strcmp(w.items[0].prompt, "a") && w.items[0].max_tokens == 5 &&
          w.items[1].max_tokens == 9, "lines read");
    CHECK(w.items[0].extra && strstr(w.items[0].extra, "temperature") && !w.items[1].extra,
          "other fields kept");
    bench_workload_free(&w);
    o.n = 5;
    CHECK(bench_workload_make(&o, NULL, 0, &w, err, sizeof(err)) == 0 && w.n == 5 &&
          !strcmp(w.items[4].prompt, "a"), "cycled to N");
    bench_workload_free(&w);
    FILE *f = fopen(path, "w");
    fputs("{\"prompt\": \"a\"}\n{\"prompt\": 3}\n", f);
    fclose(f);
    o.n = 0;
    CHECK(bench_workload_make(&o, NULL, 0, &w, err, sizeof(err)) < 0 && strstr(err, ":2:"),
          "bad line named: %s", err);
    unlink(path);
    o.name = "file:/nonexistent/x.jsonl";
    CHECK(bench_workload_make(&o, NULL, 0, &w, err, sizeof(err)) < 0, "missing file refused");
}

static void test_results(void) {
    /* two requests: one cold (t 0 -> first 0.5 -> chunks at .5,.6,.8 -> end 1.0, 5 tokens),
     * one warm (cached 90 of 100), and one failure */
    bench_run run = {.n = 3, .duration_s = 2.0};
    bench_rec recs[3];
    memset(recs, 0, sizeof(recs));
    run.recs = recs;
    double ch0[] = {0.5, 0.6, 0.8}, ch1[] = {1.1, 1.2};
    recs[0] = (bench_rec){.ok = true, .t_start = 0, .t_first = 0.5, .t_last = 0.8, .t_end = 1.0,
                          .prompt_tokens = 100, .completion_tokens = 5, .cached_tokens = 0,
                          .chunk_t = {ch0, 3, 3}, .prompt = "shared document A", .prompt_bytes = 17};
    recs[1] = (bench_rec){.ok = true, .t_start = 1.0, .t_first = 1.1, .t_last = 1.2, .t_end = 2.0,
                          .prompt_tokens = 100, .completion_tokens = 3, .cached_tokens = 90,
                          .chunk_t = {ch1, 2, 2}, .prompt = "shared document B", .prompt_bytes = 17,
                          .has_spec = true, .spec_steps = 2, .spec_drafted = 4, .spec_accepted = 2};
    recs[2] = (bench_rec){.ok = false, .t_first = -1};
    snprintf(recs[2].err, sizeof(recs[2].err), "HTTP 429: busy");
    bench_slo slo = {.ttft_ms = 200};
    bench_result r;
    bench_result_init(&r, "x", 2, 0);
    bench_result_add(&r, &run, &slo);
    double before[BENCH_N_COUNTERS] = {0}, after[BENCH_N_COUNTERS] = {0};
    after[0] = 2, after[1] = 200, after[2] = 8, after[3] = 90, after[11] = 4, after[12] = 2;
    bench_result_add_counters(&r, before, after);
    bench_result_finish(&r);
    CHECK(r.n == 3 && r.n_ok == 2 && strstr(r.first_err, "429"), "counts");
    CHECK(near(r.s_ttft.p50, 300) && near(r.s_ttft.min, 100), "TTFT %g", r.s_ttft.p50);
    CHECK(near(r.s_tpot.min, 50) && near(r.s_tpot.max, 75), "TPOT %g %g", r.s_tpot.min, r.s_tpot.max);
    CHECK(r.s_itl.n == 3 && near(r.s_itl.max, 200), "ITL n %zu max %g", r.s_itl.n, r.s_itl.max);
    CHECK(r.ttft_cold.n == 1 && r.ttft_warm.n == 1 && near(r.s_warm.p50, 100), "cold/warm");
    CHECK(r.h_hist[0] == 1 && r.h_hist[9] == 1, "H_tokens histogram");
    CHECK(r.n_good == 1 && near(r.goodput_req_s, 0.5), "goodput under ttft=200ms");
    CHECK(near(r.out_tok_s, 4) && near(r.req_s, 1), "throughput");
    CHECK(near(r.prefix_share, 16.0 / 34), "prefix sharing %g", r.prefix_share);
    CHECK(r.has_server && r.reconciled, "reconciled: %s", r.reconcile);
    bench_result_free(&r);
    bench_result_init(&r, "y", 2, 0);
    bench_result_add(&r, &run, NULL);
    after[1] = 201;
    bench_result_add_counters(&r, before, after);
    bench_result_finish(&r);
    CHECK(!r.reconciled && strstr(r.reconcile, "prompt tokens"), "mismatch found: %s", r.reconcile);
    bench_result_free(&r);
}

/* A run of n successful requests with these TTFTs (ms), two chunks each. */
static void synth_run(bench_run *run, bench_rec *recs, double (*ch)[2], const double *ttft_ms, int n) {
    memset(run, 0, sizeof(*run));
    memset(recs, 0, sizeof(recs[0]) * (size_t)n);
    run->recs = recs;
    run->n = n;
    run->duration_s = 2.0;
    for (int i = 0; i < n; i++) {
        double t1 = ttft_ms[i] / 1e3;
        ch[i][0] = t1, ch[i][1] = t1 + 0.05;
        recs[i] = (bench_rec){.ok = true, .t_start = 0, .t_first = t1, .t_last = t1 + 0.05,
                              .t_end = t1 + 0.1, .prompt_tokens = 10, .completion_tokens = 2,
                              .cached_tokens = -1, .chunk_t = {ch[i], 2, 2}};
    }
}

/* The line of a text report that starts with `name`, or NULL. */
static const char *report_line(const char *text, const char *name, char *out, size_t cap) {
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, strlen(name))) {
            snprintf(out, cap, "%.*s", (int)strcspn(p, "\n"), p);
            return out;
        }
    return NULL;
}

static char *report_text(const bench_report_info *ri, bench_result *res, int n) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    bench_report_text(f, ri, res, n, false);
    fclose(f);
    return buf;
}

static void test_report_rows(void) {
    double ch[3][2], ttft[3] = {100, 300, 900};
    bench_rec recs[3];
    bench_run run;
    synth_run(&run, recs, ch, ttft, 3);
    /* A: KV gauges sampled; B: the server exports the total but never the
     * in-use gauge, and C ran against nothing (every request failed) */
    bench_kv_sample ka[2] = {{.t = 0.1, .blocks_total = 16, .blocks_cached = 2, .blocks_in_use = 4},
                             {.t = 0.6, .blocks_total = 16, .blocks_cached = 4, .blocks_in_use = 8}};
    bench_kv_sample kb[1] = {{.t = 0.1, .blocks_total = 16, .blocks_cached = 4, .blocks_in_use = NAN,
                              .blocks_free = NAN}};
    bench_slo slo = {.ttft_ms = 500};
    snprintf(slo.text, sizeof(slo.text), "ttft=500ms");
    bench_result res[3];
    bench_result_init(&res[0], "A", 1, 0);
    bench_result_init(&res[1], "B", 1, 0);
    bench_result_init(&res[2], "C", 1, 0);
    run.kv = ka, run.n_kv = 2;
    bench_result_add(&res[0], &run, &slo);
    run.kv = kb, run.n_kv = 1;
    bench_result_add(&res[1], &run, &slo);
    bench_rec bad[2] = {{.ok = false, .t_first = -1}, {.ok = false, .t_first = -1}};
    snprintf(bad[0].err, sizeof(bad[0].err), "Couldn't connect to server");
    bench_run none = {.recs = bad, .n = 2};
    bench_result_add(&res[2], &none, &slo);
    for (int i = 0; i < 3; i++) bench_result_finish(&res[i]);
    CHECK(near(res[0].kv_peak_in_use, 0.5) && near(res[0].kv_mean_in_use, 0.375) &&
          near(res[0].kv_peak_cached, 0.25), "A: KV %g %g %g", res[0].kv_peak_in_use,
          res[0].kv_mean_in_use, res[0].kv_peak_cached);
    CHECK(isnan(res[1].kv_peak_in_use) && isnan(res[1].kv_mean_in_use) &&
          near(res[1].kv_peak_cached, 0.25), "B: in-use never sampled is NaN, not 0: %g %g",
          res[1].kv_peak_in_use, res[1].kv_mean_in_use);
    CHECK(isnan(res[2].kv_peak_in_use) && isnan(res[2].kv_peak_cached), "C: nothing sampled");
    bench_report_info ri = {.workload = "synthetic", .slo = &slo, .n_cfg = 1};
    char *text = report_text(&ri, res, 3), line[512];
    REQUIRE(text, "report text");
    /* the fraction row says it is a fraction: 2 of A's 3 requests met ttft=500ms */
    CHECK(report_line(text, "goodput fraction (within SLO / all requests)", line,
                      sizeof(line)) && strstr(line, " 0.667"),
          "goodput fraction row: %s", text);
    CHECK(report_line(text, "KV blocks in use, peak fraction", line, sizeof(line)) &&
          strstr(line, " 0.500") && strstr(line, " n/a") && !strstr(line, " 0 "),
          "never-sampled KV is n/a: '%s'", line);
    CHECK(report_line(text, "KV blocks cached for reuse, peak fraction", line, sizeof(line)) &&
          strstr(line, " 0.250 ") && strstr(line, " n/a"), "cached KV: '%s'", line);
    CHECK(!strstr(text, "nan") && !strstr(text, "-nan") && strstr(text, "C: output tok/s over 1 "
          "repetition(s): mean n/a"), "no nan in the report:\n%s", text);
    free(text);
    for (int i = 0; i < 3; i++) bench_result_free(&res[i]);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *b = malloc(1 << 20);
    size_t n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

/* The numbers of every `attr="..."` of elements of class `cls`, in order. */
static int svg_attrs(const char *svg, const char *cls, const char *attr, double *out, int cap) {
    char key[64], a[32];
    snprintf(key, sizeof(key), "class=\"%s\"", cls);
    snprintf(a, sizeof(a), " %s=\"", attr);
    int n = 0;
    for (const char *p = strstr(svg, key); p && n < cap; p = strstr(p + 1, key)) {
        const char *end = strchr(p, '>'), *q = strstr(p, a);
        if (q && end && q < end) out[n++] = atof(q + strlen(a));
    }
    return n;
}

/* The tick labels (element text) of class cls. */
static int svg_texts(const char *svg, const char *cls, double *out, int cap) {
    char key[64];
    snprintf(key, sizeof(key), "class=\"%s\"", cls);
    int n = 0;
    for (const char *p = strstr(svg, key); p && n < cap; p = strstr(p + 1, key)) {
        const char *gt = strchr(p, '>');
        if (gt) out[n++] = atof(gt + 1);
    }
    return n;
}

static void test_plots(void) {
    /* A: three TTFTs between 900 and 1000 ms; B: one */
    double ch[3][2], chb[1][2], ta[3] = {900, 950, 1000}, tb[1] = {920};
    bench_rec ra[3], rb[1];
    bench_run run;
    bench_result res[2];
    bench_result_init(&res[0], "A", 1, 0);
    bench_result_init(&res[1], "B with a long label that would cover the lines", 1, 0);
    synth_run(&run, ra, ch, ta, 3);
    bench_result_add(&res[0], &run, NULL);
    synth_run(&run, rb, chb, tb, 1);
    bench_result_add(&res[1], &run, NULL);
    bench_result_finish(&res[0]);
    bench_result_finish(&res[1]);
    char dir[] = "/tmp/test_bench_plots_XXXXXX", md[256], svgp[256], err[256];
    const char *made = mkdtemp(dir); /* once: REQUIRE evaluates its condition twice */
    REQUIRE(made, "mkdtemp");
    snprintf(md, sizeof(md), "%s/r.md", dir);
    snprintf(svgp, sizeof(svgp), "%s/r-cdf-ttft.svg", dir);
    bench_report_info ri = {.workload = "synthetic", .n_cfg = 1};
    CHECK(bench_report_md(md, &ri, res, 2, false, err, sizeof(err)) == 0, "%s", err);
    char *svg = slurp(svgp);
    REQUIRE(svg, "no %s", svgp);
    /* every sample has a marker, the single one too */
    double cx[16], cy[16];
    int nc = svg_attrs(svg, "sample", "cx", cx, 16);
    svg_attrs(svg, "sample", "cy", cy, 16);
    CHECK(nc == 4, "4 sample markers, got %d", nc);
    /* step functions: each sample is a vertical rise at its x (2 points a sample) */
    int n_series = 0;
    bool steps = true;
    for (const char *p = strstr(svg, "class=\"series\""); p; p = strstr(p + 1, "class=\"series\"")) {
        const char *q = strstr(p, "points=\"");
        double px[16], py[16];
        int np = 0;
        for (q = q ? q + 8 : NULL; q && *q && *q != '"' && np < 16;) {
            char *e;
            px[np] = strtod(q, &e);
            if (e == q || *e != ',') break;
            py[np++] = strtod(e + 1, &e);
            q = e;
            while (*q == ' ') q++;
        }
        int want = n_series == 0 ? 6 : 2;
        if (np != want) steps = false;
        for (int k = 0; k + 1 < np; k += 2)
            if (px[k] != px[k + 1] || !(py[k + 1] < py[k])) steps = false; /* up at the sample */
        for (int k = 1; k + 1 < np; k += 2)
            if (py[k] != py[k + 1] || !(px[k + 1] > px[k])) steps = false; /* then flat */
        n_series++;
    }
    CHECK(n_series == 2 && steps, "CDFs are step functions (%d series):\n%s", n_series, svg);
    /* the x axis fits 900..1000 ms instead of starting at 0 */
    double xt[32];
    int nx = svg_texts(svg, "xtick", xt, 32);
    CHECK(nx >= 2 && xt[0] >= 800 && xt[0] <= 900 && xt[nx - 1] >= 1000 && xt[nx - 1] <= 1100,
          "x axis %g..%g (%d ticks)", nx ? xt[0] : NAN, nx ? xt[nx - 1] : NAN, nx);
    /* the legend is below the plot area: below every marker and tick line */
    double ly[4], rect_bottom = 0;
    int nl = svg_attrs(svg, "legend", "y", ly, 4);
    const char *fr = strstr(svg, "fill=\"none\" stroke=\"#333\"");
    if (fr) { /* the frame: <rect x y width height ...> */
        const char *r0 = fr;
        while (r0 > svg && strncmp(r0, "<rect", 5)) r0--;
        double y = atof(strstr(r0, " y=\"") + 4), h = atof(strstr(r0, " height=\"") + 9);
        rect_bottom = y + h;
    }
    bool below = nl == 2 && rect_bottom > 0;
    for (int i = 0; i < nl; i++) below &= ly[i] > rect_bottom + 20;
    for (int i = 0; i < nc; i++) below &= cy[i] <= rect_bottom;
    CHECK(below, "legend outside the plot: %d entries, plot bottom %g, first at %g", nl,
          rect_bottom, nl ? ly[0] : NAN);
    free(svg);
    bench_result_free(&res[0]);
    bench_result_free(&res[1]);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[600];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.') unlink(p);
    }
    if (d) closedir(d);
    CHECK(rmdir(dir) == 0, "cleanup of %s", dir);
}

int main(void) {
    RUN(test_percentiles);
    RUN(test_sse_splits);
    RUN(test_stream_events);
    RUN(test_prometheus_and_slo);
    RUN(test_held_out_rule);
    RUN(test_workloads_deterministic);
    RUN(test_file_workload);
    RUN(test_results);
    RUN(test_report_rows);
    RUN(test_plots);
    TEST_END();
}
