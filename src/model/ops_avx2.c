/* ops_avx2.c: AVX2 + FMA + F16C variants of the forward-pass operations.
 * Same arithmetic as ops.c (f16 rounding of q and of the probabilities for
 * an f16 KV store); only the summation order differs. */
#include <immintrin.h>
#include <math.h>

#include "common.h"
#include "ops.h"

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* expf for 8 lanes: range reduction by ln2 and a degree-6 polynomial;
 * relative error about 2 ulp over the range softmax and silu use. */
static inline __m256 exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.0f);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    __m256 x2 = _mm256_mul_ps(x, x);
    y = _mm256_fmadd_ps(y, x2, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static void avx2_attn_head(const float *q, sp_kv *kv, int32_t layer, int32_t seq, int32_t g,
                           int32_t D, int32_t n_pos, float scale, float *scores, uint16_t *q16,
                           float *out) {
    const bool f16 = kv->type == SP_TYPE_F16;
    const int32_t kv_dim = kv->kv_dim;
    if (D % 8) { /* odd head sizes take the reference path */
        sp_fwd_ops_ref()->attn_head(q, kv, layer, seq, g, D, n_pos, scale, scores, q16, out);
        return;
    }
    if (f16)
        for (int d = 0; d < D; d += 8)
            _mm_storeu_si128((__m128i *)(q16 + d),
                             _mm256_cvtps_ph(_mm256_loadu_ps(q + d), _MM_FROUND_TO_NEAREST_INT));
    float max = -INFINITY;
    for (int32_t p = 0; p < n_pos;) {
        const void *kb, *vb;
        int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            __m256 acc = _mm256_setzero_ps();
            if (f16) {
                const uint16_t *k = (const uint16_t *)kb + (size_t)j * kv_dim + (size_t)g * D;
                for (int d = 0; d < D; d += 8) {
                    __m256 kk = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d)));
                    __m256 qq = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q16 + d)));
                    acc = _mm256_fmadd_ps(qq, kk, acc);
                }
            } else {
                const float *k = (const float *)kb + (size_t)j * kv_dim + (size_t)g * D;
                for (int d = 0; d < D; d += 8)
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc);
            }
            float s = hsum256(acc) * scale;
            scores[p + j] = s;
            if (s > max) max = s;
        }
        p += n;
    }
    const float inv = sp_softmax_exp(scores, n_pos, max);
    __m256 acc[16]; /* D <= 128 in registers; larger heads loop in chunks */
    for (int d0 = 0; d0 < D; d0 += 128) {
        const int dn = SP_MIN(128, D - d0) / 8;
        for (int c = 0; c < dn; c++) acc[c] = _mm256_setzero_ps();
        for (int32_t p = 0; p < n_pos;) {
            const void *kb, *vb;
            int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
            for (int32_t j = 0; j < n; j++) {
                float pj = scores[p + j] * inv;
                if (f16) {
                    pj = _cvtsh_ss(_cvtss_sh(pj, _MM_FROUND_TO_NEAREST_INT));
                    const uint16_t *v = (const uint16_t *)vb + (size_t)j * kv_dim + (size_t)g * D + d0;
                    __m256 pv = _mm256_set1_ps(pj);
                    for (int c = 0; c < dn; c++)
                        acc[c] = _mm256_fmadd_ps(
                            pv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + 8 * c))), acc[c]);
                } else {
                    const float *v = (const float *)vb + (size_t)j * kv_dim + (size_t)g * D + d0;
                    __m256 pv = _mm256_set1_ps(pj);
                    for (int c = 0; c < dn; c++)
                        acc[c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + 8 * c), acc[c]);
                }
            }
            p += n;
        }
        for (int c = 0; c < dn; c++) _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);
    }
}

static void avx2_swiglu(int64_t n, const float *g, const float *u, float *y) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static const sp_fwd_ops AVX2 = {avx2_attn_head, NULL, avx2_swiglu};
const sp_fwd_ops *sp_fwd_ops_avx2(void) { return &AVX2; }
