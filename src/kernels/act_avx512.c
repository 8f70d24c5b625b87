/* act_avx512.c: the activation side of the AVX-512 level.
 *
 * The Q8_K and F16 quantizers (bit-exact with kernels_ref.c; Q8_0 is the
 * avx2 level's) and the conversions of one token's row into the tiles'
 * scratch (mm_kernel.convert): quantized, then transposed into the
 * one-lane-per-block layout of the quantized tiles, with each lane's init
 * and scales (layouts: kernels_avx512.c), or rounded through f16/bf16 and
 * kept as f32 for the float tiles. Done once per token and matmul, so no
 * tile converts an activation twice.
 * Cost: one pass over the row per token and matmul; the Q8_K quantizer's
 * share of a 5-token verification is measured at avx512_quantize_q8_K
 * below.
 */
#include "kernels/simd_avx512.h"

/* ---- activation conversion into the transposed scratch layout ----------- */

/* Q8_K (the activations of Q4_K and Q6_K weights), bit-exact with
 * ref_quantize_q8_K: per 256 values, iscale = -127 / the first value of
 * largest magnitude, q = min(127, nearest(iscale * x)), bsums of 16. The
 * block stays in 16 registers from the max to the last store (the AVX2
 * version read it twice and found the max's index with a scalar loop).
 * A 5-token verification converts its activations once per matmul, 5 x
 * k values: on the TinyLlama shape the AVX2 quantizer took ~2% of the
 * pass's CPU time (1.2 of 54 ms, both threads), the tiles ~85%; in cache
 * a 5-token Q4_K tile with its conversion is 8-10% faster with this one.
 * A NaN in a block gives garbage for it, never a read past it. */
void avx512_quantize_q8_K(const float *x, void *vy, int64_t k) {
    block_q8_K *y = vy;
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    /* packs leave lane L of vector v (v < 4) at dword 4L + v: back to order */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i ones = _mm512_set1_epi8(1), lim = _mm512_set1_epi32(127);
    for (int64_t i = 0; i < k / SP_QK_K; i++, x += SP_QK_K) {
        __m512 v[16];
        __m512 m = _mm512_setzero_ps();
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 16; j++) {
            v[j] = _mm512_loadu_ps(x + 16 * j);
            m = _mm512_max_ps(m, _mm512_and_ps(v[j], absmask));
        }
        const float am = _mm512_reduce_max_ps(m);
        if (am == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0.0f;
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 16; j++) {
            const __mmask16 e = _mm512_cmp_ps_mask(_mm512_and_ps(v[j], absmask), _mm512_set1_ps(am), _CMP_EQ_OQ);
            if (e) {
                max = x[16 * j + __builtin_ctz(e)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        __m512i sum[4];
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++) {
            __m512i q[4];
            _Pragma("GCC unroll 4")
            for (int a = 0; a < 4; a++)
                q[a] = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v[4 * u + a], is)), lim);
            /* |q| <= 127: the saturating packs are exact */
            const __m512i b = _mm512_permutexvar_epi32(
                order, _mm512_packs_epi16(_mm512_packs_epi32(q[0], q[1]), _mm512_packs_epi32(q[2], q[3])));
            _mm512_storeu_si512(y[i].qs + 64 * u, b);
            sum[u] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, b); /* sums of 4 */
        }
        /* sums of 16: lane L of sum[u] is bsum 4u + L as 4 dwords */
        const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(sum[0], sum[1]), _mm512_unpackhi_epi32(sum[0], sum[1]));
        const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(sum[2], sum[3]), _mm512_unpackhi_epi32(sum[2], sum[3]));
        const __m512i bs = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
        _mm256_storeu_si256((__m256i *)y[i].bsums, _mm512_cvtepi32_epi16(_mm512_permutexvar_epi32(order, bs)));
        y[i].d = 1.0f / iscale;
    }
}

/* Q8_0 / Q4_0 activations: quantize (bit-exact with the reference), then
 * transpose each group of 16 blocks; `shift` makes the lane init
 * -(sum << shift): 7 for Q8_0 weights (+128 bias), 3 for Q4_0 (q - 8), 4
 * for Q5_0 (q - 16). */
