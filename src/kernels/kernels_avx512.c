/* kernels_avx512.c: AVX-512 F/BW/VL/DQ + VNNI level.
 *
 * Quantized matmul: "one lane per block" layout.
 *   _mm512_dpbusd_epi32 adds, in each of 16 int32 lanes, 4 products u8 * s8.
 *   If every lane of every vector of a dot belongs to one quantization block
 *   (32 weights for Q8_0/Q4_0/Q4_K sub-blocks, 16 for Q6_K), the int32 lanes
 *   end up holding whole block sums after E/4 dpbusd, and one cvt + one FMA
 *   per 16 blocks applies the per-block scales: 11 vector ops per 512 MACs of
 *   Q8_0 against ~4 ops per 64 MACs when a vector spans two blocks.
 *   GGUF stores blocks one after the other, so each group of 16 blocks of a
 *   weight row is transposed in registers (4x4 dword transposes within
 *   128-bit lanes + one two-source permute) right after it is loaded, and
 *   that transposed group is used for every token of the tile (1..8 tokens).
 *   The activations are converted once per matmul into the same transposed
 *   layout (scratch), with per-lane scales and the correction terms below.
 *
 *   dpbusd needs one unsigned operand:
 *     Q8_0 weights: w ^ 0x80 = w + 128 (u8); the lane starts at
 *                   -128 * sum(x of the lane's block) so the sum is exact;
 *     Q4_0 weights: the nibble q (u8); start at -8 * sum(x);
 *     Q4_K weights: the nibble q; the min term is applied in f32
 *                   (dmin * m) * (d_x * sum(x)) as ggml does;
 *     Q6_K weights: the 6-bit q (u8); start at -32 * bsum (Q8_K's own sums).
 *   Integer sums per block are exact, so results differ from the reference
 *   only by f32 summation order.
 *
 * Scratch layouts (per token, per group of 16 lanes; every vector 64 bytes):
 *   Q8_0/Q4_0 (512 values): v[8] int8 (v[s] lane j = x[32j+4s..32j+4s+3]),
 *                           init int32[16], dx f32[16]            = 640 B
 *   Q4_K (512 values = 2 super-blocks): v[8] as above, dx f32[16]
 *                           (d of the super-block, /16 in odd lanes), xm f32[16]
 *                           (d * sum of the sub-block's 32 values) = 640 B
 *   Q6_K (256 values): v[4] int8 (v[s] lane g = x[16g+4s..]),
 *                           init int32[16], dx f32[16]            = 384 B
 *   F32/F16/BF16: f32 values (rounded through f16/bf16), 16 per group.
 *
 * Cost per group of 512 weights and row, single core, data in L2 (TSC
 * cycles at 2.3 GHz; bench/kernels/kbench.c has the whole-model numbers):
 *   Q8_0: ~35-50 to unpack + ~11 per token;  Q4_K: ~20 + ~5.7 per token
 *   (k = 2048: 25.5 at 1 token, 48 at 5; dpbusd, 8 per token and group,
 *   issue on port 0 only there, so a token costs at least 8 core cycles).
 * A core streams ~12.5 GB/s from memory, i.e. ~100 cycles per 544 bytes of
 * Q8_0 and ~53 per 288 bytes of Q4_K, so decode is memory-bound and a few
 * extra tokens cost little: the point of the layout.
 * On AMD Zen 5 (family 26, ~3.5 GHz) dpbusd issues 2 per cycle with a
 * latency of ~4, even with its activations as memory operands and 5 chains
 * 8 deep (40 of them in 21 cycles, hand-written loop); the same loop with
 * the Q4_K unpack and the per-token float steps takes 30, the packed Q4_K
 * tile ~47 at 5 tokens (`bin/tilebench q4_K 5`: 27 us for 512 x 2048), and
 * one core streams ~39 GB/s (README, Performance). dpbusd shares its two
 * pipes with every float multiply and FMA (not with cvt): 16 dpbusd take
 * 8 cycles, with 8 FMAs beside them 12 (README, Performance).
 *
 * Load-time repacking (matmul_pack; model.c repack_weights): Q8_0, Q4_0,
 * Q4_K and Q6_K rows are packed once into what the transposes above make of
 * them (layouts at "Packed layouts"; as many bytes per row as the file's),
 * so a pass loads W[] almost directly; decode and verification
 * (tile_kc) walk each row's K ranges one after another, so every weight row
 * streams in one piece.
 *
 * Float matmul (F16/BF16): up to 16 f32 FMA accumulators, 4 rows x up to 4
 * tokens or 2 rows x 5..8 tokens; each weight vector is converted
 * (f16/bf16 -> f32) once and used by all tokens. F32 weights follow ggml's
 * order instead (f32_finish): 4 accumulators per (row, token).
 */
#include <immintrin.h>

#include "kernels/kernels_internal.h"

#define AI static inline __attribute__((always_inline))

/* from kernels_avx2.c (this CPU has AVX2 too) */
void avx2_quantize_q8_0(const float *x, void *y, int64_t k);
void avx2_vec_dot_q8_0(int64_t k, float *s, const void *w, const void *x);
void avx2_vec_dot_q4_0(int64_t k, float *s, const void *w, const void *x);
void avx2_vec_dot_q4_K(int64_t k, float *s, const void *w, const void *x);
void avx2_vec_dot_q6_K(int64_t k, float *s, const void *w, const void *x);

