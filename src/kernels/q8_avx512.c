/* q8_avx512.c: Q8_0, Q4_0 and Q5_0 weights (against Q8_0 activations) at
 * the AVX-512 level: each group of 16 blocks of a row transposed into the
 * one-lane-per-block layout (kernels_avx512.c) from the file's blocks, or
 * loaded as such from rows packed at load (the "Packed layouts" below,
 * written here too), then the tokens' dpbusd chains against it, the lanes
 * of 16 rows summed at once.
 */
#include "kernels/simd_avx512.h"

/* ---- weight repacking: one group of a row -> W[], S (, M) --------------- */

AI void repack_q8_0(const block_q8_0 *b, __m512i W[8], __m512 *S) {
    const uint8_t *p = (const uint8_t *)b;
    tr16x8(p + 2, p + 2 + 8 * sizeof(block_q8_0), sizeof(block_q8_0), W);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    _Pragma("GCC unroll 16")
    for (int s = 0; s < 8; s++) W[s] = _mm512_xor_si512(W[s], bias); /* s8 -> u8 (+128) */
    *S = gather_f16(p, sizeof(block_q8_0));
}

AI void repack_q4_0(const block_q4_0 *b, __m512i W[8], __m512 *S) {
    const uint8_t *p = (const uint8_t *)b;
    __m512i V[4];
    tr16x4(p + 2, sizeof(block_q4_0), V);
    const __m512i m4 = _mm512_set1_epi8(0xF);
    _Pragma("GCC unroll 16")
    for (int s = 0; s < 4; s++) {
        W[s] = _mm512_and_si512(V[s], m4);                         /* elements 4s.. */
        W[4 + s] = _mm512_and_si512(_mm512_srli_epi32(V[s], 4), m4); /* elements 16+4s.. */
    }
    *S = gather_f16(p, sizeof(block_q4_0));
}

/* Q5_0: W[t] byte b of lane j = element 4t + b of block j (0..31, the
 * fifth bit added to Q4_0's nibbles; the activations' lane init takes the
 * 16 off). From the file's blocks, the fifth bits come from qh itself: a
 * lane's qh shifted by 4t, its low byte copied to the lane's 4 bytes, byte
 * b tests bit b. */
AI void repack_q5_0(const block_q5_0 *b, __m512i W[8], __m512 *S) {
    const uint8_t *p = (const uint8_t *)b;
    __m512i V[4];
    tr16x4(p + 6, sizeof(block_q5_0), V);
    const __m512i idx = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0); /* byte 0 of each dword */
    const __m512i H = _mm512_i32gather_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                                                   11, 12, 13, 14, 15),
                                                                 _mm512_set1_epi32(sizeof(block_q5_0))),
                                             p + 2, 1);
    const __m512i m4 = _mm512_set1_epi8(0xF), bits = _mm512_set1_epi32(0x08040201), h = _mm512_set1_epi8(0x10);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < 8; t++) {
        const __m512i nib = t < 4 ? _mm512_and_si512(V[t], m4) : _mm512_and_si512(_mm512_srli_epi32(V[t - 4], 4), m4);
        const __m512i rep = _mm512_shuffle_epi8(_mm512_srli_epi32(H, 4 * t), idx);
        W[t] = _mm512_or_si512(nib, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(rep, bits), h));
    }
    *S = gather_f16(p, sizeof(block_q5_0));
}

/* ---- quantized tiles ---------------------------------------------------- */

/* The tokens of a tile on one group of Q8_0 / Q4_0 weights (lane init and
 * activation scale from scratch). */
AI void qdot_tokens(const __m512i W[8], __m512 S, const uint8_t *xs, size_t xss, const int NT, int64_t g,
                    __m512 F[8]) {
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        const uint8_t *xg = xs + t * xss + g * GROUP_BYTES_Q8;
        const __m512i I = dot8(W, xg, _mm512_load_si512(xg + 512));
        F[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(S, _mm512_load_ps(xg + 576)), F[t]);
    }
}

