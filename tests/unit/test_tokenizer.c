/* test_tokenizer.c: the tokenizer against llama.cpp's own outputs.
 *
 *   - every vocab/X.gguf of the reference data, and every X.gguf of the
 *     repository's tests/data/vocab/ (the new families' vocabularies, with
 *     vectors from ik_llama.cpp's tokenizer): each test string of X.gguf.inp
 *     tokenized (no special tokens, no special-token parsing) must give the
 *     ids of the matching line of X.gguf.out, and decode back to itself, also
 *     through the streaming detokenizer;
 *   - generations.jsonl: every prompt, tokenized with the model's vocabulary
 *     and its special tokens, must give prompt_tokens;
 *   - pieces, special tokens, the streaming detokenizer's UTF-8 handling, edge
 *     cases (empty, spaces, invalid UTF-8, a 100 KB text, a short output
 *     buffer) and load errors on crafted GGUF files;
 *   - any architecture: every vocabulary loads vocab_only through
 *     sp_model_load whatever its architecture, and meta_only, with its
 *     metadata and tensors listed; a full load names an architecture this
 *     build does not run; an unimplemented tokenizer type is refused by name;
 *   - bounded tokenizing: the same tokens as sp_tokenize within
 *     the bound, the byte bound, work that stops past the bound, SPM chunks
 *     that change nothing, and special tokens read only in given spans.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "gguf/gguf.h"
#include "test.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

#define SPM_VOCAB "vocab/ggml-vocab-llama-spm.gguf"
#define BPE_VOCAB "vocab/ggml-vocab-gpt-2.gguf"

static char g_err[512];

static sp_vocab *load_vocab(const char *path) {
    gguf_file *g = gguf_open(path, g_err, sizeof(g_err));
    if (!g) return NULL;
    sp_vocab *v = vocab_load(g, g_err, sizeof(g_err));
    gguf_close(g); /* the vocabulary must not reference the file */
    return v;
}

static sp_vocab *load_ref(const char *rel) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", t_ref_dir(), rel);
    sp_vocab *v = load_vocab(path);
    if (!v) fprintf(stderr, "  cannot load %s: %s\n", path, g_err);
    return v;
}

/* Tokenizes into a fresh array; *n gets the count (negative on failure). */
static int32_t *tok(const sp_vocab *v, const char *s, size_t len, bool add_special,
                    bool parse_special, int *n) {
    int need = sp_tokenize(v, s, len, NULL, 0, add_special, parse_special);
    if (need >= 0) { /* nothing to write: fits in zero slots */
        *n = need;
        return malloc(sizeof(int32_t));
    }
    if (need == SP_TOKENIZE_FAILED) {
        *n = -1;
        return NULL;
    }
    int32_t *out = malloc((size_t)-need * sizeof(int32_t));
    *n = sp_tokenize(v, s, len, out, -need, add_special, parse_special);
    return out;
}

/* Printable form of s for messages (C escapes, truncated). */
static const char *esc(const char *s, size_t n) {
    static char buf[8][400];
    static int k;
    char *b = buf[k++ & 7];
    size_t o = 0;
    for (size_t i = 0; i < n && o < sizeof(buf[0]) - 8; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') o += (size_t)sprintf(b + o, "\\n");
        else if (c == '\t') o += (size_t)sprintf(b + o, "\\t");
        else if (c == '\\') o += (size_t)sprintf(b + o, "\\\\");
        else if (c < 0x20 || c == 0x7f) o += (size_t)sprintf(b + o, "\\x%02x", c);
        else b[o++] = (char)c;
    }
    if (n && o >= sizeof(buf[0]) - 8) o += (size_t)sprintf(b + o, "...");
    b[o] = 0;
    return b;
}

static const char *ids_str(const int32_t *ids, int n) {
    static char buf[4][2048];
    static int k;
    char *b = buf[k++ & 3];
    size_t o = 0;
    b[0] = 0;
    for (int i = 0; i < n && o < sizeof(buf[0]) - 24; i++)
        o += (size_t)sprintf(b + o, "%s%d", i ? " " : "", ids[i]);
    if (o >= sizeof(buf[0]) - 24) sprintf(b + o, " ...");
    return b;
}

/* Strict UTF-8 validation (no overlongs, surrogates or > U+10FFFF). */
static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *b = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = b[i];
        int k;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c < 0x80) k = 1;
        else if (c >= 0xc2 && c <= 0xdf) k = 2;
        else if (c >= 0xe0 && c <= 0xef) k = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4) k = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        else return false;
        if (i + (size_t)k > n) return false;
        for (int j = 1; j < k; j++) {
            unsigned char x = b[i + (size_t)j];
            if (j == 1 ? (x < lo || x > hi) : (x & 0xc0) != 0x80) return false;
        }
        i += (size_t)k;
    }
    return true;
}

/* Concatenated pieces of ids (render_special false). Caller frees. */
static char *detok_all(const sp_vocab *v, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, o = 0;
    char *s = malloc(cap);
    for (int i = 0; i < n; i++) {
        int k = sp_token_to_piece(v, ids[i], s + o, (int)(cap - o), false);
        if (k < 0) {
            while (cap - o < (size_t)-k) cap *= 2;
            s = realloc(s, cap);
            k = sp_token_to_piece(v, ids[i], s + o, (int)(cap - o), false);
        }
        o += (size_t)k;
    }
    *len = o;
    return s;
}

/* Decodes ids through the streaming detokenizer, checking that every chunk
 * is valid UTF-8. Returns the concatenated output. Caller frees. */
static char *detok_stream(const sp_vocab *v, const int32_t *ids, int n, size_t *len,
                          bool *all_valid) {
    sp_detok d;
    sp_detok_init(&d);
    size_t cap = 256, o = 0;
    char *s = malloc(cap);
    char chunk[4096];
    *all_valid = true;
    for (int i = 0; i <= n; i++) {
        int k = i < n ? sp_detok_push(v, &d, ids[i], chunk, sizeof(chunk))
                      : sp_detok_flush(&d, chunk, sizeof(chunk));
        if (k < 0) {
            *all_valid = false;
            break;
        }
        if (!valid_utf8(chunk, (size_t)k) || chunk[k] != 0) *all_valid = false;
        if (cap - o < (size_t)k + 1) {
            while (cap - o < (size_t)k + 1) cap *= 2;
            s = realloc(s, cap);
        }
        memcpy(s + o, chunk, (size_t)k);
        o += (size_t)k;
    }
    *len = o;
    return s;
}

/* Round trip and streaming checks for one string and its tokens. */
static void check_roundtrip(const sp_vocab *v, const char *s, size_t len, const int32_t *ids,
                            int n, const char *what) {
    size_t dl;
    char *d = detok_all(v, ids, n, &dl);
    const char *p = d;
    /* SPM: the space prefix added to the text comes back as a leading space */
    if (sp_vocab_kind_of(v) == SP_VOCAB_SPM && dl > 0 && d[0] == ' ') p++, dl--;
    CHECK(dl == len && memcmp(p, s, len) == 0, "%s: '%s' decodes to '%s'", what, esc(s, len),
          esc(p, dl));
    size_t sl;
    bool ok;
    char *st = detok_stream(v, ids, n, &sl, &ok);
    CHECK(ok, "%s: '%s': the streaming detokenizer emitted invalid UTF-8", what, esc(s, len));
    if (valid_utf8(s, len)) {
        size_t full;
        char *f = detok_all(v, ids, n, &full);
        CHECK(sl == full && memcmp(st, f, sl) == 0,
              "%s: '%s': streamed '%s' differs from the pieces '%s'", what, esc(s, len),
              esc(st, sl), esc(f, full));
        free(f);
    }
    free(st);
    free(d);
}

/* ------------------------------------------------------------------ vocab */

/* Through the public door, as `specula tokenize` loads a file: vocab_only,
 * whatever the architecture (gptneox, baichuan: architectures Specula does
 * not run, whose tokenizers must match all the same). */