/* Software prefetch of the weight stream, in two steps: into L2 SP_PF_L2
 * bytes ahead of the group being unpacked, then into L1 SP_PF_L1 bytes
 * ahead. Measured with 2 threads over ~1 GB of Q8_0 (decode matvec as a
 * fraction of the read bandwidth measured just before, median of 6):
 *   no prefetch 72%, L1 only at 2-4 KiB 83-85%, L1 2 KiB + L2 8 KiB 99%.
 * The hardware prefetchers alone do not keep enough lines in flight while
 * the core also spends ~50 vector ops per 544 bytes. */
#define SP_PF_L1 2048
#define SP_PF_L2 8192

/* Prefetch the `bytes` (a constant) that follow p + SP_PF_L1 (to L1) and
 * p + SP_PF_L2 (to L2). Addresses past the end of the matrix are harmless:
 * prefetches do not fault. */
AI void prefetch_ahead(const void *p, const int bytes) {
    const char *q1 = (const char *)p + SP_PF_L1, *q2 = (const char *)p + SP_PF_L2;
    _Pragma("GCC unroll 16")
    for (int l = 0; l < (bytes + 63) / 64; l++) {
        _mm_prefetch(q1 + 64 * l, _MM_HINT_T0);
        _mm_prefetch(q2 + 64 * l, _MM_HINT_T1);
    }
}

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
 * so decode's code is what it was. */
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

/* for (g = G0; g < G1; g++) { body } in a tile of NT tokens, unrolled by 2
 * when NT > 1: a group's dpbusd chains are long enough that the next
 * group's unpacking is worth starting beside them (bin/tilebench, one
 * thread, 512 x 2048: Q6_K at 5 tokens 35.2 -> 28.7 us with the
 * step-major order of q6_K_row). A single token's loop stays as it was:
 * decode is bound by memory, its in-cache tiles did not move unrolled, and
 * the first build that unrolled it as well decoded slower. */
#define GROUP_LOOP(g, G0, G1, ...)                                         \
    do {                                                                   \
        if (NT == 1) {                                                     \
            for (int64_t g = (G0); g < (G1); g++) { __VA_ARGS__ }          \
        } else {                                                           \
            _Pragma("GCC unroll 2") for (int64_t g = (G0); g < (G1); g++) { \
                __VA_ARGS__                                                \
            }                                                              \
        }                                                                  \
    } while (0)

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

/* Two Q4_K super-blocks b[0], b[1] -> 16 lanes = their 16 sub-blocks
 * (lane 8*sb + sub). Z[a] is 64 contiguous bytes of quants (a = 2sb + half),
 * so after the in-lane transpose, lane a + 4L of V[s] holds bytes 16h+4s..
 * (h = L&1) of the 32-byte chunk j = 2(a&1) + (L>>1) of super-block a>>1;
 * the low nibbles of chunk j are sub-block 2j, the high ones 2j+1. One
 * two-source permute per output vector puts every sub-block in its lane. */
AI void scales_q4_K(const uint8_t *h0, const uint8_t *h1, __m512 *S, __m512 *M);

AI void repack_q4_K(const block_q4_K *b, __m512i W[8], __m512 *S, __m512 *M) {
    __m512i Z[4], V[4];
    Z[0] = _mm512_loadu_si512(b[0].qs);
    Z[1] = _mm512_loadu_si512(b[0].qs + 64);
    Z[2] = _mm512_loadu_si512(b[1].qs);
    Z[3] = _mm512_loadu_si512(b[1].qs + 64);
    transpose4(Z, V);
    /* The high nibbles are used in place (q << 4, no shift): dpbusd takes
     * u8 up to 240 and the lane sums stay exact (< 2^24 even as f32); the
     * activation scales of their lanes carry a 1/16 (see conv_x_q4_K). */
    const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8((char)0xF0);
    /* lane l = 8sb + 2j + c <- lane 2sb + (j>>1) + 8(j&1) (+4 for h = 1) of the
     * low (c = 0) or high (c = 1: +16) nibbles */
    const __m512i ia = _mm512_setr_epi32(0, 16, 8, 24, 1, 17, 9, 25, 2, 18, 10, 26, 3, 19, 11, 27);
    const __m512i ib = _mm512_add_epi32(ia, _mm512_set1_epi32(4));
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) {
        const __m512i lo = _mm512_and_si512(V[s], m4), hi = _mm512_and_si512(V[s], m4h);
        W[s] = _mm512_permutex2var_epi32(lo, ia, hi);
        W[4 + s] = _mm512_permutex2var_epi32(lo, ib, hi);
    }
    /* 6-bit scales and mins straight into dword lanes (lane 8sb + j):
     * U = the 16 bytes at b[sb].scales (12 scale bytes q[], 4 quant bytes
     * that are not used) in 128-bit lanes 2sb and 2sb + 1; one in-lane byte
     * shuffle per vector puts in the dword of sub-block j
     *   j < 4:  sc: q[j]             m: q[j+4]
     *   j >= 4: sc: q[j+4] | q[j-4] << 8,  m: q[j+4] | q[j] << 8
     * and a bit select finishes: sc = j < 4 ? w & 63 : (w & 15) | (w >> 10 & 0x30),
     * m = j < 4 ? w & 63 : (w >> 4 & 15) | (w >> 10 & 0x30) (w >> 10 = q[j-4]
     * resp. q[j] >> 2, whose bits 4..5 are the top 2 bits of that byte; a
     * shift count of 32 gives 0). */
    scales_q4_K((const uint8_t *)&b[0], (const uint8_t *)&b[1], S, M);
}

/* S, M of repack_q4_K from the two super-blocks' 16-byte headers (d, dmin,
 * scales[12]; 16 bytes are read from h + 4, so 4 past each header must be
 * readable). */
