/* ops.c: reference (plain C) forward-pass operations and their dispatch. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels/kernels.h"

void sp_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

float sp_softmax_exp(float *scores, int32_t n, float max) {
    double sum = 0.0; /* as llama.cpp: f32 terms, double sum */
    for (int32_t p = 0; p < n; p++) {
        scores[p] = expf(scores[p] - max);
        sum += scores[p];
    }
    return (float)(1.0 / sum);
}

static float round16(float x) { return sp_f16_to_f32(sp_f32_to_f16(x)); }

static void ref_attn_head(const float *q, sp_kv *kv, int32_t layer, int32_t seq, int32_t g,
                          int32_t D, int32_t n_pos, float scale, float *scores, uint16_t *q16,
                          float *out) {
    const bool f16 = kv->type == SP_TYPE_F16;
    const int32_t kv_dim = kv->kv_dim;
    (void)q16;
    float qr[1024];
    for (int d = 0; d < D; d++) qr[d] = f16 ? round16(q[d]) : q[d];
    float max = -INFINITY;
    for (int32_t p = 0; p < n_pos;) {
        const void *kb, *vb;
        int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            float s = 0.0f;
            if (f16) {
                const sp_f16 *k = (const sp_f16 *)kb + (size_t)j * kv_dim + (size_t)g * D;
                for (int d = 0; d < D; d++) s += qr[d] * sp_f16_to_f32(k[d]);
            } else {
                const float *k = (const float *)kb + (size_t)j * kv_dim + (size_t)g * D;
                for (int d = 0; d < D; d++) s += qr[d] * k[d];
            }
            s *= scale;
            scores[p + j] = s;
            if (s > max) max = s;
        }
        p += n;
    }
    const float inv = sp_softmax_exp(scores, n_pos, max);
    for (int d = 0; d < D; d++) out[d] = 0.0f;
    for (int32_t p = 0; p < n_pos;) {
        const void *kb, *vb;
        int32_t n = kv->ops->span(kv, layer, seq, p, n_pos, &kb, &vb);
        for (int32_t j = 0; j < n; j++) {
            float pj = scores[p + j] * inv;
            if (f16) {
                pj = round16(pj);
                const sp_f16 *v = (const sp_f16 *)vb + (size_t)j * kv_dim + (size_t)g * D;
                for (int d = 0; d < D; d++) out[d] += pj * sp_f16_to_f32(v[d]);
            } else {
                const float *v = (const float *)vb + (size_t)j * kv_dim + (size_t)g * D;
                for (int d = 0; d < D; d++) out[d] += pj * v[d];
            }
        }
        p += n;
    }
}

static void ref_swiglu(int64_t n, const float *g, const float *u, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void sp_attn_run(const sp_fwd_ops *o, const float *q, size_t q_stride, int32_t nq, sp_kv *kv,
                 int32_t layer, int32_t seq, int32_t g, int32_t D, int32_t n_pos0, float scale,
                 float *scores, size_t sc_stride, uint16_t *q16, float *out, size_t out_stride) {
    if (o->attn_run) {
        o->attn_run(q, q_stride, nq, kv, layer, seq, g, D, n_pos0, scale, scores, sc_stride, q16, out,
                    out_stride);
        return;
    }
    for (int32_t t = 0; t < nq; t++)
        o->attn_head(q + (size_t)t * q_stride, kv, layer, seq, g, D, n_pos0 + t, scale,
                     scores + (size_t)t * sc_stride, q16, out + (size_t)t * out_stride);
}

static const sp_fwd_ops REF = {ref_attn_head, NULL, ref_swiglu};

const sp_fwd_ops *sp_fwd_ops_ref(void) { return &REF; }

const sp_fwd_ops *sp_fwd_ops_get(void) {
    /* follows the matmul level on every call (not cached), so that
     * sp_kernels_force switches the forward operations with the kernels,
     * as kernels.h promises */
    const char *level = sp_kernels_init();
    if (!strcmp(level, "avx512")) return sp_fwd_ops_avx512();
    if (!strcmp(level, "avx2")) return sp_fwd_ops_avx2();
    return &REF;
}
