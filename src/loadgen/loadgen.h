/* loadgen.h: `specula bench`, a serving benchmark for OpenAI-compatible
 * servers (the load generator; the CLI calls bench_main, and nothing here calls
 * back into the CLI).
 * The pieces, one file each:
 *   sse.c       incremental server-sent-events parser
 *   stats.c     percentiles and summaries
 *   workload.c  seeded workload generators over the held-out corpus
 *   loadgen.c   the HTTP client (libcurl multi): streams, timings, /metrics
 *   contract.c  the reproducibility contract (model hash, CPU, bandwidth, ...)
 *   result.c    measured runs -> numbers (percentiles, goodput, H_tokens, counters)
 *   report.c    terminal / JSON / Markdown reports
 *   plot.c      the Markdown report's SVG plots
 *   cmd_bench.c options, starting servers, repetitions, compare and sweeps
 * Library style: functions return a status and fill an error buffer; only
 * bench_main decides the exit code. */
#ifndef SP_BENCH_LOADGEN_H
#define SP_BENCH_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "specula.h"

/* ---- the command ---------------------------------------------------------- */

/* The models `specula serve` uses when its command line names none (the
 * CLI's defaults: $SPECULA_MODEL, the bundled pair); either may be NULL. */
typedef struct {
    const char *model, *draft;
} bench_defaults;

/* `specula bench ARGS` (argv[0] is "bench"): runs the benchmark and returns
 * the process exit code (0 done, 1 failed or goals missed, 2 bad command
 * line), with messages on stderr and the report on stdout. */
int bench_main(int argc, char **argv, const bench_defaults *def);

/* ---- SSE ----------------------------------------------------------------- */

/* Called once per complete event with its data lines joined by '\n'
 * (NUL-terminated; events without data are not reported). Returning
 * non-zero stops the parser (sse_feed then returns that value). */
typedef int (*sse_event_fn)(const char *data, size_t len, void *user);

typedef struct {
    char *line;       /* the current, incomplete line */
    size_t line_len, line_cap;
    char *data;       /* data lines of the current event */
    size_t data_len, data_cap;
    bool has_data;
    bool last_cr;     /* the previous byte was '\r' (a "\r\n" must count once) */
    size_t max_bytes; /* a line or event longer than this is an error (0: 16 MiB) */
    sse_event_fn fn;
    void *user;
} sse_parser;

void sse_init(sse_parser *p, sse_event_fn fn, void *user);
/* Feeds bytes as they arrive (any split). 0, the callback's non-zero
 * value, or -1 for an oversized line / out of memory. */
int sse_feed(sse_parser *p, const char *buf, size_t len);
/* End of stream: dispatches a final event not followed by a blank line (as
 * browsers do not, but a truncated stream should still count what came). */
int sse_finish(sse_parser *p);
void sse_free(sse_parser *p);

/* ---- statistics ------------------------------------------------------------ */

/* The q-quantile (q in [0,1]) of v[n] by linear interpolation between closest
 * ranks (numpy's default); sorts v in place. NaN when n == 0. */
double bstat_quantile(double *v, size_t n, double q);

typedef struct {
    size_t n;
    double mean, sd, min, p50, p90, p99, max;
} bstat_summary;

/* Summary of v[n] (sorted in place); all NaN (n = 0) when empty. */
bstat_summary bstat_summarize(double *v, size_t n);

/* A growable array of doubles. */
typedef struct {
    double *v;
    size_t n, cap;
} dvec;
int dvec_push(dvec *d, double x);
void dvec_free(dvec *d);

/* ---- workloads ------------------------------------------------------------- */

typedef struct {
    char *prompt;        /* the request's prompt; for multi-turn, this turn's new text */
    int32_t max_tokens;
    int32_t conv;        /* multi-turn: conversation id; -1: an independent request */
    int32_t turn;
    char *salt;          /* cache_salt, or NULL */
    char *extra;         /* file:: the line's other fields as a JSON object text, or NULL */
} bench_item;

typedef struct {
    const char *name;    /* shared-prefix, long-output, ... or file */
    char params[512];    /* the generator's parameters, for the contract */
    bench_item *items;
    int32_t n;
    int32_t n_convs;     /* multi-turn: conversations (items are interleaved by turn) */
    int32_t default_concurrency; /* what the workload is meant to run at */
    double default_rate;          /* 0: closed loop */
} bench_workload;