AI void scales_q4_K(const uint8_t *h0, const uint8_t *h1, __m512 *S, __m512 *M) {
    const __m512i U = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(h0 + 4)))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(h1 + 4))), 1);
#define Z_ (char)0x80
    const __m512i ish = _mm512_broadcast_i64x4(_mm256_setr_epi8(0, Z_, Z_, Z_, 1, Z_, Z_, Z_, 2, Z_, Z_, Z_, 3, Z_, Z_, Z_,
                                                                8, 0, Z_, Z_, 9, 1, Z_, Z_, 10, 2, Z_, Z_, 11, 3, Z_, Z_));
    const __m512i imh = _mm512_broadcast_i64x4(_mm256_setr_epi8(4, Z_, Z_, Z_, 5, Z_, Z_, Z_, 6, Z_, Z_, Z_, 7, Z_, Z_, Z_,
                                                                8, 4, Z_, Z_, 9, 5, Z_, Z_, 10, 6, Z_, Z_, 11, 7, Z_, Z_));
#undef Z_
    const __m512i sh10 = _mm512_setr_epi32(32, 32, 32, 32, 10, 10, 10, 10, 32, 32, 32, 32, 10, 10, 10, 10);
    const __m512i sh4 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i sel = _mm512_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    const __m512i ws = _mm512_shuffle_epi8(U, ish), wm = _mm512_shuffle_epi8(U, imh);
    /* 0xCA: A ? B : C, bitwise */
    const __m512i sc = _mm512_ternarylogic_epi32(sel, ws, _mm512_srlv_epi32(ws, sh10), 0xCA);
    const __m512i mn = _mm512_ternarylogic_epi32(sel, _mm512_srlv_epi32(wm, sh4), _mm512_srlv_epi32(wm, sh10), 0xCA);
    /* d, dmin of both super-blocks */
    uint32_t dd0, dd1;
    memcpy(&dd0, h0, 4);
    memcpy(&dd1, h1, 4);
    const __m512 dd = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi32(0, 0, (int)dd1, (int)dd0)));
    const __m512 d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), dd);
    const __m512 dm = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), dd);
    *S = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), d);
    *M = _mm512_mul_ps(_mm512_cvtepi32_ps(mn), dm);
}

/* One Q6_K super-block -> 16 lanes = its 16 scale groups of 16 values
 * (group g = values 16g..16g+15, scale index g). For lane g = a + 4L:
 * ql bytes at 64(L>>1) + 16a (nibble L&1), qh bytes at 32(L>>1) + 16(a&1)
 * (bit pair qd = (g>>1)&3). */
AI void repack_q6_K(const block_q6_K *b, __m512i W[4], __m512 *S) {
    __m512i Z[4], V[4], H[4];
    _Pragma("GCC unroll 16")
    for (int a = 0; a < 4; a++)
        Z[a] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b->ql + 16 * a)))),
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b->ql + 64 + 16 * a))), 1);
    transpose4(Z, V);
    __m512i ZH[4];
    _Pragma("GCC unroll 16")
    for (int a = 0; a < 2; a++)
        ZH[a] = ZH[a + 2] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b->qh + 16 * a)))),
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b->qh + 32 + 16 * a))), 1);
    transpose4(ZH, H);
    const __m512i shl = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
    /* rotate bit pair 2qd..2qd+1 of every byte to bits 4..5 */
    const __m512i rot = _mm512_setr_epi32(4, 4, 2, 2, 0, 0, 30, 30, 4, 4, 2, 2, 0, 0, 30, 30);
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    _Pragma("GCC unroll 16")
    for (int s = 0; s < 4; s++) {
        const __m512i hi = _mm512_and_si512(_mm512_rolv_epi32(H[s], rot), m30);
        /* (lo & 0x0F) | hi in one ternary-logic op (0xEC = (A & C) | B) */
        W[s] = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(V[s], shl), hi, m4, 0xEC);
    }
    *S = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales))),
                       _mm512_set1_ps(_cvtsh_ss(b->d)));
}

/* Packed Q6_K (load-time repacking), per super-block, 210 B as in the file:
 * what repack_q6_K makes of it (W[0..3], 6-bit values, one sub-block of 16
 * per lane), split into nibbles and bit pairs instead of the file's
 * interleaving:
 *   L01 (64 B): W[0] & 15 | (W[1] & 15) << 4;  L23: the same for W[2], W[3];
 *   H   (64 B): bits 4..5 of W[0..3] at bits 0..1, 2..3, 4..5, 6..7;
 *   scales[16] int8, d f16: S = d * scales, the same product as unpacked.
 * A pass then costs ~13 ops to rebuild W[] instead of two transposes. */
#define PACKED_GB_Q6_K 210

AI void load_q6_Kp(const uint8_t *p, __m512i W[4], __m512 *S) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    const __m512i l01 = _mm512_loadu_si512(p), l23 = _mm512_loadu_si512(p + 64), h = _mm512_loadu_si512(p + 128);
    /* (A & C) | B with C = 15 (0xEC), B the high pair already at bits 4..5 */
    W[0] = _mm512_ternarylogic_epi32(l01, _mm512_and_si512(_mm512_slli_epi32(h, 4), m30), m4, 0xEC);
    W[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(l01, 4), _mm512_and_si512(_mm512_slli_epi32(h, 2), m30), m4, 0xEC);
    W[2] = _mm512_ternarylogic_epi32(l23, _mm512_and_si512(h, m30), m4, 0xEC);
    W[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(l23, 4), _mm512_and_si512(_mm512_srli_epi32(h, 2), m30), m4, 0xEC);
    f16_t d;
    memcpy(&d, p + 208, 2);
    *S = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 192)))),
                       _mm512_set1_ps(_cvtsh_ss(d)));
}

