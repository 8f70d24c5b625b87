/* simd_avx512.h: what the files of the AVX-512 level share (built with the
 * AVX-512 F/BW/VL/DQ + VNNI flags: include it only from *_avx512.c). Not an
 * interface: the software prefetch and the choice of walk over a tile's
 * rows, the transposes into the one-lane-per-block layout (weights and
 * activations alike), the parts of the quantized tiles that the Q8_0/Q4_0
 * and K-quant kernels have in common (the group dots, the 16-row sums, the
 * entry points), the sizes of the packed groups, and the functions one
 * file of the level calls in another. Everything here is inlined where it
 * is used, so the level costs the same split over files as in one. */
#ifndef SP_SIMD_AVX512_H
#define SP_SIMD_AVX512_H

#include <immintrin.h>

#include "kernels/kernels_internal.h"

#define AI static inline __attribute__((always_inline))

/* Decode and verification walk each row's K ranges one after another (one
 * contiguous stream per row) and read all of the tile's converted
 * activations for every row. Past ~3/4 of L1 (48 KiB) they no longer stay
 * there beside the weight stream, and every row reads them again from L2:
 * Q4_K, 8 tokens, k = 5632 took 109 us in cache against 40 us for the same
 * weights at k = 2048, and streamed on one core 12.6-13.2 ms against
 * 7.3-7.7 ms walked by range. So such a tile walks each block of 16 rows
 * range by range instead (a range's activations stay in L1 across the 16
 * rows): the same sums in the same order (per row, range after range), so
 * the results do not change, bit for bit. Below the limit the row walk
 * stays: one contiguous stream is what decode's prefetch wants, and a
 * single token (NT, a constant in every tile) never takes the other walk,
 * so decode always walks the rows. */
#define SP_X_L1_MAX (36 * 1024)
AI int walk_by_range(int nq, const int NT, size_t xss) { return NT > 1 && nq > 1 && (size_t)NT * xss > SP_X_L1_MAX; }

/* The prefetch of a group at p: prefetch_ahead for the row walk (pf_ws 0);
 * for the walk by range over blocks of 16 rows of stride pf_ws, to L1 the
 * same place in the next row, to L2 the same place in the next block of 16
 * rows (read after this block); none for SP_PF_NONE (weights in cache). */
#define SP_PF_NONE ((size_t)1) /* pf_ws: no prefetch (tile_warm) */
AI void prefetch_group(const void *p, const int bytes, size_t pf_ws) {
    if (pf_ws == SP_PF_NONE) return;
    if (!pf_ws) {
        prefetch_ahead(p, bytes);
        return;
    }
    const char *q1 = (const char *)p + pf_ws, *q2 = (const char *)p + 16 * pf_ws;
    _Pragma("GCC unroll 16")
    for (int l = 0; l < (bytes + 63) / 64; l++) {
        _mm_prefetch(q1 + 64 * l, _MM_HINT_T0);
        _mm_prefetch(q2 + 64 * l, _MM_HINT_T1);
    }
}
#define GROUP_BYTES_Q8 640 /* Q8_0, Q4_0, Q4_K scratch group */
#define GROUP_BYTES_Q6 384

/* ---- transposes --------------------------------------------------------- */

/* 4x4 dword transpose inside each 128-bit lane: Z[a] lane L dword s ->
 * V[s] lane L dword a. */
AI void transpose4(const __m512i Z[4], __m512i V[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(Z[0], Z[1]), t1 = _mm512_unpackhi_epi32(Z[0], Z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(Z[2], Z[3]), t3 = _mm512_unpackhi_epi32(Z[2], Z[3]);
    V[0] = _mm512_unpacklo_epi64(t0, t2);
    V[1] = _mm512_unpackhi_epi64(t0, t2);
    V[2] = _mm512_unpacklo_epi64(t1, t3);
    V[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* 16 rows of 16 bytes (row j at p + j*st) -> V[s] (s < 4), lane j = dword s of row j.
 * Z[a] holds rows a, a+4, a+8, a+12 in its 128-bit lanes, so after the
 * in-lane transpose, lane 4L+a of V[s] is row a+4L. */
AI void tr16x4(const uint8_t *p, size_t st, __m512i V[4]) {
    __m512i Z[4];
    _Pragma("GCC unroll 16")
    for (int a = 0; a < 4; a++) {
        __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + a * st)));
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + (a + 4) * st)), 1);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + (a + 8) * st)), 2);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + (a + 12) * st)), 3);
        Z[a] = z;
    }
    transpose4(Z, V);
}