static void test_vocab_file(const char *path) {
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    sp_model_params mp = sp_model_default_params();
    mp.vocab_only = true;
    g_err[0] = 0;
    sp_model *m = sp_model_load(path, mp, g_err, sizeof(g_err));
    const sp_vocab *v = m ? sp_model_get_vocab(m) : NULL;
    if (!m && strstr(g_err, "unsupported tokenizer model")) {
        /* WPM/UGM/RWKV vocabularies are not implemented: loading them
         * fails cleanly, but their vectors are not compared, which is a
         * skip (counted as one, and a failure under SPECULA_NO_SKIP) */
        SKIP("%.80s: %.160s", name, g_err);
        return;
    }
    REQUIRE(m != NULL && v != NULL, "cannot load %s: %s", path, g_err);
    printf("     %s: architecture '%s'%s, %s, pre '%s'\n", name, sp_model_get_info(m)->arch,
           sp_model_arch_supported(m) ? "" : " (not run by this build)",
           sp_vocab_kind_of(v) == SP_VOCAB_SPM ? "SPM" : "BPE", sp_vocab_pre_name(v));
    char ipath[1100], opath[1100];
    snprintf(ipath, sizeof(ipath), "%s.inp", path);
    snprintf(opath, sizeof(opath), "%s.out", path);
    size_t ilen = 0, olen = 0;
    char *inp = t_read_file(ipath, &ilen), *outs = t_read_file(opath, &olen);
    CHECK(inp && outs, "cannot read %s / %s", ipath, opath);
    if (!inp || !outs) goto done;

    static const char SEP[] = "\n__ggml_vocab_test__\n";
    const size_t sl = sizeof(SEP) - 1;
    size_t ip = 0, op = 0;
    int n_str = 0, n_ok = 0;
    /* every string, the last one included, is followed by the separator */
    while (ip < ilen) {
        char *sep = memmem(inp + ip, ilen - ip, SEP, sl);
        CHECK(sep != NULL, "%s: text after the last separator", ipath);
        if (!sep) break;
        const char *s = inp + ip;
        size_t len = (size_t)(sep - s);
        ip += len + sl;

        CHECK(op < olen, "%s: no output line for string %d", opath, n_str);
        if (op >= olen) break;
        char *eol = memchr(outs + op, '\n', olen - op);
        size_t ll = eol ? (size_t)(eol - (outs + op)) : olen - op;
        int32_t want[4096];
        int nw = 0;
        char *line = strndup(outs + op, ll), *save = NULL;
        for (char *t = strtok_r(line, " \r", &save); t && nw < 4096; t = strtok_r(NULL, " \r", &save))
            want[nw++] = (int32_t)strtol(t, NULL, 10);
        free(line);
        op += ll + 1;

        int n;
        int32_t *got = tok(v, s, len, false, false, &n);
        bool same = n == nw && memcmp(got, want, (size_t)nw * sizeof(int32_t)) == 0;
        CHECK(same, "%s line %d: '%s'\n    want [%s]\n    got  [%s]", name, n_str + 1,
              esc(s, len), ids_str(want, nw), ids_str(got, n));
        if (same) {
            n_ok++;
            check_roundtrip(v, s, len, got, n, name);
        }
        free(got);
        n_str++;
    }
    CHECK(op >= olen, "%s: more output lines than test strings", opath);
    printf("     %s: %d/%d strings match\n", name, n_ok, n_str);
    CHECK(n_str > 0, "%s: no test strings", ipath);
done:
    free(inp);
    free(outs);
    sp_model_free(m);
}

/* ------------------------------------------------------------ generations */

static void test_generations(void) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/generations.jsonl", t_ref_dir());
    size_t len;
    char *all = t_read_file(path, &len);
    CHECK(all != NULL, "cannot read %s", path);
    if (!all) return;
    char cur_model[256] = "";
    sp_vocab *v = NULL;
    int n_rec = 0, n_ok = 0;
    char *save = NULL;
    for (char *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(line);
        CHECK(j != NULL, "bad JSON line in %s", path);
        if (!j) continue;
        const cJSON *model = cJSON_GetObjectItem(j, "model");
        const cJSON *prompt = cJSON_GetObjectItem(j, "prompt");
        const cJSON *want = cJSON_GetObjectItem(j, "prompt_tokens");
        const cJSON *pid = cJSON_GetObjectItem(j, "prompt_id");
        if (!cJSON_IsString(model) || !cJSON_IsString(prompt) || !cJSON_IsArray(want)) {
            CHECK(0, "record without model/prompt/prompt_tokens");
            cJSON_Delete(j);
            continue;
        }
        if (strcmp(cur_model, model->valuestring) != 0) {
            vocab_free(v);
            char rel[512];
            snprintf(rel, sizeof(rel), "models/%s.gguf", model->valuestring);
            v = load_ref(rel);
            snprintf(cur_model, sizeof(cur_model), "%s", model->valuestring);
            CHECK(v != NULL, "cannot load the vocabulary of %s", rel);
        }
        if (v) {
            int n;
            const char *p = prompt->valuestring;
            int32_t *got = tok(v, p, strlen(p), true, false, &n);
            int nw = cJSON_GetArraySize(want);
            int32_t *w = malloc(((size_t)nw + 1) * sizeof(int32_t));
            for (int i = 0; i < nw; i++) w[i] = (int32_t)cJSON_GetArrayItem(want, i)->valuedouble;
            bool same = n == nw && memcmp(got, w, (size_t)nw * sizeof(int32_t)) == 0;
            CHECK(same, "%s / %s: '%s'\n    want [%s]\n    got  [%s]", cur_model,
                  cJSON_IsString(pid) ? pid->valuestring : "?", esc(p, strlen(p)), ids_str(w, nw),
                  ids_str(got, n));
            n_ok += same;
            free(w);
            free(got);
        }
        n_rec++;
        cJSON_Delete(j);
    }
    printf("     generations.jsonl: %d/%d prompts match\n", n_ok, n_rec);
    CHECK(n_rec > 0, "no records in %s", path);
    vocab_free(v);
    free(all);
}

/* ------------------------------------------------------- properties, pieces */

static sp_vocab *g_spm, *g_bpe;

static void expect_ids(const sp_vocab *v, const char *s, size_t len, bool add_special,
                       bool parse_special, const int32_t *want, int nw, const char *what) {
    int n;
    int32_t *got = tok(v, s, len, add_special, parse_special, &n);
    CHECK(n == nw && (nw == 0 || memcmp(got, want, (size_t)nw * sizeof(int32_t)) == 0),
          "%s: '%s' want [%s] got [%s]", what, esc(s, len), ids_str(want, nw), ids_str(got, n));
    free(got);
}

