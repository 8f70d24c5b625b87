/* tilebench.c: one quantized matmul tile shape, compute-bound by default
 * (`make tilebench`; not run by `make bench`).
 *
 *   bin/tilebench TYPE N_TOK [rows=512] [k=2048] [reps=400] [threads=1]
 *   TYPE: q8_0 | q4_0 | q4_K | q6_K
 *
 * By default one thread and one rows x k matrix of random well-formed
 * blocks (1-2 MB, in L2/L3, so memory is out of the picture; blocks from
 * bench_fill.h, as kbench) times N_TOK tokens; prints the
 * best of reps timings of 10 back-to-back matmul calls, per call and per
 * 256 weights and token. The best of many short runs is what survives a
 * shared machine; compare two builds by running them alternately, several
 * times each (BENCHMARKS.md's tile figures are taken that way).
 * With threads > 1 the calls run on a pool of that many threads, as the
 * engine runs them: a matrix far past the caches then times the tile
 * streamed from memory by every core at once (N_TOK 5 against 1 is a
 * verification pass against a decode step, without the rest of the model).
 * SPECULA_KERNELS=ref|avx2|avx512 selects the level. The matrix is packed
 * as the engine packs it at load where the level has a layout for the type
 * (what decode and verification run on); SPECULA_REPACK=0 keeps the file's
 * blocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels/kernels.h"
#include "bench_fill.h"

#define ALIGN64(n) (((n) + 63) / 64 * 64)

static int parse_type(const char *s, tensor_type *t) {
    static const struct {
        const char *name;
        tensor_type t;
    } types[] = {{"q8_0", SP_TYPE_Q8_0}, {"q4_0", SP_TYPE_Q4_0}, {"q4_K", SP_TYPE_Q4_K}, {"q6_K", SP_TYPE_Q6_K}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(s, types[i].name)) {
            *t = types[i].t;
            return 0;
        }
    return -1;
}

int main(int argc, char **argv) {
    tensor_type t;
    if (argc < 3 || parse_type(argv[1], &t) || atoi(argv[2]) < 1 || atoi(argv[2]) > 64) {
        fprintf(stderr, "usage: %s q8_0|q4_0|q4_K|q6_K N_TOK(1..64) [rows=512] [k=2048] [reps=400] [threads=1]\n",
                argv[0]);
        return 2;
    }
    const int n_tok = atoi(argv[2]);
    const int64_t rows = argc > 3 ? atoll(argv[3]) : 512, k = argc > 4 ? atoll(argv[4]) : 2048;
    const int reps = argc > 5 ? atoi(argv[5]) : 400, nth = argc > 6 ? atoi(argv[6]) : 1;
    const type_traits *ti = type_info(t);
    if (rows < 16 || rows % 16 || k < 256 || k % 256 || reps < 1 || nth < 1 || nth > 64) {
        fprintf(stderr, "tilebench: rows must be a multiple of 16, k of 256, reps >= 1, threads 1..64\n");
        return 2;
    }
    const char *level = kernels_init();
    const size_t bytes = (size_t)(rows * k / ti->blck) * ti->block_bytes;
    const size_t sbytes = matmul_scratch_size(t, k, n_tok) + 64;
    uint8_t *w = aligned_alloc(64, ALIGN64(bytes));
    float *x = malloc(sizeof(float) * (size_t)(k * n_tok)), *y = malloc(sizeof(float) * (size_t)(rows * n_tok));
    void *scratch = aligned_alloc(64, ALIGN64(sbytes));
    if (!w || !x || !y || !scratch) {
        fprintf(stderr, "tilebench: out of memory\n");
        return 1;
    }
    fill_weights(t, w, bytes);
    for (int64_t i = 0; i < k * n_tok; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
    const char *rp = getenv("SPECULA_REPACK");
    const size_t pbytes = rp && !strcmp(rp, "0") ? 0 : matmul_packed_size(t, rows, k);
    uint8_t *wp = pbytes ? aligned_alloc(64, ALIGN64(pbytes)) : NULL;
    if (pbytes && !wp) {
        fprintf(stderr, "tilebench: out of memory\n");
        return 1;
    }
    if (wp) matmul_pack(t, w, rows, k, wp);
    thread_pool *pool = nth > 1 ? pool_create(nth) : NULL;
    if (nth > 1 && !pool) {
        fprintf(stderr, "tilebench: cannot start %d threads\n", nth);
        return 1;
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = time_s();
        for (int i = 0; i < 10; i++) {
            if (wp) matmul_packed(pool, wp, t, rows, k, x, n_tok, y, rows, scratch);
            else matmul(pool, w, t, rows, k, x, n_tok, y, rows, scratch);
        }
        const double d = (time_s() - t0) / 10;
        if (d < best) best = d;
    }
    printf("%s%s %s %lld x %lld, %d token(s), %d thread(s): %.1f us per matmul, %.2f ns per 256 weights and token\n",
           level, wp ? " packed" : "", argv[1], (long long)rows, (long long)k, n_tok, nth, best * 1e6,
           best * 1e9 / (double)(rows * k / 256) / n_tok);
    pool_free(pool);
    free(w);
    free(wp);
    free(x);
    free(y);
    free(scratch);
    return 0;
}
