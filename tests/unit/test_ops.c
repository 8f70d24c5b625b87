/* test_ops.c: the SIMD forward-pass operations (AVX2, AVX-512) (attention over the KV
 * interface, SwiGLU) against their plain-C references, for both KV element
 * types and head sizes on and off the vector width. A variant this CPU cannot
 * run is a counted skip (SKIP line), never a pass. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kv/kv_paged.h"
#include "model/ops.h"
#include "test.h"

static uint64_t rng = 7;
static float rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

typedef struct {
    tensor_type type;
    int D, Hk, n_pos;
} attn_row;

/* sliding windows every case runs with: none, the query alone, a window
 * shorter than most rows' positions (0: every position) */
static const int WINS[] = {0, 1, 13};
enum { N_WINS = 3 };

/* A row's windows: WINS, and with 128 positions or more half of them too,
 * long enough that a run's queries share whole 64-row blocks of V inside
 * the window while their first positions differ. */
static int n_wins(const attn_row *r) { return N_WINS + (r->n_pos >= 128); }
static int win_at(const attn_row *r, int w) { return w < N_WINS ? WINS[w] : r->n_pos / 2; }

/* A one-layer store of r's type and shape with n_seq sequences; sequence
 * seq holds n_pos positions of random K (in [-2, 2)) and V (in [-1, 1)). */
static kv_store *random_kv(const attn_row *r, int n_seq, int seq, int n_pos) {
    char err[128];
    const int kv_dim = r->D * r->Hk;
    kv_store *kv = kv_simple_create(r->type, 1, kv_dim, n_seq, n_pos, err, sizeof(err));
    CHECK(kv != NULL, "kv: %s", err);
    if (!kv) return NULL;
    CHECK(kv->ops->reserve(kv, seq, n_pos) == 0, "reserve");
    float *a = malloc(sizeof(float) * kv_dim), *b = malloc(sizeof(float) * kv_dim);
    for (int p = 0; p < n_pos; p++) {
        void *k = kv->ops->k_row(kv, 0, seq, p), *v = kv->ops->v_row(kv, 0, seq, p);
        for (int i = 0; i < kv_dim; i++) a[i] = rnd() * 2, b[i] = rnd();
        if (r->type == SP_TYPE_F32) {
            memcpy(k, a, sizeof(float) * kv_dim);
            memcpy(v, b, sizeof(float) * kv_dim);
        } else { /* f16, or q8_0 blocks */
            quantize_row(r->type, a, k, kv_dim);
            quantize_row(r->type, b, v, kv_dim);
        }
    }
    free(a);
    free(b);
    kv->ops->set_len(kv, seq, n_pos);
    return kv;
}

/* A variant of the operations; ops is NULL when this CPU cannot run it
 * (AVX-512 only when the kernel level it needs is present). The case that
 * needs it is then a counted skip, never a pass. */
typedef struct {
    const char *name;
    const fwd_ops *ops;
} variant;

static variant get_variant(const char *name) {
    variant v = {name, NULL};
    __builtin_cpu_init();
    const bool avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (!strcmp(name, "ref")) v.ops = fwd_ops_ref();
    else if (!strcmp(name, "avx2") && avx2) v.ops = fwd_ops_avx2();
    else if (!strcmp(name, "avx512") && avx512) v.ops = fwd_ops_avx512();
    return v;
}

typedef struct {
    const attn_row *row;
    const char *variant;
} job;

