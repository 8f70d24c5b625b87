/* cmd_batch.c: `specula batch`: the requests of a JSONL file (OpenAI
 * completion fields) through one engine, at most C in flight, submitted in
 * file order; one JSON line per request on stdout, in input order. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "common.h"

static void batch_usage(FILE *f) {
    fprintf(f,
            "usage: specula batch [-m MODEL] -f PROMPTS.jsonl [--concurrency C] [engine options]\n"
            "  -m MODEL          GGUF model; also --model MODEL, or MODEL alone (default: %s)\n"
            "  -f FILE           one JSON object per line: id, prompt, max_tokens (16),\n"
            "                    temperature (1), top_p (1), seed, stop (string or array),\n"
            "                    cache_salt\n"
            "  --concurrency C   requests in flight at once (default 1)\n"
            "  --stats           print the engine's statistics as JSON on stderr at the end\n"
            "engine options:\n%s",
            cli_default_model() ? cli_default_model() : "none found", cli_engine_usage);
}

typedef struct {
    char *id;              /* as given (JSON text of the id value) */
    char *prompt;
    int32_t max_tokens;
    sp_sampler_params sp;
    char *stop[16];
    int32_t n_stop;
    char *salt;
    /* result, filled by the engine thread */
    sp_token *toks;
    int32_t n_toks, cap;
    char *text;
    size_t text_len, text_cap;
    sp_request_stats st;
    char error[256];
    bool done;
} job;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t in_flight;
} shared;

typedef struct {
    job *j;
    shared *sh;
} cb_arg;

static void on_event(const sp_event *ev, void *user) {
    cb_arg *a = user;
    job *j = a->j;
    if (j->n_toks + ev->n_tokens > j->cap) {
        int32_t cap = (j->n_toks + ev->n_tokens) * 2;
        sp_token *t = realloc(j->toks, (size_t)cap * sizeof(sp_token));
        if (t) j->toks = t, j->cap = cap;
    }
    if (j->n_toks + ev->n_tokens <= j->cap) {
        memcpy(j->toks + j->n_toks, ev->tokens, (size_t)ev->n_tokens * sizeof(sp_token));
        j->n_toks += ev->n_tokens;
    }
    if (j->text_len + ev->text_len + 1 > j->text_cap) {
        size_t cap = (j->text_len + ev->text_len + 1) * 2;
        char *t = realloc(j->text, cap);
        if (t) j->text = t, j->text_cap = cap;
    }
    if (j->text_len + ev->text_len + 1 <= j->text_cap) {
        memcpy(j->text + j->text_len, ev->text, ev->text_len);
        j->text_len += ev->text_len;
    }
    if (ev->finished) {
        pthread_mutex_lock(&a->sh->mu);
        j->st = *ev->stats;
        if (ev->error) snprintf(j->error, sizeof(j->error), "%s", ev->error);
        j->done = true;
        a->sh->in_flight--;
        pthread_cond_broadcast(&a->sh->cv);
        pthread_mutex_unlock(&a->sh->mu);
    }
}

static void job_free(job *j) {
    free(j->id);
    free(j->prompt);
    for (int32_t i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->salt);
    free(j->toks);
    free(j->text);
}

