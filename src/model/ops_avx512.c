/* ops_avx512.c: attention with AVX-512 for head sizes that are multiples
 * of 16 up to 256; other sizes and SwiGLU use the AVX2 variants.
 *
 * Dimension legend: D head_dim = 16 * DC, QG queries sharing each K/V row
 * load (up to D = 128, QG * DC <= 16 zmm of queries or accumulators in
 * registers; past it QG = 4, the queries in memory and V summed in two
 * passes of at most PASS chunks), W chunks of V sums in registers.
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
 * plain decoding exactly. Against AVX2 (8 lanes, a horizontal sum per
 * score; its groups of 4 queries also share each row's conversion) it
 * halves the instructions per score and per weighted V row.
 *
 * A group's queries are any of a run's tokens x the heads of one KV head
 * (GQA: TinyLlama's 8 heads per KV head read each row twice instead of 8
 * times). Scores are reduced 16 positions at a time (reduce16x16), V is
 * weighted in blocks of 64 positions with the partial sums in registers,
 * and a block's K/V rows are gathered and prefetched while the block
 * before it is worked on. One thread, TinyLlama's 22 layers x 32 heads,
 * f16 K/V, on a Zen 5: 0.59 ms per token at 256 positions, 6.9 ms at 1,900
 * and 25.4 ms for 5 tokens at 1,900, against 1.08, 12.1 and 38.6 ms for one
 * head at a time with a horizontal sum per score and the partial sums in
 * memory. D = 256 (Gemma 3 1B's 4 heads on one KV head), one thread, f16
 * K/V, 4,096 positions, on a Zen 4: 0.23 ms per token and 1.14 ms for 5
 * tokens, against 0.53 and 2.66 ms with AVX2's runs.
 */
#include <immintrin.h>
#include <math.h>

#include "common.h"
#include "model/ops.h"

#define AI static inline __attribute__((always_inline))

/* Elements 16c..16c+15 of a head's K/V slice at base (kind: ops.h). */
AI __m512 load_row(const void *base, int c, int kind) {
    if (kind == KV_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + 16 * c)));
    if (kind == KV_F32) return _mm512_loadu_ps((const float *)base + 16 * c);
    const block_q8_0 *b = (const block_q8_0 *)base + c / 2;
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * (c & 1)))));
    return _mm512_mul_ps(q, _mm512_set1_ps(f16_to_f32(b->d)));
}

/* ggml's AVX-512 vector exp (ops_exp_ggml in every lane). */
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

/* ops_softmax_exp (ops.h) with 16 lanes: one group per vector, the last
 * one zero-padded, each reduced as ops_reduce16 and added in double. */
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

/* 16 positions' 16-lane partial dot products v[p] -> lane p = the sum of
 * v[p] in ops_reduce16's order (h[l] = v[l+8] + v[l], q[l] = h[l+4] + h[l],
 * (q0 + q2) + (q1 + q3)), every add vertical: 15 adds and 31 shuffles for
 * 16 scores, where a horizontal sum per score took ~8 dependent ops. */
AI __m512 reduce16x16(const float (*v)[16]) {
    __m512 h[8], q[4], r[2];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        const __m512 a = _mm512_load_ps(v[2 * i]), b = _mm512_load_ps(v[2 * i + 1]);
        /* [a lanes 0-7 | b lanes 0-7] + [a lanes 8-15 | b lanes 8-15] */
        h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    /* h[i]: 128-bit lanes = h[0:4], h[4:8] of position 2i, then of 2i + 1 */
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
        q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xDD));
    /* q[i]: 128-bit lane k = q[0..3] of position 4i + k */
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++)
        r[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0xEE));
    /* r[i]: lane k = [q0+q2, q1+q3] of position 8i + k, then of 8i + 4 + k */
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], 0x88), _mm512_shuffle_ps(r[0], r[1], 0xDD));
    /* s lane 4k + e = position k + 4e */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s);
}

/* Chunks of D that one pass over V sums (part's room, attn_group): head
 * sizes past 128 take two passes, each over its own chunks of every row. */
enum { PASS = 8 };

/* Positions [p0, p1) of V into part (v_pass), one at a time, each into
 * the sums of the queries that attend to it: where the queries' ranges
 * differ (a few rows at the ends), or a range shorter than a block. */
