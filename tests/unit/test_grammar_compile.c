/* test_grammar_compile: what compiling grammars and JSON Schemas, and
 * parsing a request's logit_bias, may cost, whatever the input:
 *   - GBNF (grammar/gbnf.c): a ~960 KB grammar of rules referring to each
 *     other compiles in well under 2 s (quadratic name lookups and
 *     nullable passes would take 10-30 s); a 60000-rule left chain
 *     compiles on a 256 KiB stack (no recursion per rule); nested {m,n}
 *     stay within the limits, and every limit refused is named; the name
 *     table and the nullable worklist give the answers a plain reading
 *     does;
 *   - JSON Schema (grammar/schema.c, regex.c): a schema or pattern whose
 *     grammar would be large is refused with the limit named, a repeated
 *     type is refused (it would multiply the work per level), 256 optional
 *     properties make a grammar linear in them, deep nesting is a clear
 *     error;
 *   - logit_bias (server/openai.c): 100000 keys parse in well under 2 s
 *     (a lookup per key would be quadratic), the first of a duplicate key
 *     counting and the keys kept in the body's order.
 * Times (CPU time) are bounded with margins of 10x or more over what the
 * linear code takes; SPECULA_TIMEOUT_SCALE (make asan: 3) stretches them. */
#include <pthread.h>
#include <time.h>

#include "common.h"
#include "grammar/grammar.h"
#include "sbuf.h"
#include "server/openai.h"
#include "specula.h"
#include "test.h"

/* This thread's CPU time: what the work costs, whatever else the machine
 * runs (the tests share its cores). */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static double time_limit(double s) {
    const char *k = getenv("SPECULA_TIMEOUT_SCALE");
    const double f = k ? atof(k) : 1;
    return s * (f >= 1 ? f : 1);
}

/* Compiles text: whether it compiled; err gets the refusal; *secs the time. */
static bool compiles(const char *text, size_t len, char *err, size_t errlen, double *secs) {
    err[0] = 0;
    const double t0 = now_s();
    sp_grammar *g = sp_grammar_compile(text, len, err, errlen);
    if (secs) *secs = now_s() - t0;
    sp_grammar_free(g);
    return g != NULL;
}

/* Whether g accepts the whole of s. */
static bool accepts(const char *gbnf, const char *s) {
    char err[256];
    sp_grammar *g = sp_grammar_compile(gbnf, 0, err, sizeof(err));
    if (!g) return false;
    sp_matcher *m = sp_matcher_create(g, NULL, err, sizeof(err));
    sp_grammar_free(g);
    const bool ok = m && sp_matcher_accept_bytes(m, s, strlen(s)) && sp_matcher_can_end(m);
    sp_matcher_free(m);
    return ok;
}

/* ---- GBNF ---- */

/* n rules; rule i starts with a reference to rule i+1 (a chain the nullable
 * passes walked one rule per pass) and refers to a rule anywhere (a name
 * lookup among all rules); the last is nullable, so all are. */
static void chain_grammar(sbuf *b, int n) {
    sb_str(b, "root ::= r0\n");
    for (int i = 0; i < n - 1; i++) sb_printf(b, "r%d ::= r%d | \"b\" r%d \"c\"\n", i, i + 1, (int)((i * 7919L) % n));
    sb_printf(b, "r%d ::= \"z\" | \"\"\n", n - 1);
}

/* n one-byte rules, then rules of 40 references each up to about size bytes. */
static void refs_grammar(sbuf *b, int n, size_t size) {
    sbuf refs = {0};
    int j = 0, r = 0;
    for (int i = 0; i < n; i++) sb_printf(b, "k%x ::= \"x\"\n", i);
    while (b->len + refs.len < size) {
        sb_printf(&refs, "u%d ::= \"y\"", r++);
        for (int t = 0; t < 40; t++, j++) sb_printf(&refs, " k%x", (int)((j * 7919L) % n));
        sb_str(&refs, "\n");
    }
    sb_str(b, "root ::=");
    for (int i = 0; i < r; i++) sb_printf(b, " u%d", i);
    sb_str(b, "\n");
    sb_add(b, refs.p, refs.len);
    sb_free(&refs);
}

