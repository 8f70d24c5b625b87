/* cmd_serve.c: `specula serve`: the OpenAI-compatible HTTP server. It
 * listens first (/health answers 503 while the model loads), then loads the
 * model and the engine, and serves until SIGINT or SIGTERM; then it drains:
 * no new requests (503; /health says "draining"), those in flight get --drain-timeout
 * seconds to finish (a second signal cuts that short), the rest are
 * cancelled with a clean final event, and it exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "common.h"
#include "server/server.h"

#define MAX_KEYS 64

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: specula serve [-m MODEL] [--host H] [--port P] [options] [engine options]\n"
            "  -m MODEL               GGUF model; also --model MODEL, or MODEL alone (default: %s)\n"
            "  --host H               address to listen on (default 127.0.0.1)\n"
            "  --port P               TCP port (default 8080; 0: any free port, printed)\n"
            "  --api-key KEY          require 'Authorization: Bearer KEY'; repeat for several\n"
            "                         tenants (each key gets its own prefix-cache salt)\n"
            "  --api-key-file FILE    the API keys in FILE, one a line, kept out of the process\n"
            "                         list (FILE must not be readable by group or others)\n"
            "  --served-model-name N  the model name of the API (default: the file's base name)\n"
            "  --chat-template NAME   chatml, llama3, llama2, mistral, phi3, gemma (default:\n"
            "                         recognized from the model's tokenizer.chat_template)\n"
            "  --max-queue N          generation requests in flight before 429 (default 256)\n"
            "  --max-body BYTES       largest request body, e.g. 8M (default 8M)\n"
            "  --max-body-total BYTES request bodies buffered at once, all connections together,\n"
            "                         before 503 (default 8 x --max-body)\n"
            "  --max-conns N          open connections (default 1024; 16 more answer /health only)\n"
            "  --max-conns-per-ip N   open connections from one client address (default 256)\n"
            "  --recv-timeout S       seconds a connection has to send a whole request (head and\n"
            "                         body), counted from when it starts waiting for one, idle\n"
            "                         keep-alive included (default 30)\n"
            "  --http-threads N       HTTP event-loop threads (default 2)\n"
            "  --metrics-key KEY      /metrics requires 'Authorization: Bearer KEY'\n"
            "  --metrics-public       /metrics needs no key even with --api-key (default: with one\n"
            "                         --api-key, that key; with several, closed unless\n"
            "                         --metrics-key is given)\n"
            "  --no-webui             no web page (GET /) and no dashboard (GET /dashboard)\n"
            "  --log-format text|json|off  one line per generation request on stderr (id, tenant\n"
            "                         hash, status, tokens, TTFT, duration, finish) and a summary\n"
            "                         every 10 s while busy (default text)\n"
            "  --cors-origin ORIGIN   let pages of ORIGIN (or * for any) call the API from a\n"
            "                         browser (CORS headers, OPTIONS preflight); off by default\n"
            "  --drain-timeout S      on SIGTERM/SIGINT, seconds the requests in flight get to\n"
            "                         finish before they are cancelled (default 10)\n"
            "  --stamp-chunks         benchmarking: streamed chunks carry \"specula_timing\", the\n"
            "                         CLOCK_MONOTONIC microsecond at which the engine handed\n"
            "                         the server their tokens (bench/server/run.sh)\n"
            "endpoints: POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize;\n"
            "           GET /v1/models, /health, /metrics; / (web page), /dashboard\n"
            "engine options:\n%s",
            cli_default_model() ? cli_default_model() : "none found", cli_engine_usage);
}

static bool parse_bytes(const char *s, size_t *out) {
    char *end;
    double d = strtod(s, &end);
    if (end == s || d < 1) return false;
    double mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024.0, end++;
    else if (*end == 'm' || *end == 'M') mul = 1048576.0, end++;
    else if (*end == 'g' || *end == 'G') mul = 1073741824.0, end++;
    if (*end == 'i') end++;
    if (*end == 'B') end++;
    if (*end || d * mul > 1e12) return false;
    *out = (size_t)(d * mul);
    return true;
}

/* The soft RLIMIT_NOFILE raised to at least `need` (up to the hard limit);
 * false when the hard limit is lower. */
static bool raise_fd_limit(rlim_t need) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return true; /* cannot tell: MHD will say */
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) return false;
        rl.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &rl)) return false;
    }
    return true;
}

