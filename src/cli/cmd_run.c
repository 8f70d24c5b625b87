/* cmd_run.c: `specula run`: one request through the engine (the same path
 * the server and `batch` take), streaming the text as it is generated, or
 * printing one JSON object with --json. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: specula run [-m MODEL] (-p PROMPT | -f FILE) [options]\n"
            "       specula run [-m MODEL] --chat [--system TEXT] [--chat-template NAME] [options]\n"
            "  -m MODEL          GGUF model; also --model MODEL, or MODEL alone (default: %s)\n"
            "  -p PROMPT         prompt text\n"
            "  -f FILE           read the prompt from FILE, byte for byte (- : standard input)\n"
            "  -n N              tokens to generate (default 128)\n"
            "  --temp T          temperature, 0 = greedy (default 0.8)\n"
            "  --top-k K         (default 40, 0 = off)\n"
            "  --top-p P         (default 0.95, 1 = off)\n"
            "  --min-p M         (default 0.05, 0 = off)\n"
            "  --repeat-penalty R, --frequency-penalty F, --presence-penalty P\n"
            "  --seed S          RNG seed\n"
            "  --ignore-eos      keep generating past end-of-generation tokens\n"
            "  --logprobs K      with --json: the K most likely tokens of each step\n"
            "  --json            print one JSON object instead of streaming text\n"
            "  --stop S          stop at the string S (may repeat)\n"
            "conversation (--chat): user turns from standard input, one a line; each answer streams\n"
            "to standard output and ends at the template's end of turn; /exit or end of input ends\n"
            "  --chat            talk: the whole conversation is rendered with the chat template\n"
            "                    each turn (the prefix cache keeps the earlier turns); -n is per answer\n"
            "  --chat-template NAME  chatml, llama3, llama2, mistral, phi3, gemma (default: recognized\n"
            "                    from the model's tokenizer.chat_template, as `serve` does)\n"
            "  --system TEXT     a system message first\n"
            "  --verbose         after each answer, on stderr: prompt, cached and generated tokens\n"
            "engine options (-c defaults to prompt + n here):\n%s",
            cli_default_model() ? cli_default_model() : "none found", cli_engine_usage);
}

typedef struct {
    const char *model, *prompt, *file;
    long n, logprobs;
    bool json, ignore_eos;
    bool chat, verbose;                   /* --chat: a conversation on stdin */
    const char *chat_template, *system;
    const char *stop[16];
    int n_stop;
    sp_sampler_params sp;
    cli_engine ce;
} run_opts;