/* Group loop for the types whose lane init comes from scratch (Q8_0, Q4_0),
 * GROUP(row, blocks in a row, g, W, &S) loading group g of a row. Each
 * row's accumulators (per K range and token) are summed 16 rows at a time
 * (reduce16, as the Q4_K tile): a row of 2,048 weights is only 4 groups,
 * and a horizontal sum per row and token was ~10% of a decode. The order
 * is fixed per row, whatever the batch. */
#define QTILE(NAME, GROUP)                                                                            \
    /* one row's groups [g0, g1) -> F[t]; pf_ws: 0, or the row stride of a walk by range */           \
    AI void NAME##_row(const uint8_t *wr, int64_t nb, int64_t g0, int64_t g1, const uint8_t *xs,      \
                       size_t xss, const int NT, size_t pf_ws, __m512 F[8]) {                         \
        _Pragma("GCC unroll 16")                                                                      \
        for (int t = 0; t < NT; t++) F[t] = _mm512_setzero_ps();                                      \
        for (int64_t g = g0; g < g1; g++) {                                                           \
            __m512i W[8];                                                                             \
            __m512 S;                                                                                 \
            GROUP(wr, nb, g, W, &S, pf_ws);                                                           \
            qdot_tokens(W, S, xs, xss, NT, g, F);                                                     \
        }                                                                                             \
    }                                                                                                 \
    AI void NAME##_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,         \
                      const int NT, int64_t k, int64_t k0, int64_t k1, int64_t kc, float *y,          \
                      int64_t ldy, int acc, const size_t ROW_PF) {                                    \
        const int64_t nb = k / 32;                                                                    \
        const int nq = (int)((k1 - k0 + kc - 1) / kc);                                                \
        SP_ASSERT(nq <= SP_MM_KC_RANGES);                                                             \
        float fb[SP_MM_KC_RANGES][8][16][16] __attribute__((aligned(64)));                            \
        if (walk_by_range(nq, NT, xss)) {                                                             \
            for (int64_t rb = 0; rb < nr; rb += 16) {                                                 \
                const int n = (int)SP_MIN((int64_t)16, nr - rb);                                      \
                for (int q = 0; q < nq; q++) {                                                        \
                    const int64_t ka = k0 + q * kc;                                                   \
                    for (int rr = 0; rr < n; rr++) {                                                  \
                        __m512 F[8];                                                                  \
                        NAME##_row(w + (rb + rr) * ws, nb, ka / 512, (SP_MIN(k1, ka + kc) + 511) / 512, \
                                   xs, xss, NT, ws, F);                                               \
                        _Pragma("GCC unroll 16")                                                      \
                        for (int t = 0; t < NT; t++) _mm512_store_ps(fb[q][t][rr], F[t]);             \
                    }                                                                                 \
                }                                                                                     \
                rows16_store(fb, nq, NT, y, ldy, rb, acc, n);                                         \
            }                                                                                         \
            return;                                                                                   \
        }                                                                                             \
        for (int64_t r = 0; r < nr; r++) {                                                            \
            const int rr = (int)(r & 15);                                                             \
            for (int q = 0; q < nq; q++) {                                                            \
                const int64_t ka = k0 + q * kc;                                                       \
                __m512 F[8];                                                                          \
                NAME##_row(w + r * ws, nb, ka / 512, (SP_MIN(k1, ka + kc) + 511) / 512, xs, xss, NT,      \
                           ROW_PF, F);                                                                \
                _Pragma("GCC unroll 16")                                                              \
                for (int t = 0; t < NT; t++) _mm512_store_ps(fb[q][t][rr], F[t]);                     \
            }                                                                                         \
            if (rr == 15) rows16_store(fb, nq, NT, y, ldy, r - 15, acc, 16);                          \
        }                                                                                             \
        if (nr & 15) rows16_store(fb, nq, NT, y, ldy, nr - (nr & 15), acc, (int)(nr & 15));           \
    }

/* Group g of a row of GGUF blocks: REPACK(blocks, W, &S) for a full group,
 * on a zero-padded copy for the last, partial one. */
