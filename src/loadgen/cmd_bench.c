/* cmd_bench.c: `specula bench`: runs a seeded workload against one or two
 * OpenAI-compatible servers (given by URL, or started here as `specula
 * serve` children), at a concurrency, a Poisson rate or a sweep of
 * concurrencies, and reports what each configuration did, with the
 * reproducibility contract. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loadgen/loadgen.h"
#include "common.h"

#define MAX_CFG 2
#define MAX_SWEEP 16
#define MAX_SERVE_ARGS 64
#define NOT_REPORTED "not reported by the server"

static void bench_usage(FILE *f) {
    fprintf(f,
        "usage: specula bench [--base-url URL | --serve \"SERVE ARGS\"] --workload W [options]\n"
        "       specula bench --compare (--base-url URL | --serve \"ARGS\") (--base-url URL | --serve \"ARGS\") ...\n"
        "target (give one; two with --compare; none: start `specula serve` with the bundled model):\n"
        "  --base-url URL         an OpenAI-compatible server (http://host:port, /v1 optional)\n"
        "  --serve \"ARGS\"         start `specula serve --port 0 ARGS` (space-separated, no quoting),\n"
        "                         benchmark it, stop it\n"
        "  --label NAME           name of the next/previous target in reports (default A, B)\n"
        "  --compare              run the same workload against both targets, one after the other\n"
        "  --model NAME           the request's \"model\" (default: the server's first /v1/models id)\n"
        "  --model-file PATH      the GGUF the URL serves (hashed for the contract; its tokenizer is\n"
        "                         used for lengths)\n"
        "  --tokenizer PATH       GGUF whose vocabulary measures prompt lengths (default: the model\n"
        "                         file, else the bundled target)\n"
        "  --api-key KEY          sent as 'Authorization: Bearer KEY'\n"
        "  --endpoint E           completions (POST /v1/completions, \"prompt\"; default) or chat\n"
        "                         (POST /v1/chat/completions, \"messages\": the prompt as the user's\n"
        "                         turn; the server needs a chat template)\n"
        "workload:\n"
        "  --workload W           shared-prefix, long-output, saturate, multi-turn, code-complete,\n"
        "                         code-edit, multi-tenant, or file:PATH (JSONL: prompt, max_tokens,\n"
        "                         other fields sent as is)\n"
        "  --num-requests N       requests per repetition (multi-turn: conversations x turns)\n"
        "  --seed S               workload and arrival seed (default 0)\n"
        "  --prefix-tokens N      shared-prefix: tokens of the common prefix (default 1536, fitted to\n"
        "                         the server's max_model_len)\n"
        "  --prefixes N           shared-prefix: distinct prefixes (default 1)\n"
        "  --tenants T            multi-tenant: tenants, each with its own cache_salt (default 4)\n"
        "  --documents D          multi-tenant: documents, requested with Zipf popularity (default 8);\n"
        "                         --prefix-tokens is a document's length (default 256)\n"
        "  --zipf S               multi-tenant: popularity exponent (default 1; 0: uniform)\n"
        "  --prompt-tokens N      prompt (or snippet / turn; multi-tenant: question) length of the\n"
        "                         other workloads\n"
        "  --output-tokens N      max_tokens\n"
        "  --turns N              multi-turn: turns per conversation (default 4)\n"
        "  --cache-salt S         send cache_salt S with every request\n"
        "  --corpus PATH          held-out corpus (default build/corpus/heldout.txt, else rebuilt\n"
        "                         from /usr/lib/python3.11 by tools/train/corpus.py's rule)\n"
        "load:\n"
        "  --concurrency C        at most C requests in flight (closed loop; default: the\n"
        "                         workload's, 4; saturate: all)\n"
        "  --rate R               R requests/s, Poisson arrivals (open loop; --concurrency caps)\n"
        "  --sweep-concurrency L  run once per concurrency in the list, e.g. 1,4,16\n"
        "  --warmup N             unmeasured requests first (other prompts; default 2)\n"
        "  --repeat R             repetitions of the same prompts (default 1); each measured run\n"
        "                         gets a fresh --serve server, or a fresh cache_salt on a URL\n"
        "  --keep-server          one --serve server for all runs of a target (caches carry over)\n"
        "  --no-isolation         no per-run cache_salt on URLs\n"
        "  --timeout S            per-request timeout in seconds (default 600)\n"
        "sampling:\n"
        "  --temperature T        default 0 (greedy)\n"
        "  --top-p P              default 1\n"
        "  --sample-seed N        send \"seed\": N\n"
        "  --ignore-eos           send \"ignore_eos\": true (servers that know it generate max_tokens)\n"
        "report:\n"
        "  --slo LIST             goodput limits, e.g. ttft=500ms,tpot=50ms,e2e=10s\n"
        "  --json FILE            {\"metrics\": ..., \"contract\": ...}\n"
        "  --md FILE              Markdown report; SVG plots beside it (FILE-stem-cdf-*.svg, ...)\n"
        "  --progress / --no-progress   progress bar on stderr (default: when stderr is a terminal)\n"
        "  --metrics-period S     sample the server's KV gauges every S seconds (default 0.5; 0: off)\n"
        "  --metrics-url URL[,URL...]  read the work counters from these servers' /metrics (the\n"
        "                         replicas behind a router given as --base-url) instead of the\n"
        "                         target's, sum them, and report each one's share of the requests\n");
}

typedef struct {
    const char *url;
    char *serve;         /* the --serve argument string, or NULL */
    const char *label;
    /* a started server */
    pid_t pid;
    char log[256];
    char url_buf[256];
} target;

