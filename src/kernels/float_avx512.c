/* float_avx512.c: F32, F16 and BF16 weights at the AVX-512 level: the
 * single-row dots (vec_dot) and the matmul tiles.
 *
 * Their register budget and summation orders: kernels_avx512.c ("Float
 * matmul"); the activations come as f32 already rounded through f16/bf16
 * (act_avx512.c), so the tiles' products are those of the f16/bf16 dot.
 */
#include "kernels/simd_avx512.h"

/* ---- float types -------------------------------------------------------- */

/* 16 weights from element i (mask: the valid ones) as f32 */
AI __m512 load_w16(const uint8_t *w, int64_t i, __mmask16 m, const int WT) {
    if (WT == SP_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (WT == SP_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* R rows x NT tokens over [k0, k1) */
AI void float_block(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int R, const int NT,
                    int64_t k0, int64_t k1, const int WT, float *y, int64_t ldy, int acc) {
    __m512 F[4][8];
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) F[r][t] = _mm512_setzero_ps();
    for (int64_t i = k0; i < k1; i += 16) {
        const __mmask16 m = k1 - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k1 - i)) - 1);
        __m512 X[8];
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) X[t] = _mm512_maskz_loadu_ps(m, (const float *)(xs + t * xss) + i);
        if ((i & 31) == 0) { /* the next 32 weights of each row */
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++)
                prefetch_ahead(w + r * ws + i * (WT == SP_TYPE_F32 ? 4 : 2), WT == SP_TYPE_F32 ? 128 : 64);
        }
        _Pragma("GCC unroll 16")
        for (int r = 0; r < R; r++) {
            const __m512 wv = load_w16(w + r * ws, i, m, WT);
            _Pragma("GCC unroll 16")
            for (int t = 0; t < NT; t++) F[r][t] = _mm512_fmadd_ps(wv, X[t], F[r][t]);
        }
    }
    _Pragma("GCC unroll 16")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            const float v = _mm512_reduce_add_ps(F[r][t]);
            if (acc) y[t * ldy + r] += v;
            else y[t * ldy + r] = v;
        }
}

/* R x NT accumulators <= 16 zmm: 4 rows for up to 4 tokens, 2 rows beyond */
AI void float_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss, const int NT,
                 int64_t k0, int64_t k1, const int WT, float *y, int64_t ldy, int acc) {
    const int R = NT <= 4 ? 4 : 2;
    int64_t r = 0;
    for (; r + R <= nr; r += R) float_block(w + r * ws, ws, xs, xss, R, NT, k0, k1, WT, y + r, ldy, acc);
    for (; r < nr; r++) float_block(w + r * ws, ws, xs, xss, 1, NT, k0, k1, WT, y + r, ldy, acc);
}

/* F32 weights in ggml's order (f32_finish): per (row, token) 4
 * accumulators of 16 lanes, one per 16-element quarter of each 64; R rows x
 * NT tokens with R * NT <= 6 (24 accumulators + NT activations + 1 weight
 * vector of the 32 zmm). The whole of K in one call (whole_k). */
AI void f32g_block(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int R, const int NT,
                   int64_t k, float *y, int64_t ldy) {
    __m512 A[6][4];
    _Pragma("GCC unroll 8")
    for (int a = 0; a < R * NT; a++)
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++) A[a][u] = _mm512_setzero_ps();
    const int64_t np = k - k % 64;
    for (int64_t i = 0; i < np; i += 64) {
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) prefetch_ahead(w + r * ws + i * 4, 256);
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++) {
            __m512 X[6];
            _Pragma("GCC unroll 8")
            for (int t = 0; t < NT; t++) X[t] = _mm512_loadu_ps((const float *)(xs + t * xss) + i + 16 * u);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m512 wv = _mm512_loadu_ps((const float *)(w + r * ws) + i + 16 * u);
                _Pragma("GCC unroll 8")
                for (int t = 0; t < NT; t++) A[r * NT + t][u] = _mm512_fmadd_ps(wv, X[t], A[r * NT + t][u]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < NT; t++) {
            float v[16];
            const __m512 *a = A[r * NT + t];
            _mm512_storeu_ps(v, _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3])));
            y[t * ldy + r] = f32_finish(v, (const float *)(w + r * ws) + np, (const float *)(xs + t * xss) + np,
                                           k - np);
        }
}

