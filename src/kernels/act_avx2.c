/* act_avx2.c: the activation side of the AVX2 level.
 *
 * The quantizers of an activation row into its vec_dot_type blocks (Q8_0,
 * Q8_K, F16), bit-exact with kernels_ref.c, so that every level multiplies
 * the same activation values; and the conversions of one token's row into
 * the scratch of each matmul tile (mm_kernel.convert; layouts in
 * simd_avx2.h): the same values as the blocks, laid out for the tile's
 * loads (quants 32- or 64-byte aligned, scales widened to f32, the sums the
 * tiles subtract computed once), so that this work is done once per token
 * and matmul instead of once per weight row.
 * Cost: one pass over the row per token and matmul; the avx512 level's
 * measurement of this Q8_K quantizer: ~2% of a 5-token verification's CPU
 * time on TinyLlama's shape (act_avx512.c).
 */
#include "kernels/simd_avx2.h"

/* ---- activation quantizers (bit-exact with kernels_ref.c) --------------- */

/* 32 int32 (4 vectors, in order) -> 32 int8 in order */
AI __m256i pack_i32x32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b); /* a0-3 b0-3 | a4-7 b4-7 */
    const __m256i cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd); /* a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 */
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void avx2_quantize_q8_0(const float *x, void *vy, int64_t k) {
    block_q8_0 *y = vy;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        __m256 v[4], m = _mm256_setzero_ps();
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(x + 8 * j);
            m = _mm256_max_ps(m, _mm256_and_ps(v[j], absmask));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        y[i].d = f32_to_f16(amax / 127.f);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 4; j++) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id)); /* RNE */
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_i32x32_i8(q[0], q[1], q[2], q[3]));
    }
}

void avx2_quantize_q8_K(const float *x, void *vy, int64_t k) {
    block_q8_K *y = vy;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < k / SP_QK_K; i++, x += SP_QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < SP_QK_K; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), absmask));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float am = _mm_cvtss_f32(m4);
        if (am == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int idx = 0; /* the first element of largest magnitude, as the reference; */
        /* bounded: a NaN in the block can make am NaN, equal to nothing */
        while (idx < SP_QK_K - 1 && !(__builtin_fabsf(x[idx]) == am)) idx++;
        const float iscale = -127.f / x[idx];
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int j = 0; j < SP_QK_K; j += 32) {
            __m256i q[4];
            _Pragma("GCC unroll 16")
            for (int u = 0; u < 4; u++)
                q[u] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * u), is)), lim);
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), pack_i32x32_i8(q[0], q[1], q[2], q[3]));
        }
        /* bsums: sums of 16 int8 via maddubs(1, q) then madd(1) */
        const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        for (int g = 0; g < 16; g += 2) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(y[i].qs + 16 * g));
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16); /* 4 x 4 per half */
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s); /* lane 0: sum of half 0, lane 4: half 1 */
            y[i].bsums[g] = (int16_t)_mm256_extract_epi32(s, 0);
            y[i].bsums[g + 1] = (int16_t)_mm256_extract_epi32(s, 4);
        }
        y[i].d = 1.0f / iscale;
    }
}

void avx2_quantize_f16(const float *x, void *vy, int64_t k) {
    f16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < k; i++) y[i] = f32_to_f16(x[i]);
}

/* ---- conversions into the tiles' scratch (mm_kernel.convert) ----------- */

/* Activation conversion for the float tiles: f32 rounded through f16/bf16. */
void avx2_conv_f32(const float *x, int64_t k, void *xs) { memcpy(xs, x, (size_t)k * 4); }

void avx2_conv_f16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(xs + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < k; i++) xs[i] = f16_to_f32(f32_to_f16(x[i]));
}

void avx2_conv_bf16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    for (int64_t i = 0; i < k; i++) xs[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void avx2_conv_q8_0(const float *x, int64_t k, void *xs) { avx2_quantize_q8_0(x, xs, k); }
void avx2_conv_q8_0a(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b0 = 0; b0 < k / 32; b0 += 8, xs += Q8A_BYTES) {
        block_q8_0 q[8];
        const int n = (int)SP_MIN((int64_t)8, k / 32 - b0);
        avx2_quantize_q8_0(x + 32 * b0, q, 32 * n);
        for (int i = 0; i < n; i++) {
            memcpy(xs + 32 * i, q[i].qs, 32);
            const float d = f16f(q[i].d);
            memcpy(xs + Q8A_D + 4 * i, &d, 4);
        }
    }
}
void avx2_conv_q8_Kb(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    const __m256i m32 = _mm256_set1_epi8(32);
    for (int64_t b = 0; b < k / SP_QK_K; b++, xs += Q8KB_BYTES) {
        block_q8_K q;
        avx2_quantize_q8_K(x + b * SP_QK_K, &q, SP_QK_K);
        memcpy(xs, q.qs, sizeof q.qs);
        for (int c = 0; c < 8; c++)
            _mm256_store_si256((__m256i *)(xs + Q8KB_X32 + 32 * c),
                               _mm256_maddubs_epi16(m32, _mm256_loadu_si256((const __m256i *)(q.qs + 32 * c))));
        memcpy(xs + Q8KB_D, &q.d, 4);
    }
}

void avx2_conv_q8_Kc(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b = 0; b < k / SP_QK_K; b++, xs += Q8KC_BYTES) {
        block_q8_K q;
        avx2_quantize_q8_K(x + b * SP_QK_K, &q, SP_QK_K);
        memcpy(xs, q.qs, sizeof q.qs);
        for (int j = 0; j < 16; j++) {
            int16_t s2[2] = {0, 0};
            for (int g = 0; g < 4; g++) {
                const int8_t *e = q.qs + 16 * j + 4 * g;
                s2[0] = (int16_t)(s2[0] + 32 * (e[0] + e[1]));
                s2[1] = (int16_t)(s2[1] + 32 * (e[2] + e[3]));
            }
            memcpy(xs + Q8KC_X32 + 4 * j, s2, 4);
        }
        memcpy(xs + Q8KC_D, &q.d, 4);
    }
}

void avx2_conv_q8_Ka(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b = 0; b < k / SP_QK_K; b++, xs += Q8KA_BYTES) {
        block_q8_K q;
        avx2_quantize_q8_K(x + b * SP_QK_K, &q, SP_QK_K);
        memcpy(xs, q.qs, sizeof q.qs);
        memcpy(xs + Q8KA_D, &q.d, 4);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)q.bsums);
        _mm_store_si128((__m128i *)(xs + Q8KA_S8),
                        _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
    }
}

/* Activations for q4_0p8: Q8_0 blocks (bit-exact with the reference
 * quantizer), each rewritten as q4_0p8's 40-byte block (q8_avx2.c). */
void avx2_conv_q4_0p8(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b = 0; b < k / 32; b++) {
        block_q8_0 q;
        avx2_quantize_q8_0(x + 32 * b, &q, 32);
        const __m256i v = _mm256_loadu_si256((const __m256i *)q.qs);
        /* sum of 32 int8: widen to s16 pairs, then to int32 (exact) */
        const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);
        const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        const int32_t s8 = 8 * _mm_cvtsi128_si32(h);
        const float d = f16f(q.d);
        uint8_t *o = xs + b * Q4_0R8_XBLOCK;
        _mm256_storeu_si256((__m256i *)o, v);
        memcpy(o + 32, &d, 4);
        memcpy(o + 36, &s8, 4);
    }
}