typedef struct {
    const char *name;          /* workload name, or "file:PATH" */
    int32_t n;                 /* requests (multi-turn: conversations x turns) */
    uint64_t seed;
    int32_t max_model_len;     /* prompt + output must fit (0: unknown) */
    /* knobs; <= 0 means the workload's default */
    int32_t prefix_tokens;     /* shared-prefix: the shared system prompt + document */
    int32_t prompt_tokens;     /* other workloads: prompt length */
    int32_t output_tokens;     /* max_tokens */
    int32_t turns;             /* multi-turn: turns per conversation */
    int32_t n_prefixes;        /* shared-prefix: distinct documents (default 1) */
    const char *salt;          /* every request's cache_salt */
    int32_t tenants;           /* multi-tenant: tenants, each its own cache_salt (default 4) */
    int32_t documents;         /* multi-tenant: distinct documents (default 8) */
    double zipf;               /* multi-tenant: document popularity exponent (default 1; 0: uniform) */
    const sp_vocab *vocab;     /* measures lengths in tokens; NULL: ~4 bytes per token */
    const char *corpus_path;   /* held-out split (heldout.txt); NULL: the default search */
} bench_workload_opts;

/* The held-out corpus as one text (files joined by "# ==== file: REL ===="
 * marker lines, as tools/train/corpus.py writes heldout.txt). Looks in
 * opts path, $SPECULA_CORPUS, build/corpus/heldout.txt, then rebuilds it
 * from /usr/lib/python3.11 by the same held-out rule. */
char *bench_corpus_load(const char *path, size_t *len, char *err, size_t errlen);
/* The same text rebuilt from a Python library directory (the fallback). */
char *bench_corpus_from_src(const char *src, size_t *len, char *err, size_t errlen);
/* The held-out rule of corpus.py: the first 8 hex digits of
 * sha256(module) below 0.05 * 2^32. */
bool bench_corpus_held_out(const char *module);

/* Generates a workload deterministically from opts (same opts, same corpus,
 * same vocab: byte-identical prompts). 0, or -1 + err. */
int bench_workload_make(const bench_workload_opts *o, const char *corpus, size_t corpus_len,
                        bench_workload *w, char *err, size_t errlen);
void bench_workload_free(bench_workload *w);
/* The names of the built-in workloads, for usage text and validation. */
extern const char *const bench_workload_names[];
bool bench_workload_known(const char *name);

/* Splitmix64: the tool's only RNG, so runs are reproducible everywhere. */
uint64_t bench_rng(uint64_t *state);
double bench_rng_uniform(uint64_t *state);

/* ---- load generator --------------------------------------------------------- */

typedef struct {
    int32_t idx, conv, turn;
    double t_sched;          /* intended start (open loop), s from the run start */
    double t_start, t_first, t_last, t_end; /* s from the run start; t_first < 0: no token */
    dvec chunk_t;            /* arrival of each chunk with text */
    int32_t prompt_tokens, completion_tokens, cached_tokens; /* from usage; -1: absent */
    int32_t cached_tokens_disk; /* specula.cached_tokens_disk (--kv-disk); <= 0: none or absent */
    size_t prompt_bytes, out_bytes;
    bool has_spec;
    int32_t spec_steps, spec_drafted, spec_accepted;
    double srv_queue_ms, srv_ttft_ms; /* the server's own view (-1: absent) */
    int http_status;
    bool ok, done;
    char finish[16];
    char err[200];
    char *prompt;            /* the prompt as sent (multi-turn: with its history) */
    /* private to the load generator */
    char *body;
    char *text;              /* output text (kept for multi-turn history) */
    size_t text_len, text_cap;
    char *errbody;
    size_t errbody_len;
    bool saw_done;
} bench_rec;

typedef struct {
    const char *base_url;    /* http://host:port (a trailing /v1 is accepted) */
    const char *api_key;
    const char *model;       /* "model" field (NULL: omitted) */
    int32_t concurrency;     /* most in flight (closed loop; with rate: a cap, 0 none) */
    double rate;             /* requests/s, Poisson arrivals; 0: closed loop */
    uint64_t seed;           /* arrival times */
    double temperature, top_p;
    int64_t sample_seed;     /* < 0: not sent */
    bool ignore_eos;         /* send "ignore_eos": true (vLLM's extension) */
    double timeout_s;        /* per request */
    double metrics_period_s; /* sample /metrics this often (0: never) */
    bool progress;           /* a progress bar on stderr */
    const char *label;
    const char *salt;        /* cache_salt for every request (overrides the items'), or NULL */
    bool chat;               /* POST /v1/chat/completions: "messages" (the prompt as the user's
                              * turn; multi-turn: the conversation with its answers) */
} bench_load_opts;

/* One sample of the server's KV gauges. */
typedef struct {
    double t;
    double blocks_total, blocks_free, blocks_cached, blocks_in_use;
} bench_kv_sample;

