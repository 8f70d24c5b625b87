/* ref_vocab.h: a vocabulary of the reference data (../shared/reference/
 * vocab/NAME, loaded vocabulary-only), for the grammar tests. */
#ifndef SP_TEST_REF_VOCAB_H
#define SP_TEST_REF_VOCAB_H

#include "specula.h"
#include "test.h"

/* NULL (and a line on stderr saying why) when it cannot be loaded. */
static inline sp_model *load_vocab(const char *name) {
    char path[1024], err[256];
    snprintf(path, sizeof(path), "%s/vocab/%s", t_ref_dir(), name);
    sp_model_params p = sp_model_default_params();
    p.vocab_only = true;
    sp_model *m = sp_model_load(path, p, err, sizeof(err));
    if (!m) fprintf(stderr, "  cannot load %s: %s\n", path, err);
    return m;
}

#endif