#define GGUF_GROUP(NAME, BT, REPACK)                                                                  \
    AI void NAME(const uint8_t *row, int64_t nb, int64_t g, __m512i W[8], __m512 *S, size_t pf_ws) {  \
        const BT *wr = (const BT *)row;                                                               \
        if (16 * g + 16 <= nb) {                                                                      \
            prefetch_group(wr + 16 * g, 16 * sizeof(BT), pf_ws);                                      \
            REPACK(wr + 16 * g, W, S);                                                                \
        } else {                                                                                      \
            BT tmp[16];                                                                               \
            memset(tmp, 0, sizeof tmp);                                                               \
            memcpy(tmp, wr + 16 * g, (size_t)(nb - 16 * g) * sizeof(BT));                             \
            REPACK(tmp, W, S);                                                                        \
        }                                                                                             \
    }

/* Packed layouts (load-time repacking, matmul_pack): each row is its
 * groups of 512 weights in K order, each group what repack_* makes of it,
 * stored, so the transposes and the scale gathers are paid once at load
 * instead of on every pass (a Q8_0 group took ~35-50 cycles to unpack
 * against ~11 per token, the most of a 5-token verification):
 *   Q8_0: W[0..7] (64 B each: the transposed quants, already ^ 0x80) and
 *         the 16 block scales as f16: 544 B, the size of 16 blocks;
 *   Q4_0: the 4 transposed vectors of nibble bytes (W[s] = V & 15, W[4+s]
 *         = V >> 4 & 15) and the 16 scales as f16: 288 B, as 16 blocks.
 * The last group of a row, when a row's blocks are not a multiple of 16
 * (n < 16 blocks: K = 1,152 in Gemma 3 leaves 4), is stored compact, with
 * no padding: each of its vectors' first 4n bytes, then its n scales, so
 * n blocks take n blocks' bytes (34n, 18n) as in the file. Padding it to a
 * whole group read a third more bytes per row at K = 1,152 (1,632 for
 * 1,224), and decode reads every byte. It is loaded with zeroed lanes past
 * n (a zero scale), which adds nothing to any sum, as the unpacked tiles'
 * zero-padded copy adds nothing, so every sum is the same, bit for bit
 * (test_kernels). */

AI void load_q8_0p(const uint8_t *p, __m512i W[8], __m512 *S) {
    _Pragma("GCC unroll 8")
    for (int s = 0; s < 8; s++) W[s] = _mm512_loadu_si512(p + 64 * s);
    *S = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 512)));
}

AI void load_q4_0p(const uint8_t *p, __m512i W[8], __m512 *S) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) {
        const __m512i v = _mm512_loadu_si512(p + 64 * s);
        W[s] = _mm512_and_si512(v, m4);
        W[4 + s] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
    }
    *S = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 256)));
}

/* Q5_0 packed: W[t] = the nibbles | bit t of each byte of HB moved to bit
 * 4 (packing put element 4t + b's fifth bit at bit t of byte b: one shift
 * and one ternary logic op per vector; a shift across a byte leaves bit 4
 * of the other byte untouched, the mask drops it). */
AI void q5_0p_expand(const __m512i V[4], __m512i HB, __m512i W[8]) {
    const __m512i m4 = _mm512_set1_epi8(0xF), h = _mm512_set1_epi8(0x10);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < 8; t++) {
        const __m512i nib = t < 4 ? _mm512_and_si512(V[t], m4) : _mm512_and_si512(_mm512_srli_epi32(V[t - 4], 4), m4);
        const __m512i hb = t < 4 ? _mm512_slli_epi16(HB, 4 - t) : t > 4 ? _mm512_srli_epi16(HB, t - 4) : HB;
        W[t] = _mm512_ternarylogic_epi32(nib, hb, h, 0xF8); /* nib | (hb & h) */
    }
}

AI void load_q5_0p(const uint8_t *p, __m512i W[8], __m512 *S) {
    __m512i V[4];
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) V[s] = _mm512_loadu_si512(p + 64 * s);
    q5_0p_expand(V, _mm512_loadu_si512(p + 256), W);
    *S = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 320)));
}

AI void load_q5_0p_tail(const uint8_t *p, int n, __m512i W[8], __m512 *S) {
    const __mmask64 m = (__mmask64)((1ULL << (4 * n)) - 1);
    __m512i V[4];
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) V[s] = _mm512_maskz_loadu_epi8(m, p + 4 * n * s);
    q5_0p_expand(V, _mm512_maskz_loadu_epi8(m, p + 16 * n), W);
    *S = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p + 20 * n));
}