AI void conv_q8_0_layout(const float *x, int64_t k, uint8_t *xs, const int shift) {
    const int64_t nb = k / 32;
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t g = 0; g * 16 < nb; g++, xs += GROUP_BYTES_Q8) {
        block_q8_0 q[16];
        const int64_t n = SP_MIN((int64_t)16, nb - 16 * g);
        avx2_quantize_q8_0(x + 512 * g, q, 32 * n);
        if (n < 16) memset(&q[n], 0, (size_t)(16 - n) * sizeof q[0]); /* zero lanes add nothing */
        __m512i V[8];
        const uint8_t *p = (const uint8_t *)q;
        tr16x8(p + 2, p + 2 + 8 * sizeof q[0], sizeof q[0], V);
        __m512i sum = _mm512_setzero_si512();
        _Pragma("GCC unroll 16")
        for (int s = 0; s < 8; s++) {
            _mm512_store_si512(xs + 64 * s, V[s]);
            sum = _mm512_dpbusd_epi32(sum, ones, V[s]);
        }
        _mm512_store_si512(xs + 512, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, shift)));
        _mm512_store_ps(xs + 576, gather_f16(p, sizeof q[0]));
    }
}

void avx512_conv_x_q8_0(const float *x, int64_t k, void *xs) { conv_q8_0_layout(x, k, xs, 7); }
void avx512_conv_x_q4_0(const float *x, int64_t k, void *xs) { conv_q8_0_layout(x, k, xs, 3); }
void avx512_conv_x_q5_0(const float *x, int64_t k, void *xs) { conv_q8_0_layout(x, k, xs, 4); }

void avx512_conv_x_q4_K(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    const int64_t nsb = k / SP_QK_K;
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t g = 0; 2 * g < nsb; g++, xs += GROUP_BYTES_Q8) {
        block_q8_K q[2];
        const int64_t n = SP_MIN((int64_t)2, nsb - 2 * g);
        avx512_quantize_q8_K(x + 512 * g, q, SP_QK_K * n);
        if (n < 2) memset(&q[1], 0, sizeof q[1]);
        __m512i V[8];
        tr16x8((const uint8_t *)q[0].qs, (const uint8_t *)q[1].qs, 32, V);
        _Pragma("GCC unroll 16")
        for (int s = 0; s < 8; s++) _mm512_store_si512(xs + 64 * s, V[s]);
        const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(q[0].d), _mm256_set1_ps(q[1].d), 1);
        /* odd lanes (high nibbles, see repack_q4_K) see 16 q: scale by 1/16 (exact) */
        const __m512 dxq = _mm512_mul_ps(dx, _mm512_setr_ps(1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1,
                                                            0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f));
        /* sum of each 32-value sub-block = bsums[2j] + bsums[2j+1] */
        const __m256i s0 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)q[0].bsums), ones16);
        const __m256i s1 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)q[1].bsums), ones16);
        const __m512 xsum = _mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_castsi256_si512(s0), s1, 1));
        _mm512_store_ps(xs + 512, dxq);
        _mm512_store_ps(xs + 576, _mm512_mul_ps(xsum, dx));
    }
}

void avx512_conv_x_q6_K(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t g = 0; g < k / SP_QK_K; g++, xs += GROUP_BYTES_Q6) {
        block_q8_K q;
        avx512_quantize_q8_K(x + SP_QK_K * g, &q, SP_QK_K);
        __m512i V[4];
        tr16x4((const uint8_t *)q.qs, 16, V);
        _Pragma("GCC unroll 16")
        for (int s = 0; s < 4; s++) _mm512_store_si512(xs + 64 * s, V[s]);
        const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)q.bsums));
        _mm512_store_si512(xs + 256, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
        _mm512_store_ps(xs + 320, _mm512_set1_ps(q.d));
    }
}

size_t avx512_xrow_unused(int64_t k) { (void)k; return 0; }

void avx512_conv_x_f32(const float *x, int64_t k, void *xs) { memcpy(xs, x, (size_t)k * 4); }

void avx512_conv_x_f16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    for (int64_t i = 0; i < k; i += 16) {
        const __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(xs + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
    }
}

void avx512_conv_x_bf16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    for (int64_t i = 0; i < k; i++) xs[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void avx512_quantize_f16(const float *x, void *vy, int64_t k) {
    f16_t *y = vy;
    for (int64_t i = 0; i < k; i += 16) {
        const __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}
