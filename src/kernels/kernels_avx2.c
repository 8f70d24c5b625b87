/* kernels_avx2.c: AVX2 + FMA + F16C level (built with -mavx2 -mfma -mf16c).
 *
 * Quantized products use the natural GGUF layouts for the weights (matrices
 * of 8-row multiples aside: packed at load, 8 rows to a vector) and, for the
 * activations, their vec_dot_type blocks in vec_dot, and in the matmul
 * tiles of Q8_0, Q4_K and Q6_K the same values converted once per matmul
 * into an aligned scratch of the tile's own (Q8A_*, Q8KA_*, Q8KB_*, Q8KC_*);
 * _mm256_maddubs_epi16 multiplies u8 by s8 and adds pairs into s16 with
 * saturation; every use below stays inside s16:
 *   Q8_0 x Q8_0: |w| * sign(x, w)       <= 2 * 127 * 127 = 32258
 *   Q4_0 x Q8_0: |q-8| * sign(x, q-8)   <= 2 * 8 * 127
 *   Q4_K x Q8_K: q (0..15) * x          <= 2 * 15 * 128 (8 such pairs
 *                                          summed in the packed Q4_K tile)
 *   Q6_K x Q8_K: q (0..63) * x          <= 2 * 63 * 127 = 16002 (4 such
 *                                          pairs summed with wrap-around in
 *                                          the packed Q6_K tile: see there)
 * Per block (or super-block) the integer sums are exact, then scaled in f32.
 *
 * Matmul tiles: one weight row at a time against up to 8 tokens (4 for the
 * float and 8-row Q4_0 tiles); each weight block is loaded and unpacked
 * once and used for every token of the tile.
 * This level is the fallback for CPUs without AVX-512 VNNI; the avx512 level
 * is the fast one.
 *
 * Order: this level (and kernels_ref.c, lane by lane) sums every dot as
 * llama.cpp's CPU backend does for a prompt (ggml's AVX2 quantized dots,
 * its repacked Q4_0 kernel for 8-row multiples, tinyBLAS for F16/BF16):
 * the integer lanes hold the same sums as ggml's, scales are applied with
 * the same FMAs and lanes are added in the same order, and K is never cut
 * into ranges (whole_k), so on the random-weight reference models, where a
 * single rounding can flip an activation's quantization, its tokens are
 * llama.cpp's (tests/reference/test_reference.c). The exception: Q8_0,
 * Q4_K and Q6_K matrices of 8-row multiples (all of a model's, in
 * practice) sum each block's or super-block's integers whole and then
 * apply its scales, one FMA per row ("the row-sum order" below), packed at
 * load: on TinyLlama's shape (bin/bench, Zen 3) Q8_0 prefill went from 70
 * to 115 tokens/s and its 5-token verification from 81-83 to 49-50 ms;
 * Q4_K_M prefill from 114 to 186-192 and its verification from 50 to 32
 * ms. Their plain-C twin is matmul_ref_level("avx2"); on the random
 * Q8_0 reference model 3 records flip at llama.cpp margins of 0.01-0.27
 * nats (tests/known_failures). The avx512 level keeps a faster order of
 * its own for every type (kernels_avx512.c).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/kernels_internal.h"

#define AI static inline __attribute__((always_inline))

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI float f16f(f16_t h) { return _cvtsh_ss(h); }

/* ggml's sum of a 4-lane accumulator: (a0 + a2) + (a1 + a3) */
AI float hsum4(__m128 m) {
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Software prefetch of the weight stream: to L2 SP_PF_L2 bytes ahead of
 * the block being read, to L1 SP_PF_L1 bytes ahead (see kernels_avx512.c
 * for the measurements; the hardware prefetchers alone leave a core well
 * short of its bandwidth on these kernels). */
#define SP_PF_L1 2048
#define SP_PF_L2 8192
AI void prefetch_ahead(const void *p, const int bytes) {
    const char *q1 = (const char *)p + SP_PF_L1, *q2 = (const char *)p + SP_PF_L2;
    _Pragma("GCC unroll 8")
    for (int l = 0; l < (bytes + 63) / 64; l++) {
        _mm_prefetch(q1 + 64 * l, _MM_HINT_T0);
        _mm_prefetch(q2 + 64 * l, _MM_HINT_T1);
    }
}

/* ---- activation quantizers (bit-exact with kernels_ref.c) --------------- */

/* 32 int32 (4 vectors, in order) -> 32 int8 in order */
AI __m256i pack_i32x32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b); /* a0-3 b0-3 | a4-7 b4-7 */
    const __m256i cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd); /* a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 */
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quantize_q8_0_avx2(const float *x, void *vy, int64_t k) {
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

static void quantize_q8_K_avx2(const float *x, void *vy, int64_t k) {
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

static void quantize_f16_avx2(const float *x, void *vy, int64_t k) {
    f16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < k; i++) y[i] = f32_to_f16(x[i]);
}

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

static void vec_dot_f32_avx2(int64_t k, float *s, const void *vw, const void *vx) { *s = f32g_dot(vw, vx, k); }

static void f32_tile(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss, int nt, int64_t k,
                     int64_t k0, int64_t k1, float *y, int64_t ldy, int acc) {
    SP_ASSERT(k0 == 0 && k1 == k && !acc); /* whole_k */
    for (int64_t r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            y[t * ldy + r] = f32g_dot((const float *)(w + r * ws), (const float *)(xs + t * xss), k);
}

static void vec_dot_f16_avx2(int64_t k, float *s, const void *vw, const void *vx) {
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

static void vec_dot_bf16_avx2(int64_t k, float *s, const void *vw, const void *vx) {
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

/* ---- quantized tiles: one row x NT tokens over blocks [b0, b1) ---------- */
/* The single-row dots below are these tiles with NT = 1. */

/* NAME_row (on the vec_dot_type's blocks: vec_dot) and NAME_rowa (on the
 * tile's aligned scratch) from NAME_row_x */
#define ROW_VARIANTS(NAME, BT)                                                                       \
    AI void NAME##_row(const BT *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,        \
                       int64_t b1, __m256 *F, __m128 *M) {                                           \
        NAME##_row_x(w, xs, xss, NT, b0, b1, F, M, 0);                                               \
    }                                                                                                \
    AI void NAME##_rowa(const BT *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,       \
                        int64_t b1, __m256 *F, __m128 *M) {                                          \
        NAME##_row_x(w, xs, xss, NT, b0, b1, F, M, 1);                                               \
    }

/* The Q8_0 tile's activations (conv_q8_0a), per 8 blocks of a token: the
 * 8 x 32 quants (32-byte aligned: in Q8_0 blocks of 34 bytes about half of
 * the 32-byte loads crossed a cache line), then the 8 d as f32 (converted
 * once per token, not per row and token). The same values, so the same
 * sums. */
#define Q8A_BYTES 288
#define Q8A_D 256

/* One weight block against every token's Q8_0 activations, F[t] += dw *
 * d_t * (q . x_t); the sign trick makes maddubs (u8 x s8) compute the
 * signed product exactly. Token t's 32 quants are at xq + t * xss and its
 * d at xd + t * xss: f32 on the tile's scratch (XA), else the block's f16. */
AI void q8_block_tokens(const __m256i q, const float dw, const uint8_t *xq, const uint8_t *xd, size_t xss,
                        const int NT, __m256 *F, const int XA) {
    const __m256i ones = _mm256_set1_epi16(1), aq = _mm256_sign_epi8(q, q);
    const __m256 vdw = _mm256_set1_ps(dw);
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + t * xss));
        __m256 d; /* dw * d_x, as ggml rounds it */
        if (XA) {
            d = _mm256_mul_ps(vdw, _mm256_broadcast_ss((const float *)(xd + t * xss)));
        } else {
            f16_t h;
            memcpy(&h, xd + t * xss, sizeof h);
            d = _mm256_set1_ps(dw * f16f(h));
        }
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(x, q)), ones);
        F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, F[t]);
    }
}

/* XA: the scratch's groups of 8 blocks (b0 a multiple of 8: the tiles take
 * the whole of K) */
