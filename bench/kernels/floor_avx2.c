/* floor_avx2.c: the instruction floor of the AVX2 packed Q4_K tile
 * (bin/floorbench, floorbench.c says what it is for).
 *
 * Dimensions: one unit is 8 rows x 32 weights (a Q4_K sub-block of the
 * 8-row packed group, qk_avx2.c's q4_Kp8_sub) x 1 token, 256
 * multiply-adds; NT tokens per pass (FLOOR_NT).
 *
 * The loops below are the tile's inner loop and nothing else: per unit and
 * token, 8 broadcasts of 4 activation bytes, 8 maddubs (one row per 32-bit
 * lane, 4 weights each), 7 int16 adds, one madd by the rows' scales and one
 * int32 add; with UNPACK also the nibble split of the weights (an and, or a
 * shift and an and, per 32 bytes, shared by the NT tokens). Everything sits
 * in L1 and nothing else runs: no scales to load, no mins, no FMAs into f32,
 * no prefetch. What the engine's tile adds to this is its overhead; what
 * this costs is the price of the formulation on this CPU. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "floor.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Core clock, GHz: a chain of dependent vpaddd runs one a cycle on every
 * x86 core with AVX2 (latency 1), so chain length / time is the clock the
 * loops below ran at, boost included. Best of 20. */
double floor_clock_ghz(void) {
    double best = 1e30;
    const long n = 2000000; /* x 20 adds */
    for (int r = 0; r < 20; r++) {
        __m256i a = _mm256_set1_epi32(r);
        const double t0 = now_s();
        for (long i = 0; i < n; i++)
            __asm__ volatile("vpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\t"
                             "vpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\t"
                             "vpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\t"
                             "vpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\t"
                             "vpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0\n\tvpaddd %0, %0, %0"
                             : "+x"(a));
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return 20.0 * n / best / 1e9;
}

static inline int32_t load_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* one unit for FLOOR_NT tokens: 32 bytes x 8 groups of weights at qp
 * (HI: their high nibbles), activations xa + t * 512 */
static inline __attribute__((always_inline)) void unit(const uint8_t *qp, const int HI, const int UNPACK,
                                                       const uint8_t *sc, const uint8_t *xa, __m256i *isum) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i scv = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)sc));
    __m256i a[FLOOR_NT];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qp + 32 * g));
        const __m256i q =
            !UNPACK ? raw : HI ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4) : _mm256_and_si256(raw, m4);
#pragma GCC unroll 8
        for (int t = 0; t < FLOOR_NT; t++) {
            const __m256i pr = _mm256_maddubs_epi16(q, _mm256_set1_epi32(load_i32(xa + t * 512 + 4 * g)));
            a[t] = g ? _mm256_add_epi16(a[t], pr) : pr;
            __asm__("" : "+x"(a[t])); /* as the tile: no products computed ahead and spilled */
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < FLOOR_NT; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(a[t], scv));
}

static uint8_t W[1024] __attribute__((aligned(64)));
static uint8_t X[FLOOR_NT * 512] __attribute__((aligned(64)));

/* Cycles per unit and token at clock ghz, best of 50 runs of n units
 * (pairs of sub-blocks, as the tile walks them). unpack: with the nibble
 * split. */
double floor_q4_K_cycles(int unpack, double ghz) {
    for (size_t i = 0; i < sizeof W; i++) W[i] = (uint8_t)(i * 37 + 11);
    for (size_t i = 0; i < sizeof X; i++) X[i] = (uint8_t)(i * 13 + 5);
    __m256i isum[FLOOR_NT];
    for (int t = 0; t < FLOOR_NT; t++) isum[t] = _mm256_setzero_si256();
    const long n = 100000;
    double best = 1e30;
    for (int r = 0; r < 50; r++) {
        const double t0 = now_s();
        if (unpack)
            for (long i = 0; i < n; i += 2) {
                const uint8_t *wp = W + (i & 3) * 128;
                unit(wp, 0, 1, W + 768, X + (i & 6) * 32, isum);
                unit(wp, 1, 1, W + 784, X + (i & 6) * 32 + 32, isum);
            }
        else
            for (long i = 0; i < n; i += 2) {
                const uint8_t *wp = W + (i & 3) * 128;
                unit(wp, 0, 0, W + 768, X + (i & 6) * 32, isum);
                unit(wp + 256, 1, 0, W + 784, X + (i & 6) * 32 + 32, isum);
            }
        __asm__ volatile("" ::"r"(isum) : "memory");
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best * ghz * 1e9 / n / FLOOR_NT;
}