/* Splits s on spaces into argv (s is modified). */
static int split_args(char *s, char **argv, int cap) {
    int n = 0;
    for (char *t = strtok(s, " \t"); t; t = strtok(NULL, " \t")) {
        if (n == cap) return -1;
        argv[n++] = t;
    }
    return n;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void stop_server(target *t) {
    if (t->pid > 0) {
        kill(t->pid, SIGTERM);
        int st;
        for (int i = 0; i < 100 && waitpid(t->pid, &st, WNOHANG) == 0; i++) usleep(50000);
        if (waitpid(t->pid, &st, WNOHANG) == 0) {
            kill(t->pid, SIGKILL);
            waitpid(t->pid, &st, 0);
        }
        t->pid = 0;
    }
    if (t->log[0]) unlink(t->log);
    t->log[0] = 0;
}

static void log_tail(const char *path, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    long from = sz > (long)cap - 1 ? sz - (long)cap + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    fclose(f);
}

/* Starts `specula serve --port 0 ARGS` as a child (it dies with us), waits
 * for its URL in its log and for /health 200. */
static int start_server(target *t, char *err, size_t errlen) {
    char *args = strdup(t->serve);
    char *argv[MAX_SERVE_ARGS + 8];
    int n = args ? split_args(args, argv + 4, MAX_SERVE_ARGS) : -1;
    if (n < 0) {
        free(args);
        seterr(err, errlen, "--serve: too many arguments");
        return -1;
    }
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (k <= 0) {
        free(args);
        seterr(err, errlen, "cannot find the specula binary");
        return -1;
    }
    exe[k] = 0;
    t->url_buf[0] = 0;
    t->url = NULL;
    argv[0] = "specula", argv[1] = "serve", argv[2] = "--port", argv[3] = "0";
    argv[4 + n] = NULL;
    snprintf(t->log, sizeof(t->log), "/tmp/specula-bench-serve-XXXXXX");
    int fd = mkstemp(t->log);
    if (fd < 0) {
        free(args);
        seterr(err, errlen, "cannot create a log file: %s", strerror(errno));
        t->log[0] = 0;
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        execv(exe, argv);
        _exit(127);
    }
    close(fd);
    free(args);
    if (pid < 0) {
        seterr(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    t->pid = pid;
    double t0 = now_s();
    char tail[2048];
    while (!t->url_buf[0]) {
        log_tail(t->log, tail, sizeof(tail));
        const char *u = strstr(tail, "listening on http://");
        if (u) {
            u += strlen("listening on ");
            size_t l = strcspn(u, " \n");
            while (l > 7 && strchr(":.,", u[l - 1])) l--; /* "listening on http://h:p: model ..." */
            snprintf(t->url_buf, sizeof(t->url_buf), "%.*s", (int)l, u);
            break;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid || now_s() - t0 > 30) {
            t->pid = waitpid(pid, &st, WNOHANG) == 0 ? pid : 0;
            seterr(err, errlen, "`specula serve %s` did not start: %s", t->serve, tail);
            return -1;
        }
        usleep(20000);
    }
    t->url = t->url_buf;
    for (;;) {
        char *body = NULL, e2[256];
        int st = bench_http_get(t->url, "/health", NULL, 2, &body, e2, sizeof(e2));
        free(body);
        if (st == 200) return 0;
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid || now_s() - t0 > 900) {
            if (t->pid && waitpid(pid, &ws, WNOHANG) != 0) t->pid = 0;
            log_tail(t->log, tail, sizeof(tail));
            seterr(err, errlen, "`specula serve %s` did not become healthy: %s", t->serve, tail);
            return -1;
        }
        usleep(50000);
    }
}

/* The served model's id and max_model_len from GET /v1/models; with ct,
 * also what a Specula server says of its configuration. */
static void query_models(const char *url, const char *key, char *id, size_t idcap, int32_t *max_len,
                         bench_contract *ct) {
    char *body = NULL, e[256];
    id[0] = 0;
    *max_len = 0;
    if (bench_http_get(url, "/v1/models", key, 10, &body, e, sizeof(e)) == 200) {
        cJSON *j = cJSON_Parse(body);
        const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "id");
        if (cJSON_IsString(v)) snprintf(id, idcap, "%s", v->valuestring);
        v = cJSON_GetObjectItemCaseSensitive(d, "max_model_len");
        if (cJSON_IsNumber(v)) *max_len = (int32_t)v->valuedouble;
        if (ct) bench_contract_from_info(ct, cJSON_GetObjectItemCaseSensitive(d, "specula"));
        cJSON_Delete(j);
    }
    free(body);
}

static int read_counters(const char *url, const char *key, double *out) {
    char *body = NULL, e[256];
    int st = bench_http_get(url, "/metrics", key, 10, &body, e, sizeof(e));
    if (st == 200) bench_counters_read(body, out);
    else
        for (int i = 0; i < BENCH_N_COUNTERS; i++) out[i] = NAN;
    free(body);
    return st == 200 ? 0 : -1;
}

static int parse_list(const char *s, int32_t *out, int cap) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        long v;
        if (n == cap || !parse_long(t, 1, 100000, &v)) return -1;
        out[n++] = (int32_t)v;
    }
    return n;
}