AI void q8_0_row_x(const block_q8_0 *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                   int64_t b1, __m256 *F, __m128 *M, const int XA) {
    (void)M;
    if (!XA) {
        for (int64_t b = b0; b < b1; b++) {
            if (!(b & 1)) prefetch_ahead(&w[b], 64);
            const block_q8_0 *xb = (const block_q8_0 *)xs + b;
            q8_block_tokens(_mm256_loadu_si256((const __m256i *)w[b].qs), f16f(w[b].d), (const uint8_t *)xb->qs,
                            (const uint8_t *)&xb->d, xss, NT, F, 0);
        }
        return;
    }
    for (int64_t b = b0; b < b1; b += 8) {
        const uint8_t *xq = xs + (b >> 3) * Q8A_BYTES, *xd = xq + Q8A_D;
        const int64_t e = SP_MIN(b1, b + 8);
        for (int64_t i = b; i < e; i++, xq += 32, xd += 4) {
            if (!(i & 1)) prefetch_ahead(&w[i], 64);
            q8_block_tokens(_mm256_loadu_si256((const __m256i *)w[i].qs), f16f(w[i].d), xq, xd, xss, NT, F, 1);
        }
    }
}
ROW_VARIANTS(q8_0, block_q8_0)

AI void q4_0_row(const block_q4_0 *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                 int64_t b1, __m256 *F, __m128 *M) {
    (void)M;
    const __m256i m4 = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8);
    for (int64_t b = b0; b < b1; b++) {
        if (!(b & 3)) prefetch_ahead(&w[b], 72);
        const __m128i raw = _mm_loadu_si128((const __m128i *)w[b].qs);
        /* low nibbles = elements 0..15, high nibbles = 16..31 */
        const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        const __m256i q = _mm256_sub_epi8(nib, eight);
        const block_q8_0 *xb = (const block_q8_0 *)xs + b;
        q8_block_tokens(q, f16f(w[b].d), (const uint8_t *)xb->qs, (const uint8_t *)&xb->d, xss, NT, F, 0);
    }
}

/* The Q4_K tile's activations (conv_q8_Ka), per super-block of a token:
 * the 256 quants at a 64-byte boundary (so no 32-byte load of them
 * crosses a cache line: in a Q8_K block they start 4 bytes in, and every
 * other load did), d, and the 8 sums of 32 (bsums paired, as the tile's
 * min term takes them; it had paired them with an hadd per token and
 * super-block). Same integers and the same d: the sums do not change. */
#define Q8KA_BYTES 320
#define Q8KA_D 256
#define Q8KA_S8 272

/* pshufb masks: u16 element j of a 128-bit lane in all 8 of its u16 slots
 * (Q4_K: scale j of the super-block, held in both 128-bit lanes) */
static const uint8_t Q4K_BCAST16[8][32] __attribute__((aligned(32))) = {
#define B1(j) {2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, \
               2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
               2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1}
    B1(0), B1(1), B1(2), B1(3), B1(4), B1(5), B1(6), B1(7)
#undef B1
};

/* Per token and super-block: 8 maddubs, 8 madd (the scale of each 32
 * values folded in, as ggml), 8 adds, then the two FMAs; the unpacking
 * (nibbles, scales) is shared by the tile's tokens. Written so that only
 * the tokens' int32 accumulators and the current chunk stay live: with
 * every product of a chunk computed first (what gcc made of the earlier
 * version) the 16 ymm registers overflowed and a 5-token tile spent ~15
 * of its ~68 instructions per token and super-block on spills. The scales
 * are broadcast by pshufb from one vector (1 op each, was 3: movzx, movd,
 * vpbroadcastw). */
/* The integer part of a super-block b for NT tokens: acc[t] = per lane,
 * sum over sub-blocks j of sc_j * (its quants . x's), 8 int32 lanes. */
AI void q4_K_sb_ints(const block_q4_K *wb, const uint8_t *sm, const uint8_t *xs, size_t xss, const int NT,
                     int64_t b, __m256i *acc, const int XA) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m128i s16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)); /* sc0..sc7 */
    const __m256i scv = _mm256_broadcastsi128_si256(s16);
    _Pragma("GCC unroll 16")
    for (int j = 0; j < 4; j++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * j));
        const __m256i lo = _mm256_and_si256(raw, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        const __m256i sc_lo = _mm256_shuffle_epi8(scv, _mm256_load_si256((const __m256i *)Q4K_BCAST16[2 * j]));
        const __m256i sc_hi = _mm256_shuffle_epi8(scv, _mm256_load_si256((const __m256i *)Q4K_BCAST16[2 * j + 1]));
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            const int8_t *xq = XA ? (const int8_t *)(xs + t * xss + b * Q8KA_BYTES)
                                  : ((const block_q8_K *)(xs + t * xss) + b)->qs;
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + 64 * j));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 64 * j + 32));
            const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), sc_lo),
                                               _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), sc_hi));
            acc[t] = j ? _mm256_add_epi32(acc[t], p) : p;
            /* keeps gcc from summing all products at the end (it
             * reassociates the integer adds and spills the products) */
            __asm__("" : "+x"(acc[t]));
        }
    }
}

AI void q4_K_row_x(const block_q4_K *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                   int64_t b1, __m256 *F, __m128 *M, const int XA) {
    for (int64_t b = b0; b < b1; b++) {
        prefetch_ahead(&w[b], sizeof(block_q4_K));
        uint8_t sm[16];
        q4_K_unpack_scales(w[b].scales, sm);
        __m256i acc[8];
        q4_K_sb_ints(&w[b], sm, xs, xss, NT, b, acc, XA);
        const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8))); /* m0..m7 */
        const float d = f16f(w[b].d), dmin = f16f(w[b].dmin);
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            /* the min term in 4 lanes of its own, as ggml: lane l holds
             * m_{2l} s_{2l} + m_{2l+1} s_{2l+1}, s_j the sum of sub-block j
             * (fnmadd(a, b, c) rounds -(a b) + c as fma(-a, b, c) does) */
            __m128i s8;
            float dx;
            if (XA) {
                const uint8_t *xa = xs + t * xss + b * Q8KA_BYTES;
                s8 = _mm_load_si128((const __m128i *)(xa + Q8KA_S8));
                memcpy(&dx, xa + Q8KA_D, 4);
            } else {
                const block_q8_K *xb = (const block_q8_K *)(xs + t * xss) + b;
                const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
                s8 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
                dx = xb->d;
            }
            M[t] = _mm_fnmadd_ps(_mm_set1_ps(dx * dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins, s8)), M[t]);
            F[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(acc[t]), F[t]);
        }
    }
}

ROW_VARIANTS(q4_K, block_q4_K)

/* The Q6_K tile's activations (conv_q8_Kb), per super-block of a token:
 * the 256 quants (64-byte aligned), then maddubs(32, x) of each 32 of them
 * (the 16 sums of pairs ggml subtracts for q - 32: 256 bytes), then d. A
 * token's tile then takes one maddubs per 32 weights instead of two, on
 * the two pipes that also take every madd. Up to 5 tokens only: at 8 the
 * twice larger scratch no longer stayed in L1 (Zen 3, k = 2048: 6.2-7.1 ->
 * 6.8-7.6 ns per 256 weights and token), so those tiles compute the pairs
 * as before (the same integers either way). */
#define Q8KB_BYTES 576
#define Q8KB_X32 256
#define Q8KB_D 512

/* pshufb masks: u16 element 2qd of a 128-bit lane in the low lane, 2qd + 1
 * in the high one (scales 8n + 2qd and 8n + 2qd + 1 of a Q6_K half) */
static const uint8_t Q6K_BCAST16[4][32] __attribute__((aligned(32))) = {
#define B2(q) {4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, \
               4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, \
               4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3,     \
               4 * q + 2, 4 * q + 3}
    B2(0), B2(1), B2(2), B2(3)
#undef B2
};

/* The integer part of a super-block b for NT tokens: acc[t] = per lane,
 * sum over 32-value chunks of sc * ((q - 32) . x) over 4 of its values */