static void pack_q6_K(const block_q6_K *b, uint8_t *p) {
    __m512i W[4];
    __m512 S;
    repack_q6_K(b, W, &S);
    const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3);
    const __m512i hi[4] = {
        _mm512_and_si512(_mm512_srli_epi32(W[0], 4), m3), _mm512_and_si512(_mm512_srli_epi32(W[1], 4), m3),
        _mm512_and_si512(_mm512_srli_epi32(W[2], 4), m3), _mm512_and_si512(_mm512_srli_epi32(W[3], 4), m3)};
    _mm512_storeu_si512(p, _mm512_or_si512(_mm512_and_si512(W[0], m4), _mm512_slli_epi32(_mm512_and_si512(W[1], m4), 4)));
    _mm512_storeu_si512(p + 64, _mm512_or_si512(_mm512_and_si512(W[2], m4), _mm512_slli_epi32(_mm512_and_si512(W[3], m4), 4)));
    _mm512_storeu_si512(p + 128, _mm512_or_si512(_mm512_or_si512(hi[0], _mm512_slli_epi32(hi[1], 2)),
                                                 _mm512_or_si512(_mm512_slli_epi32(hi[2], 4), _mm512_slli_epi32(hi[3], 6))));
    memcpy(p + 192, b->scales, 16);
    memcpy(p + 208, &b->d, 2);
}

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
static void quantize_q8_K_avx512(const float *x, void *vy, int64_t k) {
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
 * -(sum << shift): 7 for Q8_0 weights (+128 bias), 3 for Q4_0 (q - 8). */
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

static void conv_x_q8_0(const float *x, int64_t k, void *xs) { conv_q8_0_layout(x, k, xs, 7); }
static void conv_x_q4_0(const float *x, int64_t k, void *xs) { conv_q8_0_layout(x, k, xs, 3); }

static void conv_x_q4_K(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    const int64_t nsb = k / SP_QK_K;
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t g = 0; 2 * g < nsb; g++, xs += GROUP_BYTES_Q8) {
        block_q8_K q[2];
        const int64_t n = SP_MIN((int64_t)2, nsb - 2 * g);
        quantize_q8_K_avx512(x + 512 * g, q, SP_QK_K * n);
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

static void conv_x_q6_K(const float *x, int64_t k, void *vxs) {
    uint8_t *xs = vxs;
    for (int64_t g = 0; g < k / SP_QK_K; g++, xs += GROUP_BYTES_Q6) {
        block_q8_K q;
        quantize_q8_K_avx512(x + SP_QK_K * g, &q, SP_QK_K);
        __m512i V[4];
        tr16x4((const uint8_t *)q.qs, 16, V);
        _Pragma("GCC unroll 16")
        for (int s = 0; s < 4; s++) _mm512_store_si512(xs + 64 * s, V[s]);
        const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)q.bsums));
        _mm512_store_si512(xs + 256, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
        _mm512_store_ps(xs + 320, _mm512_set1_ps(q.d));
    }
}

static size_t xrow_unused(int64_t k) { (void)k; return 0; }

/* ---- quantized tiles ---------------------------------------------------- */

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

AI void store_row(float *y, int64_t ldy, int64_t r, const int NT, const __m512 *F, int acc) {
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        const float v = _mm512_reduce_add_ps(F[t]);
        if (acc) y[t * ldy + r] += v;
        else y[t * ldy + r] = v;
    }
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
 * The last group of a row is zero-padded like the unpacked tiles' copy, so
 * every sum is the same, bit for bit (test_kernels). */
#define PACKED_GB_Q8_0 544
#define PACKED_GB_Q4_0 288

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

/* Group g of a packed row: every group whole (padded at packing). */
#define PACKED_GROUP(NAME, GB, LOAD)                                                                  \
    AI void NAME(const uint8_t *row, int64_t nb, int64_t g, __m512i W[8], __m512 *S, size_t pf_ws) {  \
        (void)nb;                                                                                     \
        prefetch_group(row + g * GB, GB, pf_ws);                                                      \
        LOAD(row + g * GB, W, S);                                                                     \
    }

GGUF_GROUP(group_q8_0, block_q8_0, repack_q8_0)
GGUF_GROUP(group_q4_0, block_q4_0, repack_q4_0)
PACKED_GROUP(group_q8_0p, PACKED_GB_Q8_0, load_q8_0p)
PACKED_GROUP(group_q4_0p, PACKED_GB_Q4_0, load_q4_0p)
QTILE(q8_0, group_q8_0)
QTILE(q4_0, group_q4_0)
QTILE(q8_0p, group_q8_0p)
QTILE(q4_0p, group_q4_0p)

/* Rows of GGUF blocks -> packed rows (see above). */
static size_t packed_row_size(tensor_type t, int64_t k) {
    const int64_t groups = (k / 32 + 15) / 16;
    return t == SP_TYPE_Q8_0 ? (size_t)groups * PACKED_GB_Q8_0
         : t == SP_TYPE_Q4_0 ? (size_t)groups * PACKED_GB_Q4_0
         : t == SP_TYPE_Q4_K ? (size_t)((k / SP_QK_K + 1) / 2) * 288
         : t == SP_TYPE_Q6_K ? (size_t)(k / SP_QK_K) * PACKED_GB_Q6_K : 0;
}

static void pack_rows_q4_K(const void *src, void *dst, int64_t n_rows, int64_t k);

