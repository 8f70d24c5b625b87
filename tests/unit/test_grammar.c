/* test_grammar: the grammar engine (src/grammar/).
 *   - GBNF: a table of grammars with strings each must accept (whole) or
 *     reject, and grammars the compiler must refuse (with the reason);
 *   - masks: on the SPM (llama) and byte-level BPE (gpt-2) vocabularies of
 *     the reference data, at several states of several grammars, the mask
 *     equals the brute-force answer (each token's bytes run through the
 *     matcher), and the lookahead states for speculation agree with
 *     committing token by token;
 *   - JSON Schema: schemas compiled to GBNF accept valid documents and
 *     reject invalid ones; unsupported keywords are named; numeric bounds
 *     (random ones) accept a literal exactly when its value meets them. */
#include <math.h>

#include "common.h"
#include "specula.h"
#include "test.h"
#include "ref_vocab.h"

typedef struct {
    const char *gbnf;
    const char *yes[6];
    const char *no[6];
} gcase;

static const gcase g_cases[] = {
    {"root ::= \"a\"", {"a"}, {"", "b", "aa"}},
    {"root ::= \"ab\" | \"cd\"", {"ab", "cd"}, {"a", "ac", "abcd"}},
    {"root ::= [a-z]+", {"a", "xyz"}, {"", "A", "a1"}},
    {"root ::= [^a-z]*", {"", "ABC", "12!"}, {"a", "Ab"}},
    {"root ::= \"x\"? \"y\"", {"y", "xy"}, {"x", "xxy"}},
    {"root ::= \"a\"{2,3}", {"aa", "aaa"}, {"a", "aaaa"}},
    {"root ::= \"a\"{2}", {"aa"}, {"a", "aaa"}},
    {"root ::= \"a\"{2,} \"b\"", {"aab", "aaaaab"}, {"ab", "b"}},
    {"root ::= (\"ab\" | \"c\")* \"!\"", {"!", "ab!", "cabc!"}, {"a!", "abc"}},
    {"root ::= item (\",\" item)*\nitem ::= [0-9]+", {"1", "1,22,333"}, {"1,", ",1", ""}},
    {"# a comment\nroot ::= x # trailing\nx ::= \"q\"", {"q"}, {"x"}},
    {"root ::= \"\\n\\t\\\\\\\"\"", {"\n\t\\\""}, {"n"}},
    {"root ::= \"\\x41\\u00e9\"", {"A\xc3\xa9"}, {"A"}},
    {"root ::= [\\u00e0-\\u00ff]", {"\xc3\xa0", "\xc3\xbf"}, {"a", "\xc3\x9f", "\xc4\x80"}},
    {"root ::= .", {"a", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}, {"", "ab", "\xc3", "\xff"}},
    {"root ::= [^\"]", {"a", "\xe4\xb8\xad"}, {"\"", "\xed\xa0\x80"}},
    {"root ::= \"\xe4\xb8\xad\xe6\x96\x87\"", {"\xe4\xb8\xad\xe6\x96\x87"}, {"\xe4\xb8\xad"}},
    {"root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9] | \"(\" expr \")\"",
     {"1", "1+2", "(1+2)+3", "((4))"}, {"(1", "1+", "()"}},
    {"root ::= ws \"x\" ws\nws ::= [ \\t\\n]*", {"x", "  x\n"}, {" y"}},
    {"root ::=\n  \"a\"\n  | \"b\"", {"a", "b"}, {"ab"}},
    {"root ::= \"a\" | ", {"", "a"}, {"b"}},
    {"root ::= [a\\-z]", {"a", "-", "z"}, {"b"}},
    {"root ::= [\\]]", {"]"}, {"["}},
    {"root ::= (\"a\" | \"b\"){1,3} \"c\"?", {"a", "abc", "bbb", "bbbc"}, {"abab", "c"}},
};

static void test_gbnf_table(void) {
    char err[256];
    for (size_t i = 0; i < sizeof(g_cases) / sizeof(g_cases[0]); i++) {
        const gcase *c = &g_cases[i];
        sp_grammar *g = sp_grammar_compile(c->gbnf, 0, err, sizeof(err));
        CHECK(g, "case %zu: %s", i, err);
        if (!g) continue;
        sp_matcher *m = sp_matcher_create(g, NULL, err, sizeof(err));
        CHECK(m, "%s", err);
        sp_grammar_free(g); /* the matcher keeps it alive */
        if (!m) continue;
        for (int j = 0; j < 6 && c->yes[j]; j++) {
            sp_matcher_reset(m);
            bool ok = sp_matcher_accept_bytes(m, c->yes[j], strlen(c->yes[j])) && sp_matcher_can_end(m);
            CHECK(ok, "case %zu must accept \"%s\"", i, c->yes[j]);
        }
        for (int j = 0; j < 6 && c->no[j]; j++) {
            sp_matcher_reset(m);
            bool ok = sp_matcher_accept_bytes(m, c->no[j], strlen(c->no[j])) && sp_matcher_can_end(m);
            CHECK(!ok, "case %zu must reject \"%s\"", i, c->no[j]);
        }
        sp_matcher_free(m);
    }
}

