/* kernels_internal.h: what the SIMD levels (ref, avx2, avx512) export to the
 * dispatcher and to the matmul driver. Not part of the library interface.
 *
 * A level is a table of function pointers (kernel_ops). Every level has an
 * entry for every supported type; a level may reuse another level's function
 * (avx512 uses the avx2 single-row quantized dots, for example).
 *
 * Matmul split of work (see matmul.c):
 *   the driver converts every token row of x into the level's scratch layout
 *   with mm->convert (one call per token), then calls mm->tile on
 *   sub-problems: a range of rows x up to mm->max_nt tokens x a range of K.
 *   The K range is cut so that the activations of one tile stay in L1 while
 *   the tile walks over its rows.
 */
#ifndef SP_KERNELS_INTERNAL_H
#define SP_KERNELS_INTERNAL_H

#include <xmmintrin.h>

#include "kernels/kernels.h"

/* The kernels' function types (kernel_ops.vec_dot, kernel_ops.quantize,
 * mm_kernel.convert); a level declares with them the functions that its
 * files share. */
typedef void vec_dot_kernel(int64_t k, float *s, const void *w, const void *x);
typedef void quant_kernel(const float *src, void *dst, int64_t k);
typedef void convert_kernel(const float *x, int64_t k, void *xs);
typedef vec_dot_kernel *vec_dot_fn;
typedef quant_kernel *quant_fn;

typedef struct {
    /* K is cut into groups of kgroup elements; the scratch row of one token
     * is ceil(k / kgroup) groups of xgroup_bytes each. kgroup == 0 means the
     * kernel takes the whole row at once (scratch row = xrow_bytes0(k)). */
    int64_t kgroup;
    size_t xgroup_bytes;
    size_t (*xrow_bytes0)(int64_t k); /* only when kgroup == 0 */
    int max_nt;                       /* tokens per tile call, <= 8 */
    /* x: [k] f32 -> xs: one scratch row (64-byte aligned) */
    void (*convert)(const float *x, int64_t k, void *xs);
    /* For r < nr, t < nt:
     *   y[t*ldy + r] (accumulate ? += : =) sum_{kk in [k0,k1)} W[r][kk] * x[t][kk]
     * w: row 0 of the tile, rows w_stride bytes apart, as stored (GGUF);
     * xs: scratch row of token 0, xs_stride bytes apart (64-byte multiple);
     * k0 is a multiple of kgroup; k1 is a multiple of kgroup or k. */
    void (*tile)(const uint8_t *w, size_t w_stride, int64_t nr, const uint8_t *xs, size_t xs_stride,
                 int nt, int64_t k, int64_t k0, int64_t k1, float *y, int64_t ldy, int accumulate);
    /* 1: tile calls always get the whole of K (k0 = 0, k1 = k, no
     * accumulation), for a summation order that must not be cut into
     * ranges (F32: see f32_finish) */
    int whole_k;
    /* Optional: the sums of tile() called over [0, k) once per K range
     * [q*kc, min(k, (q+1)*kc)) in order (the first writing y, the others
     * adding to it), bit for bit, but walking each row's ranges one after
     * another: decode and verification stream every weight row in one
     * piece instead of one range of every row at a time. At most
     * SP_MM_KC_RANGES ranges; tokens <= max_nt. */
    void (*tile_kc)(const uint8_t *w, size_t w_stride, int64_t nr, const uint8_t *xs, size_t xs_stride,
                    int nt, int64_t k, int64_t kc, float *y, int64_t ldy);
    /* Optional: tile() for weights the caller has just passed over (prefill's
     * second and later token tiles over an L2-sized chunk of rows), without
     * the software prefetch that tile() runs ahead of a weight stream from
     * memory; the same sums, bit for bit. */
    void (*tile_warm)(const uint8_t *w, size_t w_stride, int64_t nr, const uint8_t *xs, size_t xs_stride,
                      int nt, int64_t k, int64_t k0, int64_t k1, float *y, int64_t ldy, int accumulate);
} mm_kernel;
#define SP_MM_KC_RANGES 8