static void pack_rows(tensor_type t, const void *src, void *dst, int64_t n_rows, int64_t k) {
    if (t == SP_TYPE_Q4_K) {
        pack_rows_q4_K(src, dst, n_rows, k);
        return;
    }
    if (t == SP_TYPE_Q6_K) {
        const int64_t nsb = k / SP_QK_K;
        const block_q6_K *b = src;
        uint8_t *d = dst;
        for (int64_t i = 0; i < n_rows * nsb; i++) pack_q6_K(b + i, d + i * PACKED_GB_Q6_K);
        return;
    }
    const int64_t nb = k / 32, groups = (nb + 15) / 16;
    const size_t bb = type_info(t)->block_bytes, srs = (size_t)nb * bb, drs = packed_row_size(t, k);
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *sr = (const uint8_t *)src + (size_t)r * srs;
        uint8_t *dr = (uint8_t *)dst + (size_t)r * drs;
        for (int64_t g = 0; g < groups; g++) {
            uint8_t tmp[16 * 34];
            const int64_t n = SP_MIN((int64_t)16, nb - 16 * g);
            const uint8_t *b = sr + (size_t)(16 * g) * bb;
            if (n < 16) { /* the last, partial group: zero-padded as the tiles pad it */
                memset(tmp, 0, sizeof tmp);
                memcpy(tmp, b, (size_t)n * bb);
                b = tmp;
            }
            __m512i W[8];
            __m512 S;
            if (t == SP_TYPE_Q8_0) {
                repack_q8_0((const block_q8_0 *)b, W, &S);
                for (int i = 0; i < 8; i++) _mm512_storeu_si512(dr + g * PACKED_GB_Q8_0 + 64 * i, W[i]);
                _mm256_storeu_si256((__m256i *)(dr + g * PACKED_GB_Q8_0 + 512),
                                    _mm512_cvtps_ph(S, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            } else {
                __m512i V[4];
                tr16x4(b + 2, sizeof(block_q4_0), V);
                S = gather_f16(b, sizeof(block_q4_0));
                for (int i = 0; i < 4; i++) _mm512_storeu_si512(dr + g * PACKED_GB_Q4_0 + 64 * i, V[i]);
                _mm256_storeu_si256((__m256i *)(dr + g * PACKED_GB_Q4_0 + 256),
                                    _mm512_cvtps_ph(S, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            }
        }
    }
}

/* Packed Q4_K (see the packed layouts above), per group of 2 super-blocks,
 * 288 B as in the file: their 16-byte headers (d, dmin, scales[12]) and
 * P[0..3], 64 B each, whose byte b of lane l holds the nibble of W[s] in
 * its low half and that of W[4 + s] in its high half, both as plain values
 * 0..15 (the unpacked tile keeps odd lanes' nibbles in place, x16, and
 * their activation scales carry 1/16: the packed tile multiplies S by 16
 * in those lanes instead, which gives the same products exactly). Two ANDs
 * and a shift per P instead of a transpose and two permutes. */
#define PACKED_GB_Q4_K 288

/* S, M of a packed group (odd lanes' S x16: their nibbles are plain 0..15) */
AI void scales_q4_Kp(const uint8_t *p, __m512 *S, __m512 *M) {
    scales_q4_K(p, p + 16, S, M);
    *S = _mm512_mul_ps(*S, _mm512_setr_ps(1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16));
}

AI void load_q4_Kp(const uint8_t *p, __m512i W[8], __m512 *S, __m512 *M) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) {
        const __m512i v = _mm512_loadu_si512(p + 32 + 64 * s);
        W[s] = _mm512_and_si512(v, m4);
        W[4 + s] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
    }
    scales_q4_Kp(p, S, M);
}

/* NAME_nt (the file's blocks) and NAMEp_nt (packed rows) from NAME_any_nt */
#define ANY_NT_WRAPPERS(NAME)                                                                        \
    AI void NAME##_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,        \
                      const int NT, int64_t k, int64_t k0, int64_t k1, int64_t kc, float *y,         \
                      int64_t ldy, int acc, const size_t ROW_PF) {                                   \
        NAME##_any_nt(w, ws, nr, xs, xss, NT, k, k0, k1, kc, y, ldy, acc, 0, ROW_PF);                \
    }                                                                                                \
    AI void NAME##p_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss,       \
                       const int NT, int64_t k, int64_t k0, int64_t k1, int64_t kc, float *y,        \
                       int64_t ldy, int acc, const size_t ROW_PF) {                                  \
        NAME##_any_nt(w, ws, nr, xs, xss, NT, k, k0, k1, kc, y, ldy, acc, 1, ROW_PF);                \
    }

/* A group's float steps for one row and token, the same on every path:
 * F += cvt(I) * (S * dx), then F -= M * xsum (xt: the token's scratch
 * group). The min term goes into F itself: an accumulator of its own per
 * token (added to F once per row) took 8 of the 32 registers at 8 tokens,
 * and without it prefill's 8-token tile is 4-5% faster in cache
 * (`bin/tilebench q4_K 8`: 41.6-42.3 -> 39.7-40.2 us, 3 alternating runs). */
AI void q4_K_acc(__m512 *F, __m512i I, __m512 S, __m512 M, const uint8_t *xt) {
    *F = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(S, _mm512_load_ps(xt + 512)), *F);
    *F = _mm512_fnmadd_ps(M, _mm512_load_ps(xt + 576), *F);
}