static void attn_case(const job *j) {
    const attn_row *r = j->row;
    const fwd_ops *vs[1], *ref = fwd_ops_ref();
    const char *vn[1] = {j->variant};
    vs[0] = get_variant(j->variant).ops;
    if (!vs[0]) {
        SKIP("this CPU cannot run the %s operations", j->variant);
        return;
    }
    const int n_var = 1;
    const int seq = 1; /* the second sequence, so offsets are exercised */
    kv_store *kv = random_kv(r, 2, seq, r->n_pos);
    if (!kv) return;
    float *q = malloc(r->D * sizeof(float)), *o1 = malloc(r->D * sizeof(float)),
          *o2 = malloc(r->D * sizeof(float)), *sc = malloc(r->n_pos * sizeof(float)),
          *b = malloc(r->D * sizeof(float)); /* allowed |ref - simd| per output */
    uint16_t *q16 = malloc(r->D * sizeof(uint16_t));
    for (int w = 0; w < n_wins(r); w++)
    for (int g = 0; g < r->Hk; g++)
        for (int n = 1; n <= r->n_pos; n += (r->n_pos + 4) / 5) { /* causal prefixes */
            const int win = win_at(r, w), lo = kv_window_lo(n, win);
            for (int d = 0; d < r->D; d++) q[d] = rnd() * 2;
            const float scale = 1.0f / sqrtf((float)r->D);
            ref->attn_head(q, kv, 0, seq, g, r->D, n, win, scale, sc, q16, o1);
            /* sc now holds exp(s - max). With an f16 store the probabilities
             * are rounded to f16 (as llama.cpp does), and a score that differs
             * in its last float bit between the two summation orders may put a
             * probability one f16 step (2^-10 relative at most) apart: the
             * bound allows that for every position, nothing more. */
            double sum = 0;
            for (int j = lo; j < n; j++) sum += sc[j];
            for (int d = 0; d < r->D; d++) {
                double bound = 1e-5 * (1 + fabsf(o1[d]));
                if (r->type == SP_TYPE_F16)
                    for (int j = lo; j < n; j++) {
                        const f16_t *v = (const f16_t *)kv->ops->v_row(kv, 0, seq, j) + g * r->D;
                        bound += sc[j] / sum * 0x1p-10 * fabsf(f16_to_f32(v[d]));
                    }
                b[d] = (float)bound;
            }
            for (int vi = 0; vi < n_var; vi++) {
                vs[vi]->attn_head(q, kv, 0, seq, g, r->D, n, win, scale, sc, q16, o2);
                for (int d = 0; d < r->D; d++)
                    CHECK(fabsf(o1[d] - o2[d]) <= b[d], "%s win %d g %d n %d d %d: ref %g simd %g (bound %g)",
                          vn[vi], win, g, n, d, o1[d], o2[d], b[d]);
            }
        }
    free(q);
    free(o1);
    free(o2);
    free(sc);
    free(b);
    free(q16);
    kv->ops->destroy(kv);
}

/* The buffers of a run: queries and outputs of SP_ATTN_MAX_Q tokens of
 * `heads` heads (o2: the same again), score rows of n_ctx. */
typedef struct {
    float *q, *o1, *o2, *sc;
    uint16_t *q16;
} run_bufs;

static void run_bufs_free(run_bufs *b) {
    free(b->q);
    free(b->o1);
    free(b->o2);
    free(b->sc);
    free(b->q16);
}

/* false (buffers freed, a failed check) when out of memory */
static bool run_bufs_alloc(run_bufs *b, int D, int heads, int n_ctx) {
    const size_t n = (size_t)SP_ATTN_MAX_Q * heads * D;
    b->q = malloc(n * sizeof(float));
    b->o1 = malloc(n * sizeof(float));
    b->o2 = malloc(n * sizeof(float));
    b->sc = malloc((size_t)SP_ATTN_MAX_Q * n_ctx * sizeof(float));
    b->q16 = malloc((size_t)D * sizeof(uint16_t));
    CHECK(b->q && b->o1 && b->o2 && b->sc && b->q16, "out of memory");
    if (!(b->q && b->o1 && b->o2 && b->sc && b->q16)) {
        run_bufs_free(b);
        return false;
    }
    for (size_t i = 0; i < n; i++) b->q[i] = rnd() * 2;
    return true;
}


/* A run of nq x nh queries (one sequence, nq consecutive positions, nh
 * heads of one KV head) gives each query exactly what attn_head gives it
 * alone, bit for bit, for every run length, head count and starting
 * position, in every variant: the engine relies on it for speculative
 * output to equal plain decoding. Queries, outputs and score rows sit at
 * strides, as in the forward pass (nine heads per token, the run's from
 * the second on); the heads outside the run are left as they were. */
