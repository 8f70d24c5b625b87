/* kernels.h: tensor element types, quantized block layouts, and the compute
 * kernels the forward pass runs on them.
 *
 * Dimension legend used in this file:
 *   k      length of a dot product (a weight row / an activation row)
 *   n_rows rows of a weight matrix (output features)
 *   n_tok  activation rows (tokens in a batch)
 *
 * Every kernel has a plain-C reference (kernels_ref.c) and SIMD variants
 * (the *_avx2.c and *_avx512.c files; kernels_avx2.c and kernels_avx512.c
 * describe each level) picked at run time by kernels_init() from the CPU's
 * features, so one binary runs on any x86-64.
 * tests/unit/test_kernels.c compares every variant with its reference.
 */
#ifndef SP_KERNELS_H
#define SP_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Type ids are GGML's, as stored in GGUF tensor infos. */
typedef enum {
    SP_TYPE_F32 = 0,
    SP_TYPE_F16 = 1,
    SP_TYPE_Q4_0 = 2,
    SP_TYPE_Q5_0 = 6,
    SP_TYPE_Q5_1 = 7,
    SP_TYPE_Q8_0 = 8,
    SP_TYPE_Q4_K = 12,
    SP_TYPE_Q6_K = 14,
    SP_TYPE_Q8_K = 15, /* activation-only type paired with the K-quants */
    SP_TYPE_BF16 = 30,
    SP_TYPE_COUNT = 40 /* one past the largest id GGUF may carry */
} tensor_type;

#define SP_QK4_0 32
#define SP_QK8_0 32
#define SP_QK_K 256
#define SP_K_SCALE_SIZE 12

/* Block layouts, bit-exact with GGUF / ggml. */
typedef struct {
    f16_t d;               /* scale */
    uint8_t qs[SP_QK4_0 / 2]; /* nibbles: low = elements 0..15, high = 16..31; value = q - 8 */
} block_q4_0;            /* 18 bytes / 32 weights */

/* The 5-bit types: element j's low 4 bits in qs (as block_q4_0's
 * nibbles), its fifth bit bit j of qh (little-endian); Q5_0 value =
 * (q - 16) * d, Q5_1 value = q * d + m. Q4_K_M and Q5_K_M files carry
 * them for matrices whose rows are not a multiple of 256 (Gemma 3 1B's
 * 1,152). */