static void test_properties(void) {
    if (!g_spm || !g_bpe) {
        CHECK(0, "reference vocabularies missing");
        return;
    }
    CHECK(sp_vocab_kind_of(g_spm) == SP_VOCAB_SPM, "spm kind");
    CHECK(sp_vocab_kind_of(g_bpe) == SP_VOCAB_BPE, "bpe kind");
    CHECK(strcmp(sp_vocab_pre_name(g_bpe), "gpt-2") == 0, "pre %s", sp_vocab_pre_name(g_bpe));
    CHECK(sp_vocab_n_tokens(g_spm) == 32000 && sp_vocab_n_tokens(g_bpe) == 50257, "n_tokens");
    CHECK(sp_vocab_bos(g_spm) == 1 && sp_vocab_eos(g_spm) == 2, "spm bos/eos");
    CHECK(sp_vocab_bos(g_bpe) == 50256 && sp_vocab_eos(g_bpe) == 50256, "bpe bos/eos");
    CHECK(sp_vocab_add_bos(g_spm) && !sp_vocab_add_eos(g_spm), "spm add_bos");
    CHECK(!sp_vocab_add_bos(g_bpe) && !sp_vocab_add_eos(g_bpe), "bpe add_bos defaults to false");
    CHECK(sp_vocab_is_eog(g_spm, 2) && !sp_vocab_is_eog(g_spm, 1) && !sp_vocab_is_eog(g_spm, 100),
          "spm eog");
    CHECK(sp_vocab_is_eog(g_bpe, 50256) && !sp_vocab_is_eog(g_bpe, 0) &&
              !sp_vocab_is_eog(g_bpe, -1) && !sp_vocab_is_eog(g_bpe, 50257),
          "bpe eog");
    CHECK(sp_vocab_token_type(g_spm, 0) == SP_TOKEN_UNKNOWN &&
              sp_vocab_token_type(g_spm, 1) == SP_TOKEN_CONTROL &&
              sp_vocab_token_type(g_spm, 3) == SP_TOKEN_BYTE &&
              sp_vocab_token_type(g_spm, 1000) == SP_TOKEN_NORMAL,
          "spm token types");
    /* "<|endoftext|>" is made CONTROL whatever the file says, as llama.cpp does */
    CHECK(sp_vocab_token_type(g_bpe, 50256) == SP_TOKEN_CONTROL, "bpe <|endoftext|> type %d",
          sp_vocab_token_type(g_bpe, 50256));
    CHECK(strcmp(sp_vocab_token_text(g_spm, 1), "<s>") == 0, "text of 1");
    CHECK(strcmp(sp_vocab_token_text(g_spm, 3), "<0x00>") == 0, "text of 3");
    CHECK(sp_vocab_token_text(g_spm, 32000) == NULL, "text out of range");
}

static void test_pieces(void) {
    if (!g_spm || !g_bpe) return;
    char buf[64];
    int n;
    /* SPM: U+2581 -> space, byte tokens -> their byte, control -> "" */
    int32_t hello[4];
    n = sp_tokenize(g_spm, "Hello", 5, hello, 4, false, false);
    CHECK(n == 1, "'Hello' is one SPM token (%d)", n);
    n = sp_token_to_piece(g_spm, hello[0], buf, sizeof(buf), false);
    CHECK(n == 6 && memcmp(buf, " Hello", 6) == 0, "piece '%s'", esc(buf, n > 0 ? (size_t)n : 0));
    n = sp_token_to_piece(g_spm, 3 + 0x0A, buf, sizeof(buf), false);
    CHECK(n == 1 && buf[0] == '\n', "<0x0A> -> newline");
    n = sp_token_to_piece(g_spm, 3 + 0xE2, buf, sizeof(buf), false);
    CHECK(n == 1 && (unsigned char)buf[0] == 0xE2, "<0xE2> -> byte");
    CHECK(sp_token_to_piece(g_spm, 2, buf, sizeof(buf), false) == 0, "</s> renders empty");
    n = sp_token_to_piece(g_spm, 2, buf, sizeof(buf), true);
    CHECK(n == 4 && memcmp(buf, "</s>", 4) == 0, "</s> with render_special");
    CHECK(sp_token_to_piece(g_spm, 0, buf, sizeof(buf), false) == 0, "<unk> renders empty");
    CHECK(sp_token_to_piece(g_spm, hello[0], buf, 3, false) == -6, "short buffer -> -(needed)");
    CHECK(sp_token_to_piece(g_spm, -1, buf, sizeof(buf), false) == 0, "bad id");
    /* BPE: byte-level decoding */
    int32_t w[4];
    n = sp_tokenize(g_bpe, " world", 6, w, 4, false, false);
    CHECK(n == 1, "' world' is one BPE token (%d)", n);
    n = sp_token_to_piece(g_bpe, w[0], buf, sizeof(buf), false);
    CHECK(n == 6 && memcmp(buf, " world", 6) == 0, "bpe piece '%s'", esc(buf, n > 0 ? (size_t)n : 0));
    CHECK(sp_token_to_piece(g_bpe, 50256, buf, sizeof(buf), false) == 0, "eos renders empty");
    n = sp_token_to_piece(g_bpe, 50256, buf, sizeof(buf), true);
    CHECK(n == 13 && memcmp(buf, "<|endoftext|>", 13) == 0, "eos with render_special");
}

static void test_special_tokens(void) {
    if (!g_spm || !g_bpe) return;
    /* SPM: parse_special turns "<s>"/"</s>" into tokens; the text after a
     * special token gets the space prefix again, as in llama.cpp */
    const char *s = "<s>Hi</s>";
    int n1, n2;
    int32_t *a = tok(g_spm, s, strlen(s), false, true, &n1);
    int32_t *b = tok(g_spm, " Hi", 3, false, false, &n2); /* text: "▁▁Hi" */
    int32_t *c = tok(g_spm, "Hi", 2, false, false, &n2);  /* text: "▁Hi" */
    CHECK(n1 == 2 + n2 && a[0] == 1 && a[n1 - 1] == 2 &&
              memcmp(a + 1, c, (size_t)n2 * sizeof(int32_t)) == 0,
          "'%s' parsed: [%s]", s, ids_str(a, n1));
    free(a);
    free(b);
    free(c);
    a = tok(g_spm, s, strlen(s), false, false, &n1);
    bool has_ctrl = false;
    for (int i = 0; i < n1; i++) has_ctrl |= a[i] == 1 || a[i] == 2;
    CHECK(!has_ctrl && n1 > 3, "without parse_special '<s>' is text: [%s]", ids_str(a, n1));
    free(a);
    /* BPE */
    const char *t = "a<|endoftext|>b";
    int32_t want[] = {64, 50256, 65};
    expect_ids(g_bpe, t, strlen(t), false, true, want, 3, "bpe parse_special");
    a = tok(g_bpe, t, strlen(t), false, false, &n1);
    has_ctrl = false;
    for (int i = 0; i < n1; i++) has_ctrl |= a[i] == 50256;
    CHECK(!has_ctrl && n1 > 3, "bpe without parse_special: [%s]", ids_str(a, n1));
    free(a);
    /* add_special: BOS for SPM (the vocabulary asks for it), nothing for GPT-2 */
    int32_t bos_only[] = {1};
    expect_ids(g_spm, "", 0, true, false, bos_only, 1, "spm empty + add_special");
    expect_ids(g_bpe, "", 0, true, false, NULL, 0, "bpe empty + add_special");
}

