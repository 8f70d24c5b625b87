/* kernels_ref.c: plain-C reference of every kernel, built for baseline
 * x86-64. It defines the numerics the SIMD levels must reproduce:
 *
 *  - activation quantization (Q8_0, Q8_K) is bit-exact at every level and
 *    follows llama.cpp's x86 CPU backend (Feb 2025): Q8_0 uses
 *    id = 127/amax and round-half-even (the AVX path of quantize_row_q8_0,
 *    not the scalar roundf of quantize_row_q8_0_ref, which can differ on
 *    ties and by one ulp of id); Q8_K uses iscale = -127/max (max = the
 *    signed value of largest magnitude), nearest_int, MIN(127, q);
 *  - quantized dots sum exact integer products per block and combine the
 *    blocks in f32 as ggml does; f16/bf16/f32 dots accumulate in double as
 *    ggml's generic code does (the SIMD levels sum in f32 lanes).
 *
 * The Q4_0 quantizer is ggml's; the Q4_K/Q6_K quantizers are simple
 * round-to-nearest with a small per-block scale search (for tools/mkmodel;
 * they are not llama.cpp's quantizers and need not be).
 */
#include <math.h>

#include "kernels/kernels_internal.h"

/* ---- quantizers --------------------------------------------------------- */

void ref_quantize_f32(const float *x, void *y, int64_t k) { memcpy(y, x, (size_t)k * 4); }

void ref_quantize_f16(const float *x, void *vy, int64_t k) {
    f16_t *y = vy;
    for (int64_t i = 0; i < k; i++) y[i] = f32_to_f16(x[i]);
}

void ref_quantize_bf16(const float *x, void *vy, int64_t k) {
    bf16_t *y = vy;
    for (int64_t i = 0; i < k; i++) y[i] = f32_to_bf16(x[i]);
}