static char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char *s = strdup(b);
    if (!s) return NULL;
    size_t n = strlen(s);
    if (n > 5 && !strcmp(s + n - 5, ".gguf")) s[n - 5] = 0;
    return s;
}

/* The served configuration as a JSON object (/v1/models "specula"): what a
 * benchmark's reproducibility record needs and cannot see from outside. */
static void serve_info(char *out, size_t cap, const char *model, const cli_engine *ce, int32_t n_ctx) {
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        out[0] = 0;
        return;
    }
    /* file names only: every tenant can read /v1/models, and the server's
     * directory layout is none of their business */
    const char *mb = strrchr(model, '/');
    cJSON_AddStringToObject(o, "version", SPECULA_VERSION);
    cJSON_AddStringToObject(o, "model_file", mb ? mb + 1 : model);
    const bool spec_draft = ce->draft != NULL;
    if (spec_draft && ce->draft_path) {
        const char *db = strrchr(ce->draft_path, '/');
        cJSON_AddStringToObject(o, "draft_file", db ? db + 1 : ce->draft_path);
    } else {
        cJSON_AddNullToObject(o, "draft_file");
    }
    cJSON_AddStringToObject(o, "spec", sp_spec_mode_str(ce->p.spec));
    cJSON_AddNumberToObject(o, "spec_k", ce->p.spec_k);
    cJSON_AddBoolToObject(o, "spec_adaptive", ce->p.spec_adaptive);
    cJSON_AddStringToObject(o, "kv_type", ce->p.kv_type == SP_KV_F16 ? "f16" : ce->p.kv_type == SP_KV_Q8_0 ? "q8_0" : "f32");
    cJSON_AddNumberToObject(o, "kv_block_size", ce->p.kv_block_size);
    cJSON_AddBoolToObject(o, "prefix_cache", ce->p.prefix_cache);
    cJSON_AddNumberToObject(o, "max_seqs", ce->p.max_seqs);
    cJSON_AddNumberToObject(o, "max_batch_tokens", ce->p.max_batch_tokens);
    cJSON_AddNumberToObject(o, "n_ctx", n_ctx);
    cJSON_AddNumberToObject(o, "threads", ce->p.n_threads);
    if (!cJSON_PrintPreallocated(o, out, (int)cap, false)) out[0] = 0;
    cJSON_Delete(o);
}

/* Serves until SIGINT or SIGTERM (blocked in sigs), then refuses new
 * requests and lets those in flight finish for up to drain_s seconds (a
 * second signal ends the wait); the caller's server_stop cancels the rest. */
static void wait_and_drain(http_server *s, const sigset_t *sigs, long drain_s) {
    int sig = 0;
    sigwait(sigs, &sig);
    server_drain(s);
    int64_t n = server_in_flight(s);
    fprintf(stderr, "specula serve: signal %d, stopping (%lld request(s) in flight, up to %ld s "
            "to finish)\n", sig, (long long)n, drain_s);
    fflush(stderr);
    struct timespec t0, t1, slice = {0, 50 * 1000000L};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (server_in_flight(s) > 0) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 >= (double)drain_s) break;
        if (sigtimedwait(sigs, NULL, &slice) > 0) break; /* a second signal: now */
    }
    n = server_in_flight(s);
    if (n) fprintf(stderr, "specula serve: cancelling %lld request(s)\n", (long long)n);
}

/* --api-key-file's text: its keys point into it for the server's lifetime */
static char key_file_text[16384];
static bool key_file_read;

/* Adds the keys of --api-key-file FILE (one a line; blank lines and a
 * trailing CR skipped) to keys. FILE must be private to its owner: a key
 * file that others can read is a key they have. False after saying why. */
static bool read_key_file(const char *path, const char **keys, server_opts *o) {
    if (key_file_read) {
        fprintf(stderr, "specula serve: --api-key-file is given twice\n");
        return false;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        fprintf(stderr, "specula serve: cannot open --api-key-file %s: %s\n", path, strerror(errno));
        return false;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st)) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    else if (st.st_mode & (S_IRWXG | S_IRWXO)) why = "readable or writable by group or others (chmod 600 it)";
    else if (st.st_size >= (off_t)sizeof(key_file_text)) why = "larger than 16 KiB";
    ssize_t n = 0;
    if (!why && (n = read(fd, key_file_text, sizeof(key_file_text) - 1)) < 0) why = strerror(errno);
    close(fd);
    if (why) {
        fprintf(stderr, "specula serve: --api-key-file %s: %s\n", path, why);
        return false;
    }
    key_file_text[n] = 0;
    key_file_read = true;
    int before = o->n_api_keys;
    char *save = NULL;
    for (char *line = strtok_r(key_file_text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if (!len) continue;
        if (o->n_api_keys >= MAX_KEYS) {
            fprintf(stderr, "specula serve: more than %d API keys\n", MAX_KEYS);
            return false;
        }
        keys[o->n_api_keys++] = line;
    }
    if (o->n_api_keys == before) {
        fprintf(stderr, "specula serve: --api-key-file %s holds no key\n", path);
        return false;
    }
    return true;
}