AI void q6_K_sb_ints(const block_q6_K *wb, const uint8_t *xs, size_t xss, const int NT, int64_t b,
                     __m256i *acc, const int XA) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
    /* the 16 scales as s16, each half of the block's in both 128-bit lanes */
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
    const __m256i sh[2] = {_mm256_permute2x128_si256(s16, s16, 0x00), _mm256_permute2x128_si256(s16, s16, 0x11)};
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_si256();
    _Pragma("GCC unroll 16")
    for (int n = 0; n < 2; n++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * n));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * n + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * n));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
        _Pragma("GCC unroll 16")
        for (int qd = 0; qd < 4; qd++) {
            /* elements l = 0..15 use scale 8n + 2qd, l = 16..31 the next one */
            const __m256i sc = _mm256_shuffle_epi8(sh[n], _mm256_load_si256((const __m256i *)Q6K_BCAST16[qd]));
            _Pragma("GCC unroll 16")
            for (int t = 0; t < NT; t++) {
                /* (q - 32) x within each pair, as ggml: the lanes then
                 * hold the same integers as its, so the f32 sums agree;
                 * on the tile's scratch the 32 x pairs come converted */
                __m256i p;
                if (XA) {
                    const uint8_t *xa = xs + t * xss + b * Q8KB_BYTES;
                    const __m256i xv = _mm256_load_si256((const __m256i *)(xa + 128 * n + 32 * qd));
                    p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[qd], xv),
                                         NT <= 5 ? _mm256_load_si256((const __m256i *)(xa + Q8KB_X32 + 128 * n + 32 * qd))
                                                 : _mm256_maddubs_epi16(m32, xv));
                } else {
                    const block_q8_K *xb = (const block_q8_K *)(xs + t * xss) + b;
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb->qs + 128 * n + 32 * qd));
                    p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[qd], xv), _mm256_maddubs_epi16(m32, xv));
                }
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p, sc));
                __asm__("" : "+x"(acc[t])); /* no reassociation: see q4_K_row */
            }
        }
    }
}

AI void q6_K_row_x(const block_q6_K *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                   int64_t b1, __m256 *F, __m128 *M, const int XA) {
    (void)M;
    for (int64_t b = b0; b < b1; b++) {
        const block_q6_K *wb = &w[b];
        prefetch_ahead(wb, sizeof(block_q6_K));
        __m256i acc[8];
        q6_K_sb_ints(wb, xs, xss, NT, b, acc, XA);
        const float d = f16f(wb->d);
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            float dx;
            if (XA) memcpy(&dx, xs + t * xss + b * Q8KB_BYTES + Q8KB_D, 4);
            else dx = ((const block_q8_K *)(xs + t * xss) + b)->d;
            F[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(acc[t]), F[t]);
        }
    }
}

ROW_VARIANTS(q6_K, block_q6_K)

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

/* ---- Q4_0 matrices of 8-row multiples: ggml's repacked order ----------- */

#define Q4_0R8_WBLOCK (8 * (int64_t)sizeof(block_q4_0)) /* 144: one block of 8 rows */

/* llama.cpp repacks a Q4_0 matrix whose row count is a multiple of 8 into
 * 8-row interleaved blocks at load (on any AVX2 CPU) and sums each output
 * as acc = fma(isum_b, dw_b * dx_b, acc) over the blocks b in order, isum_b
 * the block's exact integer dot. Here 8 rows go in the 8 lanes of one
 * accumulator: each row's block dot in 8 int32 lanes, reduced across the 8
 * rows by an hadd tree (exact), then one FMA. Costs ~30 ops per block per
 * 8 rows and token against ~4 x 8 for the 8-lane order; Q4_0 is a legacy
 * format, and the point is summing as the reference engine does. Q8_0
 * matrices of 8-row multiples left on the file's rows (SPECULA_REPACK=0)
 * take the same loop (Q8): the order of the packed Q8_0 tile below. */
AI void r8_group(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int NT, int64_t b0, int64_t b1,
                 __m256 *F, const int Q8) {
    const __m256i m4 = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8), ones = _mm256_set1_epi16(1);
    for (int64_t b = b0; b < b1; b++) {
        /* Each of the 8 rows is a short stream (a row of 2,048 weights is 18
         * cache lines), too short for the hardware prefetchers to ramp up on,
         * and the next 8 rows follow them in memory: prefetch those, 144
         * bytes (their share) per block, to L2 (Q8_0: 272). */
        if (!(b & 3)) {
            const char *nx = (const char *)w + 8 * ws + b * (Q8 ? 8 * sizeof(block_q8_0) : Q4_0R8_WBLOCK);
            _Pragma("GCC unroll 17")
            for (int l = 0; l < 17; l++)
                if (Q8 || l < 10) _mm_prefetch(nx + 64 * l, _MM_HINT_T1);
        }
        __m256i q[8], aq[8];
        float dw[8];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < 8; r++) {
            if (Q8) {
                const block_q8_0 *wb = (const block_q8_0 *)(w + r * ws) + b;
                q[r] = _mm256_loadu_si256((const __m256i *)wb->qs);
                dw[r] = f16f(wb->d);
            } else {
                const block_q4_0 *wb = (const block_q4_0 *)(w + r * ws) + b;
                const __m128i raw = _mm_loadu_si128((const __m128i *)wb->qs);
                q[r] = _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4), eight);
                dw[r] = f16f(wb->d);
            }
            aq[r] = _mm256_sign_epi8(q[r], q[r]);
        }
        const __m256 vdw = _mm256_loadu_ps(dw);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < NT; t++) {
            const block_q8_0 *xb = (const block_q8_0 *)(xs + t * xss) + b;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)xb->qs);
            __m256i p[8];
            _Pragma("GCC unroll 8")
            for (int r = 0; r < 8; r++)
                p[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(aq[r], _mm256_sign_epi8(xv, q[r])), ones);
            const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
            const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
            const __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                                 _mm256_permute2x128_si256(h0, h1, 0x31));
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(vdw, _mm256_set1_ps(f16f(xb->d))), F[t]);
        }
    }
}

/* The tile entry points' shared parts: the signature, and the dispatch of
 * 1..3 tokens to NAME_nt (each token count its own unrolled body). */
#define TILE_SIGNATURE(NAME)                                                                         \
    static void NAME##_tile(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,  \
                            int nt, int64_t k, int64_t k0, int64_t k1, float *y, int64_t ldy, int acc)
#define NT_CASES3(NAME)                                                                              \
    case 1: NAME##_nt(w, ws, nr, xs, xss, 1, k0, k1, y, ldy, acc); return;                           \
    case 2: NAME##_nt(w, ws, nr, xs, xss, 2, k0, k1, y, ldy, acc); return;                           \
    case 3: NAME##_nt(w, ws, nr, xs, xss, 3, k0, k1, y, ldy, acc); return;

/* NAME_tile: the tile entry point over NAME_nt for up to 4 tokens */
#define TILE4(NAME)                                                                                  \
    TILE_SIGNATURE(NAME) {                                                                           \
        (void)k;                                                                                     \
        switch (nt) {                                                                                \
        NT_CASES3(NAME)                                                                              \
        default: NAME##_nt(w, ws, nr, xs, xss, 4, k0, k1, y, ldy, acc); return;                      \
        }                                                                                            \
    }

/* The 8-row loop of the 8-row kernels (Q4_0 on the file's rows or packed,
 * and the packed Q8_0, Q4_K and Q6_K): GROUP sums blocks [b0, b1) (QK
 * weights each) of 8 rows, one per lane of F[t], for up to MAXNT tokens; a
 * row's result is its lane, stored as is. */
#define R8NT(NAME, GROUP, QK, MAXNT)                                                                 \
    AI void NAME##_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,        \
                      const int NT, int64_t k0, int64_t k1, float *y, int64_t ldy, int acc) {        \
        SP_ASSERT(nr % 8 == 0);                                                                      \
        for (int64_t r = 0; r < nr; r += 8) {                                                        \
            __m256 F[MAXNT];                                                                         \
            _Pragma("GCC unroll 8")                                                                  \
            for (int t = 0; t < NT; t++) F[t] = _mm256_setzero_ps();                                 \
            GROUP(w + r * ws, ws, xs, xss, NT, k0 / QK, k1 / QK, F);                                 \
            _Pragma("GCC unroll 8")                                                                  \
            for (int t = 0; t < NT; t++) {                                                           \
                float *o = y + t * ldy + r;                                                          \
                _mm256_storeu_ps(o, acc ? _mm256_add_ps(_mm256_loadu_ps(o), F[t]) : F[t]);           \
            }                                                                                        \
        }                                                                                            \
    }
#define R8TILE(NAME, GROUP) R8NT(NAME, GROUP, 32, 4) TILE4(NAME)

AI void q4_0r8_group(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                     int64_t b1, __m256 *F) {
    r8_group(w, ws, xs, xss, NT, b0, b1, F, 0);
}
/* the same for Q8_0 on the file's rows: the order of its packed tile
 * (q8_0p8 below) */
AI void q8_0r8_group(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                     int64_t b1, __m256 *F) {
    r8_group(w, ws, xs, xss, NT, b0, b1, F, 1);
}
R8TILE(q4_0r8, q4_0r8_group)
R8TILE(q8_0r8, q8_0r8_group)

/* ---- Q4_0, 8-row multiples, packed at load: one row per lane ----------- */