void ref_quantize_q8_0(const float *x, void *vy, int64_t k) {
    block_q8_0 *y = vy;
    const int64_t nb = k / SP_QK8_0;
    for (int64_t i = 0; i < nb; i++, x += SP_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < SP_QK8_0; j++) amax = SP_MAX(amax, fabsf(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = f32_to_f16(d);
        for (int j = 0; j < SP_QK8_0; j++) y[i].qs[j] = (int8_t)kq_nearest_int(x[j] * id);
    }
}

void ref_quantize_q8_K(const float *x, void *vy, int64_t k) {
    block_q8_K *y = vy;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++, x += SP_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < SP_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; } /* first element of largest magnitude */
        }
        if (amax == 0.0f) {
            y[i].d = 0.0f;
            memset(y[i].qs, 0, sizeof y[i].qs);
            memset(y[i].bsums, 0, sizeof y[i].bsums); /* ggml leaves them unset; d = 0 hides it */
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < SP_QK_K; j++) {
            const int v = kq_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)SP_MIN(127, v);
        }
        for (int g = 0; g < SP_QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

void ref_quantize_q4_0(const float *x, void *vy, int64_t k) {
    block_q4_0 *y = vy;
    const int64_t nb = k / SP_QK4_0;
    for (int64_t i = 0; i < nb; i++, x += SP_QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SP_QK4_0; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_f16(d);
        for (int j = 0; j < SP_QK4_0 / 2; j++) {
            const uint8_t lo = (uint8_t)SP_MIN(15, (int8_t)(x[j] * id + 8.5f));
            const uint8_t hi = (uint8_t)SP_MIN(15, (int8_t)(x[j + 16] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ggml's 5-bit quantizers: Q5_0 symmetric (d = the largest magnitude's
 * value / -16), Q5_1 over [min, max] in 31 steps. */
static void q5_store(uint8_t qs[16], uint8_t qh[4], const int xi[32]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((xi[j] & 0xF) | ((xi[j + 16] & 0xF) << 4));
        h |= (uint32_t)((xi[j] >> 4) & 1) << j;
        h |= (uint32_t)((xi[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int b = 0; b < 4; b++) qh[b] = (uint8_t)(h >> (8 * b));
}

void ref_quantize_q5_0(const float *x, void *vy, int64_t k) {
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int xi[32];
        for (int j = 0; j < 32; j++) xi[j] = SP_MIN(31, (int8_t)(x[j] * id + 16.5f));
        y[i].d = f32_to_f16(d);
        q5_store(y[i].qs, y[i].qh, xi);
    }
}

void ref_quantize_q5_1(const float *x, void *vy, int64_t k) {
    block_q5_1 *y = vy;
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float min = x[0], max = x[0];
        for (int j = 1; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int xi[32];
        for (int j = 0; j < 32; j++) xi[j] = SP_MIN(31, (int)(uint8_t)((x[j] - min) * id + 0.5f));
        y[i].d = f32_to_f16(d);
        y[i].m = f32_to_f16(min);
        q5_store(y[i].qs, y[i].qh, xi);
    }
}

/* Block b's 32 five-bit values q (0..31) in element order. */
static void q5_unpack(const uint8_t qs[16], const uint8_t qh[4], uint8_t q[32]) {
    const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (uint8_t)((qs[j] & 0xF) | ((h >> j) & 1) << 4);
        q[j + 16] = (uint8_t)((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4);
    }
}

/* Best scale for x ~ scale * q - min over a sub-block of n values with
 * q in [0, nmax], min >= 0 fixed at -min(0, min(x)); tries a few scales
 * around range/nmax and keeps the one with the least squared error. */
static float q4k_sub_scale(const float *x, int n, int nmax, float *min_out) {
    float mn = 0.0f, mx = 0.0f;
    for (int i = 0; i < n; i++) { mn = SP_MIN(mn, x[i]); mx = SP_MAX(mx, x[i]); }
    *min_out = -mn;
    if (mx - mn <= 0.0f) return 0.0f;
    float best_s = (mx - mn) / nmax, best_err = INFINITY;
    for (int c = -4; c <= 4; c++) {
        const float s = (mx - mn) / (nmax + 0.25f * c);
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            int q = kq_nearest_int((x[i] - mn) / s);
            q = SP_MAX(0, SP_MIN(nmax, q));
            const float e = s * q + mn - x[i];
            err += e * e;
        }
        if (err < best_err) { best_err = err; best_s = s; }
    }
    return best_s;
}

void ref_quantize_q4_K(const float *x, void *vy, int64_t k) {
    block_q4_K *y = vy;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++, x += SP_QK_K) {
        float scales[8], mins[8], max_sc = 0.0f, max_m = 0.0f;
        for (int j = 0; j < 8; j++) {
            scales[j] = q4k_sub_scale(x + 32 * j, 32, 15, &mins[j]);
            max_sc = SP_MAX(max_sc, scales[j]);
            max_m = SP_MAX(max_m, mins[j]);
        }
        const float d = max_sc / 63.f, dmin = max_m / 63.f;
        y[i].d = f32_to_f16(d);
        y[i].dmin = f32_to_f16(dmin);
        uint8_t sc6[8], m6[8];
        for (int j = 0; j < 8; j++) {
            sc6[j] = (uint8_t)(d > 0 ? SP_MIN(63, kq_nearest_int(scales[j] / d)) : 0);
            m6[j] = (uint8_t)(dmin > 0 ? SP_MIN(63, kq_nearest_int(mins[j] / dmin)) : 0);
        }
        for (int j = 0; j < 4; j++) {
            y[i].scales[j] = (uint8_t)(sc6[j] | ((sc6[j + 4] >> 4) << 6));
            y[i].scales[j + 4] = (uint8_t)(m6[j] | ((m6[j + 4] >> 4) << 6));
            y[i].scales[j + 8] = (uint8_t)((sc6[j + 4] & 0xF) | ((m6[j + 4] & 0xF) << 4));
        }
        /* quantize with the scales as stored (f16 d, 6-bit sc) */
        const float df = f16_to_f32(y[i].d), dminf = f16_to_f32(y[i].dmin);
        uint8_t q[SP_QK_K];
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            q4_K_scale_min(j, y[i].scales, &sc, &m);
            const float s = df * sc, mn = dminf * m;
            for (int l = 0; l < 32; l++) {
                int v = s > 0 ? kq_nearest_int((x[32 * j + l] + mn) / s) : 0;
                q[32 * j + l] = (uint8_t)SP_MAX(0, SP_MIN(15, v));
            }
        }
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * j + l] = (uint8_t)(q[64 * j + l] | (q[64 * j + 32 + l] << 4));
    }
}

void ref_quantize_q6_K(const float *x, void *vy, int64_t k) {
    block_q6_K *y = vy;
    const int64_t nb = k / SP_QK_K;
    for (int64_t i = 0; i < nb; i++, x += SP_QK_K) {
        float scales[16], max_abs_sc = 0.0f;
        for (int g = 0; g < 16; g++) {
            const float *xg = x + 16 * g;
            float max = 0.0f, amax = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(xg[l]) > amax) { amax = fabsf(xg[l]); max = xg[l]; }
            float best_s = 0.0f, best_err = INFINITY;
            if (amax > 0.0f) {
                for (int c = 0; c <= 8; c++) {
                    /* the extreme value maps to -32 (or a little inside) */
                    const float s = max / -(32.f - 0.5f * c);
                    float err = 0.0f;
                    for (int l = 0; l < 16; l++) {
                        int q = SP_MAX(-32, SP_MIN(31, kq_nearest_int(xg[l] / s)));
                        const float e = s * q - xg[l];
                        err += e * e;
                    }
                    if (err < best_err) { best_err = err; best_s = s; }
                }
            }
            scales[g] = best_s;
            max_abs_sc = SP_MAX(max_abs_sc, fabsf(best_s));
        }
        const float d = max_abs_sc / 127.f;
        y[i].d = f32_to_f16(d);
        const float df = f16_to_f32(y[i].d);
        for (int g = 0; g < 16; g++)
            y[i].scales[g] = (int8_t)(df > 0 ? SP_MAX(-127, SP_MIN(127, kq_nearest_int(scales[g] / df))) : 0);
        memset(y[i].ql, 0, sizeof y[i].ql);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int e = 0; e < SP_QK_K; e++) {
            const float s = df * y[i].scales[e / 16];
            int q = s != 0.0f ? SP_MAX(-32, SP_MIN(31, kq_nearest_int(x[e] / s))) : 0;
            q += 32;
            const int n = e / 128, r = e % 128, qd = r / 32, l = r % 32;
            y[i].ql[n * 64 + (qd & 1) * 32 + l] |= (uint8_t)((q & 0xF) << (4 * (qd >> 1)));
            y[i].qh[n * 32 + l] |= (uint8_t)((q >> 4) << (2 * qd));
        }
    }
}

