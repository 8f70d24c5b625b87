/* ops.h: the non-matmul operations of the forward pass (attention over the
 * KV interface, normalization, RoPE, activation), with a plain-C reference
 * and an AVX2/F16C/FMA variant chosen at run time.
 *
 * Dimension legend: D head_dim, n_pos positions attended to.
 */
#ifndef SP_OPS_H
#define SP_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv.h"

typedef struct {
    /* out[D] = softmax(scale * q.K^T) V over positions [0, n_pos) of seq for
     * KV head g. Mirrors llama.cpp's non-flash path: with an f16 KV store, q
     * and the probabilities are rounded to f16 before their products.
     * scores must hold n_pos floats; q16 D halves (scratch). */
    void (*attn_head)(const float *q, sp_kv *kv, int32_t layer, int32_t seq, int32_t g,
                      int32_t D, int32_t n_pos, float scale, float *scores, uint16_t *q16,
                      float *out);
    /* y[i] = silu(g[i]) * u[i] */
    void (*swiglu)(int64_t n, const float *g, const float *u, float *y);
} sp_fwd_ops;

/* The variant for this CPU (SPECULA_KERNELS=ref forces the reference). */
const sp_fwd_ops *sp_fwd_ops_get(void);
const sp_fwd_ops *sp_fwd_ops_ref(void);
const sp_fwd_ops *sp_fwd_ops_avx2(void); /* NULL when built without it */

/* scores[i] = exp(scores[i] - max) in place; returns 1 / their sum (the
 * softmax's normalizer, applied by the caller where it uses the weights). */
float sp_softmax_exp(float *scores, int32_t n, float max);

/* y[n] = x / rms(x) * w  (sum of squares in double, as llama.cpp) */
void sp_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

#endif
