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
     * KV head g. Mirrors llama.cpp's non-flash path as its CPU backend runs
     * a prompt (tinyBLAS): with an f16 KV store, q and the probabilities are
     * rounded to f16 before their products; q.k in 16 lanes over d (lane
     * d % 16, FMA in order of d) summed by ops_reduce16, times scale;
     * ops_softmax_exp; out[d] as 16 partial sums over the positions
     * p = r mod 16 (FMA in order of p) summed by ops_reduce16. Every token
     * takes this order, in any batch (llama.cpp's single-token steps take
     * another, which would make a token's logits depend on its batch).
     * scores must hold n_pos floats; q16 D halves (scratch).
     * win > 0: a sliding window, positions [max(0, n_pos - win), n_pos)
     * only (the query is at n_pos - 1 and sees the win last positions, its
     * own included, as llama.cpp's standard window); no row before the
     * window is read, so a store may have given those back. The partial
     * sums of V keep each position's residue mod 16, so a query gets the
     * same bits alone or in a run; the softmax's groups of 16 start at the
     * window's first position. win <= 0: every position. */
    void (*attn_head)(const float *q, kv_store *kv, int32_t layer, int32_t seq, int32_t g,
                      int32_t D, int32_t n_pos, int32_t win, float scale, float *scores, uint16_t *q16,
                      float *out);
    /* The same for the nq x nh queries of one sequence that share KV head g:
     * nq consecutive positions times nh heads. Query (t, j) (t < nq, j < nh)
     * is at q + t * q_stride + j * D, attends to positions [0, n_pos0 + t)
     * and writes out + t * out_stride + j * D. scores holds SP_ATTN_MAX_Q
     * rows of sc_stride (>= n_pos0 + nq - 1) floats (scratch). Each query's
     * result is bit-identical to attn_head's for it alone: a run only lets a
     * variant share the loading (and f16 conversion) of each K and V row
     * among its queries, which is what makes verifying k proposals, or a
     * prefill chunk, cheaper than k tokens one at a time, and the heads of a
     * GQA group cheaper than one head at a time, without changing any
     * token's logits. NULL in a variant that has nothing to share
     * (ops_attn_run loops attn_head). */
    void (*attn_run)(const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv, int32_t layer,
                     int32_t seq, int32_t g, int32_t D, int32_t n_pos0, int32_t win, float scale,
                     float *scores, size_t sc_stride, uint16_t *q16, float *out,
                     size_t out_stride);
    /* y[i] = silu(g[i]) * u[i] */
    void (*swiglu)(int64_t n, const float *g, const float *u, float *y);
    /* y[i] = gelu(g[i]) * u[i], GELU's tanh form written as
     * x / (1 + exp(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3), as ggml's CPU
     * backend computes it (ops_exp_ggml's exp; x itself at or above 10) */
    void (*geglu)(int64_t n, const float *g, const float *u, float *y);
} fwd_ops;

/* Tokens per attention run (the forward pass cuts longer runs), and rows
 * of scores an attn_run is given. */
#define SP_ATTN_MAX_Q 16

/* The variant of the kernel level in use (kernels_init: the best the CPU
 * has, or SPECULA_KERNELS). */
const fwd_ops *fwd_ops_get(void);
const fwd_ops *fwd_ops_ref(void);
const fwd_ops *fwd_ops_avx2(void);
const fwd_ops *fwd_ops_avx512(void);

/* One query of an attention run: its head's q, where it writes, and the
 * positions [lo, n) it attends to (lo > 0 in a sliding window). */
typedef struct {
    const float *q;
    float *out;
    int32_t n;
    int32_t lo;
} attn_query;


/* aq[0 .. qn) = queries i0 .. i0 + qn - 1 of an attn_run's nq x nh, taken
 * token by token (a token's heads attend to the same positions): the
 * variants' attn_run cut a run into groups this way. */
static inline void attn_queries(const float *q, size_t q_stride, int32_t nh, int32_t D, int32_t n_pos0,
                                   int32_t win, float *out, size_t out_stride, int32_t i0, int qn, attn_query *aq) {
    for (int i = 0; i < qn; i++) {
        const int32_t t = (i0 + i) / nh, j = (i0 + i) % nh;
        aq[i] = (attn_query){q + (size_t)t * q_stride + (size_t)j * D, out + (size_t)t * out_stride + (size_t)j * D,
                                n_pos0 + t, kv_window_lo(n_pos0 + t, win)};
    }
}

/* o's attn_run, or attn_head per query when o has none. */
void ops_attn_run(const fwd_ops *o, const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv,
                 int32_t layer, int32_t seq, int32_t g, int32_t D, int32_t n_pos0, int32_t win, float scale,
                 float *scores, size_t sc_stride, uint16_t *q16, float *out, size_t out_stride);

/* scores[i] = exp(scores[i] - max) in place; returns 1 / their sum (the
 * softmax's normalizer, applied by the caller where it uses the weights).
 * The order of ggml_vec_soft_max_f32 (AVX-512) over llama.cpp's KV rows,
 * which it pads with -inf: ops_exp_ggml, each aligned group of 16 summed
 * by ops_reduce16 (a last partial group as if padded with zeros), the
 * groups' sums added in double. */
float ops_softmax_exp(float *scores, int32_t n, float max);

/* exp(x) with the operations and roundings of ggml's AVX-512 vector exp
 * (llama.cpp's softmax and SiLU), one lane; the SIMD variants' exp equals
 * it in every lane. */
float ops_exp_ggml(float x);

/* v[0] + ... + v[15] in the order of GCC's _mm512_reduce_add_ps: halves,
 * quarters, then (q0 + q2) + (q1 + q3). */
float ops_reduce16(const float v[16]);

/* rows[i] = position p0 + i's K (v = 0) or V (v = 1) row of seq in layer,
 * from KV head g's first element on (D elements), for p0 + i < p1
 * (p1 - p0 <= SP_ATTN_ROWS), each prefetched. The attention variants walk a KV
 * head's slice of every kv_dim-wide row: a strided walk the hardware
 * prefetchers did not follow, and past a few hundred positions every
 * layer's K and V no longer stay in cache beside the weights; a block's
 * rows are gathered (and prefetched) while the block before it is worked
 * on, ~64 rows ahead. */
#define SP_ATTN_ROWS 64
void ops_attn_rows(kv_store *kv, int32_t layer, int32_t seq, int32_t p0, int32_t p1, int32_t g, int32_t D,
                  int v, const char **rows);
/* The same rows (from KV head g's first element on), prefetching only
 * elements [e0, e1) of each (multiples of 32 for a Q8_0 store): a variant
 * that reads a row's elements in passes brings in only what the pass
 * reads, and the rest comes in with the pass that reads it. */
void ops_attn_rows_part(kv_store *kv, int32_t layer, int32_t seq, int32_t p0, int32_t p1, int32_t g, int32_t D,
                        int32_t e0, int32_t e1, int v, const char **rows);

/* Bytes of a K/V row, and where KV head g's D elements begin in it (a Q8_0
 * store: D a multiple of 32, so a head is whole blocks). */
static inline size_t kv_row_bytes(const kv_store *kv) { return row_size(kv->type, kv->kv_dim); }
static inline size_t kv_head_off(const kv_store *kv, int32_t g, int32_t D) { return row_size(kv->type, (int64_t)g * D); }

/* How the variants read a K/V element: f32, f16, or Q8_0 (its int8 times
 * the block's f16 scale, one product, as ggml dequantizes). With an f16
 * store q and the probabilities are rounded to f16 as llama.cpp does;
 * with f32 and Q8_0 they stay f32. */
enum { KV_F32 = 0, KV_F16 = 1, KV_Q8 = 2 };
static inline int kv_kind(const kv_store *kv) {
    return kv->type == SP_TYPE_F16 ? KV_F16 : kv->type == SP_TYPE_Q8_0 ? KV_Q8 : KV_F32;
}

/* GELU (tanh form) of one lane as every geglu variant computes it: -2
 * sqrt(2/pi) and 0.044715 are its constants. */
#define SP_GELU_M2S2PI (-1.5957691216057308f)
#define SP_GELU_C 0.044715f
float ops_gelu_lane(float x);

/* Largest head size the attention variants take. */
#define SP_HEAD_DIM_MAX 1024

/* y[n] = x / rms(x) * w  (sum of squares in double, as llama.cpp) */
void ops_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

#endif