/* ---- dequantization ----------------------------------------------------- */

void ref_dequantize(tensor_type t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case SP_TYPE_F32: memcpy(dst, src, (size_t)n * 4); return;
    case SP_TYPE_F16: {
        const f16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(s[i]);
        return;
    }
    case SP_TYPE_BF16: {
        const bf16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
        return;
    }
    case SP_TYPE_Q8_0: {
        const block_q8_0 *b = src;
        for (int64_t i = 0; i < n / SP_QK8_0; i++) {
            const float d = f16_to_f32(b[i].d);
            for (int j = 0; j < SP_QK8_0; j++) *dst++ = b[i].qs[j] * d;
        }
        return;
    }
    case SP_TYPE_Q4_0: {
        const block_q4_0 *b = src;
        for (int64_t i = 0; i < n / SP_QK4_0; i++, dst += SP_QK4_0) {
            const float d = f16_to_f32(b[i].d);
            for (int j = 0; j < 16; j++) {
                dst[j] = ((b[i].qs[j] & 0xF) - 8) * d;
                dst[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
            }
        }
        return;
    }
    case SP_TYPE_Q5_0: {
        const block_q5_0 *b = src;
        for (int64_t i = 0; i < n / 32; i++, dst += 32) {
            uint8_t q[32];
            q5_unpack(b[i].qs, b[i].qh, q);
            const float d = f16_to_f32(b[i].d);
            for (int j = 0; j < 32; j++) dst[j] = (q[j] - 16) * d;
        }
        return;
    }
    case SP_TYPE_Q5_1: {
        const block_q5_1 *b = src;
        for (int64_t i = 0; i < n / 32; i++, dst += 32) {
            uint8_t q[32];
            q5_unpack(b[i].qs, b[i].qh, q);
            const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
            for (int j = 0; j < 32; j++) dst[j] = q[j] * d + m;
        }
        return;
    }
    case SP_TYPE_Q4_K: {
        const block_q4_K *b = src;
        for (int64_t i = 0; i < n / SP_QK_K; i++) {
            const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
            const uint8_t *q = b[i].qs;
            for (int j = 0; j < 8; j += 2, q += 32) {
                uint8_t sc, m;
                q4_K_scale_min(j, b[i].scales, &sc, &m);
                const float d1 = d * sc, m1 = dmin * m;
                q4_K_scale_min(j + 1, b[i].scales, &sc, &m);
                const float d2 = d * sc, m2 = dmin * m;
                for (int l = 0; l < 32; l++) *dst++ = d1 * (q[l] & 0xF) - m1;
                for (int l = 0; l < 32; l++) *dst++ = d2 * (q[l] >> 4) - m2;
            }
        }
        return;
    }
    case SP_TYPE_Q6_K: {
        const block_q6_K *b = src;
        for (int64_t i = 0; i < n / SP_QK_K; i++) {
            const float d = f16_to_f32(b[i].d);
            uint8_t q[256];
            q6_K_unpack(&b[i], q);
            for (int e = 0; e < SP_QK_K; e++) *dst++ = d * b[i].scales[e / 16] * (q[e] - 32);
        }
        return;
    }
    case SP_TYPE_Q8_K: {
        const block_q8_K *b = src;
        for (int64_t i = 0; i < n / SP_QK_K; i++)
            for (int j = 0; j < SP_QK_K; j++) *dst++ = b[i].d * b[i].qs[j];
        return;
    }
    default: SP_ASSERT(!"dequantize: unsupported type");
    }
}

