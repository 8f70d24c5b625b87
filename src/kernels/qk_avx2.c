/* qk_avx2.c: Q4_K and Q6_K weights (against Q8_K activations) at the AVX2
 * level.
 *
 * The single-row dots and the matmul tiles in ggml's order (one weight row
 * at a time against up to 8 tokens, each super-block's quants and scales
 * unpacked once for all of them); for matrices of 8-row multiples the
 * row-sum order, on the file's rows (no_repack) and packed at load, 8 rows
 * to a vector, with the writers of the packed layouts (avx2_put_*, for
 * kernels_avx2.c's packing). Why each order and what it costs: at its
 * section.
 */
#include <math.h>

#include "kernels/simd_avx2.h"

/* ---- ggml's order: one row x NT tokens over super-blocks [b0, b1) ------ */

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

QTILE2(q4_K, block_q4_K, 256, q4_K_rowa, q4_K_row, 1)
QTILE2(q6_K, block_q6_K, 256, q6_K_rowa, q6_K_row, 0)

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
 * (docs/correctness.md). */

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

/* Packed 8-row group, per super-block (Q4KP8_BLOCK bytes):
 *   qs  [4 pairs p][8 groups g][8 rows r][4 B]: row r's qs[32p + 4g .. +3];
 *       low nibbles are sub-block 2p's elements 4g..4g+3, high 2p+1's;
 *   sc  [8 sub-blocks j][8 rows] u8 (6-bit scales, unpacked);
 *   mn  [4 pairs p][8 rows][2] u8: the mins of sub-blocks 2p, 2p+1;
 *   d, dmin [8 rows] f16.
 * 4 bytes a row more than the file (the scales unpacked: 2.8% more to
 * stream in decode, against ~20 ops per super-block and 8 rows to unpack
 * them from 6 bits).
 * Activations: avx2_conv_q8_Ka's layout (quants, d, sums of 32 as int16). */
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

TILE8(q4_K_rs)
TILE8(q4_Kp8)

/* row i's super-block into its 8-row group's packed one (pack_rows_avx2) */
void avx2_put_q4_K(const void *vb, uint8_t *o, int i) {
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
 * token's 32 x sums for those lanes (avx2_conv_q8_Kc), then ONE madd with the 8
 * rows' scales. Wrap-around is exact because the true lane sum fits int16:
 * 8 values of |(q - 32) x| <= 32 * 127 (Q8_K's quants are -127..127), 32512.
 * Per 32 weights of 8 rows and token: 8 maddubs + 2 madd (was 8 + 8 + the
 * 8 subtractions), plus the unpacking, shared by the tile's tokens. */

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

void avx2_put_q6_K(const void *vb, uint8_t *o, int i) {
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

const mm_kernel avx2_mm_q4_K = {256, Q8KA_BYTES, NULL, 8, avx2_conv_q8_Ka, q4_K_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q6_K = {256, Q8KB_BYTES, NULL, 8, avx2_conv_q8_Kb, q6_K_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q4_Krs = {256, Q8KA_BYTES, NULL, 8, avx2_conv_q8_Ka, q4_K_rs_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q4_Kp8 = {256, Q8KA_BYTES, NULL, 8, avx2_conv_q8_Ka, q4_Kp8_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q6_Krs = {256, Q8KB_BYTES, NULL, 8, avx2_conv_q8_Kb, q6_K_rs_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q6_Kp8 = {256, Q8KC_BYTES, NULL, 8, avx2_conv_q8_Kc, q6_Kp8_tile, 1, NULL, NULL};
