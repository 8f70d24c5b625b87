/* arch.c: the architecture table. Adding a family whose block is the
 * llama block with a different RoPE layout or biases is one row here. */
#include "model/model.h"

#include <string.h>

static const model_arch ARCHS[] = {
    /* name     rope          qkv_bias eps    rope base */
    {"llama", SP_ROPE_NORM, false, 1e-5f, 10000.0f},
    {"qwen2", SP_ROPE_NEOX, true, 1e-6f, 1000000.0f},
};

const model_arch *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof(ARCHS) / sizeof(ARCHS[0]); i++)
        if (strcmp(ARCHS[i].name, name) == 0) return &ARCHS[i];
    return NULL;
}

const char *sp_arch_names(void) { return "llama, qwen2"; }
