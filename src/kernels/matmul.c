/* matmul.c: the sp_matmul driver: activation conversion, work split across
 * the pool, cache blocking. The arithmetic is in the level's tile kernel.
 *
 * Work split: the rows of W are cut into chunks of up to ~256 KiB of weights
 * (so that a chunk stays in L2 while every token tile passes over it) and at
 * least 4 chunks per thread when there are enough rows; threads take their
 * first chunk statically and the rest from an atomic counter, which keeps
 * both cores busy when one of them is shared with another process. Chunk
 * boundaries are multiples of 16 rows so that two threads never write the
 * same 64-byte line of y.
 *
 * Inside a chunk: tokens in tiles of mm->max_nt (the kernel reuses each
 * weight block it loads for every token of the tile), and K in ranges small
 * enough that the tile's converted activations (nt x kc) stay in L1 (~24 KiB)
 * while the kernel walks the chunk's rows. Decode (n_tok == 1) is one tile
 * over the whole K: a pure weight stream.
 *
 * Activations are converted once per call into scratch (layout chosen by the
 * level), by the calling thread for a single token (a few microseconds) or by
 * all threads for a batch, followed by a spin barrier inside the same pool
 * run (cheaper than a second dispatch).
 */
#include <sched.h>
#include <stdatomic.h>

#include "kernels_internal.h"

#define SP_MM_L1_X_BUDGET (24 * 1024)   /* bytes of activations a tile keeps in L1 */
#define SP_MM_CHUNK_BYTES (256 * 1024)  /* weight bytes per row chunk (L2 resident) */

static size_t xrow_stride(const sp_mm_kernel *mm, int64_t k) {
    const size_t b = mm->kgroup ? (size_t)((k + mm->kgroup - 1) / mm->kgroup) * mm->xgroup_bytes
                                : mm->xrow_bytes0(k);
    return SP_ALIGN_UP(b, 64);
}

size_t sp_matmul_scratch_size(sp_type wt, int64_t k, int64_t n_tok) {
    const sp_type_traits *tt = sp_type_info(wt);
    SP_ASSERT(tt && tt->supported);
    /* The largest layout of any level, so that a level forced after sizing
     * (tests, benchmarks) still fits; +64 to align the caller's pointer. */
    const sp_kernel_ops *levels[] = {&sp_ops_ref, &sp_ops_avx2, &sp_ops_avx512};
    size_t row = 0;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        row = SP_MAX(row, xrow_stride(levels[i]->mm[wt], k));
    return row * (size_t)SP_MAX(n_tok, 1) + 64;
}

typedef struct {
    const sp_mm_kernel *mm;
    const uint8_t *w;
    size_t w_stride;
    int64_t n_rows, k;
    const float *x;
    int64_t n_tok;
    uint8_t *xs;       /* [n_tok][xs_stride] converted activations */
    size_t xs_stride;
    float *y;
    int64_t ldy;
    int64_t rows_per_chunk, n_chunks;
    int64_t kc;        /* K elements per K range (multiple of kgroup) */
    int convert_in_run;
    _Atomic int64_t next_chunk;
    _Atomic int arrived;
} mm_job;

static void mm_chunk(const mm_job *j, int64_t c) {
    const sp_mm_kernel *mm = j->mm;
    const int64_t r0 = c * j->rows_per_chunk;
    const int64_t nr = SP_MIN(j->n_rows, r0 + j->rows_per_chunk) - r0;
    const uint8_t *w = j->w + (size_t)r0 * j->w_stride;
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += mm->max_nt) {
        const int nt = (int)SP_MIN((int64_t)mm->max_nt, j->n_tok - t0);
        for (int64_t k0 = 0; k0 < j->k; k0 += j->kc) {
            const int64_t k1 = SP_MIN(j->k, k0 + j->kc);
            mm->tile(w, j->w_stride, nr, j->xs + (size_t)t0 * j->xs_stride, j->xs_stride, nt, j->k, k0,
                     k1, j->y + t0 * j->ldy + r0, j->ldy, k0 > 0);
        }
    }
}

static void mm_worker(void *arg, int ith, int nth) {
    mm_job *j = arg;
    if (j->convert_in_run) {
        for (int64_t t = ith; t < j->n_tok; t += nth)
            j->mm->convert(j->x + t * j->k, j->k, j->xs + (size_t)t * j->xs_stride);
        /* barrier: every token must be converted before any tile reads it */
        atomic_fetch_add_explicit(&j->arrived, 1, memory_order_acq_rel);
        for (unsigned i = 0; atomic_load_explicit(&j->arrived, memory_order_acquire) < nth; i++) {
            __builtin_ia32_pause();
            if ((i & 255) == 255) sched_yield(); /* ~10 us: a peer may be descheduled */
        }
    }
    for (int64_t c = ith; c < j->n_chunks;
         c = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed))
        mm_chunk(j, c);
}

void sp_matmul(sp_pool *pool, const void *w, sp_type wt, int64_t n_rows, int64_t k, const float *x,
               int64_t n_tok, float *y, int64_t ldy, void *scratch) {
    const sp_type_traits *tt = sp_type_info(wt);
    SP_ASSERT(tt && tt->supported && k > 0 && k % tt->blck == 0 && ldy >= n_rows);
    if (n_rows <= 0 || n_tok <= 0) return;
    const sp_mm_kernel *mm = sp_kernel_ops_get()->mm[wt];
    const int nth = sp_pool_size(pool);

    mm_job j = {0};
    j.mm = mm;
    j.w = w;
    j.w_stride = sp_row_size(wt, k);
    j.n_rows = n_rows;
    j.k = k;
    j.x = x;
    j.n_tok = n_tok;
    j.xs = (uint8_t *)SP_ALIGN_UP((uintptr_t)scratch, 64);
    j.xs_stride = xrow_stride(mm, k);
    j.y = y;
    j.ldy = ldy;

    /* rows per chunk: ~SP_MM_CHUNK_BYTES of weights, >= 4 chunks per thread
     * when the matrix is big enough, a multiple of 16 rows */
    int64_t rpc = (int64_t)(SP_MM_CHUNK_BYTES / j.w_stride) / 16 * 16;
    rpc = SP_MIN(rpc, (n_rows + 4 * nth - 1) / (4 * nth));
    rpc = SP_MAX(16, SP_ALIGN_UP(rpc, 16));
    j.rows_per_chunk = rpc;
    j.n_chunks = (n_rows + rpc - 1) / rpc;
    atomic_init(&j.next_chunk, nth);
    atomic_init(&j.arrived, 0);

    /* K range per tile call: the tile's activations fit the L1 budget */
    if (mm->kgroup) {
        const int64_t nt = SP_MIN((int64_t)mm->max_nt, n_tok);
        const int64_t ngroups = (k + mm->kgroup - 1) / mm->kgroup;
        int64_t g = (int64_t)(SP_MM_L1_X_BUDGET / ((size_t)nt * mm->xgroup_bytes));
        g = SP_MAX(1, SP_MIN(g, ngroups));
        const int64_t nranges = (ngroups + g - 1) / g;
        g = (ngroups + nranges - 1) / nranges; /* equal ranges */
        j.kc = g * mm->kgroup;
    } else {
        j.kc = k;
    }

    if (nth == 1 || n_tok == 1) {
        for (int64_t t = 0; t < n_tok; t++) mm->convert(x + t * k, k, j.xs + (size_t)t * j.xs_stride);
        j.convert_in_run = 0;
    } else {
        j.convert_in_run = 1;
    }
    sp_pool_run(pool, mm_worker, &j);
}