typedef struct {
    bench_rec *recs;
    int32_t n;
    double duration_s;       /* first start to last end */
    bench_kv_sample *kv;
    int32_t n_kv, cap_kv;
} bench_run;

/* Sends every item of w and waits for all; records per request. 0 when the
 * run happened (individual requests may have failed: see recs[i].ok), -1 +
 * err when it could not (no connection at all is still a run of failures). */
int bench_load_run(const bench_load_opts *o, const bench_workload *w, bench_run *r, char *err,
                   size_t errlen);
void bench_run_free(bench_run *r);

/* GET base_url + path into a malloc'd NUL-terminated body. HTTP status, or
 * -1 + err when the request failed. */
int bench_http_get(const char *base_url, const char *path, const char *api_key, double timeout_s,
                   char **body, char *err, size_t errlen);

/* Parses one event of a streamed completion into r (exposed for tests). 0 on
 * a chunk, 1 on [DONE], -1 on garbage (r->err set). now: its arrival time. */
int bench_rec_event(bench_rec *r, const char *data, size_t len, double now);

/* Prometheus text: the sum of every sample of metric `name` (all label sets;
 * a name with a label selector such as `x{cause="flush"}` matches exactly
 * that sample). NaN when absent. */
double bench_prom_value(const char *text, const char *name);

/* ---- contract ----------------------------------------------------------------- */

typedef struct {
    char model_file[1024];
    char model_sha256[80];
    char model_desc[256];   /* architecture, parameters, context */
    char tokenizer[128];
    char proposer[64];
    char draft_file[1024];
    char draft_sha256[80];
    char verification[160];
    char engine[160];        /* the server's engine: version + git commit as far as known */
    char tool[160];          /* this benchmark binary: version + git commit */
    bool reported;           /* the server described itself (a Specula /v1/models "specula") */
    char cpu_model[160];
    int cores;
    double membw_gbs;
    char kv_type[64];
    int32_t block_size;
    char prefix_cache[64];
    char salt_use[160];
    char server_args[1024];
    char served_model[128];
    int32_t max_model_len;
} bench_contract;

/* Host facts: CPU model, cores, memcpy bandwidth, engine version. */
void bench_contract_host(bench_contract *c);
/* sha256 of a file as hex; 0 or -1 + err. */
int bench_sha256_file(const char *path, char out[65], char *err, size_t errlen);
/* Fills the server-side fields from the arguments a `specula serve` was (or
 * will be) started with (engine defaults for what is not given, def's
 * models for a missing -m or --draft). */
void bench_contract_from_serve_args(bench_contract *c, int argc, char **argv,
                                    const bench_defaults *def);
/* Fills what a Specula server reports of itself in /v1/models ("specula":
 * model and draft files, speculation, KV type and block size, prefix
 * cache); fields it lacks are left as they are. */
void bench_contract_from_info(bench_contract *c, const cJSON *info);

/* ---- results and reports ------------------------------------------------------ */

typedef struct {
    double ttft_ms, tpot_ms, e2e_ms; /* 0: no limit */
    char text[128];
} bench_slo;

/* Parses "ttft=500ms,tpot=50ms,e2e=10s" (units ms or s; bare numbers are
 * ms). 0, or -1 + err. */
int bench_slo_parse(const char *s, bench_slo *slo, char *err, size_t errlen);

#define BENCH_MAX_REPS 64
#define BENCH_N_COUNTERS 14
#define BENCH_MAX_REPLICAS 64

/* Counters read from a Specula server's /metrics, before and after a run,
 * indexed by enum bench_counter. */
extern const char *const bench_counter_names[BENCH_N_COUNTERS];
enum bench_counter {
    BENCH_C_FINISHED, BENCH_C_PROMPT, BENCH_C_COMPLETION, BENCH_C_CACHED, BENCH_C_PREFILL,
    BENCH_C_DECODE, BENCH_C_STEPS, BENCH_C_RECOMPUTED, BENCH_C_PREEMPT, BENCH_C_HITS,
    BENCH_C_SPEC_STEPS, BENCH_C_SPEC_DRAFTED, BENCH_C_SPEC_ACCEPTED, BENCH_C_EVICT
};

/* What one configuration at one load level measured, pooled over its
 * repetitions (raw samples kept for the plots, sorted once summarized). */
