/* test_grammar_budget: the matcher's budgets (src/grammar/match.c).
 *   - no recursion a grammar controls: hostile grammars run on a thread
 *     with a 128 KiB stack, where a recursive expansion would overflow;
 *   - work: every call on a hostile grammar either succeeds or fails with
 *     the work budget named, within a bounded time, and stays failed
 *     (empty masks, tokens refused);
 *   - memory: a long run over a grammar whose old states die keeps the
 *     matcher far under its cap (dead nodes are dropped), and the cap holds
 *     on a grammar whose live state keeps growing. */
#include <pthread.h>

#include "common.h"
#include "grammar/grammar.h"
#include "specula.h"
#include "test.h"
#include "ref_vocab.h"

/* A chain of n rules, each referring to the next before a byte: expanding
 * its start goes n rules deep, and its strings are "a" then n b's. */
static char *chain_grammar(int n) {
    size_t cap = (size_t)n * 40 + 64, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    len += (size_t)snprintf(s + len, cap - len, "root ::= r0\n");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "r%d ::= r%d \"b\"\n", i, i + 1);
    snprintf(s + len, cap - len, "r%d ::= \"a\"\n", n);
    return s;
}

/* Grammars built to cost: deep or ambiguous nullable nesting. */
static const char *const hostile[] = {
    "root ::= ((\"a\"?){0,1000}){0,1000}",
    "root ::= ((\"a\"?){0,100}){0,100}",
    "root ::= ((\"a\"? \"a\"?){0,60}){0,60} \"b\"",
    "root ::= (x x x x x x x x){0,30}\nx ::= \"a\" | \"a\" \"a\" | [a-z]* | \"\"",
    "root ::= ([a-z]* [a-z]* [a-z]* [a-z]*){0,50}",
    /* JSON Schemas (converted first): a pattern of nested repetitions */
    "{\"type\": \"string\", \"pattern\": \"^((((a{0,1000}){0,1000}){0,1000}){0,1000})$\"}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", "
    "\"pattern\": \"^((a?){0,100}){0,100}$\"}}, \"required\": [\"a\"]}",
};

typedef struct {
    const sp_token_trie *t;
    const char *gbnf;
    int n_ok, n_budget, n_other, n_refused;
    double max_ms;
    char msg[256];
} hrun;

/* Compiles one grammar and drives a matcher through masks and tokens,
 * timing every call. */
static void *drive(void *arg) {
    hrun *h = arg;
    char err[256];
    char *conv = NULL;
    if (h->gbnf[0] == '{') sp_json_schema_to_gbnf(h->gbnf, strlen(h->gbnf), &conv, err, sizeof(err));
    sp_grammar *g = h->gbnf[0] == '{' && !conv ? NULL
                                                : sp_grammar_compile(conv ? conv : h->gbnf, 0, err, sizeof(err));
    free(conv);
    if (!g) { /* refused at compile time: also within the rules */
        h->n_refused++;
        snprintf(h->msg, sizeof(h->msg), "%s", err);
        return NULL;
    }
    double t0 = time_ms();
    sp_matcher *m = sp_matcher_create(g, h->t, err, sizeof(err));
    h->max_ms = time_ms() - t0;
    sp_grammar_free(g);
    if (!m) {
        h->n_other++;
        snprintf(h->msg, sizeof(h->msg), "%s", err);
        return NULL;
    }
    const int32_t words = (h->t->n_vocab + 31) / 32;
    uint32_t *bits = calloc((size_t)words, 4);
    for (int step = 0; step < 8 && bits; step++) {
        t0 = time_ms();
        int32_t n = sp_matcher_mask(m, bits);
        bool took = false;
        for (int32_t w = 0; w < words && n > 0 && !took; w++)
            if (bits[w]) took = sp_matcher_accept_token(m, w * 32 + __builtin_ctz(bits[w]));
        const double ms = time_ms() - t0;
        if (ms > h->max_ms) h->max_ms = ms;
        if (sp_matcher_error(m, err, sizeof(err))) {
            if (strstr(err, "budget")) h->n_budget++;
            else h->n_other++;
            snprintf(h->msg, sizeof(h->msg), "%s", err);
            /* failed for good: an empty mask, no token taken */
            h->n_other += sp_matcher_mask(m, bits) != 0 || sp_matcher_accept_token(m, 0);
            break;
        }
        h->n_ok++;
        if (!took) break;
    }
    free(bits);
    sp_matcher_free(m);
    return NULL;
}

/* Runs drive on a thread with a small stack. */
static bool run_small_stack(hrun *h) {
    pthread_attr_t a;
    pthread_t th;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 128 << 10);
    bool ok = pthread_create(&th, &a, drive, h) == 0;
    if (ok) pthread_join(th, NULL);
    pthread_attr_destroy(&a);
    return ok;
}

