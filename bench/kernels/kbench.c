/* kbench.c: microbenchmark of the kernels (`make kbench`; not run by
 * `make bench`).
 *
 *   make kbench
 *   bin/kbench [threads=2] [reps=5] [type: q8_0|q4_K|q6_K|q4_0|f16; default q8_0 and q4_K]
 *
 * Measures (the host's memory and cores are shared with other machines, so
 * every figure is the best, or a median, of several runs):
 *   - memory read bandwidth: `threads` threads streaming 1 GiB with AVX-512
 *     loads (also re-measured between the decode passes);
 *   - pool dispatch: cost of an empty pool_run;
 *   - decode matvec (n_tok = 1) over a TinyLlama-1.1B-shaped weight set
 *     (22 layers of wq, wk, wv, wo, gate, up, down + output; ~1.1 GB in Q8_0,
 *     0.58 GB in Q4_K): GB/s of weights and % of the best bandwidth;
 *   - the same layers (without the output matrix) for n_tok = 2..8, 16, 128:
 *     cost relative to n_tok = 1 (median over adjacent pairs of passes),
 *     GOPS and the projected prefill tokens/s of the matmuls alone.
 * The weights are random but well-formed blocks (quantizing 1e9 values takes
 * minutes). SPECULA_KERNELS=ref|avx2|avx512 selects the level.
 */
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>

#include "kernels/kernels.h"

#define SP_ALIGN_UP(n, a) (((n) + (a) - 1) / (a) * (a))
#define N_LAYERS 22
#define N_EMBD 2048
#define N_FF 5632
#define N_KV 256
#define N_VOCAB 32000

typedef struct {
    int64_t n_rows, k;
} shape;

static const shape LAYER[] = {
    {N_EMBD, N_EMBD}, {N_KV, N_EMBD}, {N_KV, N_EMBD}, {N_EMBD, N_EMBD}, /* wq wk wv wo */
    {N_FF, N_EMBD},   {N_FF, N_EMBD}, {N_EMBD, N_FF},                   /* gate up down */
};
#define N_MAT 7

#include "bench_fill.h"

/* ---- bandwidth ---------------------------------------------------------- */

typedef struct {
    const uint8_t *buf;
    size_t bytes;
    _Atomic uint64_t sink;
} bw_job;

/* AVX2 loads: any x86-64 this runs on has them, and two 256-bit loads per
 * cycle saturate memory as well as 512-bit ones do. */
__attribute__((target("avx2"))) static void bw_fn(void *arg, int ith, int nth) {
    bw_job *j = arg;
    const size_t per = j->bytes / nth / 256 * 256;
    const uint8_t *p = j->buf + per * ith;
    __m256i a[8];
    for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_si256();
    for (size_t o = 0; o < per; o += 256)
        for (int i = 0; i < 8; i++)
            a[i] = _mm256_xor_si256(a[i], _mm256_load_si256((const __m256i *)(p + o + 32 * i)));
    for (int i = 1; i < 8; i++) a[0] = _mm256_xor_si256(a[0], a[i]);
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, a[0]);
    atomic_fetch_add(&j->sink, v[0] + v[1] + v[2] + v[3]);
}

static double measure_bw(thread_pool *pool, bw_job *bj) {
    const double t0 = time_s();
    pool_run(pool, bw_fn, bj);
    return (double)bj->bytes / (time_s() - t0) / 1e9;
}

static void empty_fn(void *arg, int ith, int nth) { (void)arg; (void)ith; (void)nth; }

/* ---- weight sets -------------------------------------------------------- */

typedef struct {
    tensor_type t;
    uint8_t *w[N_LAYERS][N_MAT];
    uint8_t *out;
    size_t layer_bytes, out_bytes;
} model;

static void model_init(model *m, tensor_type t) {
    m->t = t;
    m->layer_bytes = 0;
    for (int i = 0; i < N_MAT; i++) m->layer_bytes += row_size(t, LAYER[i].k) * (size_t)LAYER[i].n_rows;
    for (int l = 0; l < N_LAYERS; l++)
        for (int i = 0; i < N_MAT; i++) {
            const size_t b = row_size(t, LAYER[i].k) * (size_t)LAYER[i].n_rows;
            m->w[l][i] = aligned_alloc(64, SP_ALIGN_UP(b, 64));
            fill_weights(t, m->w[l][i], b);
        }
    m->out_bytes = row_size(t, N_EMBD) * (size_t)N_VOCAB;
    m->out = aligned_alloc(64, m->out_bytes);
    fill_weights(t, m->out, m->out_bytes);
}

static void model_free(model *m) {
    for (int l = 0; l < N_LAYERS; l++)
        for (int i = 0; i < N_MAT; i++) free(m->w[l][i]);
    free(m->out);
}

