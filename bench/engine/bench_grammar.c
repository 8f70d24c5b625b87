/* bench_grammar.c: the cost of structured output, through the
 * public API.
 *
 * usage: bin/bench_grammar MODEL [-t THREADS] [-n REQUESTS] [--tokens N]
 *
 *   - trie: building the vocabulary's token trie (once per engine);
 *   - compile: a typical tool schema (get_weather-style arguments: four
 *     properties, an enum, bounds, an array) to GBNF, compiled, a fresh
 *     matcher and its first mask: the median of 20;
 *   - decode: REQUESTS greedy requests one at a time, N tokens each
 *     (default 96): unconstrained (ignore_eos, N tokens), constrained by a
 *     JSON-heavy schema (a list of records), and constrained with n-gram
 *     speculation at fixed k 4 (jump-forward of the forced tokens is in
 *     both constrained runs: without speculation the forced tokens are
 *     verified in one pass too), and unconstrained text under a lazy
 *     grammar whose trigger never comes (tool_choice auto that answers in
 *     text: the cost of the free phase), interleaved, 3 repetitions, the
 *     fastest of each kept. Reported:
 *     tokens/s = generated tokens / decode time (first to last token,
 *     summed), and the ratio to unconstrained;
 *   - mask: the constrained outputs replayed through a fresh matcher each (as
 *     the engine does per request): mean time of a mask plus a commit per
 *     token, for the first request (every state new) and the later ones
 *     (states met before are in the grammar's shared masks), over the
 *     decode time per token of the unconstrained run.
 *
 * Prints a Markdown table and, last, one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "specula.h"

static const char TOOL_SCHEMA[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"location\": {\"type\": \"string\", \"description\": \"city and country\"},"
    "\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]},"
    "\"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 14},"
    "\"fields\": {\"type\": \"array\", \"items\": {\"enum\": [\"temp\", \"wind\", \"rain\"]}, \"maxItems\": 3}},"
    "\"required\": [\"location\", \"unit\"], \"additionalProperties\": false}";

/* minItems: without it the bundled model answers the prompt below with
 * "[]" (2 tokens), which measures nothing; 4 records are ~90 tokens of JSON
 * on every model */
static const char RECORDS_SCHEMA[] =
    "{\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
    "\"id\": {\"type\": \"integer\", \"minimum\": 0}, \"name\": {\"type\": \"string\", \"maxLength\": 24},"
    "\"active\": {\"type\": \"boolean\"}, \"score\": {\"type\": \"number\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 12}, \"maxItems\": 3}},"
    "\"required\": [\"id\", \"name\", \"active\", \"score\", \"tags\"]}, \"minItems\": 4}";

typedef struct {
    double decode_ms;
    int64_t tokens, forced;
    sp_token *out;             /* [n_req][max] outputs (constrained runs) */
    int32_t *n_out;
} run_res;

#define REPS 3

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* a lazy grammar whose trigger the code model does not write */
static const char LAZY_GBNF[] = "root ::= \"<tool_call>\\n{\" [0-9]+ \"}\"";
static const char LAZY_TRIGGER[] = "<tool_call>";