/* The order above sums each block's exact integer dot across 8 rows with an
 * hadd tree: ~100 ops per block of 8 rows at one token, which left decode
 * compute-bound at ~11 GB/s per core (18 tokens/s on TinyLlama's shape,
 * against llama.cpp's 48). Packed at load (matmul_pack), the 8 rows'
 * quants are interleaved so that each int32 lane holds one row's 4
 * consecutive nibbles, and a block costs ~17 ops to unpack plus ~30 per
 * token, with no cross-lane work:
 *
 *   packed 8-row group, per block b (144 bytes, as 8 GGUF blocks):
 *     P[m] (m < 4, 32 B): lane r = row r's qs[4m..4m+3]; its low nibbles
 *          are elements 4m..4m+3, its high ones 16+4m..16+4m+3;
 *     d[8] f16: the rows' scales.
 *   activations, per block of 32 (40 bytes): qs[32] int8 as Q8_0's, d as
 *     f32 (the Q8_0 block's f16 scale, widened), s8 = 8 * sum(qs).
 *
 * Per token: sum_j maddubs(q nibbles (u8), broadcast of x's 4 bytes for
 * group j) in s16 (8 groups: |sum| <= 8 * 2 * 15 * 127 = 30,480, no
 * saturation), madd by 1 -> int32 per row, minus s8 (the -8 of each
 * nibble): the same exact integer as the hadd tree's, then the same FMA
 * with the same scale product, so every output is the same bits. */
#define Q4_0R8_XBLOCK 40

AI int32_t load_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

AI void q4_0p8_group(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                     int64_t b1, __m256 *F) {
    (void)ws; /* the 8 rows are interleaved: one stream */
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = w + b * Q4_0R8_WBLOCK;
        if (!(b & 3)) { /* the 4 blocks from here on: 576 bytes, 9 lines */
            _Pragma("GCC unroll 9")
            for (int l = 0; l < 4 * Q4_0R8_WBLOCK / 64; l++) {
                _mm_prefetch((const char *)p + SP_PF_L1 + 64 * l, _MM_HINT_T0);
                _mm_prefetch((const char *)p + SP_PF_L2 + 64 * l, _MM_HINT_T1);
            }
        }
        __m256i W[8];
        _Pragma("GCC unroll 4")
        for (int m = 0; m < 4; m++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 32 * m));
            W[m] = _mm256_and_si256(v, m4);
            W[4 + m] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 128)));
        _Pragma("GCC unroll 4")
        for (int t = 0; t < NT; t++) {
            const uint8_t *xb = xs + t * xss + b * Q4_0R8_XBLOCK;
            __m256i a = _mm256_maddubs_epi16(W[0], _mm256_set1_epi32(load_i32(xb)));
            _Pragma("GCC unroll 7")
            for (int j = 1; j < 8; j++)
                a = _mm256_add_epi16(a, _mm256_maddubs_epi16(W[j], _mm256_set1_epi32(load_i32(xb + 4 * j))));
            float dx;
            memcpy(&dx, xb + 32, 4);
            const __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(a, ones), _mm256_set1_epi32(load_i32(xb + 36)));
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), F[t]);
        }
    }
}

R8TILE(q4_0p8, q4_0p8_group)

/* Activations for q4_0p8: Q8_0 blocks (bit-exact with the reference
 * quantizer), each rewritten as the 40-byte block above. */
static void conv_q4_0p8(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b = 0; b < k / 32; b++) {
        block_q8_0 q;
        quantize_q8_0_avx2(x + 32 * b, &q, 32);
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

/* ---- Q4_K, 8-row multiples: the row-sum order, packed at load ---------- */

/* ggml's Q4_K order (q4_K_row_x) keeps 8 int32 lanes per row and token, so
 * every 32 weights cost a maddubs and a madd (the scale) per token: 16 ops
 * per super-block and token on the two pipes that take them, ~8 cycles, and
 * a verification of 5 tokens was compute-bound at ~2.5x a single token
 * (Zen 3, TinyLlama's shape). Matrices of 8-row multiples (every matrix of
 * the models this runs) sum in an order of their own instead (as the
 * avx512 level's types do; llama.cpp's CPU backend has since repacked Q4_K
 * for AVX2 as well):
 *
 *   per (row, token, super-block): the exact integers
 *     isum = sum_j sc_j * (q_j . x_j),  msum = sum_j m_j * s_j
 *   (j the 8 sub-blocks, s_j the sum of x_j), then
 *     acc = fma((float)isum, d * dx, acc);  acc = fma(-(float)msum, dmin * dx, acc)
 *   over the super-blocks in order; y = acc.
 *
 * Packed at load (matmul_pack), 8 rows share each vector, one row per
 * 32-bit lane, so a sub-block of 8 rows is 8 maddubs summed in int16 and ONE
 * madd with the 8 rows' scales: 9 ops on those pipes per 32 weights of 8
 * rows and token instead of 16. The same integers, and the same two FMAs, as
 * kernels_ref.c's vec_dot_q4_K_rows8_ref, so the packed kernel, the kernel on
 * the file's rows (q4_K_rs, no_repack) and the reference agree bit for bit.
 * The reference and the other shapes keep llama.cpp's February 2025 order
 * (README "Correctness"). */

/* On the file's rows: ggml's integer loop, then each lane sum reduced
 * exactly (hadd of int32) and the two scalar FMAs. */
AI int32_t hsum4_epi32(__m128i s) {
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
AI int32_t hsum_epi32(__m256i v) {
    return hsum4_epi32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* The row loop of the kernels on the file's rows in the row-sum order:
 * SB adds super-block b's terms for NT tokens to S[t], in order. */
#define RSNT(NAME, BT, SB)                                                                           \
    AI void NAME##_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,        \
                      const int NT, int64_t k0, int64_t k1, float *y, int64_t ldy, int acc) {        \
        for (int64_t r = 0; r < nr; r++) {                                                           \
            const BT *wr = (const BT *)(w + r * ws);                                                 \
            float S[8] = {0};                                                                        \
            for (int64_t b = k0 / 256; b < k1 / 256; b++) {                                          \
                prefetch_ahead(&wr[b], sizeof(BT));                                                  \
                SB(&wr[b], xs, xss, NT, b, S);                                                       \
            }                                                                                        \
            _Pragma("GCC unroll 8")                                                                  \
            for (int t = 0; t < NT; t++) y[t * ldy + r] = acc ? y[t * ldy + r] + S[t] : S[t];        \
        }                                                                                            \
    }

AI void q4_K_rs_sb(const block_q4_K *wb, const uint8_t *xs, size_t xss, const int NT, int64_t b, float *S) {
    uint8_t sm[16];
    q4_K_unpack_scales(wb->scales, sm);
    __m256i ia[8];
    q4_K_sb_ints(wb, sm, xs, xss, NT, b, ia, 1);
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8)));
    const float d = f16f(wb->d), dmin = f16f(wb->dmin);
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        const uint8_t *xa = xs + t * xss + b * Q8KA_BYTES;
        float dx;
        memcpy(&dx, xa + Q8KA_D, 4);
        const __m128i ms = _mm_madd_epi16(mins, _mm_load_si128((const __m128i *)(xa + Q8KA_S8)));
        S[t] = fmaf((float)hsum_epi32(ia[t]), d * dx, S[t]);
        S[t] = fmaf(-(float)hsum4_epi32(ms), dmin * dx, S[t]);
    }
}
RSNT(q4_K_rs, block_q4_K, q4_K_rs_sb)

#define Q4KP8_SC 1024   /* after the quants */
#define Q4KP8_MN 1088
#define Q4KP8_D 1152
#define Q4KP8_DMIN 1168
#define Q4KP8_BLOCK 1184 /* one super-block of 8 rows: 148 bytes a row (file: 144) */

/* Packed 8-row group, per super-block (Q4KP8_BLOCK bytes):
 *   qs  [4 pairs p][8 groups g][8 rows r][4 B]: row r's qs[32p + 4g .. +3];
 *       low nibbles are sub-block 2p's elements 4g..4g+3, high 2p+1's;
 *   sc  [8 sub-blocks j][8 rows] u8 (6-bit scales, unpacked);
 *   mn  [4 pairs p][8 rows][2] u8: the mins of sub-blocks 2p, 2p+1;
 *   d, dmin [8 rows] f16.
 * 4 bytes a row more than the file (the scales unpacked: 2.8% more to
 * stream in decode, against ~20 ops per super-block and 8 rows to unpack
 * them from 6 bits).
 * Activations: conv_q8_Ka's layout (quants, d, sums of 32 as int16). */