/* 16 rows of 32 bytes (rows 0..7 at p0 + j*st, rows 8..15 at p1 + (j-8)*st)
 * -> V[s] (s < 8), lane j = dword s of row j.
 * Each half (8 rows) is loaded as Z[a] = [row a | row a+4] (256-bit loads)
 * and transposed in-lane, which leaves lane a+4L with dwords 4(L&1)+s of row
 * a + 4(L>>1); one two-source permute per output vector gathers the lanes of
 * both halves in row order. */
AI void tr16x8(const uint8_t *p0, const uint8_t *p1, size_t st, __m512i V[8]) {
    __m512i Z1[4], Z2[4], A[4], B[4];
    _Pragma("GCC unroll 16")
    for (int a = 0; a < 4; a++) {
        Z1[a] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0 + a * st))),
                                   _mm256_loadu_si256((const __m256i *)(p0 + (a + 4) * st)), 1);
        Z2[a] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p1 + a * st))),
                                   _mm256_loadu_si256((const __m256i *)(p1 + (a + 4) * st)), 1);
    }
    transpose4(Z1, A);
    transpose4(Z2, B);
    /* row j < 8 half h sits in A lane (j&3) + 8(j>>2) + 4h; rows >= 8 in B (+16) */
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i i1 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    _Pragma("GCC unroll 16")
    for (int s = 0; s < 4; s++) {
        V[s] = _mm512_permutex2var_epi32(A[s], i0, B[s]);
        V[4 + s] = _mm512_permutex2var_epi32(A[s], i1, B[s]);
    }
}

/* 16 f16 at p + j*st (j < 16) -> f32 */
AI __m512 gather_f16(const uint8_t *p, int st) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(st));
    const __m512i g = _mm512_i32gather_epi32(idx, p, 1); /* reads 4 bytes: p + 15*st + 3 must be valid */
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* ---- the quantized tiles' shared parts ---------------------------------- */

/* init + sum_s dpbusd(W[s], x[s]) for the 8 vectors of a group, as two
 * chains of 4 joined by one add: dpbusd has a latency of 4-5 cycles and 2 can
 * start per cycle, so a single chain per token left the core at ~1 dpbusd
 * per cycle with 5 tokens (5 chains in flight); two chains cost one add and
 * made 5 tokens ~25% faster. */
AI __m512i dot8(const __m512i W[8], const uint8_t *xg, __m512i init) {
    __m512i a = init, b = _mm512_setzero_si512();
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 8; s += 2) {
        a = _mm512_dpbusd_epi32(a, W[s], _mm512_load_si512(xg + 64 * s));
        b = _mm512_dpbusd_epi32(b, W[s + 1], _mm512_load_si512(xg + 64 * (s + 1)));
    }
    return _mm512_add_epi32(a, b);
}

/* one chain of 8: with 3 or more tokens the other tokens' chains (and the
 * next group's) hide the dpbusd latency, and the add is saved */
AI __m512i dot8_1(const __m512i W[8], const uint8_t *xg) {
    __m512i a = _mm512_setzero_si512();
    _Pragma("GCC unroll 8")
    for (int s = 0; s < 8; s++) a = _mm512_dpbusd_epi32(a, W[s], _mm512_load_si512(xg + 64 * s));
    return a;
}

/* Sums of 16 rows' accumulators v[0..15] (16 lanes each) -> lane r = sum of
 * v[r]: a butterfly of 15 adds and 30 shuffles, against 16 x 8 ops for 16
 * separate horizontal sums (~10% of the Q4_K tile at 5 tokens and k = 2048). */
AI __m512 reduce16(const float (*v)[16]) {
    __m512 t[8], u[4];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 8; i++) {
        const __m512 a = _mm512_load_ps(v[2 * i]), b = _mm512_load_ps(v[2 * i + 1]);
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    /* t[i], per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] (a, b = rows 2i, 2i+1) */
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
    /* u[i], per 128-bit lane: partial sums of rows 4i..4i+3 */
    const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88), _mm512_shuffle_f32x4(x0, x1, 0xDD));
}

/* y rows [r0, r0 + n) (n <= 16) from fb[q][t][0..n-1], the K ranges q
 * added in order (the first writes y unless acc); fb's rows past n are
 * zeroed first, so a short last block is summed like the others. */
AI void rows16_store(float (*fb)[8][16][16], int nq, const int NT, float *y, int64_t ldy, int64_t r0, int acc,
                     int n) {
    const __mmask16 m = (__mmask16)((1u << n) - 1);
    for (int q = 0; q < nq; q++) {
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            for (int rr = n; rr < 16; rr++) _mm512_store_ps(fb[q][t][rr], _mm512_setzero_ps());
            float *yt = y + t * ldy + r0;
            const __m512 v = reduce16((const float(*)[16])fb[q][t]);
            _mm512_mask_storeu_ps(yt, m, acc || q > 0 ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, yt), v) : v);
        }
    }
}

