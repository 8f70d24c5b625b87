/* arch.c: the architecture table. A family whose block is the llama block
 * with its own switches (RoPE layout, biases, q/k norms, sandwich norms,
 * fused matrices, activation, sliding window, NoPE layers, a mixture of
 * experts for the FFN) is one row here;
 * the GGUF names are those llama.cpp's converter writes. */
#include "model/model.h"

#include <string.h>

static const model_arch ARCHS[] = {
    /* name      rope          bias   qk_norm sandwich embd_scale fused  longrope act
     *           swa_every swa_rope_base nope_every eps  rope base  moe */
    {"llama", SP_ROPE_NORM, false, false, false, false, false, false, SP_ACT_SILU, 0, 0.0f, 0, 1e-5f, 10000.0f, false},
    {"qwen2", SP_ROPE_NEOX, true, false, false, false, false, false, SP_ACT_SILU, 0, 0.0f, 0, 1e-6f, 1000000.0f, false},
    {"qwen3", SP_ROPE_NEOX, false, true, false, false, false, false, SP_ACT_SILU, 0, 0.0f, 0, 1e-6f, 1000000.0f, false},
    /* Gemma 3: five sliding layers (local base 10000) to one global */
    {"gemma3", SP_ROPE_NEOX, false, true, true, true, false, false, SP_ACT_GELU, 6, 10000.0f, 0, 1e-6f, 1000000.0f, false},
    /* Phi-3/3.5/4-mini: every layer slides where the file sets a window */
    {"phi3", SP_ROPE_NEOX, false, false, false, false, true, true, SP_ACT_SILU, 1, 0.0f, 0, 1e-5f, 10000.0f, false},
    /* SmolLM3: every fourth layer without RoPE */
    {"smollm3", SP_ROPE_NORM, false, false, false, false, false, false, SP_ACT_SILU, 0, 0.0f, 4, 1e-6f, 10000.0f, false},
    /* Qwen3 with a mixture of experts (Qwen3-30B-A3B, 235B-A22B) */
    {"qwen3moe", SP_ROPE_NEOX, false, true, false, false, false, false, SP_ACT_SILU, 0, 0.0f, 0, 1e-6f, 1000000.0f, true},
};

const model_arch *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof(ARCHS) / sizeof(ARCHS[0]); i++)
        if (strcmp(ARCHS[i].name, name) == 0) return &ARCHS[i];
    return NULL;
}

const char *sp_arch_names(void) { return "llama, qwen2, qwen3, gemma3, phi3, smollm3, qwen3moe"; }
