/* test_ops.c: the SIMD forward-pass operations (attention over the KV
 * interface, SwiGLU) against their plain-C references, for both KV element
 * types and head sizes on and off the vector width. */
#include <math.h>

#include "model/ops.h"
#include "test.h"

static uint64_t rng = 7;
static float rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

typedef struct {
    sp_type type;
    int D, Hk, n_pos;
} attn_row;

static void attn_case(const attn_row *r) {
    const sp_fwd_ops *simd = sp_fwd_ops_avx2(), *ref = sp_fwd_ops_ref();
    __builtin_cpu_init();
    if (!simd || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
    char err[128];
    const int kv_dim = r->D * r->Hk;
    sp_kv *kv = sp_kv_simple_create(r->type, 1, kv_dim, 2, r->n_pos, err, sizeof(err));
    CHECK(kv != NULL, "kv: %s", err);
    if (!kv) return;
    const int seq = 1; /* the second sequence, so offsets are exercised */
    CHECK(kv->ops->reserve(kv, seq, r->n_pos) == 0, "reserve");
    for (int p = 0; p < r->n_pos; p++) {
        void *k = kv->ops->k_row(kv, 0, seq, p), *v = kv->ops->v_row(kv, 0, seq, p);
        for (int i = 0; i < kv_dim; i++) {
            float a = rnd() * 2, b = rnd();
            if (r->type == SP_TYPE_F16) {
                ((sp_f16 *)k)[i] = sp_f32_to_f16(a);
                ((sp_f16 *)v)[i] = sp_f32_to_f16(b);
            } else {
                ((float *)k)[i] = a;
                ((float *)v)[i] = b;
            }
        }
    }
    kv->ops->set_len(kv, seq, r->n_pos);
    float *q = malloc(r->D * sizeof(float)), *o1 = malloc(r->D * sizeof(float)),
          *o2 = malloc(r->D * sizeof(float)), *sc = malloc(r->n_pos * sizeof(float)),
          *b = malloc(r->D * sizeof(float)); /* allowed |ref - simd| per output */
    uint16_t *q16 = malloc(r->D * sizeof(uint16_t));
    for (int g = 0; g < r->Hk; g++)
        for (int n = 1; n <= r->n_pos; n += (r->n_pos + 4) / 5) { /* causal prefixes */
            for (int d = 0; d < r->D; d++) q[d] = rnd() * 2;
            const float scale = 1.0f / sqrtf((float)r->D);
            ref->attn_head(q, kv, 0, seq, g, r->D, n, scale, sc, q16, o1);
            /* sc now holds exp(s - max). With an f16 store the probabilities
             * are rounded to f16 (as llama.cpp does), and a score that differs
             * in its last float bit between the two summation orders may put a
             * probability one f16 step (2^-10 relative at most) apart: the
             * bound allows that for every position, nothing more. */
            double sum = 0;
            for (int j = 0; j < n; j++) sum += sc[j];
            for (int d = 0; d < r->D; d++) {
                double bound = 1e-5 * (1 + fabsf(o1[d]));
                if (r->type == SP_TYPE_F16)
                    for (int j = 0; j < n; j++) {
                        const sp_f16 *v = (const sp_f16 *)kv->ops->v_row(kv, 0, seq, j) + g * r->D;
                        bound += sc[j] / sum * 0x1p-10 * fabsf(sp_f16_to_f32(v[d]));
                    }
                b[d] = (float)bound;
            }
            simd->attn_head(q, kv, 0, seq, g, r->D, n, scale, sc, q16, o2);
            for (int d = 0; d < r->D; d++)
                CHECK(fabsf(o1[d] - o2[d]) <= b[d], "g %d n %d d %d: ref %g simd %g (bound %g)", g, n,
                      d, o1[d], o2[d], b[d]);
        }
    free(q);
    free(o1);
    free(o2);
    free(sc);
    free(b);
    free(q16);
    kv->ops->destroy(kv);
}

static void swiglu_case(void) {
    const sp_fwd_ops *simd = sp_fwd_ops_avx2(), *ref = sp_fwd_ops_ref();
    __builtin_cpu_init();
    if (!simd || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
    enum { N = 1003 }; /* not a multiple of 8 */
    float g[N], u[N], y1[N], y2[N];
    for (int i = 0; i < N; i++) {
        g[i] = rnd() * 30; /* reaches both saturated tails */
        u[i] = rnd() * 4;
    }
    g[0] = -100.0f;
    g[1] = 100.0f;
    g[2] = 0.0f;
    ref->swiglu(N, g, u, y1);
    simd->swiglu(N, g, u, y2);
    for (int i = 0; i < N; i++)
        CHECK(fabsf(y1[i] - y2[i]) <= 4e-7f * (1 + fabsf(y1[i])), "i %d g %g: ref %g simd %g", i, g[i],
              y1[i], y2[i]);
}

int main(void) {
    static const attn_row rows[] = {
        {SP_TYPE_F16, 64, 2, 70},  {SP_TYPE_F32, 64, 2, 70},  {SP_TYPE_F16, 128, 1, 33},
        {SP_TYPE_F16, 256, 1, 9},  {SP_TYPE_F32, 8, 3, 17},   {SP_TYPE_F16, 12, 2, 20},
        {SP_TYPE_F32, 32, 4, 1},   {SP_TYPE_F16, 80, 2, 40},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s D=%d Hk=%d n=%d", rows[i].type == SP_TYPE_F16 ? "f16" : "f32",
                 rows[i].D, rows[i].Hk, rows[i].n_pos);
        RUN_NAMED(attn_case, &rows[i], name);
    }
    RUN(swiglu_case);
    TEST_END();
}