static void test_edge_cases(void) {
    if (!g_spm || !g_bpe) return;
    int n;
    expect_ids(g_spm, "", 0, false, false, NULL, 0, "spm empty");
    expect_ids(g_bpe, "", 0, false, false, NULL, 0, "bpe empty");
    CHECK(sp_tokenize(g_spm, NULL, 0, NULL, 0, false, false) == 0, "NULL text");
    /* only spaces */
    int32_t *a = tok(g_spm, "   ", 3, false, false, &n);
    CHECK(n > 0, "spm spaces");
    if (n > 0) check_roundtrip(g_spm, "   ", 3, a, n, "spm spaces");
    free(a);
    a = tok(g_bpe, "    ", 4, false, false, &n);
    CHECK(n > 0, "bpe spaces");
    if (n > 0) check_roundtrip(g_bpe, "    ", 4, a, n, "bpe spaces");
    free(a);
    /* invalid UTF-8. SPM: "▁" then the byte token of 0xFF */
    int32_t want_ff[] = {29871, 3 + 0xFF};
    expect_ids(g_spm, "\xff", 1, false, false, want_ff, 2, "spm invalid byte");
    /* BPE: llama.cpp decodes an invalid byte as U+FFFD */
    int n2;
    a = tok(g_bpe, "a\xff" "b", 3, false, false, &n);
    int32_t *b = tok(g_bpe, "a\xef\xbf\xbd" "b", 5, false, false, &n2);
    CHECK(n == n2 && n > 0 && memcmp(a, b, (size_t)n * sizeof(int32_t)) == 0,
          "bpe invalid byte = U+FFFD: [%s] vs [%s]", ids_str(a, n), ids_str(b, n2));
    free(a);
    free(b);
    const char junk[] = "\x80\xc3\xe2\x82\xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf \xf8\xff\xfe end \xe2";
    /* no round trip here: llama.cpp splits SPM symbols by lead byte, so a
     * truncated sequence swallows bytes of the next (escaped) character; the
     * stream must still be valid UTF-8 */
    const sp_vocab *vs[2] = {g_spm, g_bpe};
    for (int k = 0; k < 2; k++) {
        a = tok(vs[k], junk, sizeof(junk) - 1, true, true, &n);
        CHECK(n > 0, "junk %d", k);
        size_t sl;
        bool ok;
        free(detok_stream(vs[k], a, n, &sl, &ok));
        CHECK(ok, "junk %d: the streaming detokenizer emitted invalid UTF-8", k);
        free(a);
    }
    /* NUL bytes are text like any other */
    a = tok(g_bpe, "a\0b", 3, false, false, &n);
    CHECK(n >= 2, "bpe NUL");
    if (n > 0) check_roundtrip(g_bpe, "a\0b", 3, a, n, "bpe NUL");
    free(a);
    /* n_max too small */
    const char *s = "Hello world, this is a test.";
    int need = sp_tokenize(g_spm, s, strlen(s), NULL, 0, true, false);
    CHECK(need < -1, "n_max 0 -> -(needed): %d", need);
    int32_t out[64];
    int r = sp_tokenize(g_spm, s, strlen(s), out, -need - 1, true, false);
    CHECK(r == need, "n_max needed-1 -> %d (want %d)", r, need);
    r = sp_tokenize(g_spm, s, strlen(s), out, -need, true, false);
    CHECK(r == -need && out[0] == 1, "n_max exact -> %d", r);
    r = sp_tokenize(g_bpe, s, strlen(s), out, 1, false, false);
    CHECK(r < -1, "bpe short -> %d", r);
}

/* A deterministic ~100 KB mixed text. */
static char *big_text(size_t *len) {
    static const char *parts[] = {
        "The quick brown fox jumps over the lazy dog. ", "It's 2025; we've got 1234567 items!\n",
        "  indented\tcode(x) { return x*2; }\n", "Привет, мир! ", "日本語のテキスト。", "🦙🚀✅ ",
        "don't STOP 'til you're DONE\r\n", "    \n\n", "naïve café résumé — ok… ",
        "العربية مرحبا ", "0.5 + 3.14159 = 3.64159 ", "<s> </s> <|endoftext|> ",
    };
    size_t cap = 110 * 1024, o = 0;
    char *s = malloc(cap);
    uint32_t x = 12345;
    while (o < 100 * 1024) {
        x = x * 1103515245u + 12345u;
        const char *p = parts[(x >> 16) % (sizeof(parts) / sizeof(parts[0]))];
        size_t l = strlen(p);
        memcpy(s + o, p, l);
        o += l;
    }
    *len = o;
    return s;
}

static void test_big_text(void) {
    if (!g_spm || !g_bpe) return;
    size_t len;
    char *s = big_text(&len);
    const sp_vocab *vs[2] = {g_spm, g_bpe};
    for (int k = 0; k < 2; k++) {
        double t0 = time_s();
        int n;
        int32_t *ids = tok(vs[k], s, len, false, false, &n);
        double t1 = time_s();
        CHECK(n > 1000, "big text: %d tokens", n);
        printf("     %s: %zu bytes -> %d tokens in %.3f s\n", k ? "bpe" : "spm", len, n, t1 - t0);
        if (n > 0) check_roundtrip(vs[k], s, len, ids, n, k ? "bpe big" : "spm big");
        free(ids);
    }
    free(s);
}

static void test_detok_stream(void) {
    if (!g_spm) return;
    sp_detok d;
    char out[256];
    /* 🦙 = F0 9F A6 99 as four byte tokens: nothing until the last one */
    int32_t llama[] = {3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99};
    sp_detok_init(&d);
    for (int i = 0; i < 3; i++) {
        int n = sp_detok_push(g_spm, &d, llama[i], out, sizeof(out));
        CHECK(n == 0 && out[0] == 0, "partial emoji byte %d emitted %d bytes", i, n);
    }
    int n = sp_detok_push(g_spm, &d, llama[3], out, sizeof(out));
    CHECK(n == 4 && memcmp(out, "\xf0\x9f\xa6\x99", 4) == 0, "emoji completed (%d)", n);
    /* a stray continuation byte */
    n = sp_detok_push(g_spm, &d, 3 + 0x80, out, sizeof(out));
    CHECK(n == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "stray continuation -> U+FFFD");
    /* an invalid lead byte */
    n = sp_detok_push(g_spm, &d, 3 + 0xFF, out, sizeof(out));
    CHECK(n == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "0xFF -> U+FFFD");
    /* a lead followed by a non-continuation: U+FFFD, then the text */
    n = sp_detok_push(g_spm, &d, 3 + 0xE2, out, sizeof(out));
    CHECK(n == 0, "lead held back");
    int32_t hi[4];
    int nh = sp_tokenize(g_spm, "Hi", 2, hi, 4, false, false);
    n = sp_detok_push(g_spm, &d, hi[0], out, sizeof(out));
    CHECK(nh >= 1 && n == 3 + 3 && memcmp(out, "\xef\xbf\xbd Hi", 6) == 0, "lead + text: '%s'",
          esc(out, n > 0 ? (size_t)n : 0));
    /* surrogate (ED A0) can never complete */
    n = sp_detok_push(g_spm, &d, 3 + 0xED, out, sizeof(out));
    n = sp_detok_push(g_spm, &d, 3 + 0xA0, out, sizeof(out));
    CHECK(n == 6 && memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0, "surrogate -> 2 x U+FFFD");
    /* CJK 日 = E6 97 A5 split over byte tokens, with a short output buffer */
    sp_detok_init(&d);
    sp_detok_push(g_spm, &d, 3 + 0xE6, out, sizeof(out));
    sp_detok_push(g_spm, &d, 3 + 0x97, out, sizeof(out));
    n = sp_detok_push(g_spm, &d, 3 + 0xA5, out, 3);
    CHECK(n == -4, "cap too small -> -(needed) (%d)", n);
    CHECK(d.n_pend == 2, "state unchanged after a failed push");
    n = sp_detok_push(g_spm, &d, 3 + 0xA5, out, 4);
    CHECK(n == 3 && memcmp(out, "\xe6\x97\xa5", 3) == 0 && out[3] == 0, "CJK completed");
    /* flush of an incomplete character */
    sp_detok_push(g_spm, &d, 3 + 0xF0, out, sizeof(out));
    sp_detok_push(g_spm, &d, 3 + 0x9F, out, sizeof(out));
    CHECK(sp_detok_flush(&d, out, 3) == -7, "flush needs room");
    n = sp_detok_flush(&d, out, sizeof(out));
    CHECK(n == 6 && memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0, "flush -> U+FFFD per byte");
    CHECK(sp_detok_flush(&d, out, sizeof(out)) == 0 && out[0] == 0, "second flush empty");
    /* control tokens produce nothing */
    CHECK(sp_detok_push(g_spm, &d, 2, out, sizeof(out)) == 0, "eos emits nothing");
}

/* ---------------------------------------------------------------------- bounded */

/* sp_tokenize_bounded into a fresh array; *n the return value. */
static int32_t *tokb(const sp_vocab *v, const char *s, size_t len, int n_max, const sp_tok_opts *o,
                     int *n) {
    int32_t *out = (int32_t *)1; /* must be reset */
    *n = sp_tokenize_bounded(v, s, len, n_max, o, &out);
    CHECK((*n >= 0) == (out != NULL), "bounded: return %d with out %p", *n, (void *)out);
    return *n >= 0 ? out : NULL;
}

/* The same tokens as sp_tokenize whenever the count fits, one short of it
 * a refusal with no output, for texts that do and do not hold special
 * tokens, with and without BOS and special parsing. */
