/* ops_avx512.c: attention with AVX-512 for head sizes that are multiples
 * of 16 up to 128; other sizes and SwiGLU use the AVX2 variants.
 *
 * Dimension legend: D head_dim = 16 * DC, QG queries sharing each K/V row
 * load (QG * DC <= 16 zmm of queries or accumulators in registers).
 *
 * The arithmetic is ops.h's (llama.cpp's prompt order), bit for bit:
 * score = reduce(q[0:16] k[0:16] + FMA over the remaining 16-lane chunks)
 * * scale, ggml's 16-lane exp for the softmax, each group of 16 reduced
 * and added in double, then out = the 16 partial sums over positions
 * p = r mod 16 (FMA in order of p), reduced per d. A query does the same
 * arithmetic whether it runs alone (decode) or with others of its sequence
 * (verification, prefill): grouping only shares the load and f16
 * conversion of each K/V row, so a token's logits do not depend on the
 * batch it is in, which greedy speculative decoding needs to reproduce
 * plain decoding exactly. Against AVX2 (8 lanes, one query at a time) it
 * halves the instructions per score and per weighted V row, and a group of
 * 4 pays one conversion of each row instead of 4.
 */
#include <immintrin.h>
#include <math.h>

#include "common.h"
#include "ops.h"

#define AI static inline __attribute__((always_inline))

AI __m512 load_row(const void *base, int c, bool f16) {
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + 16 * c)))
               : _mm512_loadu_ps((const float *)base + 16 * c);
}

/* ggml's AVX-512 vector exp (sp_exp_ggml in every lane). */
AI __m512 exp512(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (!d) return res;
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                            _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(d, res, alt);
}

/* sp_softmax_exp (ops.h) with 16 lanes: one group per vector, the last
 * one zero-padded, each reduced as sp_reduce16 and added in double. */
static float softmax_exp512(float *s, int32_t n, float max) {
    const __m512 m = _mm512_set1_ps(max);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m)));
        _mm512_mask_storeu_ps(s + i, k, e);
        sum += (double)_mm512_reduce_add_ps(e);
    }
    return (float)(1.0 / sum);
}

/* Queries t < qn (<= QG) at positions n_pos0 - 1 + t attend [0, n_pos0 + t). */
AI void attn_group(const float *q, size_t q_stride, const int QG, const int DC, int qn, sp_kv *kv,
                   int32_t layer, int32_t seq, int32_t g, int32_t n_pos0, float scale, float *scores,
                   size_t sc_stride, float *out, size_t out_stride) {
    const bool f16 = kv->type == SP_TYPE_F16;
    const int32_t D = 16 * DC, kv_dim = kv->kv_dim, n_end = n_pos0 + qn - 1;
    const size_t esz = f16 ? 2 : 4;
    __m512 Q[4][8] = {{_mm512_setzero_ps()}}; /* rows t >= qn stay unused */
    float mx[4] = {0}, inv[4] = {0};
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        mx[t] = -INFINITY;
        if (t >= qn) continue;
        _Pragma("GCC unroll 8") for (int c = 0; c < DC; c++) {
            __m512 v = _mm512_loadu_ps(q + (size_t)t * q_stride + 16 * c);
            /* an f16 store: q rounded to f16 as llama.cpp does */
            if (f16) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            Q[t][c] = v;
        }
    }
    for (int32_t p = 0; p < n_end;) {
        const void *kb, *vb;
        const int32_t n = kv->ops->span(kv, layer, seq, p, n_end, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            const int32_t P = p + j;
            const char *kr = (const char *)kb + ((size_t)j * kv_dim + (size_t)g * D) * esz;
            __m512 K[8];
            _Pragma("GCC unroll 8") for (int c = 0; c < DC; c++) K[c] = load_row(kr, c, f16);
            _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
                if (t >= qn || P >= n_pos0 + t) continue;
                __m512 acc = _mm512_mul_ps(Q[t][0], K[0]);
                _Pragma("GCC unroll 8") for (int c = 1; c < DC; c++) acc = _mm512_fmadd_ps(Q[t][c], K[c], acc);
                const float s = _mm512_reduce_add_ps(acc) * scale;
                scores[(size_t)t * sc_stride + P] = s;
                if (s > mx[t]) mx[t] = s;
            }
        }
        p += n;
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++)
        if (t < qn) inv[t] = softmax_exp512(scores + (size_t)t * sc_stride, n_pos0 + t, mx[t]);
    /* out = 16 partial sums over the positions of each residue mod 16,
     * reduced as sp_reduce16 (ops.h). One pass over V: position P adds into
     * part[t][P % 16], kept in L1 (at most 4 x 16 x 128 floats). Each
     * partial sum still accumulates its positions in increasing order, so
     * the sums are those of 16 separate passes; the 16 passes this replaced
     * re-walked the KV spans 16 times with a stride of 16 rows and cost
     * ~15% of a decode step on the bundled 11M model. */
    float part[4][16][128] __attribute__((aligned(64)));
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        if (t >= qn) continue;
        for (int r = 0; r < 16; r++)
            _Pragma("GCC unroll 8") for (int c = 0; c < DC; c++) _mm512_store_ps(&part[t][r][16 * c], _mm512_setzero_ps());
    }
    for (int32_t p = 0; p < n_end;) {
        const void *kb, *vb;
        const int32_t n = kv->ops->span(kv, layer, seq, p, n_end, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            const int32_t P = p + j;
            const char *vr = (const char *)vb + ((size_t)j * kv_dim + (size_t)g * D) * esz;
            __m512 V[8];
            _Pragma("GCC unroll 8") for (int c = 0; c < DC; c++) V[c] = load_row(vr, c, f16);
            _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
                if (t >= qn || P >= n_pos0 + t) continue;
                float pj = scores[(size_t)t * sc_stride + P] * inv[t];
                if (f16) pj = _cvtsh_ss(_cvtss_sh(pj, _MM_FROUND_TO_NEAREST_INT));
                const __m512 pv = _mm512_set1_ps(pj);
                float *a = part[t][P & 15];
                _Pragma("GCC unroll 8") for (int c = 0; c < DC; c++)
                    _mm512_store_ps(a + 16 * c, _mm512_fmadd_ps(pv, V[c], _mm512_load_ps(a + 16 * c)));
            }
        }
        p += n;
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        if (t >= qn) continue;
        _Pragma("GCC unroll 8") for (int c = 0; c < DC; c++) {
            const float(*pr)[128] = part[t];
            __m512 h[8], q[4];
            for (int l = 0; l < 8; l++)
                h[l] = _mm512_add_ps(_mm512_load_ps(&pr[l + 8][16 * c]), _mm512_load_ps(&pr[l][16 * c]));
            for (int l = 0; l < 4; l++) q[l] = _mm512_add_ps(h[l + 4], h[l]);
            _mm512_storeu_ps(out + (size_t)t * out_stride + 16 * c,
                             _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3])));
        }
    }
}