typedef struct {
    const char *name;
    vec_dot_fn vec_dot[SP_TYPE_COUNT];
    /* activation-side quantizers (f32 -> vec_dot_type rows), bit-exact with
     * the reference at every level */
    quant_fn quantize[SP_TYPE_COUNT];
    const mm_kernel *mm[SP_TYPE_COUNT];
    /* For a matrix whose row count is a multiple of 8, where set: the
     * summation order the level uses for such a matrix: llama.cpp's for
     * Q4_0 (it repacks those into 8-row interleaved blocks at load and sums
     * them in another order than other Q4_0 matrices), the avx2 level's own
     * for Q8_0, Q4_K and Q6_K (kernels_avx2.c). NULL: mm[] serves every
     * shape. */
    const mm_kernel *mm_rows8[SP_TYPE_COUNT];
    /* Load-time repacking (matmul_pack), where set: the kernel for rows
     * in the level's own layout, their size, and the packing itself
     * (whole rows of GGUF blocks -> packed rows; the same sums bit for bit
     * as mm[] on the original rows). */
    const mm_kernel *mm_packed[SP_TYPE_COUNT];
    size_t (*packed_row_size)(tensor_type t, int64_t k);
    void (*pack_rows)(tensor_type t, const void *src, void *dst, int64_t n_rows, int64_t k);
    /* > 1: only matrices whose row count is a multiple of it are packed
     * (the avx2 level interleaves 8 rows); the others keep the file's rows */
    int packed_rows_multiple;
    /* The plain-C twins of this level's sums (matmul_ref_level):
     * twin_rows8[t], where set, for mm_rows8[t] when its order is the
     * level's own (not the ref level's); no_twin: the level's f32 order has
     * none (checked within a tolerance instead). */
    const mm_kernel *twin_rows8[SP_TYPE_COUNT];
    int no_twin;
} kernel_ops;

/* The kernel for a matrix of n_rows rows of type wt at level o. */
static inline const mm_kernel *mm_for(const kernel_ops *o, tensor_type wt, int64_t n_rows) {
    return n_rows % 8 == 0 && o->mm_rows8[wt] ? o->mm_rows8[wt] : o->mm[wt];
}

extern const kernel_ops kernel_ops_ref;
extern const kernel_ops kernel_ops_avx2;
extern const kernel_ops kernel_ops_avx512;
/* The avx2 level's functions that the avx512 level reuses (every CPU with
 * AVX-512 has AVX2): its Q8_0 quantizer and single-row quantized dots. */
quant_kernel avx2_quantize_q8_0;
vec_dot_kernel avx2_vec_dot_q8_0, avx2_vec_dot_q4_0, avx2_vec_dot_q4_K, avx2_vec_dot_q6_K, avx2_vec_dot_q5_0,
    avx2_vec_dot_q5_1;
/* kernels_ref.c: the twins of the avx2 level's own orders for matrices of
 * 8-row multiples (Q8_0, Q4_K, Q6_K) */
extern const mm_kernel ref_mm_q8_0_rows8;
/* The 5-bit types' tiles at the avx2 level; the avx512 level has its own
 * for Q5_0 and uses the avx2 one for Q5_1 (rare: Q5_K_M's fallback). */
extern const mm_kernel avx2_mm_q5_0, avx2_mm_q5_1;
extern const mm_kernel ref_mm_q4_K_rows8;
extern const mm_kernel ref_mm_q6_K_rows8;

/* The level chosen by kernels_init() (initialising on first use). */
const kernel_ops *kernel_ops_get(void);

/* ---- reference implementations (kernels_ref.c), used by every level ---- */
void ref_quantize_q8_0(const float *x, void *y, int64_t k);
void ref_quantize_q8_K(const float *x, void *y, int64_t k);
void ref_quantize_q4_0(const float *x, void *y, int64_t k);
void ref_quantize_q5_0(const float *x, void *y, int64_t k);
void ref_quantize_q5_1(const float *x, void *y, int64_t k);
void ref_quantize_q4_K(const float *x, void *y, int64_t k);
void ref_quantize_q6_K(const float *x, void *y, int64_t k);
void ref_quantize_f16(const float *x, void *y, int64_t k);
void ref_quantize_bf16(const float *x, void *y, int64_t k);
void ref_quantize_f32(const float *x, void *y, int64_t k);
void ref_dequantize(tensor_type t, const void *src, float *dst, int64_t n);

/* Round to nearest, ties to even, for |f| < 2^22 (as ggml's nearest_int). */
static inline int kq_nearest_int(float f) {
    float v = f + 12582912.f; /* 1.5 * 2^23: the sum's low mantissa bits hold the rounded value */
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* 6-bit scale and min j (0..7) of a Q4_K super-block (ggml get_scale_min_k4). */
static inline void q4_K_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* All 8 scales (out[0..7]) and mins (out[8..15]) of a Q4_K super-block at
 * once: the same unpacking on 32-bit words. */
static inline void q4_K_unpack_scales(const uint8_t *q, uint8_t out[16]) {
    uint32_t u0, u1, u2;
    memcpy(&u0, q, 4);
    memcpy(&u1, q + 4, 4);
    memcpy(&u2, q + 8, 4);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu;
    const uint32_t m_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    memcpy(out, &sc_lo, 4);
    memcpy(out + 4, &sc_hi, 4);
    memcpy(out + 8, &m_lo, 4);
    memcpy(out + 12, &m_hi, 4);
}

/* The 256 6-bit quants (0..63) of a Q6_K super-block in element order:
 * element 128 n + 32 c + l has its low 4 bits in ql[64 n + 32 (c & 1) + l]
 * (high nibble for c >= 2) and its high 2 in bits 2c of qh[32 n + l]. */
static inline void q6_K_unpack(const block_q6_K *b, uint8_t q[256]) {
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++) {
            const uint8_t l0 = b->ql[64 * n + l], l1 = b->ql[64 * n + 32 + l], h = b->qh[32 * n + l];
            q[128 * n + l] = (uint8_t)((l0 & 0xF) | (h & 3) << 4);
            q[128 * n + 32 + l] = (uint8_t)((l1 & 0xF) | (h >> 2 & 3) << 4);
            q[128 * n + 64 + l] = (uint8_t)(l0 >> 4 | (h >> 4 & 3) << 4);
            q[128 * n + 96 + l] = (uint8_t)(l1 >> 4 | (h >> 6) << 4);
        }
}

