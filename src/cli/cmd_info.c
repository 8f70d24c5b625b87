/* cmd_info.c: `specula info`: what a model file holds and what running it
 * costs; for a file this build cannot run (another architecture), what it
 * holds (metadata, tokenizer, tensors) and why it cannot run. */
#include <inttypes.h>
#include <string.h>

#include "cli/cli.h"
#include "common.h"

int cmd_info(int argc, char **argv) {
    const char *model = cli_default_model();
    bool verbose = false;
    long n_ctx = 4096;
    bool model_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = cli_alias(argv[i]);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: specula info [-m MODEL] [-c N_CTX] [-v]\n"
                   "  -m MODEL  GGUF model; also --model MODEL, or MODEL alone (default: %s)\n"
                   "  -c N_CTX  the context to cost the KV cache for (default 4096)\n"
                   "  -v        also list every metadata key and tensor\n"
                   "Architectures this build runs: %s.\n",
                   model ? model : "none found", sp_arch_names());
            return 0;
        } else if (!strcmp(a, "-m") && i + 1 < argc) {
            model = argv[++i], model_given = true;
        } else if (a[0] != '-' && !model_given) {
            model = a, model_given = true;
        } else if (!strcmp(a, "-c") && i + 1 < argc) {
            if (!parse_long(argv[++i], 1, 1 << 24, &n_ctx)) {
                fprintf(stderr, "specula info: invalid context size '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "-v")) {
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
    /* A full load first (it validates the weights). If that fails, the
     * file may still be one this build cannot run by design (another
     * architecture, or a vocabulary-only file without tensors): then show
     * what it holds, and why it cannot run. A broken model of a supported
     * architecture stays an error. */
    char err[512];
    sp_model *m = sp_model_load(model, sp_model_default_params(), err, sizeof(err));
    bool runnable = m != NULL;
    if (!m) {
        char err2[512];
        sp_model_params mp = sp_model_default_params();
        mp.meta_only = true;
        m = sp_model_load(model, mp, err2, sizeof(err2));
        if (m && sp_model_arch_supported(m) && sp_model_n_tensors(m) > 0) {
            sp_model_free(m);
            m = NULL;
        }
        if (!m) {
            fprintf(stderr, "specula: %s\n", err);
            return 1;
        }
    }
    printf("model:         %s\n", model);
    sp_model_print_info(m, (int)n_ctx, stdout);
    if (!runnable) printf("cannot run:    %s\n", err);
    if (verbose) {
        char key[256], val[1024];
        printf("\nmetadata:\n");
        for (int32_t i = 0; i < sp_model_meta_count(m); i++) {
            sp_model_meta_key_by_index(m, i, key, sizeof(key));
            sp_model_meta_val_str_by_index(m, i, val, sizeof(val));
            printf("  %-40s %s\n", key, val);
        }
        printf("\ntensors:\n");
        for (int64_t i = 0; i < sp_model_n_tensors(m); i++) {
            sp_tensor_desc t;
            if (sp_model_tensor_desc(m, i, &t) != 0) break;
            printf("  %-32s %-5s [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] %" PRIu64
                   " bytes\n",
                   t.name, t.type, t.ne[0], t.ne[1], t.ne[2], t.ne[3], t.nbytes);
        }
    }
    sp_model_free(m);
    return 0;
}
