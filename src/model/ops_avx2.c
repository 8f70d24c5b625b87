/* ops_avx2.c: AVX2 + FMA + F16C variants of the forward-pass operations,
 * bit-identical to ops.c (the order ops.h describes), 16-lane groups as
 * two 8-lane halves. Attention runs (avx2_attn_run) take up to 4 queries
 * of a KV head at once, sharing each K/V row's load and conversion: 5
 * tokens at 1,024 positions, TinyLlama Q4_K_M, 2 threads, whole pass
 * 53.3-54.1 ms against 62.5-67.5 one query at a time, one token 26.0-26.4
 * against 29.1-30.1 ms (the GQA group's 8 heads read each row twice
 * instead of 8 times). */
#include <immintrin.h>
#include <math.h>

#include "common.h"
#include "model/ops.h"

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ggml's AVX-512 vector exp on 8 lanes (ops_exp_ggml in every lane): the
 * same FMAs; its scalef by 2^n as a multiply by 2^n built in the exponent
 * bits, exact while -126 <= n <= 127 (a subnormal result rounds once, as
 * scalef's); the rare vectors with a lane outside (x below about -87 or
 * above 88) go lane by lane through ops_exp_ggml. */
static inline __m256 exp256(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 inr = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_GE_OQ),
                                     _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_LE_OQ));
    if (_mm256_movemask_ps(inr) != 0xFF) {
        float v[8];
        _mm256_storeu_ps(v, x);
        for (int l = 0; l < 8; l++) v[l] = ops_exp_ggml(v[l]);
        return _mm256_loadu_ps(v);
    }
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(j, _mm256_castsi256_ps(e));
}

/* ops_reduce16 of lanes lo (0-7) and hi (8-15) */
static inline float reduce16(__m256 lo, __m256 hi) { return hsum256(_mm256_add_ps(hi, lo)); }

/* ops_softmax_exp with two 8-lane halves per group of 16. */
static float softmax_exp256(float *s, int32_t n, float max) {
    const __m256 m = _mm256_set1_ps(max);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i += 16) {
        float t[16];
        for (int l = 0; l < 16; l++) t[l] = i + l < n ? s[i + l] : max;
        const __m256 lo = exp256(_mm256_sub_ps(_mm256_loadu_ps(t), m));
        const __m256 hi = exp256(_mm256_sub_ps(_mm256_loadu_ps(t + 8), m));
        _mm256_storeu_ps(t, lo);
        _mm256_storeu_ps(t + 8, hi);
        for (int l = 0; l < 16; l++) {
            if (i + l < n) s[i + l] = t[l];
            else t[l] = 0.0f; /* the zero padding of ops.h */
        }
        sum += (double)reduce16(_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8));
    }
    return (float)(1.0 / sum);
}

/* Elements i..i+7 (i a multiple of 8) of a head's K/V slice at base. */
static inline __m256 load8(const void *base, size_t i, int kind) {
    if (kind == KV_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
    if (kind == KV_F32) return _mm256_loadu_ps((const float *)base + i);
    const block_q8_0 *b = (const block_q8_0 *)base + i / 32;
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + i % 32))));
    return _mm256_mul_ps(q, _mm256_set1_ps(f16_to_f32(b->d)));
}