/* Queries in groups of QG = min(4, 16 / DC): the group's queries (or
 * accumulators) plus one K/V row fit the 32 zmm registers. */
AI void run_dc(const int DC, const float *q, size_t q_stride, int32_t nq, sp_kv *kv, int32_t layer,
               int32_t seq, int32_t g, int32_t n_pos0, float scale, float *scores, size_t sc_stride,
               float *out, size_t out_stride) {
    const int QG = 16 / DC > 4 ? 4 : 16 / DC;
    for (int32_t t0 = 0; t0 < nq; t0 += QG)
        attn_group(q + (size_t)t0 * q_stride, q_stride, QG, DC, SP_MIN(QG, nq - t0), kv, layer, seq, g,
                   n_pos0 + t0, scale, scores + (size_t)t0 * sc_stride, sc_stride,
                   out + (size_t)t0 * out_stride, out_stride);
}

static void avx512_attn_run(const float *q, size_t q_stride, int32_t nq, sp_kv *kv, int32_t layer,
                            int32_t seq, int32_t g, int32_t D, int32_t n_pos0, float scale,
                            float *scores, size_t sc_stride, uint16_t *q16, float *out,
                            size_t out_stride) {
    switch (D % 16 ? 0 : D / 16) {
#define DC_CASE(N)                                                                                   \
    case N:                                                                                          \
        run_dc(N, q, q_stride, nq, kv, layer, seq, g, n_pos0, scale, scores, sc_stride, out, out_stride); \
        return;
        DC_CASE(1) DC_CASE(2) DC_CASE(3) DC_CASE(4) DC_CASE(5) DC_CASE(6) DC_CASE(7) DC_CASE(8)
#undef DC_CASE
    default: /* other head sizes: AVX2, one query at a time */
        sp_attn_run(sp_fwd_ops_avx2(), q, q_stride, nq, kv, layer, seq, g, D, n_pos0, scale, scores,
                    sc_stride, q16, out, out_stride);
    }
}

static void avx512_attn_head(const float *q, sp_kv *kv, int32_t layer, int32_t seq, int32_t g,
                             int32_t D, int32_t n_pos, float scale, float *scores, uint16_t *q16,
                             float *out) {
    avx512_attn_run(q, (size_t)D, 1, kv, layer, seq, g, D, n_pos, scale, scores, (size_t)n_pos, q16, out,
                    (size_t)D);
}

static void avx512_swiglu(int64_t n, const float *g, const float *u, float *y) {
    sp_fwd_ops_avx2()->swiglu(n, g, u, y);
}

static const sp_fwd_ops AVX512 = {avx512_attn_head, avx512_attn_run, avx512_swiglu};
const sp_fwd_ops *sp_fwd_ops_avx512(void) { return &AVX512; }