/* ---- dot products ------------------------------------------------------- */

/* F32: ggml's order (see f32_finish), which every level follows bit for bit */
static void vec_dot_f32_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const float *w = vw, *x = vx;
    const int64_t np = k - k % 64;
    float p[64] = {0}, v[16];
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 64; j++) p[j] = __builtin_fmaf(w[i + j], x[i + j], p[j]);
    for (int l = 0; l < 16; l++) v[l] = (p[l] + p[32 + l]) + (p[16 + l] + p[48 + l]);
    *s = f32_finish(v, w + np, x + np, k - np);
}

/* The quantized dots below do, lane by lane, the arithmetic of the AVX2
 * kernels of llama.cpp's CPU backend (ggml vec_dot_*_q8_*), which are what
 * its reference records were computed with: 8 f32 lanes, lane l holding the
 * exact integer sum of its products of each block (elements 4l..4l+3 of
 * each 32), scaled and added with one FMA per block, the lanes summed as
 * hsum8. Integer sums are exact in any order; the f32 steps are not, and on
 * chaotic models one rounding flips an activation's quantization. */
static float hsum8(const float F[8]) {
    const float t0 = F[0] + F[4], t1 = F[1] + F[5], t2 = F[2] + F[6], t3 = F[3] + F[7];
    return (t0 + t2) + (t1 + t3);
}

/* F16/BF16: llama.cpp's order for a prompt (tinyBLAS, AVX-512): 16 lanes,
 * lane i % 16 an FMA chain over i, summed as ops_reduce16's order; the AVX2
 * tiles keep lanes 0-7 and 8-15 in two vectors. A tail past the last 16
 * (no such row in llama.cpp's path) goes to lanes 0-7 by 8 and then one
 * product at a time. */
static float half_dot(int64_t k, const void *vw, const void *vx, float (*cvt)(uint16_t)) {
    const uint16_t *w = vw, *x = vx;
    float F[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= k; i += 16)
        for (int l = 0; l < 16; l++) F[l] = fmaf(cvt(w[i + l]), cvt(x[i + l]), F[l]);
    for (; i + 8 <= k; i += 8)
        for (int l = 0; l < 8; l++) F[l] = fmaf(cvt(w[i + l]), cvt(x[i + l]), F[l]);
    float h[8];
    for (int l = 0; l < 8; l++) h[l] = F[l] + F[l + 8];
    float s = hsum8(h);
    for (; i < k; i++) s = fmaf(cvt(w[i]), cvt(x[i]), s);
    return s;
}

static float f16_cvt(uint16_t h) { return f16_to_f32(h); }
static float bf16_cvt(uint16_t h) { return bf16_to_f32(h); }

static void vec_dot_f16_ref(int64_t k, float *s, const void *vw, const void *vx) { *s = half_dot(k, vw, vx, f16_cvt); }
static void vec_dot_bf16_ref(int64_t k, float *s, const void *vw, const void *vx) { *s = half_dot(k, vw, vx, bf16_cvt); }

/* F[l] += (4-product sums of q . x in lane l) * d, for one block of 32 */
static void block8(const int8_t *q, const int8_t *x, float d, float F[8]) {
    for (int l = 0; l < 8; l++) {
        int p = 0;
        for (int i = 4 * l; i < 4 * l + 4; i++) p += q[i] * x[i];
        F[l] = fmaf((float)p, d, F[l]);
    }
}

static void q4_0_unpack(const block_q4_0 *b, int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 0xF) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

