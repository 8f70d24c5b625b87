/* test_grammar_engine: structured output's shared state and memory in the
 * engine (src/engine/constrain.c).
 *   - compiled grammars (and so the masks their matchers share) are kept
 *     per tenant: the same grammar under another salt is compiled again,
 *     under the same salt it is found;
 *   - the matchers' memory cap: with room for two matchers, four requests
 *     run two at a time (the others wait in the queue, holding no matcher),
 *     all finish with valid output, and everything is given back;
 *   - a grammar over its budget is refused at submission naming it, and
 *     holds nothing afterwards;
 *   - fairness: a request whose masks cost more than a step's allowance
 *     sits steps out while another runs, and both outputs are what each
 *     gives alone;
 *   - too small a grammar_mem is refused at creation. */
#include "grammar/grammar.h"
#include "specula.h"
#include "test.h"

static sp_model *model;

static sp_engine *new_engine(size_t grammar_mem) {
    char err[256];
    sp_engine_params p = sp_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 256;
    p.max_seqs = 4;
    p.grammar_mem = grammar_mem;
    sp_engine *e = sp_engine_create(model, p, err, sizeof(err));
    if (!e) fprintf(stderr, "engine: %s\n", err);
    return e;
}

static sp_request_params req(const char *grammar, const char *salt, int max_tokens) {
    sp_request_params r = sp_request_default_params();
    r.prompt = "def f(x):";
    r.max_tokens = max_tokens;
    r.sampling = sp_sampler_greedy_params();
    r.grammar = grammar;
    r.cache_salt = salt;
    return r;
}

/* Runs one request to its end; its finish reason (-1: refused). */
static int run(sp_engine *e, sp_request_params r, char *text, size_t cap) {
    char err[256];
    int64_t id = sp_engine_submit(e, &r, err, sizeof(err));
    if (id < 0) return -1;
    sp_request_status st;
    sp_engine_wait(e, id, 1 << 30, -1, &st);
    if (text) sp_engine_read(e, id, NULL, 0, text, cap);
    sp_engine_release(e, id);
    return st.stats.finish;
}

static uint64_t compiles(sp_engine *e) {
    sp_engine_stats st;
    sp_engine_get_stats(e, &st);
    return st.grammar_compiles;
}

static const char *G = "root ::= \"x = \" [0-9]{1,3}";

static void grammars_per_tenant(void) {
    sp_engine *e = new_engine(0);
    REQUIRE(e, "engine");
    const int f = run(e, req(G, "tenant-a", 8), NULL, 0);
    CHECK(f == SP_FINISH_STOP, "finish %d", f);
    CHECK(compiles(e) == 1, "%llu compiles", (unsigned long long)compiles(e));
    run(e, req(G, "tenant-a", 4), NULL, 0);
    CHECK(compiles(e) == 1, "the same tenant compiled again: %llu", (unsigned long long)compiles(e));
    run(e, req(G, "tenant-b", 4), NULL, 0);
    CHECK(compiles(e) == 2, "another tenant found the first one's: %llu", (unsigned long long)compiles(e));
    run(e, req(G, NULL, 4), NULL, 0);
    CHECK(compiles(e) == 3, "no salt found a tenant's: %llu", (unsigned long long)compiles(e));
    sp_engine_stats st;
    sp_engine_get_stats(e, &st);
    CHECK(st.grammar_mem_used == 0, "%zu bytes still held", st.grammar_mem_used);
    sp_engine_free(e);
}

static void matcher_memory_capped(void) {
    /* two matchers' budgets: the matchers' half holds one */
    sp_engine *e = new_engine(2 * GR_MATCHER_MAX_BYTES);
    REQUIRE(e, "engine");
    char err[256];
    int64_t ids[4];
    for (int i = 0; i < 4; i++) {
        sp_request_params r = req("root ::= [a-z]{30}", NULL, 16);
        ids[i] = sp_engine_submit(e, &r, err, sizeof(err));
        CHECK(ids[i] > 0, "submit %d: %s", i, err);
    }
    for (int i = 0; i < 4; i++) {
        sp_request_status st;
        char text[256];
        if (ids[i] <= 0) continue;
        sp_engine_wait(e, ids[i], 1 << 30, -1, &st);
        sp_engine_read(e, ids[i], NULL, 0, text, sizeof(text));
        CHECK(st.stats.finish == SP_FINISH_LENGTH && strlen(text) == 16 && strspn(text, "abcdefghijklmnopqrstuvwxyz") == 16,
              "request %d: finish %d, '%s'", i, st.stats.finish, text);
        sp_engine_release(e, ids[i]);
    }
    sp_engine_stats st;
    sp_engine_get_stats(e, &st);
    CHECK(st.grammar_waits > 0, "no admission waited for matcher memory");
    CHECK(st.grammar_mem_used == 0, "%zu bytes still held", st.grammar_mem_used);
    sp_engine_free(e);
}