/* Parses one input line into j; false + message in err. */
static bool parse_line(const char *line, job *j, long lineno, char *err, size_t errlen) {
    cJSON *o = cJSON_Parse(line);
    bool ok = false;
    memset(j, 0, sizeof(*j));
    j->max_tokens = 16;
    j->sp = sp_sampler_default_params();
    j->sp.temperature = 1.0f; /* OpenAI's defaults: no top-k or min-p */
    j->sp.top_p = 1.0f;
    j->sp.top_k = 0;
    j->sp.min_p = 0.0f;
    if (!o || !cJSON_IsObject(o)) {
        snprintf(err, errlen, "line %ld: not a JSON object", lineno);
        goto done;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (v) j->id = cJSON_PrintUnformatted(v);
    else {
        char buf[32];
        snprintf(buf, sizeof(buf), "%ld", lineno);
        j->id = strdup(buf);
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (!cJSON_IsString(v)) {
        snprintf(err, errlen, "line %ld: \"prompt\" must be a string", lineno);
        goto done;
    }
    j->prompt = strdup(v->valuestring);
    v = cJSON_GetObjectItemCaseSensitive(o, "max_tokens");
    if (v) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1 << 20 ||
            v->valuedouble != (double)(int32_t)v->valuedouble) {
            snprintf(err, errlen, "line %ld: \"max_tokens\" must be an integer >= 1", lineno);
            goto done;
        }
        j->max_tokens = (int32_t)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "temperature");
    if (v) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2) {
            snprintf(err, errlen, "line %ld: \"temperature\" must be a number in [0, 2]", lineno);
            goto done;
        }
        j->sp.temperature = (float)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "top_p");
    if (v) {
        if (!cJSON_IsNumber(v) || v->valuedouble <= 0 || v->valuedouble > 1) {
            snprintf(err, errlen, "line %ld: \"top_p\" must be a number in (0, 1]", lineno);
            goto done;
        }
        j->sp.top_p = (float)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (v) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0) {
            snprintf(err, errlen, "line %ld: \"seed\" must be a non-negative integer", lineno);
            goto done;
        }
        j->sp.seed = (uint64_t)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (cJSON_IsString(v)) {
        j->stop[j->n_stop++] = strdup(v->valuestring);
    } else if (cJSON_IsArray(v)) {
        const cJSON *s;
        cJSON_ArrayForEach(s, v) {
            if (!cJSON_IsString(s) || j->n_stop == 16) {
                snprintf(err, errlen, "line %ld: \"stop\" must be a string or up to 16 strings",
                         lineno);
                goto done;
            }
            j->stop[j->n_stop++] = strdup(s->valuestring);
        }
    } else if (v && !cJSON_IsNull(v)) {
        snprintf(err, errlen, "line %ld: \"stop\" must be a string or an array of strings", lineno);
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "cache_salt");
    if (cJSON_IsString(v)) j->salt = strdup(v->valuestring);
    else if (v && !cJSON_IsNull(v)) {
        snprintf(err, errlen, "line %ld: \"cache_salt\" must be a string", lineno);
        goto done;
    }
    ok = true;
done:
    cJSON_Delete(o);
    return ok;
}

static void print_result(const job *j) {
    FILE *f = stdout;
    fprintf(f, "{\"id\": %s", j->id);
    if (j->st.finish == SP_FINISH_ERROR) {
        fprintf(f, ", \"error\": ");
        cli_json_str(f, j->error, strlen(j->error));
    }
    fprintf(f, ", \"tokens\": [");
    for (int32_t i = 0; i < j->n_toks; i++) fprintf(f, "%s%d", i ? ", " : "", j->toks[i]);
    fprintf(f, "], \"text\": ");
    cli_json_str(f, j->text ? j->text : "", j->text_len);
    fprintf(f, ", \"finish_reason\": \"%s\", \"prompt_tokens\": %d, \"cached_tokens\": %d, "
               "\"cached_tokens_disk\": %d, \"queue_ms\": %.3f, \"prefill_ms\": %.3f, \"ttft_ms\": %.3f, \"decode_ms\": %.3f, "
               "\"preemptions\": %d, ",
            sp_finish_reason_str(j->st.finish), j->st.prompt_tokens, j->st.cached_tokens,
            j->st.cached_tokens_disk, j->st.queue_ms, j->st.prefill_ms, j->st.ttft_ms, j->st.decode_ms, j->st.preemptions);
    cli_print_spec(f, &j->st);
    fprintf(f, "}\n");
    fflush(f);
}

/* CPU time of the process so far (every thread), in ms. */
static double cpu_ms(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-3;
}

/* wall_ms, cpu_ms: first submit to last answer (model load and engine
 * creation, with its calibration, excluded); CPU time is the steadier
 * measure on a shared machine */
