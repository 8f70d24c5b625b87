/* fuzz_grammar.c: the grammar compiler, the JSON Schema converter and the
 * matcher (src/grammar/).
 *
 * Input: byte 0 picks the mode: bit 0 clear: the rest, up to a 0x01 byte,
 * is GBNF text, and what follows the 0x01 is bytes to run through the
 * matcher; set: the rest is a JSON Schema.
 *
 * Checked: compiling refuses with a message or gives a grammar; every
 * grammar the schema converter writes compiles (the converter never emits
 * GBNF its own compiler refuses); on the SentencePiece vocabulary the
 * first mask agrees with sp_matcher_accept_token for the first tokens it
 * allows and the first ones it does not; running bytes never breaks the
 * matcher (a refused run leaves the state as it was: its mask is the
 * same). A matcher over one of its budgets says so (sp_matcher_error) and
 * the comparisons stop there: its masks are empty and it refuses all. */
#include "fuzz_common.h"
#include "specula.h"

static sp_token_trie *fzg_trie;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_load_vocabs();
    if (fz_vocabs[0] && !fzg_trie) fzg_trie = sp_token_trie_create(fz_vocabs[0], NULL, 0);
    return 0;
}

/* Whether m went over a budget (the message names it). */
static bool fzg_over(const sp_matcher *m) {
    char err[256];
    if (!sp_matcher_error(m, err, sizeof(err))) return false;
    FZ_ASSERT(strstr(err, "budget"));
    return true;
}

/* A matcher, or NULL when the grammar's start is over a budget. */
static sp_matcher *fzg_matcher(sp_grammar *g) {
    char err[256];
    sp_matcher *m = sp_matcher_create(g, fzg_trie, err, sizeof(err));
    FZ_ASSERT(m);
    if (!fzg_over(m)) return m;
    sp_matcher_free(m);
    return NULL;
}

static void fzg_run(sp_grammar *g, const uint8_t *bytes, size_t nb) {
    sp_matcher *m = fzg_matcher(g);
    if (!m) return;
    if (fzg_trie) {
        const int32_t V = fzg_trie ? sp_vocab_n_tokens(fz_vocabs[0]) : 0;
        uint32_t *bits = calloc((size_t)(V + 31) / 32, 4), *again = calloc((size_t)(V + 31) / 32, 4);
        FZ_ASSERT(bits && again);
        int32_t n = sp_matcher_mask(m, bits);
        FZ_ASSERT(n >= 0 && n <= V);
        sp_matcher *c = fzg_over(m) ? NULL : fzg_matcher(g);
        int yes = 0, no = 0;
        for (sp_token t = 0; c && t < V && (yes < 8 || no < 8); t++) {
            bool in = bits[t >> 5] >> (t & 31) & 1;
            if (in ? yes++ >= 8 : no++ >= 8) continue;
            sp_matcher_reset(c);
            const bool took = sp_matcher_accept_token(c, t);
            if (fzg_over(c)) break;
            FZ_ASSERT(took == in);
        }
        sp_matcher_free(c);
        /* a refused run leaves the state unchanged */
        if (!sp_matcher_accept_bytes(m, (const char *)bytes, nb) && !fzg_over(m)) {
            FZ_ASSERT(sp_matcher_mask(m, again) == n);
            FZ_ASSERT(!memcmp(bits, again, (size_t)(V + 31) / 32 * 4));
        } else {
            sp_matcher_mask(m, again);
        }
        free(bits);
        free(again);
    } else {
        sp_matcher_accept_bytes(m, (const char *)bytes, nb);
    }
    sp_matcher_can_end(m);
    sp_matcher_done(m);
    sp_matcher_free(m);
}

/* The grammar made lazy, its trigger the longest prefix (at most 8 bytes)
 * of bytes that it accepts: the free state's mask agrees with
 * sp_matcher_accept_token for the first tokens it allows and refuses, and
 * running bytes through the trigger never breaks the matcher. */
static void fzg_lazy(sp_grammar *g, const uint8_t *bytes, size_t nb) {
    char err[256];
    sp_matcher *m = fzg_matcher(g);
    if (!m) return;
    size_t tl = nb < 8 ? nb : 8;
    while (tl && !sp_matcher_accept_bytes(m, (const char *)bytes, tl) && !fzg_over(m)) tl--;
    sp_matcher_reset(m);
    if (!tl || fzg_over(m) || memchr(bytes, 0, tl) || sp_matcher_set_trigger(m, (const char *)bytes, tl, bytes[0] & 1, err, sizeof(err))) {
        sp_matcher_free(m);
        return;
    }
    const int32_t V = sp_vocab_n_tokens(fz_vocabs[0]);
    uint32_t *bits = calloc((size_t)(V + 31) / 32, 4);
    FZ_ASSERT(bits);
    const sp_token *ref;
    const int32_t n_ref = sp_matcher_free_at(m, 0, &ref);
    FZ_ASSERT(n_ref >= 0 && sp_matcher_mask(m, bits) == V - n_ref && sp_matcher_can_end(m));
    sp_matcher *c = fzg_matcher(g);
    FZ_ASSERT(c && sp_matcher_set_trigger(c, (const char *)bytes, tl, bytes[0] & 1, err, sizeof(err)) == SP_OK);
    for (int32_t i = 0; i < n_ref && i < 8; i++) {
        sp_matcher_reset(c);
        FZ_ASSERT(!sp_matcher_accept_token(c, ref[i]) && !(bits[ref[i] >> 5] >> (ref[i] & 31) & 1));
    }
    sp_matcher_free(c);
    sp_matcher_accept_bytes(m, (const char *)bytes, nb);
    sp_matcher_mask(m, bits);
    free(bits);
    sp_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[256];
    if (!(mode & 1)) {
        const char *sep = memchr(text, 1, len);
        size_t gl = sep ? (size_t)(sep - text) : len;
        char *g = malloc(gl + 1);
        FZ_ASSERT(g);
        memcpy(g, text, gl);
        g[gl] = 0;
        err[0] = 0;
        sp_grammar *gr = gl && !memchr(g, 0, gl) ? sp_grammar_compile(g, gl, err, sizeof(err)) : NULL;
        if (!gr && gl && !memchr(g, 0, gl)) FZ_ASSERT(err[0]);
        if (gr) fzg_run(gr, sep ? (const uint8_t *)sep + 1 : NULL, sep ? len - gl - 1 : 0);
        if (gr && sep && fzg_trie) fzg_lazy(gr, (const uint8_t *)sep + 1, len - gl - 1);
        sp_grammar_free(gr);
        free(g);
        return 0;
    }
    err[0] = 0;
    char *gbnf = NULL;
    if (len) sp_json_schema_to_gbnf(text, len, &gbnf, err, sizeof(err));
    if (!gbnf) {
        if (len) FZ_ASSERT(err[0]);
        return 0;
    }
    sp_grammar *gr = sp_grammar_compile(gbnf, 0, err, sizeof(err));
    if (!gr) fprintf(stderr, "schema grammar refused: %s\n%s\n", err, gbnf);
    FZ_ASSERT(gr);
    fzg_run(gr, NULL, 0);
    sp_grammar_free(gr);
    free(gbnf);
    return 0;
}