AI void v_rows(const int QG, const int kind, const int c0, const int NC, kv_store *kv, int32_t layer, int32_t seq,
               int32_t g, int32_t D, const float *scores, size_t sc_stride, const int32_t *lim, const int32_t *lo,
               int32_t p0, int32_t p1, float (*part)[16][16 * PASS]) {
    const size_t rb = kv_row_bytes(kv), hoff = kv_head_off(kv, g, D);
    for (int32_t p = p0; p < p1;) {
        const void *kb, *vb;
        const int32_t n = kv->ops->span(kv, layer, seq, p, p1, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            const int32_t P = p + j;
            const char *vr = (const char *)vb + (size_t)j * rb + hoff;
            __m512 V[8];
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) V[c] = load_row(vr, c0 + c, kind);
            _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
                if (P >= lim[t] || P < lo[t]) continue;
                const __m512 pv = _mm512_set1_ps(scores[(size_t)t * sc_stride + P]);
                float *a = part[t][P & 15];
                _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
                    _mm512_store_ps(a + 16 * c, _mm512_fmadd_ps(pv, V[c], _mm512_load_ps(a + 16 * c)));
            }
        }
        p += n;
    }
}

/* Pass over V for chunks [c0, c0 + NC) of D (NC <= PASS): out = 16 partial
 * sums over the positions of each residue mod 16, reduced as ops_reduce16
 * (ops.h). Each partial sum accumulates its positions in increasing order
 * (FMA), as the reference does, so a query's sums do not depend on the
 * group it is in, nor a chunk's on the pass. part[t][r] holds residue r's
 * sums between blocks. Positions every query attends to go in blocks of
 * 64: per residue, its 4 positions of the block with the sums in registers
 * (one load and store of part per 4 FMAs instead of per FMA), W chunks at a
 * time (QG * W <= 16 registers of sums); the rest, where the queries'
 * ranges differ (a few rows before and after the blocks), one position at
 * a time. */
AI void v_pass(const attn_query *aq, const int QG, const int kind, const int c0, const int NC, int qn,
               kv_store *kv, int32_t layer, int32_t seq, int32_t g, int32_t D, const float *scores, size_t sc_stride,
               const int32_t *lim, const int32_t *lo, int32_t n_beg, int32_t n_end, int32_t all_beg,
               int32_t all_end, float (*part)[16][16 * PASS]) {
    const int W = 16 / QG < NC ? 16 / QG : NC;
    /* the elements of each row this pass reads, all that it prefetches */
    const int32_t e0 = 16 * c0, e1 = 16 * (c0 + NC);
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        if (t >= qn) continue;
        for (int r = 0; r < 16; r++)
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) _mm512_store_ps(&part[t][r][16 * c], _mm512_setzero_ps());
    }
    /* the blocks: VB positions from a multiple of 16 (residue r of a block
     * is residue r mod 16) inside [all_beg, all_end) */
    enum { VB = SP_ATTN_ROWS };
    const char *vrow[2][VB]; /* V rows (this KV head's slice) of this block and the next */
    const int32_t blk0 = (all_beg + 15) & ~15;
    const int32_t n_blk = all_end > blk0 ? (all_end - blk0) / VB : 0, blk1 = blk0 + n_blk * VB;
    if (n_blk) ops_attn_rows_part(kv, layer, seq, blk0, blk0 + VB, g, D, e0, e1, 1, vrow[0]);
    /* the positions before the blocks first: a window's first rows belong
     * before the blocks' in every residue's sum, whether the query's group
     * starts its blocks at the query's first multiple of 16 or later */
    v_rows(QG, kind, c0, NC, kv, layer, seq, g, D, scores, sc_stride, lim, lo, n_beg, n_blk ? blk0 : n_end, part);
    for (int32_t bk = 0; bk < n_blk; bk++) {
        const char **vr = vrow[bk & 1];
        if (bk + 1 < n_blk)
            ops_attn_rows_part(kv, layer, seq, blk0 + (bk + 1) * VB, blk0 + (bk + 2) * VB, g, D, e0, e1, 1,
                               vrow[(bk + 1) & 1]);
        const int32_t base = blk0 + bk * VB;
        for (int r = 0; r < 16; r++)
            _Pragma("GCC unroll 2") for (int s = 0; s < NC; s += W) {
                __m512 A[4][8];
                _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++)
                    _Pragma("GCC unroll 8") for (int w = 0; w < W; w++)
                        A[t][w] = t < qn && s + w < NC ? _mm512_load_ps(&part[t][r][16 * (s + w)]) : _mm512_setzero_ps();
                _Pragma("GCC unroll 4") for (int i = 0; i < VB / 16; i++) {
                    const int32_t P = base + 16 * i + r;
                    __m512 V[8];
                    _Pragma("GCC unroll 8") for (int w = 0; w < W; w++)
                        if (s + w < NC) V[w] = load_row(vr[16 * i + r], c0 + s + w, kind);
                    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
                        if (t >= qn) continue;
                        const __m512 pv = _mm512_set1_ps(scores[(size_t)t * sc_stride + P]);
                        _Pragma("GCC unroll 8") for (int w = 0; w < W; w++)
                            if (s + w < NC) A[t][w] = _mm512_fmadd_ps(pv, V[w], A[t][w]);
                    }
                }
                _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
                    if (t >= qn) continue;
                    _Pragma("GCC unroll 8") for (int w = 0; w < W; w++)
                        if (s + w < NC) _mm512_store_ps(&part[t][r][16 * (s + w)], A[t][w]);
                }
            }
    }
    if (n_blk) v_rows(QG, kind, c0, NC, kv, layer, seq, g, D, scores, sc_stride, lim, lo, blk1, n_end, part);
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        if (t >= qn) continue;
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
            const float(*pr)[16 * PASS] = part[t];
            __m512 h[8], q[4];
            for (int l = 0; l < 8; l++)
                h[l] = _mm512_add_ps(_mm512_load_ps(&pr[l + 8][16 * c]), _mm512_load_ps(&pr[l][16 * c]));
            for (int l = 0; l < 4; l++) q[l] = _mm512_add_ps(h[l + 4], h[l]);
            _mm512_storeu_ps(aq[t].out + 16 * (c0 + c),
                             _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3])));
        }
    }
}

