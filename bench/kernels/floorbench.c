/* floorbench.c: how far the AVX2 level's verification pass can go on this
 * CPU (`make floorbench`; not run by `make bench`).
 *
 *   bin/floorbench [threads=2] [rows=65536]
 *
 * The target: a 5-token pass costs at most 1.2x a 1-token step. A
 * step of 1 token streams the weights from memory; a pass of 5 does 5x the
 * multiply-adds on the same bytes, so once its compute exceeds the
 * stream's time the ratio is compute over bandwidth, a property of the
 * machine as much as of the code. This program measures both sides for
 * the packed Q4_K tile (most of a Q4_K_M model) at the AVX2 level:
 *
 *   1. the core clock (a chain of dependent vpaddd, one a cycle);
 *   2. the floor of the tile's instruction stream (floor_avx2.c): its inner
 *      loop alone, in L1, in cycles per 8 rows x 32 weights x token, bare
 *      and with the nibble split the 4-bit format needs;
 *   3. the engine's tile (matmul_packed, Q4_K, AVX2 level): 5 tokens on
 *      a 512 x 2048 matrix in cache, one thread, in the same cycles; then 1
 *      token and 5 tokens on a rows x 2048 matrix streamed from memory by
 *      `threads` threads, as decode and verification run it;
 *   4. the ratios: the engine's measured 5-token / 1-token on that matrix,
 *      and what it would be with the tile at the floor of (2) (its compute
 *      scaled from the engine's in-cache cycles to the floor's; never below
 *      1: the stream stays).
 *
 * The best of many runs each; the machine's bandwidth moves between runs,
 * so run it a few times (BENCHMARKS.md gives the spread). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kernels/kernels.h"
#include "bench_fill.h"
#include "floor.h"

#define ALIGN64(n) (((n) + 63) / 64 * 64)
#define K 2048

/* best of reps: seconds per matmul_packed of rows x K, n_tok tokens */
static double time_tile(thread_pool *pool, const uint8_t *wp, int64_t rows, const float *x, int n_tok, float *y,
                        void *scratch, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = time_s();
        matmul_packed(pool, wp, SP_TYPE_Q4_K, rows, K, x, n_tok, y, rows, scratch);
        const double d = time_s() - t0;
        if (d < best) best = d;
    }
    return best;
}

/* the matrix packed as the engine packs it at load; NULL on failure */
static uint8_t *packed_q4_K(int64_t rows) {
    const type_traits *ti = type_info(SP_TYPE_Q4_K);
    const size_t bytes = (size_t)(rows * K / ti->blck) * ti->block_bytes;
    const size_t pbytes = matmul_packed_size(SP_TYPE_Q4_K, rows, K);
    uint8_t *w = aligned_alloc(64, ALIGN64(bytes));
    uint8_t *wp = pbytes ? aligned_alloc(64, ALIGN64(pbytes)) : NULL;
    if (!w || !wp) {
        free(w);
        free(wp);
        return NULL;
    }
    fill_weights(SP_TYPE_Q4_K, w, bytes);
    matmul_pack(SP_TYPE_Q4_K, w, rows, K, wp);
    free(w);
    return wp;
}

int main(int argc, char **argv) {
    const int nth = argc > 1 ? atoi(argv[1]) : 2;
    const int64_t rows = argc > 2 ? atoll(argv[2]) : 65536;
    if (nth < 1 || nth > 64 || rows < 512 || rows % 512) {
        fprintf(stderr, "usage: %s [threads=2 (1..64)] [rows=65536 (a multiple of 512)]\n", argv[0]);
        return 2;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        fprintf(stderr, "floorbench: this CPU has no AVX2 and FMA: nothing to measure\n");
        return 1;
    }
    kernels_init();
    if (kernels_force("avx2")) {
        fprintf(stderr, "floorbench: the AVX2 level is not available\n");
        return 1;
    }
    if (matmul_packed_size(SP_TYPE_Q4_K, 512, K) == 0) {
        fprintf(stderr, "floorbench: the AVX2 level packs no Q4_K\n");
        return 1;
    }
    const int NT = FLOOR_NT;
    float *x = malloc(sizeof(float) * K * NT), *y = malloc(sizeof(float) * (size_t)rows * NT);
    void *scratch = aligned_alloc(64, ALIGN64(matmul_scratch_size(SP_TYPE_Q4_K, K, NT) + 64));
    uint8_t *small = packed_q4_K(512), *big = packed_q4_K(rows);
    thread_pool *pool = nth > 1 ? pool_create(nth) : NULL;
    if (!x || !y || !scratch || !small || !big || (nth > 1 && !pool)) {
        fprintf(stderr, "floorbench: out of memory\n");
        return 1;
    }
    for (int i = 0; i < K * NT; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;

    const double ghz = floor_clock_ghz();
    const double bare = floor_q4_K_cycles(0, ghz), split = floor_q4_K_cycles(1, ghz);
    /* the engine's tile in cache, one thread: cycles per 256 weights and token */
    const double tile = time_tile(NULL, small, 512, x, NT, y, scratch, 2000) * ghz * 1e9 / (512.0 * K / 256) / NT;
    /* from memory, nth threads */
    const double t1 = time_tile(pool, big, rows, x, 1, y, scratch, 20);
    const double t5 = time_tile(pool, big, rows, x, NT, y, scratch, 20);
    const double gb = (double)matmul_packed_size(SP_TYPE_Q4_K, rows, K) / 1e9;

    printf("| AVX2 level, packed Q4_K, %d tokens | cycles per 8 rows x 32 weights x token |\n|---|---|\n", NT);
    printf("| core clock (dependent vpaddd chain) | %.2f GHz |\n", ghz);
    printf("| floor: maddubs + int16 adds + madd, weights unpacked, in L1 | %.2f |\n", bare);
    printf("| floor with the nibble split | %.2f |\n", split);
    printf("| the engine's tile, 512 x %d in cache, 1 thread | %.2f |\n", K, tile);
    printf("\n| %lld x %d from memory, %d thread(s) | |\n|---|---|\n", (long long)rows, K, nth);
    printf("| 1 token (%.3f GB streamed) | %.2f ms, %.1f GB/s |\n", gb, t1 * 1e3, gb / t1);
    printf("| %d tokens | %.2f ms |\n", NT, t5 * 1e3);
    printf("| %d tokens / 1 token, the engine | %.2fx |\n", NT, t5 / t1);
    /* the 5-token pass's compute scaled from the tile's cycles to the
     * floor's; never below the stream of one token */
    printf("| the same with the tile at the floor with the nibble split | >= %.2fx |\n", fmax(1.0, t5 * split / tile / t1));
    printf("| the same at the bare floor | >= %.2fx |\n", fmax(1.0, t5 * bare / tile / t1));
    printf("{\"ghz\": %.3f, \"floor_bare\": %.3f, \"floor_split\": %.3f, \"tile\": %.3f, \"t1_ms\": %.3f, "
           "\"t5_ms\": %.3f, \"ratio\": %.3f, \"threads\": %d, \"rows\": %lld}\n",
           ghz, bare, split, tile, t1 * 1e3, t5 * 1e3, t5 / t1, nth, (long long)rows);
    pool_free(pool);
    free(small);
    free(big);
    free(x);
    free(y);
    free(scratch);
    return 0;
}
