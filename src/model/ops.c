/* ops.c: reference (plain C) forward-pass operations and their dispatch. */
#include "model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels/kernels.h"

void ops_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

/* ggml's AVX-512 vector exp, one lane: x = n ln2 + b (ln2 in two parts, n
 * by the 1.5 * 2^23 rounding trick), exp(b) by a degree-5 polynomial in
 * two FMA halves, then scaled by 2^n (scalef); |n| > 192 gives 0 or inf. */
float ops_exp_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n); /* scalef: exact, rounded once where subnormal */
}

float ops_reduce16(const float v[16]) {
    float h[8], q[4];
    for (int l = 0; l < 8; l++) h[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; l++) q[l] = h[l + 4] + h[l];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

float ops_softmax_exp(float *scores, int32_t n, float max) {
    double sum = 0.0;
    for (int32_t i = 0; i < n; i += 16) {
        float v[16];
        for (int l = 0; l < 16; l++) v[l] = i + l < n ? (scores[i + l] = ops_exp_ggml(scores[i + l] - max)) : 0.0f;
        sum += (double)ops_reduce16(v);
    }
    return (float)(1.0 / sum);
}

static float round16(float x) { return f16_to_f32(f32_to_f16(x)); }

/* Element d of a head's K/V slice that starts at row (see kv_kind). */
static float kv_at(const char *row, int32_t d, int kind) {
    if (kind == KV_F16) return f16_to_f32(((const f16_t *)row)[d]);
    if (kind == KV_F32) return ((const float *)row)[d];
    const block_q8_0 *b = (const block_q8_0 *)row + d / 32;
    return (float)b->qs[d % 32] * f16_to_f32(b->d);
}

/* The order of ops.h, one lane at a time. */
static void ref_attn_head(const float *q, kv_store *kv, int32_t layer, int32_t seq, int32_t g,
                          int32_t D, int32_t n_pos, int32_t win, float scale, float *scores, uint16_t *q16,
                          float *out) {
    const int kind = kv_kind(kv);
    const bool f16 = kind == KV_F16;
    const size_t rb = kv_row_bytes(kv), hoff = kv_head_off(kv, g, D);
    (void)q16;
    SP_ASSERT(D <= SP_HEAD_DIM_MAX);
    float qr[SP_HEAD_DIM_MAX];
    for (int d = 0; d < D; d++) qr[d] = f16 ? round16(q[d]) : q[d];
    const int32_t lo = kv_window_lo(n_pos, win);
    float max = -INFINITY;
    for (int32_t p = lo; p < n_pos;) {
        const void *kb, *vb;
        const int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            float acc[16] = {0};
            const char *kr = (const char *)kb + (size_t)j * rb + hoff;
            for (int d = 0; d < D; d++) acc[d % 16] = fmaf(qr[d], kv_at(kr, d, kind), acc[d % 16]);
            const float s = ops_reduce16(acc) * scale;
            scores[p + j] = s;
            if (s > max) max = s;
        }
        p += n;
    }
    const float inv = ops_softmax_exp(scores + lo, n_pos - lo, max);
    float part[16][SP_HEAD_DIM_MAX];
    for (int r = 0; r < 16; r++) {
        for (int d = 0; d < D; d++) part[r][d] = 0.0f;
        for (int32_t p = lo; p < n_pos;) {
            const void *kb, *vb;
            const int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
            for (int32_t j = (r - p % 16 + 16) % 16; j < n; j += 16) {
                float pj = scores[p + j] * inv;
                if (f16) pj = round16(pj);
                const char *vr = (const char *)vb + (size_t)j * rb + hoff;
                for (int d = 0; d < D; d++) part[r][d] = fmaf(pj, kv_at(vr, d, kind), part[r][d]);
            }
            p += n;
        }
    }
    for (int d = 0; d < D; d++) {
        float v[16];
        for (int r = 0; r < 16; r++) v[r] = part[r][d];
        out[d] = ops_reduce16(v);
    }
}

static void ref_swiglu(int64_t n, const float *g, const float *u, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + ops_exp_ggml(0.0f - g[i])) * u[i];
}

void ops_attn_run(const fwd_ops *o, const float *q, size_t q_stride, int32_t nq, int32_t nh, kv_store *kv,
                 int32_t layer, int32_t seq, int32_t g, int32_t D, int32_t n_pos0, int32_t win, float scale,
                 float *scores, size_t sc_stride, uint16_t *q16, float *out, size_t out_stride) {
    if (o->attn_run) {
        o->attn_run(q, q_stride, nq, nh, kv, layer, seq, g, D, n_pos0, win, scale, scores, sc_stride, q16, out,
                    out_stride);
        return;
    }
    (void)sc_stride;
    for (int32_t t = 0; t < nq; t++)
        for (int32_t j = 0; j < nh; j++)
            o->attn_head(q + (size_t)t * q_stride + (size_t)j * D, kv, layer, seq, g, D, n_pos0 + t, win, scale,
                         scores, q16, out + (size_t)t * out_stride + (size_t)j * D);
}

void ops_attn_rows_part(kv_store *kv, int32_t layer, int32_t seq, int32_t p0, int32_t p1, int32_t g, int32_t D,
                        int32_t e0, int32_t e1, int v, const char **rows) {
    const size_t rs = kv_row_bytes(kv), off = kv_head_off(kv, g, D), b0 = row_size(kv->type, e0),
                 b1 = row_size(kv->type, e1);
    for (int32_t p = p0; p < p1;) {
        const void *kb, *vb;
        const int32_t n = kv->ops->span(kv, layer, seq, p, p1, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            const char *r = (const char *)(v ? vb : kb) + j * rs + off;
            rows[p - p0 + j] = r;
            for (size_t o = b0; o < b1; o += 64) __builtin_prefetch(r + o, 0, 3);
        }
        p += n;
    }
}

void ops_attn_rows(kv_store *kv, int32_t layer, int32_t seq, int32_t p0, int32_t p1, int32_t g, int32_t D,
                  int v, const char **rows) {
    ops_attn_rows_part(kv, layer, seq, p0, p1, g, D, 0, D, v, rows);
}

/* 0.5 x (1 + tanh z) = x / (1 + exp(-2z)): one exp, no tanh, in the
 * SIMD variants' order of operations (no fused multiply-adds). */
float ops_gelu_lane(float x) {
    if (x >= 10.0f) return x;
    const float e = ops_exp_ggml((SP_GELU_M2S2PI * x) * (1.0f + SP_GELU_C * (x * x)));
    return x / (1.0f + e);
}

static void ref_geglu(int64_t n, const float *g, const float *u, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = ops_gelu_lane(g[i]) * u[i];
}

static const fwd_ops REF = {ref_attn_head, NULL, ref_swiglu, ref_geglu};

const fwd_ops *fwd_ops_ref(void) { return &REF; }

const fwd_ops *fwd_ops_get(void) {
    /* follows the matmul level on every call (not cached), so that
     * kernels_force switches the forward operations with the kernels,
     * as kernels.h promises */
    const char *level = kernels_init();
    if (!strcmp(level, "avx512")) return fwd_ops_avx512();
    if (!strcmp(level, "avx2")) return fwd_ops_avx2();
    return &REF;
}