static void vec_dot_q8_0_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q8_0 *w = vw, *x = vx;
    float F[8] = {0};
    for (int64_t i = 0; i < k / SP_QK8_0; i++)
        block8(w[i].qs, x[i].qs, f16_to_f32(w[i].d) * f16_to_f32(x[i].d), F);
    *s = hsum8(F);
}

static void vec_dot_q4_0_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q4_0 *w = vw;
    const block_q8_0 *x = vx;
    float F[8] = {0};
    for (int64_t i = 0; i < k / SP_QK4_0; i++) {
        int8_t q[32];
        q4_0_unpack(&w[i], q);
        block8(q, x[i].qs, f16_to_f32(w[i].d) * f16_to_f32(x[i].d), F);
    }
    *s = hsum8(F);
}

/* The 5-bit types in the avx2 level's order (q5_avx2.c): Q5_0 as Q4_0
 * (signed values, block8); Q5_1 lane by lane, the scale's product and
 * then the minimum's: F[l] = fma(q . x, dw * dx, F[l]), then
 * fma(sum x, m * dx, F[l]). */
static void vec_dot_q5_0_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q5_0 *w = vw;
    const block_q8_0 *x = vx;
    float F[8] = {0};
    for (int64_t i = 0; i < k / 32; i++) {
        uint8_t u[32];
        int8_t q[32];
        q5_unpack(w[i].qs, w[i].qh, u);
        for (int j = 0; j < 32; j++) q[j] = (int8_t)(u[j] - 16);
        block8(q, x[i].qs, f16_to_f32(w[i].d) * f16_to_f32(x[i].d), F);
    }
    *s = hsum8(F);
}

static void vec_dot_q5_1_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q5_1 *w = vw;
    const block_q8_0 *x = vx;
    float F[8] = {0};
    for (int64_t i = 0; i < k / 32; i++) {
        uint8_t q[32];
        q5_unpack(w[i].qs, w[i].qh, q);
        const float dx = f16_to_f32(x[i].d), d = f16_to_f32(w[i].d) * dx, md = f16_to_f32(w[i].m) * dx;
        for (int l = 0; l < 8; l++) {
            int p = 0, sx = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) p += q[j] * x[i].qs[j], sx += x[i].qs[j];
            F[l] = fmaf((float)p, d, F[l]);
            F[l] = fmaf((float)sx, md, F[l]);
        }
    }
    *s = hsum8(F);
}

/* One block of the row-sum order: acc = fma(q . x's quants, dw * dx, acc) */
static float block_fma(const int8_t *q, f16_t dw, const block_q8_0 *x, float acc) {
    int p = 0;
    for (int j = 0; j < 32; j++) p += q[j] * x->qs[j];
    return fmaf((float)p, f16_to_f32(dw) * f16_to_f32(x->d), acc);
}

/* Q4_0 in a matrix of 8-row multiples: llama.cpp repacks those and sums
 * block_fma block after block. */
static void vec_dot_q4_0r8_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q4_0 *w = vw;
    const block_q8_0 *x = vx;
    float acc = 0.0f;
    for (int64_t i = 0; i < k / SP_QK4_0; i++) {
        int8_t q[32];
        q4_0_unpack(&w[i], q);
        acc = block_fma(q, w[i].d, &x[i], acc);
    }
    *s = acc;
}

/* Q8_0 in the avx2 level's order for matrices of 8-row multiples
 * (q8_avx2.c, packed at load): the same as llama.cpp's repacked Q4_0. */
static void vec_dot_q8_0_rows8_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q8_0 *w = vw, *x = vx;
    float acc = 0.0f;
    for (int64_t i = 0; i < k / SP_QK8_0; i++) acc = block_fma(w[i].qs, w[i].d, &x[i], acc);
    *s = acc;
}

/* Q4_K: the scale term in 8 lanes as above (lane l: elements 4l..4l+3 of
 * each 32-value sub-block, times its scale); the min term in 4 lanes of its
 * own, lane l = m_{2l} S_{2l} + m_{2l+1} S_{2l+1} (S_j the sum of
 * sub-block j's activations), scaled by -(d_x dmin); result hsum8 of the
 * first plus (M0 + M2) + (M1 + M3). */
