/* ik_tok: tokenizer test vectors from ik_llama.cpp, through its C API.
 *
 *   ik_tok VOCAB.gguf [INP [OUT]]
 *
 * Loads VOCAB.gguf vocab-only, reads the test strings of INP (default
 * VOCAB.gguf.inp; every string is followed by "\n__ggml_vocab_test__\n",
 * as in llama.cpp's models/ggml-vocab-*.gguf.inp) and writes OUT (default
 * VOCAB.gguf.out, "-" for standard output): one line per string, its token
 * ids, each preceded by a space (the format of llama.cpp's .out files), tokenized without adding special tokens (no BOS) and
 * without parsing special-token text: test-tokenizer-0's procedure.
 * Built by make_golden.sh (ik_tok is built next to ik_ref). */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) { fclose(f); free(b); return NULL; }
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fputs("usage: ik_tok VOCAB.gguf [INP [OUT]]\n", stderr);
        return 2;
    }
    char inp_path[4096], out_path[4096];
    snprintf(inp_path, sizeof(inp_path), "%s", argc > 2 ? argv[2] : "");
    if (argc <= 2) snprintf(inp_path, sizeof(inp_path), "%s.inp", argv[1]);
    if (argc > 3) snprintf(out_path, sizeof(out_path), "%s", argv[3]);
    else snprintf(out_path, sizeof(out_path), "%s.out", argv[1]);

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "ik_tok: cannot load %s\n", argv[1]); return 1; }

    size_t len;
    char *inp = slurp(inp_path, &len);
    if (!inp) { fprintf(stderr, "ik_tok: cannot read %s\n", inp_path); return 1; }
    FILE *out = strcmp(out_path, "-") ? fopen(out_path, "wb") : stdout;
    if (!out) { fprintf(stderr, "ik_tok: cannot write %s\n", out_path); return 1; }

    static const char SEP[] = "\n__ggml_vocab_test__\n";
    const size_t sl = sizeof(SEP) - 1;
    size_t p = 0;
    int n_str = 0;
    while (p < len) {
        char *sep = memmem(inp + p, len - p, SEP, sl);
        if (!sep) { fprintf(stderr, "ik_tok: text after the last separator\n"); return 1; }
        size_t n = (size_t)(sep - (inp + p));
        int cap = (int)n * 2 + 16;
        llama_token *t = malloc(sizeof(llama_token) * (size_t)cap);
        int k = llama_tokenize(model, inp + p, (int)n, t, cap, false, false);
        if (k < 0) { fprintf(stderr, "ik_tok: tokenize failed on string %d\n", n_str + 1); return 1; }
        for (int i = 0; i < k; i++) fprintf(out, " %d", t[i]); /* as llama.cpp's .out files */
        fputc('\n', out);
        free(t);
        p += n + sl;
        n_str++;
    }
    if (out != stdout) fclose(out);
    fprintf(stderr, "ik_tok: %d strings -> %s\n", n_str, out_path);
    free(inp);
    llama_free_model(model);
    llama_backend_free();
    return 0;
}