static void print_stats(sp_engine *e, double wall_ms, double cpu) {
    sp_engine_stats s;
    sp_engine_get_stats(e, &s);
    fprintf(stderr, "{\"wall_ms\": %.3f, \"cpu_ms\": %.3f, \"spec_steps\": %llu, \"spec_drafted\": %llu, "
            "\"spec_accepted\": %llu, \"spec_planned_zero\": %llu, \"draft_ms\": %.3f, "
            "\"verify_ms\": %.3f, \"guard_off_steps\": %llu}\n", wall_ms, cpu, (unsigned long long)s.spec_steps,
            (unsigned long long)s.spec_drafted, (unsigned long long)s.spec_accepted,
            (unsigned long long)s.spec_planned_zero, s.draft_ms, s.verify_ms,
            (unsigned long long)s.spec_guard_off_steps);
    fprintf(stderr, "{\"steps\": %llu, \"submitted\": %llu, \"finished\": %llu, \"preemptions\": %llu, "
            "\"prompt_tokens\": %llu, \"prefill_tokens\": %llu, \"decode_tokens\": %llu, "
            "\"recomputed_tokens\": %llu, \"cache_query_tokens\": %llu, \"cache_hit_tokens\": %llu, "
            "\"evictions_pressure\": %llu, \"evictions_flush\": %llu, \"blocks_total\": %d, "
            "\"blocks_free\": %d, \"blocks_cached\": %d, \"blocks_in_use\": %d, "
            "\"kv_bytes_total\": %zu, \"kv_bytes_cached\": %zu, \"kv_bytes_window\": %zu, "
            "\"window_blocks_total\": %d, \"h_tokens_hist\": [",
            (unsigned long long)s.steps, (unsigned long long)s.submitted,
            (unsigned long long)s.finished, (unsigned long long)s.preemptions,
            (unsigned long long)s.prompt_tokens, (unsigned long long)s.prefill_tokens,
            (unsigned long long)s.decode_tokens, (unsigned long long)s.recomputed_tokens,
            (unsigned long long)s.cache_query_tokens, (unsigned long long)s.cache_hit_tokens,
            (unsigned long long)s.evictions_pressure, (unsigned long long)s.evictions_flush,
            s.blocks_total, s.blocks_free, s.blocks_cached, s.blocks_in_use, s.kv_bytes_total,
            s.kv_bytes_cached, s.kv_bytes_window, s.window_blocks_total);
    for (int i = 0; i < 11; i++)
        fprintf(stderr, "%s%llu", i ? ", " : "", (unsigned long long)s.h_tokens_hist[i]);
    fprintf(stderr, "], \"cache_hit_tokens_disk\": %llu, \"disk\": {\"on\": %s, \"blocks\": %llu, "
            "\"bytes\": %llu, \"writes\": %llu, \"skipped\": %llu, \"evictions\": %llu, "
            "\"restored\": %llu, \"restore_ms\": %.3f, \"declined\": %llu, \"corrupt\": %llu}}\n",
            (unsigned long long)s.cache_hit_tokens_disk, s.disk_on ? "true" : "false",
            (unsigned long long)s.disk_blocks, (unsigned long long)s.disk_bytes,
            (unsigned long long)s.disk_writes,
            (unsigned long long)(s.disk_skipped_queue + s.disk_skipped_cap + s.disk_skipped_error),
            (unsigned long long)s.disk_evictions, (unsigned long long)s.disk_restored,
            s.disk_restore_ms, (unsigned long long)s.disk_declined,
            (unsigned long long)s.disk_corrupt);
}