static int run(sp_engine *e, const sp_vocab *v, int n_req, int max_tok, const char *grammar,
               sp_spec_mode spec, run_res *R) {
    memset(R, 0, sizeof(*R));
    R->out = calloc((size_t)n_req * max_tok, sizeof(sp_token));
    R->n_out = calloc((size_t)n_req, sizeof(int32_t));
    char err[512], prompt[128];
    for (int i = 0; i < n_req; i++) {
        sp_request_params rp = sp_request_default_params();
        snprintf(prompt, sizeof(prompt), "# records, batch %d, as JSON\nrecords = ", i);
        rp.prompt = prompt;
        rp.sampling = sp_sampler_greedy_params();
        rp.max_tokens = max_tok;
        const bool lazy = grammar == LAZY_GBNF;
        rp.ignore_eos = grammar == NULL || lazy;
        rp.logprobs = -1;
        rp.grammar = grammar;
        rp.grammar_trigger = lazy ? LAZY_TRIGGER : NULL;
        rp.spec = spec;
        rp.spec_k = spec == SP_SPEC_OFF ? 0 : 4;
        int64_t id = sp_engine_submit(e, &rp, err, sizeof(err));
        if (id < 0) {
            fprintf(stderr, "bench_grammar: submit: %s\n", err);
            return -1;
        }
        sp_request_status st;
        sp_engine_wait(e, id, 1 << 30, -1, &st);
        if (st.stats.finish == SP_FINISH_ERROR) {
            fprintf(stderr, "bench_grammar: request failed\n");
            return -1;
        }
        R->n_out[i] = sp_engine_read(e, id, R->out + (size_t)i * max_tok, max_tok, NULL, 0) == SP_OK
                          ? st.n_tokens : 0;
        sp_engine_release(e, id);
        R->decode_ms += st.stats.decode_ms;
        R->tokens += st.n_tokens > 1 ? st.n_tokens - 1 : 0; /* decode_ms spans tokens 2..n */
        R->forced += st.stats.spec_grammar;
    }
    (void)v;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar MODEL [-t THREADS] [-n REQUESTS] [--tokens N]\n");
        return 2;
    }
    int threads = 2, n_req = 4, max_tok = 96;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_req = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) max_tok = atoi(argv[i + 1]);
    }
    char err[512];
    sp_model *m = sp_model_load(argv[1], sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "bench_grammar: %s\n", err);
        return 1;
    }
    const sp_vocab *v = sp_model_get_vocab(m);
    const int32_t V = sp_vocab_n_tokens(v);
    double t0 = time_ms();
    sp_token_trie *trie = sp_token_trie_create(v, err, sizeof(err));
    const double trie_ms = time_ms() - t0;
    /* compile + first mask of a typical tool schema */
    uint32_t *bits = malloc((size_t)(V + 31) / 32 * 4);
    double comp[20], gbnf_ms[20];
    for (int i = 0; i < 20; i++) {
        t0 = time_ms();
        char *g;
        sp_json_schema_to_gbnf(TOOL_SCHEMA, 0, &g, err, sizeof(err));
        gbnf_ms[i] = time_ms() - t0;
        sp_grammar *gr = g ? sp_grammar_compile(g, 0, err, sizeof(err)) : NULL;
        sp_matcher *mt = gr ? sp_matcher_create(gr, trie, err, sizeof(err)) : NULL;
        if (!mt) {
            fprintf(stderr, "bench_grammar: tool schema: %s\n", err);
            return 1;
        }
        sp_matcher_mask(mt, bits);
        comp[i] = time_ms() - t0;
        sp_matcher_free(mt);
        sp_grammar_free(gr);
        free(g);
    }
    qsort(comp, 20, sizeof(double), cmp_d);
    qsort(gbnf_ms, 20, sizeof(double), cmp_d);
    char *records;
    sp_json_schema_to_gbnf(RECORDS_SCHEMA, 0, &records, err, sizeof(err));
    sp_engine_params ep = sp_engine_default_params();
    ep.n_threads = threads;
    ep.max_seqs = 1;
    ep.n_ctx = 512;
    ep.spec_adaptive = false;
    sp_engine *e = sp_engine_create(m, ep, err, sizeof(err));
    if (!e || !records) {
        fprintf(stderr, "bench_grammar: %s\n", err);
        return 1;
    }
    /* the three runs interleaved, REPS times; each keeps its fastest repetition
     * (the machine is shared: the best is the least disturbed) */
    run_res warm, plain = {0}, cons = {0}, spec = {0}, lazy = {0}, x;
    if (run(e, v, 1, 16, NULL, SP_SPEC_OFF, &warm)) return 1;
    for (int rep = 0; rep < REPS; rep++) {
        run_res *best[4] = {&plain, &cons, &spec, &lazy};
        const char *grammar[4] = {NULL, records, records, LAZY_GBNF};
        for (int k = 0; k < 4; k++) {
            if (run(e, v, n_req, max_tok, grammar[k], k == 2 ? SP_SPEC_NGRAM : SP_SPEC_OFF, &x))
                return 1;
            if (!best[k]->tokens || x.tokens / x.decode_ms > best[k]->tokens / best[k]->decode_ms) {
                free(best[k]->out), free(best[k]->n_out);
                *best[k] = x;
            } else {
                free(x.out), free(x.n_out);
            }
        }
    }
    /* mask + commit per token, replaying the constrained outputs (cold cache per request) */
    sp_grammar *gr = sp_grammar_compile(records, 0, err, sizeof(err));
    double mask_ms = 0, first_ms = 0;
    int64_t masked = 0, first_n = 0;
    for (int i = 0; i < n_req; i++) {
        sp_matcher *mt = sp_matcher_create(gr, trie, err, sizeof(err));
        for (int32_t j = 0; j < cons.n_out[i]; j++) {
            t0 = time_ms();
            sp_matcher_mask(mt, bits);
            sp_matcher_accept_token(mt, cons.out[(size_t)i * max_tok + j]);
            const double dt = time_ms() - t0;
            if (i == 0) first_ms += dt, first_n++;
            else mask_ms += dt, masked++;
        }
        sp_matcher_free(mt);
    }
    const double first_per_tok = first_n ? first_ms / first_n : 0;
    const double tps_plain = plain.tokens ? plain.tokens / (plain.decode_ms / 1e3) : 0;
    const double tps_cons = cons.tokens ? cons.tokens / (cons.decode_ms / 1e3) : 0;
    const double tps_spec = spec.tokens ? spec.tokens / (spec.decode_ms / 1e3) : 0;
    const double tps_lazy = lazy.tokens ? lazy.tokens / (lazy.decode_ms / 1e3) : 0;
    const double tpot_plain = plain.tokens ? plain.decode_ms / plain.tokens : 0;
    const double mask_per_tok = masked ? mask_ms / masked : 0;
    const sp_model_info *h = sp_model_get_info(m);
    printf("| metric (%s, %d tokens, %d threads) | value |\n|---|---|\n", h->name, V, threads);
    printf("| token trie build | %.1f ms |\n", trie_ms);
    printf("| tool schema -> GBNF | %.3f ms (median of 20) |\n", gbnf_ms[10]);
    printf("| tool schema -> GBNF -> compiled -> first mask | %.2f ms (median of 20) |\n", comp[10]);
    printf("| mask + commit per token, first request of the schema | %.3f ms |\n", first_per_tok);
    printf("| mask + commit per token, later requests (fresh matcher, the grammar's shared masks) | %.3f ms |\n",
           mask_per_tok);
    printf("| decode time per token, unconstrained | %.3f ms |\n", tpot_plain);
    printf("| mask / decode time per token | %.1f%% |\n", tpot_plain ? 100 * mask_per_tok / tpot_plain : 0);
    printf("| tokens/s unconstrained | %.1f |\n", tps_plain);
    printf("| tokens/s constrained (records schema) + jump-forward | %.1f (%.1f%%; %lld of %lld tokens forced "
           "by the grammar) |\n", tps_cons, tps_plain ? 100 * tps_cons / tps_plain : 0, (long long)cons.forced,
           (long long)cons.tokens);
    printf("| tokens/s free text under a lazy grammar (no trigger) | %.1f (%.1f%%) |\n", tps_lazy,
           tps_plain ? 100 * tps_lazy / tps_plain : 0);
    printf("| tokens/s constrained + ngram k 4 + jump-forward | %.1f (%.2fx constrained; %lld of %lld "
           "tokens forced by the grammar) |\n", tps_spec, tps_cons ? tps_spec / tps_cons : 0,
           (long long)spec.forced, (long long)spec.tokens);
    printf("{\"model\": \"%s\", \"n_vocab\": %d, \"threads\": %d, \"trie_ms\": %.3f, \"tool_gbnf_ms\": %.4f, "
           "\"tool_compile_first_mask_ms\": %.3f, \"mask_ms_per_token\": %.4f, \"mask_ms_first_request\": %.4f, \"decode_ms_per_token\": %.4f, "
           "\"tps_plain\": %.2f, \"tps_constrained\": %.2f, \"tps_constrained_spec\": %.2f, "
           "\"forced\": %lld, \"spec_tokens\": %lld, \"forced_plain\": %lld, \"tps_lazy_free\": %.2f}\n",
           h->name, V, threads, trie_ms, gbnf_ms[10], comp[10], mask_per_tok, first_per_tok, tpot_plain, tps_plain,
           tps_cons, tps_spec, (long long)spec.forced, (long long)spec.tokens, (long long)cons.forced, tps_lazy);
    sp_grammar_free(gr);
    sp_engine_free(e);
    sp_token_trie_free(trie);
    free(records);
    free(bits);
    sp_model_free(m);
    return 0;
}