/* The compact last group of n < 16 blocks: lanes past n read as zero. */
AI void load_q8_0p_tail(const uint8_t *p, int n, __m512i W[8], __m512 *S) {
    const __mmask64 m = (__mmask64)((1ULL << (4 * n)) - 1);
    _Pragma("GCC unroll 8")
    for (int s = 0; s < 8; s++) W[s] = _mm512_maskz_loadu_epi8(m, p + 4 * n * s);
    *S = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p + 32 * n));
}

AI void load_q4_0p_tail(const uint8_t *p, int n, __m512i W[8], __m512 *S) {
    const __mmask64 m = (__mmask64)((1ULL << (4 * n)) - 1);
    const __m512i m4 = _mm512_set1_epi8(0xF);
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) {
        const __m512i v = _mm512_maskz_loadu_epi8(m, p + 4 * n * s);
        W[s] = _mm512_and_si512(v, m4);
        W[4 + s] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
    }
    *S = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p + 16 * n));
}

/* Group g of a packed row: whole groups, then the compact tail. */
#define PACKED_GROUP(NAME, GB, LOAD)                                                                  \
    AI void NAME(const uint8_t *row, int64_t nb, int64_t g, __m512i W[8], __m512 *S, size_t pf_ws) {  \
        if (16 * g + 16 <= nb) {                                                                      \
            prefetch_group(row + g * GB, GB, pf_ws);                                                  \
            LOAD(row + g * GB, W, S);                                                                 \
        } else {                                                                                      \
            prefetch_group(row + g * GB, (int)(nb - 16 * g) * (GB / 16), pf_ws);                      \
            LOAD##_tail(row + g * GB, (int)(nb - 16 * g), W, S);                                      \
        }                                                                                             \
    }

GGUF_GROUP(group_q8_0, block_q8_0, repack_q8_0)
GGUF_GROUP(group_q4_0, block_q4_0, repack_q4_0)
GGUF_GROUP(group_q5_0, block_q5_0, repack_q5_0)
PACKED_GROUP(group_q8_0p, PACKED_GB_Q8_0, load_q8_0p)
PACKED_GROUP(group_q4_0p, PACKED_GB_Q4_0, load_q4_0p)
PACKED_GROUP(group_q5_0p, PACKED_GB_Q5_0, load_q5_0p)
QTILE(q8_0, group_q8_0)
QTILE(q4_0, group_q4_0)
QTILE(q8_0p, group_q8_0p)
QTILE(q4_0p, group_q4_0p)
QTILE(q5_0, group_q5_0)
QTILE(q5_0p, group_q5_0p)

TILE_DISPATCH8(q8_0)
TILE_DISPATCH8(q4_0)
TILE_DISPATCH8(q8_0p)
TILE_DISPATCH8(q4_0p)
TILE_DISPATCH8(q5_0)
TILE_DISPATCH8(q5_0p)

