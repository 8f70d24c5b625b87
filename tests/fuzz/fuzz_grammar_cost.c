/* fuzz_grammar_cost.c: grammars and JSON Schemas that cost too much.
 *
 * Input: as fuzz_grammar.c (byte 0 bit 0 clear: GBNF text; set: a JSON
 * Schema). Where fuzz_grammar hunts wrong answers and crashes, this target
 * hunts time: a grammar a request may send must compile, start and give
 * its first masks within the budgets (src/grammar/grammar.h), or be
 * refused, and either way quickly. Every call is timed: compiling (the
 * schema's conversion included), the matcher's start, and a walk of up to
 * eight masks, each followed by its first allowed token. A call slower than
 * FZ_COST_MS (default 1000 ms, under the sanitizers' several-fold slowdown;
 * the budgets are tens of milliseconds in a release build) is a failure,
 * as is a call over a budget that does not say so. */
#include "fuzz_common.h"
#include "specula.h"

static sp_token_trie *fzc_trie;
static double fzc_limit_ms = 1000;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_load_vocabs();
    if (fz_vocabs[0] && !fzc_trie) fzc_trie = sp_token_trie_create(fz_vocabs[0], NULL, 0);
    const char *l = getenv("FZ_COST_MS");
    if (l && atof(l) > 0) fzc_limit_ms = atof(l);
    return 0;
}

/* Fails when the call that began at t0 took too long. */
static void fzc_check(double t0, const char *what) {
    const double ms = time_ms() - t0;
    if (ms <= fzc_limit_ms) return;
    fprintf(stderr, "fuzz cost: %s took %.0f ms (limit %.0f)\n", what, ms, fzc_limit_ms);
    abort();
}

static void fzc_over(const sp_matcher *m) {
    char err[256];
    if (sp_matcher_error(m, err, sizeof(err))) FZ_ASSERT(strstr(err, "budget"));
}

static void fzc_walk(const sp_grammar *g) {
    char err[256];
    double t0 = time_ms();
    sp_matcher *m = sp_matcher_create(g, fzc_trie, err, sizeof(err));
    fzc_check(t0, "the matcher's start");
    FZ_ASSERT(m);
    fzc_over(m);
    const int32_t V = fzc_trie ? sp_vocab_n_tokens(fz_vocabs[0]) : 0;
    uint32_t *bits = V ? calloc((size_t)(V + 31) / 32, 4) : NULL;
    for (int step = 0; bits && step < 8; step++) {
        t0 = time_ms();
        const int32_t n = sp_matcher_mask(m, bits);
        fzc_check(t0, "a mask");
        fzc_over(m);
        sp_token t = -1;
        for (int32_t w = 0; n > 0 && t < 0 && w < (V + 31) / 32; w++)
            if (bits[w]) t = w * 32 + __builtin_ctz(bits[w]);
        if (t < 0) break;
        t0 = time_ms();
        const bool took = sp_matcher_accept_token(m, t);
        fzc_check(t0, "a token");
        fzc_over(m);
        if (!took) break;
    }
    free(bits);
    sp_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    char err[256];
    char *gbnf = NULL;
    double t0 = time_ms();
    if (data[0] & 1) {
        sp_json_schema_to_gbnf(text, len, &gbnf, err, sizeof(err));
    } else if (!memchr(text, 0, len) && (gbnf = malloc(len + 1))) {
        memcpy(gbnf, text, len);
        gbnf[len] = 0;
    }
    sp_grammar *g = gbnf ? sp_grammar_compile(gbnf, 0, err, sizeof(err)) : NULL;
    fzc_check(t0, "compiling");
    if (g) fzc_walk(g);
    sp_grammar_free(g);
    free(gbnf);
    return 0;
}