static void test_bounded_equal(void) {
    if (!g_spm || !g_bpe) return;
    size_t blen;
    char *big = big_text(&blen);
    const char *texts[] = {"", " ", "Hello world", "<s>Hi</s> a<|endoftext|>b", "\xff\xfe x",
                           "  many   spaces  \n\n\t"};
    const sp_vocab *vs[2] = {g_spm, g_bpe};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i <= sizeof(texts) / sizeof(texts[0]); i++) {
            const char *s = i < sizeof(texts) / sizeof(texts[0]) ? texts[i] : big;
            size_t len = i < sizeof(texts) / sizeof(texts[0]) ? strlen(s) : blen;
            for (int mode = 0; mode < 4; mode++) {
                sp_tok_opts o = {.add_special = mode & 1, .parse_special = mode & 2};
                int nf, nb;
                int32_t *full = tok(vs[k], s, len, o.add_special, o.parse_special, &nf);
                int32_t *b = tokb(vs[k], s, len, nf, &o, &nb);
                CHECK(nb == nf && (nf == 0 || memcmp(b, full, (size_t)nf * sizeof(int32_t)) == 0),
                      "vocab %d text %zu mode %d: bounded %d tokens, sp_tokenize %d", k, i, mode,
                      nb, nf);
                free(b);
                if (nf > 0) {
                    b = tokb(vs[k], s, len, nf - 1, &o, &nb);
                    CHECK(nb <= -nf && !b, "vocab %d text %zu mode %d: n_max %d gave %d", k, i,
                          mode, nf - 1, nb);
                }
                free(full);
            }
        }
    }
    free(big);
}

/* The byte bound: no token stands for more bytes than
 * sp_vocab_max_token_bytes, and a text longer than n_max times that is
 * refused at once with a lower bound of its count. */
static void test_bounded_bytes(void) {
    if (!g_spm || !g_bpe) return;
    const sp_vocab *vs[2] = {g_spm, g_bpe};
    for (int k = 0; k < 2; k++) {
        int32_t mb = sp_vocab_max_token_bytes(vs[k]);
        CHECK(mb > 0, "vocab %d: no byte bound", k);
        char buf[1024];
        for (int32_t id = 0; id < sp_vocab_n_tokens(vs[k]); id++) {
            int n = sp_token_to_piece(vs[k], id, buf, sizeof(buf), true);
            CHECK(n <= mb, "vocab %d token %d: piece of %d bytes > %d", k, id, n, mb);
        }
        size_t len = (size_t)mb * 100 + 1;
        char *s = malloc(len);
        memset(s, 'a', len);
        int n;
        double t0 = time_s();
        int32_t *out = tokb(vs[k], s, len, 100, NULL, &n);
        double dt = time_s() - t0;
        CHECK(!out && n <= -101 && n >= -(int)len, "vocab %d: %zu bytes, n_max 100 -> %d", k, len,
              n);
        CHECK(dt < 0.01, "vocab %d: the byte bound took %.4f s", k, dt);
        free(s);
    }
}

/* A text well within the byte bound but over n_max: tokenizing stops soon
 * after n_max tokens (both the count it reports and the time it takes say
 * it did not tokenize the rest). */
static void test_bounded_stops(void) {
    if (!g_spm || !g_bpe) return;
    size_t blen;
    char *one = big_text(&blen);
    size_t len = 10 * blen;
    char *s = malloc(len);
    for (int i = 0; i < 10; i++) memcpy(s + (size_t)i * blen, one, blen);
    free(one);
    const sp_vocab *vs[2] = {g_spm, g_bpe};
    for (int k = 0; k < 2; k++) {
        int n_max = (int)(len / (size_t)sp_vocab_max_token_bytes(vs[k])) + 1; /* passes the bound */
        int nf;
        double t0 = time_s();
        int32_t *full = tok(vs[k], s, len, false, false, &nf);
        double t_full = time_s() - t0, t_b = 1e9;
        free(full);
        CHECK(nf > 4 * n_max, "vocab %d: %d tokens, n_max %d: not a test", k, nf, n_max);
        int nb = 0;
        for (int rep = 0; rep < 3; rep++) { /* the best of three: a busy machine */
            t0 = time_s();
            int32_t *b = tokb(vs[k], s, len, n_max, NULL, &nb);
            double dt = time_s() - t0;
            if (dt < t_b) t_b = dt;
            free(b);
        }
        CHECK(nb < -n_max && -nb < n_max + 4096, "vocab %d: n_max %d -> %d (of %d)", k, n_max, nb,
              nf);
        /* the SPM merges stop within a chunk; BPE still splits the whole
         * text into words first */
        CHECK(t_b < t_full / (k == 0 ? 4 : 1.5), "vocab %d: bounded %.4f s, whole %.4f s", k, t_b,
              t_full);
        printf("     %s: %zu bytes, %d tokens in %.3f s; n_max %d refused in %.4f s\n",
               k ? "bpe" : "spm", len, nf, t_full, n_max, t_b);
    }
    free(s);
}

/* SPM text is cut into chunks at places no merge can cross: the tokens are
 * those of one merge loop over the whole text. */
static void test_spm_chunks(void) {
    if (!g_spm) return;
    size_t blen;
    char *big = big_text(&blen);
    /* plus runs where cuts are rare: one letter, spaces, bytes */
    size_t len = blen + 3 * 20000;
    char *s = malloc(len);
    memcpy(s, big, blen);
    memset(s + blen, 'a', 20000);
    memset(s + blen + 20000, ' ', 20000);
    for (size_t i = 0; i < 20000; i++) s[blen + 40000 + i] = (char)(i * 131 + 7);
    free(big);
    /* and the bundled model's vocabulary, when the test runs from the root */
    sp_vocab *vs[2] = {g_spm, load_vocab("models/specula-code-draft-f16.gguf")};
    for (int k = 0; k < 2; k++) {
        if (!vs[k]) continue;
        int n1, n2;
        int32_t *cut = tok(vs[k], s, len, true, true, &n1);
        size_t keep = tok_spm_cut_after;
        tok_spm_cut_after = SIZE_MAX;
        int32_t *whole = tok(vs[k], s, len, true, true, &n2);
        tok_spm_cut_after = keep;
        CHECK(n1 == n2 && n1 > 0 && memcmp(cut, whole, (size_t)n1 * sizeof(int32_t)) == 0,
              "vocab %d: cut %d tokens, whole %d", k, n1, n2);
        free(cut);
        free(whole);
    }
    vocab_free(vs[1]);
    free(s);
}

/* Special tokens only inside spans: CONTROL text outside stays text, as
 * with parse_special false, USER_DEFINED text still matches unless listed
 * as markup, an occurrence that straddles a span's edge is text; without
 * special text outside the spans, the result is parse_special's. */