static void run_case(const job *j) {
    const attn_row *r = j->row;
    const fwd_ops *ops[1] = {get_variant(j->variant).ops};
    const char *names[1] = {j->variant};
    if (!ops[0]) {
        SKIP("this CPU cannot run the %s operations", j->variant);
        return;
    }
    const int n_ops = 1;
    const int n_ctx = r->n_pos + SP_ATTN_MAX_Q;
    kv_store *kv = random_kv(r, 1, 0, n_ctx);
    if (!kv) return;
    enum { HEADS = 9 };
    const int QS = r->D * HEADS; /* query/output stride */
    run_bufs rb;
    if (!run_bufs_alloc(&rb, r->D, HEADS, n_ctx)) {
        kv->ops->destroy(kv);
        return;
    }
    float *q = rb.q, *o1 = rb.o1, *o2 = rb.o2, *sc = rb.sc;
    uint16_t *q16 = rb.q16;
    const float scale = 1.0f / sqrtf((float)r->D);
    static const int nqs[] = {1, 2, 3, 5, 9, SP_ATTN_MAX_Q}, nhs[] = {1, 3, 8};
    for (int o = 0; o < n_ops; o++)
      for (int w = 0; w < n_wins(r); w++)
        for (size_t a = 0; a < sizeof nqs / sizeof nqs[0]; a++)
            for (size_t b = 0; b < sizeof nhs / sizeof nhs[0]; b++)
                for (int n0 = 1; n0 <= r->n_pos; n0 += (r->n_pos + 2) / 3) {
                    const int nq = nqs[a], nh = nhs[b], g = r->Hk - 1, win = win_at(r, w);
                    for (int i = 0; i < SP_ATTN_MAX_Q * QS; i++) o1[i] = -7.0f;
                    ops_attn_run(ops[o], q + r->D, QS, nq, nh, kv, 0, 0, g, r->D, n0, win, scale, sc, n_ctx, q16,
                                o1 + r->D, QS);
                    int bad = 0, outside = 0;
                    for (int t = 0; t < SP_ATTN_MAX_Q; t++)
                        for (int hd = 0; hd < HEADS; hd++) {
                            const float *ot = o1 + t * QS + hd * r->D;
                            if (t < nq && hd >= 1 && hd <= nh) {
                                ops[o]->attn_head(q + t * QS + hd * r->D, kv, 0, 0, g, r->D, n0 + t, win, scale,
                                                  sc, q16, o2);
                                bad += memcmp(ot, o2, (size_t)r->D * sizeof(float)) != 0;
                            } else {
                                for (int d = 0; d < r->D; d++) outside += ot[d] != -7.0f;
                            }
                        }
                    CHECK(!bad, "%s win %d nq %d nh %d n_pos0 %d: %d queries differ from attn_head alone",
                          names[o], win, nq, nh, n0, bad);
                    CHECK(!outside, "%s nq %d nh %d n_pos0 %d: %d values written outside the run", names[o], nq,
                          nh, n0, outside);
                }
    run_bufs_free(&rb);
    kv->ops->destroy(kv);
}

/* The same runs over a paged store (blocks of 5 and of 16 positions, the
 * sequence's blocks interleaved with another's, so every span is short and
 * none follows the one before it in memory) give what they give over the
 * contiguous store holding the same rows, bit for bit: the variants gather
 * K/V rows through spans. */