static void test_big_grammars_linear(void) {
    char err[256];
    double t;
    sbuf b = {0};
    chain_grammar(&b, 28400);
    REQUIRE(!b.oom, "out of memory");
    CHECK(b.len > 900000 && b.len < (1 << 20), "chain grammar of %zu bytes", b.len);
    CHECK(compiles(b.p, b.len, err, sizeof(err), &t), "chain: %s", err);
    CHECK(t < time_limit(2.0), "a %zu-byte chain grammar compiled in %.2f s (10 s when quadratic)", b.len, t);
    printf("# chain grammar, %zu bytes: %.3f s\n", b.len, t);
    sb_free(&b);
    refs_grammar(&b, 50000, 955000);
    REQUIRE(!b.oom, "out of memory");
    CHECK(compiles(b.p, b.len, err, sizeof(err), &t), "refs: %s", err);
    CHECK(t < time_limit(2.0), "a %zu-byte grammar of references compiled in %.2f s (28 s when quadratic)", b.len, t);
    printf("# reference grammar, %zu bytes: %.3f s\n", b.len, t);
    sb_free(&b);
}

/* rule i ::= rule i+1 "x" | "y": the left-recursion check walks n deep. */
typedef struct {
    int n;
    bool ok;
    char err[256];
} deep_job;

static void *compile_left_chain(void *arg) {
    deep_job *j = arg;
    sbuf b = {0};
    sb_str(&b, "root ::= r0\n");
    for (int i = 0; i < j->n - 1; i++) sb_printf(&b, "r%d ::= r%d \"x\" | \"y\"\n", i, i + 1);
    sb_printf(&b, "r%d ::= \"y\"\n", j->n - 1);
    j->ok = !b.oom && compiles(b.p, b.len, j->err, sizeof(j->err), NULL);
    sb_free(&b);
    return NULL;
}

/* On a 256 KiB stack (a server thread has more): the check must not
 * recurse per rule (60000 rules took some 5 MB of stack). */
static void test_deep_chain_small_stack(void) {
    /* static: the worker writes its result here rather than into the
     * waiting thread's stack frame, a write from a thread on a small custom
     * stack that AddressSanitizer can misreport as a stack overflow */
    static deep_job j;
    j = (deep_job){.n = 60000};
    pthread_attr_t a;
    pthread_t th;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 << 10);
    REQUIRE(!pthread_create(&th, &a, compile_left_chain, &j), "pthread_create");
    pthread_join(th, NULL);
    pthread_attr_destroy(&a);
    CHECK(j.ok, "a 60000-rule left chain: %s", j.err);
}

static char *repeat(const char *head, const char *unit, int n, const char *tail) {
    sbuf b = {0};
    sb_str(&b, head);
    for (int i = 0; i < n; i++) sb_str(&b, unit);
    sb_str(&b, tail);
    return b.p;
}

static void test_repetition_bounded(void) {
    char err[256];
    double t;
    /* nested repetitions cost the sum, not the product (10^9 elements) */
    CHECK(compiles("root ::= (((\"a\"){0,1000}){0,1000}){0,1000}", 0, err, sizeof(err), &t), "%s", err);
    CHECK(t < time_limit(1.0), "nested {0,1000} took %.2f s", t);
    CHECK(compiles("root ::= ((((\"ab\"){1000}){1000}){1000}){2,1000}", 0, err, sizeof(err), &t), "%s", err);
    CHECK(t < time_limit(1.0), "nested {1000} took %.2f s", t);
    /* many of them: refused, the limit named */
    char *g = repeat("root ::=", " \"a\"{0,1000}", 70, "");
    CHECK(!compiles(g, 0, err, sizeof(err), NULL) && strstr(err, "grammar too large: more than 65536 rules"),
          "70 x {0,1000}: %s", err);
    free(g);
    g = repeat("root ::=", " \"a\"{1000}", 1100, "");
    CHECK(!compiles(g, 0, err, sizeof(err), &t) && strstr(err, "grammar too large: more than 1048576 elements"),
          "1100 x {1000}: %s", err);
    CHECK(t < time_limit(1.0), "1100 x {1000} took %.2f s to refuse", t);
    free(g);
}

static void test_nesting_limit(void) {
    char err[256];
    char *g = repeat("root ::= ", "(", 10000, "\"a\"");
    CHECK(!compiles(g, 0, err, sizeof(err), NULL) && strstr(err, "more than 256 nested groups"),
          "10000 '(': %s", err);
    free(g);
    sbuf b = {0};
    sb_str(&b, "root ::= ");
    for (int i = 0; i < 256; i++) sb_str(&b, "(");
    sb_str(&b, "\"a\"");
    for (int i = 0; i < 256; i++) sb_str(&b, ")");
    CHECK(!b.oom && compiles(b.p, b.len, err, sizeof(err), NULL), "256 nested groups: %s", err);
    sb_free(&b);
}

