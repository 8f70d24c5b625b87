/* cmd_run.c: `specula run`: prefill a prompt, then sample token by token,
 * streaming the text (or printing one JSON object with --json). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "tokenizer/tokenizer.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: specula run [-m MODEL] (-p PROMPT | -f FILE) [options]\n"
            "  -m MODEL          GGUF model (default: %s)\n"
            "  -p PROMPT         prompt text\n"
            "  -f FILE           read the prompt from FILE, byte for byte\n"
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
            "  -t N              threads (default: all cores)\n"
            "  -c N              context size (default: prompt + n)\n"
            "  --kv f16|f32      KV element type (default f16)\n",
            cli_default_model() ? cli_default_model() : "none found");
}

typedef struct {
    const char *model, *prompt, *file;
    long n, logprobs, threads, ctx;
    bool json, ignore_eos, kv_f32;
    sp_sampler_params sp;
} run_opts;

static int parse(int argc, char **argv, run_opts *o) {
    o->model = cli_default_model();
    o->n = 128;
    o->sp = sp_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
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
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-m")) { NEEDV(); o->model = v; }
        else if (!strcmp(a, "-p")) { NEEDV(); o->prompt = v; }
        else if (!strcmp(a, "-f")) { NEEDV(); o->file = v; }
        else if (!strcmp(a, "-n")) { NEEDV(); if (!cli_int(v, 0, 1 << 24, &o->n)) BAD(); }
        else if (!strcmp(a, "-t")) { NEEDV(); if (!cli_int(v, 1, 256, &o->threads)) BAD(); }
        else if (!strcmp(a, "-c")) { NEEDV(); if (!cli_int(v, 1, 1 << 24, &o->ctx)) BAD(); }
        else if (!strcmp(a, "--logprobs")) { NEEDV(); if (!cli_int(v, 0, 1000, &o->logprobs)) BAD(); }
        else if (!strcmp(a, "--temp")) { NEEDV(); if (!cli_float(v, &d)) BAD(); o->sp.temperature = (float)d; }
        else if (!strcmp(a, "--top-k")) { NEEDV(); if (!cli_int(v, 0, 1 << 30, &l)) BAD(); o->sp.top_k = (int32_t)l; }
        else if (!strcmp(a, "--top-p")) { NEEDV(); if (!cli_float(v, &d)) BAD(); o->sp.top_p = (float)d; }
        else if (!strcmp(a, "--min-p")) { NEEDV(); if (!cli_float(v, &d)) BAD(); o->sp.min_p = (float)d; }
        else if (!strcmp(a, "--repeat-penalty")) { NEEDV(); if (!cli_float(v, &d)) BAD(); o->sp.repeat_penalty = (float)d; }
        else if (!strcmp(a, "--frequency-penalty")) { NEEDV(); if (!cli_float(v, &d)) BAD(); o->sp.frequency_penalty = (float)d; }
        else if (!strcmp(a, "--presence-penalty")) { NEEDV(); if (!cli_float(v, &d)) BAD(); o->sp.presence_penalty = (float)d; }
        else if (!strcmp(a, "--seed")) { NEEDV(); char *e; o->sp.seed = strtoull(v, &e, 10); if (*e || !*v) BAD(); }
        else if (!strcmp(a, "--kv")) { NEEDV(); if (!strcmp(v, "f32")) o->kv_f32 = true; else if (strcmp(v, "f16")) BAD(); }
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = true;
        else if (!strcmp(a, "--json")) o->json = true;
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
    if (!o->prompt == !o->file) {
        fprintf(stderr, "specula run: give exactly one of -p PROMPT or -f FILE\n");
        return -1;
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {0};
    if (parse(argc, argv, &o)) return 2;
    char err[512];
    int rc = 1;
    char *text = NULL;
    size_t text_len;
    sp_model *m = NULL;
    sp_context *ctx = NULL;
    sp_sampler *smp = NULL;
    sp_token *toks = NULL, *gen = NULL;
    float *step_lp = NULL, *top_lp = NULL;
    sp_token *top_id = NULL;
    int32_t *pos = NULL, *seq = NULL;
    char *out = NULL;
    size_t out_len = 0;

    if (o.file) {
        text = cli_read_file(o.file, &text_len);
        if (!text) return 1;
    } else {
        text_len = strlen(o.prompt);
        text = malloc(text_len + 1);
        if (!text) return 1;
        memcpy(text, o.prompt, text_len + 1);
    }

    double t0 = sp_time_s();
    m = sp_model_load(o.model, sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "specula: %s\n", err);
        goto done;
    }
    const double load_ms = (sp_time_s() - t0) * 1e3;
    const sp_vocab *vocab = sp_model_get_vocab(m);
    const int32_t V = sp_model_get_info(m)->n_vocab;

    int n_prompt = sp_tokenize(vocab, text, text_len, NULL, 0, true, true);
    if (n_prompt == INT32_MIN) {
        fprintf(stderr, "specula: out of memory while tokenizing\n");
        goto done;
    }
    if (n_prompt < 0) n_prompt = -n_prompt;
    toks = malloc(((size_t)n_prompt + 1) * sizeof(sp_token));
    if (!toks) goto done;
    n_prompt = sp_tokenize(vocab, text, text_len, toks, n_prompt + 1, true, true);
    if (n_prompt <= 0) {
        fprintf(stderr, "specula: the prompt is empty after tokenization\n");
        goto done;
    }

    sp_context_params cp = sp_context_default_params();
    if (o.threads) cp.n_threads = (int32_t)o.threads;
    cp.n_ctx = o.ctx ? (int32_t)o.ctx : (int32_t)SP_MIN((long)n_prompt + o.n + 1, 1L << 24);
    if (n_prompt + o.n > cp.n_ctx) {
        fprintf(stderr, "specula: prompt (%d tokens) + n (%ld) exceeds the context (%d)\n", n_prompt,
                o.n, cp.n_ctx);
        goto done;
    }
    if (cp.n_batch > n_prompt) cp.n_batch = SP_MAX(n_prompt, 1);
    if (o.kv_f32) cp.kv_type = SP_KV_F32;
    ctx = sp_context_create(m, cp, err, sizeof(err));
    if (!ctx) {
        fprintf(stderr, "specula: %s\n", err);
        goto done;
    }
    smp = sp_sampler_create(o.sp, V, err, sizeof(err));
    if (!smp) {
        fprintf(stderr, "specula: %s\n", err);
        goto done;
    }
    gen = malloc(((size_t)o.n + 1) * sizeof(sp_token));
    step_lp = malloc(((size_t)o.n + 1) * sizeof(float));
    top_id = malloc(((size_t)o.n + 1) * (size_t)(o.logprobs + 1) * sizeof(sp_token));
    top_lp = malloc(((size_t)o.n + 1) * (size_t)(o.logprobs + 1) * sizeof(float));
    if (!gen || !step_lp || !top_id || !top_lp) goto done;

    /* prefill in chunks of n_batch; logits only after the last prompt token */
    pos = malloc((size_t)cp.n_batch * sizeof(int32_t));
    seq = calloc((size_t)cp.n_batch, sizeof(int32_t));
    if (!pos || !seq) goto done;
    double t1 = sp_time_s();
    for (int i0 = 0; i0 < n_prompt; i0 += cp.n_batch) {
        int n = SP_MIN(cp.n_batch, n_prompt - i0);
        for (int i = 0; i < n; i++) pos[i] = i0 + i;
        sp_batch b = {n, toks + i0, pos, seq, NULL};
        if (sp_decode(ctx, &b, err, sizeof(err))) {
            fprintf(stderr, "specula: %s\n", err);
            goto done;
        }
    }
    for (int i = 0; i < n_prompt; i++) sp_sampler_accept(smp, toks[i]);
    double t2 = sp_time_s();

    sp_detok dt;
    sp_detok_init(&dt);
    char piece[1024];
    size_t out_cap = 4096;
    out = malloc(out_cap);
    if (!out) goto done;
    int n_gen = 0;
    bool ok = true;
    for (; n_gen < o.n; n_gen++) {
        const float *logits = sp_get_logits(ctx, 0);
        sp_token t = sp_sampler_sample(smp, logits);
        if (o.json) {
            step_lp[n_gen] = sp_logprob_of(logits, V, t);
            sp_top_logprobs(logits, V, (int)o.logprobs, top_id + (size_t)n_gen * o.logprobs,
                            top_lp + (size_t)n_gen * o.logprobs);
        }
        if (!o.ignore_eos && sp_vocab_is_eog(vocab, t)) break;
        gen[n_gen] = t;
        sp_sampler_accept(smp, t);
        int np = sp_detok_push(vocab, &dt, t, piece, sizeof(piece));
        if (np > 0) {
            if (o.json) {
                if (out_len + (size_t)np + 1 > out_cap) {
                    while (out_len + (size_t)np + 1 > out_cap) out_cap *= 2;
                    char *no = realloc(out, out_cap);
                    if (!no) goto done;
                    out = no;
                }
                memcpy(out + out_len, piece, (size_t)np);
                out_len += (size_t)np;
            } else {
                fwrite(piece, 1, (size_t)np, stdout);
                fflush(stdout);
            }
        }
        if (n_gen + 1 == o.n) {
            n_gen++;
            break;
        }
        int32_t p = n_prompt + n_gen;
        sp_batch b = {1, &gen[n_gen], &p, seq, NULL};
        if (sp_decode(ctx, &b, err, sizeof(err))) {
            fprintf(stderr, "\nspecula: %s\n", err);
            ok = false;
            break;
        }
    }
    int np = sp_detok_flush(&dt, piece, sizeof(piece));
    if (np > 0 && !o.json) fwrite(piece, 1, (size_t)np, stdout);
    if (np > 0 && o.json && out_len + (size_t)np < out_cap) {
        memcpy(out + out_len, piece, (size_t)np);
        out_len += (size_t)np;
    }
    double t3 = sp_time_s();
    const double prefill_tps = n_prompt / (t2 - t1);
    const double decode_tps = n_gen > 1 ? (n_gen - 1) / (t3 - t2) : 0.0;

    if (o.json) {
        FILE *f = stdout;
        fprintf(f, "{\"model\": ");
        cli_json_str(f, o.model, strlen(o.model));
        fprintf(f, ", \"prompt_tokens\": [");
        for (int i = 0; i < n_prompt; i++) fprintf(f, "%s%d", i ? ", " : "", toks[i]);
        fprintf(f, "], \"tokens\": [");
        for (int i = 0; i < n_gen; i++) fprintf(f, "%s%d", i ? ", " : "", gen[i]);
        fprintf(f, "], \"text\": ");
        cli_json_str(f, out, out_len);
        fprintf(f, ", \"steps\": [");
        for (int i = 0; i < n_gen; i++) {
            fprintf(f, "%s{\"id\": %d, \"logprob\": %.9g, \"top\": [", i ? ", " : "", gen[i],
                    step_lp[i]);
            for (long j = 0; j < o.logprobs; j++)
                fprintf(f, "%s[%d, %.9g]", j ? ", " : "", top_id[i * o.logprobs + j],
                        top_lp[i * o.logprobs + j]);
            fprintf(f, "]}");
        }
        fprintf(f, "], \"timings\": {\"load_ms\": %.3f, \"prefill_tokens\": %d, "
                   "\"prefill_ms\": %.3f, \"prefill_tokens_per_s\": %.3f, \"decode_tokens\": %d, "
                   "\"decode_ms\": %.3f, \"decode_tokens_per_s\": %.3f}}\n",
                load_ms, n_prompt, (t2 - t1) * 1e3, prefill_tps, n_gen, (t3 - t2) * 1e3, decode_tps);
    } else {
        printf("\n");
        fprintf(stderr, "\nspecula: load %.0f ms, prefill %d tokens at %.1f tokens/s, decode %d tokens "
                "at %.1f tokens/s\n", load_ms, n_prompt, prefill_tps, n_gen, decode_tps);
    }
    rc = ok ? 0 : 1;
done:
    free(pos);
    free(seq);
    free(out);
    free(text);
    free(toks);
    free(gen);
    free(step_lp);
    free(top_id);
    free(top_lp);
    sp_sampler_free(smp);
    sp_context_free(ctx);
    sp_model_free(m);
    return rc;
}