typedef struct {
    f16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_0; /* 22 bytes / 32 weights */

typedef struct {
    f16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_1; /* 24 bytes / 32 weights */

typedef struct {
    f16_t d;           /* scale */
    int8_t qs[SP_QK8_0]; /* value = q * d */
} block_q8_0;        /* 34 bytes / 32 weights */

typedef struct {
    f16_t d;                        /* super-block scale for the 6-bit scales */
    f16_t dmin;                     /* super-block scale for the 6-bit mins */
    uint8_t scales[SP_K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each, packed */
    uint8_t qs[SP_QK_K / 2];         /* 4-bit quants */
} block_q4_K;                     /* 144 bytes / 256 weights */

typedef struct {
    uint8_t ql[SP_QK_K / 2];      /* low 4 bits */
    uint8_t qh[SP_QK_K / 4];      /* high 2 bits */
    int8_t scales[SP_QK_K / 16];  /* 16 8-bit scales */
    f16_t d;                     /* super-block scale */
} block_q6_K;                  /* 210 bytes / 256 weights */

typedef struct {
    float d;                      /* scale (f32, unlike the others) */
    int8_t qs[SP_QK_K];           /* quants */
    int16_t bsums[SP_QK_K / 16];  /* sum of each group of 16 quants */
} block_q8_K;                  /* 292 bytes / 256 values */

typedef struct {
    const char *name;      /* "f32", "q4_K", ... */
    int64_t blck;          /* elements per block */
    size_t block_bytes;    /* bytes per block */
    bool supported;        /* false: known to GGUF, no kernels here */
    tensor_type vec_dot_type;  /* type activations are converted to before a dot
                              product with this weight type (as llama.cpp) */
} type_traits;

/* Traits of a type id, or NULL when the id is not a type this build knows
 * (the caller reports "unsupported tensor type"). */
const type_traits *type_info(int type);

/* Bytes of n elements of type t; n must be a multiple of the block size
 * (returns 0 when it is not, or when the type is unknown). */
size_t row_size(tensor_type t, int64_t n);

/* Selects SIMD variants for this CPU; idempotent and thread-safe.
 * Setting the environment variable SPECULA_KERNELS=ref|avx2|avx512 forces a
 * level (for tests and benchmarks). Returns the chosen level's name. */
const char *kernels_init(void);

/* For tests and benchmarks: whether this CPU can run a level ("ref", "avx2",
 * "avx512"), and switching the whole process to it now (returns 0, or -1 with
 * the level unchanged when the CPU lacks it or the name is unknown). Not to be
 * called while kernels run on other threads. */
bool kernels_available(const char *level);
int kernels_force(const char *level);

/* Conversions of one row of n elements (n a multiple of the block size). */
void dequantize_row(tensor_type t, const void *src, float *dst, int64_t n);
/* Supported for every type with supported == true and Q8_K. Quantizing to
 * Q4_K/Q6_K uses the reference search and is slow: it is for tools/mkmodel,
 * not the hot path. */
void quantize_row(tensor_type t, const float *src, void *dst, int64_t n);

/* s = dot(w_row, x_row): w_row of type t, x_row already in
 * type_info(t)->vec_dot_type. k a multiple of the block size. */
void vec_dot(tensor_type t, int64_t k, float *s, const void *w_row, const void *x_row);

/* ---- thread pool ---------------------------------------------------- */
typedef struct thread_pool thread_pool;
/* A persistent pool: n_threads - 1 workers plus the calling thread.
 * Returns NULL on failure. */
thread_pool *pool_create(int n_threads);
void pool_free(thread_pool *p);
int pool_size(const thread_pool *p);
/* Runs fn(arg, ith, nth) once for every ith in [0, nth), nth =
 * pool_size(p), and returns when all have finished. The calls may run on
 * any of the pool's threads, the caller included, several of them one after
 * another on the same thread: fn must not wait for another ith of the same
 * run (no barrier inside a run), and may keep per-ith scratch. Not
 * reentrant: one pool_run at a time. */
void pool_run(thread_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);
/* Runs so far, of which done by the caller alone because the workers kept
 * stalling it (another process holding the cores), and the stalls. */
void pool_stats(const thread_pool *p, uint64_t *runs, uint64_t *solo_runs, uint64_t *stalls);

/* ---- matrix products ------------------------------------------------ */
/* y[t][r] = dot(W[r][:], x[t][:]) for r < n_rows, t < n_tok.
 *   w: n_rows rows of k elements of type wt, row-major, as stored in GGUF
 *      (ne0 = k, ne1 = n_rows);
 *   x: [n_tok][k] f32;  y: [n_tok][n_rows] f32 (row stride ldy >= n_rows).
 * scratch must hold matmul_scratch_size(wt, k, n_tok) bytes (the
 * activations converted to the vec_dot_type). Runs on every pool thread;
 * pool may be NULL (single-threaded). Never allocates. */
size_t matmul_scratch_size(tensor_type wt, int64_t k, int64_t n_tok);
void matmul(thread_pool *pool, const void *w, tensor_type wt, int64_t n_rows, int64_t k,
               const float *x, int64_t n_tok, float *y, int64_t ldy, void *scratch);

/* Load-time repacking. The active level may keep a quantized matrix in a
 * layout of its own, packed once at load, so that the work of unpacking
 * GGUF blocks (transposes, scale gathers) is not paid on every pass.
 * matmul_packed_size: bytes of the packed matrix, 0 when the active
 * level has no layout for wt (then use matmul on the original rows).
 * matmul_pack: writes it to dst (any alignment) and returns the level's
 * name, a static string; a packed matrix is only valid while that level is
 * active (compare with kernels_level()). matmul_packed: the product
 * of matmul, bit for bit, reading the packed rows; same scratch. */
size_t matmul_packed_size(tensor_type wt, int64_t n_rows, int64_t k);
const char *matmul_pack(tensor_type wt, const void *w, int64_t n_rows, int64_t k, void *dst);
void matmul_packed(thread_pool *pool, const void *wp, tensor_type wt, int64_t n_rows, int64_t k,
                      const float *x, int64_t n_tok, float *y, int64_t ldy, void *scratch);
/* The active level's name (the string kernels_init returned). */
const char *kernels_level(void);

/* Same product, single-threaded, plain C, for tests (converts x itself):
 * the ref level's sums, which are llama.cpp's (February 2025). */
void matmul_ref(const void *w, tensor_type wt, int64_t n_rows, int64_t k,
                   const float *x, int64_t n_tok, float *y, int64_t ldy);
/* The plain-C computation of what `level`'s matmul gives bit for bit:
 * matmul_ref, except where that level sums in an order of its own
 * (avx2: Q8_0, Q4_K and Q6_K matrices of 8-row multiples). 0, or -1 for a
 * level whose sums have no plain-C twin (avx512: its f32 order is checked
 * within a tolerance). */
int matmul_ref_level(const char *level, const void *w, tensor_type wt, int64_t n_rows, int64_t k,
                        const float *x, int64_t n_tok, float *y, int64_t ldy);

#endif