/* The name table and the nullable worklist answer as a plain reading does. */
static void test_names_and_nullable(void) {
    char err[256];
    sbuf b = {0};
    for (int i = 0; i < 40000; i++) sb_printf(&b, "n%d ::= \"%c\"\n", i, 'a' + i % 26);
    sb_str(&b, "root ::= n39999 n0 n12345\n");
    CHECK(accepts(b.p, "lav"), "references found by name");
    sb_str(&b, "n17 ::= \"q\"\n");
    CHECK(!compiles(b.p, b.len, err, sizeof(err), NULL) && strstr(err, "rule 'n17' defined twice"), "%s", err);
    b.len -= strlen("n17 ::= \"q\"\n");
    sb_str(&b, "n40000x ::= n400001\n");
    CHECK(!compiles(b.p, b.len, err, sizeof(err), NULL) && strstr(err, "undefined rule 'n400001'"), "%s", err);
    sb_free(&b);
    /* nullable far along a chain makes a left recursion */
    sb_str(&b, "root ::= r0\nr0 ::= r1 r0 \"x\" | \"y\"\n");
    for (int i = 1; i < 30000; i++) sb_printf(&b, "r%d ::= r%d | \"b\"\n", i, i + 1);
    sb_str(&b, "r30000 ::= \"\"\n");
    CHECK(!compiles(b.p, b.len, err, sizeof(err), NULL) && strstr(err, "left recursion: rule 'r0'"),
          "%s", err);
    sb_free(&b);
    /* a rule mentioned twice in one alternative */
    CHECK(accepts("root ::= n n \"x\" | \"y\"\nn ::= \"\" | \"a\"", "x"), "n n x: x");
    CHECK(accepts("root ::= n n \"x\" | \"y\"\nn ::= \"\" | \"a\"", "aax"), "n n x: aax");
    CHECK(!accepts("root ::= n n \"x\" | \"y\"\nn ::= \"\" | \"a\"", "aaax"), "n n x: not aaax");
    CHECK(!compiles("root ::= n n root | \"y\"\nn ::= \"\" | \"a\"", 0, err, sizeof(err), NULL) &&
              strstr(err, "left recursion"), "n n root: %s", err);
    CHECK(compiles("root ::= n m root | \"y\"\nn ::= \"\" | \"a\"\nm ::= \"b\"", 0, err, sizeof(err), NULL),
          "n m root: %s", err);
}

/* ---- JSON Schema ---- */

static char *schema_err(const char *schema, char *err, size_t errlen, double *secs) {
    err[0] = 0;
    const double t0 = now_s();
    char *g;
    sp_json_schema_to_gbnf(schema, 0, &g, err, errlen);
    if (secs) *secs = now_s() - t0;
    return g;
}

/* "type" listing object 8 times, 8 levels deep: each level converted the
 * next 8 times (8^8 objects). */
static void test_schema_repeated_type(void) {
    char err[300];
    double t;
    sbuf b = {0};
    const char *obj = "{\"type\": [\"object\", \"object\", \"object\", \"object\", \"object\", \"object\", "
                      "\"object\", \"object\"], \"properties\": {\"a\": ";
    for (int i = 0; i < 8; i++) sb_str(&b, obj);
    sb_str(&b, "{\"type\": \"integer\"}");
    for (int i = 0; i < 8; i++) sb_str(&b, "}}");
    char *g = schema_err(b.p, err, sizeof(err), &t);
    CHECK(!g && strstr(err, "'type' at / names 'object' twice"), "%s", g ? "converted" : err);
    CHECK(t < time_limit(1.0), "took %.2f s", t);
    free(g);
    sb_free(&b);
    g = schema_err("{\"type\": [\"string\", \"null\"]}", err, sizeof(err), NULL);
    CHECK(g, "distinct types: %s", err);
    free(g);
}