/* v_pass for the groups past D = 128 (QG = 4): one function per element
 * kind and chunk count (the first pass's 8 chunks shared by every head
 * size), called rather than inlined into each head size's group: 24 copies
 * where inlining made 48 (the file compiles in ~37 s with them, ~13 s
 * with D <= 128 alone). */
typedef void v_pass_fn(const attn_query *aq, int c0, int qn, kv_store *kv, int32_t layer, int32_t seq, int32_t g,
                       int32_t D, const float *scores, size_t sc_stride, const int32_t *lim, const int32_t *lo,
                       int32_t n_beg, int32_t n_end, int32_t all_beg, int32_t all_end, float (*part)[16][16 * PASS]);
#define VP_FN(N, K)                                                                                           \
    static void vp_##N##_##K(const attn_query *aq, int c0, int qn, kv_store *kv, int32_t layer, int32_t seq,   \
                             int32_t g, int32_t D, const float *scores, size_t sc_stride, const int32_t *lim,  \
                             const int32_t *lo, int32_t n_beg, int32_t n_end, int32_t all_beg, int32_t all_end, \
                             float (*part)[16][16 * PASS]) {                                                  \
        v_pass(aq, 4, K, c0, N, qn, kv, layer, seq, g, D, scores, sc_stride, lim, lo, n_beg, n_end, all_beg,   \
               all_end, part);                                                                                \
    }
#define VP_FNS(N) VP_FN(N, KV_F32) VP_FN(N, KV_F16) VP_FN(N, KV_Q8)
VP_FNS(1) VP_FNS(2) VP_FNS(3) VP_FNS(4) VP_FNS(5) VP_FNS(6) VP_FNS(7) VP_FNS(8)
#undef VP_FNS
#undef VP_FN

/* [NC - 1][kind] (KV_F32, KV_F16, KV_Q8) */
#define VP_ROW(N) {vp_##N##_KV_F32, vp_##N##_KV_F16, vp_##N##_KV_Q8}
static v_pass_fn *const V_PASS_WIDE[PASS][3] = {VP_ROW(1), VP_ROW(2), VP_ROW(3), VP_ROW(4),
                                                VP_ROW(5), VP_ROW(6), VP_ROW(7), VP_ROW(8)};
#undef VP_ROW

/* The qn (<= QG) queries aq[] of KV head g of one sequence; query t keeps
 * its scores in scores + t * sc_stride. Up to D = 128 (DC <= 8) the
 * queries stay in registers; past it they are read from memory, one load
 * per FMA beside the K row's 16 registers (L1 loads, while the rows come
 * from L2 or farther). */