AI void q4_Kp8_sub(const uint8_t *qp, const int HI, const uint8_t *sc, const uint8_t *xa, size_t xss,
                   const int NT, __m256i *isum, const int first, const char *pf) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    /* this sub-block's share of the super-block's prefetch (see q4_Kp8_sb) */
    _mm_prefetch(pf + SP_PF_L1, _MM_HINT_T0);
    _mm_prefetch(pf + SP_PF_L1 + 64, _MM_HINT_T0);
    _mm_prefetch(pf + SP_PF_L1 + 128, _MM_HINT_T0);
    const __m128i s8 = _mm_loadl_epi64((const __m128i *)sc);
    const __m256i scv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8)); /* (sc_r, sc_r) per lane */
    __m256i a[8];
    _Pragma("GCC unroll 8")
    for (int g = 0; g < 8; g++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qp + 32 * g));
        const __m256i q = HI ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4) : _mm256_and_si256(raw, m4);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < NT; t++) {
            /* |pair| <= 2 * 15 * 128: 8 of them fit int16 */
            const __m256i pr = _mm256_maddubs_epi16(q, _mm256_set1_epi32(load_i32(xa + t * xss + 4 * g)));
            a[t] = g ? _mm256_add_epi16(a[t], pr) : pr;
            __asm__("" : "+x"(a[t])); /* as in q4_K_sb_ints: no products computed ahead and spilled */
        }
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < NT; t++) {
        const __m256i v = _mm256_madd_epi16(a[t], scv);
        isum[t] = first ? v : _mm256_add_epi32(isum[t], v);
    }
}

/* One super-block of 8 rows for NT tokens: isum[t] (a loop over the
 * 4 pairs of sub-blocks, not unrolled: unrolled, the ~1,100 instructions
 * of a super-block did not stay in the op cache) */
AI void q4_Kp8_sb(const uint8_t *p, const uint8_t *xa, size_t xss, const int NT, __m256i *isum) {
    /* the prefetch of the stream ahead, 3 lines per sub-block (19 lines a
     * super-block, 24 prefetched: the last 5 again by the next one), into
     * L1 SP_PF_L1 bytes ahead only. All 19 at the start of a super-block
     * stalled on the miss buffers (decode -12% against ggml's order, whole
     * model); the L2 prefetch SP_PF_L2 ahead that the other kernels add cost
     * this one more than it gave (bin/tilebench q4_K 1 65536 5632 10 2, 3
     * runs: 4.8 ns per 256 weights with it, 3.9 without, ggml's order 4.2-4.3;
     * K = 2048: 3.6-4.1 with, 3.3-3.4 without, 4.1-4.2). 1.5 and 3 KiB
     * ahead gave the same decode within this VM's noise. */
    const char *pf = (const char *)p;
    q4_Kp8_sub(p, 0, p + Q4KP8_SC, xa, xss, NT, isum, 1, pf);
    q4_Kp8_sub(p, 1, p + Q4KP8_SC + 8, xa + 32, xss, NT, isum, 0, pf + 192);
    _Pragma("GCC unroll 1")
    for (int pp = 1; pp < 4; pp++) {
        q4_Kp8_sub(p + 256 * pp, 0, p + Q4KP8_SC + 16 * pp, xa + 64 * pp, xss, NT, isum, 0, pf + 384 * pp);
        q4_Kp8_sub(p + 256 * pp, 1, p + Q4KP8_SC + 16 * pp + 8, xa + 64 * pp + 32, xss, NT, isum, 0,
                   pf + 384 * pp + 192);
    }
}

AI void q4_Kp8_group(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                     int64_t b1, __m256 *F) {
    (void)ws; /* the 8 rows are interleaved: one stream */
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = w + b * Q4KP8_BLOCK;
        const uint8_t *xa = xs + b * Q8KA_BYTES;
        __m256i isum[8];
        /* one pass for up to 8 tokens: from 6 on, the int32 sums no longer
         * fit the registers beside the int16 ones and go to L1 (a store per
         * sub-block and token), which costs less than unpacking the quants
         * twice, in two passes of 4 + the rest as before (bin/tilebench q4_K
         * 8 512 2048, 2 runs each: 2.48-2.53 ns per 256 weights and token,
         * was 2.77-2.78; 6 tokens 2.60, was 2.85) */
        q4_Kp8_sb(p, xa, xss, NT, isum);
        __m256i mv[4];
        _Pragma("GCC unroll 4")
        for (int i = 0; i < 4; i++) mv[i] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p + Q4KP8_MN + 16 * i)));
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + Q4KP8_D)));
        const __m256 dm8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + Q4KP8_DMIN)));
        _Pragma("GCC unroll 8")
        for (int t = 0; t < NT; t++) {
            const uint8_t *xt = xa + t * xss;
            __m256i ms = _mm256_madd_epi16(mv[0], _mm256_set1_epi32(load_i32(xt + Q8KA_S8)));
            _Pragma("GCC unroll 3")
            for (int i = 1; i < 4; i++)
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mv[i], _mm256_set1_epi32(load_i32(xt + Q8KA_S8 + 4 * i))));
            float dx;
            memcpy(&dx, xt + Q8KA_D, 4);
            const __m256 vdx = _mm256_set1_ps(dx);
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d8, vdx), F[t]);
            F[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm8, vdx), F[t]);
        }
    }
}

R8NT(q4_Kp8, q4_Kp8_group, 256, 8)

/* NAME_tile over NAME_nt for 1..8 tokens */
#define TILE8(NAME)                                                                                  \
    TILE_SIGNATURE(NAME) {                                                                           \
        (void)k;                                                                                     \
        switch (nt) {                                                                                \
        NT_CASES3(NAME)                                                                              \
        case 4: NAME##_nt(w, ws, nr, xs, xss, 4, k0, k1, y, ldy, acc); return;                       \
        case 5: NAME##_nt(w, ws, nr, xs, xss, 5, k0, k1, y, ldy, acc); return;                       \
        case 6: NAME##_nt(w, ws, nr, xs, xss, 6, k0, k1, y, ldy, acc); return;                       \
        case 7: NAME##_nt(w, ws, nr, xs, xss, 7, k0, k1, y, ldy, acc); return;                       \
        default: NAME##_nt(w, ws, nr, xs, xss, 8, k0, k1, y, ldy, acc); return;                      \
        }                                                                                            \
    }
TILE8(q4_K_rs)
TILE8(q4_Kp8)

/* row i's super-block into its 8-row group's packed one (pack_rows_avx2) */
static void put_q4_K(const void *vb, uint8_t *o, int i) {
    const block_q4_K *blk = vb;
    for (int pq = 0; pq < 4; pq++)
        for (int gq = 0; gq < 8; gq++) memcpy(o + 256 * pq + 32 * gq + 4 * i, blk->qs + 32 * pq + 4 * gq, 4);
    uint8_t sm[16];
    q4_K_unpack_scales(blk->scales, sm);
    for (int j = 0; j < 8; j++) {
        o[Q4KP8_SC + 8 * j + i] = sm[j];
        o[Q4KP8_MN + 16 * (j >> 1) + 2 * i + (j & 1)] = sm[8 + j];
    }
    memcpy(o + Q4KP8_D + 2 * i, &blk->d, 2);
    memcpy(o + Q4KP8_DMIN + 2 * i, &blk->dmin, 2);
}

/* ---- Q8_0, 8-row multiples: packed at load, one row per lane ---------- */

/* ggml's Q8_0 order (q8_0_row_x) keeps 8 f32 lanes per row and token, so
 * each block of 32 weights costs, per row and token, a maddubs and a madd,
 * and then a convert, a multiply and an FMA on the f32 lanes: on Zen 3 the
 * integer multiplies and the FMAs share two pipes, and a tile took 6.8-7.0
 * ns per 256 weights and token (512 x 2048, 5-8 tokens, in L1; ik_llama.cpp's
 * prefill was 1.5x Specula's). Matrices of 8-row multiples are packed at
 * load, 8 rows to a vector, one row (4 weights) per 32-bit lane, and sum in
 * llama.cpp's order for repacked Q4_0 (kernels_ref.c's
 * vec_dot_q8_0_rows8_ref):
 *
 *   per (row, token, block): acc = fma((float)(q . x), dw * dx, acc)
 *
 * The block's exact integer dot comes lane by lane from the sign trick, a
 * maddubs and a madd by 1 per 8 rows and 4 weights (|pair| <= 2 * 128 * 127
 * fits int16; two pairs do not, hence a madd each), then one convert,
 * multiply and FMA per 8 rows: per 32 weights of a row and token, 2.25 ops
 * on those pipes instead of 5.
 *
 *   packed 8-row group, per block (272 bytes, as 8 GGUF blocks):
 *     qs [8 groups g][8 rows][4 B]: row r's qs[4g..4g+3];  d [8 rows] f16.
 *   activations: conv_q8_0a's (Q8A_BYTES per 8 blocks). */
