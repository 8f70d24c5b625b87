/* moe.c: the mixture-of-experts FFN (moe.h). */
#include "model/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void weight_rows_matmul(thread_pool *pool, const model_weight *w, int64_t r0, int64_t nr, const float *x,
                        int64_t n_tok, float *y, void *scratch) {
    /* the packed rows only while the level that packed them runs (a test
     * may force another one after the load); packed rows are a fixed size
     * (16 of them: a whole number of the AVX2 level's 8-row blocks) */
    if (w->packed && w->packed_level == kernels_level()) {
        const size_t rs = matmul_packed_size(w->type, 16, w->n_in) / 16;
        matmul_packed(pool, (const uint8_t *)w->packed + (size_t)r0 * rs, w->type, nr, w->n_in, x, n_tok, y, nr,
                      scratch);
    } else {
        const size_t rs = row_size(w->type, w->n_in);
        matmul(pool, (const uint8_t *)w->data + (size_t)r0 * rs, w->type, nr, w->n_in, x, n_tok, y, nr, scratch);
    }
}

int moe_scratch_init(moe_scratch *s, const sp_model_info *h, int64_t B) {
    memset(s, 0, sizeof(*s));
    const int64_t X = h->n_expert, E = h->n_embd, Fx = h->n_ff_exp;
    s->probs = malloc((size_t)(B * X) * sizeof(float));
    s->n_tok = malloc((size_t)X * sizeof(int32_t));
    s->tok = malloc((size_t)(X * B) * sizeof(int32_t));
    s->tw = malloc((size_t)(X * B) * sizeof(float));
    s->xg = malloc((size_t)(B * E) * sizeof(float));
    s->g = malloc((size_t)(B * Fx) * sizeof(float));
    s->u = malloc((size_t)(B * Fx) * sizeof(float));
    s->yo = malloc((size_t)(B * E) * sizeof(float));
    s->out = malloc((size_t)(B * E) * sizeof(float));
    if (s->probs && s->n_tok && s->tok && s->tw && s->xg && s->g && s->u && s->yo && s->out) return 0;
    moe_scratch_free(s);
    return -1;
}

void moe_scratch_free(moe_scratch *s) {
    free(s->probs);
    free(s->n_tok);
    free(s->tok);
    free(s->tw);
    free(s->xg);
    free(s->g);
    free(s->u);
    free(s->yo);
    free(s->out);
    memset(s, 0, sizeof(*s));
}

/* The SwiGLU of one expert's tokens, split over the pool in 16-element
 * pieces (elementwise: the same bits however it is split). */
typedef struct {
    const fwd_ops *ops;
    float *g;
    const float *u;
    int64_t n;
} glu_job;

static void glu_worker(void *arg, int ith, int nth) {
    const glu_job *j = arg;
    const int64_t chunk = ((j->n + nth - 1) / nth + 15) & ~(int64_t)15;
    const int64_t i0 = (int64_t)ith * chunk, i1 = SP_MIN(j->n, i0 + chunk);
    if (i0 < i1) j->ops->swiglu(i1 - i0, j->g + i0, j->u + i0, j->g + i0);
}

/* Token t's row of router logits -> its K experts and their weights, added
 * to the experts' token lists. */
static void route(moe_scratch *s, const sp_model_info *h, int32_t t, int32_t B) {
    const int32_t X = h->n_expert, K = h->n_expert_used;
    float *p = s->probs + (size_t)t * X;
    float max = p[0];
    for (int32_t e = 1; e < X; e++) max = p[e] > max ? p[e] : max;
    float sum = 0.0f;
    for (int32_t e = 0; e < X; e++) sum += p[e] = expf(p[e] - max);
    for (int32_t e = 0; e < X; e++) p[e] /= sum;
    /* the K largest: K passes of an argmax over what is left (K <= 64) */
    int32_t sel[SP_MAX_EXPERTS_USED];
    float wsum = 0.0f;
    for (int32_t j = 0; j < K; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < X; e++) {
            bool taken = false;
            for (int32_t i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        wsum += p[best];
    }
    for (int32_t j = 0; j < K; j++) {
        const int32_t e = sel[j];
        s->tok[(size_t)e * B + s->n_tok[e]] = t;
        s->tw[(size_t)e * B + s->n_tok[e]] = p[e] / wsum;
        s->n_tok[e]++;
    }
}

void moe_ffn(const model_layer *y, const sp_model_info *h, moe_scratch *s, thread_pool *pool, const fwd_ops *ops,
             void *mm_scratch, const float *xn, int32_t nb) {
    const int64_t X = h->n_expert, E = h->n_embd, Fx = h->n_ff_exp;
    weight_rows_matmul(pool, &y->ffn_gate_inp, 0, X, xn, nb, s->probs, mm_scratch);
    memset(s->n_tok, 0, (size_t)X * sizeof(int32_t));
    for (int32_t t = 0; t < nb; t++) route(s, h, t, nb);
    memset(s->out, 0, (size_t)nb * E * sizeof(float));
    for (int64_t e = 0; e < X; e++) {
        const int32_t n = s->n_tok[e];
        if (!n) continue;
        const int32_t *tok = s->tok + e * nb;
        const float *tw = s->tw + e * nb;
        for (int32_t i = 0; i < n; i++)
            memcpy(s->xg + (size_t)i * E, xn + (size_t)tok[i] * E, (size_t)E * sizeof(float));
        weight_rows_matmul(pool, &y->gate_exps, e * Fx, Fx, s->xg, n, s->g, mm_scratch);
        weight_rows_matmul(pool, &y->up_exps, e * Fx, Fx, s->xg, n, s->u, mm_scratch);
        glu_job gj = {ops, s->g, s->u, (int64_t)n * Fx};
        pool_run(pool, glu_worker, &gj);
        weight_rows_matmul(pool, &y->down_exps, e * E, E, s->g, n, s->yo, mm_scratch);
        for (int32_t i = 0; i < n; i++) {
            float *o = s->out + (size_t)tok[i] * E;
            const float *r = s->yo + (size_t)i * E;
            for (int64_t j = 0; j < E; j++) o[j] += tw[i] * r[j];
        }
        s->experts_run++;
    }
}