/* F32 weights: the summation order of ggml's vec_dot_f32 in llama.cpp's
 * AVX-512 build, the order its CPU backend uses for single-token steps, at
 * every level of Specula and in any batch:
 *   - element i < np = k - k % 64 goes to partial sum p[i % 64], one FMA at
 *     a time in order of i (4 vectors of 16 lanes);
 *   - v[l] = (p[l] + p[32 + l]) + (p[16 + l] + p[48 + l])   (l < 16);
 *   - v summed as GCC's _mm512_reduce_add_ps does: halves, then quarters,
 *     then (q0 + q2) + (q1 + q3);
 *   - the tail elements i >= np added one FMA at a time.
 * Why: on the trained reference model (../shared/reference/trained) one
 * f16 rounding of a V-projection output depends on this order; with one
 * 16-lane chain Specula was 2.1e-3 from llama.cpp at one step (limit 2e-3).
 * Cost: 4 accumulators per (row, token) instead of 1, so F32 tiles are
 * smaller (AVX-512: R x NT <= 6; AVX2: one row and token at a time), and K
 * is not cut into L1-sized ranges: F32 prefill ~0.8x (a 1024-wide F32
 * model, 483-token prompt, 2 threads: 581-687 -> 445-543 tokens/s), decode
 * unchanged (memory-bound). F32 weights are rare outside reference files.
 * This finishes a dot from v and the tail. */
static inline float f32_finish(const float v[16], const float *w, const float *x, int64_t n_tail) {
    float h[8], q[4];
    for (int l = 0; l < 8; l++) h[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; l++) q[l] = h[l + 4] + h[l];
    float s = (q[0] + q[2]) + (q[1] + q[3]);
    for (int64_t i = 0; i < n_tail; i++) s = __builtin_fmaf(w[i], x[i], s);
    return s;
}

/* Software prefetch of the weight stream at the SIMD levels, in two steps:
 * into L2 SP_PF_L2 bytes ahead of the block or group being read, then into
 * L1 SP_PF_L1 bytes ahead. Measured with 2 threads over ~1 GB of Q8_0 at
 * the avx512 level (decode matvec as a fraction of the read bandwidth
 * measured just before, median of 6): no prefetch 72%, L1 only at 2-4 KiB
 * 83-85%, L1 2 KiB + L2 8 KiB 99%. The hardware prefetchers alone do not
 * keep enough lines in flight while the core also spends ~50 vector ops
 * per 544 bytes. */
#define SP_PF_L1 2048
#define SP_PF_L2 8192

/* Prefetch the `bytes` (a constant) that follow p + SP_PF_L1 (to L1) and
 * p + SP_PF_L2 (to L2). Addresses past the end of the matrix are harmless:
 * prefetches do not fault. */
static inline __attribute__((always_inline)) void prefetch_ahead(const void *p, const int bytes) {
    const char *q1 = (const char *)p + SP_PF_L1, *q2 = (const char *)p + SP_PF_L2;
    _Pragma("GCC unroll 16")
    for (int l = 0; l < (bytes + 63) / 64; l++) {
        _mm_prefetch(q1 + 64 * l, _MM_HINT_T0);
        _mm_prefetch(q2 + 64 * l, _MM_HINT_T1);
    }
}

/* A stall: the caller waited for started slots longer than this AND longer
 * than it had worked on the run itself, i.e. a worker that lost its core.
 * The kernels hand out work in chunks from shared counters, so a worker
 * that keeps its core finishes within one chunk of the caller; but a chunk
 * of a big batch (a prefill chunk, 64 sequences' attention) takes
 * milliseconds, and an absolute bound alone took those tails for stalls:
 * on a quiet machine the pool then ran solo for most of a 64-sequence
 * batch (10,240 of 16,790 runs; 1.2 cores, 18.0 s against 14.7 s) or of a
 * prefill (1.0 core, half the tokens/s). */
#define SP_POOL_STALL_NS 300000
static inline bool pool_stalled(uint64_t wait_ns, uint64_t work_ns) {
    return wait_ns > SP_POOL_STALL_NS && wait_ns > work_ns;
}

#define SP_ALIGN_UP(n, a) (((n) + (a) - 1) / (a) * (a))

#endif