/* The order of ops.h with 16-lane groups as two 8-lane halves. */
static void avx2_attn_head(const float *q, kv_store *kv, int32_t layer, int32_t seq, int32_t g,
                           int32_t D, int32_t n_pos, int32_t win, float scale, float *scores, uint16_t *q16,
                           float *out) {
    const int kind = kv_kind(kv);
    const bool f16 = kind == KV_F16;
    const size_t rb = kv_row_bytes(kv), hoff = kv_head_off(kv, g, D);
    const int32_t lo = kv_window_lo(n_pos, win);
    if (D % 16 || D > 256) { /* other head sizes take the reference path */
        fwd_ops_ref()->attn_head(q, kv, layer, seq, g, D, n_pos, win, scale, scores, q16, out);
        return;
    }
    float qf[256];
    for (int d = 0; d < D; d += 8) {
        __m256 v = _mm256_loadu_ps(q + d);
        if (f16) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_ps(qf + d, v);
    }
    float max = -INFINITY;
    for (int32_t p = lo; p < n_pos;) {
        const void *kb, *vb;
        const int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            const char *kr = (const char *)kb + (size_t)j * rb + hoff;
            __m256 l8 = _mm256_setzero_ps(), h8 = _mm256_setzero_ps();
            for (int d = 0; d < D; d += 16) {
                l8 = _mm256_fmadd_ps(_mm256_loadu_ps(qf + d), load8(kr, d, kind), l8);
                h8 = _mm256_fmadd_ps(_mm256_loadu_ps(qf + d + 8), load8(kr, d + 8, kind), h8);
            }
            const float s = reduce16(l8, h8) * scale;
            scores[p + j] = s;
            if (s > max) max = s;
        }
        p += n;
    }
    const float inv = softmax_exp256(scores + lo, n_pos - lo, max);
    /* 16 partial sums, one per residue of the position mod 16, in one pass
     * over V (each still accumulates its positions in increasing order; see
     * ops_avx512.c) */
    float part[16][256] __attribute__((aligned(32)));
    for (int r = 0; r < 16; r++)
        for (int d = 0; d < D; d += 8) _mm256_store_ps(&part[r][d], _mm256_setzero_ps());
    for (int32_t p = lo; p < n_pos;) {
        const void *kb, *vb;
        const int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            float pj = scores[p + j] * inv;
            if (f16) pj = _cvtsh_ss(_cvtss_sh(pj, _MM_FROUND_TO_NEAREST_INT));
            const __m256 pv = _mm256_set1_ps(pj);
            const char *vr = (const char *)vb + (size_t)j * rb + hoff;
            float *acc = part[(p + j) & 15];
            for (int d = 0; d < D; d += 8)
                _mm256_store_ps(acc + d, _mm256_fmadd_ps(pv, load8(vr, d, kind), _mm256_load_ps(acc + d)));
        }
        p += n;
    }
    for (int d = 0; d < D; d += 8) {
        __m256 h[8], qv[4];
        for (int l = 0; l < 8; l++) h[l] = _mm256_add_ps(_mm256_loadu_ps(&part[l + 8][d]), _mm256_loadu_ps(&part[l][d]));
        for (int l = 0; l < 4; l++) qv[l] = _mm256_add_ps(h[l + 4], h[l]);
        _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_add_ps(qv[0], qv[2]), _mm256_add_ps(qv[1], qv[3])));
    }
}

/* Up to QG queries of one KV head sharing each K/V row's load and f16
 * conversion (verification, prefill, the heads of a GQA group): every
 * query's arithmetic is avx2_attn_head's, operation for operation, so each
 * gets what it gets alone (test_ops: run_case, paged_case). avx2_attn_head
 * stays a separate loop on purpose: it is the one-query oracle those cases
 * compare every group with bit for bit (attn_case holds the heads to the
 * reference only within a tolerance), and a group of one in its place let
 * an unrounded probability through every case.
 *
 * Dimension legend: D head_dim (a multiple of 16, <= 256), QG queries per
 * group, VB positions per block of gathered K/V rows.
 *
 * Scores: per position, each 16-wide chunk of K is converted once and
 * multiplied into the QG queries' two 8-lane chains (2 + 2 QG registers),
 * then each query's sum is reduced as reduce16. V: per block of VB
 * positions, residue r mod 16 and 8-wide chunk of d, the QG queries'
 * partial sums stay in registers over the block's VB / 16 positions of
 * that residue (each still accumulating its positions in increasing
 * order), one load and store of part per 4 FMAs instead of per FMA. */
enum { QG2 = 4, VB2 = SP_ATTN_ROWS };

/* qn: a constant in each copy (avx2_attn_run's switch), so that the
 * queries' chains and sums stay in registers (with a variable count they
 * go through the stack: 1024 positions, 5 tokens, 15% slower than one
 * query at a time) */