AI void f32g_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss, const int NT, int64_t k,
                float *y, int64_t ldy) {
    const int R = NT == 1 ? 4 : NT <= 3 ? 2 : 1;
    int64_t r = 0;
    for (; r + R <= nr; r += R) f32g_block(w + r * ws, ws, xs, xss, R, NT, k, y + r, ldy);
    for (; r < nr; r++) f32g_block(w + r * ws, ws, xs, xss, 1, NT, k, y + r, ldy);
}

static void f32_tile(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss, int nt, int64_t k,
                     int64_t k0, int64_t k1, float *y, int64_t ldy, int acc) {
    SP_ASSERT(k0 == 0 && k1 == k && !acc); /* whole_k */
    switch (nt) {
    case 1: f32g_nt(w, ws, nr, xs, xss, 1, k, y, ldy); break;
    case 2: f32g_nt(w, ws, nr, xs, xss, 2, k, y, ldy); break;
    case 3: f32g_nt(w, ws, nr, xs, xss, 3, k, y, ldy); break;
    case 4: f32g_nt(w, ws, nr, xs, xss, 4, k, y, ldy); break;
    case 5: f32g_nt(w, ws, nr, xs, xss, 5, k, y, ldy); break;
    default: f32g_nt(w, ws, nr, xs, xss, 6, k, y, ldy); break;
    }
}

#define FTILE(NAME, WT)                                                                              \
    static void NAME##_tile(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,  \
                            int nt, int64_t k, int64_t k0, int64_t k1, float *y, int64_t ldy,        \
                            int acc) {                                                               \
        (void)k;                                                                                     \
        switch (nt) {                                                                                \
        case 1: float_nt(w, ws, nr, xs, xss, 1, k0, k1, WT, y, ldy, acc); break;                     \
        case 2: float_nt(w, ws, nr, xs, xss, 2, k0, k1, WT, y, ldy, acc); break;                     \
        case 3: float_nt(w, ws, nr, xs, xss, 3, k0, k1, WT, y, ldy, acc); break;                     \
        case 4: float_nt(w, ws, nr, xs, xss, 4, k0, k1, WT, y, ldy, acc); break;                     \
        case 5: float_nt(w, ws, nr, xs, xss, 5, k0, k1, WT, y, ldy, acc); break;                     \
        case 6: float_nt(w, ws, nr, xs, xss, 6, k0, k1, WT, y, ldy, acc); break;                     \
        case 7: float_nt(w, ws, nr, xs, xss, 7, k0, k1, WT, y, ldy, acc); break;                     \
        default: float_nt(w, ws, nr, xs, xss, 8, k0, k1, WT, y, ldy, acc); break;                    \
        }                                                                                            \
    }

FTILE(f16, SP_TYPE_F16)
FTILE(bf16, SP_TYPE_BF16)

/* single-row float dots: 4 accumulators (FMA latency), masked tail */
AI float dot_float(int64_t k, const void *w, const void *x, const int WT) {
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= k; i += 64)
        _Pragma("GCC unroll 16")
        for (int u = 0; u < 4; u++)
            a[u] = _mm512_fmadd_ps(load_w16(w, i + 16 * u, 0xFFFF, WT), load_w16(x, i + 16 * u, 0xFFFF, WT), a[u]);
    for (; i < k; i += 16) {
        const __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        a[0] = _mm512_fmadd_ps(load_w16(w, i, m, WT), load_w16(x, i, m, WT), a[0]);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

void avx512_vec_dot_f32(int64_t k, float *s, const void *w, const void *x) {
    f32g_block(w, 0, x, 0, 1, 1, k, s, 0);
}
void avx512_vec_dot_f16(int64_t k, float *s, const void *w, const void *x) { *s = dot_float(k, w, x, SP_TYPE_F16); }
void avx512_vec_dot_bf16(int64_t k, float *s, const void *w, const void *x) { *s = dot_float(k, w, x, SP_TYPE_BF16); }

const mm_kernel avx512_mm_f32 = {16, 64, avx512_xrow_unused, 6, avx512_conv_x_f32, f32_tile, 1, NULL, NULL};
const mm_kernel avx512_mm_f16 = {16, 64, avx512_xrow_unused, 8, avx512_conv_x_f16, f16_tile, 0, NULL, NULL};
const mm_kernel avx512_mm_bf16 = {16, 64, avx512_xrow_unused, 8, avx512_conv_x_bf16, bf16_tile, 0, NULL, NULL};
