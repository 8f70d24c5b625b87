/* dispatch.c: picks the SIMD level once per process and routes the public
 * single-row entry points (vec_dot, quantize_row, dequantize_row)
 * to it.
 *
 * Levels: "avx512" (AVX-512 F/BW/VL/DQ + VNNI, plus AVX2/FMA/F16C), "avx2"
 * (AVX2 + FMA + F16C), "ref" (plain C). The best one the CPU (and the OS:
 * __builtin_cpu_supports checks XCR0) supports is chosen unless
 * SPECULA_KERNELS names another; a level the CPU lacks is refused with a
 * warning. The choice is a single pointer read with acquire semantics, so
 * the per-call cost of going through the table is one load and an indirect
 * call.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "kernels/kernels_internal.h"
#include "kernels/tsan.h"

static _Atomic(const kernel_ops *) g_ops;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static bool cpu_has(const char *level) {
    __builtin_cpu_init();
    if (!strcmp(level, "ref")) return true;
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    if (!strcmp(level, "avx2")) return avx2;
    if (!strcmp(level, "avx512"))
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni");
    return false;
}

static const kernel_ops *ops_by_name(const char *level) {
    if (!strcmp(level, "ref")) return &kernel_ops_ref;
    if (!strcmp(level, "avx2")) return &kernel_ops_avx2;
    if (!strcmp(level, "avx512")) return &kernel_ops_avx512;
    return NULL;
}

static const kernel_ops *best_ops(void) {
    if (cpu_has("avx512")) return &kernel_ops_avx512;
    if (cpu_has("avx2")) return &kernel_ops_avx2;
    return &kernel_ops_ref;
}

static void init_once(void) {
    const kernel_ops *ops = best_ops();
    const char *env = getenv("SPECULA_KERNELS");
    if (env && *env) {
        const kernel_ops *want = ops_by_name(env);
        if (!want)
            fprintf(stderr, "specula: SPECULA_KERNELS=%s is not a level (ref|avx2|avx512); using %s\n",
                    env, ops->name);
        else if (!cpu_has(env))
            fprintf(stderr, "specula: SPECULA_KERNELS=%s: this CPU lacks it; using %s\n", env, ops->name);
        else
            ops = want;
    }
    atomic_store_explicit(&g_ops, ops, memory_order_release);
}

const char *kernels_init(void) {
    pthread_once(&g_once, init_once);
    return atomic_load_explicit(&g_ops, memory_order_acquire)->name;
}

const kernel_ops *kernel_ops_get(void) {
    const kernel_ops *o = atomic_load_explicit(&g_ops, memory_order_acquire);
    if (__builtin_expect(o != NULL, 1)) return o;
    kernels_init();
    return atomic_load_explicit(&g_ops, memory_order_acquire);
}

bool kernels_available(const char *level) { return level && ops_by_name(level) && cpu_has(level); }

int kernels_force(const char *level) {
    if (!kernels_available(level)) return -1;
    kernels_init(); /* so that a later init cannot override the forced level */
    atomic_store_explicit(&g_ops, ops_by_name(level), memory_order_release);
    return 0;
}

/* ---- public single-row entry points ------------------------------------ */

void dequantize_row(tensor_type t, const void *src, float *dst, int64_t n) {
    const type_traits *tt = type_info(t);
    SP_ASSERT(tt && (tt->supported || t == SP_TYPE_Q8_K) && n % tt->blck == 0);
    SP_TSAN_READ(src, row_size(t, n)); /* the kernels are not instrumented under TSan: tsan.h */
    SP_TSAN_WRITE(dst, (size_t)n * sizeof(float));
    ref_dequantize(t, src, dst, n);
}

void quantize_row(tensor_type t, const float *src, void *dst, int64_t n) {
    const type_traits *tt = type_info(t);
    SP_ASSERT(tt && (tt->supported || t == SP_TYPE_Q8_K) && n % tt->blck == 0);
    SP_TSAN_READ(src, (size_t)n * sizeof(float));
    SP_TSAN_WRITE(dst, row_size(t, n));
    const quant_fn q = kernel_ops_get()->quantize[t];
    if (q) {
        q(src, dst, n);
        return;
    }
    switch (t) { /* weight-only types: reference quantizers (tools, not the hot path) */
    case SP_TYPE_Q4_0: ref_quantize_q4_0(src, dst, n); return;
    case SP_TYPE_Q5_0: ref_quantize_q5_0(src, dst, n); return;
    case SP_TYPE_Q5_1: ref_quantize_q5_1(src, dst, n); return;
    case SP_TYPE_Q4_K: ref_quantize_q4_K(src, dst, n); return;
    case SP_TYPE_Q6_K: ref_quantize_q6_K(src, dst, n); return;
    default: SP_ASSERT(!"quantize: no quantizer for type");
    }
}

void vec_dot(tensor_type t, int64_t k, float *s, const void *w_row, const void *x_row) {
    /* Called per (query, key) pair by attention: keep the checks to a table
     * lookup (the table is NULL for unsupported types). */
    SP_ASSERT((unsigned)t < SP_TYPE_COUNT);
    const vec_dot_fn f = kernel_ops_get()->vec_dot[t];
    SP_ASSERT(f);
    SP_TSAN_READ(w_row, row_size(t, k));
    SP_TSAN_READ(x_row, row_size(type_info(t)->vec_dot_type, k));
    SP_TSAN_WRITE(s, sizeof(float));
    f(k, s, w_row, x_row);
}