/* Rows of GGUF Q8_0 or Q4_0 blocks -> packed rows (see above). */
void avx512_pack_rows_q8(tensor_type t, const void *src, void *dst, int64_t n_rows, int64_t k) {
    const int64_t nb = k / 32, groups = (nb + 15) / 16;
    const size_t bb = type_info(t)->block_bytes, srs = (size_t)nb * bb, drs = avx512_packed_row_size(t, k);
    const size_t gb = t == SP_TYPE_Q8_0 ? PACKED_GB_Q8_0 : PACKED_GB_Q4_0;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *sr = (const uint8_t *)src + (size_t)r * srs;
        uint8_t *dr = (uint8_t *)dst + (size_t)r * drs;
        for (int64_t g = 0; g < groups; g++) {
            uint8_t tmp[16 * 34];
            const int n = (int)SP_MIN((int64_t)16, nb - 16 * g);
            const uint8_t *b = sr + (size_t)(16 * g) * bb;
            if (n < 16) { /* the last, partial group: transposed from a zero-padded copy */
                memset(tmp, 0, sizeof tmp);
                memcpy(tmp, b, (size_t)n * bb);
                b = tmp;
            }
            /* a whole group's vectors are 64 bytes apart; the tail's 4n */
            const size_t vs = n < 16 ? 4 * (size_t)n : 64;
            const __mmask64 m = n < 16 ? (__mmask64)((1ULL << (4 * n)) - 1) : ~(__mmask64)0;
            const __mmask16 m16 = (__mmask16)((1u << n) - 1);
            uint8_t *o = dr + g * gb;
            __m512i W[8];
            __m512 S;
            int nv;
            if (t == SP_TYPE_Q8_0) {
                repack_q8_0((const block_q8_0 *)b, W, &S);
                nv = 8;
            } else {
                tr16x4(b + 2, sizeof(block_q4_0), W);
                S = gather_f16(b, sizeof(block_q4_0));
                nv = 4;
            }
            for (int i = 0; i < nv; i++) _mm512_mask_storeu_epi8(o + vs * i, m, W[i]);
            _mm256_mask_storeu_epi16(o + vs * nv, m16, _mm512_cvtps_ph(S, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
}

const mm_kernel avx512_mm_q8_0 = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q8_0, q8_0_tile, 0, q8_0_tile_kc, q8_0_tile_warm};
const mm_kernel avx512_mm_q4_0 = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q4_0, q4_0_tile, 0, q4_0_tile_kc, q4_0_tile_warm};
const mm_kernel avx512_mm_q8_0p = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q8_0, q8_0p_tile, 0, q8_0p_tile_kc, q8_0p_tile_warm};
/* Rows of GGUF Q5_0 blocks -> packed rows: per group the 4 transposed
 * vectors of nibble bytes (as Q4_0's), HB (lane j: block j's qh with
 * element 4t + b's bit at bit 8b + t), the 16 scales as f16: 352 bytes,
 * the size of 16 blocks; a last group of n < 16 blocks compact (22n). */
void avx512_pack_rows_q5_0(const void *src, void *dst, int64_t n_rows, int64_t k) {
    const int64_t nb = k / 32, groups = (nb + 15) / 16;
    const size_t srs = (size_t)nb * sizeof(block_q5_0), drs = avx512_packed_row_size(SP_TYPE_Q5_0, k);
    for (int64_t r = 0; r < n_rows; r++) {
        const block_q5_0 *sr = (const block_q5_0 *)((const uint8_t *)src + (size_t)r * srs);
        uint8_t *dr = (uint8_t *)dst + (size_t)r * drs;
        for (int64_t g = 0; g < groups; g++) {
            block_q5_0 tmp[16];
            const int n = (int)SP_MIN((int64_t)16, nb - 16 * g);
            memset(tmp, 0, sizeof tmp);
            memcpy(tmp, sr + 16 * g, (size_t)n * sizeof tmp[0]);
            __m512i V[4];
            tr16x4((const uint8_t *)tmp + 6, sizeof tmp[0], V);
            uint32_t hb[16];
            f16_t d[16];
            for (int j = 0; j < 16; j++) {
                const uint8_t *q = tmp[j].qh;
                const uint32_t h = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
                hb[j] = 0;
                for (int e = 0; e < 32; e++) hb[j] |= ((h >> e) & 1u) << (8 * (e % 4) + e / 4);
                d[j] = tmp[j].d;
            }
            const size_t vs = n < 16 ? 4 * (size_t)n : 64;
            const __mmask64 m = n < 16 ? (__mmask64)((1ULL << (4 * n)) - 1) : ~(__mmask64)0;
            uint8_t *o = dr + g * PACKED_GB_Q5_0;
            for (int i = 0; i < 4; i++) _mm512_mask_storeu_epi8(o + vs * i, m, V[i]);
            _mm512_mask_storeu_epi8(o + 4 * vs, m, _mm512_loadu_si512(hb));
            memcpy(o + 5 * vs, d, (size_t)n * sizeof d[0]);
        }
    }
}

const mm_kernel avx512_mm_q5_0 = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q5_0, q5_0_tile, 0, q5_0_tile_kc, q5_0_tile_warm};
const mm_kernel avx512_mm_q5_0p = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q5_0, q5_0p_tile, 0, q5_0p_tile_kc, q5_0p_tile_warm};
const mm_kernel avx512_mm_q4_0p = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q4_0, q4_0p_tile, 0, q4_0p_tile_kc, q4_0p_tile_warm};