static void test_special_spans(void) {
    if (!g_spm || !g_bpe) return;
    /* BPE: the second <|endoftext|> is in a span, the first is not */
    const char *t = "a<|endoftext|>b<|endoftext|>c";
    sp_span sp[1] = {{15, 13}};
    sp_tok_opts o = {.spans = sp, .n_spans = 1};
    int n, n1, n2;
    int32_t *got = tokb(g_bpe, t, strlen(t), 1000, &o, &n);
    int32_t *plain = tok(g_bpe, t, 15, false, false, &n1);
    int32_t *c = tok(g_bpe, "c", 1, false, false, &n2);
    CHECK(n == n1 + 1 + n2 && got && memcmp(got, plain, (size_t)n1 * sizeof(int32_t)) == 0 &&
              got[n1] == 50256 && got[n1 + 1] == c[0],
          "[%s] want [%s] 50256 [%s]", ids_str(got, n), ids_str(plain, n1), ids_str(c, n2));
    free(got);
    free(plain);
    free(c);
    /* a span that holds only part of the token's text: text */
    sp[0] = (sp_span){15, 12};
    got = tokb(g_bpe, t, strlen(t), 1000, &o, &n);
    plain = tok(g_bpe, t, strlen(t), false, false, &n1);
    CHECK(n == n1 && memcmp(got, plain, (size_t)n * sizeof(int32_t)) == 0, "straddling: [%s]",
          ids_str(got, n));
    free(got);
    free(plain);
    /* no special text outside the spans: parse_special's tokens (SPM) */
    const char *u = "<s>[INST] hi there [/INST] ok</s>";
    sp_span us[3] = {{0, 10}, {18, 9}, {29, 4}};
    o = (sp_tok_opts){.add_special = true, .spans = us, .n_spans = 3};
    got = tokb(g_spm, u, strlen(u), 1000, &o, &n);
    plain = tok(g_spm, u, strlen(u), true, true, &n1);
    CHECK(n == n1 && n > 0 && memcmp(got, plain, (size_t)n * sizeof(int32_t)) == 0,
          "[%s] want [%s]", ids_str(got, n), ids_str(plain, n1));
    free(got);
    free(plain);
    /* no spans at all: nothing CONTROL matches (the same as parse_special false) */
    o = (sp_tok_opts){.spans = us, .n_spans = 0};
    got = tokb(g_spm, u, strlen(u), 1000, &o, &n);
    plain = tok(g_spm, u, strlen(u), false, false, &n1);
    CHECK(n == n1 && memcmp(got, plain, (size_t)n * sizeof(int32_t)) == 0, "no spans: [%s]",
          ids_str(got, n));
    free(got);
    free(plain);
}

/* -------------------------------------------------------------- load errors */

static char g_tmp[256];

/* Writes a small tokenizer GGUF; the callback adds or overrides keys. */
static sp_vocab *load_crafted(const char *model, int n_tok, void (*extra)(gguf_writer *)) {
    gguf_writer *w = gguf_writer_create();
    gguf_set_str(w, "general.architecture", "llama");
    gguf_set_str(w, "tokenizer.ggml.model", model);
    gguf_str *toks = calloc((size_t)n_tok, sizeof(*toks));
    char(*names)[16] = calloc((size_t)n_tok, 16);
    float *scores = calloc((size_t)n_tok, sizeof(float));
    for (int i = 0; i < n_tok; i++) {
        snprintf(names[i], 16, "%c%d", 'a' + i % 26, i);
        toks[i].p = names[i];
        toks[i].n = strlen(names[i]);
    }
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n_tok);
    gguf_set_arr(w, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, scores, (uint64_t)n_tok);
    gguf_str merges[1] = {{"a b", 3}};
    gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    if (extra) extra(w);
    int rc = gguf_writer_write(w, g_tmp, g_err, sizeof(g_err));
    gguf_writer_free(w);
    free(toks);
    free(names);
    free(scores);
    if (rc != 0) {
        fprintf(stderr, "  cannot write %s: %s\n", g_tmp, g_err);
        return NULL;
    }
    g_err[0] = 0;
    return load_vocab(g_tmp);
}

static void x_bad_scores(gguf_writer *w) {
    float s[3] = {0};
    gguf_set_arr(w, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, s, 3);
}
static void x_bad_bos(gguf_writer *w) { gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 99); }
static void x_bad_pre(gguf_writer *w) { gguf_set_str(w, "tokenizer.ggml.pre", "nonesuch"); }
static void x_bad_types(gguf_writer *w) {
    int32_t t[2] = {1, 1};
    gguf_set_arr(w, "tokenizer.ggml.token_type", SP_GGUF_INT32, t, 2);
}
static void x_dup(gguf_writer *w) {
    gguf_str t[3] = {{"x", 1}, {"y", 1}, {"x", 1}};
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", t, 3);
    float s[3] = {0};
    gguf_set_arr(w, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, s, 3);
}
static const char *g_pre;
static void x_pre_named(gguf_writer *w) { gguf_set_str(w, "tokenizer.ggml.pre", g_pre); }
static void x_pre_qwen2(gguf_writer *w) { gguf_set_str(w, "tokenizer.ggml.pre", "qwen2"); }

static void test_load_errors(void) {
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/specula_tok_%d.gguf", (int)getpid());
    const struct {
        const char *model;
        void (*extra)(gguf_writer *);
        const char *msg;
    } cases[] = {
        {"bert", NULL, "unsupported tokenizer model 'bert'"},
        {"llama", x_bad_scores, "scores has 3 entries"},
        {"llama", x_bad_types, "token_type has 2 entries"},
        {"llama", x_bad_bos, "out of range"},
        {"gpt2", x_bad_pre, "unknown pre-tokenizer type 'nonesuch'"},
        {"llama", x_dup, "same text"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sp_vocab *v = load_crafted(cases[i].model, 40, cases[i].extra);
        CHECK(v == NULL && strstr(g_err, cases[i].msg), "case %zu: want error '%s', got '%s'", i,
              cases[i].msg, v ? "(loaded)" : g_err);
        vocab_free(v);
    }
    /* a GPT-2 vocabulary without merges */
    gguf_writer *w = gguf_writer_create();
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_str t[2] = {{"a", 1}, {"b", 1}};
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", t, 2);
    gguf_writer_write(w, g_tmp, g_err, sizeof(g_err));
    gguf_writer_free(w);
    sp_vocab *v = load_vocab(g_tmp);
    CHECK(v == NULL && strstr(g_err, "merges"), "missing merges: '%s'", g_err);
    vocab_free(v);
    /* every pre-tokenizer name llama.cpp knows loads (its regexes compile)
     * and tokenizes */
    static const char *pres[] = {
        "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe",
        "chatglm-bpe", "deepseek-llm", "deepseek-v3", "deepseek-coder", "falcon", "starcoder",
        "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "gpt-2", "gpt2",
        "phi-2", "phi", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
        "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "qwen2", "stablelm2",
        "megrez", "poro-chat", "bloom", "gpt3-finnish", "viking", "tekken", "chameleon", "gpt-4o",
    };
    for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]); i++) {
        g_pre = pres[i];
        v = load_crafted("gpt2", 40, x_pre_named);
        CHECK(v != NULL && strcmp(sp_vocab_pre_name(v), pres[i]) == 0, "pre '%s': %s", pres[i],
              v ? "wrong name" : g_err);
        if (v) {
            const char *s = "Hello, World! 123 4567 don't\n\n  x \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\xa6\x99";
            int n;
            int32_t *ids = tok(v, s, strlen(s), true, true, &n);
            CHECK(n >= 0, "pre '%s': tokenize failed", pres[i]);
            free(ids);
        }
        vocab_free(v);
    }
    /* small valid ones load, with the defaults for their kind */
    v = load_crafted("llama", 40, NULL);
    CHECK(v && sp_vocab_add_bos(v) && sp_vocab_bos(v) == 1 && sp_vocab_eos(v) == 2,
          "small spm: %s", v ? "bad defaults" : g_err);
    vocab_free(v);
    v = load_crafted("gpt2", 40, x_pre_qwen2);
    CHECK(v && strcmp(sp_vocab_pre_name(v), "qwen2") == 0 && !sp_vocab_add_bos(v),
          "small qwen2: %s", v ? "bad defaults" : g_err);
    if (v) { /* the merge "a b" does not exist as a token: bytes stay apart */
        int n;
        int32_t *ids = tok(v, "ab", 2, false, false, &n);
        CHECK(n >= 0, "tokenize with a crafted vocab");
        free(ids);
    }
    vocab_free(v);
    unlink(g_tmp);
}

/* A crafted vocabulary where "<x>" is USER_DEFINED: matched in plain text
 * (as llama.cpp does), but not outside the spans once listed as markup. */
static void x_user_defined(gguf_writer *w) {
    int32_t types[40];
    for (int i = 0; i < 40; i++) types[i] = 1;
    types[5] = 4; /* USER_DEFINED */
    gguf_set_arr(w, "tokenizer.ggml.token_type", SP_GGUF_INT32, types, 40);
    gguf_str toks[40];
    static char names[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], 16, "%c%d", 'a' + i % 26, i);
        toks[i] = (gguf_str){names[i], strlen(names[i])};
    }
    toks[5] = (gguf_str){"<x>", 3};
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 40);
}