/* Reads the command line into *model, keys (o->api_keys points there), o,
 * ce and *drain_s, and checks it. -1 to go on; otherwise the exit code (0
 * after --help, 2 for a bad command line, said on stderr). */
static int parse_serve(int argc, char **argv, const char **model, const char **keys,
                       server_opts *o, cli_engine *ce, long *drain_s) {
    long l;
    bool model_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = cli_alias(argv[i]), *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = cli_engine_opt("serve", a, v, ce);
        if (used < 0) return 2;
        if (used) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--stamp-chunks")) {
            o->stamp_chunks = true;
            continue;
        }
        if (!strcmp(a, "--no-webui")) { /* webui: no page, no dashboard */
            o->no_webui = true;
            continue;
        }
        if (!strcmp(a, "--metrics-public")) {
            o->metrics_public = true;
            continue;
        }
        bool takes = !strcmp(a, "-m") || !strcmp(a, "--host") || !strcmp(a, "--port") ||
                     !strcmp(a, "--api-key") || !strcmp(a, "--api-key-file") ||
                     !strcmp(a, "--served-model-name") ||
                     !strcmp(a, "--chat-template") || !strcmp(a, "--max-queue") ||
                     !strcmp(a, "--max-body") || !strcmp(a, "--drain-timeout") ||
                     !strcmp(a, "--max-body-total") || !strcmp(a, "--max-conns") ||
                     !strcmp(a, "--max-conns-per-ip") || !strcmp(a, "--recv-timeout") ||
                     !strcmp(a, "--http-threads") || !strcmp(a, "--metrics-key") ||
                     !strcmp(a, "--cors-origin") || !strcmp(a, "--log-format");
        if (!takes && a[0] != '-' && !model_given) { /* vLLM-style positional model */
            *model = a, model_given = true;
            continue;
        }
        if (!takes) {
            fprintf(stderr, "specula serve: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "specula serve: %s needs a value\n", a);
            return 2;
        }
        i++;
        bool ok = true;
        if (!strcmp(a, "-m")) *model = v, model_given = true;
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--port")) ok = parse_long(v, 0, 65535, &l), o->port = (int)l;
        else if (!strcmp(a, "--api-key")) {
            ok = *v && o->n_api_keys < MAX_KEYS;
            if (ok) keys[o->n_api_keys++] = v;
        } else if (!strcmp(a, "--api-key-file")) {
            if (!read_key_file(v, keys, o)) return 2;
        } else if (!strcmp(a, "--served-model-name")) ok = *v, o->served_name = v;
        else if (!strcmp(a, "--chat-template")) o->chat_template = v;
        else if (!strcmp(a, "--max-queue")) ok = parse_long(v, 1, 1 << 20, &l), o->max_queue = (int)l;
        else if (!strcmp(a, "--max-body")) ok = parse_bytes(v, &o->max_body);
        else if (!strcmp(a, "--drain-timeout")) ok = parse_long(v, 0, 3600, drain_s);
        else if (!strcmp(a, "--max-body-total")) ok = parse_bytes(v, &o->max_body_total);
        else if (!strcmp(a, "--max-conns")) ok = parse_long(v, 1, 1 << 20, &l), o->max_conns = (int)l;
        else if (!strcmp(a, "--max-conns-per-ip"))
            ok = parse_long(v, 1, 1 << 20, &l), o->max_conns_per_ip = (int)l;
        else if (!strcmp(a, "--recv-timeout")) ok = parse_long(v, 1, 3600, &l), o->recv_timeout_s = (int)l;
        else if (!strcmp(a, "--http-threads")) ok = parse_long(v, 1, 64, &l), o->http_threads = (int)l;
        else if (!strcmp(a, "--metrics-key")) ok = *v, o->metrics_key = v;
        else if (!strcmp(a, "--cors-origin")) ok = *v, o->cors_origin = v;
        else if (!strcmp(a, "--log-format")) {
            o->log_json = !strcmp(v, "json");
            o->no_request_log = !strcmp(v, "off");
            ok = o->log_json || o->no_request_log || !strcmp(v, "text");
        }
        if (!ok) {
            fprintf(stderr, "specula serve: invalid value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!*model) {
        fprintf(stderr, "specula serve: no model given (-m) and no default model found\n");
        return 2;
    }
    if (o->max_body_total && o->max_body_total < (o->max_body ? o->max_body : 8u << 20)) {
        fprintf(stderr, "specula serve: --max-body-total is smaller than --max-body\n");
        return 2;
    }
    if (o->metrics_key && o->metrics_public) {
        fprintf(stderr, "specula serve: --metrics-key and --metrics-public contradict each other\n");
        return 2;
    }
    /* a socket per connection, and a few for the model files and MHD */
    if (!raise_fd_limit((rlim_t)(o->max_conns > 0 ? o->max_conns : 1024) + 16 + 64)) {
        fprintf(stderr, "specula serve: the file descriptor limit is too low for --max-conns %d "
                "(ulimit -n)\n", o->max_conns > 0 ? o->max_conns : 1024);
        return 2;
    }
    if (o->n_api_keys > 1 && !o->metrics_key && !o->metrics_public)
        fprintf(stderr, "specula serve: /metrics is closed with several API keys; give "
                "--metrics-key KEY for Prometheus, or --metrics-public\n");
    return -1;
}

int cmd_serve(int argc, char **argv) {
    const char *model = cli_default_model();
    const char *keys[MAX_KEYS];
    server_opts o = {.host = "127.0.0.1", .port = 8080, .api_keys = keys};
    cli_engine ce = cli_engine_default();
    long drain_s = 10;
    int prc = parse_serve(argc, argv, &model, keys, &o, &ce, &drain_s);
    if (prc >= 0) return prc;
    char *name = o.served_name ? NULL : base_name(model);
    if (!o.served_name) o.served_name = name;

    /* SIGINT / SIGTERM are taken by sigwait below; every thread the server
     * and the engine start inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    int rc = 1;
    sp_model *m = NULL;
    sp_engine *e = NULL;
    http_server *s = server_start(&o, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "specula serve: %s\n", err);
        free(name);
        return 1;
    }
    /* bound before the model loads so that /health can say "loading" (503);
     * "listening" is said only once requests are served (below) */
    fprintf(stderr, "specula serve: loading %s; http://%s:%d answers /health with 503 until "
            "ready\n", model, o.host, server_port(s));
    fflush(stderr);
    m = sp_model_load(model, sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "specula serve: %s\n", err);
        goto done;
    }
    ce.model = model;
    if (cli_engine_open(&ce)) goto done;
    cli_warn_ctx("serve", m, ce.p.n_ctx);
    e = sp_engine_create(m, ce.p, err, sizeof(err));
    if (!e) {
        cli_engine_create_failed(&ce, "serve", err);
        goto done;
    }
    /* the engine's context length, as sp_engine_create chooses it */
    int32_t n_ctx = ce.p.n_ctx;
    if (n_ctx <= 0) {
        int32_t tr = sp_model_get_info(m)->n_ctx_train;
        n_ctx = tr > 0 ? tr : 2048;
        if (n_ctx > 8192) n_ctx = 8192;
    }
    char info[2048];
    serve_info(info, sizeof(info), model, &ce, n_ctx);
    if (server_ready(s, m, e, n_ctx, info[0] ? info : NULL, err, sizeof(err))) {
        fprintf(stderr, "specula serve: %s\n", err);
        goto done;
    }
    if (server_chat_template_error(s))
        fprintf(stderr, "specula serve: warning: %s: /v1/chat/completions answers 400 (choose a "
                "template with --chat-template NAME|FILE; /v1/completions works)\n",
                server_chat_template_error(s));
    fprintf(stderr, "specula serve: listening on http://%s:%d: model '%s', context %d, chat "
            "template %s, spec %s\n", o.host, server_port(s), o.served_name, n_ctx,
            server_chat_template_name(s), sp_spec_mode_str(ce.p.spec));
    fflush(stderr);
    wait_and_drain(s, &sigs, drain_s);
    rc = 0;
done:
    server_stop(s);
    sp_engine_free(e);
    server_free(s);
    cli_engine_close(&ce);
    sp_model_free(m);
    free(name);
    return rc;
}