static void test_schema_output_limit(void) {
    char err[300];
    double t;
    sbuf b = {0};
    /* 200 times 4 numbers bounded at both ends with 14 to 16 digits: 8 KB of grammar each */
    sb_str(&b, "{\"type\": \"object\", \"properties\": {");
    for (int i = 0; i < 200; i++) {
        sb_printf(&b, "%s\"p%d\": {\"anyOf\": [", i ? ", " : "", i);
        for (int k = 0; k < 4; k++)
            sb_printf(&b, "%s{\"type\": \"number\", \"minimum\": -%d234567.%d234567, \"maximum\": 7654321.765432%d}",
                      k ? ", " : "", k + 1, k + 1, k + 1);
        sb_str(&b, "]}");
    }
    sb_str(&b, "}}");
    char *g = schema_err(b.p, err, sizeof(err), &t);
    CHECK(!g && strstr(err, "larger than 1048576 bytes"), "%s", g ? "converted" : err);
    free(g);
    sb_free(&b);
    /* a pattern of 100000 '.': ~100 bytes of grammar each */
    sb_str(&b, "{\"type\": \"string\", \"pattern\": \"^");
    for (int i = 0; i < 100000; i++) sb_str(&b, ".");
    sb_str(&b, "$\"}");
    g = schema_err(b.p, err, sizeof(err), &t);
    CHECK(!g && strstr(err, "the pattern's grammar is larger than 1048576 bytes"), "%s", g ? "converted" : err);
    CHECK(t < time_limit(1.0), "took %.2f s", t);
    free(g);
    sb_free(&b);
}

/* 256 properties, none required: linear in them (the alternatives written
 * out would be 256^2 / 2 optional groups, past the compiler's 65536 rules). */