static void test_user_defined_markup(void) {
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/specula_tok_%d.gguf", (int)getpid());
    sp_vocab *v = load_crafted("llama", 40, x_user_defined);
    CHECK(v, "crafted: %s", g_err);
    if (!v) return;
    const char *t = "q<x>q";
    int n;
    int32_t *a = tok(v, t, 5, false, false, &n);
    bool has = false;
    for (int i = 0; i < n; i++) has |= a[i] == 5;
    CHECK(has, "USER_DEFINED <x> in plain text: [%s]", ids_str(a, n));
    free(a);
    int32_t markup[1] = {5};
    sp_tok_opts o = {.spans = NULL, .n_spans = 0, .markup_ids = markup, .n_markup_ids = 1};
    sp_span none[1];
    o.spans = none;
    a = tokb(v, t, 5, 100, &o, &n);
    has = false;
    for (int i = 0; i < n; i++) has |= a[i] == 5;
    CHECK(!has && n > 0, "listed as markup, outside spans: [%s]", ids_str(a, n));
    free(a);
    sp_span in[1] = {{1, 3}};
    o.spans = in;
    o.n_spans = 1;
    a = tokb(v, t, 5, 100, &o, &n);
    has = false;
    for (int i = 0; i < n; i++) has |= a[i] == 5;
    CHECK(has, "listed as markup, inside a span: [%s]", ids_str(a, n));
    free(a);
    vocab_free(v);
    unlink(g_tmp);
}

/* A byte-level vocabulary with tokens for four characters only. */
static void x_four_chars(gguf_writer *w) {
    gguf_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_str toks[40];
    static char names[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], 16, "%c%d", 'a' + i % 26, i);
        toks[i] = (gguf_str){names[i], strlen(names[i])};
    }
    toks[0] = (gguf_str){"a", 1};
    toks[1] = (gguf_str){"b", 1};
    toks[2] = (gguf_str){"c", 1};
    toks[3] = (gguf_str){"1", 1};
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 40);
}

/* A vocabulary that drops bytes it has no token for gives no byte bound;
 * tokenizing still stops past n_max and agrees with sp_tokenize. */
static void test_bounded_no_byte_bound(void) {
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/specula_tok_%d.gguf", (int)getpid());
    sp_vocab *v = load_crafted("gpt2", 40, x_four_chars);
    CHECK(v, "crafted: %s", g_err);
    if (!v) return;
    CHECK(sp_vocab_max_token_bytes(v) == 0, "bound %d", sp_vocab_max_token_bytes(v));
    size_t len = 200000;
    char *s = malloc(len);
    for (size_t i = 0; i < len; i++) s[i] = "ab1 c!"[i % 6]; /* ' ', '!': dropped */
    int nf, nb;
    int32_t *full = tok(v, s, len, false, false, &nf);
    int32_t *b = tokb(v, s, len, nf, NULL, &nb);
    CHECK(nf > 100 && nb == nf && memcmp(b, full, (size_t)nf * sizeof(int32_t)) == 0,
          "%d vs %d", nb, nf);
    free(b);
    b = tokb(v, s, len, 100, NULL, &nb);
    CHECK(!b && nb < -100 && -nb < nf / 2, "n_max 100 -> %d of %d", nb, nf);
    free(full);
    free(s);
    vocab_free(v);
    unlink(g_tmp);
}

/* ------------------------------------------------------------- any architecture */

static char *g_names[256];
static int g_n_names;

static void x_arch_falcon(gguf_writer *w) { gguf_set_str(w, "general.architecture", "falcon"); }
static void x_arch_bert(gguf_writer *w) { gguf_set_str(w, "general.architecture", "bert"); }

/* Loads path vocab_only / meta_only / fully and checks what each says of
 * it, the metadata and tensor listing, and that such a model cannot run.
 * Returns whether this build runs its architecture (-1: not loaded). */
static int check_any_arch(const char *path, const char *what, const char *text) {
    sp_model_params mp = sp_model_default_params();
    mp.vocab_only = true;
    sp_model *m = sp_model_load(path, mp, g_err, sizeof(g_err));
    if (!m && strstr(g_err, "unsupported tokenizer model")) return -1; /* counted in test_vocab_file */
    CHECK(m != NULL, "%s: vocab_only: %s", what, g_err);
    if (!m) return -1;
    const sp_model_info *h = sp_model_get_info(m);
    char arch[128] = "";
    int al = sp_model_meta_str(m, "general.architecture", arch, sizeof(arch));
    CHECK(strcmp(h->arch, al >= 0 ? arch : "") == 0, "%s: info.arch '%s', file '%s'", what,
          h->arch, arch);
    CHECK(sp_model_get_vocab(m) != NULL && h->n_vocab == sp_vocab_n_tokens(sp_model_get_vocab(m)),
          "%s: vocabulary", what);
    const bool supported = sp_model_arch_supported(m);
    /* it tokenizes (the exact ids are test_vocab_file's) */
    if (text) {
        int n;
        int32_t *ids = tok(sp_model_get_vocab(m), text, strlen(text), false, false, &n);
        CHECK(n > 0, "%s: '%s' -> %d", what, text, n);
        free(ids);
    }
    /* the metadata listing, in file order, and its bounds */
    int32_t nkv = sp_model_meta_count(m);
    CHECK(nkv > 0, "%s: %d metadata keys", what, nkv);
    bool seen_arch = al < 0;
    for (int32_t i = 0; i < nkv; i++) {
        char key[256], val[1024];
        int kl = sp_model_meta_key_by_index(m, i, key, sizeof(key));
        int vl = sp_model_meta_val_str_by_index(m, i, val, sizeof(val));
        CHECK(kl > 0 && kl == sp_model_meta_key_by_index(m, i, NULL, 0) &&
                  (kl >= (int)sizeof(key) || (size_t)kl == strlen(key)),
              "%s: key %d: %d '%s'", what, i, kl, key);
        CHECK(vl > 0 && vl == sp_model_meta_val_str_by_index(m, i, NULL, 0), "%s: value %d: %d",
              what, i, vl);
        if (!strcmp(key, "general.architecture")) {
            char want[160];
            snprintf(want, sizeof(want), "\"%s\"", arch);
            CHECK(!strcmp(val, want), "%s: general.architecture shown as %s", what, val);
            seen_arch = true;
        }
    }
    CHECK(seen_arch, "%s: general.architecture not listed", what);
    char small[4] = "xxx";
    int kl0 = sp_model_meta_key_by_index(m, 0, small, sizeof(small));
    CHECK(kl0 > 3 && strlen(small) == 3, "%s: truncated key copy: %d '%s'", what, kl0, small);
    CHECK(sp_model_meta_key_by_index(m, nkv, small, sizeof(small)) == -1 &&
              sp_model_meta_key_by_index(m, -1, small, sizeof(small)) == -1 &&
              sp_model_meta_val_str_by_index(m, nkv, small, sizeof(small)) == -1 &&
              sp_model_meta_val_str_by_index(m, -1, NULL, 0) == -1,
          "%s: metadata index out of range", what);
    int64_t nt = sp_model_n_tensors(m);
    sp_tensor_desc td;
    for (int64_t i = 0; i < nt; i++)
        CHECK(sp_model_tensor_desc(m, i, &td) == 0 && td.name && td.type && td.n_dims >= 1,
              "%s: tensor %lld", what, (long long)i);
    CHECK(sp_model_tensor_desc(m, nt, &td) == -1 && sp_model_tensor_desc(m, -1, &td) == -1,
          "%s: tensor index out of range", what);
    /* a vocab-only model cannot run */
    sp_context *c = sp_context_create(m, sp_context_default_params(), g_err, sizeof(g_err));
    CHECK(c == NULL, "%s: a context on a vocab-only model", what);
    sp_context_free(c);
    sp_engine *e = sp_engine_create(m, sp_engine_default_params(), g_err, sizeof(g_err));
    CHECK(e == NULL && strstr(g_err, "without its weights"), "%s: an engine on a vocab-only model: %s",
          what, e ? "created" : g_err);
    sp_engine_free(e);
    sp_model_free(m);
    /* meta_only says the same */
    mp.vocab_only = false;
    mp.meta_only = true;
    m = sp_model_load(path, mp, g_err, sizeof(g_err));
    CHECK(m && !strcmp(sp_model_get_info(m)->arch, arch) && sp_model_get_vocab(m) &&
              sp_model_arch_supported(m) == supported,
          "%s: meta_only: %s", what, m ? "differs" : g_err);
    sp_model_free(m);
    /* a full load refuses an architecture this build does not run, by name */
    m = sp_model_load(path, sp_model_default_params(), g_err, sizeof(g_err));
    char want[200];
    snprintf(want, sizeof(want), "architecture '%s' is not supported", arch);
    if (!supported)
        CHECK(!m && strstr(g_err, want), "%s: full load: want '%s', got '%s'", what, want,
              m ? "(loaded)" : g_err);
    else if (nt == 0) /* a vocabulary-only file of a supported architecture */
        CHECK(!m && !strstr(g_err, "not supported"), "%s: full load: '%s'", what,
              m ? "(loaded)" : g_err);
    sp_model_free(m);
    return supported;
}