static void paged_case(const job *j) {
    const attn_row *r = j->row;
    const fwd_ops *o = get_variant(j->variant).ops;
    if (!o) {
        SKIP("this CPU cannot run the %s operations", j->variant);
        return;
    }
    const int n_ctx = r->n_pos + SP_ATTN_MAX_Q, kv_dim = r->D * r->Hk;
    const size_t rbytes = row_size(r->type, kv_dim);
    kv_store *kv = random_kv(r, 1, 0, n_ctx);
    if (!kv) return;
    enum { HEADS = 8 };
    const int QS = r->D * HEADS;
    run_bufs rb;
    if (!run_bufs_alloc(&rb, r->D, HEADS, n_ctx)) {
        kv->ops->destroy(kv);
        return;
    }
    float *q = rb.q, *o1 = rb.o1, *o2 = rb.o2, *sc = rb.sc;
    uint16_t *q16 = rb.q16;
    const float scale = 1.0f / sqrtf((float)r->D);
    static const int bss[] = {5, 16};
    for (size_t bi = 0; bi < sizeof bss / sizeof bss[0]; bi++) {
        const int bs = bss[bi], nbps = (n_ctx + bs - 1) / bs;
        char err[128];
        kv_paged_params pp = {r->type, 1, kv_dim, bs, 2 * nbps, 2, nbps, false, 0, NULL, 0};
        kv_store *kp = kv_paged_create(pp, err, sizeof err);
        CHECK(kp != NULL, "paged store: %s", err);
        if (!kp) continue;
        for (int p0 = 0; p0 < n_ctx; p0 += bs) /* sequence 1 (the one read) and 0, block by block */
            for (int sq = 1; sq >= 0; sq--) {
                const int n = SP_MIN(bs, n_ctx - p0);
                CHECK(kp->ops->reserve(kp, sq, n) == 0, "reserve");
                kp->ops->set_len(kp, sq, p0 + n);
            }
        for (int p = 0; p < n_ctx; p++) {
            memcpy(kp->ops->k_row(kp, 0, 1, p), kv->ops->k_row(kv, 0, 0, p), rbytes);
            memcpy(kp->ops->v_row(kp, 0, 1, p), kv->ops->v_row(kv, 0, 0, p), rbytes);
        }
        static const int nqs[] = {1, 5, SP_ATTN_MAX_Q}, nhs[] = {1, 8};
        for (int w = 0; w < n_wins(r); w++)
        for (size_t a = 0; a < sizeof nqs / sizeof nqs[0]; a++)
            for (size_t b = 0; b < sizeof nhs / sizeof nhs[0]; b++)
                for (int n0 = 1; n0 <= r->n_pos; n0 += (r->n_pos + 2) / 3) {
                    const int nq = nqs[a], nh = nhs[b], g = r->Hk - 1, win = win_at(r, w);
                    ops_attn_run(o, q, QS, nq, nh, kv, 0, 0, g, r->D, n0, win, scale, sc, n_ctx, q16, o1, QS);
                    ops_attn_run(o, q, QS, nq, nh, kp, 0, 1, g, r->D, n0, win, scale, sc, n_ctx, q16, o2, QS);
                    int bad = 0;
                    for (int t = 0; t < nq; t++)
                        bad += memcmp(o1 + t * QS, o2 + t * QS, (size_t)nh * r->D * sizeof(float)) != 0;
                    CHECK(!bad, "%s blocks of %d, win %d, nq %d nh %d n_pos0 %d: %d tokens differ from the "
                          "contiguous store", j->variant, bs, win, nq, nh, n0, bad);
                }
        kp->ops->destroy(kp);
    }
    run_bufs_free(&rb);
    kv->ops->destroy(kv);
}