static void test_schema_optional_props(void) {
    char err[300];
    sbuf b = {0};
    sb_str(&b, "{\"type\": \"object\", \"properties\": {");
    for (int i = 0; i < 256; i++) sb_printf(&b, "%s\"p%d\": {\"type\": \"integer\"}", i ? ", " : "", i);
    sb_str(&b, "}}");
    char *g = schema_err(b.p, err, sizeof(err), NULL);
    sb_free(&b);
    REQUIRE(g, "%s", err);
    CHECK(strlen(g) < 30000, "%zu bytes of grammar", strlen(g));
    static const char *const yes[] = {"{}", "{\"p0\": 1}", "{\"p255\": 1}", "{\"p3\": 1, \"p200\": 2, \"p255\": 3}"};
    static const char *const no[] = {"{\"p200\": 1, \"p3\": 2}", "{, \"p3\": 1}", "{\"p3\": 1,}", "{\"p3\": 1, \"p3\": 1}"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) CHECK(accepts(g, yes[i]), "must accept %s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) CHECK(!accepts(g, no[i]), "must reject %s", no[i]);
    free(g);
}

static void test_schema_deep(void) {
    char err[300];
    sbuf b = {0};
    for (int i = 0; i < 500; i++) sb_str(&b, "{\"type\": \"array\", \"items\": ");
    sb_str(&b, "true");
    for (int i = 0; i < 500; i++) sb_str(&b, "}");
    char *g = schema_err(b.p, err, sizeof(err), NULL);
    CHECK(!g && strstr(err, "schema nested deeper than 64"), "%s", g ? "converted" : err);
    free(g);
    sb_free(&b);
    sb_str(&b, "{\"type\": \"string\", \"pattern\": \"");
    for (int i = 0; i < 10000; i++) sb_str(&b, "(");
    sb_str(&b, "a");
    for (int i = 0; i < 10000; i++) sb_str(&b, ")");
    sb_str(&b, "\"}");
    g = schema_err(b.p, err, sizeof(err), NULL);
    CHECK(!g && strstr(err, "the pattern nests deeper than 64 groups"), "%s", g ? "converted" : err);
    free(g);
    sb_free(&b);
}

/* ---- logit_bias ---- */

static int parse(const char *body, int32_t n_vocab, oai_req *r, oai_error *e) {
    memset(e, 0, sizeof(*e));
    return oai_parse(body, strlen(body), false, n_vocab, r, e);
}

static void test_logit_bias_many(void) {
    sbuf b = {0};
    sb_str(&b, "{\"prompt\": \"a\", \"logit_bias\": {");
    for (int i = 0; i < 100000; i++) sb_printf(&b, "%s\"%d\": %d", i ? ", " : "", 100000 + i, i % 201 - 100);
    sb_str(&b, ", \"100005\": 7}}");
    REQUIRE(!b.oom, "out of memory");
    oai_req r;
    oai_error e;
    const double t0 = now_s();
    const int rc = parse(b.p, 200000, &r, &e);
    const double t = now_s() - t0;
    CHECK(rc == 0, "%s", e.message);
    CHECK(r.n_bias == 100000, "%d biases", r.n_bias);
    CHECK(r.n_bias == 100000 && r.bias[5].token == 100005 && r.bias[5].bias == 5 - 100,
          "the first of a duplicate key counts");
    CHECK(r.n_bias == 100000 && r.bias[99999].token == 199999, "in the body's order");
    CHECK(t < time_limit(2.0), "%zu bytes of logit_bias took %.2f s (16 s when quadratic)", b.len, t);
    printf("# logit_bias, 100000 keys (%zu bytes): %.3f s\n", b.len, t);
    oai_req_free(&r);
    sb_free(&b);
}

static void test_logit_bias_semantics(void) {
    oai_req r;
    oai_error e;
    CHECK(!parse("{\"prompt\": \"a\", \"logit_bias\": {\"7\": 1, \"07\": 2, \"7\": 3, \"3\": -100}}", 100, &r, &e),
          "%s", e.message);
    CHECK(r.n_bias == 3 && r.bias[0].token == 7 && r.bias[0].bias == 1 && r.bias[1].token == 7 &&
              r.bias[1].bias == 2 && r.bias[2].token == 3 && r.bias[2].bias == -100,
          "'7' and '07' are two keys; the second '7' is dropped (%d biases)", r.n_bias);
    CHECK(r.sampling.n_logit_bias == r.n_bias && r.sampling.logit_bias == r.bias, "sampling points at them");
    oai_req_free(&r);
    static const struct {
        const char *bias, *why;
    } bad[] = {
        {"{\"abc\": 1}", "key 'abc' is not a token id"},
        {"{\"100\": 1}", "key '100' is not a token id of this model (0..99)"},
        {"{\"-1\": 1}", "key '-1' is not a token id"},
        {"{\"12345678901\": 1}", "not a token id"},
        {"{\"5\": 1, \"5\": 101}", "logit_bias['5'] must be a number in [-100, 100]"},
        {"{\"5\": \"1\"}", "logit_bias['5'] must be a number"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"prompt\": \"a\", \"logit_bias\": %s}", bad[i].bias);
        const int rc = parse(body, 100, &r, &e);
        CHECK(rc && e.status == 400 && e.param && !strcmp(e.param, "logit_bias") && strstr(e.message, bad[i].why),
              "%s: %d %s", bad[i].bias, e.status, e.message);
        oai_req_free(&r);
    }
}

/* gr_gbnf_either: two grammars with rules of the same names (root, and a
 * shared "digit") as one; names inside literals, classes, repetition counts
 * and comments are left alone. The union accepts each one's strings and
 * nothing else. */
static void test_either(void) {
    const char *a = "root ::= \"<call>\" digit{2,3} # root digit\ndigit ::= [0-9]";
    const char *b = "root ::= \"{\" digit \"root\" [a-z-]? \"}\"\ndigit ::= \"x\" | \"y\"";
    char *g = gr_gbnf_either(a, b);
    REQUIRE(g, "out of memory");
    static const char *const yes[] = {"<call>12", "<call>123", "{xroot}", "{yrootq}", "{yroot-}"};
    static const char *const no[] = {"<call>1", "<call>1234", "<call>x1", "{1root}", "{xa-root}", "a-root"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) CHECK(accepts(g, yes[i]), "must accept %s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) CHECK(!accepts(g, no[i]), "must reject %s", no[i]);
    free(g);
    /* a grammar after a reasoning block's end */
    g = gr_gbnf_after("</think>", a);
    REQUIRE(g, "out of memory");
    CHECK(accepts(g, "</think><call>12") && accepts(g, "</think>\n\n<call>123"), "after </think>");
    CHECK(!accepts(g, "<call>12") && !accepts(g, "</think>x<call>12"), "only after </think> and white space");
    free(g);
}

int main(void) {
    RUN(test_big_grammars_linear);
    RUN(test_deep_chain_small_stack);
    RUN(test_repetition_bounded);
    RUN(test_nesting_limit);
    RUN(test_names_and_nullable);
    RUN(test_schema_repeated_type);
    RUN(test_schema_output_limit);
    RUN(test_schema_optional_props);
    RUN(test_schema_deep);
    RUN(test_logit_bias_many);
    RUN(test_logit_bias_semantics);
    RUN(test_either);
    TEST_END();
}