AI void attn_group(const attn_query *aq, const int QG, const int DC, const int kind, int qn, kv_store *kv,
                   int32_t layer, int32_t seq, int32_t g, float scale, float *scores, size_t sc_stride) {
    const bool f16 = kind == KV_F16, qreg = DC <= 8;
    const int32_t D = 16 * DC;
    __m512 Q[4][8] = {{_mm512_setzero_ps()}}; /* rows t >= qn stay unused */
    float qm[4][256] __attribute__((aligned(64))); /* the queries past D = 128 (unused below it) */
    /* query t sees [lo[t], lim[t]); lim[t] = 0 for t >= qn: nothing to do */
    int32_t lim[4] = {0}, lo[4] = {0}, n_end = 0, n_beg = INT32_MAX;
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        if (t >= qn) {
            if (!qreg) { /* never read (lim[t] = 0); defined for -Wmaybe-uninitialized */
                _Pragma("GCC unroll 16") for (int c = 0; c < DC; c++) _mm512_store_ps(&qm[t][16 * c], _mm512_setzero_ps());
            }
            continue;
        }
        lim[t] = aq[t].n;
        lo[t] = aq[t].lo;
        n_end = SP_MAX(n_end, lim[t]);
        n_beg = SP_MIN(n_beg, lo[t]);
        _Pragma("GCC unroll 16") for (int c = 0; c < DC; c++) {
            __m512 v = _mm512_loadu_ps(aq[t].q + 16 * c);
            /* an f16 store: q rounded to f16 as llama.cpp does */
            if (f16) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            if (qreg) Q[t][c] = v;
            else _mm512_store_ps(&qm[t][16 * c], v);
        }
    }
    /* scores 16 positions at a time: each position's 16-lane partial dot
     * product goes to acc[t][P % 16], and every 16 positions (or at the
     * end) reduce16x16 sums them all at once. Lanes of positions a query
     * does not attend to are masked off. */
    float acc[4][16][16] __attribute__((aligned(64)));
    __m512 mx[4];
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        mx[t] = _mm512_set1_ps(-INFINITY);
        if (t >= qn) continue;
        for (int r = 0; r < 16; r++) _mm512_store_ps(acc[t][r], _mm512_setzero_ps());
    }
    enum { VB = SP_ATTN_ROWS };
    const char *krow[2][VB]; /* K rows (this KV head's slice) of this block and the next */
    const int32_t n_kb = (n_end - n_beg + VB - 1) / VB;
    if (n_kb) ops_attn_rows(kv, layer, seq, n_beg, SP_MIN(n_beg + VB, n_end), g, D, 0, krow[0]);
    for (int32_t bk = 0; bk < n_kb; bk++) {
        const char **kr = krow[bk & 1];
        const int32_t b0 = n_beg + bk * VB, b1 = SP_MIN(b0 + VB, n_end);
        if (bk + 1 < n_kb) ops_attn_rows(kv, layer, seq, b1, SP_MIN(b1 + VB, n_end), g, D, 0, krow[(bk + 1) & 1]);
        for (int32_t P = b0; P < b1; P++) {
            __m512 K[16];
            _Pragma("GCC unroll 16") for (int c = 0; c < DC; c++) K[c] = load_row(kr[P - b0], c, kind);
            _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
                if (P >= lim[t] || P < lo[t]) continue;
                __m512 a = _mm512_mul_ps(qreg ? Q[t][0] : _mm512_load_ps(qm[t]), K[0]);
                _Pragma("GCC unroll 16") for (int c = 1; c < DC; c++)
                    a = _mm512_fmadd_ps(qreg ? Q[t][c] : _mm512_load_ps(&qm[t][16 * c]), K[c], a);
                _mm512_store_ps(acc[t][P & 15], a);
            }
            if ((P & 15) == 15 || P == n_end - 1) {
                const int32_t base = P & ~15;
                _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
                    if (base >= lim[t] || P < lo[t]) continue;
                    /* lanes [a, m): the group's positions the query sees */
                    const int32_t m = SP_MIN(lim[t], P + 1) - base, a = SP_MAX(lo[t] - base, 0);
                    const __mmask16 k = (__mmask16)((m >= 16 ? 0xFFFFu : (1u << m) - 1) & ~((1u << a) - 1));
                    const __m512 s = _mm512_mul_ps(reduce16x16((const float(*)[16])acc[t]), _mm512_set1_ps(scale));
                    _mm512_mask_storeu_ps(scores + (size_t)t * sc_stride + base, k, s);
                    /* max(s, mx): a NaN score is skipped, as `s > mx` skips it */
                    mx[t] = _mm512_mask_max_ps(mx[t], k, s, mx[t]);
                }
            }
        }
    }
    /* scores -> probabilities in place: exp(s - max) * (1 / sum), rounded
     * to f16 with an f16 store (as llama.cpp does), 16 at a time (the
     * roundings of one at a time) */
    int32_t all_end = n_end, all_beg = 0; /* positions every query of the group attends to */
    _Pragma("GCC unroll 4") for (int t = 0; t < QG; t++) {
        if (t >= qn) continue;
        float *st = scores + (size_t)t * sc_stride;
        const __m512 iv = _mm512_set1_ps(softmax_exp512(st + lo[t], lim[t] - lo[t], _mm512_reduce_max_ps(mx[t])));
        for (int32_t i = lo[t]; i < lim[t]; i += 16) {
            const __mmask16 k = lim[t] - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (lim[t] - i)) - 1);
            __m512 pr = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, st + i), iv);
            if (f16) pr = _mm512_cvtph_ps(_mm512_cvtps_ph(pr, _MM_FROUND_TO_NEAREST_INT));
            _mm512_mask_storeu_ps(st + i, k, pr);
        }
        all_end = SP_MIN(all_end, lim[t]);
        all_beg = SP_MAX(all_beg, lo[t]);
    }
    /* [query][residue][chunk]: 32 KiB for 4 queries (the pool's workers
     * have 1 MiB of stack, and the kernels keep to < 64 KiB of it). Past
     * D = 128, two passes over V (128 elements of each row, then the
     * rest), rather than 64 KiB here for D = 256 or 2 queries a group
     * (every K and V row read twice); each pass prefetches only its part
     * of each row, so V's bytes are read once either way. One thread on a
     * Zen 4, D = 256, 4,096 f16 positions, 4 heads on one KV head: the
     * same time as one pass with 64 KiB here, within noise (0.23 ms a
     * token, 1.14 ms for 5 tokens). */
    float part[4][16][16 * PASS] __attribute__((aligned(64)));
    if (DC <= PASS) {
        v_pass(aq, QG, kind, 0, DC, qn, kv, layer, seq, g, D, scores, sc_stride, lim, lo, n_beg, n_end, all_beg,
               all_end, part);
    } else {
        V_PASS_WIDE[PASS - 1][kind](aq, 0, qn, kv, layer, seq, g, D, scores, sc_stride, lim, lo, n_beg, n_end,
                                    all_beg, all_end, part);
        V_PASS_WIDE[DC - PASS - 1][kind](aq, PASS, qn, kv, layer, seq, g, D, scores, sc_stride, lim, lo, n_beg,
                                         n_end, all_beg, all_end, part);
    }
}