#define Q8P8_BLOCK 272

AI void q8_0p8_group(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                     int64_t b1, __m256 *F) {
    (void)ws; /* the 8 rows are interleaved: one stream */
    const __m256i ones = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 1")
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = w + b * Q8P8_BLOCK;
        const uint8_t *xq = xs + (b >> 3) * Q8A_BYTES + 32 * (b & 7), *xd = xs + (b >> 3) * Q8A_BYTES + Q8A_D + 4 * (b & 7);
        /* the stream SP_PF_L1 ahead into L1 only, as the packed K-quant
         * tiles (4.25 lines a block: 5, the last again by the next) */
        _Pragma("GCC unroll 5")
        for (int l = 0; l < 5; l++) _mm_prefetch((const char *)p + SP_PF_L1 + 64 * l, _MM_HINT_T0);
        __m256i isum[8];
        _Pragma("GCC unroll 8")
        for (int g = 0; g < 8; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(p + 32 * g));
            const __m256i aq = _mm256_sign_epi8(q, q);
            _Pragma("GCC unroll 8")
            for (int t = 0; t < NT; t++) {
                const __m256i xv = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(xq + t * xss + 4 * g)), q);
                const __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, xv), ones);
                isum[t] = g ? _mm256_add_epi32(isum[t], v) : v;
                __asm__("" : "+x"(isum[t])); /* as in q4_K_sb_ints */
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 256)));
        _Pragma("GCC unroll 8")
        for (int t = 0; t < NT; t++)
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]),
                                   _mm256_mul_ps(dw, _mm256_broadcast_ss((const float *)(xd + t * xss))), F[t]);
    }
}
R8NT(q8_0p8, q8_0p8_group, 32, 8)
TILE8(q8_0p8)

static void put_q8_0(const void *vb, uint8_t *o, int i) {
    const block_q8_0 *blk = vb;
    for (int m = 0; m < 8; m++) memcpy(o + 32 * m + 4 * i, blk->qs + 4 * m, 4);
    memcpy(o + 256 + 2 * i, &blk->d, 2);
}

/* ---- Q6_K, 8-row multiples: the row-sum order, packed at load ---------- */

/* ggml's Q6_K order (q6_K_row_x) takes, per 32 weights of a row and token,
 * a maddubs, the subtraction of the 32 x pairs and a madd (the scale), and
 * unpacks the 6-bit quants per row: 5.0 ns per 256 weights and token at 5
 * tokens (Zen 3, 512 x 2048, in L1), twice the packed Q4_K tile. Matrices of
 * 8-row multiples sum as Q4_K's do:
 *
 *   per (row, token, super-block): isum = sum_j sc_j * ((q_j - 32) . x_j)
 *   (j the 16 sub-blocks of 16), exact; acc = fma((float)isum, d * dx, acc)
 *
 * (kernels_ref.c's vec_dot_q6_K_rows8_ref). Packed, 8 rows share each
 * vector, one row per 32-bit lane (4 weights): a sub-block of 8 rows is 4
 * maddubs of q (0..63) by x, summed in int16 with wrap-around, minus the
 * token's 32 x sums for those lanes (conv_q8_Kc), then ONE madd with the 8
 * rows' scales. Wrap-around is exact because the true lane sum fits int16:
 * 8 values of |(q - 32) x| <= 32 * 127 (Q8_K's quants are -127..127), 32512.
 * Per 32 weights of 8 rows and token: 8 maddubs + 2 madd (was 8 + 8 + the
 * 8 subtractions), plus the unpacking, shared by the tile's tokens. */

/* Activations (conv_q8_Kc), per super-block of a token: the 256 quants,
 * then per sub-block j the int16 pair 32 * (sum of x[16j + 4g] + x[16j + 4g
 * + 1] over g, sum of x[16j + 4g + 2] + x[16j + 4g + 3]): what the lanes of
 * its 4 maddubs take for q - 32; then d. */
#define Q8KC_X32 256
#define Q8KC_D 320
#define Q8KC_BYTES 384

/* Packed 8-row group, per super-block (Q6KP8_BLOCK bytes):
 *   per pair p of sub-blocks (2p: "a", 2p + 1: "b"), 192 bytes:
 *     ql [4 groups g][8 rows r][4 B]: low nibbles a's elements 4g..4g+3,
 *        high nibbles b's;
 *     qh [a, b][8 rows][4 B]: byte i, bits 2g..2g+1: the high 2 bits of
 *        element 4g + i;
 *   sc [16 sub-blocks][8 rows] s8;  d [8 rows] f16.
 * 210 bytes a row, as the file's. */
#define Q6KP8_PAIR 192
#define Q6KP8_SC 1536
#define Q6KP8_D 1664
#define Q6KP8_BLOCK 1680

/* One sub-block j of 8 rows (HI: the pair's b) for NT tokens: isum[t] +=
 * sc_j * lanes. xq: the tokens' quants of sub-block j (16 j bytes into a
 * super-block's activations), xs32: its pair of 32-sums. */
AI void q6_Kp8_sub(const uint8_t *pp, const int HI, const uint8_t *sc, const uint8_t *xq, const uint8_t *xs32,
                   size_t xss, const int NT, __m256i *isum) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    const __m128i s8 = _mm_loadl_epi64((const __m128i *)sc);
    const __m256i scv = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8)); /* (sc_r, sc_r) per lane */
    const __m256i h = _mm256_loadu_si256((const __m256i *)(pp + 128 + 32 * HI));
    __m256i a[8];
    _Pragma("GCC unroll 4")
    for (int g = 0; g < 4; g++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(pp + 32 * g));
        const __m256i lo = HI ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4) : _mm256_and_si256(raw, m4);
        /* group g's 2 high bits to bits 4-5 (16-bit shifts: what crosses
         * into the neighbouring byte lands outside 0x30) */
        const __m256i hs = g == 0 ? _mm256_slli_epi16(h, 4) : g == 1 ? _mm256_slli_epi16(h, 2)
                         : g == 2 ? h : _mm256_srli_epi16(h, 2);
        const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hs, m30));
        _Pragma("GCC unroll 8")
        for (int t = 0; t < NT; t++) {
            /* |pair| <= 2 * 63 * 127; the 4 summed wrap, exact after the
             * subtraction below (see above) */
            const __m256i pr = _mm256_maddubs_epi16(q, _mm256_set1_epi32(load_i32(xq + t * xss + 4 * g)));
            a[t] = g ? _mm256_add_epi16(a[t], pr) : pr;
            __asm__("" : "+x"(a[t])); /* as in q4_K_sb_ints */
        }
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < NT; t++) {
        const __m256i u = _mm256_sub_epi16(a[t], _mm256_set1_epi32(load_i32(xs32 + t * xss)));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(u, scv));
    }
}

/* One super-block of 8 rows for NT tokens (the loop over the 8 pairs
 * not unrolled, as q4_Kp8_sb's) */
AI void q6_Kp8_sb(const uint8_t *p, const uint8_t *xa, size_t xss, const int NT, __m256i *isum) {
    _Pragma("GCC unroll 8")
    for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
    _Pragma("GCC unroll 1")
    for (int pp = 0; pp < 8; pp++) {
        const uint8_t *q = p + Q6KP8_PAIR * pp;
        /* 3 lines per pair into L1 SP_PF_L1 ahead (q4_Kp8_sb: only L1, a
         * few at a time) */
        _mm_prefetch((const char *)q + SP_PF_L1, _MM_HINT_T0);
        _mm_prefetch((const char *)q + SP_PF_L1 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)q + SP_PF_L1 + 128, _MM_HINT_T0);
        q6_Kp8_sub(q, 0, p + Q6KP8_SC + 16 * pp, xa + 32 * pp, xa + Q8KC_X32 + 8 * pp, xss, NT, isum);
        q6_Kp8_sub(q, 1, p + Q6KP8_SC + 16 * pp + 8, xa + 32 * pp + 16, xa + Q8KC_X32 + 8 * pp + 4, xss, NT, isum);
    }
    /* and the 2.25 lines of scales and d after the pairs */
    _mm_prefetch((const char *)p + Q6KP8_SC + SP_PF_L1, _MM_HINT_T0);
    _mm_prefetch((const char *)p + Q6KP8_SC + 64 + SP_PF_L1, _MM_HINT_T0);
    _mm_prefetch((const char *)p + Q6KP8_BLOCK - 1 + SP_PF_L1, _MM_HINT_T0);
}