static void test_gbnf_refused(void) {
    static const struct {
        const char *gbnf, *why;
    } bad[] = {
        {"", "no rule named 'root'"},
        {"root ::= foo", "undefined rule 'foo'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= root \"a\" | \"b\"", "left recursion"},
        {"root ::= x\nx ::= \"a\"? x", "left recursion"},
        {"root ::= (\"a\"?)*", "left recursion"},
        {"root ::= \"abc", "unterminated string"},
        {"root ::= [abc", "unterminated character class"},
        {"root ::= (\"a\"", "expected ')'"},
        {"root ::= \"a\"{3,1}", "n < m"},
        {"root ::= \"a\"{5000}", "above 1000"},
        {"root ::= [z-a]", "out of order"},
        {"root = \"a\"", "expected '::='"},
        {"root ::= \"\\xZZ\"", "bad hex escape"},
        {"root ::= @", "unexpected '@'"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        sp_grammar *g = sp_grammar_compile(bad[i].gbnf, 0, err, sizeof(err));
        CHECK(!g && strstr(err, bad[i].why), "\"%s\": got %s, want '%s'", bad[i].gbnf,
              g ? "a grammar" : err, bad[i].why);
        sp_grammar_free(g);
    }
}

/* ---- masks ---- */

static const char *const mask_grammars[][2] = {
    /* grammar, then the prefixes (separated by \x01) at which masks are checked */
    {"root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \"}\"\n"
     "str ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\nws ::= [ ]?",
     "\x01{\x01{ \"na\x01{\"name\": \"\x01{\"name\": \"ab c\x01{\"name\": \"J\xc3\x01{\"name\":\"x\"\x01{\"name\":\"x\" "},
    {"root ::= [0-9]+ (\".\" [0-9]+)?", "\x01" "1\x01" "12.\x01" "3.14"},
    {"root ::= \"true\" | \"false\" | \"null\"", "\x01t\x01" "fa"},
    {"root ::= [\\u4e00-\\u9fff]+", "\x01\xe4\x01\xe4\xb8\xad"},
    {"root ::= \" hello\" \" world\"*", "\x01 hello"},
};

static void check_masks(const char *vocab_name) {
    sp_model *mod = load_vocab(vocab_name);
    REQUIRE(mod, "vocabulary %s", vocab_name);
    const sp_vocab *v = sp_model_get_vocab(mod);
    char err[256];
    double t0 = time_ms();
    sp_token_trie *t = sp_token_trie_create(v, err, sizeof(err));
    double t_trie = time_ms() - t0;
    CHECK(t, "%s", err);
    if (!t) {
        sp_model_free(mod);
        return;
    }
    const int32_t V = sp_vocab_n_tokens(v);
    uint32_t *bits = calloc((size_t)(V + 31) / 32, 4), *bits2 = calloc((size_t)(V + 31) / 32, 4);
    int n_states = 0, n_bad = 0;
    double mask_ms = 0;
    for (size_t gi = 0; gi < sizeof(mask_grammars) / sizeof(mask_grammars[0]); gi++) {
        sp_grammar *g = sp_grammar_compile(mask_grammars[gi][0], 0, err, sizeof(err));
        CHECK(g, "%s", err);
        if (!g) continue;
        sp_matcher *m = sp_matcher_create(g, t, err, sizeof(err));
        sp_matcher *b = sp_matcher_create(g, t, err, sizeof(err));
        sp_grammar_free(g);
        const char *p = mask_grammars[gi][1];
        while (*p == 1) {
            p++;
            size_t n = strcspn(p, "\x01");
            sp_matcher_reset(m);
            CHECK(sp_matcher_accept_bytes(m, p, n), "grammar %zu prefix '%.*s'", gi, (int)n, p);
            double t1 = time_ms();
            int32_t cnt = sp_matcher_mask(m, bits);
            mask_ms += time_ms() - t1;
            if (getenv("GR_VERBOSE")) printf("#   grammar %zu prefix %.*s: %d tokens, %.3f ms\n", gi, (int)n, p, cnt, time_ms() - t1);
            int32_t brute = 0;
            for (sp_token tok = 0; tok < V; tok++) {
                sp_matcher_reset(b);
                bool ok = sp_matcher_accept_bytes(b, p, n) && sp_matcher_accept_token(b, tok);
                brute += ok;
                bool in_mask = bits[tok >> 5] >> (tok & 31) & 1;
                if (ok != in_mask && n_bad++ < 5)
                    fprintf(stderr, "  %s grammar %zu prefix '%.*s' token %d '%s': mask %d, brute %d\n",
                            vocab_name, gi, (int)n, p, tok, sp_vocab_token_text(v, tok), in_mask, ok);
            }
            CHECK(cnt == brute, "count %d vs %d", cnt, brute);
            CHECK(cnt > 0, "grammar %zu: some token fits after '%.*s'", gi, (int)n, p);
            /* the cached mask equals the first */
            CHECK(sp_matcher_mask(m, bits2) == cnt && !memcmp(bits, bits2, (size_t)(V + 31) / 32 * 4),
                  "cached mask");
            n_states++;
            p += n;
        }
        sp_matcher_free(m);
        sp_matcher_free(b);
    }
    CHECK(n_bad == 0, "%d tokens where mask and brute force differ", n_bad);
    printf("# %s: %d tokens, trie %.1f ms, %d states, mask %.2f ms per state (uncached)\n",
           vocab_name, V, t_trie, n_states, mask_ms / SP_MAX(n_states, 1));
    free(bits);
    free(bits2);
    sp_token_trie_free(t);
    sp_model_free(mod);
}

static void test_masks_spm(void) { check_masks("ggml-vocab-llama-spm.gguf"); }
static void test_masks_bpe(void) { check_masks("ggml-vocab-gpt-2.gguf"); }

/* A vocabulary of the reference data, its token trie and a grammar. */
typedef struct {
    sp_model *mod;
    const sp_vocab *v;
    sp_token_trie *t;
    sp_grammar *g;
    char err[256];
} vfix;

/* false + f->err when one of them could not be made */
static bool vfix_open(vfix *f, const char *vocab_name, const char *gbnf) {
    memset(f, 0, sizeof(*f));
    if (!(f->mod = load_vocab(vocab_name))) {
        snprintf(f->err, sizeof(f->err), "vocabulary %s", vocab_name);
        return false;
    }
    f->v = sp_model_get_vocab(f->mod);
    f->t = sp_token_trie_create(f->v, f->err, sizeof(f->err));
    f->g = f->t ? sp_grammar_compile(gbnf, 0, f->err, sizeof(f->err)) : NULL;
    return f->g != NULL;
}

static void vfix_close(vfix *f) {
    sp_grammar_free(f->g);
    sp_token_trie_free(f->t);
    sp_model_free(f->mod);
}

/* Jump-forward: where the grammar forces bytes, the mask is the one longest
 * token spelling a prefix of them (never a byte token when a piece spells
 * the same); elsewhere the mask is unchanged. */
static void check_jump(const char *vocab_name) {
    vfix f;
    const bool opened = vfix_open(&f, vocab_name, "root ::= \"{\" [ ]? \"\\\"name\\\": \" [a-z]+");
    REQUIRE(opened, "%s", f.err);
    const sp_vocab *v = f.v;
    sp_matcher *m = sp_matcher_create(f.g, f.t, f.err, sizeof(f.err)), *p = sp_matcher_create(f.g, f.t, f.err, sizeof(f.err));
    sp_matcher_set_jump_forward(m, true);
    const int32_t V = sp_vocab_n_tokens(v);
    uint32_t *a = calloc((size_t)(V + 31) / 32, 4), *b = calloc((size_t)(V + 31) / 32, 4);
    /* at the start "{" is forced; after it, " " or '"' (not forced) */
    const char *forced = "\"name\": ";
    CHECK(sp_matcher_mask(m, a) == 1, "one token at the start");
    CHECK(sp_matcher_accept_bytes(m, "{", 1) && sp_matcher_accept_bytes(p, "{", 1), "advance");
    CHECK(sp_matcher_mask(m, a) == sp_matcher_mask(p, b) && !memcmp(a, b, (size_t)(V + 31) / 32 * 4),
          "not forced: the plain mask");
    CHECK(sp_matcher_accept_bytes(m, " ", 1), "advance");
    CHECK(sp_matcher_mask(m, a) == 1, "forced: one token");
    sp_token only = -1, longest = -1;
    int best = 0;
    char piece[256];
    for (sp_token tok = 0; tok < V; tok++) {
        if (a[tok >> 5] >> (tok & 31) & 1) only = tok;
        int n = sp_token_to_piece(v, tok, piece, sizeof(piece), false);
        if (n > best && n <= (int)strlen(forced) && !memcmp(piece, forced, (size_t)n) &&
            sp_vocab_token_type(v, tok) != SP_TOKEN_BYTE)
            best = n, longest = tok;
    }
    int n = only >= 0 ? sp_token_to_piece(v, only, piece, sizeof(piece), false) : 0;
    CHECK(only >= 0 && n == best && sp_vocab_token_type(v, only) != SP_TOKEN_BYTE,
          "%s: the forced token %d '%.*s' is the longest non-byte prefix (%d, %d bytes)", vocab_name,
          only, n, piece, longest, best);
    free(a);
    free(b);
    sp_matcher_free(m);
    sp_matcher_free(p);
    vfix_close(&f);
}

/* A check on the SentencePiece and the byte-level BPE vocabulary. */
static void on_both_vocabs(void (*check)(const char *vocab_name)) {
    check("ggml-vocab-llama-spm.gguf");
    check("ggml-vocab-gpt-2.gguf");
}

static void test_jump_forward(void) { on_both_vocabs(check_jump); }

/* Lookahead states (speculation) equal the states of committing the same
 * tokens one by one, and a proposal that breaks the grammar is cut. */
static void test_lookahead(void) {
    vfix f;
    const bool opened = vfix_open(&f, "ggml-vocab-gpt-2.gguf", "root ::= \"{\\\"a\\\": \" [0-9]+ \"}\"");
    REQUIRE(opened, "%s", f.err);
    const sp_vocab *v = f.v;
    sp_matcher *m = sp_matcher_create(f.g, f.t, f.err, sizeof(f.err)), *c = sp_matcher_create(f.g, f.t, f.err, sizeof(f.err));
    const char *text = "{\"a\": 123}x";
    sp_token toks[32];
    int n = sp_tokenize(v, text, strlen(text), toks, 32, false, false);
    REQUIRE(n > 2, "tokenized");
    int32_t took = sp_matcher_lookahead(m, toks, n);
    CHECK(took == n - 1, "all but the trailing x: %d of %d", took, n);
    const int32_t V = sp_vocab_n_tokens(v);
    uint32_t *a = calloc((size_t)(V + 31) / 32, 4), *b = calloc((size_t)(V + 31) / 32, 4);
    for (int32_t i = 0; i <= took; i++) {
        int32_t na = sp_matcher_mask_ahead(m, i, a);
        int32_t nb = sp_matcher_mask(c, b);
        CHECK(na == nb && !memcmp(a, b, (size_t)(V + 31) / 32 * 4), "state %d", i);
        if (i < took) CHECK(sp_matcher_accept_token(c, toks[i]), "commit %d", i);
    }
    CHECK(sp_matcher_can_end(c) && sp_matcher_done(c), "complete after the object");
    free(a);
    free(b);
    sp_matcher_free(m);
    sp_matcher_free(c);
    vfix_close(&f);
}

/* ---- lazy grammars (a trigger) ---- */

/* The mask of every state met on the way through a lazy grammar equals the
 * brute-force answer (each token committed on a fresh matcher at that
 * state): free states allow every token but those that complete the
 * trigger with bytes the grammar refuses; lookahead across the trigger
 * agrees with committing token by token. */
static void check_lazy_masks(const char *vocab_name) {
    vfix f;
    const bool opened = vfix_open(&f, vocab_name, "root ::= \"<tool_call>\\n{\" [a-z]+ \"}\"");
    REQUIRE(opened, "%s", f.err);
    const sp_vocab *v = f.v;
    sp_matcher *m = sp_matcher_create(f.g, f.t, f.err, sizeof(f.err)), *b = sp_matcher_create(f.g, f.t, f.err, sizeof(f.err));
    REQUIRE(m && b, "%s", f.err);
    const char *trig = "<tool_call>";
    CHECK(sp_matcher_set_trigger(m, trig, strlen(trig), false, f.err, sizeof(f.err)) == SP_OK &&
              sp_matcher_set_trigger(b, trig, strlen(trig), false, f.err, sizeof(f.err)) == SP_OK, "%s", f.err);
    const int32_t V = sp_vocab_n_tokens(v), W = (V + 31) / 32;
    uint32_t *bits = calloc((size_t)W, 4), *bits2 = calloc((size_t)W, 4);
    static const char *const prefixes[] = {"", "Hi <tool_ca", "<tool_call", "x <tool_call>\n{ab"};
    int n_bad = 0, refused_some = 0;
    for (int pi = 0; pi < 4; pi++) {
        const char *p = prefixes[pi];
        sp_matcher_reset(m);
        CHECK(sp_matcher_accept_bytes(m, p, strlen(p)), "prefix '%s'", p);
        const sp_token *ref;
        const int32_t nref = sp_matcher_free_at(m, 0, &ref);
        CHECK((nref >= 0) == (pi < 3), "'%s': free %d", p, nref);
        CHECK(pi == 3 || (sp_matcher_can_end(m) && !sp_matcher_done(m)), "free text may end");
        const int32_t cnt = sp_matcher_mask(m, bits);
        int32_t brute = 0;
        for (sp_token tok = 0; tok < V; tok++) {
            sp_matcher_reset(b);
            const bool ok = sp_matcher_accept_bytes(b, p, strlen(p)) && sp_matcher_accept_token(b, tok);
            brute += ok;
            if (ok != (bool)(bits[tok >> 5] >> (tok & 31) & 1) && n_bad++ < 5)
                fprintf(stderr, "  %s prefix '%s' token %d '%s': mask %d, brute %d\n", vocab_name, p, tok,
                        sp_vocab_token_text(v, tok), !ok, ok);
        }
        CHECK(cnt == brute && (nref < 0 || cnt == V - nref), "'%s': count %d, brute %d, refused %d", p, cnt,
              brute, nref);
        refused_some += pi == 2 && nref > 0;
        if (getenv("GR_VERBOSE")) printf("#   %s prefix %s: free %d, %d tokens\n", vocab_name, p, nref, cnt);
    }
    CHECK(n_bad == 0, "%d tokens where mask and brute force differ", n_bad);
    CHECK(refused_some, "%s: after '<tool_call' some token (\">x\"-like) is refused", vocab_name);
    /* lookahead from free text across the trigger equals committing one by one */
    const char *text = "Hi <tool_call>\n{abc}";
    sp_token toks[64];
    const int n = sp_tokenize(v, text, strlen(text), toks, 16, false, false);
    REQUIRE(n > 3 && n <= 16, "tokenized");
    sp_matcher_reset(m);
    sp_matcher_reset(b);
    CHECK(sp_matcher_lookahead(m, toks, n) == n, "the whole text is taken");
    for (int i = 0; i <= n; i++) {
        const int32_t na = sp_matcher_mask_ahead(m, i, bits), nb = sp_matcher_mask(b, bits2);
        CHECK(na == nb && !memcmp(bits, bits2, (size_t)W * 4) &&
                  sp_matcher_can_end_at(m, i) == sp_matcher_can_end(b),
              "%s: lookahead state %d", vocab_name, i);
        if (i < n) CHECK(sp_matcher_accept_token(b, toks[i]), "commit %d", i);
    }
    CHECK(sp_matcher_done(b), "complete after the call");
    free(bits);
    free(bits2);
    sp_matcher_free(m);
    sp_matcher_free(b);
    vfix_close(&f);
}

static void test_lazy_masks(void) { on_both_vocabs(check_lazy_masks); }

/* An anchored trigger counts only first (after white space); a control
 * token whose text is the trigger stands for it; a grammar that does not
 * begin with its trigger is refused. */
static void test_lazy_phases(void) {
    vfix f;
    const bool opened = vfix_open(&f, "ggml-vocab-llama-spm.gguf", "root ::= \"{\\\"name\\\": \" [0-9]+ \"}\"");
    REQUIRE(opened, "%s", f.err);
    sp_matcher *m = sp_matcher_create(f.g, f.t, f.err, sizeof(f.err));
    const char *trig = "{\"name\"";
    CHECK(sp_matcher_set_trigger(m, trig, strlen(trig), true, f.err, sizeof(f.err)) == SP_OK, "%s", f.err);
    const char *call = " \n{\"name\": 42}";
    CHECK(sp_matcher_accept_bytes(m, call, strlen(call)) && sp_matcher_done(m), "anchored: a call first");
    sp_matcher_reset(m);
    CHECK(!sp_matcher_accept_bytes(m, "{\"name\": x", 11), "anchored: the call is constrained");
    const char *late = "ok {\"name\": x";
    const sp_token *ref;
    CHECK(sp_matcher_accept_bytes(m, late, strlen(late)) && sp_matcher_free_at(m, 0, &ref) == 0 &&
              sp_matcher_can_end(m), "anchored: not first, free to the end");
    sp_matcher_free(m);
    /* a control token: <s> (BOS) is one in the llama vocabulary */
    sp_grammar *g = sp_grammar_compile("root ::= \"<s>\" [0-9]+", 0, f.err, sizeof(f.err));
    m = sp_matcher_create(g, f.t, f.err, sizeof(f.err));
    CHECK(sp_matcher_set_trigger(m, "<s>", 3, false, f.err, sizeof(f.err)) == SP_OK, "%s", f.err);
    const sp_token bos = sp_vocab_bos(f.v);
    CHECK(sp_matcher_trigger_token(m) == bos && bos >= 0, "the control token %d stands for it", bos);
    CHECK(sp_matcher_accept_bytes(m, "abc", 3) && sp_matcher_accept_token(m, bos) &&
              sp_matcher_free_at(m, 0, &ref) < 0 && !sp_matcher_can_end(m),
          "the control token starts the grammar");
    CHECK(!sp_matcher_accept_bytes(m, "x", 1) && sp_matcher_accept_bytes(m, "7", 1), "then it constrains");
    sp_matcher_free(m);
    m = sp_matcher_create(g, f.t, f.err, sizeof(f.err));
    sp_grammar_free(g);
    CHECK(sp_matcher_set_trigger(m, "<t>", 3, false, f.err, sizeof(f.err)) == SP_ERR_INVALID &&
              strstr(f.err, "does not begin with its trigger"), "%s", f.err);
    sp_matcher_free(m);
    vfix_close(&f);
}

/* ---- JSON Schema ---- */

typedef struct {
    const char *schema;
    const char *yes[8];
    const char *no[8];
} scase;

static const scase s_cases[] = {
    {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"}}, \"required\": [\"a\"]}",
     {"{\"a\": 1}", "{\"a\": -20, \"b\": \"x\"}", "{ \"a\":3,\"b\":\"\\u00e9\\n\"}"},
     {"{}", "{\"b\": \"x\"}", "{\"a\": 1.5}", "{\"a\": 1, \"c\": 2}", "{\"a\": \"1\"}"}},
    {"{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"boolean\"}, \"y\": {\"type\": \"null\"}}}",
     {"{}", "{\"x\": true}", "{\"y\": null}", "{\"x\": false, \"y\": null}"},
     {"{\"y\": null, \"x\": true}", "{\"x\": 1}", "{,}"}},
    {"{\"type\": \"array\", \"items\": {\"type\": \"number\"}, \"minItems\": 1, \"maxItems\": 3}",
     {"[1]", "[1.5, -2e10, 0]"}, {"[]", "[1, 2, 3, 4]", "[01]"}},
    {"{\"enum\": [\"red\", \"green\", 3, null]}", {"\"red\"", "3", "null"}, {"\"blue\"", "\"Red\""}},
    {"{\"const\": {\"k\": [1, 2]}}", {"{\"k\":[1,2]}"}, {"{\"k\": [1, 2]}"}},
    {"{\"anyOf\": [{\"type\": \"string\", \"maxLength\": 2}, {\"type\": \"integer\", \"minimum\": 0}]}",
     {"\"ab\"", "\"\"", "0", "42"}, {"\"abc\"", "-1"}},
    {"{\"type\": \"integer\", \"minimum\": -2, \"exclusiveMaximum\": 3}", {"-2", "0", "2"}, {"3", "-3", "10"}},
    {"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, "
     "\"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}}, \"required\": [\"v\", \"next\"]}}, "
     "\"$ref\": \"#/$defs/node\"}",
     {"{\"v\": 1, \"next\": null}", "{\"v\": 1, \"next\": {\"v\": 2, \"next\": null}}"},
     {"{\"v\": 1}", "{\"v\": 1, \"next\": {\"v\": 2}}"}},
    {"{\"type\": [\"string\", \"null\"], \"title\": \"t\", \"description\": \"d\"}", {"\"x\"", "null"}, {"1"}},
    {"{}", {"1", "\"s\"", "[1, {\"a\": null}]", "{\"k\": [true]}"}, {"[1,]", "{'a': 1}"}},
    {"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}",
     {"{}", "{\"a\": 1, \"b\": 2}"}, {"{\"a\": \"x\"}"}},
    {"{\"type\": \"string\", \"enum\": [\"\\u4e2d\\u6587\", \"a\\\"b\"]}",
     {"\"\xe4\xb8\xad\xe6\x96\x87\"", "\"a\\\"b\""}, {"\"a\"b\""}},
    /* pattern (grammar/regex.c): anchored or not, JSON escapes, lengths */
    {"{\"type\": \"string\", \"pattern\": \"^[A-Z]{3}-\\\\d{2,4}$\"}",
     {"\"ABC-12\"", "\"XYZ-1234\""},
     {"\"AB-12\"", "\"ABC-1\"", "\"abc-12\"", "\"ABC-12345\""}},
    {"{\"type\": \"string\", \"pattern\": \"ab+c\"}",
     {"\"xxabbc\"", "\"abc\"", "\"abcz\""},
     {"\"ac\"", "\"\"", "\"abx\""}},
    {"{\"type\": \"string\", \"pattern\": \"^(foo|ba(r|z))+$\"}",
     {"\"foobar\"", "\"baz\"", "\"bazfoo\""},
     {"\"fo\"", "\"\"", "\"bax\""}},
    {"{\"type\": \"string\", \"pattern\": \"^[^a-z]+$\"}",
     {"\"A\\\"B\"", "\"\\\\\"", "\"1\\n2\""},
     {"\"Ab\"", "\"a\"", "\"\""}},
    {"{\"type\": \"string\", \"pattern\": \"^a.c\\\\.$\"}",
     {"\"abc.\"", "\"a\xc3\xa9" "c.\"", "\"a\\\"c.\""},
     {"\"abc\"", "\"a\\nc.\"", "\"abcd\""}},
    {"{\"type\": \"string\", \"pattern\": \"^\\\\w+\\\\s\\\\w+$\"}",
     {"\"hello world\"", "\"a\\tb\""},
     {"\"a  b\"", "\"a-b c\""}},
    {"{\"type\": \"string\", \"pattern\": \"^[\xe4\xb8\x80" "-\xe9\xbf\xbf" "]{2}$\"}",
     {"\"\xe4\xb8\xad" "\xe6\x96\x87" "\""},
     {"\"\xe4\xb8\xad" "\"", "\"ab\""}},
    {"{\"type\": \"string\", \"pattern\": \"^colou?r+?$\"}",
     {"\"color\"", "\"colourrr\""},
     {"\"colouur\"", "\"colo\""}},
    {"{\"type\": \"string\", \"pattern\": \"^[0-9]{4}$\", \"minLength\": 4, \"maxLength\": 4}",
     {"\"2024\""},
     {"\"123\"", "\"12345\""}},
    {"{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{2}[0-9]$\"}}, \"required\": [\"code\"]}",
     {"{\"code\": \"AB1\"}"},
     {"{\"code\": \"A1\"}", "{\"code\": \"ABC\"}"}},
    {"{\"type\": \"string\", \"pattern\": \"^(?:\\\\d+|[xX])$|^-$\"}",
     {"\"42\"", "\"x\"", "\"-\""},
     {"\"4x\"", "\"--\""}},
    /* numeric bounds (schema.c, "numeric bounds"): integers */
    {"{\"type\": \"integer\", \"minimum\": -17, \"maximum\": 123}",
     {"-17", "0", "123", "-9", "99", "100", "-10"},
     {"-18", "124", "-0", "0123", "1.0", "1000", "-170", "00"}},
    {"{\"type\": \"integer\", \"exclusiveMinimum\": -5.5, \"maximum\": 7.9}",
     {"-5", "7", "0", "-1"}, {"-6", "8", "7.9", "-5.5"}},
    {"{\"type\": \"integer\", \"exclusiveMinimum\": -3, \"exclusiveMaximum\": 3}",
     {"-2", "2", "0", "1", "-1"}, {"-3", "3", "-0", "10", "-10"}},
    {"{\"type\": \"integer\", \"exclusiveMaximum\": 0}",
     {"-1", "-9999999999999999", "-10"}, {"0", "-0", "1", "-01"}},
    {"{\"type\": \"integer\", \"minimum\": -50, \"maximum\": -10}",
     {"-50", "-10", "-25", "-49"}, {"-51", "-9", "-5", "10", "-0", "-100"}},
    {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 5}", {"5"}, {"4", "6", "05", "50", "-5"}},
    /* zod 4 .int(): the safe integers, 16 digits */
    {"{\"type\": \"integer\", \"minimum\": -9007199254740991, \"maximum\": 9007199254740991}",
     {"9007199254740991", "-9007199254740991", "0", "1234567890123456", "-42", "9007199254740990", "8999999999999999"},
     {"9007199254740992", "-9007199254740992", "10000000000000000", "9007199254741000", "1e3", "-0", "01"}},
    /* zod 4 .int().nonnegative() */
    {"{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 9007199254740991}",
     {"0", "9007199254740991", "8999999999999999", "7"},
     {"-1", "9007199254740992", "9100000000000000", "-0"}},
    /* beyond 2^63: the side is unbounded (integers of 16 digits) */
    {"{\"type\": \"integer\", \"minimum\": -1e30, \"maximum\": 5}",
     {"-9999999999999999", "5", "0"}, {"6", "-10000000000000000"}},
    /* a bound of more digits than 16: the integers of its length and up */
    {"{\"type\": \"integer\", \"minimum\": 100000000000000000}",
     {"100000000000000000", "999999999999999999"}, {"99999999999999999", "0", "-100000000000000000"}},
    /* 19 digits: a bound is the shortest decimal of its double (9223372036854775000 for 9223372036854774784) */
    {"{\"type\": \"integer\", \"minimum\": -9223372036854775000, \"maximum\": 9223372036854775000}",
     {"9223372036854775000", "-9223372036854775000", "1234567890123456789", "0", "-7"},
     {"9223372036854775001", "-9223372036854775001", "10000000000000000000", "9300000000000000000"}},
    /* draft-04: exclusiveMinimum true/false beside minimum */
    {"{\"type\": \"integer\", \"minimum\": 1, \"exclusiveMinimum\": false}", {"1", "2"}, {"0"}},
    {"{\"type\": \"integer\", \"minimum\": 1, \"exclusiveMinimum\": true, \"maximum\": 3, \"exclusiveMaximum\": true}",
     {"2"}, {"1", "3"}},
    {"{\"type\": \"integer\", \"multipleOf\": 1, \"minimum\": 3}", {"3", "40"}, {"2", "3.0"}},
    /* numbers: plain decimals, trailing zeros allowed, no exponent */
    {"{\"type\": \"number\", \"exclusiveMinimum\": 0}",
     {"0.0000000000000001", "0.5", "3", "12.25", "0.10"},
     {"0", "0.0", "-0.1", "0.0000000000000000", "1e3", "-0", "00.5", ".5"}},
    {"{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}",
     {"0", "1", "0.5", "1.0000", "0.999", "0.0", "1.0000000000000000"},
     {"1.0000000000000001", "-0", "1.5", "-0.1", "2", "-0.0", "1.", "01"}},
    {"{\"type\": \"number\", \"exclusiveMinimum\": 0.5}",
     {"0.5000000000000001", "0.51", "1", "100", "0.6"},
     {"0.5", "0.50", "0.4999", "0", "0.5000000000000000", "-1"}},
    {"{\"type\": \"number\", \"minimum\": 0.5}",
     {"0.5", "0.50", "0.500", "7", "0.5000000000000001"},
     {"0.49", "0.4999999999999999", "0", "-0.5", "0.05"}},
    {"{\"type\": \"number\", \"maximum\": 100}",
     {"100", "100.0", "-5.25", "99.9999", "-9999999999999999.5", "0"},
     {"100.0000000000000001", "100.01", "101", "1000", "1e2"}},
    {"{\"type\": \"number\", \"minimum\": 0, \"exclusiveMinimum\": true, \"maximum\": 1, \"exclusiveMaximum\": true}",
     {"0.5", "0.0000000000000001", "0.9999999999999999"}, {"0", "1", "1.0", "0.0", "-0.5"}},
    {"{\"type\": \"number\", \"minimum\": -10.25, \"maximum\": -0.5}",
     {"-10.25", "-0.5", "-3", "-0.50", "-10.2", "-10.250"},
     {"-10.26", "-0.49", "0", "-0", "-10.2500000000000001", "-11", "0.5"}},
    {"{\"type\": \"number\", \"exclusiveMinimum\": -1, \"maximum\": 2.5}",
     {"-0.9999", "0", "2.5", "-0.5", "2.50", "1"},
     {"-1", "-1.0", "2.51", "-0", "-0.0", "3", "-2"}},
    {"{\"type\": \"number\", \"minimum\": 1e-20, \"maximum\": 0.001}",
     {"0.0000000000000001", "0.001", "0.0005", "0.0010"},
     {"0", "0.0010000000000001", "0.00100000000000001", "0.002"}},
    {"{\"type\": \"number\", \"minimum\": 2.5, \"maximum\": 2.5}", {"2.5", "2.50"}, {"2.4", "2.51", "2", "3"}},
    {"{\"type\": \"number\", \"minimum\": -1.5e2, \"maximum\": 2E3}",
     {"-150", "2000", "2000.0", "-149.99", "0.5"}, {"-150.1", "2000.5", "2001", "-151"}},
    {"{\"type\": \"number\", \"minimum\": 0.1, \"maximum\": 0.3}",
     {"0.1", "0.3", "0.2", "0.30000"}, {"0.0999999999999999", "0.3000000000000001", "0.31", "0.09"}},
    /* whole schemas as clients write them: zod 4 (.int(), .int().nonnegative(), .positive(), .min(1).max(10), .number().min(0).max(1)) */
    {"{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", \"type\": \"object\", \"properties\": {"
     "\"count\": {\"type\": \"integer\", \"minimum\": -9007199254740991, \"maximum\": 9007199254740991}, "
     "\"n\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 9007199254740991}, "
     "\"p\": {\"type\": \"number\", \"exclusiveMinimum\": 0}, "
     "\"r\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10}, "
     "\"f\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}}, "
     "\"required\": [\"count\", \"n\", \"p\", \"r\", \"f\"], \"additionalProperties\": false}",
     {"{\"count\": -12, \"n\": 0, \"p\": 0.5, \"r\": 10, \"f\": 1}",
      "{\"count\":9007199254740991,\"n\":9007199254740991,\"p\":3,\"r\":1,\"f\":0.25}"},
     {"{\"count\": 9007199254740992, \"n\": 0, \"p\": 0.5, \"r\": 10, \"f\": 1}",
      "{\"count\": 1, \"n\": -1, \"p\": 0.5, \"r\": 10, \"f\": 1}",
      "{\"count\": 1, \"n\": 1, \"p\": 0, \"r\": 10, \"f\": 1}",
      "{\"count\": 1, \"n\": 1, \"p\": 1, \"r\": 11, \"f\": 1}",
      "{\"count\": 1, \"n\": 1, \"p\": 1, \"r\": 0, \"f\": 1.01}"}},
    /* zod 3 (zod-to-json-schema, draft-07, and draft-04's boolean form) */
    {"{\"$schema\": \"http://json-schema.org/draft-07/schema#\", \"type\": \"object\", \"properties\": {"
     "\"age\": {\"type\": \"integer\", \"exclusiveMinimum\": 0}, "
     "\"score\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}, "
     "\"count\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10}, "
     "\"old\": {\"type\": \"number\", \"minimum\": 0, \"exclusiveMinimum\": true}}, "
     "\"required\": [\"age\", \"score\", \"count\", \"old\"], \"additionalProperties\": false}",
     {"{\"age\": 1, \"score\": 0.75, \"count\": 10, \"old\": 0.1}", "{\"age\": 120, \"score\": 0, \"count\": 1, \"old\": 5}"},
     {"{\"age\": 0, \"score\": 0.75, \"count\": 10, \"old\": 0.1}", "{\"age\": 1, \"score\": 1.5, \"count\": 10, \"old\": 0.1}",
      "{\"age\": 1, \"score\": 0.75, \"count\": 11, \"old\": 0.1}", "{\"age\": 1, \"score\": 0.75, \"count\": 1, \"old\": 0}"}},
    /* Pydantic: conint(gt=0, lt=10), confloat(ge=0.5), Field(ge=-3, le=3), confloat(ge=0, le=1) */
    {"{\"properties\": {\"a\": {\"exclusiveMaximum\": 10, \"exclusiveMinimum\": 0, \"title\": \"A\", \"type\": \"integer\"}, "
     "\"b\": {\"minimum\": 0.5, \"title\": \"B\", \"type\": \"number\"}, "
     "\"c\": {\"maximum\": 3, \"minimum\": -3, \"title\": \"C\", \"type\": \"integer\"}, "
     "\"d\": {\"maximum\": 1.0, \"minimum\": 0.0, \"title\": \"D\", \"type\": \"number\"}}, "
     "\"required\": [\"a\", \"b\", \"c\", \"d\"], \"title\": \"M\", \"type\": \"object\"}",
     {"{\"a\": 9, \"b\": 0.5, \"c\": -3, \"d\": 0}", "{\"a\": 1, \"b\": 12.5, \"c\": 3, \"d\": 1.0}"},
     {"{\"a\": 10, \"b\": 0.5, \"c\": -3, \"d\": 0}", "{\"a\": 0, \"b\": 0.5, \"c\": -3, \"d\": 0}",
      "{\"a\": 1, \"b\": 0.4, \"c\": 0, \"d\": 0}", "{\"a\": 1, \"b\": 1, \"c\": -4, \"d\": 0}",
      "{\"a\": 1, \"b\": 1, \"c\": 0, \"d\": 1.5}"}},
};

static void test_schema_table(void) {
    char err[256];
    for (size_t i = 0; i < sizeof(s_cases) / sizeof(s_cases[0]); i++) {
        const scase *c = &s_cases[i];
        char *gbnf;
        sp_json_schema_to_gbnf(c->schema, 0, &gbnf, err, sizeof(err));
        CHECK(gbnf, "schema %zu: %s", i, err);
        if (!gbnf) continue;
        sp_grammar *g = sp_grammar_compile(gbnf, 0, err, sizeof(err));
        CHECK(g, "schema %zu: %s\n%s", i, err, gbnf);
        free(gbnf);
        if (!g) continue;
        sp_matcher *m = sp_matcher_create(g, NULL, err, sizeof(err));
        sp_grammar_free(g);
        for (int j = 0; j < 8 && c->yes[j]; j++) {
            sp_matcher_reset(m);
            CHECK(sp_matcher_accept_bytes(m, c->yes[j], strlen(c->yes[j])) && sp_matcher_can_end(m),
                  "schema %zu must accept %s", i, c->yes[j]);
        }
        for (int j = 0; j < 8 && c->no[j]; j++) {
            sp_matcher_reset(m);
            CHECK(!(sp_matcher_accept_bytes(m, c->no[j], strlen(c->no[j])) && sp_matcher_can_end(m)),
                  "schema %zu must reject %s", i, c->no[j]);
        }
        sp_matcher_free(m);
    }
    /* json_object mode */
    sp_grammar *g = sp_grammar_compile(sp_json_object_gbnf(), 0, err, sizeof(err));
    REQUIRE(g, "%s", err);
    sp_matcher *m = sp_matcher_create(g, NULL, err, sizeof(err));
    sp_grammar_free(g);
    CHECK(sp_matcher_accept_bytes(m, "{\"a\": [1, 2.5e3, \"x\"]}", 22) && sp_matcher_can_end(m), "object");
    sp_matcher_reset(m);
    CHECK(!sp_matcher_accept_bytes(m, "[1]", 3), "json_object: an array is not an object");
    sp_matcher_free(m);
}

/* ---- numeric bounds: randomized ----
 * Random bounds (integers, decimals, 16-digit integers, exponent forms,
 * draft-04's boolean exclusiveMinimum/Maximum; integer and number schemas)
 * and literals around them: the grammar accepts a literal exactly when it
 * is of the forms a bounded schema emits (no exponent, "-0" or leading
 * zero; 16 digits at most on each side of the point; integers without a
 * fraction) and its value meets every bound; bounds no value meets are
 * refused. Values are exact: x 10^16 in 128 bits. */

typedef __int128 i128;
#define SC ((i128)10000000000000000LL) /* 10^16 */

static uint64_t nr_state = 0x9E3779B97F4A7C15ull;
static int nr(int n) {
    nr_state ^= nr_state << 13;
    nr_state ^= nr_state >> 7;
    nr_state ^= nr_state << 17;
    return (int)(nr_state % (uint64_t)n);
}

/* v / 10^16 in plain decimals, the fraction given `zeros` more trailing zeros (16 digits at most) */
static void fmt_scaled(char *out, i128 v, int zeros) {
    const bool neg = v < 0;
    if (neg) v = -v;
    char f[24];
    snprintf(f, sizeof(f), "%016llu", (unsigned long long)(v % SC));
    int fl = 16;
    while (fl > 0 && f[fl - 1] == '0') fl--;
    const int want = SP_MIN(fl + zeros, 16);
    sprintf(out, "%s%llu", neg ? "-" : "", (unsigned long long)(v / SC));
    if (want) sprintf(out + strlen(out), ".%.*s", want, f);
}

/* the same as digits and an exponent: 2.5 -> 25e-1, -3 -> -3e0 */
static void fmt_exp(char *out, i128 v) {
    char t[64];
    fmt_scaled(t, v < 0 ? -v : v, 0);
    const char *dot = strchr(t, '.'), *p = t;
    const int fl = dot ? (int)strlen(dot + 1) : 0;
    char d[64];
    int n = 0;
    for (; *p; p++)
        if (*p != '.' && (n || *p != '0')) d[n++] = *p;
    if (!n) d[n++] = '0';
    d[n] = 0;
    sprintf(out, "%s%se%s%d", v < 0 ? "-" : "", d, fl || nr(2) ? "-" : "", fl);
}

/* a literal of the forms a bounded schema emits: its value x 10^16 */
static bool nb_parse(const char *s, bool integer, i128 *v) {
    const bool neg = *s == '-';
    s += neg;
    if (*s < '0' || *s > '9' || (*s == '0' && s[1] >= '0' && s[1] <= '9')) return false;
    i128 x = 0;
    int n = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (++n > 16) return false;
        x = x * 10 + (*s - '0');
    }
    x *= SC;
    if (*s == '.') {
        if (integer || s[1] < '0' || s[1] > '9') return false;
        i128 p = SC;
        for (s++, n = 0; *s >= '0' && *s <= '9'; s++) {
            if (++n > 16) return false;
            p /= 10;
            x += (*s - '0') * p;
        }
    }
    if (*s || (neg && x == 0)) return false;
    *v = neg ? -x : x;
    return true;
}