static inline __attribute__((always_inline)) void avx2_attn_group(const attn_query *aq, const int qn, const int kind,
                                                                  kv_store *kv, int32_t layer, int32_t seq, int32_t g,
                                                                  int32_t D, float scale, float *scores, size_t sc_stride) {
    const bool f16 = kind == KV_F16;
    float qf[QG2][256] __attribute__((aligned(32)));
    int32_t lim[QG2] = {0}, lo[QG2] = {0}, n_end = 0, n_beg = INT32_MAX;
    float mx[QG2];
    for (int t = 0; t < qn; t++) {
        lim[t] = aq[t].n;
        lo[t] = aq[t].lo;
        n_end = SP_MAX(n_end, lim[t]);
        n_beg = SP_MIN(n_beg, lo[t]);
        mx[t] = -INFINITY;
        for (int d = 0; d < D; d += 8) {
            __m256 v = _mm256_loadu_ps(aq[t].q + d);
            if (f16) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            _mm256_store_ps(qf[t] + d, v);
        }
    }
    const char *rows[2][VB2]; /* this block's rows and the next's */
    /* K: blocks of VB2 positions from the first one any query sees */
    int32_t n_blk = (n_end - n_beg + VB2 - 1) / VB2;
    if (n_blk) ops_attn_rows(kv, layer, seq, n_beg, SP_MIN(n_beg + VB2, n_end), g, D, 0, rows[0]);
    for (int32_t bk = 0; bk < n_blk; bk++) {
        const char **kr = (const char **)rows[bk & 1];
        const int32_t b0 = n_beg + bk * VB2, b1 = SP_MIN(b0 + VB2, n_end);
        if (bk + 1 < n_blk) ops_attn_rows(kv, layer, seq, b1, SP_MIN(b1 + VB2, n_end), g, D, 0, rows[(bk + 1) & 1]);
        for (int32_t P = b0; P < b1; P++) {
            __m256 l8[QG2], h8[QG2];
            _Pragma("GCC unroll 4") for (int t = 0; t < qn; t++) l8[t] = h8[t] = _mm256_setzero_ps();
            for (int d = 0; d < D; d += 16) {
                const __m256 kl = load8(kr[P - b0], d, kind), kh = load8(kr[P - b0], d + 8, kind);
                _Pragma("GCC unroll 4") for (int t = 0; t < qn; t++) {
                    l8[t] = _mm256_fmadd_ps(_mm256_load_ps(qf[t] + d), kl, l8[t]);
                    h8[t] = _mm256_fmadd_ps(_mm256_load_ps(qf[t] + d + 8), kh, h8[t]);
                }
            }
            _Pragma("GCC unroll 4") for (int t = 0; t < qn; t++) {
                if (P >= lim[t] || P < lo[t]) continue;
                const float sv = reduce16(l8[t], h8[t]) * scale;
                scores[(size_t)t * sc_stride + P] = sv;
                if (sv > mx[t]) mx[t] = sv;
            }
        }
    }
    /* scores -> probabilities in place, as attn_head forms each one */
    for (int t = 0; t < qn; t++) {
        float *st = scores + (size_t)t * sc_stride;
        const float inv = softmax_exp256(st + lo[t], lim[t] - lo[t], mx[t]);
        for (int32_t p = lo[t]; p < lim[t]; p++) {
            float pj = st[p] * inv;
            if (f16) pj = _cvtsh_ss(_cvtss_sh(pj, _MM_FROUND_TO_NEAREST_INT));
            st[p] = pj;
        }
    }
    /* [query][residue][D]: 32 KiB, qn * D <= 512 (the pool's workers have
     * 1 MiB of stack, and the kernels keep to < 64 KiB of it) */
    float part[QG2 * 16 * 128] __attribute__((aligned(32)));
#define PART(t, r) (part + ((size_t)(t) * 16 + (r)) * (size_t)D)
    SP_ASSERT(qn * D <= QG2 * 128);
    for (int t = 0; t < qn; t++)
        for (int r = 0; r < 16; r++)
            for (int d = 0; d < D; d += 8) _mm256_store_ps(PART(t, r) + d, _mm256_setzero_ps());
    /* V: blocks of VB2 positions aligned to 16 from below the first one
     * any query sees, so that part[r] holds the positions of residue r mod
     * 16 whatever the window (a query's bits do not depend on its group);
     * rows before n_beg are neither gathered nor read */
    const int32_t v_beg = n_beg & ~15;
    n_blk = (n_end - v_beg + VB2 - 1) / VB2;
    if (n_blk) ops_attn_rows(kv, layer, seq, n_beg, SP_MIN(v_beg + VB2, n_end), g, D, 1, rows[0] + (n_beg - v_beg));
    for (int32_t bk = 0; bk < n_blk; bk++) {
        const char **vr = (const char **)rows[bk & 1];
        const int32_t b0 = v_beg + bk * VB2, b1 = SP_MIN(b0 + VB2, n_end);
        if (bk + 1 < n_blk) ops_attn_rows(kv, layer, seq, b1, SP_MIN(b1 + VB2, n_end), g, D, 1, rows[(bk + 1) & 1]);
        for (int r = 0; r < 16 && b0 + r < b1; r++)
            for (int d = 0; d < D; d += 8) {
                __m256 A[QG2];
                _Pragma("GCC unroll 4") for (int t = 0; t < qn; t++) A[t] = _mm256_load_ps(PART(t, r) + d);
                for (int32_t P = b0 + r; P < b1; P += 16) {
                    if (P < n_beg) continue;
                    const __m256 v = load8(vr[P - b0], d, kind);
                    _Pragma("GCC unroll 4") for (int t = 0; t < qn; t++) {
                        if (P < lim[t] && P >= lo[t])
                            A[t] = _mm256_fmadd_ps(_mm256_set1_ps(scores[(size_t)t * sc_stride + P]), v, A[t]);
                    }
                }
                _Pragma("GCC unroll 4") for (int t = 0; t < qn; t++) _mm256_store_ps(PART(t, r) + d, A[t]);
            }
    }
    for (int t = 0; t < qn; t++)
        for (int d = 0; d < D; d += 8) {
            __m256 h[8], qv[4];
            for (int l = 0; l < 8; l++) h[l] = _mm256_add_ps(_mm256_load_ps(PART(t, l + 8) + d), _mm256_load_ps(PART(t, l) + d));
            for (int l = 0; l < 4; l++) qv[l] = _mm256_add_ps(h[l + 4], h[l]);
            _mm256_storeu_ps(aq[t].out + d, _mm256_add_ps(_mm256_add_ps(qv[0], qv[2]), _mm256_add_ps(qv[1], qv[3])));
        }
#undef PART
}