/* One row's groups [g0, g1) of Q4_K (packed or the file's) for the NT
 * tokens of a tile -> F[t]; pf_ws: prefetch_group's.
 *
 * Per token and group: 8 dpbusd and q4_K_acc's two float steps, the same
 * for every path and batch.
 * A dpbusd takes 4 cycles and 2 can start per cycle, on the two pipes
 * that also do every float multiply: at 5 tokens, 55 such ops a group,
 * ~28 cycles at best. Token by token (one chain of 8 each) the core kept
 * only a few chains going (~49 cycles a group at 5 tokens, k = 2048, in
 * L1). With 2-5 tokens on packed weights the order is therefore
 * step-major: two chains per token (vectors 0-3 and 4-7), every token's
 * step s before any step s + 1, so 2 NT chains are in flight; the weights
 * are unpacked a step at a time (2 registers, not 8), which is what leaves
 * room for the 2 NT chains beside F.
 * One row at a time, not two: two rows at 2-5 tokens, each activation
 * vector loaded once for both rows' dpbusd, are ~10% faster in cache (Q4_K
 * 5 tokens 25.6-26.5 -> 23.4-23.7 us, Q6_K 28.6-29.1 -> 25.6-27.4), but
 * streamed from memory by one core (`bin/tilebench q4_K 5 65536 2048 5`,
 * what a verification does) ~25% slower (4.7-5.7 -> 6.0-6.9 ms, 6
 * alternating runs; Q6_K level): a pair's body is twice as long, so the
 * core runs fewer groups ahead of a weight load that misses (b6186bc). */
AI void q4_K_row(const uint8_t *w, size_t ws, int64_t r, int64_t nsb, int64_t g0, int64_t g1, const uint8_t *xs,
                 size_t xss, const int NT, const int PACKED, size_t pf_ws, __m512 F[8]) {
    const block_q4_K *wr = (const block_q4_K *)(w + r * ws);
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) F[t] = _mm512_setzero_ps();
    if (PACKED && NT > 1 && NT <= 5) {
        const __m512i m4 = _mm512_set1_epi8(0xF);
        GROUP_LOOP(g, g0, g1,
            const uint8_t *gp = w + r * ws + g * PACKED_GB_Q4_K, *xg = xs + g * GROUP_BYTES_Q8;
            prefetch_group(gp, PACKED_GB_Q4_K, pf_ws);
            __m512i A[5], B[5];
            _Pragma("GCC unroll 4")
            for (int s = 0; s < 4; s++) {
                const __m512i v = _mm512_loadu_si512(gp + 32 + 64 * s);
                const __m512i wl = _mm512_and_si512(v, m4), wh = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
                _Pragma("GCC unroll 8")
                for (int t = 0; t < NT; t++) {
                    const __m512i a = s ? A[t] : _mm512_setzero_si512(), b = s ? B[t] : _mm512_setzero_si512();
                    A[t] = _mm512_dpbusd_epi32(a, wl, _mm512_load_si512(xg + t * xss + 64 * s));
                    B[t] = _mm512_dpbusd_epi32(b, wh, _mm512_load_si512(xg + t * xss + 256 + 64 * s));
                }
            }
            __m512 S, M;
            scales_q4_Kp(gp, &S, &M);
            _Pragma("GCC unroll 8")
            for (int t = 0; t < NT; t++) {
                q4_K_acc(&F[t], _mm512_add_epi32(A[t], B[t]), S, M, xg + t * xss);
            });
    } else {
        for (int64_t g = g0; g < g1; g++) {
            __m512i W[8];
            __m512 S, M;
            if (PACKED) {
                const uint8_t *gp = w + r * ws + g * PACKED_GB_Q4_K;
                prefetch_group(gp, PACKED_GB_Q4_K, pf_ws);
                load_q4_Kp(gp, W, &S, &M);
            } else if (2 * g + 2 <= nsb) {
                prefetch_group(wr + 2 * g, 2 * sizeof(block_q4_K), pf_ws);
                repack_q4_K(wr + 2 * g, W, &S, &M);
            } else { /* odd number of super-blocks: pad with a zero one */
                block_q4_K tmp[2];
                memset(&tmp[1], 0, sizeof tmp[1]);
                tmp[0] = wr[2 * g];
                repack_q4_K(tmp, W, &S, &M);
            }
            _Pragma("GCC unroll 16")
            for (int t = 0; t < NT; t++) {
                const uint8_t *xg = xs + t * xss + g * GROUP_BYTES_Q8;
                q4_K_acc(&F[t], NT >= 3 ? dot8_1(W, xg) : dot8(W, xg, _mm512_setzero_si512()), S, M, xg);
            }
        }
    }
}

