/* simd_avx2.h: what the files of the AVX2 level share (built with -mavx2
 * -mfma -mf16c: include it only from *_avx2.c). Not an interface: the
 * always-inline helpers every kernel uses, the layouts of the tiles'
 * activation scratch (act_avx2.c writes them, the tiles read them), the
 * sizes of the packed 8-row blocks (kernels_avx2.c packs, the tiles read),
 * the macros that make a tile's entry points, and the functions one file
 * of the level calls in another. Everything here is inlined where it is
 * used, so the level costs the same split over files as in one. */
#ifndef SP_SIMD_AVX2_H
#define SP_SIMD_AVX2_H

#include <immintrin.h>

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

AI int32_t load_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- the tiles' activation scratch (act_avx2.c converts into it) ------- */

/* The Q8_0 tile's activations (avx2_conv_q8_0a), per 8 blocks of a token:
 * the 8 x 32 quants (32-byte aligned: in Q8_0 blocks of 34 bytes about half
 * of the 32-byte loads cross a cache line), then the 8 d as f32 (converted
 * once per token, not per row and token). The same values, so the same
 * sums. */
#define Q8A_BYTES 288
#define Q8A_D 256

/* The Q4_K tile's activations (avx2_conv_q8_Ka), per super-block of a
 * token: the 256 quants at a 64-byte boundary (so no 32-byte load of them
 * crosses a cache line: in a Q8_K block they start 4 bytes in, and every
 * other load would), d, and the 8 sums of 32 (bsums paired, as the tile's
 * min term takes them, instead of an hadd per token and super-block). Same
 * integers and the same d: the sums do not change. */
#define Q8KA_BYTES 320
#define Q8KA_D 256
#define Q8KA_S8 272

/* The Q6_K tile's activations (avx2_conv_q8_Kb), per super-block of a
 * token: the 256 quants (64-byte aligned), then maddubs(32, x) of each 32
 * of them (the 16 sums of pairs ggml subtracts for q - 32: 256 bytes), then
 * d. A token's tile then takes one maddubs per 32 weights instead of two,
 * on the two pipes that also take every madd. Up to 5 tokens only: at 8 the
 * twice larger scratch no longer stayed in L1 (Zen 3, k = 2048: 6.2-7.1 ->
 * 6.8-7.6 ns per 256 weights and token), so those tiles compute the pairs
 * from the quants (the same integers either way). */
#define Q8KB_BYTES 576
#define Q8KB_X32 256
#define Q8KB_D 512

/* The packed Q6_K tile's activations (avx2_conv_q8_Kc), per super-block of
 * a token: the 256 quants, then per sub-block j the int16 pair 32 * (sum of
 * x[16j + 4g] + x[16j + 4g + 1] over g, sum of x[16j + 4g + 2] + x[16j + 4g
 * + 3]): what the lanes of its 4 maddubs take for q - 32; then d. */
#define Q8KC_X32 256
#define Q8KC_D 320
#define Q8KC_BYTES 384

/* q4_0p8's activations: 40 bytes per block of 32 (layout: q8_avx2.c) */
#define Q4_0R8_XBLOCK 40

/* ---- packed 8-row blocks (kernels_avx2.c packs, the tiles read) -------- */
/* layouts: Q4_0 and Q8_0 in q8_avx2.c, Q4_K and Q6_K in qk_avx2.c */
#define Q4_0R8_WBLOCK (8 * (int64_t)sizeof(block_q4_0)) /* 144: one block of 8 rows */
#define Q8P8_BLOCK 272
#define Q4KP8_BLOCK 1184 /* one super-block of 8 rows: 148 bytes a row (file: 144) */
#define Q6KP8_BLOCK 1680

/* ---- tile entry points -------------------------------------------------- */

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
/* ROWFN for the tiles (on their scratch layout), DOTROW for
 * avx2_vec_dot_NAME (on the vec_dot_type's blocks) */
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
    void avx2_vec_dot_##NAME(int64_t k, float *s, const void *w, const void *x) {                    \
        __m256 F[1] = {_mm256_setzero_ps()};                                                         \
        __m128 M[1] = {_mm_setzero_ps()};                                                            \
        DOTROW((const BT *)w, (const uint8_t *)x, 0, 1, 0, k / QK, F, M);                            \
        *s = HASM ? hsum8(F[0]) + hsum4(M[0]) : hsum8(F[0]);                                         \
    }

/* ---- from one file of the level to another ------------------------------ */

/* act_avx2.c (avx2_quantize_q8_0: kernels_internal.h) */
quant_kernel avx2_quantize_q8_K, avx2_quantize_f16;
convert_kernel avx2_conv_f32, avx2_conv_f16, avx2_conv_bf16, avx2_conv_q8_0, avx2_conv_q8_0a, avx2_conv_q4_0p8,
    avx2_conv_q8_Ka, avx2_conv_q8_Kb, avx2_conv_q8_Kc;

/* float_avx2.c */
vec_dot_kernel avx2_vec_dot_f32, avx2_vec_dot_f16, avx2_vec_dot_bf16;
extern const mm_kernel avx2_mm_f32, avx2_mm_f16, avx2_mm_bf16;

/* q8_avx2.c (the dots: kernels_internal.h) */
extern const mm_kernel avx2_mm_q8_0, avx2_mm_q4_0, avx2_mm_q8_0r8, avx2_mm_q4_0r8, avx2_mm_q8_0p8, avx2_mm_q4_0p8;
void avx2_put_q8_0(const void *blk, uint8_t *o, int i);
void avx2_put_q4_0(const void *blk, uint8_t *o, int i);

/* qk_avx2.c (the dots: kernels_internal.h) */
extern const mm_kernel avx2_mm_q4_K, avx2_mm_q6_K, avx2_mm_q4_Krs, avx2_mm_q6_Krs, avx2_mm_q4_Kp8, avx2_mm_q6_Kp8;
void avx2_put_q4_K(const void *blk, uint8_t *o, int i);
void avx2_put_q6_K(const void *blk, uint8_t *o, int i);

#endif