static void vec_dot_q4_K_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q4_K *w = vw;
    const block_q8_K *x = vx;
    float F[8] = {0}, M[4] = {0};
    for (int64_t i = 0; i < k / SP_QK_K; i++) {
        uint8_t sm[16];
        q4_K_unpack_scales(w[i].scales, sm);
        const int8_t *q8 = x[i].qs;
        int acc[8] = {0};
        for (int j = 0; j < 8; j++) { /* sub-block j: nibbles of bytes 32 (j / 2) .. */
            const uint8_t *q4 = w[i].qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            for (int l = 0; l < 8; l++) {
                int p = 0;
                for (int e = 4 * l; e < 4 * l + 4; e++) p += ((q4[e] >> shift) & 0xF) * q8[32 * j + e];
                acc[l] += sm[j] * p;
            }
        }
        const float d = f16_to_f32(w[i].d), dmin = f16_to_f32(w[i].dmin);
        for (int l = 0; l < 4; l++) {
            const int s0 = x[i].bsums[4 * l] + x[i].bsums[4 * l + 1], s1 = x[i].bsums[4 * l + 2] + x[i].bsums[4 * l + 3];
            M[l] = fmaf((float)(sm[8 + 2 * l] * s0 + sm[8 + 2 * l + 1] * s1), -(x[i].d * dmin), M[l]);
        }
        for (int l = 0; l < 8; l++) F[l] = fmaf((float)acc[l], x[i].d * d, F[l]);
    }
    *s = hsum8(F) + ((M[0] + M[2]) + (M[1] + M[3]));
}

/* Q4_K in the avx2 level's order for matrices of 8-row multiples
 * (qk_avx2.c, "the row-sum order"): per super-block the exact integer
 * sums of the scaled quants and of the scaled mins, then two FMAs. */
static void vec_dot_q4_K_rows8_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q4_K *w = vw;
    const block_q8_K *x = vx;
    float acc = 0;
    for (int64_t i = 0; i < k / SP_QK_K; i++) {
        uint8_t sm[16];
        q4_K_unpack_scales(w[i].scales, sm);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q4 = w[i].qs + 32 * (j / 2);
            int32_t dot = 0;
            for (int e = 0; e < 32; e++) dot += ((q4[e] >> (4 * (j & 1))) & 0xF) * x[i].qs[32 * j + e];
            isum += sm[j] * dot;
            msum += sm[8 + j] * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
        acc = fmaf((float)isum, f16_to_f32(w[i].d) * x[i].d, acc);
        acc = fmaf(-(float)msum, f16_to_f32(w[i].dmin) * x[i].d, acc);
    }
    *s = acc;
}

/* Q6_K: lane l holds, for each 32-value chunk, sc * sum of (q - 32) x over
 * its elements 4l..4l+3 (sc: the chunk's first 16 values' scale for lanes
 * 0-3, the next one's for 4-7). */
static void vec_dot_q6_K_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q6_K *w = vw;
    const block_q8_K *x = vx;
    float F[8] = {0};
    for (int64_t i = 0; i < k / SP_QK_K; i++) {
        int acc[8] = {0};
        uint8_t q[256];
        q6_K_unpack(&w[i], q);
        for (int c = 0; c < 8; c++) { /* chunk c: elements 32c .. 32c + 31 */
            for (int l = 0; l < 8; l++) {
                int p = 0;
                for (int b = 32 * c + 4 * l; b < 32 * c + 4 * l + 4; b++) p += (q[b] - 32) * x[i].qs[b];
                acc[l] += w[i].scales[2 * c + (l >= 4)] * p;
            }
        }
        for (int l = 0; l < 8; l++) F[l] = fmaf((float)acc[l], x[i].d * f16_to_f32(w[i].d), F[l]);
    }
    *s = hsum8(F);
}

/* Q6_K in the avx2 level's order for matrices of 8-row multiples (the
 * row-sum order, as Q4_K above): per super-block the exact integer
 * sum_j sc_j * sum over sub-block j of (q - 32) x, then one FMA. */
static void vec_dot_q6_K_rows8_ref(int64_t k, float *s, const void *vw, const void *vx) {
    const block_q6_K *w = vw;
    const block_q8_K *x = vx;
    float acc = 0;
    for (int64_t i = 0; i < k / SP_QK_K; i++) {
        int32_t isum = 0;
        uint8_t q[256];
        q6_K_unpack(&w[i], q);
        for (int j = 0; j < 16; j++) {
            int32_t dot = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++) dot += (q[e] - 32) * x[i].qs[e];
            isum += w[i].scales[j] * dot;
        }
        acc = fmaf((float)isum, f16_to_f32(w[i].d) * x[i].d, acc);
    }
    *s = acc;
}

/* ---- matmul tiles: one dot per (row, token) over the whole row ---------- */