static void over_budget_refused(void) {
    sp_engine *e = new_engine(0);
    REQUIRE(e, "engine");
    char err[256];
    sp_request_params r = req("root ::= ((\"a\"?){0,1000}){0,1000}", NULL, 4);
    int64_t id = sp_engine_submit(e, &r, err, sizeof(err));
    CHECK(id == SP_ERR_GRAMMAR && strstr(err, "budget"), "%lld: %s", (long long)id, err);
    /* the grammar's own faults are SP_ERR_GRAMMAR, the request's others not */
    sp_request_params bad = req("root ::= [0-9", NULL, 4);
    id = sp_engine_submit(e, &bad, err, sizeof(err));
    CHECK(id == SP_ERR_GRAMMAR, "a grammar that does not compile: %lld: %s", (long long)id, err);
    sp_request_params empty = req("root ::= \"a\"", NULL, 4);
    empty.prompt = "";
    id = sp_engine_submit(e, &empty, err, sizeof(err));
    CHECK(id == SP_ERR_INVALID, "an empty prompt with a grammar: %lld: %s", (long long)id, err);
    sp_engine_stats st;
    sp_engine_get_stats(e, &st);
    CHECK(st.grammar_mem_used == 0, "%zu bytes still held", st.grammar_mem_used);
    /* and the engine goes on */
    char text[64];
    CHECK(run(e, req(G, NULL, 8), text, sizeof(text)) == SP_FINISH_STOP && !strncmp(text, "x = ", 4),
          "'%s'", text);
    sp_engine_free(e);
    sp_engine_params p = sp_engine_default_params();
    p.grammar_mem = GR_MATCHER_MAX_BYTES;
    sp_engine *small = sp_engine_create(model, p, err, sizeof(err));
    CHECK(!small && strstr(err, "grammar_mem"), "%s", small ? "created" : err);
    sp_engine_free(small);
}

/* Two requests at once, a costly grammar and none: the grammar's request
 * sits steps out, and each output equals the one it gives alone. */
static void costly_grammar_throttled(void) {
    sp_engine *e = new_engine(0);
    REQUIRE(e, "engine");
    const char *costly = "root ::= ([a-z] [a-z]? [a-z]?){0,30} \"!\"";
    char alone_g[256] = "", alone_p[256] = "", both_g[256] = "", both_p[256] = "", err[256];
    sp_request_params rg = req(costly, NULL, 24), rp = req(NULL, NULL, 24);
    rp.ignore_eos = true;
    run(e, rg, alone_g, sizeof(alone_g));
    run(e, rp, alone_p, sizeof(alone_p));
    sp_engine_free(e);
    REQUIRE(e = new_engine(0), "engine"); /* fresh: nothing memoized or cached */
    const int64_t a = sp_engine_submit(e, &rg, err, sizeof(err));
    const int64_t b = sp_engine_submit(e, &rp, err, sizeof(err));
    REQUIRE(a > 0 && b > 0, "%s", err);
    sp_request_status st;
    sp_engine_wait(e, a, 1 << 30, -1, &st);
    sp_engine_wait(e, b, 1 << 30, -1, &st);
    sp_engine_read(e, a, NULL, 0, both_g, sizeof(both_g));
    sp_engine_read(e, b, NULL, 0, both_p, sizeof(both_p));
    sp_engine_release(e, a);
    sp_engine_release(e, b);
    sp_engine_stats es;
    sp_engine_get_stats(e, &es);
    CHECK(es.grammar_throttled > 0, "the costly grammar never sat a step out");
    CHECK(!strcmp(alone_g, both_g) && alone_g[0], "grammar output '%s' alone, '%s' together", alone_g,
          both_g);
    CHECK(!strcmp(alone_p, both_p) && alone_p[0], "plain output '%s' alone, '%s' together", alone_p,
          both_p);
    sp_engine_free(e);
}

int main(void) {
    char err[256];
    model = sp_model_load("models/specula-code-target-f16.gguf", sp_model_default_params(), err,
                          sizeof(err));
    if (!model) {
        printf("FAIL test_grammar_engine: cannot load the bundled model: %s\n", err);
        printf("RESULT 0 1\n");
        return 1;
    }
    RUN(grammars_per_tenant);
    RUN(matcher_memory_capped);
    RUN(over_budget_refused);
    RUN(costly_grammar_throttled);
    sp_model_free(model);
    TEST_END();
}