static int parse(int argc, char **argv, run_opts *o) {
    o->model = cli_default_model();
    o->n = 128;
    o->sp = sp_sampler_default_params();
    o->ce = cli_engine_default();
    o->ce.p.max_seqs = 1;
    o->ce.p.n_ctx = 0;
    bool model_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = cli_alias(argv[i]);
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        long l;
#define NEEDV()                                                                 \
    do {                                                                        \
        if (!v) {                                                               \
            fprintf(stderr, "specula run: %s needs a value\n", a);              \
            return -1;                                                          \
        }                                                                       \
        i++;                                                                    \
    } while (0)
#define BAD()                                                                   \
    do {                                                                        \
        fprintf(stderr, "specula run: invalid value '%s' for %s\n", v, a);      \
        return -1;                                                              \
    } while (0)
        int used = cli_engine_opt("run", a, v, &o->ce);
        if (used < 0) return -1;
        if (used) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-m")) { NEEDV(); o->model = v; model_given = true; }
        else if (!strcmp(a, "-p")) { NEEDV(); o->prompt = v; }
        else if (!strcmp(a, "-f")) { NEEDV(); o->file = v; }
        else if (!strcmp(a, "-n")) { NEEDV(); if (!parse_long(v, 1, 1 << 20, &o->n)) BAD(); }
        else if (!strcmp(a, "--logprobs")) { NEEDV(); if (!parse_long(v, 0, 20, &o->logprobs)) BAD(); }
        else if (!strcmp(a, "--stop")) {
            NEEDV();
            if (o->n_stop == 16 || !*v) BAD();
            o->stop[o->n_stop++] = v;
        }
        else if (!strcmp(a, "--temp")) { NEEDV(); if (!parse_double(v, &d)) BAD(); o->sp.temperature = (float)d; }
        else if (!strcmp(a, "--top-k")) { NEEDV(); if (!parse_long(v, 0, 1 << 30, &l)) BAD(); o->sp.top_k = (int32_t)l; }
        else if (!strcmp(a, "--top-p")) { NEEDV(); if (!parse_double(v, &d)) BAD(); o->sp.top_p = (float)d; }
        else if (!strcmp(a, "--min-p")) { NEEDV(); if (!parse_double(v, &d)) BAD(); o->sp.min_p = (float)d; }
        else if (!strcmp(a, "--repeat-penalty")) { NEEDV(); if (!parse_double(v, &d)) BAD(); o->sp.repeat_penalty = (float)d; }
        else if (!strcmp(a, "--frequency-penalty")) { NEEDV(); if (!parse_double(v, &d)) BAD(); o->sp.frequency_penalty = (float)d; }
        else if (!strcmp(a, "--presence-penalty")) { NEEDV(); if (!parse_double(v, &d)) BAD(); o->sp.presence_penalty = (float)d; }
        else if (!strcmp(a, "--seed")) { NEEDV(); char *e; o->sp.seed = strtoull(v, &e, 10); if (*e || !*v) BAD(); }
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = true;
        else if (!strcmp(a, "--chat")) o->chat = true;
        else if (!strcmp(a, "--verbose")) o->verbose = true;
        else if (!strcmp(a, "--system")) { NEEDV(); o->system = v; }
        else if (!strcmp(a, "--chat-template")) { NEEDV(); o->chat_template = v; }
        else if (!strcmp(a, "--json")) o->json = true;
        else if (a[0] != '-' && !model_given) o->model = a, model_given = true; /* vLLM-style positional */
        else {
            fprintf(stderr, "specula run: unknown option '%s' (see --help)\n", a);
            return -1;
        }
#undef NEEDV
#undef BAD
    }
    if (!o->model) {
        fprintf(stderr, "specula run: no model given (-m) and no default model found\n");
        return -1;
    }
    if (o->chat) {
        if (o->prompt || o->file || o->json) {
            fprintf(stderr, "specula run: --chat reads its turns from standard input (no -p, -f "
                    "or --json)\n");
            return -1;
        }
        return 0;
    }
    if (o->chat_template || o->system) {
        fprintf(stderr, "specula run: --chat-template and --system need --chat\n");
        return -1;
    }
    if (!o->prompt == !o->file) {
        fprintf(stderr, "specula run: give exactly one of -p PROMPT or -f FILE\n");
        return -1;
    }
    return 0;
}

/* What the callback collects (engine thread) for the main thread. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    bool done, json;
    bool collect;       /* keep the text (--json, and --chat for the history) */
    sp_token *gen;      /* [n] */
    float *lp;          /* [n] */
    sp_token *top_id;   /* [n][logprobs] */
    float *top_lp;      /* [n][logprobs] */
    int32_t n_gen, k;
    char *text;
    size_t text_len, text_cap;
    sp_request_stats st;
    char error[256];
} run_state;