/* Queries in groups of QG: up to D = 128, min(4, 16 / DC), so that the
 * group's queries (or accumulators) plus one K/V row fit the 32 zmm
 * registers; past it 4, the queries in memory and V in passes (attn_group).
 * The nq x nh queries are taken token by token (the heads of a token attend
 * to the same positions), QG at a time. */
AI void run_dc(const int DC, const int kind, const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv, int32_t layer,
               int32_t seq, int32_t g, int32_t n_pos0, int32_t win, float scale, float *scores, size_t sc_stride,
               float *out, size_t out_stride) {
    const int QG = DC > 8 || 16 / DC > 4 ? 4 : 16 / DC;
    const int32_t D = 16 * DC, nall = nq * nh;
    for (int32_t i0 = 0; i0 < nall; i0 += QG) {
        attn_query aq[4];
        const int qn = (int)SP_MIN((int32_t)QG, nall - i0);
        attn_queries(q, q_stride, nh, D, n_pos0, win, out, out_stride, i0, qn, aq);
        attn_group(aq, QG, DC, kind, qn, kv, layer, seq, g, scale, scores, sc_stride);
    }
}

/* One function per head size and element kind, so that both are constants
 * in the loops; separate functions rather than the cases of one switch,
 * which GCC took about twice as long to compile. */
