/* membw_avx2.c: the memory read bandwidth the decode roofline is measured
 * against: threads stream disjoint slices of a buffer far larger than the
 * caches with 256-bit loads and sum them (so the loads cannot be elided). */
#include <immintrin.h>
#include <stddef.h>

double bench_sum_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float t[8];
    _mm256_storeu_ps(t, s);
    double r = 0;
    for (int k = 0; k < 8; k++) r += t[k];
    return r;
}