AI void q6_Kp8_group(const uint8_t *w, size_t ws, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                     int64_t b1, __m256 *F) {
    (void)ws; /* the 8 rows are interleaved: one stream */
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = w + b * Q6KP8_BLOCK;
        const uint8_t *xa = xs + b * Q8KC_BYTES;
        __m256i isum[8];
        /* one pass, as q4_Kp8_group (8 tokens: 3.30-3.34 ns per 256
         * weights and token, 3.62 in two passes) */
        q6_Kp8_sb(p, xa, xss, NT, isum);
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + Q6KP8_D)));
        _Pragma("GCC unroll 8")
        for (int t = 0; t < NT; t++) {
            float dx;
            memcpy(&dx, xa + t * xss + Q8KC_D, 4);
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d8, _mm256_set1_ps(dx)), F[t]);
        }
    }
}
R8NT(q6_Kp8, q6_Kp8_group, 256, 8)

/* On the file's rows (no_repack): ggml's integer loop, each lane sum
 * reduced exactly, one scalar FMA per super-block: the same bits. */
AI void q6_K_rs_sb(const block_q6_K *wb, const uint8_t *xs, size_t xss, const int NT, int64_t b, float *S) {
    __m256i ia[8];
    q6_K_sb_ints(wb, xs, xss, NT, b, ia, 1);
    const float d = f16f(wb->d);
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        float dx;
        memcpy(&dx, xs + t * xss + b * Q8KB_BYTES + Q8KB_D, 4);
        S[t] = fmaf((float)hsum_epi32(ia[t]), d * dx, S[t]);
    }
}
RSNT(q6_K_rs, block_q6_K, q6_K_rs_sb)
TILE8(q6_K_rs)
TILE8(q6_Kp8)

static void put_q6_K(const void *vb, uint8_t *o, int i) {
    const block_q6_K *blk = vb;
    uint8_t q[256];
    q6_K_unpack(blk, q);
    for (int pr = 0; pr < 8; pr++) {
        const uint8_t *qa = q + 32 * pr, *qb = qa + 16;
        uint8_t *pq = o + Q6KP8_PAIR * pr;
        for (int m = 0; m < 16; m++) pq[32 * (m / 4) + 4 * i + m % 4] = (uint8_t)((qa[m] & 0xF) | qb[m] << 4);
        for (int hb = 0; hb < 2; hb++)
            for (int by = 0; by < 4; by++) {
                const uint8_t *qs = hb ? qb : qa;
                pq[128 + 32 * hb + 4 * i + by] = (uint8_t)(qs[by] >> 4 | (qs[4 + by] >> 4) << 2 |
                                                           (qs[8 + by] >> 4) << 4 | (qs[12 + by] >> 4) << 6);
            }
    }
    for (int j = 0; j < 16; j++) o[Q6KP8_SC + 8 * j + i] = (uint8_t)blk->scales[j];
    memcpy(o + Q6KP8_D + 2 * i, &blk->d, 2);
}

/* q4_0p8's layout */
static void put_q4_0(const void *vb, uint8_t *o, int i) {
    const block_q4_0 *blk = vb;
    for (int m = 0; m < 4; m++) memcpy(o + 32 * m + 4 * i, blk->qs + 4 * m, 4);
    memcpy(o + 128 + 2 * i, &blk->d, 2);
}

/* Load-time repacking at this level: Q8_0, Q4_0, Q4_K and Q6_K matrices of
 * 8-row multiples (kernel_ops.packed_rows_multiple), each block of 8
 * rows into one packed block of the layouts above (put: row i's share). */
static const struct {
    int64_t qk;    /* weights per block */
    size_t bytes;  /* a file block */
    size_t packed; /* a packed block of 8 rows */
    void (*put)(const void *blk, uint8_t *o, int i);
} PACK8[SP_TYPE_COUNT] = {
    [SP_TYPE_Q8_0] = {32, sizeof(block_q8_0), Q8P8_BLOCK, put_q8_0},
    [SP_TYPE_Q4_0] = {32, sizeof(block_q4_0), Q4_0R8_WBLOCK, put_q4_0},
    [SP_TYPE_Q4_K] = {256, sizeof(block_q4_K), Q4KP8_BLOCK, put_q4_K},
    [SP_TYPE_Q6_K] = {256, sizeof(block_q6_K), Q6KP8_BLOCK, put_q6_K},
};

static size_t packed_row_size_avx2(tensor_type t, int64_t k) {
    SP_ASSERT(PACK8[t].put);
    return (size_t)(k / PACK8[t].qk) * (PACK8[t].packed / 8);
}

static void pack_rows_avx2(tensor_type t, const void *src, void *dst, int64_t n_rows, int64_t k) {
    SP_ASSERT(PACK8[t].put && n_rows % 8 == 0);
    const int64_t nb = k / PACK8[t].qk;
    const size_t rs = (size_t)nb * PACK8[t].bytes;
    for (int64_t r = 0; r < n_rows; r += 8) {
        const uint8_t *g = (const uint8_t *)src + r * rs;
        uint8_t *o = (uint8_t *)dst + r * packed_row_size_avx2(t, k);
        for (int64_t b = 0; b < nb; b++, o += PACK8[t].packed)
            for (int i = 0; i < 8; i++) PACK8[t].put(g + i * rs + b * PACK8[t].bytes, o, i);
    }
}

/* ---- tile entry points: rows loop, NT dispatch -------------------------- */

AI void store_out(float *y, int64_t ldy, int64_t r, const int NT, const float *v, int accumulate) {
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        if (accumulate) y[t * ldy + r] += v[t];
        else y[t * ldy + r] = v[t];
    }
}

/* Q8_0/Q4_0 tiles take up to 8 tokens (8 accumulators + 3 live vectors fit
 * the 16 ymm registers). The K-quant tiles keep an int32 accumulator per
 * token as well (in registers; the float ones, touched once per
 * super-block, spill to L1 from 5-8 tokens); they still take 8, so
 * that a verification of up to 8 tokens is one tile (the per-thread
 * streaming path of matmul) rather than 4 + the rest over each chunk.
 * Measured on Zen 1 (compute-bound there), 5 and 8 tokens cost the same per
 * token either way. */
#define QTILE(NAME, BT, QK, ROWFN, HASM) QTILE2(NAME, BT, QK, ROWFN, ROWFN, HASM)
/* ROWFN for the tiles (on their scratch layout), DOTROW for NAME_dot (on
 * the vec_dot_type's blocks) */
#define QTILE2(NAME, BT, QK, ROWFN, DOTROW, HASM)                                                     \
    AI void NAME##_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,        \
                      const int NT, int64_t k0, int64_t k1, float *y, int64_t ldy, int acc) {        \
        for (int64_t r = 0; r < nr; r++) {                                                           \
            __m256 F[8];                                                                             \
            __m128 M[8];                                                                             \
            float v[8];                                                                              \
            _Pragma("GCC unroll 16")                                                                 \
            for (int t = 0; t < NT; t++) F[t] = _mm256_setzero_ps(), M[t] = _mm_setzero_ps();        \
            ROWFN((const BT *)(w + r * ws), xs, xss, NT, k0 / QK, k1 / QK, F, M);                    \
            _Pragma("GCC unroll 16")                                                                 \
            for (int t = 0; t < NT; t++) v[t] = HASM ? hsum8(F[t]) + hsum4(M[t]) : hsum8(F[t]);      \
            store_out(y, ldy, r, NT, v, acc);                                                        \
        }                                                                                            \
    }                                                                                                \
    TILE8(NAME)                                                                                      \
    static void NAME##_dot(int64_t k, float *s, const void *w, const void *x) {                      \
        __m256 F[1] = {_mm256_setzero_ps()};                                                         \
        __m128 M[1] = {_mm_setzero_ps()};                                                            \
        DOTROW((const BT *)w, (const uint8_t *)x, 0, 1, 0, k / QK, F, M);                            \
        *s = HASM ? hsum8(F[0]) + hsum4(M[0]) : hsum8(F[0]);                                         \
    }

QTILE2(q8_0, block_q8_0, 32, q8_0_rowa, q8_0_row, 0)
QTILE(q4_0, block_q4_0, 32, q4_0_row, 0)
QTILE2(q4_K, block_q4_K, 256, q4_K_rowa, q4_K_row, 1)
QTILE2(q6_K, block_q6_K, 256, q6_K_rowa, q6_K_row, 0)

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