static void on_event(const sp_event *ev, void *user) {
    run_state *s = user;
    for (int32_t i = 0; i < ev->n_tokens; i++) {
        s->gen[s->n_gen] = ev->tokens[i];
        if (ev->logprobs) s->lp[s->n_gen] = ev->logprobs[i];
        for (int32_t j = 0; j < s->k; j++) {
            s->top_id[(size_t)s->n_gen * s->k + j] = ev->top_ids[(size_t)i * s->k + j];
            s->top_lp[(size_t)s->n_gen * s->k + j] = ev->top_lps[(size_t)i * s->k + j];
        }
        s->n_gen++;
    }
    if (ev->text_len) {
        if (s->collect) {
            if (s->text_len + ev->text_len + 1 > s->text_cap) {
                size_t cap = (s->text_len + ev->text_len + 1) * 2;
                char *t = realloc(s->text, cap);
                if (t) s->text = t, s->text_cap = cap;
            }
            if (s->text_len + ev->text_len + 1 <= s->text_cap) {
                memcpy(s->text + s->text_len, ev->text, ev->text_len);
                s->text_len += ev->text_len;
                s->text[s->text_len] = 0;
            }
        }
        if (!s->json) {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
    }
    if (ev->finished) {
        pthread_mutex_lock(&s->mu);
        s->st = *ev->stats;
        if (ev->error) snprintf(s->error, sizeof(s->error), "%s", ev->error);
        s->done = true;
        pthread_cond_signal(&s->done_cv);
        pthread_mutex_unlock(&s->mu);
    }
}

static int run_chat(run_opts *o);

/* Submits rp with the run_state callback and waits for its final event;
 * -1 after a message when the engine refuses it. */
static int submit_wait(sp_engine *eng, sp_request_params *rp, run_state *s) {
    char err[512];
    rp->on_event = on_event;
    rp->user = s;
    if (sp_engine_submit(eng, rp, err, sizeof(err)) < 0) {
        fprintf(stderr, "specula: %s\n", err);
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    while (!s->done) pthread_cond_wait(&s->done_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void run_state_free(run_state *s) {
    free(s->gen);
    free(s->lp);
    free(s->top_id);
    free(s->top_lp);
    free(s->text);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->done_cv);
}

int cmd_run(int argc, char **argv) {
    run_opts o = {0};
    if (parse(argc, argv, &o)) return 2;
    if (o.chat) return run_chat(&o);
    char err[512];
    int rc = 1;
    char *text = NULL;
    size_t text_len;
    sp_model *m = NULL;
    sp_engine *eng = NULL;
    sp_token *toks = NULL;
    run_state s = {0};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.done_cv, NULL);

    if (o.file) {
        text = cli_read_file(o.file, &text_len);
        if (!text) return 1;
    } else {
        text_len = strlen(o.prompt);
        text = malloc(text_len + 1);
        if (!text) return 1;
        memcpy(text, o.prompt, text_len + 1);
    }

    double t0 = time_s();
    m = sp_model_load(o.model, sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "specula: %s\n", err);
        goto done;
    }
    const double load_ms = (time_s() - t0) * 1e3;
    const sp_vocab *vocab = sp_model_get_vocab(m);

    int n_prompt = sp_tokenize(vocab, text, text_len, NULL, 0, true, true);
    if (n_prompt == SP_TOKENIZE_FAILED) { /* the one value that is not -(count) */
        fprintf(stderr, "specula: out of memory while tokenizing\n");
        goto done;
    }
    if (n_prompt < 0) n_prompt = -n_prompt;
    toks = malloc(((size_t)n_prompt + 1) * sizeof(sp_token));
    if (!toks) goto done;
    n_prompt = sp_tokenize(vocab, text, text_len, toks, n_prompt, true, true);
    if (n_prompt < 0) {
        fprintf(stderr, "specula: out of memory while tokenizing\n");
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "specula: the prompt is empty after tokenization\n");
        goto done;
    }
    if (!o.ce.p.n_ctx) o.ce.p.n_ctx = (int32_t)SP_MIN((long)n_prompt + o.n + 1, 1L << 20);
    if (n_prompt + o.n > o.ce.p.n_ctx) {
        fprintf(stderr, "specula: prompt (%d tokens) + n (%ld) exceeds the context (%d)\n", n_prompt,
                o.n, o.ce.p.n_ctx);
        goto done;
    }
    o.ce.model = o.model;
    if (cli_engine_open(&o.ce)) goto done;
    cli_warn_ctx("run", m, o.ce.p.n_ctx);
    eng = sp_engine_create(m, o.ce.p, err, sizeof(err));
    if (!eng) {
        cli_engine_create_failed(&o.ce, "run", err);
        goto done;
    }
    s.json = o.json;
    s.collect = o.json;
    s.k = (int32_t)o.logprobs;
    s.gen = malloc((size_t)o.n * sizeof(sp_token));
    s.lp = malloc((size_t)o.n * sizeof(float));
    s.top_id = malloc((size_t)o.n * (size_t)(o.logprobs + 1) * sizeof(sp_token));
    s.top_lp = malloc((size_t)o.n * (size_t)(o.logprobs + 1) * sizeof(float));
    if (!s.gen || !s.lp || !s.top_id || !s.top_lp) goto done;

    sp_request_params rp = sp_request_default_params();
    rp.tokens = toks;
    rp.n_tokens = n_prompt;
    rp.sampling = o.sp;
    rp.max_tokens = (int32_t)o.n;
    rp.ignore_eos = o.ignore_eos;
    rp.logprobs = o.json ? (int32_t)o.logprobs : -1; /* streaming text prints none */
    rp.stop = o.stop;
    rp.n_stop = o.n_stop;
    if (submit_wait(eng, &rp, &s)) goto done;
    if (s.st.finish == SP_FINISH_ERROR) {
        fprintf(stderr, "\nspecula: %s\n", s.error);
        goto done;
    }
    const int n_gen = s.n_gen;
    const double prefill_tps = s.st.prefill_ms > 0 ? n_prompt / (s.st.prefill_ms / 1e3) : 0.0;
    const double decode_tps = n_gen > 1 && s.st.decode_ms > 0 ? (n_gen - 1) / (s.st.decode_ms / 1e3) : 0.0;

    if (o.json) {
        FILE *f = stdout;
        fprintf(f, "{\"model\": ");
        cli_json_str(f, o.model, strlen(o.model));
        fprintf(f, ", \"prompt_tokens\": [");
        for (int i = 0; i < n_prompt; i++) fprintf(f, "%s%d", i ? ", " : "", toks[i]);
        fprintf(f, "], \"tokens\": [");
        for (int i = 0; i < n_gen; i++) fprintf(f, "%s%d", i ? ", " : "", s.gen[i]);
        fprintf(f, "], \"text\": ");
        cli_json_str(f, s.text ? s.text : "", s.text_len);
        fprintf(f, ", \"finish_reason\": \"%s\", \"steps\": [", sp_finish_reason_str(s.st.finish));
        for (int i = 0; i < n_gen; i++) {
            fprintf(f, "%s{\"id\": %d, \"logprob\": %.9g, \"top\": [", i ? ", " : "", s.gen[i],
                    s.lp[i]);
            for (long j = 0; j < o.logprobs; j++)
                fprintf(f, "%s[%d, %.9g]", j ? ", " : "", s.top_id[i * o.logprobs + j],
                        s.top_lp[i * o.logprobs + j]);
            fprintf(f, "]}");
        }
        fprintf(f, "], ");
        cli_print_spec(f, &s.st);
        fprintf(f, ", \"timings\": {\"load_ms\": %.3f, \"prefill_tokens\": %d, "
                   "\"prefill_ms\": %.3f, \"prefill_tokens_per_s\": %.3f, \"decode_tokens\": %d, "
                   "\"decode_ms\": %.3f, \"decode_tokens_per_s\": %.3f, \"ttft_ms\": %.3f}}\n",
                load_ms, n_prompt, s.st.prefill_ms, prefill_tps, n_gen, s.st.decode_ms, decode_tps,
                s.st.ttft_ms);
    } else {
        printf("\n");
        if (decode_tps > 0)
            fprintf(stderr, "\nspecula: load %.0f ms, prefill %d tokens at %.1f tokens/s, decode %d tokens "
                    "at %.1f tokens/s\n", load_ms, n_prompt, prefill_tps, n_gen, decode_tps);
        else /* the only token came with the prefill: there is no decode rate */
            fprintf(stderr, "\nspecula: load %.0f ms, prefill %d tokens at %.1f tokens/s, %d token%s "
                    "generated, no decode step\n", load_ms, n_prompt, prefill_tps, n_gen,
                    n_gen == 1 ? "" : "s");
        if (s.st.spec_steps) { /* which proposers ran (auto picks per step), and what they bought */
            fprintf(stderr, "specula: speculation %.2f tokens per pass;", 1.0 +
                    (double)s.st.spec_accepted / s.st.spec_steps);
            for (int m = SP_SPEC_NGRAM; m <= SP_SPEC_DRAFT; m++)
                if (s.st.spec_drafted_by[m])
                    fprintf(stderr, " %s %d drafted, %.0f%% accepted;", sp_spec_mode_str((sp_spec_mode)m),
                            s.st.spec_drafted_by[m], 100.0 * s.st.spec_accepted_by[m] / s.st.spec_drafted_by[m]);
            fprintf(stderr, "\n");
        }
    }
    rc = 0;
done:
    sp_engine_free(eng);
    cli_engine_close(&o.ce);
    free(text);
    free(toks);
    run_state_free(&s);
    sp_model_free(m);
    return rc;
}

