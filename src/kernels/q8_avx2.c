/* q8_avx2.c: Q8_0, Q4_0, Q5_0 and Q5_1 weights (all against Q8_0
 * activations) at the AVX2 level.
 *
 * The single-row dots and the matmul tiles in ggml's order (one weight row
 * at a time against up to 8 tokens, each block loaded and unpacked once for
 * all of them); for matrices of 8-row multiples, 8 rows to a vector: Q4_0
 * in llama.cpp's repacked order (on the file's rows, and packed at load),
 * Q8_0 in the row-sum order (packed at load, and on the file's rows), with
 * the writers of the packed layouts (avx2_put_*, for kernels_avx2.c's
 * packing). Why each order and what it costs: at its section.
 */
#include "kernels/simd_avx2.h"

/* ---- ggml's order: one row x NT tokens over blocks [b0, b1) ------------ */

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

/* A 5-bit block's 32 values (0..31) as bytes in element order: the
 * nibbles as Q4_0's, bit 4 from qh (each byte of the broadcast word picks
 * qh's byte i / 8, then tests its own bit i % 8). */
AI __m256i q5_values(const uint8_t *qs, const uint8_t *qh) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0xF));
    const __m256i sel = _mm256_shuffle_epi8(_mm256_set1_epi32(load_i32(qh)),
                                            _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                              0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sel, bit), bit), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nib, hb);
}

/* Q5_0: the signed values (q - 16), then as Q8_0's blocks (ggml's order) */
AI void q5_0_row(const block_q5_0 *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                 int64_t b1, __m256 *F, __m128 *M) {
    (void)M;
    const __m256i sixteen = _mm256_set1_epi8(16);
    for (int64_t b = b0; b < b1; b++) {
        if (!(b & 3)) prefetch_ahead(&w[b], 4 * (int)sizeof(block_q5_0));
        const __m256i q = _mm256_sub_epi8(q5_values(w[b].qs, w[b].qh), sixteen);
        const block_q8_0 *xb = (const block_q8_0 *)xs + b;
        q8_block_tokens(q, f16f(w[b].d), (const uint8_t *)xb->qs, (const uint8_t *)&xb->d, xss, NT, F, 0);
    }
}

/* Q5_1: q . x times dw * dx, then the sum of x times m * dx, lane by lane
 * (the values are unsigned: maddubs takes them as they are) */
AI void q5_1_row(const block_q5_1 *w, const uint8_t *xs, size_t xss, const int NT, int64_t b0,
                 int64_t b1, __m256 *F, __m128 *M) {
    (void)M;
    const __m256i ones = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
    for (int64_t b = b0; b < b1; b++) {
        if (!(b & 3)) prefetch_ahead(&w[b], 4 * (int)sizeof(block_q5_1));
        const __m256i q = q5_values(w[b].qs, w[b].qh);
        const float dw = f16f(w[b].d), mw = f16f(w[b].m);
        const uint8_t *xq = (const uint8_t *)((const block_q8_0 *)xs + b);
        _Pragma("GCC unroll 16")
        for (int t = 0; t < NT; t++) {
            const uint8_t *xb = xq + t * xss;
            f16_t h;
            memcpy(&h, xb, sizeof h);
            const float dx = f16f(h);
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xb + sizeof(f16_t)));
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), ones);
            const __m256i sx = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, x), ones);
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * dx), F[t]);
            F[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sx), _mm256_set1_ps(mw * dx), F[t]);
        }
    }
}

QTILE2(q8_0, block_q8_0, 32, q8_0_rowa, q8_0_row, 0)
QTILE(q4_0, block_q4_0, 32, q4_0_row, 0)
QTILE(q5_0, block_q5_0, 32, q5_0_row, 0)
QTILE(q5_1, block_q5_1, 32, q5_1_row, 0)

/* ---- Q4_0 matrices of 8-row multiples: ggml's repacked order ----------- */

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

/* q4_0p8's layout */
void avx2_put_q4_0(const void *vb, uint8_t *o, int i) {
    const block_q4_0 *blk = vb;
    for (int m = 0; m < 4; m++) memcpy(o + 32 * m + 4 * i, blk->qs + 4 * m, 4);
    memcpy(o + 128 + 2 * i, &blk->d, 2);
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
 *   activations: avx2_conv_q8_0a's (Q8A_BYTES per 8 blocks). */
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

void avx2_put_q8_0(const void *vb, uint8_t *o, int i) {
    const block_q8_0 *blk = vb;
    for (int m = 0; m < 8; m++) memcpy(o + 32 * m + 4 * i, blk->qs + 4 * m, 4);
    memcpy(o + 256 + 2 * i, &blk->d, 2);
}

/* kgroup 256: the scratch row is whole groups of 8 blocks (Q8A_BYTES) */
const mm_kernel avx2_mm_q8_0 = {256, Q8A_BYTES, NULL, 8, avx2_conv_q8_0a, q8_0_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q4_0 = {32, sizeof(block_q8_0), NULL, 8, avx2_conv_q8_0, q4_0_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q5_0 = {32, sizeof(block_q8_0), NULL, 8, avx2_conv_q8_0, q5_0_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q5_1 = {32, sizeof(block_q8_0), NULL, 8, avx2_conv_q8_0, q5_1_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q4_0r8 = {32, sizeof(block_q8_0), NULL, 4, avx2_conv_q8_0, q4_0r8_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q4_0p8 = {32, Q4_0R8_XBLOCK, NULL, 4, avx2_conv_q4_0p8, q4_0p8_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q8_0r8 = {32, sizeof(block_q8_0), NULL, 4, avx2_conv_q8_0, q8_0r8_tile, 1, NULL, NULL};
const mm_kernel avx2_mm_q8_0p8 = {256, Q8A_BYTES, NULL, 8, avx2_conv_q8_0a, q8_0p8_tile, 1, NULL, NULL};