/* The nq x nh queries token by token (a token's heads attend to the same
 * positions), QG2 at a time (2 past D = 128: their partial sums' room). */
static void avx2_attn_run(const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv, int32_t layer,
                          int32_t seq, int32_t g, int32_t D, int32_t n_pos0, int32_t win, float scale,
                          float *scores, size_t sc_stride, uint16_t *q16, float *out,
                          size_t out_stride) {
    if (D % 16 || D > 256) { /* other head sizes: the reference, one query at a time */
        ops_attn_run(fwd_ops_ref(), q, q_stride, nq, nh, kv, layer, seq, g, D, n_pos0, win, scale, scores, sc_stride,
                    q16, out, out_stride);
        return;
    }
    const int32_t nall = nq * nh, qg = D > 128 ? 2 : QG2;
    const int kind = kv_kind(kv);
    for (int32_t i0 = 0; i0 < nall; i0 += qg) {
        attn_query aq[QG2];
        const int qn = (int)SP_MIN(qg, nall - i0);
        attn_queries(q, q_stride, nh, D, n_pos0, win, out, out_stride, i0, qn, aq);
        /* one copy per query count and element kind: constants in the loops */
#define GROUP(QN)                                                                                    \
    do {                                                                                             \
        if (kind == KV_F16) avx2_attn_group(aq, QN, KV_F16, kv, layer, seq, g, D, scale, scores, sc_stride); \
        else if (kind == KV_Q8) avx2_attn_group(aq, QN, KV_Q8, kv, layer, seq, g, D, scale, scores, sc_stride); \
        else avx2_attn_group(aq, QN, KV_F32, kv, layer, seq, g, D, scale, scores, sc_stride);      \
    } while (0)
        switch (qn) {
        case 1: GROUP(1); break;
        case 2: GROUP(2); break;
        case 3: GROUP(3); break;
        default: GROUP(QG2); break;
        }
#undef GROUP
    }
}

static void avx2_swiglu(int64_t n, const float *g, const float *u, float *y) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + ops_exp_ggml(0.0f - g[i])) * u[i];
}

static void avx2_geglu(int64_t n, const float *g, const float *u, float *y) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), m = _mm256_set1_ps(SP_GELU_M2S2PI), c = _mm256_set1_ps(SP_GELU_C);
    const __m256 ten = _mm256_set1_ps(10.0f);
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 z = _mm256_mul_ps(_mm256_mul_ps(m, x), _mm256_add_ps(one, _mm256_mul_ps(c, _mm256_mul_ps(x, x))));
        __m256 a = _mm256_div_ps(x, _mm256_add_ps(one, exp256(z)));
        a = _mm256_blendv_ps(a, x, _mm256_cmp_ps(x, ten, _CMP_GE_OQ));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(a, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = ops_gelu_lane(g[i]) * u[i];
}

static const fwd_ops AVX2 = {avx2_attn_head, avx2_attn_run, avx2_swiglu, avx2_geglu};
const fwd_ops *fwd_ops_avx2(void) { return &AVX2; }