/* tokenize works on any GGUF that carries a tokenizer, whatever its
 * architecture (or none); info can describe it (meta_only); run refuses it
 * (a full load names the architecture); a tokenizer type this build does
 * not implement is refused by name, and meta_only still opens the file. */
static void test_any_architecture(void) {
    int n_unsupported = 0;
    for (int i = 0; i < g_n_names; i++)
        if (check_any_arch(g_names[i], strrchr(g_names[i], '/') + 1, "Hello world") == 0)
            n_unsupported++;
    /* the reference has gpt-neox and baichuan (../shared/reference/README, vocab/) */
    CHECK(n_unsupported >= 2, "%d reference vocabularies of architectures this build does not run",
          n_unsupported);

    snprintf(g_tmp, sizeof(g_tmp), "/tmp/specula_tok_%d.gguf", (int)getpid());
    vocab_free(load_crafted("gpt2", 40, x_arch_falcon));
    CHECK(check_any_arch(g_tmp, "crafted falcon/gpt2", NULL) == 0, "crafted falcon: %s", g_err);
    /* no general.architecture at all: the tokenizer still loads */
    gguf_writer *w = gguf_writer_create();
    gguf_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_str t[4] = {{"<unk>", 5}, {"a", 1}, {"b", 1}, {"\xe2\x96\x81", 3}};
    float sc[4] = {0, -1, -2, -3};
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", t, 4);
    gguf_set_arr(w, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, sc, 4);
    int rc = gguf_writer_write(w, g_tmp, g_err, sizeof(g_err));
    gguf_writer_free(w);
    REQUIRE(rc == 0, "cannot write %s: %s", g_tmp, g_err);
    sp_model_params mp = sp_model_default_params();
    mp.vocab_only = true;
    sp_model *m = sp_model_load(g_tmp, mp, g_err, sizeof(g_err));
    CHECK(m && !strcmp(sp_model_get_info(m)->arch, "") && !sp_model_arch_supported(m) &&
              sp_vocab_n_tokens(sp_model_get_vocab(m)) == 4,
          "no architecture, vocab_only: %s", m ? "wrong" : g_err);
    sp_model_free(m);
    m = sp_model_load(g_tmp, sp_model_default_params(), g_err, sizeof(g_err));
    CHECK(!m && strstr(g_err, "general.architecture"), "no architecture, full load: %s",
          m ? "(loaded)" : g_err);
    sp_model_free(m);
    /* a tokenizer type that is not implemented: refused by name
     * (vocab_only), described without a vocabulary (meta_only) */
    vocab_free(load_crafted("bert", 40, x_arch_bert));
    m = sp_model_load(g_tmp, mp, g_err, sizeof(g_err));
    CHECK(!m && strstr(g_err, "unsupported tokenizer model 'bert'"), "bert vocab_only: %s",
          m ? "(loaded)" : g_err);
    sp_model_free(m);
    mp.vocab_only = false;
    mp.meta_only = true;
    m = sp_model_load(g_tmp, mp, g_err, sizeof(g_err));
    CHECK(m && !sp_model_get_vocab(m) && sp_model_get_info(m)->n_vocab == 0 &&
              !strcmp(sp_model_get_info(m)->arch, "bert") && !sp_model_arch_supported(m) &&
              sp_model_meta_count(m) > 0,
          "bert meta_only: %s", m ? "wrong" : g_err);
    if (m) {
        char *buf = NULL;
        size_t bl = 0;
        FILE *f = open_memstream(&buf, &bl);
        sp_model_print_info(m, 512, f);
        fclose(f);
        CHECK(buf && strstr(buf, "bert (not supported") && strstr(buf, "unsupported tokenizer model"),
              "bert described as: %s", buf ? buf : "");
        free(buf);
    }
    sp_model_free(m);
    unlink(g_tmp);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends the paths of dir's *.gguf files to names[*nn..], sorted. */
static int list_gguf(const char *dir, char **names, int nn, int max) {
    DIR *dp = opendir(dir);
    const int first = nn;
    if (dp) {
        struct dirent *e;
        while ((e = readdir(dp)) && nn < max) {
            size_t l = strlen(e->d_name);
            if (l > 5 && strcmp(e->d_name + l - 5, ".gguf") == 0) {
                char p[1024];
                snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
                names[nn++] = strdup(p);
            }
        }
        closedir(dp);
    }
    qsort(names + first, (size_t)(nn - first), sizeof(names[0]), cmp_str);
    return nn;
}

/* The repository's own vocabularies (tests/data/vocab/README.md). */
#define DATA_VOCAB_DIR "tests/data/vocab"

int main(void) {
    /* one case per reference vocabulary, then one per vocabulary of the
     * repository's tests/data/vocab (the tests run from the root) */
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/vocab", t_ref_dir());
    char *names[256];
    int nn = list_gguf(dir, names, 0, 256);
    if (nn == 0) {
        t_case_failures = 0;
        CHECK(0, "no vocabularies in %s", dir);
        t_cases_failed++;
        printf("FAIL vocab files\n");
    }
    const int n_ref = nn;
    nn = list_gguf(DATA_VOCAB_DIR, names, nn, 256);
    if (nn == n_ref) {
        t_case_failures = 0;
        CHECK(0, "no vocabularies in %s", DATA_VOCAB_DIR);
        t_cases_failed++;
        printf("FAIL data vocab files\n");
    }
    for (int i = 0; i < nn; i++)
        RUN_NAMED(test_vocab_file, names[i], i < n_ref ? strrchr(names[i], '/') + 1 : names[i]);
    for (int i = 0; i < nn; i++) g_names[i] = names[i];
    g_n_names = nn;
    RUN(test_any_architecture);
    for (int i = 0; i < nn; i++) free(names[i]);
    RUN(test_generations);

    g_spm = load_ref(SPM_VOCAB);
    g_bpe = load_ref(BPE_VOCAB);
    RUN(test_properties);
    RUN(test_pieces);
    RUN(test_special_tokens);
    RUN(test_edge_cases);
    RUN(test_big_text);
    RUN(test_detok_stream);
    RUN(test_bounded_equal);
    RUN(test_bounded_bytes);
    RUN(test_bounded_stops);
    RUN(test_spm_chunks);
    RUN(test_special_spans);
    RUN(test_load_errors);
    RUN(test_user_defined_markup);
    RUN(test_bounded_no_byte_bound);
    vocab_free(g_spm);
    vocab_free(g_bpe);
    TEST_END();
}