/* Activation conversion for the float tiles: f32 rounded through f16/bf16. */
static void conv_f32(const float *x, int64_t k, void *xs) { memcpy(xs, x, (size_t)k * 4); }

static void conv_f16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(xs + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < k; i++) xs[i] = f16_to_f32(f32_to_f16(x[i]));
}

static void conv_bf16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    for (int64_t i = 0; i < k; i++) xs[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

static void conv_q8_0(const float *x, int64_t k, void *xs) { quantize_q8_0_avx2(x, xs, k); }
static void conv_q8_0a(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b0 = 0; b0 < k / 32; b0 += 8, xs += Q8A_BYTES) {
        block_q8_0 q[8];
        const int n = (int)SP_MIN((int64_t)8, k / 32 - b0);
        quantize_q8_0_avx2(x + 32 * b0, q, 32 * n);
        for (int i = 0; i < n; i++) {
            memcpy(xs + 32 * i, q[i].qs, 32);
            const float d = f16f(q[i].d);
            memcpy(xs + Q8A_D + 4 * i, &d, 4);
        }
    }
}
static void conv_q8_Kb(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    const __m256i m32 = _mm256_set1_epi8(32);
    for (int64_t b = 0; b < k / SP_QK_K; b++, xs += Q8KB_BYTES) {
        block_q8_K q;
        quantize_q8_K_avx2(x + b * SP_QK_K, &q, SP_QK_K);
        memcpy(xs, q.qs, sizeof q.qs);
        for (int c = 0; c < 8; c++)
            _mm256_store_si256((__m256i *)(xs + Q8KB_X32 + 32 * c),
                               _mm256_maddubs_epi16(m32, _mm256_loadu_si256((const __m256i *)(q.qs + 32 * c))));
        memcpy(xs + Q8KB_D, &q.d, 4);
    }
}

static void conv_q8_Kc(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b = 0; b < k / SP_QK_K; b++, xs += Q8KC_BYTES) {
        block_q8_K q;
        quantize_q8_K_avx2(x + b * SP_QK_K, &q, SP_QK_K);
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

static void conv_q8_Ka(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t b = 0; b < k / SP_QK_K; b++, xs += Q8KA_BYTES) {
        block_q8_K q;
        quantize_q8_K_avx2(x + b * SP_QK_K, &q, SP_QK_K);
        memcpy(xs, q.qs, sizeof q.qs);
        memcpy(xs + Q8KA_D, &q.d, 4);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)q.bsums);
        _mm_store_si128((__m128i *)(xs + Q8KA_S8),
                        _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
    }
}

static const mm_kernel mm_f32 = {8, 32, NULL, 4, conv_f32, f32_tile, 1, NULL, NULL};
static const mm_kernel mm_f16 = {8, 32, NULL, 4, conv_f16, f16_tile, 1, NULL, NULL};
static const mm_kernel mm_bf16 = {8, 32, NULL, 4, conv_bf16, bf16_tile, 1, NULL, NULL};
/* kgroup 256: the scratch row is whole groups of 8 blocks (Q8A_BYTES) */
static const mm_kernel mm_q8_0 = {256, Q8A_BYTES, NULL, 8, conv_q8_0a, q8_0_tile, 1, NULL, NULL};
static const mm_kernel mm_q4_0 = {32, sizeof(block_q8_0), NULL, 8, conv_q8_0, q4_0_tile, 1, NULL, NULL};
static const mm_kernel mm_q4_0r8 = {32, sizeof(block_q8_0), NULL, 4, conv_q8_0, q4_0r8_tile, 1, NULL, NULL};
static const mm_kernel mm_q4_0p8 = {32, Q4_0R8_XBLOCK, NULL, 4, conv_q4_0p8, q4_0p8_tile, 1, NULL, NULL};
static const mm_kernel mm_q4_K = {256, Q8KA_BYTES, NULL, 8, conv_q8_Ka, q4_K_tile, 1, NULL, NULL};
static const mm_kernel mm_q6_K = {256, Q8KB_BYTES, NULL, 8, conv_q8_Kb, q6_K_tile, 1, NULL, NULL};
static const mm_kernel mm_q4_Krs = {256, Q8KA_BYTES, NULL, 8, conv_q8_Ka, q4_K_rs_tile, 1, NULL, NULL};
static const mm_kernel mm_q4_Kp8 = {256, Q8KA_BYTES, NULL, 8, conv_q8_Ka, q4_Kp8_tile, 1, NULL, NULL};
static const mm_kernel mm_q8_0r8 = {32, sizeof(block_q8_0), NULL, 4, conv_q8_0, q8_0r8_tile, 1, NULL, NULL};
static const mm_kernel mm_q8_0p8 = {256, Q8A_BYTES, NULL, 8, conv_q8_0a, q8_0p8_tile, 1, NULL, NULL};
static const mm_kernel mm_q6_Krs = {256, Q8KB_BYTES, NULL, 8, conv_q8_Kb, q6_K_rs_tile, 1, NULL, NULL};
static const mm_kernel mm_q6_Kp8 = {256, Q8KC_BYTES, NULL, 8, conv_q8_Kc, q6_Kp8_tile, 1, NULL, NULL};

/* exported for the avx512 level, which reuses them */
void avx2_quantize_q8_0(const float *x, void *y, int64_t k) { quantize_q8_0_avx2(x, y, k); }
void avx2_quantize_q8_K(const float *x, void *y, int64_t k) { quantize_q8_K_avx2(x, y, k); }
void avx2_vec_dot_q8_0(int64_t k, float *s, const void *w, const void *x) { q8_0_dot(k, s, w, x); }
void avx2_vec_dot_q4_0(int64_t k, float *s, const void *w, const void *x) { q4_0_dot(k, s, w, x); }
void avx2_vec_dot_q4_K(int64_t k, float *s, const void *w, const void *x) { q4_K_dot(k, s, w, x); }
void avx2_vec_dot_q6_K(int64_t k, float *s, const void *w, const void *x) { q6_K_dot(k, s, w, x); }

const kernel_ops kernel_ops_avx2 = {
    .name = "avx2",
    .vec_dot = {
        [SP_TYPE_F32] = vec_dot_f32_avx2,
        [SP_TYPE_F16] = vec_dot_f16_avx2,
        [SP_TYPE_BF16] = vec_dot_bf16_avx2,
        [SP_TYPE_Q8_0] = q8_0_dot,
        [SP_TYPE_Q4_0] = q4_0_dot,
        [SP_TYPE_Q4_K] = q4_K_dot,
        [SP_TYPE_Q6_K] = q6_K_dot,
    },
    .quantize = {
        [SP_TYPE_F32] = ref_quantize_f32,
        [SP_TYPE_F16] = quantize_f16_avx2,
        [SP_TYPE_BF16] = ref_quantize_bf16,
        [SP_TYPE_Q8_0] = quantize_q8_0_avx2,
        [SP_TYPE_Q8_K] = quantize_q8_K_avx2,
    },
    .mm = {
        [SP_TYPE_F32] = &mm_f32,
        [SP_TYPE_F16] = &mm_f16,
        [SP_TYPE_BF16] = &mm_bf16,
        [SP_TYPE_Q8_0] = &mm_q8_0,
        [SP_TYPE_Q4_0] = &mm_q4_0,
        [SP_TYPE_Q4_K] = &mm_q4_K,
        [SP_TYPE_Q6_K] = &mm_q6_K,
    },
    .mm_rows8 = {
        [SP_TYPE_Q8_0] = &mm_q8_0r8,
        [SP_TYPE_Q4_0] = &mm_q4_0r8,
        [SP_TYPE_Q4_K] = &mm_q4_Krs,
        [SP_TYPE_Q6_K] = &mm_q6_Krs,
    },
    .mm_packed = {
        [SP_TYPE_Q8_0] = &mm_q8_0p8,
        [SP_TYPE_Q4_0] = &mm_q4_0p8,
        [SP_TYPE_Q4_K] = &mm_q4_Kp8,
        [SP_TYPE_Q6_K] = &mm_q6_Kp8,
    },
    .packed_row_size = packed_row_size_avx2,
    .pack_rows = pack_rows_avx2,
    .packed_rows_multiple = 8,
    .twin_rows8 = {
        [SP_TYPE_Q8_0] = &ref_mm_q8_0_rows8,
        [SP_TYPE_Q4_K] = &ref_mm_q4_K_rows8,
        [SP_TYPE_Q6_K] = &ref_mm_q6_K_rows8,
    },
};
