/* bench_fill.h: random but well-formed weight blocks for the kernel
 * benchmarks (kbench.c, tilebench.c): random bytes, then every block's
 * scales set small and finite. Header-only: each benchmark is one file. */
#ifndef SPECULA_BENCH_FILL_H
#define SPECULA_BENCH_FILL_H

#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

static uint64_t rs = 88172645463325252ull;
static inline uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* random but well-formed blocks (quantizing 1e9 values would take minutes) */
static void fill_weights(tensor_type t, uint8_t *w, size_t bytes) {
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t v = rnd();
        memcpy(w + i, &v, 8);
    }
    const size_t bb = type_info(t)->block_bytes;
    for (size_t off = 0; off + bb <= bytes; off += bb) {
        const f16_t d = f32_to_f16(0.001f + (rnd() % 1000) * 1e-6f);
        if (t == SP_TYPE_Q8_0) {
            block_q8_0 *b = (block_q8_0 *)(w + off);
            b->d = d;
            for (int j = 0; j < 32; j++)
                if (b->qs[j] == -128) b->qs[j] = -127;
        } else if (t == SP_TYPE_Q4_K) {
            block_q4_K *b = (block_q4_K *)(w + off);
            b->d = d;
            b->dmin = d;
        } else if (t == SP_TYPE_Q6_K) {
            ((block_q6_K *)(w + off))->d = d;
        } else if (t == SP_TYPE_Q4_0) {
            ((block_q4_0 *)(w + off))->d = d;
        }
    }
    if (t == SP_TYPE_F16 || t == SP_TYPE_BF16) {
        uint16_t *h = (uint16_t *)w;
        for (size_t i = 0; i < bytes / 2; i++)
            h[i] = t == SP_TYPE_F16 ? f32_to_f16((float)((int)(rnd() % 2001) - 1000) * 1e-5f)
                                    : f32_to_bf16((float)((int)(rnd() % 2001) - 1000) * 1e-5f);
    }
}

#endif