/* one pass over all layers for n_tok tokens (+ the output matrix for 1 token) */
static double model_pass(model *m, thread_pool *pool, int64_t n_tok, int with_output, float *x, float *y,
                         void *scratch) {
    const double t0 = time_s();
    for (int l = 0; l < N_LAYERS; l++)
        for (int i = 0; i < N_MAT; i++)
            matmul(pool, m->w[l][i], m->t, LAYER[i].n_rows, LAYER[i].k, x, n_tok, y, LAYER[i].n_rows, scratch);
    if (with_output) matmul(pool, m->out, m->t, N_VOCAB, N_EMBD, x, 1, y, N_VOCAB, scratch);
    return time_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double best_pass(model *m, thread_pool *pool, int64_t n_tok, int with_output, int reps, float *x, float *y,
                        void *scratch) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t = model_pass(m, pool, n_tok, with_output, x, y, scratch);
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    const int nth = argc > 1 ? atoi(argv[1]) : 2;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    const char *only = argc > 3 ? argv[3] : NULL; /* "q8_0", "q4_K", ... */
    printf("kernels: %s, threads: %d, best of %d\n", kernels_init(), nth, reps);
    thread_pool *pool = pool_create(nth);
    if (!pool) return 1;

    /* bandwidth (measured again between the decode passes below: the host's
     * memory is shared with other machines, so both vary from run to run) */
    bw_job bj = {.bytes = (size_t)1 << 30};
    uint8_t *buf = aligned_alloc(4096, bj.bytes);
    memset(buf, 1, bj.bytes);
    bj.buf = buf;
    double bw = 0;
    for (int r = 0; r < reps + 2; r++) bw = fmax(bw, measure_bw(pool, &bj));
    printf("read bandwidth: %.2f GB/s\n", bw);

    /* dispatch latency */
    for (int r = 0; r < 1000; r++) pool_run(pool, empty_fn, NULL);
    double best_run = 1e30;
    for (int r = 0; r < 5; r++) {
        const double t0 = time_s();
        for (int i = 0; i < 20000; i++) pool_run(pool, empty_fn, NULL);
        best_run = fmin(best_run, (time_s() - t0) / 20000);
    }
    printf("empty pool_run: %.2f us\n", best_run * 1e6);

    const int64_t max_tok = 128;
    float *x = malloc(sizeof(float) * max_tok * N_FF);
    for (int64_t i = 0; i < max_tok * N_FF; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
    float *y = malloc(sizeof(float) * max_tok * N_VOCAB);
    const tensor_type types[] = {SP_TYPE_Q8_0, SP_TYPE_Q4_K, SP_TYPE_Q6_K, SP_TYPE_Q4_0, SP_TYPE_F16};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        if (only ? strcmp(only, type_info(types[ti])->name) != 0 : ti >= 2) continue;
        model m;
        model_init(&m, types[ti]);
        size_t ss = 0;
        for (int i = 0; i < N_MAT; i++) ss = SP_MAX(ss, matmul_scratch_size(m.t, LAYER[i].k, max_tok));
        void *scratch = aligned_alloc(64, SP_ALIGN_UP(ss, 64));
        const double total = (double)(m.layer_bytes * N_LAYERS + m.out_bytes);
        printf("\n== %s: %.3f GB of weights (%.3f GB layers + %.3f GB output)\n", type_info(m.t)->name,
               total / 1e9, m.layer_bytes * N_LAYERS / 1e9, m.out_bytes / 1e9);
        /* decode passes alternating with bandwidth runs */
        double t1 = 1e30, bw2 = 0, best_ratio = 0;
        for (int r = 0; r < 2 * reps; r++) {
            const double b = measure_bw(pool, &bj);
            const double t = model_pass(&m, pool, 1, 1, x, y, scratch);
            bw2 = fmax(bw2, b);
            t1 = fmin(t1, t);
            best_ratio = fmax(best_ratio, total / t / 1e9 / b);
        }
        printf("decode matvec: %.2f ms/token, %.2f GB/s = %.1f%% of the best read bandwidth (%.2f GB/s); "
               "best pass/adjacent-bandwidth ratio %.1f%%\n",
               t1 * 1e3, total / t1 / 1e9, 100.0 * total / t1 / 1e9 / fmax(bw, bw2), fmax(bw, bw2), 100.0 * best_ratio);
        /* n_tok = 1 and n_tok = nt passes alternate; the cost ratio is the
         * median of adjacent pairs (robust to the machine's neighbours) */
        const double l1 = best_pass(&m, pool, 1, 0, reps, x, y, scratch);
        const int64_t toks[] = {2, 3, 4, 5, 8, 16, 128};
        const double macs_per_tok = (double)N_LAYERS * (2.0 * N_EMBD * N_EMBD + 2.0 * N_KV * N_EMBD + 3.0 * N_FF * N_EMBD);
        printf("layers only, n_tok=1: %.2f ms\n", l1 * 1e3);
        for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
            const int64_t nt = toks[i];
            const int r = nt >= 64 ? SP_MAX(3, reps / 2) : reps;
            double best = 1e30, ratios[64];
            for (int j = 0; j < r && j < 64; j++) {
                const double a = model_pass(&m, pool, 1, 0, x, y, scratch);
                const double b = model_pass(&m, pool, nt, 0, x, y, scratch);
                best = fmin(best, b);
                ratios[j] = b / a;
            }
            qsort(ratios, (size_t)SP_MIN(r, 64), sizeof ratios[0], cmp_double);
            printf("layers, n_tok=%3lld: %8.2f ms, cost %5.2fx n_tok=1 (median of adjacent pairs), %7.1f GOPS",
                   (long long)nt, best * 1e3, ratios[SP_MIN(r, 64) / 2], 2.0 * macs_per_tok * nt / best / 1e9);
            if (nt == 128) printf(", prefill %.1f tokens/s (matmuls only, no output layer)", nt / best);
            printf("\n");
        }
        free(scratch);
        model_free(&m);
    }
    free(x);
    free(y);
    free(buf);
    pool_free(pool);
    return 0;
}