#define REF_MM(NAME, WT, VDT, QUANT)                                                             \
    static size_t NAME##_xrow(int64_t k) { return row_size(VDT, k); }                         \
    static void NAME##_tile(const uint8_t *w, size_t w_stride, int64_t nr, const uint8_t *xs,    \
                            size_t xs_stride, int nt, int64_t k, int64_t k0, int64_t k1, float *y, \
                            int64_t ldy, int accumulate) {                                       \
        (void)k0; (void)k1; (void)accumulate; /* kgroup 0: always the whole row */               \
        for (int t = 0; t < nt; t++)                                                             \
            for (int64_t r = 0; r < nr; r++)                                                     \
                NAME##_dot(k, &y[t * ldy + r], w + r * w_stride, xs + t * xs_stride);            \
    }                                                                                            \
    static void NAME##_conv(const float *x, int64_t k, void *xs) { QUANT(x, xs, k); }             \
    static const mm_kernel NAME##_mm __attribute__((unused)) = {0, 0, NAME##_xrow, 8, NAME##_conv, NAME##_tile, 0, NULL, NULL};

#define vec_dot_f32_dot vec_dot_f32_ref
#define vec_dot_f16_dot vec_dot_f16_ref
#define vec_dot_bf16_dot vec_dot_bf16_ref
#define vec_dot_q8_0_dot vec_dot_q8_0_ref
#define vec_dot_q4_0_dot vec_dot_q4_0_ref
#define vec_dot_q4_0r8_dot vec_dot_q4_0r8_ref
#define vec_dot_q5_0_dot vec_dot_q5_0_ref
#define vec_dot_q5_1_dot vec_dot_q5_1_ref
#define vec_dot_q4_K_dot vec_dot_q4_K_ref
#define vec_dot_q4_K_rows8_dot vec_dot_q4_K_rows8_ref
#define vec_dot_q6_K_dot vec_dot_q6_K_ref
#define vec_dot_q6_K_rows8_dot vec_dot_q6_K_rows8_ref
#define vec_dot_q8_0_rows8_dot vec_dot_q8_0_rows8_ref
REF_MM(vec_dot_f32, SP_TYPE_F32, SP_TYPE_F32, ref_quantize_f32)
REF_MM(vec_dot_f16, SP_TYPE_F16, SP_TYPE_F16, ref_quantize_f16)
REF_MM(vec_dot_bf16, SP_TYPE_BF16, SP_TYPE_BF16, ref_quantize_bf16)
REF_MM(vec_dot_q8_0, SP_TYPE_Q8_0, SP_TYPE_Q8_0, ref_quantize_q8_0)
REF_MM(vec_dot_q4_0, SP_TYPE_Q4_0, SP_TYPE_Q8_0, ref_quantize_q8_0)
REF_MM(vec_dot_q4_0r8, SP_TYPE_Q4_0, SP_TYPE_Q8_0, ref_quantize_q8_0)
REF_MM(vec_dot_q5_0, SP_TYPE_Q5_0, SP_TYPE_Q8_0, ref_quantize_q8_0)
REF_MM(vec_dot_q5_1, SP_TYPE_Q5_1, SP_TYPE_Q8_0, ref_quantize_q8_0)
REF_MM(vec_dot_q4_K, SP_TYPE_Q4_K, SP_TYPE_Q8_K, ref_quantize_q8_K)
REF_MM(vec_dot_q6_K, SP_TYPE_Q6_K, SP_TYPE_Q8_K, ref_quantize_q8_K)
REF_MM(vec_dot_q4_K_rows8, SP_TYPE_Q4_K, SP_TYPE_Q8_K, ref_quantize_q8_K)
REF_MM(vec_dot_q6_K_rows8, SP_TYPE_Q6_K, SP_TYPE_Q8_K, ref_quantize_q8_K)
REF_MM(vec_dot_q8_0_rows8, SP_TYPE_Q8_0, SP_TYPE_Q8_0, ref_quantize_q8_0)
/* no ref-level table names them: the avx2 level's twin_rows8 does */
const mm_kernel ref_mm_q4_K_rows8 = {0, 0, vec_dot_q4_K_rows8_xrow, 8, vec_dot_q4_K_rows8_conv,
                                          vec_dot_q4_K_rows8_tile, 0, NULL, NULL};
const mm_kernel ref_mm_q6_K_rows8 = {0, 0, vec_dot_q6_K_rows8_xrow, 8, vec_dot_q6_K_rows8_conv,
                                          vec_dot_q6_K_rows8_tile, 0, NULL, NULL};
