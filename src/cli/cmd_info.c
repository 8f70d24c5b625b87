/* cmd_info.c: `specula info`: what a model file holds and what running it
 * costs. */
#include <inttypes.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "model/model.h"

int cmd_info(int argc, char **argv) {
    const char *model = cli_default_model();
    bool verbose = false;
    long n_ctx = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: specula info [-m MODEL] [-c N_CTX] [-v]\n"
                   "  -v  also list every metadata key and tensor\n");
            return 0;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(argv[i], "-c") && i + 1 < argc) {
            if (!cli_int(argv[++i], 1, 1 << 24, &n_ctx)) {
                fprintf(stderr, "specula info: invalid context size '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "-v")) {
            verbose = true;
        } else {
            fprintf(stderr, "specula info: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "specula info: no model given (-m) and no default model found\n");
        return 2;
    }
    char err[512];
    sp_model *m = sp_model_load(model, sp_model_default_params(), err, sizeof(err));
    if (!m) {
        fprintf(stderr, "specula: %s\n", err);
        return 1;
    }
    printf("model:         %s\n", model);
    sp_model_print_info(m, (int)n_ctx, stdout);
    if (verbose) {
        const sp_gguf *g = m->gguf;
        char buf[256];
        printf("\nmetadata:\n");
        for (int64_t i = 0; i < sp_gguf_n_kv(g); i++) {
            sp_gguf_kv_format(g, i, buf, sizeof(buf));
            printf("  %-40s %s\n", sp_gguf_key(g, i), buf);
        }
        printf("\ntensors:\n");
        for (int64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
            const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
            printf("  %-32s %-5s [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] %zu bytes\n",
                   t->name, sp_type_info(t->type) ? sp_type_info(t->type)->name : "?", t->ne[0],
                   t->ne[1], t->ne[2], t->ne[3], t->nbytes);
        }
    }
    sp_model_free(m);
    return 0;
}