int cmd_batch(int argc, char **argv) {
    const char *model = cli_default_model(), *file = NULL;
    long conc = 1;
    bool stats = false;
    cli_engine ce = cli_engine_default();
    bool model_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = cli_alias(argv[i]), *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = cli_engine_opt("batch", a, v, &ce);
        if (used < 0) return 2;
        if (used) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            batch_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--stats")) {
            stats = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "-f") || !strcmp(a, "--concurrency")) {
            if (!v) {
                fprintf(stderr, "specula batch: %s needs a value\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "-m")) model = v, model_given = true;
            else if (!strcmp(a, "-f")) file = v;
            else if (!parse_long(v, 1, 4096, &conc)) {
                fprintf(stderr, "specula batch: invalid value '%s' for --concurrency\n", v);
                return 2;
            }
        } else if (a[0] != '-' && !model_given) {
            model = a, model_given = true; /* vLLM-style positional model */
        } else {
            fprintf(stderr, "specula batch: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "specula batch: no model given (-m) and no default model found\n");
        return 2;
    }
    if (!file) {
        fprintf(stderr, "specula batch: give the requests with -f FILE\n");
        return 2;
    }
    size_t len;
    char *data = cli_read_file(file, &len);
    if (!data) return 1;
    /* parse every line first: a bad file is refused before any work */
    int32_t n = 0, cap = 16, rc = 1;
    job *jobs = malloc((size_t)cap * sizeof(job));
    cb_arg *args = NULL;
    sp_model *m = NULL;
    sp_engine *e = NULL;
    shared sh = {.in_flight = 0};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    char err[512];
    long lineno = 0;
    for (char *line = data, *next; jobs && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (strspn(line, " \t\r") == strlen(line)) continue;
        if (n == cap) {
            job *nj = realloc(jobs, (size_t)cap * 2 * sizeof(job));
            if (!nj) goto done;
            jobs = nj;
            cap *= 2;
        }
        if (!parse_line(line, &jobs[n], lineno, err, sizeof(err))) {
            job_free(&jobs[n]);
            fprintf(stderr, "specula batch: %s: %s\n", file, err);
            rc = 2;
            goto done;
        }
        n++;
    }
    if (!jobs) goto done;
    m = sp_model_load(model, sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "specula: %s\n", err);
        goto done;
    }
    ce.model = model;
    if (cli_engine_open(&ce)) goto done;
    cli_warn_ctx("batch", m, ce.p.n_ctx);
    e = sp_engine_create(m, ce.p, err, sizeof(err));
    if (!e) {
        cli_engine_create_failed(&ce, "batch", err);
        goto done;
    }
    args = calloc((size_t)n + 1, sizeof(cb_arg));
    if (!args) goto done;
    int32_t next_submit = 0, next_print = 0;
    const double t_start = time_ms(), cpu_start = cpu_ms();
    pthread_mutex_lock(&sh.mu);
    while (next_print < n) {
        while (next_submit < n && sh.in_flight < conc) {
            job *j = &jobs[next_submit];
            args[next_submit] = (cb_arg){j, &sh};
            sp_request_params rp = sp_request_default_params();
            rp.logprobs = -1; /* the output lines carry none */
            rp.prompt = j->prompt;
            rp.max_tokens = j->max_tokens;
            rp.sampling = j->sp;
            rp.stop = (const char *const *)j->stop;
            rp.n_stop = j->n_stop;
            rp.cache_salt = j->salt;
            rp.on_event = on_event;
            rp.user = &args[next_submit];
            sh.in_flight++;
            if (sp_engine_submit(e, &rp, j->error, sizeof(j->error)) < 0) {
                sh.in_flight--;
                j->st.finish = SP_FINISH_ERROR;
                j->done = true;
            }
            next_submit++;
        }
        while (next_print < n && jobs[next_print].done) {
            pthread_mutex_unlock(&sh.mu);
            print_result(&jobs[next_print++]);
            pthread_mutex_lock(&sh.mu);
        }
        if (next_print < n && !jobs[next_print].done &&
            !(next_submit < n && sh.in_flight < conc))
            pthread_cond_wait(&sh.cv, &sh.mu);
    }
    pthread_mutex_unlock(&sh.mu);
    if (stats) print_stats(e, time_ms() - t_start, cpu_ms() - cpu_start);
    rc = 0;
    for (int32_t i = 0; i < n; i++)
        if (jobs[i].st.finish == SP_FINISH_ERROR) rc = 1;
done:
    sp_engine_free(e);
    cli_engine_close(&ce);
    sp_model_free(m);
    for (int32_t i = 0; jobs && i < n; i++) job_free(&jobs[i]);
    free(jobs);
    free(args);
    free(data);
    pthread_mutex_destroy(&sh.mu);
    pthread_cond_destroy(&sh.cv);
    return rc;
}
