/* qk_avx512.c: Q4_K and Q6_K weights (against Q8_K activations) at the
 * AVX-512 level: each group of 2 Q4_K super-blocks (16 sub-blocks of 32)
 * or one Q6_K super-block (16 sub-blocks of 16) of a row transposed into
 * the one-lane-per-block layout (kernels_avx512.c) from the file's blocks,
 * or rebuilt from rows packed at load (layouts below, written here too),
 * then the tokens' dpbusd chains against it in the step-major order that
 * keeps the most chains in flight.
 */
#include "kernels/simd_avx512.h"

/* for (g = G0; g < G1; g++) { body } in a tile of NT tokens, unrolled by 2
 * when NT > 1: a group's dpbusd chains are long enough that the next
 * group's unpacking is worth starting beside them (bin/tilebench, one
 * thread, 512 x 2048: Q6_K at 5 tokens 35.2 -> 28.7 us with the
 * step-major order of q6_K_row). A single token's loop is not unrolled:
 * decode is bound by memory, its in-cache tiles do not gain from it, and
 * decode measured slower with it unrolled. */
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

/* ---- weight repacking: one group of a row -> W[], S (, M) --------------- */

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
     * activation scales of their lanes carry a 1/16 (see
     * avx512_conv_x_q4_K). */
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

/* Rows of GGUF Q6_K super-blocks -> packed rows (pack_q6_K each). */
void avx512_pack_rows_q6_K(const void *src, void *dst, int64_t n_rows, int64_t k) {
    const int64_t nsb = k / SP_QK_K;
    const block_q6_K *b = src;
    uint8_t *d = dst;
    for (int64_t i = 0; i < n_rows * nsb; i++) pack_q6_K(b + i, d + i * PACKED_GB_Q6_K);
}

/* ---- quantized tiles ---------------------------------------------------- */

AI void store_row(float *y, int64_t ldy, int64_t r, const int NT, const __m512 *F, int acc) {
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) {
        const float v = _mm512_reduce_add_ps(F[t]);
        if (acc) y[t * ldy + r] += v;
        else y[t * ldy + r] = v;
    }
}

/* Packed Q4_K (see the packed layouts in q8_avx512.c), per group of 2
 * super-blocks, 288 B as in the file: their 16-byte headers (d, dmin,
 * scales[12]) and P[0..3], 64 B each, whose byte b of lane l holds the
 * nibble of W[s] in its low half and that of W[4 + s] in its high half,
 * both as plain values 0..15 (the unpacked tile keeps odd lanes' nibbles
 * in place, x16, and their activation scales carry 1/16: the packed tile
 * multiplies S by 16 in those lanes instead, which gives the same products
 * exactly). Two ANDs and a shift per P instead of a transpose and two
 * permutes. */
#define PACKED_GB_Q4_K 288

/* A row of an odd number of super-blocks ends in a compact half group,
 * 144 B as in the file: the one header, then P[0..3]'s lanes 0-7 (32 B
 * each: lane l = 8 sb + ..., so the first super-block's). Lanes 8-15 read
 * as zero with a zero header, as the unpacked tile's zero-padded second
 * super-block: the same sums. Padding it to a whole group read a third
 * more at K = 768 (Qwen3-30B-A3B's experts). */
#define PACKED_TAIL_Q4_K 144

/* P[s] of a packed group, whole or the tail */
AI __m512i q4_Kp_vec(const uint8_t *p, int s, const int tail) {
    return tail ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p + 16 + 32 * s) : _mm512_loadu_si512(p + 32 + 64 * s);
}

/* S, M of a packed group (odd lanes' S x16: their nibbles are plain 0..15) */
AI void scales_q4_Kp_any(const uint8_t *p, const int tail, __m512 *S, __m512 *M) {
    static const uint8_t zero[32] __attribute__((aligned(16))); /* scales_q4_K reads h + 4 .. h + 19 */
    scales_q4_K(p, tail ? zero : p + 16, S, M);
    *S = _mm512_mul_ps(*S, _mm512_setr_ps(1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16));
}

AI void load_q4_Kp(const uint8_t *p, const int tail, __m512i W[8], __m512 *S, __m512 *M) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) {
        const __m512i v = q4_Kp_vec(p, s, tail);
        W[s] = _mm512_and_si512(v, m4);
        W[4 + s] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
    }
    scales_q4_Kp_any(p, tail, S, M);
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
 * core runs fewer groups ahead of a weight load that misses. */