static void test_hostile_grammars(void) {
    sp_model *mod = load_vocab("ggml-vocab-gpt-2.gguf");
    REQUIRE(mod, "vocabulary");
    char err[256];
    sp_token_trie *t = sp_token_trie_create(sp_model_get_vocab(mod), err, sizeof(err));
    REQUIRE(t, "%s", err);
    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        hrun h = {.t = t, .gbnf = hostile[i]};
        CHECK(run_small_stack(&h), "thread");
        /* each call is refused, fails on a budget, or succeeds; never
         * another error, and never long (the budget is about 20-30 ms of
         * one core; 1 s leaves room for a loaded machine) */
        CHECK(h.n_other == 0, "grammar %zu: %s", i, h.msg);
        CHECK(h.max_ms < 1000, "grammar %zu: a call took %.0f ms", i, h.max_ms);
        printf("  # grammar %zu: %d calls ok, %s (max %.1f ms/call) %s\n", i, h.n_ok,
               h.n_refused ? "refused at compile" : h.n_budget ? "budget" : "within budget",
               h.max_ms, h.msg);
    }
    /* the first one is hostile enough that it must not run */
    hrun h = {.t = t, .gbnf = hostile[0]};
    run_small_stack(&h);
    CHECK(h.n_refused + h.n_budget == 1, "((a?){0,1000}){0,1000} ran");
    sp_token_trie_free(t);
    sp_model_free(mod);
}

#define CHAIN 20000

typedef struct {
    const char *gbnf;
    bool a, b, end, no_c;
} chain_run;

/* Bytes only (no trie): "a", then the b's, then the end. */
static void *chain_body(void *arg) {
    chain_run *c = arg;
    char err[256];
    sp_grammar *g = sp_grammar_compile(c->gbnf, 0, err, sizeof(err));
    sp_matcher *m = g ? sp_matcher_create(g, NULL, err, sizeof(err)) : NULL;
    if (!m) fprintf(stderr, "  %s\n", err);
    if (m) {
        c->a = sp_matcher_accept_bytes(m, "a", 1) && !sp_matcher_can_end(m);
        char *b = malloc(CHAIN);
        if (b) memset(b, 'b', CHAIN);
        c->b = b && sp_matcher_accept_bytes(m, b, CHAIN);
        free(b);
        c->end = sp_matcher_can_end(m);
        c->no_c = !sp_matcher_accept_bytes(m, "c", 1);
    }
    sp_matcher_free(m);
    sp_grammar_free(g);
    return NULL;
}

/* A 20,000-rule chain: fine to run, but 20,000 rules deep, on a thread
 * with a 128 KiB stack. */
static void test_deep_chain(void) {
    chain_run c = {.gbnf = chain_grammar(CHAIN)};
    REQUIRE(c.gbnf, "oom");
    pthread_attr_t at;
    pthread_t th;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 128 << 10);
    const bool started = pthread_create(&th, &at, chain_body, &c) == 0;
    if (started) pthread_join(th, NULL);
    pthread_attr_destroy(&at);
    CHECK(started, "thread");
    CHECK(c.a, "\"a\" refused");
    CHECK(c.b, "the b's refused after \"a\"");
    CHECK(c.end, "cannot end after the b's");
    CHECK(c.no_c, "\"c\" taken");
    free((char *)c.gbnf);
}

/* Nested items one after another: each item's stacks die once it closes. */
static void test_memory_compaction(void) {
    char err[256];
    sp_grammar *g = sp_grammar_compile("root ::= item*\nitem ::= \"(\" item \")\" | \"[\" item \"]\" | \"x\"",
                                       0, err, sizeof(err));
    REQUIRE(g, "%s", err);
    sp_matcher *m = sp_matcher_create(g, NULL, err, sizeof(err));
    sp_grammar_free(g);
    REQUIRE(m, "%s", err);
    /* items 24 deep, their brackets drawn at random: nearly every item
     * makes stacks never met before, so without dropping the dead ones the
     * pool would pass 200 MiB */
    char item[256];
    bool ok = true;
    size_t peak = 0;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 200000 && ok; i++) {
        int n = 0;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        for (int k = 0; k < 24; k++) item[n++] = x >> (63 - k) & 1 ? '(' : '[';
        item[n++] = 'x';
        for (int k = 23; k >= 0; k--) item[n++] = x >> (63 - k) & 1 ? ')' : ']';
        ok = sp_matcher_accept_bytes(m, item, (size_t)n);
        if (sp_matcher_bytes(m) > peak) peak = sp_matcher_bytes(m);
    }
    CHECK(ok, "an item was refused: %s", sp_matcher_error(m, err, sizeof(err)) ? err : "no error");
    CHECK(peak <= GR_MATCHER_MAX_BYTES, "peak %zu bytes", peak);
    printf("  # 200000 items: peak %.1f MiB\n", peak / 1048576.0);
    sp_matcher_free(m);
    /* a live state that keeps growing: the cap is met and named */
    g = sp_grammar_compile("root ::= \"(\" root \")\" | \"x\"", 0, err, sizeof(err));
    REQUIRE(g, "%s", err);
    m = sp_matcher_create(g, NULL, err, sizeof(err));
    sp_grammar_free(g);
    REQUIRE(m, "%s", err);
    ok = true;
    for (int i = 0; i < (1 << 24) && ok; i += 4096) {
        memset(item, '(', sizeof(item));
        for (int k = 0; k < 16 && ok; k++) ok = sp_matcher_accept_bytes(m, item, sizeof(item));
    }
    CHECK(!ok, "an unbounded nesting was taken");
    CHECK(sp_matcher_error(m, err, sizeof(err)) == SP_ERR_INVALID && strstr(err, "memory"), "%s",
          err);
    CHECK(sp_matcher_bytes(m) <= GR_MATCHER_MAX_BYTES, "%zu bytes", sp_matcher_bytes(m));
    sp_matcher_free(m);
}

int main(void) {
    RUN(test_hostile_grammars);
    RUN(test_deep_chain);
    RUN(test_memory_compaction);
    TEST_END();
}