static void swiglu_case(const char *variant) {
    const fwd_ops *simd = get_variant(variant).ops, *ref = fwd_ops_ref();
    if (!simd) {
        SKIP("this CPU cannot run the %s operations", variant);
        return;
    }
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

/* GELU-gated rows: each variant against the plain-C one, and the plain-C
 * one against GELU's tanh form in double. */
static void geglu_case(const char *variant) {
    const fwd_ops *simd = get_variant(variant).ops, *ref = fwd_ops_ref();
    if (!simd) {
        SKIP("this CPU cannot run the %s operations", variant);
        return;
    }
    enum { N = 1003 }; /* not a multiple of 8 or 16 */
    float g[N], u[N], y1[N], y2[N];
    for (int i = 0; i < N; i++) {
        g[i] = rnd() * 24; /* both tails, and the x >= 10 cut */
        u[i] = rnd() * 4;
    }
    g[0] = -100.0f;
    g[1] = 100.0f;
    g[2] = 0.0f;
    g[3] = 10.0f;
    g[4] = 9.999f;
    ref->geglu(N, g, u, y1);
    simd->geglu(N, g, u, y2);
    for (int i = 0; i < N; i++) {
        const double x = g[i], want = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * u[i];
        CHECK(fabsf(y1[i] - y2[i]) <= 4e-7f * (1 + fabsf(y1[i])), "i %d g %g: ref %g simd %g", i, g[i], y1[i], y2[i]);
        CHECK(fabs(y1[i] - want) <= 2e-6 * (1 + fabs(want)), "i %d g %g: ref %g, tanh form %g", i, g[i], y1[i], want);
    }
}

int main(void) {
    static const attn_row rows[] = {
        {SP_TYPE_F16, 64, 2, 70},  {SP_TYPE_F32, 64, 2, 70},  {SP_TYPE_F16, 128, 1, 33},
        {SP_TYPE_F16, 256, 1, 9},  {SP_TYPE_F32, 8, 3, 17},   {SP_TYPE_F16, 12, 2, 20},
        {SP_TYPE_F32, 32, 4, 1},   {SP_TYPE_F16, 80, 2, 40},  {SP_TYPE_F16, 64, 5, 300},
        {SP_TYPE_F16, 16, 2, 50},  {SP_TYPE_F32, 112, 1, 30},
        /* a q8_0 store (heads of whole 32-blocks) */
        {SP_TYPE_Q8_0, 64, 2, 70}, {SP_TYPE_Q8_0, 128, 1, 33}, {SP_TYPE_Q8_0, 32, 4, 300},
        {SP_TYPE_Q8_0, 256, 1, 9},
        /* past D = 128: several KV heads, positions across the 64-row
         * blocks and windows of a few blocks; D = 144, 160 and 192 end in a
         * pass over V of fewer chunks than the first */
        {SP_TYPE_F16, 256, 3, 300}, {SP_TYPE_Q8_0, 256, 2, 300}, {SP_TYPE_F32, 256, 2, 140},
        {SP_TYPE_F16, 192, 2, 200}, {SP_TYPE_Q8_0, 160, 2, 150}, {SP_TYPE_F16, 144, 1, 80},
    };
    /* every SIMD variant against the plain-C one; every variant, plain C
     * included, for runs of queries against single queries */
    static const char *simd[] = {"avx2", "avx512"}, *all[] = {"ref", "avx2", "avx512"};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char name[96];
        const char *ty = rows[i].type == SP_TYPE_F16 ? "f16" : rows[i].type == SP_TYPE_Q8_0 ? "q8_0" : "f32";
        for (int v = 0; v < 2; v++) {
            job j = {&rows[i], simd[v]};
            snprintf(name, sizeof(name), "%s %s D=%d Hk=%d n=%d", simd[v], ty, rows[i].D, rows[i].Hk, rows[i].n_pos);
            RUN_NAMED(attn_case, &j, name);
        }
        for (int v = 0; v < 3; v++) {
            job j = {&rows[i], all[v]};
            snprintf(name, sizeof(name), "run %s %s D=%d Hk=%d n=%d", all[v], ty, rows[i].D, rows[i].Hk,
                     rows[i].n_pos);
            RUN_NAMED(run_case, &j, name);
            snprintf(name, sizeof(name), "paged %s %s D=%d Hk=%d n=%d", all[v], ty, rows[i].D, rows[i].Hk,
                     rows[i].n_pos);
            RUN_NAMED(paged_case, &j, name);
        }
    }
    /* the AVX-512 SwiGLU is the AVX2 one */
    RUN_NAMED(swiglu_case, "avx2", "avx2");
    RUN_NAMED(geglu_case, "avx2", "geglu avx2");
    RUN_NAMED(geglu_case, "avx512", "geglu avx512");
    TEST_END();
}
