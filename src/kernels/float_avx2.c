/* float_avx2.c: F32, F16 and BF16 weights at the AVX2 level: the
 * single-row dots (vec_dot) and the matmul tiles.
 *
 * F32 sums in ggml's order (f32_finish, kernels_internal.h): 4 partial sums
 * of 16 lanes per row and token, 8 ymm accumulators, so its tile takes one
 * row and one token at a time. The F16 and BF16 tiles take one weight row
 * at a time against up to 4 tokens: each weight vector is converted to f32
 * once and used for every token, with two accumulators per token (FMA
 * latency). K is never cut into ranges (whole_k), as tinyBLAS sums them in
 * llama.cpp's CPU backend.
 */
#include "kernels/simd_avx2.h"

/* ---- single-row dots ---------------------------------------------------- */

/* F32 weights in ggml's order (f32_finish): the 4 partial sums of 16
 * lanes as 8 ymm accumulators, A[2u] = lanes 0-7 and A[2u+1] = lanes 8-15
 * of partial u; one row and one token at a time (8 accumulators). */
AI float f32g_dot(const float *w, const float *x, int64_t k) {
    __m256 A[8];
    _Pragma("GCC unroll 8")
    for (int u = 0; u < 8; u++) A[u] = _mm256_setzero_ps();
    const int64_t np = k - k % 64;
    for (int64_t i = 0; i < np; i += 64) {
        prefetch_ahead(w + i, 256);
        _Pragma("GCC unroll 8")
        for (int u = 0; u < 8; u++) A[u] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * u), _mm256_loadu_ps(x + i + 8 * u), A[u]);
    }
    float v[16];
    _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(A[0], A[4]), _mm256_add_ps(A[2], A[6])));
    _mm256_storeu_ps(v + 8, _mm256_add_ps(_mm256_add_ps(A[1], A[5]), _mm256_add_ps(A[3], A[7])));
    return f32_finish(v, w + np, x + np, k - np);
}

void avx2_vec_dot_f32(int64_t k, float *s, const void *vw, const void *vx) { *s = f32g_dot(vw, vx, k); }

static void f32_tile(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss, int nt, int64_t k,
                     int64_t k0, int64_t k1, float *y, int64_t ldy, int acc) {
    SP_ASSERT(k0 == 0 && k1 == k && !acc); /* whole_k */
    for (int64_t r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            y[t * ldy + r] = f32g_dot((const float *)(w + r * ws), (const float *)(xs + t * xss), k);
}

void avx2_vec_dot_f16(int64_t k, float *s, const void *vw, const void *vx) {
    const f16_t *w = vw, *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
#define LH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        a0 = _mm256_fmadd_ps(LH(w + i), LH(x + i), a0);
        a1 = _mm256_fmadd_ps(LH(w + i + 8), LH(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(LH(w + i + 16), LH(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(LH(w + i + 24), LH(x + i + 24), a3);
    }
    for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(LH(w + i), LH(x + i), a0);
#undef LH
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < k; i++) sum += f16f(w[i]) * f16f(x[i]);
    *s = sum;
}

AI __m256 bf16x8(const bf16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

void avx2_vec_dot_bf16(int64_t k, float *s, const void *vw, const void *vx) {
    const bf16_t *w = vw, *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        a0 = _mm256_fmadd_ps(bf16x8(w + i), bf16x8(x + i), a0);
        a1 = _mm256_fmadd_ps(bf16x8(w + i + 8), bf16x8(x + i + 8), a1);
    }
    for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(bf16x8(w + i), bf16x8(x + i), a0);
    float sum = hsum8(_mm256_add_ps(a0, a1));
    for (; i < k; i++) sum += bf16_to_f32(w[i]) * bf16_to_f32(x[i]);
    *s = sum;
}

/* ---- float tiles -------------------------------------------------------- */

/* Float tiles: weights converted to f32 once per 8 elements, activations in
 * scratch as f32 already rounded to the vec_dot_type (f16/bf16), so the
 * products are exactly those of the f16/bf16 dot. */
AI __m256 load_w8(const uint8_t *w, int64_t i, const int WT) {
    if (WT == SP_TYPE_F32) return _mm256_loadu_ps((const float *)w + i);
    if (WT == SP_TYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const f16_t *)w + i)));
    return bf16x8((const bf16_t *)w + i);
}

AI float load_w1(const uint8_t *w, int64_t i, const int WT) {
    if (WT == SP_TYPE_F32) return ((const float *)w)[i];
    if (WT == SP_TYPE_F16) return f16f(((const f16_t *)w)[i]);
    return bf16_to_f32(((const bf16_t *)w)[i]);
}

AI void float_row(const uint8_t *w, const uint8_t *xs, size_t xss, const int NT, int64_t k0, int64_t k1,
                  const int WT, float *out) {
    __m256 F[8], G[8];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) F[t] = G[t] = _mm256_setzero_ps();
    int64_t i = k0;
    for (; i + 16 <= k1; i += 16) { /* two accumulators per token: FMA latency */
        if (!(i & 31)) prefetch_ahead(w + i * (WT == SP_TYPE_F32 ? 4 : 2), WT == SP_TYPE_F32 ? 128 : 64);
        const __m256 w0 = load_w8(w, i, WT), w1 = load_w8(w, i + 8, WT);
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            const float *x = (const float *)(xs + t * xss);
            F[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), F[t]);
            G[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), G[t]);
        }
    }
    for (; i + 8 <= k1; i += 8) {
        const __m256 w0 = load_w8(w, i, WT);
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) F[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps((const float *)(xs + t * xss) + i), F[t]);
    }
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        out[t] = hsum8(_mm256_add_ps(F[t], G[t]));
        for (int64_t j = i; j < k1; j++) out[t] += load_w1(w, j, WT) * ((const float *)(xs + t * xss))[j];
    }
}

#define FTILE(NAME, WT)                                                                              \
    AI void NAME##_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,        \
                      const int NT, int64_t k0, int64_t k1, float *y, int64_t ldy, int acc) {        \
        for (int64_t r = 0; r < nr; r++) {                                                           \
            float v[4];                                                                              \
            float_row(w + r * ws, xs, xss, NT, k0, k1, WT, v);                                       \
            store_out(y, ldy, r, NT, v, acc);                                                        \
        }                                                                                            \
    }                                                                                                \
    TILE4(NAME)

FTILE(f16, SP_TYPE_F16)
FTILE(bf16, SP_TYPE_BF16)

const mm_kernel avx2_mm_f32 = {8, 32, NULL, 4, avx2_conv_f32, f32_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_f16 = {8, 32, NULL, 4, avx2_conv_f16, f16_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_bf16 = {8, 32, NULL, 4, avx2_conv_bf16, bf16_tile, 1, NULL, NULL};
