/* cmd_tokenize.c: `specula tokenize`: the ids of a text as a JSON array. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void tok_usage(FILE *f) {
    fprintf(f, "usage: specula tokenize [-m MODEL] [--no-bos] [--no-parse-special] (-f FILE | TEXT)\n"
               "  -m MODEL            GGUF model; also --model MODEL (a plain argument is the text)\n"
               "  -f FILE             tokenize the file's bytes (\"-\": standard input)\n"
               "  --no-bos            add no special tokens at all (no BOS/EOS)\n"
               "  --no-parse-special  treat special-token text as plain text\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = cli_default_model(), *file = NULL, *text = NULL;
    bool add_special = true, parse_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = cli_alias(argv[i]);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tok_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "-f")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "specula tokenize: %s needs a value\n", a);
                return 2;
            }
            if (a[1] == 'm') model = argv[++i];
            else file = argv[++i];
        } else if (!strcmp(a, "--no-bos")) {
            add_special = false;
        } else if (!strcmp(a, "--no-parse-special")) {
            parse_special = false;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "specula tokenize: unknown option '%s'\n", a);
            tok_usage(stderr);
            return 2;
        } else if (!text) {
            text = a;
        } else {
            fprintf(stderr, "specula tokenize: give the text as one argument (quote it)\n");
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "specula tokenize: no model given (-m) and no default model found\n");
        return 2;
    }
    if (!file == !text) {
        fprintf(stderr, "specula tokenize: give exactly one of -f FILE or TEXT\n");
        return 2;
    }
    size_t len;
    char *buf;
    if (file) {
        buf = cli_read_file(file, &len);
        if (!buf) return 1;
    } else {
        len = strlen(text);
        buf = strdup(text);
        if (!buf) return 1;
    }
    char err[512];
    sp_model_params mp = sp_model_default_params();
    mp.vocab_only = true;
    sp_model *m = sp_model_load(model, mp, err, sizeof(err));
    if (!m) {
        fprintf(stderr, "specula: %s\n", err);
        free(buf);
        return 1;
    }
    const sp_vocab *v = sp_model_get_vocab(m);
    int n = sp_tokenize(v, buf, len, NULL, 0, add_special, parse_special);
    sp_token *ids = NULL;
    int rc = 1;
    if (n != SP_TOKENIZE_FAILED) { /* the one value that is not -(count) */
        if (n < 0) n = -n;
        ids = malloc(((size_t)n + 1) * sizeof(sp_token));
        if (ids) n = sp_tokenize(v, buf, len, ids, n, add_special, parse_special);
    }
    if (!ids || n < 0) {
        fprintf(stderr, "specula: out of memory while tokenizing\n");
    } else {
        printf("[");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]\n");
        rc = 0;
    }
    free(ids);
    free(buf);
    sp_model_free(m);
    return rc;
}