static i128 nb_rand_bound(void) {
    static const long long big[] = {9007199254740991LL, 123456789012345LL, 999999999999999LL,
                                    1000000000000000LL};
    switch (nr(10)) {
    case 0: case 1: case 2: case 3: return (i128)(nr(61) - 30) * SC;
    case 4: case 5: return (i128)(nr(6001) - 3000) * (SC / 100);
    case 6: case 7: return (i128)(nr(60001) - 30000) * (SC / 1000);
    case 8: return (i128)big[nr(4)] * SC * (nr(2) ? -1 : 1);
    default: return (i128)(nr(21) - 10) * (SC / 10000);
    }
}

static i128 floor_div(i128 a) { return a >= 0 ? a / SC : -((-a + SC - 1) / SC); }
static i128 ceil_div(i128 a) { return -floor_div(-a); }

static void test_schema_bounds_random(void) {
    static const char *const kw[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    static const char *const malformed[] = {"-0", "-0.0", "01", "00", "1e1", "1.", ".5", "-", "5e0", "+1", "1.5E0", "0.00"};
    char err[256], schema[512], lit[80];
    int n_schemas = 0, n_empty = 0, n_values = 0, n_yes = 0, n_bad = 0;
    if (getenv("NB_SEED")) nr_state = strtoull(getenv("NB_SEED"), NULL, 0) | 1;
    for (int it = 0; it < 400; it++) {
        const bool integer = nr(2);
        bool has[4] = {false}, excl[4] = {false, true, false, true};
        i128 b[4] = {0};
        int d4[2] = {0, 0}; /* draft-04 boolean beside minimum/maximum: 0 none, 1 true, 2 false */
        int n = 0;
        for (int k = 0; k < 4; k++)
            if ((has[k] = nr(100) < 40)) b[k] = nb_rand_bound(), n++;
        if (!n) continue;
        for (int side = 0; side < 2; side++)
            if (has[2 * side] && !has[2 * side + 1] && nr(4) == 0) excl[2 * side] = (d4[side] = 1 + nr(2)) == 1;
        int len = snprintf(schema, sizeof(schema), "{\"type\": \"%s\"", integer ? "integer" : "number");
        for (int k = 0; k < 4; k++) {
            if (!has[k]) continue;
            if (nr(5) == 0) fmt_exp(lit, b[k]);
            else fmt_scaled(lit, b[k], nr(4) == 0);
            len += snprintf(schema + len, sizeof(schema) - (size_t)len, ", \"%s\": %s", kw[k], lit);
        }
        for (int side = 0; side < 2; side++)
            if (d4[side])
                len += snprintf(schema + len, sizeof(schema) - (size_t)len, ", \"%s\": %s", kw[2 * side + 1],
                                d4[side] == 1 ? "true" : "false");
        snprintf(schema + len, sizeof(schema) - (size_t)len, "}");
        /* the least and greatest values of the emitted forms that meet the bounds */
        bool lset = false, hset = false;
        i128 L = 0, H = 0;
        for (int k = 0; k < 4; k++) {
            if (!has[k]) continue;
            const bool up = k >= 2;
            i128 v = b[k];
            if (integer) v = (up ? floor_div(v) - (excl[k] && v % SC == 0) : ceil_div(v) + (excl[k] && v % SC == 0)) * SC;
            else if (excl[k]) v += up ? -1 : 1;
            if (up) H = hset && H < v ? H : v, hset = true;
            else L = lset && L > v ? L : v, lset = true;
        }
        const bool empty = lset && hset && L > H;
        char *gbnf = NULL;
        const int rc = sp_json_schema_to_gbnf(schema, 0, &gbnf, err, sizeof(err));
        n_schemas++;
        if (empty) {
            n_empty++;
            if (!(rc == SP_ERR_INVALID && !gbnf && strstr(err, "fits the bounds at /")) && n_bad++ < 10)
                fprintf(stderr, "  %s: no value fits, got %d %s\n", schema, rc, gbnf ? "a grammar" : err);
            free(gbnf);
            continue;
        }
        if (!gbnf) {
            if (n_bad++ < 10) fprintf(stderr, "  %s: %s\n", schema, err);
            continue;
        }
        sp_grammar *g = sp_grammar_compile(gbnf, 0, err, sizeof(err));
        free(gbnf);
        sp_matcher *m = g ? sp_matcher_create(g, NULL, err, sizeof(err)) : NULL;
        sp_grammar_free(g);
        if (!m) {
            if (n_bad++ < 10) fprintf(stderr, "  %s: %s\n", schema, err);
            continue;
        }
        /* literals: at, around and past each bound, rounded ones, random ones, malformed ones */
        i128 vals[64];
        int nv = 0;
        static const long long deltas[] = {0, 1, -1, 10000000000000000LL, -10000000000000000LL,
                                           1000000000000000LL, -1000000000000000LL, 100000000000000LL};
        for (int k = 0; k < 4; k++) {
            if (!has[k]) continue;
            for (int d = 0; d < 8; d++) vals[nv++] = b[k] + deltas[d];
            vals[nv++] = floor_div(b[k]) * SC;
            vals[nv++] = ceil_div(b[k]) * SC;
        }
        while (nv < 56) vals[nv++] = nr(3) ? nb_rand_bound() + (nr(2) ? 0 : nr(3) - 1) : (i128)(nr(81) - 40) * SC;
        for (int i = 0; i < nv + 12; i++) {
            if (i < nv) fmt_scaled(lit, vals[i], nr(4) == 0 ? 1 + nr(3) : 0);
            else snprintf(lit, sizeof(lit), "%s", malformed[i - nv]);
            i128 v;
            bool want = nb_parse(lit, integer, &v);
            for (int k = 0; k < 4 && want; k++)
                if (has[k]) want = k < 2 ? (excl[k] ? v > b[k] : v >= b[k]) : (excl[k] ? v < b[k] : v <= b[k]);
            sp_matcher_reset(m);
            const bool got = sp_matcher_accept_bytes(m, lit, strlen(lit)) && sp_matcher_can_end(m);
            n_values++;
            n_yes += got;
            if (got != want && n_bad++ < 10)
                fprintf(stderr, "  %s: %s %s, must %s\n", schema, lit, got ? "accepted" : "rejected",
                        want ? "accept" : "reject");
        }
        sp_matcher_free(m);
    }
    printf("# %d schemas (%d with no value), %d literals, %d accepted\n", n_schemas, n_empty, n_values, n_yes);
    CHECK(n_bad == 0, "%d literals or schemas where the grammar and the arithmetic differ", n_bad);
    CHECK(n_schemas > 300 && n_empty > 10 && n_yes > n_values / 5 && n_yes < n_values * 4 / 5,
          "the sample covers both answers: %d schemas, %d empty, %d of %d accepted", n_schemas, n_empty, n_yes,
          n_values);
}

static void test_schema_refused(void) {
    static const struct {
        const char *schema, *why;
        int status;
    } bad[] = {
        {"{\"allOf\": [{}]}", "unsupported keyword 'allOf' at /", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"pattern\": \"^(?=a)\"}}}",
         "unsupported construct '(?' in pattern at /properties/a", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", "unsupported construct '\\1' in pattern", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"pattern\": \"\\\\bword\"}", "unsupported construct '\\b' in pattern", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"pattern\": \"a^b\"}", "unsupported construct '^' in pattern", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"pattern\": \"(a$)\"}", "unsupported construct '$' in pattern", SP_ERR_UNSUPPORTED},
        {"{\"pattern\": \"^a$\"}", "needs \"type\": \"string\"", SP_ERR_INVALID},
        {"{\"type\": \"string\", \"pattern\": \"^a+$\", \"maxLength\": 3}", "unsupported combination of 'pattern'", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"pattern\": \"[z-a]\"}", "out of order", SP_ERR_INVALID},
        {"{\"type\": \"string\", \"pattern\": \"(ab\"}", "unclosed group", SP_ERR_INVALID},
        {"{\"type\": \"string\", \"pattern\": \"a{2000}\"}", "above 1000", SP_ERR_INVALID},
        {"{\"type\": \"string\", \"pattern\": \"*a\"}", "nothing to repeat", SP_ERR_INVALID},
        {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no integer fits the bounds at /", SP_ERR_INVALID},
        {"{\"type\": \"number\", \"exclusiveMinimum\": 1, \"exclusiveMaximum\": 1}", "no number (of at most 16 decimals) fits the bounds at /", SP_ERR_INVALID},
        {"{\"type\": \"number\", \"minimum\": 1, \"exclusiveMaximum\": 1}", "no number", SP_ERR_INVALID},
        {"{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\", \"minimum\": 1.2, \"maximum\": 1.8}}}",
         "no integer fits the bounds at /properties/x", SP_ERR_INVALID},
        {"{\"type\": \"integer\", \"minimum\": 1e19}", "'minimum' at / is beyond the supported bounds", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"number\", \"maximum\": -1e300}", "'maximum' at / is beyond the supported bounds", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"number\", \"maximum\": \"3\"}", "'maximum' at / must be a number", SP_ERR_INVALID},
        {"{\"type\": \"number\", \"multipleOf\": 0.01}", "unsupported 'multipleOf' at /", SP_ERR_UNSUPPORTED},
        {"{\"type\": \"integer\", \"multipleOf\": 2}", "unsupported 'multipleOf' at /", SP_ERR_UNSUPPORTED},
        {"{\"$ref\": \"http://x/y\"}", "unsupported $ref", SP_ERR_UNSUPPORTED},
        {"{\"$ref\": \"#/$defs/none\"}", "points nowhere", SP_ERR_INVALID},
        {"{\"type\": \"strin\"}", "unknown type 'strin'", SP_ERR_INVALID},
        {"[1", "not valid JSON", SP_ERR_INVALID},
        {"{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "maxItems < minItems", SP_ERR_INVALID},
        {"{\"$ref\": \"#\"}", "refers to itself", SP_ERR_INVALID},
    };
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        char *g;
        const int rc = sp_json_schema_to_gbnf(bad[i].schema, 0, &g, err, sizeof(err));
        CHECK(!g && rc == bad[i].status && strstr(err, bad[i].why), "%s: got %d %s, want %d '%s'",
              bad[i].schema, rc, g ? g : err, bad[i].status, bad[i].why);
        free(g);
    }
}

int main(void) {
    RUN(test_gbnf_table);
    RUN(test_gbnf_refused);
    RUN(test_masks_spm);
    RUN(test_masks_bpe);
    RUN(test_lookahead);
    RUN(test_jump_forward);
    RUN(test_lazy_masks);
    RUN(test_lazy_phases);
    RUN(test_schema_table);
    RUN(test_schema_refused);
    RUN(test_schema_bounds_random);
    TEST_END();
}