typedef struct {
    char label[64];
    int32_t concurrency;
    double rate;
    int32_t n, n_ok;
    char first_err[200];
    double duration_s;
    long long prompt_tokens, output_tokens, cached_tokens;
    long long cached_tokens_disk; /* of cached_tokens, restored from the server's disk tier */
    bool usage_seen, cached_seen;
    dvec ttft, tpot, itl, e2e, ttft_cold, ttft_warm, prompt_len, output_len;
    bstat_summary s_ttft, s_tpot, s_itl, s_e2e, s_cold, s_warm, s_plen, s_olen;
    double req_s, out_tok_s, total_tok_s;
    int32_t n_good;
    double goodput_req_s;
    long long h_hist[11];
    bool has_spec;
    long long spec_steps, spec_drafted, spec_accepted;
    double prefix_share;       /* bytes of each prompt shared with an earlier one / all bytes */
    long long share_num, share_den;
    /* KV gauges sampled from /metrics */
    int32_t n_kv;
    double kv_peak_in_use, kv_mean_in_use, kv_peak_cached; /* fractions of blocks_total */
    double kv_sum_in_use;
    /* server counters (deltas over the measured runs); NAN when not a Specula server */
    bool has_server;
    double counters[BENCH_N_COUNTERS];
    bool reconciled;
    char reconcile[256];
    /* --metrics-url: requests each replica finished (deltas), in URL order */
    int32_t n_replicas;
    double replica_requests[BENCH_MAX_REPLICAS];
    /* repetitions */
    int32_t reps;
    double rep_out_tok_s[BENCH_MAX_REPS], rep_ttft_p50[BENCH_MAX_REPS], rep_tpot_p50[BENCH_MAX_REPS];
} bench_result;

void bench_result_init(bench_result *r, const char *label, int32_t concurrency, double rate);
/* Adds one measured run (a repetition) to r. */
void bench_result_add(bench_result *r, const bench_run *run, const bench_slo *slo);
/* Adds the server's counter deltas of one run (after - before). */
void bench_result_add_counters(bench_result *r, const double *before, const double *after);
/* Computes summaries, rates, fractions, reconciliation. */
void bench_result_finish(bench_result *r);
void bench_result_free(bench_result *r);
/* Reads every bench_counter_names value from /metrics text (NAN if absent). */
void bench_counters_read(const char *metrics_text, double *out);

/* The SVG plots of a Markdown report (plot.c): writes STEM-cdf-{ttft,tpot,
 * itl,e2e}.svg, STEM-ttft-cold-warm.svg when any request was cold or warm,
 * and STEM-throughput.svg when the results span two concurrencies or more;
 * each plot written adds its file name (BASE-...) to names. Returns how many. */
#define BENCH_MAX_PLOTS 6
#define BENCH_PLOT_NAME 4200
int bench_plots(const char *stem, const char *base, bench_result *res, int n_res,
                char names[BENCH_MAX_PLOTS][BENCH_PLOT_NAME]);

/* ---- clusters (cluster.c) ---------------------------------------------------- */

/* Splits "URL[,URL...]" into urls (pointers into s, which is modified).
 * The count, or -1 + err (empty, not http(s)://, more than cap). */
int bench_metrics_urls(char *s, const char **urls, int cap, char *err, size_t errlen);
/* Reads /metrics of every URL: sum[] gets each counter summed over the
 * replicas (NAN when a replica lacks it or cannot be read), per_req[i] the
 * requests replica i finished (NAN when unreadable). 0 when all were read. */
int bench_cluster_read(const char *const *urls, int n, const char *key, double *sum,
                       double *per_req);
/* Adds one run's per-replica request deltas (after - before) to r. */
void bench_result_add_replicas(bench_result *r, int n, const double *before, const double *after);
/* Largest share over the mean share of v[n] (1: even); NAN when empty. */
double bench_imbalance(const double *v, int n);

typedef struct {
    bench_contract cfg[2];        /* per configuration */
    int n_cfg;
    const char *workload;
    const char *endpoint;         /* "/v1/completions" or "/v1/chat/completions" (NULL: the first) */
    char workload_params[512];
    uint64_t seed;
    char load[160];               /* concurrency / rate / sweep */
    char sampling[160];
    int32_t warmup, reps;
    char reps_note[200];
    const bench_slo *slo;
    char prompt_lens[160], output_lens[160], prefix_sharing[160];
    char tokenizer[256];
    char when[64];
} bench_report_info;

/* The terminal report (also what --md embeds). */
void bench_report_text(FILE *f, const bench_report_info *ri, bench_result *res, int n_res,
                       bool compare);
int bench_report_json(const char *path, const bench_report_info *ri, bench_result *res, int n_res,
                      bool compare, char *err, size_t errlen);
/* Markdown with the contract block; plots written beside it as PATH-stem-*.svg. */
int bench_report_md(const char *path, const bench_report_info *ri, bench_result *res, int n_res,
                    bool compare, char *err, size_t errlen);

#endif
