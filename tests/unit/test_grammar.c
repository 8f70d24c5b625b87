/* test_grammar: the grammar engine (src/grammar/).
 *   - GBNF: a table of grammars with strings each must accept (whole) or
 *     reject, and grammars the compiler must refuse (with the reason);
 *   - masks: on the SPM (llama) and byte-level BPE (gpt-2) vocabularies of
 *     the reference data, at several states of several grammars, the mask
 *     equals the brute-force answer (each token's bytes run through the
 *     matcher), and the lookahead states for speculation agree with
 *     committing token by token;
 *   - JSON Schema: schemas compiled to GBNF accept valid documents and
 *     reject invalid ones; unsupported keywords are named. */
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
    const char *yes[5];
    const char *no[5];
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
        for (int j = 0; j < 5 && c->yes[j]; j++) {
            sp_matcher_reset(m);
            CHECK(sp_matcher_accept_bytes(m, c->yes[j], strlen(c->yes[j])) && sp_matcher_can_end(m),
                  "schema %zu must accept %s", i, c->yes[j]);
        }
        for (int j = 0; j < 5 && c->no[j]; j++) {
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
        {"{\"type\": \"number\", \"maximum\": 3}", "number bounds", SP_ERR_UNSUPPORTED},
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
    TEST_END();
}