static void hash_into(const char *path, char *out, size_t cap) {
    char h[65], e[256];
    struct stat st;
    if (!path || !strcmp(path, "none") || !strcmp(path, "unknown") || stat(path, &st)) return;
    if (bench_sha256_file(path, h, e, sizeof(e)) == 0) snprintf(out, cap, "%s", h);
}

/* What the command line asked for. */
typedef struct {
    target tg[MAX_CFG];
    int n_tg;
    bench_workload_opts wo;
    bench_load_opts lo;
    const char *model_name, *model_file, *tok_path, *json_path, *md_path, *api_key;
    bool compare, conc_given, keep_server, isolate;
    long conc, warmup, reps;
    int32_t sweep[MAX_SWEEP];
    int n_sweep;
    bench_slo slo;
    const char *murl[BENCH_MAX_REPLICAS]; /* --metrics-url: the replicas */
    int n_murl;
    char *murl_buf; /* what murl points into */
    bench_defaults def; /* the models the CLI uses when none is given */
} bench_cmd;

/* vLLM's benchmark spellings of specula bench's options, so that a command
 * line a user already has works. */
static const char *bench_alias(const char *a) {
    static const struct { const char *alias, *canonical; } A[] = {
        {"--num-prompts", "--num-requests"}, {"--max-concurrency", "--concurrency"},
        {"--request-rate", "--rate"},
    };
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++)
        if (!strcmp(a, A[i].alias)) return A[i].canonical;
    return a;
}

/* Fills b from the command line. -1 to go on; otherwise the exit code (0
 * after --help, 2 for a bad command line, said on stderr). */