const mm_kernel ref_mm_q8_0_rows8 = {0, 0, vec_dot_q8_0_rows8_xrow, 8, vec_dot_q8_0_rows8_conv,
                                          vec_dot_q8_0_rows8_tile, 0, NULL, NULL};

const kernel_ops kernel_ops_ref = {
    .name = "ref",
    .vec_dot = {
        [SP_TYPE_F32] = vec_dot_f32_ref,
        [SP_TYPE_F16] = vec_dot_f16_ref,
        [SP_TYPE_BF16] = vec_dot_bf16_ref,
        [SP_TYPE_Q8_0] = vec_dot_q8_0_ref,
        [SP_TYPE_Q4_0] = vec_dot_q4_0_ref,
        [SP_TYPE_Q5_0] = vec_dot_q5_0_ref,
        [SP_TYPE_Q5_1] = vec_dot_q5_1_ref,
        [SP_TYPE_Q4_K] = vec_dot_q4_K_ref,
        [SP_TYPE_Q6_K] = vec_dot_q6_K_ref,
    },
    .quantize = {
        [SP_TYPE_F32] = ref_quantize_f32,
        [SP_TYPE_F16] = ref_quantize_f16,
        [SP_TYPE_BF16] = ref_quantize_bf16,
        [SP_TYPE_Q8_0] = ref_quantize_q8_0,
        [SP_TYPE_Q8_K] = ref_quantize_q8_K,
    },
    .mm = {
        [SP_TYPE_F32] = &vec_dot_f32_mm,
        [SP_TYPE_F16] = &vec_dot_f16_mm,
        [SP_TYPE_BF16] = &vec_dot_bf16_mm,
        [SP_TYPE_Q8_0] = &vec_dot_q8_0_mm,
        [SP_TYPE_Q4_0] = &vec_dot_q4_0_mm,
        [SP_TYPE_Q5_0] = &vec_dot_q5_0_mm,
        [SP_TYPE_Q5_1] = &vec_dot_q5_1_mm,
        [SP_TYPE_Q4_K] = &vec_dot_q4_K_mm,
        [SP_TYPE_Q6_K] = &vec_dot_q6_K_mm,
    },
    .mm_rows8 = {
        [SP_TYPE_Q4_0] = &vec_dot_q4_0r8_mm,
    },
};

/* ---- matmul_ref ------------------------------------------------------ */

static void matmul_ref_with(const mm_kernel *mm, const void *w, tensor_type wt, int64_t n_rows, int64_t k,
                            const float *x, int64_t n_tok, float *y, int64_t ldy) {
    const type_traits *tt = type_info(wt);
    SP_ASSERT(tt && tt->supported && k % tt->blck == 0);
    const tensor_type vdt = tt->vec_dot_type;
    const size_t w_row = row_size(wt, k), x_row = row_size(vdt, k);
    void *xq = malloc(x_row ? x_row : 1); /* test-only path: allocation is fine here */
    SP_ASSERT(xq);
    for (int64_t t = 0; t < n_tok; t++) {
        mm->convert(x + t * k, k, xq);
        mm->tile((const uint8_t *)w, w_row, n_rows, xq, x_row, 1, k, 0, k, y + t * ldy, ldy, 0);
    }
    free(xq);
}

void matmul_ref(const void *w, tensor_type wt, int64_t n_rows, int64_t k, const float *x,
                   int64_t n_tok, float *y, int64_t ldy) {
    matmul_ref_with(mm_for(&kernel_ops_ref, wt, n_rows), w, wt, n_rows, k, x, n_tok, y, ldy);
}

int matmul_ref_level(const char *level, const void *w, tensor_type wt, int64_t n_rows, int64_t k,
                        const float *x, int64_t n_tok, float *y, int64_t ldy) {
    const kernel_ops *levels[] = {&kernel_ops_ref, &kernel_ops_avx2, &kernel_ops_avx512}, *o = NULL;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        if (!strcmp(level, levels[i]->name)) o = levels[i];
    if (!o || o->no_twin) return -1;
    const mm_kernel *mm = n_rows % 8 == 0 && o->twin_rows8[wt] ? o->twin_rows8[wt] : mm_for(&kernel_ops_ref, wt, n_rows);
    matmul_ref_with(mm, w, wt, n_rows, k, x, n_tok, y, ldy);
    return 0;
}
