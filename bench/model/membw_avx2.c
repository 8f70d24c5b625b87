/* membw_avx2.c: the memory read bandwidth the decode roofline is measured
 * against: threads stream disjoint slices of a buffer far larger than the
 * caches with 256-bit loads and sum them (so the loads cannot be elided).
 * The loop prefetches the way the matvec kernels do (2 KiB ahead into L1,
 * 8 KiB ahead into L2): without it the hardware prefetchers keep too few
 * lines in flight and the "roofline" would understate what the kernels
 * actually reach (measured: >100% of a prefetch-less loop). */
#include <immintrin.h>
#include <stddef.h>

double bench_sum_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* 128 bytes: two cache lines */
        _mm_prefetch((const char *)(p + i) + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)(p + i) + 2048 + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(p + i) + 8192, _MM_HINT_T1);
        _mm_prefetch((const char *)(p + i) + 8192 + 64, _MM_HINT_T1);
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