typedef void run_fn(const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv, int32_t layer,
                    int32_t seq, int32_t g, int32_t n_pos0, int32_t win, float scale, float *scores, size_t sc_stride,
                    float *out, size_t out_stride);
#define RUN_FN(N, K)                                                                                         \
    static void run_##N##_##K(const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv,         \
                              int32_t layer, int32_t seq, int32_t g, int32_t n_pos0, int32_t win, float scale, \
                              float *scores, size_t sc_stride, float *out, size_t out_stride) {              \
        run_dc(N, K, q, q_stride, nq, nh, kv, layer, seq, g, n_pos0, win, scale, scores, sc_stride, out,     \
               out_stride);                                                                                  \
    }
#define RUN_FNS(N) RUN_FN(N, KV_F32) RUN_FN(N, KV_F16) RUN_FN(N, KV_Q8)
RUN_FNS(1) RUN_FNS(2) RUN_FNS(3) RUN_FNS(4) RUN_FNS(5) RUN_FNS(6) RUN_FNS(7) RUN_FNS(8)
RUN_FNS(9) RUN_FNS(10) RUN_FNS(11) RUN_FNS(12) RUN_FNS(13) RUN_FNS(14) RUN_FNS(15) RUN_FNS(16)
#undef RUN_FNS
#undef RUN_FN

/* [DC - 1][kind] (KV_F32, KV_F16, KV_Q8) */
#define RUN_ROW(N) {run_##N##_KV_F32, run_##N##_KV_F16, run_##N##_KV_Q8}
static run_fn *const RUNS[16][3] = {RUN_ROW(1),  RUN_ROW(2),  RUN_ROW(3),  RUN_ROW(4),  RUN_ROW(5),  RUN_ROW(6),
                                    RUN_ROW(7),  RUN_ROW(8),  RUN_ROW(9),  RUN_ROW(10), RUN_ROW(11), RUN_ROW(12),
                                    RUN_ROW(13), RUN_ROW(14), RUN_ROW(15), RUN_ROW(16)};
#undef RUN_ROW

static void avx512_attn_run(const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv, int32_t layer,
                            int32_t seq, int32_t g, int32_t D, int32_t n_pos0, int32_t win, float scale,
                            float *scores, size_t sc_stride, uint16_t *q16, float *out,
                            size_t out_stride) {
    if (D % 16 == 0 && D >= 16 && D <= 256) {
        RUNS[D / 16 - 1][kv_kind(kv)](q, q_stride, nq, nh, kv, layer, seq, g, n_pos0, win, scale, scores, sc_stride,
                                      out, out_stride);
        return;
    }
    /* other head sizes: AVX2's runs (the reference's past 256) */
    ops_attn_run(fwd_ops_avx2(), q, q_stride, nq, nh, kv, layer, seq, g, D, n_pos0, win, scale, scores, sc_stride,
                 q16, out, out_stride);
}

static void avx512_attn_head(const float *q, kv_store *kv, int32_t layer, int32_t seq, int32_t g,
                             int32_t D, int32_t n_pos, int32_t win, float scale, float *scores, uint16_t *q16,
                             float *out) {
    avx512_attn_run(q, (size_t)D, 1, 1, kv, layer, seq, g, D, n_pos, win, scale, scores, (size_t)n_pos, q16, out,
                    (size_t)D);
}

static void avx512_swiglu(int64_t n, const float *g, const float *u, float *y) {
    fwd_ops_avx2()->swiglu(n, g, u, y);
}

static void avx512_geglu(int64_t n, const float *g, const float *u, float *y) {
    const __m512 one = _mm512_set1_ps(1.0f), m = _mm512_set1_ps(SP_GELU_M2S2PI), c = _mm512_set1_ps(SP_GELU_C);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 z = _mm512_mul_ps(_mm512_mul_ps(m, x), _mm512_add_ps(one, _mm512_mul_ps(c, _mm512_mul_ps(x, x))));
        __m512 a = _mm512_div_ps(x, _mm512_add_ps(one, exp512(z)));
        a = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(10.0f), _CMP_GE_OQ), a, x);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(k, u + i)));
    }
}

static const fwd_ops AVX512 = {avx512_attn_head, avx512_attn_run, avx512_swiglu, avx512_geglu};
const fwd_ops *fwd_ops_avx512(void) { return &AVX512; }
