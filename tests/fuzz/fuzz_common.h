/* fuzz_common.h: what the fuzz targets share: property checks that abort
 * (libFuzzer reports an abort as a crash; the regression replay counts it
 * as a failure), a UTF-8 validity check, and the reference vocabularies,
 * loaded once per process.
 *
 * Every target is also compiled into tests/fuzz/test_fuzz_regress.c, which
 * includes all of them into one file; so the helpers here are static inline
 * behind an include guard, and each target prefixes its own statics. */
#ifndef SP_FUZZ_COMMON_H
#define SP_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* A violated property: say which and abort, so the input is kept as a
 * crash. */
#define FZ_ASSERT(cond)                                                               \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz property failed %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                  \
        }                                                                             \
    } while (0)

static inline bool fz_valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int l = utf8_len(u + i, n - i);
        if (!l) return false;
        i += (size_t)l;
    }
    return true;
}

/* The vocabularies the tokenizer-facing targets run on: 0 = SentencePiece
 * (llama.cpp's Llama 2 test vocabulary, or the bundled model's), 1 = byte-
 * level BPE (GPT-2). Found under $SPECULA_REF_DIR (default
 * ../shared/reference, relative to the project root, where make runs). A
 * missing one is NULL; the targets then skip what needs it. */
static sp_vocab *fz_vocabs[2];
static bool fz_vocabs_loaded;

static inline sp_vocab *fz_load_vocab_file(const char *path) {
    char err[512];
    gguf_file *g = gguf_open(path, err, sizeof(err));
    if (!g) return NULL;
    sp_vocab *v = vocab_load(g, err, sizeof(err));
    gguf_close(g);
    return v;
}

static inline void fz_load_vocabs(void) {
    if (fz_vocabs_loaded) return;
    fz_vocabs_loaded = true;
    const char *ref = getenv("SPECULA_REF_DIR");
    if (!ref || !*ref) ref = "../shared/reference";
    char path[1024];
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-spm.gguf", ref);
    fz_vocabs[0] = fz_load_vocab_file(path);
    if (!fz_vocabs[0]) fz_vocabs[0] = fz_load_vocab_file("models/specula-code-draft-f16.gguf");
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-gpt-2.gguf", ref);
    fz_vocabs[1] = fz_load_vocab_file(path);
    if (!fz_vocabs[0] && !fz_vocabs[1])
        fprintf(stderr, "fuzz: no vocabulary found under %s/vocab (set SPECULA_REF_DIR); "
                        "tokenizer checks are skipped\n", ref);
}

/* Detokenizes toks[n] with the streaming detokenizer as the server does and
 * checks what it promises: every chunk is valid UTF-8 and fits the buffer
 * the header says is always enough. Returns the total bytes emitted. */
static inline size_t fz_detok_stream(const sp_vocab *v, const int32_t *toks, size_t n) {
    char buf[4096];
    sp_detok d;
    sp_detok_init(&d);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int k = sp_detok_push(v, &d, toks[i], buf, sizeof(buf));
        FZ_ASSERT(k >= 0 && k < (int)sizeof(buf));
        FZ_ASSERT(fz_valid_utf8(buf, (size_t)k));
        FZ_ASSERT(buf[k] == 0);
        total += (size_t)k;
    }
    int k = sp_detok_flush(&d, buf, sizeof(buf));
    FZ_ASSERT(k >= 0 && k < (int)sizeof(buf));
    FZ_ASSERT(fz_valid_utf8(buf, (size_t)k));
    return total + (size_t)k;
}

#endif