/* ---- run --chat: a conversation in the terminal ---------------------------------- */

/* One line of standard input without its line end; NULL at end of input. */
static char *read_turn(char **line, size_t *cap) {
    ssize_t n = getline(line, cap, stdin);
    if (n < 0) return NULL;
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = 0;
    return *line;
}

static int run_chat(run_opts *o) {
    char err[512];
    int rc = 1;
    sp_model *m = NULL;
    sp_engine *eng = NULL;
    sp_chat_template *t = NULL;
    sp_chat_message *msgs = NULL;
    int n_msgs = 0, cap_msgs = 0;
    char *line = NULL;
    size_t line_cap = 0;
    int32_t *toks = NULL;
    run_state s = {0};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.done_cv, NULL);

    m = sp_model_load(o->model, sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "specula: %s\n", err);
        goto done;
    }
    /* the template `serve` would use: --chat-template, else the model's own */
    t = sp_chat_template_load(m, o->chat_template, err, sizeof(err));
    if (!t) {
        fprintf(stderr, "specula run: %s: %s (--chat-template NAME|FILE chooses one)\n", o->model, err);
        goto done;
    }
    const sp_vocab *vocab = sp_model_get_vocab(m);
    /* the end of turn: one control token when the vocabulary has it, else its text */
    sp_token eot_tok = sp_chat_eot_token(vocab, t);
    const char *stops[17];
    int n_stop = 0;
    for (int i = 0; i < o->n_stop; i++) stops[n_stop++] = o->stop[i];
    if (eot_tok < 0 && sp_chat_template_eot(t)) stops[n_stop++] = sp_chat_template_eot(t);
    if (!o->ce.p.n_ctx) {
        const int32_t tr = sp_model_get_info(m)->n_ctx_train;
        o->ce.p.n_ctx = SP_MIN(tr > 0 ? tr : 2048, 8192);
    }
    o->ce.model = o->model;
    if (cli_engine_open(&o->ce)) goto done;
    cli_warn_ctx("run", m, o->ce.p.n_ctx);
    eng = sp_engine_create(m, o->ce.p, err, sizeof(err));
    if (!eng) {
        cli_engine_create_failed(&o->ce, "run", err);
        goto done;
    }
    s.collect = true;
    s.gen = malloc((size_t)o->n * sizeof(sp_token));
    s.lp = malloc((size_t)o->n * sizeof(float));
    s.top_id = malloc((size_t)o->n * sizeof(sp_token));
    s.top_lp = malloc((size_t)o->n * sizeof(float));
    if (!s.gen || !s.lp || !s.top_id || !s.top_lp) goto done;
    if (o->verbose)
        fprintf(stderr, "specula: chat template %s, context %d positions\n",
                sp_chat_template_name(t), o->ce.p.n_ctx);
    const bool tty = isatty(0);
    for (int turn = 1;; turn++) {
        if (tty) fputs("> ", stderr);
        const char *u = read_turn(&line, &line_cap);
        if (!u || !strcmp(u, "/exit")) break;
        if (!*u) { /* nothing said: ask again */
            turn--;
            continue;
        }
        if (n_msgs + 3 > cap_msgs) {
            int nc = cap_msgs ? 2 * cap_msgs : 16;
            sp_chat_message *nm = realloc(msgs, (size_t)nc * sizeof(*nm));
            if (!nm) goto oom;
            msgs = nm;
            cap_msgs = nc;
        }
        if (n_msgs == 0 && o->system) msgs[n_msgs++] = (sp_chat_message){"system", strdup(o->system)};
        msgs[n_msgs++] = (sp_chat_message){"user", strdup(u)};
        if (!msgs[n_msgs - 1].content || (o->system && !msgs[0].content)) goto oom;
        /* the whole conversation each turn, tokenized as the server would:
         * the earlier turns come back from the prefix cache */
        free(toks);
        int32_t n_prompt = sp_chat_tokenize(vocab, t, msgs, n_msgs, &toks, err, sizeof(err));
        if (n_prompt < 0) {
            fprintf(stderr, "specula: %s\n", err);
            goto done;
        }
        int32_t room = o->ce.p.n_ctx - n_prompt;
        if (room < 1) {
            fprintf(stderr, "specula: the conversation (%d tokens) has filled the context (%d "
                    "positions; -c sets it)\n", n_prompt, o->ce.p.n_ctx);
            goto done;
        }
        s.done = false;
        s.n_gen = 0;
        s.text_len = 0;
        if (s.text) s.text[0] = 0;
        s.error[0] = 0;
        sp_request_params rp = sp_request_default_params();
        rp.tokens = toks;
        rp.n_tokens = n_prompt;
        rp.sampling = o->sp;
        rp.max_tokens = (int32_t)SP_MIN((long)room, o->n);
        rp.ignore_eos = o->ignore_eos;
        rp.logprobs = -1;
        rp.stop = stops;
        rp.n_stop = n_stop;
        if (eot_tok >= 0) {
            rp.stop_tokens = &eot_tok;
            rp.n_stop_tokens = 1;
        }
        if (submit_wait(eng, &rp, &s)) goto done;
        printf("\n");
        fflush(stdout);
        if (s.st.finish == SP_FINISH_ERROR) {
            fprintf(stderr, "specula: %s\n", s.error);
            goto done;
        }
        if (o->verbose)
            fprintf(stderr, "specula: turn %d: prompt %d tokens, %d cached, %d generated (%s), "
                    "ttft %.1f ms\n", turn, n_prompt, s.st.cached_tokens, s.st.completion_tokens,
                    sp_finish_reason_str(s.st.finish), s.st.ttft_ms);
        msgs[n_msgs++] = (sp_chat_message){"assistant", strdup(s.text ? s.text : "")};
        if (!msgs[n_msgs - 1].content) goto oom;
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "specula: out of memory\n");
done:
    sp_engine_free(eng);
    cli_engine_close(&o->ce);
    for (int i = 0; i < n_msgs; i++) free((char *)msgs[i].content);
    free(msgs);
    free(line);
    free(toks);
    run_state_free(&s);
    sp_chat_template_free(t);
    sp_model_free(m);
    return rc;
}
