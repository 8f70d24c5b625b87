/* tsan.h: what an uninstrumented kernel reads and writes, told to
 * ThreadSanitizer by its caller.
 *
 * `make tsan` builds the kernel files (kernels_ref.c, the *_avx2.c and
 * *_avx512.c files) without TSan's instrumentation. Instrumented, every
 * load is checked one by one, and gcc checks a 32-byte vector load through
 * the slow range path: the bundled pair's F16 matmul spent 85% of its time
 * there, and test_spec_engine ran past 2,400 s under TSan on a Zen 3 (161-196 s
 * with the kernels uninstrumented and their calls declared as below).
 *
 * A kernel is a pure function of its arguments. kernels_internal.h says
 * what each one reads and writes, and it shares nothing between calls.
 * Its callers (matmul.c, dispatch.c: instrumented) declare exactly that
 * around every call, at every level (the reference included), except a
 * matmul's reads of the weights, which nothing writes after the load
 * (declared per chunk, they doubled that test's time). So TSan
 * still reports two threads' chunks that overlap, a tile that reads a
 * token's activations before their conversion is published, or a KV row
 * written while another thread reads it. What it no longer sees is a
 * kernel that strays outside its contract; test_kernels compares every
 * level with the reference, and ASan (which keeps the kernels
 * instrumented) checks their bounds.
 *
 * Without TSan the macros are empty and their arguments never evaluated.
 */
#ifndef SP_KERNELS_TSAN_H
#define SP_KERNELS_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define SP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SP_TSAN 1
#endif
#endif

#ifdef SP_TSAN
/* the TSan runtime's own entry points (gcc's instrumentation calls them) */
void __tsan_read_range(void *addr, unsigned long size);
void __tsan_write_range(void *addr, unsigned long size);
#define SP_TSAN_READ(p, n) __tsan_read_range((void *)(p), (unsigned long)(n))
#define SP_TSAN_WRITE(p, n) __tsan_write_range((void *)(p), (unsigned long)(n))
#else
/* the arguments are not evaluated: nothing is left on a hot path */
#define SP_TSAN_READ(p, n) ((void)0)
#define SP_TSAN_WRITE(p, n) ((void)0)
#endif

#endif