AI void q4_K_row(const uint8_t *w, size_t ws, int64_t r, int64_t nsb, int64_t g0, int64_t g1, const uint8_t *xs,
                 size_t xss, const int NT, const int PACKED, size_t pf_ws, __m512 F[8]) {
    const block_q4_K *wr = (const block_q4_K *)(w + r * ws);
    _Pragma("GCC unroll 16")
    for (int t = 0; t < NT; t++) F[t] = _mm512_setzero_ps();
    if (PACKED && NT > 1 && NT <= 5) {
        const __m512i m4 = _mm512_set1_epi8(0xF);
        GROUP_LOOP(g, g0, g1,
            const uint8_t *gp = w + r * ws + g * PACKED_GB_Q4_K, *xg = xs + g * GROUP_BYTES_Q8;
            const int tail = 2 * g + 1 == nsb;
            prefetch_group(gp, tail ? PACKED_TAIL_Q4_K : PACKED_GB_Q4_K, pf_ws);
            __m512i A[5], B[5];
            _Pragma("GCC unroll 4")
            for (int s = 0; s < 4; s++) {
                const __m512i v = q4_Kp_vec(gp, s, tail);
                const __m512i wl = _mm512_and_si512(v, m4), wh = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
                _Pragma("GCC unroll 8")
                for (int t = 0; t < NT; t++) {
                    const __m512i a = s ? A[t] : _mm512_setzero_si512(), b = s ? B[t] : _mm512_setzero_si512();
                    A[t] = _mm512_dpbusd_epi32(a, wl, _mm512_load_si512(xg + t * xss + 64 * s));
                    B[t] = _mm512_dpbusd_epi32(b, wh, _mm512_load_si512(xg + t * xss + 256 + 64 * s));
                }
            }
            __m512 S, M;
            scales_q4_Kp_any(gp, tail, &S, &M);
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
                const int tail = 2 * g + 1 == nsb;
                prefetch_group(gp, tail ? PACKED_TAIL_Q4_K : PACKED_GB_Q4_K, pf_ws);
                load_q4_Kp(gp, tail, W, &S, &M);
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

TILE_DISPATCH8(q4_K)
TILE_DISPATCH8(q4_Kp)

/* Rows of GGUF Q4_K super-blocks -> packed rows (see above). */
void avx512_pack_rows_q4_K(const void *src, void *dst, int64_t n_rows, int64_t k) {
    const int64_t nsb = k / SP_QK_K, groups = (nsb + 1) / 2;
    const __mmask16 odd = 0xAAAA;
    const size_t drs = avx512_packed_row_size(SP_TYPE_Q4_K, k);
    for (int64_t r = 0; r < n_rows; r++) {
        const block_q4_K *sr = (const block_q4_K *)src + r * nsb;
        uint8_t *dr = (uint8_t *)dst + (size_t)r * drs;
        for (int64_t g = 0; g < groups; g++) {
            block_q4_K b[2];
            b[0] = sr[2 * g];
            if (2 * g + 1 < nsb) b[1] = sr[2 * g + 1];
            else memset(&b[1], 0, sizeof b[1]); /* as the unpacked tile pads */
            __m512i W[8];
            __m512 S, M;
            repack_q4_K(b, W, &S, &M);
            uint8_t *gp = dr + g * PACKED_GB_Q4_K;
            const int tail = 2 * g + 1 == nsb;
            memcpy(gp, &b[0], 16);
            if (!tail) memcpy(gp + 16, &b[1], 16);
            for (int s = 0; s < 4; s++) {
                /* odd lanes hold q << 4: back to q, then W[4 + s] into the high half */
                const __m512i lo = _mm512_mask_srli_epi32(W[s], odd, W[s], 4);
                const __m512i hi = _mm512_mask_srli_epi32(W[4 + s], odd, W[4 + s], 4);
                const __m512i v = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4));
                if (tail) _mm512_mask_storeu_epi8(gp + 16 + 32 * s, 0xFFFFFFFFull, v);
                else _mm512_storeu_si512(gp + 32 + 64 * s, v);
            }
        }
    }
}

TILE_DISPATCH8(q6_K)
TILE_DISPATCH8(q6_Kp)

const mm_kernel avx512_mm_q4_K = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q4_K, q4_K_tile, 0, q4_K_tile_kc, q4_K_tile_warm};
const mm_kernel avx512_mm_q4_Kp = {512, GROUP_BYTES_Q8, avx512_xrow_unused, 8, avx512_conv_x_q4_K, q4_Kp_tile, 0, q4_Kp_tile_kc, q4_Kp_tile_warm};
const mm_kernel avx512_mm_q6_K = {256, GROUP_BYTES_Q6, avx512_xrow_unused, 8, avx512_conv_x_q6_K, q6_K_tile, 0, q6_K_tile_kc, q6_K_tile_warm};
const mm_kernel avx512_mm_q6_Kp = {256, GROUP_BYTES_Q6, avx512_xrow_unused, 8, avx512_conv_x_q6_K, q6_Kp_tile, 0, q6_Kp_tile_kc, q6_Kp_tile_warm};