#define NT_CASES(NAME, KC, ACC, ROW_PF)                                                              \
    switch (nt) {                                                                                    \
    case 1: NAME##_nt(w, ws, nr, xs, xss, 1, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;             \
    case 2: NAME##_nt(w, ws, nr, xs, xss, 2, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;             \
    case 3: NAME##_nt(w, ws, nr, xs, xss, 3, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;             \
    case 4: NAME##_nt(w, ws, nr, xs, xss, 4, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;             \
    case 5: NAME##_nt(w, ws, nr, xs, xss, 5, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;             \
    case 6: NAME##_nt(w, ws, nr, xs, xss, 6, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;             \
    case 7: NAME##_nt(w, ws, nr, xs, xss, 7, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;             \
    default: NAME##_nt(w, ws, nr, xs, xss, 8, k, k0, k1, KC, y, ldy, ACC, ROW_PF); break;            \
    }
/* tile: one K range; tile_warm: the same without the prefetch (weights in
 * cache: ROW_PF, the row walk's pf_ws, SP_PF_NONE instead of 0); tile_kc:
 * all of K, range by range within each row. Prefill's
 * tiles at 8 tokens are the ones that are warm, so tile_warm has only that
 * case (any other count takes tile). */
#define TILE_DISPATCH8(NAME)                                                                         \
    static void NAME##_tile(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,  \
                            int nt, int64_t k, int64_t k0, int64_t k1, float *y, int64_t ldy,        \
                            int acc) {                                                               \
        NT_CASES(NAME, k1 - k0, acc, 0)                                                              \
    }                                                                                                \
    static void NAME##_tile_warm(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs,         \
                                 size_t xss, int nt, int64_t k, int64_t k0, int64_t k1, float *y,    \
                                 int64_t ldy, int acc) {                                             \
        if (nt == 8) NAME##_nt(w, ws, nr, xs, xss, 8, k, k0, k1, k1 - k0, y, ldy, acc, SP_PF_NONE);  \
        else NAME##_tile(w, ws, nr, xs, xss, nt, k, k0, k1, y, ldy, acc);                            \
    }                                                                                                \
    static void NAME##_tile_kc(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs,           \
                               size_t xss, int nt, int64_t k, int64_t kc, float *y, int64_t ldy) {   \
        const int64_t k0 = 0, k1 = k;                                                                \
        NT_CASES(NAME, kc, 0, 0)                                                                     \
    }

/* ---- bytes of a packed group (layouts: q8_avx512.c, qk_avx512.c) ------- */
#define PACKED_GB_Q8_0 544
#define PACKED_GB_Q4_0 288
#define PACKED_GB_Q5_0 352
#define PACKED_GB_Q6_K 210

/* ---- from one file of the level to another ------------------------------ */

/* act_avx512.c */
quant_kernel avx512_quantize_q8_K, avx512_quantize_f16;
convert_kernel avx512_conv_x_q8_0, avx512_conv_x_q4_0, avx512_conv_x_q5_0, avx512_conv_x_q4_K, avx512_conv_x_q6_K, avx512_conv_x_f32,
    avx512_conv_x_f16, avx512_conv_x_bf16;
size_t avx512_xrow_unused(int64_t k);

/* float_avx512.c */
vec_dot_kernel avx512_vec_dot_f32, avx512_vec_dot_f16, avx512_vec_dot_bf16;
extern const mm_kernel avx512_mm_f32, avx512_mm_f16, avx512_mm_bf16;

/* q8_avx512.c */
extern const mm_kernel avx512_mm_q8_0, avx512_mm_q4_0, avx512_mm_q8_0p, avx512_mm_q4_0p, avx512_mm_q5_0,
    avx512_mm_q5_0p;
void avx512_pack_rows_q8(tensor_type t, const void *src, void *dst, int64_t n_rows, int64_t k);
void avx512_pack_rows_q5_0(const void *src, void *dst, int64_t n_rows, int64_t k);

/* qk_avx512.c */
extern const mm_kernel avx512_mm_q4_K, avx512_mm_q4_Kp, avx512_mm_q6_K, avx512_mm_q6_Kp;
void avx512_pack_rows_q4_K(const void *src, void *dst, int64_t n_rows, int64_t k);
void avx512_pack_rows_q6_K(const void *src, void *dst, int64_t n_rows, int64_t k);

/* kernels_avx512.c */
size_t avx512_packed_row_size(tensor_type t, int64_t k);

#endif