AI void q4_K_any_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss, const int NT,
                    int64_t k, int64_t k0, int64_t k1, int64_t kc, float *y, int64_t ldy, int acc, const int PACKED,
                    const size_t ROW_PF) {
    const int64_t nsb = k / SP_QK_K;
    const int nq = (int)((k1 - k0 + kc - 1) / kc);
    SP_ASSERT(nq <= SP_MM_KC_RANGES);
    /* per-row accumulators of the last 16 rows, per K range, summed 16 rows
     * at a time; a row's ranges reach y in order (the first writes it) */
    float fb[SP_MM_KC_RANGES][8][16][16] __attribute__((aligned(64)));
#define Q4K_RANGE(q) \
    const int64_t ka = k0 + (q) * kc, g0 = ka / 512, g1 = (SP_MIN(k1, ka + kc) + 511) / 512
    if (walk_by_range(nq, NT, xss)) {
        for (int64_t rb = 0; rb < nr; rb += 16) {
            const int n = (int)SP_MIN((int64_t)16, nr - rb);
            for (int q = 0; q < nq; q++) {
                Q4K_RANGE(q);
                for (int rr = 0; rr < n; rr++) {
                    __m512 F[8];
                    q4_K_row(w, ws, rb + rr, nsb, g0, g1, xs, xss, NT, PACKED, ws, F);
                    _Pragma("GCC unroll 16")
                    for (int t = 0; t < NT; t++) _mm512_store_ps(fb[q][t][rr], F[t]);
                }
            }
            rows16_store(fb, nq, NT, y, ldy, rb, acc, n);
        }
        return;
    }
    for (int64_t r = 0; r < nr; r++) {
        const int rr = (int)(r & 15);
        for (int q = 0; q < nq; q++) {
            Q4K_RANGE(q);
            __m512 F[8];
            q4_K_row(w, ws, r, nsb, g0, g1, xs, xss, NT, PACKED, ROW_PF, F);
            _Pragma("GCC unroll 16")
            for (int t = 0; t < NT; t++) _mm512_store_ps(fb[q][t][rr], F[t]);
        }
        if (rr == 15) rows16_store(fb, nq, NT, y, ldy, r - 15, acc, 16);
    }
    if (nr & 15) rows16_store(fb, nq, NT, y, ldy, nr - (nr & 15), acc, (int)(nr & 15));
#undef Q4K_RANGE
}

ANY_NT_WRAPPERS(q4_K)

/* One row's super-blocks [g0, g1) of Q6_K for the NT tokens of a tile,
 * summed into y (written when !acc); pf_ws as q4_K_row. */
AI void q6_K_row(const uint8_t *w, size_t ws, int64_t r, int64_t g0, int64_t g1, const uint8_t *xs, size_t xss,
                 const int NT, const int PACKED, size_t pf_ws, float *y, int64_t ldy, int acc) {
    const block_q6_K *wr = (const block_q6_K *)(w + r * ws);
    __m512 F[8];
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) F[t] = _mm512_setzero_ps();
    GROUP_LOOP(g, g0, g1,
        __m512i W[4];
        __m512 S;
        if (PACKED) {
            const uint8_t *gp = w + r * ws + g * PACKED_GB_Q6_K;
            prefetch_group(gp, PACKED_GB_Q6_K, pf_ws);
            load_q6_Kp(gp, W, &S);
        } else {
            prefetch_group(wr + g, sizeof(block_q6_K), pf_ws);
            repack_q6_K(wr + g, W, &S);
        }
        /* step-major (see q4_K_row): both chains of every token, then their
         * second steps; the sums and float steps are the ones of before */
        const uint8_t *xg = xs + g * GROUP_BYTES_Q6;
        __m512i A[8], B[8];
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            A[t] = _mm512_dpbusd_epi32(_mm512_load_si512(xg + t * xss + 256), W[0], _mm512_load_si512(xg + t * xss));
            B[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), W[2], _mm512_load_si512(xg + t * xss + 128));
        }
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            const uint8_t *xt = xg + t * xss;
            A[t] = _mm512_dpbusd_epi32(A[t], W[1], _mm512_load_si512(xt + 64));
            B[t] = _mm512_dpbusd_epi32(B[t], W[3], _mm512_load_si512(xt + 192));
            F[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(A[t], B[t])),
                                   _mm512_mul_ps(S, _mm512_load_ps(xt + 320)), F[t]);
        }
        );
    store_row(y, ldy, r, NT, F, acc);
}

AI void q6_K_any_nt(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *xs, size_t xss, const int NT,
                    int64_t k, int64_t k0, int64_t k1, int64_t kc, float *y, int64_t ldy, int acc, const int PACKED,
                    const size_t ROW_PF) {
    (void)k;
    if (walk_by_range((int)((k1 - k0 + kc - 1) / kc), NT, xss)) {
        for (int64_t rb = 0; rb < nr; rb += 16)
            for (int64_t ka = k0; ka < k1; ka += kc)
                for (int64_t r = rb; r < SP_MIN(nr, rb + 16); r++)
                    q6_K_row(w, ws, r, ka / SP_QK_K, SP_MIN(k1, ka + kc) / SP_QK_K, xs, xss, NT, PACKED, ws, y, ldy,
                             acc || ka > k0);
        return;
    }
    for (int64_t r = 0; r < nr; r++)
        for (int64_t ka = k0; ka < k1; ka += kc)
            q6_K_row(w, ws, r, ka / SP_QK_K, SP_MIN(k1, ka + kc) / SP_QK_K, xs, xss, NT, PACKED, ROW_PF, y,
                     ldy, acc || ka > k0);
}

ANY_NT_WRAPPERS(q6_K)

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

TILE_DISPATCH8(q8_0)
TILE_DISPATCH8(q4_0)
TILE_DISPATCH8(q8_0p)
TILE_DISPATCH8(q4_0p)
TILE_DISPATCH8(q4_K)
TILE_DISPATCH8(q4_Kp)

static void pack_rows_q4_K(const void *src, void *dst, int64_t n_rows, int64_t k) {
    const int64_t nsb = k / SP_QK_K, groups = (nsb + 1) / 2;
    const __mmask16 odd = 0xAAAA;
    for (int64_t r = 0; r < n_rows; r++) {
        const block_q4_K *sr = (const block_q4_K *)src + r * nsb;
        uint8_t *dr = (uint8_t *)dst + (size_t)r * (size_t)groups * PACKED_GB_Q4_K;
        for (int64_t g = 0; g < groups; g++) {
            block_q4_K b[2];
            b[0] = sr[2 * g];
            if (2 * g + 1 < nsb) b[1] = sr[2 * g + 1];
            else memset(&b[1], 0, sizeof b[1]); /* as the unpacked tile pads */
            __m512i W[8];
            __m512 S, M;
            repack_q4_K(b, W, &S, &M);
            uint8_t *gp = dr + g * PACKED_GB_Q4_K;
            memcpy(gp, &b[0], 16);
            memcpy(gp + 16, &b[1], 16);
            for (int s = 0; s < 4; s++) {
                /* odd lanes hold q << 4: back to q, then W[4 + s] into the high half */
                const __m512i lo = _mm512_mask_srli_epi32(W[s], odd, W[s], 4);
                const __m512i hi = _mm512_mask_srli_epi32(W[4 + s], odd, W[4 + s], 4);
                _mm512_storeu_si512(gp + 32 + 64 * s, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)));
            }
        }
    }
}
TILE_DISPATCH8(q6_K)
TILE_DISPATCH8(q6_Kp)

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