static int parse_args(int argc, char **argv, const bench_defaults *def, bench_cmd *b) {
    *b = (bench_cmd){.def = *def, .lo = {.temperature = 0, .top_p = 1, .sample_seed = -1, .timeout_s = 600,
                            .metrics_period_s = 0.5},
                     .isolate = true, .warmup = 2, .reps = 1};
    int n_labels = 0, progress = -1;
    const char *labels[MAX_CFG] = {0};
    long seed = 0;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = bench_alias(argv[i]), *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        double d;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--compare")) {
            b->compare = true;
            continue;
        } else if (!strcmp(a, "--keep-server")) {
            b->keep_server = true;
            continue;
        } else if (!strcmp(a, "--no-isolation")) {
            b->isolate = false;
            continue;
        } else if (!strcmp(a, "--ignore-eos")) {
            b->lo.ignore_eos = true;
            continue;
        } else if (!strcmp(a, "--progress")) {
            progress = 1;
            continue;
        } else if (!strcmp(a, "--no-progress")) {
            progress = 0;
            continue;
        } else if (a[0] != '-' || !a[1]) {
            fprintf(stderr, "specula bench: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
        static const char *const valued[] = {
            "--base-url", "--serve", "--label", "--model", "--model-file", "--tokenizer",
            "--api-key", "--workload", "--num-requests", "--seed", "--prefix-tokens", "--prefixes",
            "--prompt-tokens", "--output-tokens", "--turns", "--cache-salt", "--corpus",
            "--concurrency", "--rate", "--sweep-concurrency", "--warmup", "--repeat", "--timeout",
            "--temperature", "--top-p", "--sample-seed", "--slo", "--json", "--md",
            "--metrics-period", "--endpoint", "--tenants", "--documents", "--zipf", "--metrics-url",
            NULL};
        bool known = false;
        for (int k = 0; valued[k]; k++) known |= !strcmp(a, valued[k]);
        if (!known) {
            fprintf(stderr, "specula bench: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "specula bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--base-url") || !strcmp(a, "--serve")) {
            if (b->n_tg == MAX_CFG) {
                fprintf(stderr, "specula bench: at most two targets (--base-url / --serve)\n");
                return 2;
            }
            if (!strcmp(a, "--base-url")) {
                if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8)) {
                    fprintf(stderr, "specula bench: --base-url must start with http:// or https://\n");
                    return 2;
                }
                b->tg[b->n_tg++].url = v;
            } else {
                b->tg[b->n_tg++].serve = (char *)v;
            }
        } else if (!strcmp(a, "--label")) {
            if (n_labels == MAX_CFG) {
                fprintf(stderr, "specula bench: at most two --label\n");
                return 2;
            }
            labels[n_labels++] = v;
        } else if (!strcmp(a, "--model")) b->model_name = v;
        else if (!strcmp(a, "--model-file")) b->model_file = v;
        else if (!strcmp(a, "--tokenizer")) b->tok_path = v;
        else if (!strcmp(a, "--api-key")) b->api_key = v;
        else if (!strcmp(a, "--workload")) {
            ok = bench_workload_known(v);
            b->wo.name = v;
        } else if (!strcmp(a, "--num-requests")) ok = parse_long(v, 1, 1000000, &l), b->wo.n = (int32_t)l;
        else if (!strcmp(a, "--seed")) ok = parse_long(v, 0, 0x7fffffffffffffffL, &seed);
        else if (!strcmp(a, "--prefix-tokens")) ok = parse_long(v, 1, 1 << 20, &l), b->wo.prefix_tokens = (int32_t)l;
        else if (!strcmp(a, "--prefixes")) ok = parse_long(v, 1, 100000, &l), b->wo.n_prefixes = (int32_t)l;
        else if (!strcmp(a, "--prompt-tokens")) ok = parse_long(v, 1, 1 << 20, &l), b->wo.prompt_tokens = (int32_t)l;
        else if (!strcmp(a, "--output-tokens")) ok = parse_long(v, 1, 1 << 20, &l), b->wo.output_tokens = (int32_t)l;
        else if (!strcmp(a, "--turns")) ok = parse_long(v, 1, 1000, &l), b->wo.turns = (int32_t)l;
        else if (!strcmp(a, "--cache-salt")) b->wo.salt = v;
        else if (!strcmp(a, "--tenants")) ok = parse_long(v, 1, 100000, &l), b->wo.tenants = (int32_t)l;
        else if (!strcmp(a, "--documents")) ok = parse_long(v, 1, 100000, &l), b->wo.documents = (int32_t)l;
        else if (!strcmp(a, "--zipf")) ok = parse_double(v, &d) && d >= 0 && d <= 10, b->wo.zipf = d > 0 ? d : -1;
        else if (!strcmp(a, "--metrics-url")) {
            char *copy = strdup(v);
            b->n_murl = copy ? bench_metrics_urls(copy, b->murl, BENCH_MAX_REPLICAS, err, sizeof(err)) : -1;
            if (b->n_murl < 0) {
                fprintf(stderr, "specula bench: %s\n", copy ? err : "out of memory");
                free(copy);
                return 2;
            }
            b->murl_buf = copy;
        }
        else if (!strcmp(a, "--corpus")) b->wo.corpus_path = v;
        else if (!strcmp(a, "--concurrency")) ok = parse_long(v, 1, 100000, &b->conc), b->conc_given = true;
        else if (!strcmp(a, "--rate")) ok = parse_double(v, &d) && d > 0, b->lo.rate = d;
        else if (!strcmp(a, "--sweep-concurrency")) ok = (b->n_sweep = parse_list(v, b->sweep, MAX_SWEEP)) > 0;
        else if (!strcmp(a, "--warmup")) ok = parse_long(v, 0, 100000, &b->warmup);
        else if (!strcmp(a, "--repeat")) ok = parse_long(v, 1, BENCH_MAX_REPS, &b->reps);
        else if (!strcmp(a, "--timeout")) ok = parse_double(v, &d) && d > 0, b->lo.timeout_s = d;
        else if (!strcmp(a, "--temperature")) ok = parse_double(v, &d) && d >= 0 && d <= 2, b->lo.temperature = d;
        else if (!strcmp(a, "--top-p")) ok = parse_double(v, &d) && d > 0 && d <= 1, b->lo.top_p = d;
        else if (!strcmp(a, "--sample-seed")) ok = parse_long(v, 0, 0x7fffffffffffffffL, &l), b->lo.sample_seed = l;
        else if (!strcmp(a, "--metrics-period")) ok = parse_double(v, &d) && d >= 0, b->lo.metrics_period_s = d;
        else if (!strcmp(a, "--json")) b->json_path = v;
        else if (!strcmp(a, "--md")) b->md_path = v;
        else if (!strcmp(a, "--endpoint"))
            ok = !strcmp(v, "completions") || !strcmp(v, "chat"), b->lo.chat = !strcmp(v, "chat");
        else if (!strcmp(a, "--slo")) {
            if (bench_slo_parse(v, &b->slo, err, sizeof(err))) {
                fprintf(stderr, "specula bench: %s\n", err);
                return 2;
            }
        }
        if (!ok) {
            if (!strcmp(a, "--workload"))
                fprintf(stderr, "specula bench: unknown workload '%s' (shared-prefix, long-output, "
                        "saturate, multi-turn, code-complete, code-edit, multi-tenant, file:PATH)\n", v);
            else fprintf(stderr, "specula bench: invalid value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!b->wo.name) {
        fprintf(stderr, "specula bench: give a workload with --workload (see --help)\n");
        return 2;
    }
    if (b->n_tg == 0) b->tg[b->n_tg++].serve = ""; /* the bundled model, started here */
    if (b->n_tg == 2 && !b->compare) {
        fprintf(stderr, "specula bench: two targets need --compare\n");
        return 2;
    }
    if (b->compare && b->n_tg != 2) {
        fprintf(stderr, "specula bench: --compare needs two targets (--base-url / --serve)\n");
        return 2;
    }
    if (b->lo.rate > 0 && b->n_sweep) {
        fprintf(stderr, "specula bench: --rate and --sweep-concurrency exclude each other\n");
        return 2;
    }
    for (int i = 0; i < b->n_tg; i++) b->tg[i].label = i < n_labels ? labels[i] : (i ? "B" : "A");
    b->wo.seed = (uint64_t)seed;
    b->lo.api_key = b->api_key;
    b->lo.progress = progress < 0 ? isatty(2) : progress;
    return -1;
}

/* The tokenizer that measures lengths (deterministic prompts need a fixed
 * one): --tokenizer, --model-file, the first --serve's -m, or the bundled
 * model; NULL (lengths estimated) when none loads. Described in ri. */
static sp_model *load_tokenizer(bench_cmd *b, bench_report_info *ri) {
    char err[1024];
    char *serve_model = NULL;
    sp_model *vm = NULL;
    if (!b->tok_path && !b->model_file && b->tg[0].serve) {
        char *copy = strdup(b->tg[0].serve), *av[MAX_SERVE_ARGS];
        int n = copy ? split_args(copy, av, MAX_SERVE_ARGS) : 0;
        for (int i = 0; i + 1 < n; i++)
            if (!strcmp(av[i], "-m")) serve_model = strdup(av[i + 1]);
        free(copy);
    }
    const char *path = b->tok_path   ? b->tok_path
                       : b->model_file ? b->model_file
                       : serve_model   ? serve_model
                                       : b->def.model;
    if (path) {
        sp_model_params mp = sp_model_default_params();
        mp.vocab_only = true;
        vm = sp_model_load(path, mp, err, sizeof(err));
        if (!vm) fprintf(stderr, "specula bench: no tokenizer (%s); lengths are estimated as 4 "
                         "bytes per token\n", err);
    }
    b->wo.vocab = vm ? sp_model_get_vocab(vm) : NULL;
    if (vm) {
        const sp_model_info *mi = sp_model_get_info(vm);
        char h[65] = "";
        hash_into(path, h, sizeof(h));
        snprintf(ri->tokenizer, sizeof(ri->tokenizer), "%s (%s, %d tokens), sha256 %.16s...",
                 path, mi->arch, sp_vocab_n_tokens(b->wo.vocab), h);
    } else {
        snprintf(ri->tokenizer, sizeof(ri->tokenizer), "none: 4 bytes per token assumed");
    }
    free(serve_model);
    return vm;
}

/* Starts a --serve target's server, and fills its part of the contract:
 * what the server says of itself, or for a URL what is not reported; the
 * cache salt's use; the model files' hashes. -1 + err when the server does
 * not start. */
static int open_target(const bench_cmd *b, target *t, bench_contract *ct, bool *salt_unverified,
                       char *err, size_t errlen) {
    if (t->serve) {
        fprintf(stderr, "specula bench: starting `specula serve --port 0 %s`\n", t->serve);
        if (start_server(t, err, errlen)) return -1;
        char *copy = strdup(t->serve), *av[MAX_SERVE_ARGS];
        int n = copy ? split_args(copy, av, MAX_SERVE_ARGS) : 0;
        bench_contract_from_serve_args(ct, n, av, &b->def);
        free(copy);
    } else {
        snprintf(ct->model_file, sizeof(ct->model_file), "%s",
                 b->model_file ? b->model_file : "not reported by the server (give --model-file)");
        snprintf(ct->proposer, sizeof(ct->proposer), "not reported by the server");
        snprintf(ct->draft_file, sizeof(ct->draft_file), "not reported by the server");
        snprintf(ct->verification, sizeof(ct->verification), "not reported by the server");
        snprintf(ct->kv_type, sizeof(ct->kv_type), "not reported by the server");
        ct->block_size = 0;
        snprintf(ct->engine, sizeof(ct->engine), "not reported by the server");
        snprintf(ct->prefix_cache, sizeof(ct->prefix_cache), "not reported by the server");
        snprintf(ct->server_args, sizeof(ct->server_args), "%s", t->url);
    }
    query_models(t->url, b->api_key, ct->served_model, sizeof(ct->served_model), &ct->max_model_len,
                 t->serve ? NULL : ct);
    /* Specula honors cache_salt; another server may ignore it, and the
     * contract says only what is known */
    bool salt_known = t->serve || ct->reported;
    const char *unverified = salt_known ? "" : " (sent; whether the server honors it is not known)";
    if (b->wo.salt)
        snprintf(ct->salt_use, sizeof(ct->salt_use), "cache_salt \"%.24s\" on every request%s",
                 b->wo.salt, unverified);
    else if (!t->serve && b->isolate)
        snprintf(ct->salt_use, sizeof(ct->salt_use), "a fresh cache_salt per measured run%s",
                 unverified);
    *salt_unverified |= !salt_known && !t->serve && (b->wo.salt || b->isolate);
    if (!ct->served_model[0]) snprintf(ct->served_model, sizeof(ct->served_model), "%s", NOT_REPORTED);
    hash_into(ct->model_file, ct->model_sha256, sizeof(ct->model_sha256));
    hash_into(ct->draft_file, ct->draft_sha256, sizeof(ct->draft_sha256));
    {
        sp_model_params mp = sp_model_default_params();
        mp.vocab_only = true;
        char e2[256];
        struct stat st;
        sp_model *m = stat(ct->model_file, &st) ? NULL : sp_model_load(ct->model_file, mp, e2, sizeof(e2));
        if (m) {
            const sp_model_info *mi = sp_model_get_info(m);
            snprintf(ct->model_desc, sizeof(ct->model_desc), "%s%s%s, %d-token vocabulary, "
                     "%.1f MiB file", mi->arch, mi->name[0] ? " " : "", mi->name,
                     sp_vocab_n_tokens(sp_model_get_vocab(m)), st.st_size / 1048576.0);
            sp_model_free(m);
        }
    }
    return 0;
}

/* One workload for every target, level and repetition (the same prompts,
 * so differences are the servers'), sized to the first target's context
 * (max_model_len); and the warm-up requests (other prompts: they warm the
 * server, not its cache). -1 + err. */
static int make_workloads(bench_cmd *b, int32_t max_model_len, const char *corpus,
                          size_t corpus_len, bench_workload *wl, bench_workload *warm,
                          bench_report_info *ri, char *err, size_t errlen) {
    b->wo.max_model_len = max_model_len;
    if (bench_workload_make(&b->wo, corpus, corpus_len, wl, err, errlen)) return -1;
    snprintf(ri->workload_params, sizeof(ri->workload_params), "%s", wl->params);
    if (b->warmup > 0) {
        bench_workload_opts o2 = b->wo;
        o2.seed = b->wo.seed + 1000003; /* other prompts: warm the server, not its cache */
        o2.n = 0;
        if (bench_workload_make(&o2, corpus, corpus_len, warm, err, errlen)) return -1;
        /* items are turn-major, so these are first turns only */
        while (warm->n > b->warmup) {
            bench_item *it = &warm->items[--warm->n];
            free(it->prompt);
            free(it->salt);
            free(it->extra);
        }
    }
    return 0;
}

/* The measured runs (--repeat) of one target at one load level (l2), added
 * to R; before each, a fresh server for a --serve target (unless
 * --keep-server) and the warm-up requests when it is new; around each, the
 * server's counters. -1 + err. */
static int measure(bench_cmd *b, target *t, bench_load_opts l2, const bench_workload *wl,
                   const bench_workload *warm, bool *need_warm, int *run_k, bench_result *R,
                   char *err, size_t errlen) {
for (long r = 0; r < b->reps; r++) {
    /* every measured run starts from a cold server: a fresh
     * `specula serve` (nothing cached, no suffix store, no
     * learned acceptance), or for a URL a salt of its own */
    if (t->serve && !b->keep_server && !t->pid) {
        if (start_server(t, err, errlen)) return -1;
        *need_warm = true;
    }
    b->lo.base_url = l2.base_url = t->url;
    char salt[96];
    snprintf(salt, sizeof(salt), "specula-bench-%d-%d", (int)getpid(), (*run_k)++);
    if (*need_warm && warm->n > 0) {
        bench_load_opts wlo = l2;
        wlo.concurrency = (int32_t)warm->n;
        wlo.rate = 0;
        wlo.metrics_period_s = 0;
        wlo.progress = false;
        wlo.salt = !t->serve && b->isolate && !b->wo.salt ? "specula-bench-warmup" : NULL;
        bench_run wr;
        if (bench_load_run(&wlo, warm, &wr, err, errlen) == 0) bench_run_free(&wr);
    }
    *need_warm = false;
    l2.salt = !t->serve && b->isolate && !b->wo.salt ? salt : NULL;
    double before[BENCH_N_COUNTERS], after[BENCH_N_COUNTERS];
    double rbefore[BENCH_MAX_REPLICAS], rafter[BENCH_MAX_REPLICAS];
    if (b->n_murl) bench_cluster_read(b->murl, b->n_murl, b->api_key, before, rbefore);
    else read_counters(t->url, b->api_key, before);
    l2.seed = b->wo.seed + (uint64_t)r;
    bench_run run;
    if (bench_load_run(&l2, wl, &run, err, errlen)) return -1;
    if (b->n_murl) bench_cluster_read(b->murl, b->n_murl, b->api_key, after, rafter);
    else read_counters(t->url, b->api_key, after);
    bench_result_add(R, &run, &b->slo);
    bench_result_add_counters(R, before, after);
    if (b->n_murl) bench_result_add_replicas(R, b->n_murl, rbefore, rafter);
    bench_run_free(&run);
    if (t->serve && !b->keep_server) stop_server(t);
}
    return 0;
}

/* The contract's description of what was sent: lengths, prefix sharing, the
 * load, sampling, what each repetition started from. */
static void describe_load(const bench_cmd *b, const bench_result *res, bool salt_unverified,
                          bench_report_info *ri) {
    const bench_result *r0 = res;
    if (r0->s_plen.n)
        snprintf(ri->prompt_lens, sizeof(ri->prompt_lens),
                 "p50 %.0f, p90 %.0f, min %.0f, max %.0f, mean %.1f (server's usage)",
                 r0->s_plen.p50, r0->s_plen.p90, r0->s_plen.min, r0->s_plen.max, r0->s_plen.mean);
    else snprintf(ri->prompt_lens, sizeof(ri->prompt_lens), "not reported by the server");
    snprintf(ri->output_lens, sizeof(ri->output_lens),
             "p50 %.0f, p90 %.0f, min %.0f, max %.0f, mean %.1f", r0->s_olen.p50, r0->s_olen.p90,
             r0->s_olen.min, r0->s_olen.max, r0->s_olen.mean);
    snprintf(ri->prefix_sharing, sizeof(ri->prefix_sharing),
             "%.1f%% of prompt bytes are a prefix shared with an earlier prompt",
             100 * r0->prefix_share);
    if (b->lo.rate > 0)
        snprintf(ri->load, sizeof(ri->load), "open loop, %.3g requests/s (Poisson, seed %llu)%s",
                 b->lo.rate, (unsigned long long)b->wo.seed, b->conc_given ? ", capped in flight" : "");
    else if (b->n_sweep) {
        size_t off = (size_t)snprintf(ri->load, sizeof(ri->load), "closed loop, concurrency sweep");
        for (int i = 0; i < b->n_sweep && off < sizeof(ri->load); i++)
            off += (size_t)snprintf(ri->load + off, sizeof(ri->load) - off, "%s%d", i ? "," : " ",
                                    b->sweep[i]);
    } else
        snprintf(ri->load, sizeof(ri->load), "closed loop, at most %d in flight", res->concurrency);
    snprintf(ri->sampling, sizeof(ri->sampling), "temperature %g, top_p %g%s%s, streamed",
             b->lo.temperature, b->lo.top_p, b->lo.sample_seed >= 0 ? ", seed given" : "",
             b->lo.ignore_eos ? ", ignore_eos" : "");
    snprintf(ri->reps_note, sizeof(ri->reps_note), "the same prompts each time, from a cold %s; "
             "spread below", b->keep_server ? "cache (salt) on a kept server"
             : salt_unverified ? "server (a fresh `specula serve`), or for a URL a fresh "
                                 "cache_salt the server may ignore"
             : "server (a fresh `specula serve`, or for a URL a fresh cache_salt)");
}

int bench_main(int argc, char **argv, const bench_defaults *def) {
    bench_cmd *b = calloc(1, sizeof(bench_cmd));
    if (!b) {
        fprintf(stderr, "specula bench: out of memory\n");
        return 1;
    }
    int rc = parse_args(argc, argv, def, b);
    if (rc >= 0) {
        free(b->murl_buf);
        free(b);
        return rc;
    }
    rc = 1;
    char err[1024];
    char *corpus = NULL;
    size_t corpus_len = 0;
    sp_model *vm = NULL;
    bench_workload *wl = calloc(1, sizeof(bench_workload));
    bench_workload warm = {0};
    bench_result *res = calloc((size_t)MAX_CFG * (b->n_sweep ? b->n_sweep : 1), sizeof(bench_result));
    int n_res = 0;
    bench_report_info ri = {.workload = b->wo.name, .seed = b->wo.seed, .warmup = (int32_t)b->warmup,
                            .reps = (int32_t)b->reps, .slo = &b->slo, .n_cfg = b->n_tg};
    if (!wl || !res) {
        fprintf(stderr, "specula bench: out of memory\n");
        goto done;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ri.endpoint = b->lo.chat ? "/v1/chat/completions" : "/v1/completions";
    /* a URL nothing answers at fails now, not after a run of failures and
     * a report of nothing (any HTTP answer, even an error, is a server) */
    for (int c = 0; c < b->n_tg; c++) {
        if (b->tg[c].serve) continue;
        char *body = NULL;
        if (bench_http_get(b->tg[c].url, "/v1/models", b->api_key, 10, &body, err, sizeof(err)) < 0) {
            fprintf(stderr, "specula bench: cannot reach %s: %s\n", b->tg[c].url, err);
            goto done;
        }
        free(body);
    }
    vm = load_tokenizer(b, &ri);
    if (strncmp(b->wo.name, "file:", 5)) {
        corpus = bench_corpus_load(b->wo.corpus_path, &corpus_len, err, sizeof(err));
        if (!corpus) {
            fprintf(stderr, "specula bench: %s\n", err);
            goto done;
        }
    }
    fprintf(stderr, "specula bench: measuring host facts (CPU, memory bandwidth)\n");
    bench_contract_host(&ri.cfg[0]);
    ri.cfg[1] = ri.cfg[0];
    {
        time_t now = time(NULL);
        strftime(ri.when, sizeof(ri.when), "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
    }
    int32_t n_levels = b->n_sweep ? b->n_sweep : 1;
    bool any_ok = false, salt_unverified = false;
    int run_k = 0;
    for (int c = 0; c < b->n_tg; c++) {
        target *t = &b->tg[c];
        bench_contract *ct = &ri.cfg[c];
        if (open_target(b, t, ct, &salt_unverified, err, sizeof(err)) ||
            (c == 0 && make_workloads(b, ct->max_model_len, corpus, corpus_len, wl, &warm, &ri, err,
                                      sizeof(err)))) {
            fprintf(stderr, "specula bench: %s\n", err);
            goto done;
        }
        b->lo.model = b->model_name ? b->model_name
                      : (strcmp(ct->served_model, NOT_REPORTED) ? ct->served_model : NULL);
        bool need_warm = true;
        for (int32_t lv = 0; lv < n_levels; lv++) {
            bench_load_opts l2 = b->lo;
            l2.concurrency = b->n_sweep ? b->sweep[lv] : b->conc_given ? (int32_t)b->conc
                             : b->lo.rate > 0 ? 0 : wl->default_concurrency;
            char label[64];
            if (b->n_sweep) snprintf(label, sizeof(label), "%s c=%d", t->label, l2.concurrency);
            else snprintf(label, sizeof(label), "%s", t->label);
            l2.label = label;
            bench_result *R = &res[n_res++];
            bench_result_init(R, label, l2.concurrency, b->lo.rate);
            if (measure(b, t, l2, wl, &warm, &need_warm, &run_k, R, err, sizeof(err))) {
                fprintf(stderr, "specula bench: %s\n", err);
                goto done;
            }
            bench_result_finish(R);
            any_ok |= R->n_ok > 0;
        }
        if (t->serve) stop_server(t);
    }
    describe_load(b, res, salt_unverified, &ri);
    bench_report_text(stdout, &ri, res, n_res, b->compare);
    if (b->json_path && bench_report_json(b->json_path, &ri, res, n_res, b->compare, err, sizeof(err))) {
        fprintf(stderr, "specula bench: %s\n", err);
        goto done;
    }
    if (b->md_path && bench_report_md(b->md_path, &ri, res, n_res, b->compare, err, sizeof(err))) {
        fprintf(stderr, "specula bench: %s\n", err);
        goto done;
    }
    if (!any_ok) fprintf(stderr, "specula bench: no request succeeded\n");
    rc = any_ok ? 0 : 1;
done:
    for (int c = 0; c < b->n_tg; c++) stop_server(&b->tg[c]);
    if (wl) bench_workload_free(wl);
    free(wl);
    bench_workload_free(&warm);
    for (int i = 0; res && i < n_res; i++) bench_result_free(&res[i]);
    free(res);
    free(corpus);
    free(b->murl_buf);
    free(b);
    sp_model_free(vm);
    curl_global_cleanup();
    return rc;
}