static void conv_x_f32(const float *x, int64_t k, void *xs) { memcpy(xs, x, (size_t)k * 4); }

static void conv_x_f16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    for (int64_t i = 0; i < k; i += 16) {
        const __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(xs + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
    }
}

static void conv_x_bf16(const float *x, int64_t k, void *vxs) {
    float *xs = vxs;
    for (int64_t i = 0; i < k; i++) xs[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

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

static void vec_dot_f32_avx512(int64_t k, float *s, const void *w, const void *x) {
    f32g_block(w, 0, x, 0, 1, 1, k, s, 0);
}
static void vec_dot_f16_avx512(int64_t k, float *s, const void *w, const void *x) { *s = dot_float(k, w, x, SP_TYPE_F16); }
static void vec_dot_bf16_avx512(int64_t k, float *s, const void *w, const void *x) { *s = dot_float(k, w, x, SP_TYPE_BF16); }

static void quantize_f16_avx512(const float *x, void *vy, int64_t k) {
    f16_t *y = vy;
    for (int64_t i = 0; i < k; i += 16) {
        const __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

static const mm_kernel mm_f32 = {16, 64, xrow_unused, 6, conv_x_f32, f32_tile, 1, NULL, NULL};
static const mm_kernel mm_f16 = {16, 64, xrow_unused, 8, conv_x_f16, f16_tile, 0, NULL, NULL};
static const mm_kernel mm_bf16 = {16, 64, xrow_unused, 8, conv_x_bf16, bf16_tile, 0, NULL, NULL};
static const mm_kernel mm_q8_0 = {512, GROUP_BYTES_Q8, xrow_unused, 8, conv_x_q8_0, q8_0_tile, 0, q8_0_tile_kc, q8_0_tile_warm};
static const mm_kernel mm_q4_0 = {512, GROUP_BYTES_Q8, xrow_unused, 8, conv_x_q4_0, q4_0_tile, 0, q4_0_tile_kc, q4_0_tile_warm};
static const mm_kernel mm_q4_K = {512, GROUP_BYTES_Q8, xrow_unused, 8, conv_x_q4_K, q4_K_tile, 0, q4_K_tile_kc, q4_K_tile_warm};
static const mm_kernel mm_q8_0p = {512, GROUP_BYTES_Q8, xrow_unused, 8, conv_x_q8_0, q8_0p_tile, 0, q8_0p_tile_kc, q8_0p_tile_warm};
static const mm_kernel mm_q4_0p = {512, GROUP_BYTES_Q8, xrow_unused, 8, conv_x_q4_0, q4_0p_tile, 0, q4_0p_tile_kc, q4_0p_tile_warm};
static const mm_kernel mm_q4_Kp = {512, GROUP_BYTES_Q8, xrow_unused, 8, conv_x_q4_K, q4_Kp_tile, 0, q4_Kp_tile_kc, q4_Kp_tile_warm};
static const mm_kernel mm_q6_K = {256, GROUP_BYTES_Q6, xrow_unused, 8, conv_x_q6_K, q6_K_tile, 0, q6_K_tile_kc, q6_K_tile_warm};
static const mm_kernel mm_q6_Kp = {256, GROUP_BYTES_Q6, xrow_unused, 8, conv_x_q6_K, q6_Kp_tile, 0, q6_Kp_tile_kc, q6_Kp_tile_warm};

const kernel_ops kernel_ops_avx512 = {
    .name = "avx512",
    .vec_dot = {
        [SP_TYPE_F32] = vec_dot_f32_avx512,
        [SP_TYPE_F16] = vec_dot_f16_avx512,
        [SP_TYPE_BF16] = vec_dot_bf16_avx512,
        [SP_TYPE_Q8_0] = avx2_vec_dot_q8_0,
        [SP_TYPE_Q4_0] = avx2_vec_dot_q4_0,
        [SP_TYPE_Q4_K] = avx2_vec_dot_q4_K,
        [SP_TYPE_Q6_K] = avx2_vec_dot_q6_K,
    },
    .quantize = {
        [SP_TYPE_F32] = ref_quantize_f32,
        [SP_TYPE_F16] = quantize_f16_avx512,
        [SP_TYPE_BF16] = ref_quantize_bf16,
        [SP_TYPE_Q8_0] = avx2_quantize_q8_0,
        [SP_TYPE_Q8_K] = quantize_q8_K_avx512,
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
    .mm_packed = {
        [SP_TYPE_Q8_0] = &mm_q8_0p,
        [SP_TYPE_Q4_0] = &mm_q4_0p,
        [SP_TYPE_Q4_K] = &mm_q4_Kp,
        [SP_TYPE_Q6_K] = &mm_q6_Kp,
    },
    .packed_row_size = packed_row_size,
    .pack_rows = pack_rows,
    .no_twin = 1,
};
