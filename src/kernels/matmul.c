/* matmul.c: the matmul driver: activation conversion, work split across
 * the pool, cache blocking. The arithmetic is in the level's tile kernel.
 *
 * Work split: the rows of W are cut into chunks of 16-row multiples (so two
 * threads never write the same 64-byte line of y), planned before the run:
 * chunks of up to ~256 KiB of weights (a chunk stays in L2 while every token
 * tile passes over it), then, over the last part of the matrix, "guided"
 * chunks (half of an equal share of what is left, down to ~32 KiB), so that
 * the threads finish within a few microseconds of each other. Every chunk
 * comes from an atomic counter, which keeps both cores busy when one of
 * them is slowed down by something else (and lets a slot the pool starts
 * late find its work done: see pool.c). (With fixed 256 KiB chunks the wait at the end of each decode matmul
 * averaged half a chunk, ~10 us, a few percent of a decode step.)
 * Decode and verification (n_tok <= max_nt, 2+ threads): the rows are first
 * cut into one contiguous region per thread, each planned as above for one
 * thread; a thread streams its own region in order (so the kernel's
 * prefetch past the end of one chunk is the start of its next one, not the
 * other core's chunk), prefetches the first 8 KiB of it on entry, then
 * helps with what is left of the others. Alternating bench runs (median of
 * 8 pairs): decode / roofline 84% -> 88% (Q8_0), 79% -> 80% (Q4_K, noise).
 *
 * Inside a chunk: tokens in tiles of mm->max_nt (the kernel reuses each
 * weight block it loads for every token of the tile), and, for prefill, K in
 * ranges small enough that the tile's converted activations (nt x kc) stay
 * in L1 while the kernel walks the chunk's rows. Decode and verification
 * (n_tok <= max_nt) are one tile over the whole K: a contiguous weight
 * stream.
 *
 * Activations are converted once per call into scratch (layout chosen by the
 * level), by the calling thread for a single token (a few microseconds) or by
 * all threads for a batch (tokens claimed from a counter), followed by a wait
 * for the last conversion inside the same pool run (cheaper than a second
 * dispatch).
 */
#include <sched.h>
#include <stdint.h>
#include <stdatomic.h>

#include "kernels/kernels_internal.h"
#include "kernels/tsan.h"

/* Bytes of converted activations one tile call works on (max_nt tokens x
 * a K range): 24 KiB, so that they stay in L1 (48 KiB) next to the weight
 * stream; 64 KiB was 20-30% slower at 128 tokens. The same ranges serve
 * decode and verification (batch-independent rounding, see matmul), but
 * there a kernel with tile_kc walks each row's ranges one after another, so
 * the weights still stream row by row in one piece: cutting them, one range
 * of every row at a time, had cost verification of 5 tokens 1.26x -> 1.2x
 * on Q8_0 and 1.5x -> 1.27x on Q4_K (measured against an uncut K). */
#define SP_MM_X_BUDGET_PREFILL (24 * 1024)
#define SP_MM_CHUNK_BYTES (256 * 1024)  /* weight bytes per row chunk (L2 resident) */
#define SP_MM_MIN_CHUNK_BYTES (32 * 1024) /* smallest guided chunk */
#define SP_MM_MAX_CHUNKS 256
#define SP_MM_MAX_REGIONS 8

static size_t xrow_stride(const mm_kernel *mm, int64_t k) {
    const size_t b = mm->kgroup ? (size_t)((k + mm->kgroup - 1) / mm->kgroup) * mm->xgroup_bytes
                                : mm->xrow_bytes0(k);
    return SP_ALIGN_UP(b, 64);
}

size_t matmul_scratch_size(tensor_type wt, int64_t k, int64_t n_tok) {
    const type_traits *tt = type_info(wt);
    SP_ASSERT(tt && tt->supported);
    /* The largest layout of any level, so that a level forced after sizing
     * (tests, benchmarks) still fits; +64 to align the caller's pointer. */
    const kernel_ops *levels[] = {&kernel_ops_ref, &kernel_ops_avx2, &kernel_ops_avx512};
    size_t row = 0;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        row = SP_MAX(row, SP_MAX(xrow_stride(levels[i]->mm[wt], k), xrow_stride(mm_for(levels[i], wt, 8), k)));
        if (levels[i]->mm_packed[wt]) row = SP_MAX(row, xrow_stride(levels[i]->mm_packed[wt], k));
    }
    return row * (size_t)SP_MAX(n_tok, 1) + 64;
}

typedef struct {
    const mm_kernel *mm;
    const uint8_t *w;
    size_t w_stride;
    int64_t n_rows, k;
    const float *x;
    int64_t n_tok;
    uint8_t *xs;       /* [n_tok][xs_stride] converted activations */
    size_t xs_stride;
    float *y;
    int64_t ldy;
    int n_chunks;
    int32_t chunk_row[SP_MM_MAX_CHUNKS + 1]; /* chunk c = rows [chunk_row[c], chunk_row[c+1]) */
    int64_t kc;        /* K elements per K range (multiple of kgroup) */
    int convert_in_run;
    int n_regions;     /* decode: one region of chunks per thread, else 1 */
    int region_chunk[SP_MM_MAX_REGIONS + 1]; /* region i = chunks [region_chunk[i], region_chunk[i+1]) */
    struct {
        _Atomic int64_t next; /* next chunk of the region to hand out */
        char pad[56];
    } region[SP_MM_MAX_REGIONS] __attribute__((aligned(64)));
    _Atomic int64_t conv_next; /* next token to convert (convert_in_run) */
    _Atomic int64_t converted; /* tokens converted */
} mm_job;

/* Token t's row of x -> its scratch row (tsan.h: the kernel is not
 * instrumented under TSan, so its reads and writes are declared here). */
static void convert_token(const mm_job *j, int64_t t) {
    SP_TSAN_READ(j->x + t * j->k, (size_t)j->k * sizeof(float));
    SP_TSAN_WRITE(j->xs + (size_t)t * j->xs_stride, j->xs_stride);
    j->mm->convert(j->x + t * j->k, j->k, j->xs + (size_t)t * j->xs_stride);
}

/* What the tile calls of tokens [t0, t0 + nt) over rows [r0, r0 + nr)
 * read and write (kernels_internal.h), declared to TSan (tsan.h). Not the
 * weights: nothing writes them once the model is loaded, and declaring a
 * chunk's rows on every call made TSan's range check most of
 * test_spec_engine's time (the F16 pair: past 7 minutes against 161-196 s
 * without them). */
static void tsan_tiles(const mm_job *j, int64_t r0, int64_t nr, int64_t t0, int64_t nt) {
    SP_TSAN_READ(j->xs + (size_t)t0 * j->xs_stride, (size_t)nt * j->xs_stride);
    for (int64_t t = t0; t < t0 + nt; t++) SP_TSAN_WRITE(j->y + t * j->ldy + r0, (size_t)nr * sizeof(float));
}

static void mm_chunk(const mm_job *j, int64_t c) {
    const mm_kernel *mm = j->mm;
    const int64_t r0 = j->chunk_row[c];
    const int64_t nr = j->chunk_row[c + 1] - r0;
    const uint8_t *w = j->w + (size_t)r0 * j->w_stride;
    if (mm->tile_kc && j->n_tok <= mm->max_nt && j->kc < j->k && (j->k + j->kc - 1) / j->kc <= SP_MM_KC_RANGES) {
        /* decode / verification: the same ranges, every row in one piece */
        tsan_tiles(j, r0, nr, 0, j->n_tok);
        mm->tile_kc(w, j->w_stride, nr, j->xs, j->xs_stride, (int)j->n_tok, j->k, j->kc, j->y + r0, j->ldy);
        return;
    }
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += mm->max_nt) {
        const int nt = (int)SP_MIN((int64_t)mm->max_nt, j->n_tok - t0);
        tsan_tiles(j, r0, nr, t0, nt);
        /* the first token tile streams the chunk in; the others find it in
         * L2, where the prefetch ahead of the stream is only work
         * (tilebench, Q8_0 8 tokens in cache: 5%). Chunks are planned at
         * SP_MM_CHUNK_BYTES, but a matrix of very many rows gets bigger
         * ones (plan_chunks bounds their count): past twice that, which
         * may not stay in a 1 MiB L2, every tile keeps the prefetch. */
        const int warm = t0 > 0 && mm->tile_warm && (size_t)nr * j->w_stride <= 2 * SP_MM_CHUNK_BYTES;
        __typeof__(mm->tile) tile = warm ? mm->tile_warm : mm->tile;
        for (int64_t k0 = 0; k0 < j->k; k0 += j->kc) {
            const int64_t k1 = SP_MIN(j->k, k0 + j->kc);
            tile(w, j->w_stride, nr, j->xs + (size_t)t0 * j->xs_stride, j->xs_stride, nt, j->k, k0,
                     k1, j->y + t0 * j->ldy + r0, j->ldy, k0 > 0);
        }
    }
}

static void mm_worker(void *arg, int ith, int nth) {
    mm_job *j = arg;
    if (j->convert_in_run) {
        /* tokens are claimed one by one, then every token must be converted
         * before any tile reads it. Not a barrier over the threads: the
         * pool may run this run's slots one after another on one thread,
         * so a slot waits only for conversions another slot has started */
        for (int64_t t; (t = atomic_fetch_add_explicit(&j->conv_next, 1, memory_order_relaxed)) < j->n_tok;) {
            convert_token(j, t);
            atomic_fetch_add_explicit(&j->converted, 1, memory_order_release);
        }
        for (unsigned i = 0; atomic_load_explicit(&j->converted, memory_order_acquire) < j->n_tok; i++) {
            __builtin_ia32_pause();
            if ((i & 255) == 255) sched_yield(); /* ~10 us: a peer may be descheduled */
        }
    }
    if (j->n_regions > 1) {
        /* own region first (a contiguous stream, so the prefetch running
         * ahead of one chunk is the start of the next one), then help the
         * others with what is left of theirs */
        for (int i = 0; i < j->n_regions; i++) {
            const int reg = (ith + i) % j->n_regions;
            const int64_t end = j->region_chunk[reg + 1];
            if (i == 0) { /* warm the start of the stream: the kernel prefetches 2-8 KiB ahead */
                const uint8_t *p = j->w + (size_t)j->chunk_row[j->region_chunk[reg]] * j->w_stride;
                for (int l = 0; l < 8192; l += 64) __builtin_prefetch(p + l, 0, l < 2048 ? 3 : 2);
            }
            for (int64_t c = atomic_fetch_add_explicit(&j->region[reg].next, 1, memory_order_relaxed); c < end;
                 c = atomic_fetch_add_explicit(&j->region[reg].next, 1, memory_order_relaxed))
                mm_chunk(j, c);
        }
        return;
    }
    /* every chunk from the counter (none assigned to a slot), so a slot
     * that starts late finds the work already done by the others */
    for (int64_t c = atomic_fetch_add_explicit(&j->region[0].next, 1, memory_order_relaxed); c < j->n_chunks;
         c = atomic_fetch_add_explicit(&j->region[0].next, 1, memory_order_relaxed))
        mm_chunk(j, c);
}

static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* Fills bounds[0..n] (n returned): see the top of the file. */
static int plan_chunks(int64_t n_rows, size_t row_bytes, int nth, int32_t *bounds, int max_chunks) {
    int64_t big = SP_MAX(16, (int64_t)(SP_MM_CHUNK_BYTES / row_bytes) / 16 * 16);
    big = SP_MAX(big, round16((n_rows + max_chunks / 2 - 1) / (max_chunks / 2))); /* bound the count */
    const int64_t small = SP_MIN(big, SP_MAX(16, round16((int64_t)(SP_MM_MIN_CHUNK_BYTES / row_bytes))));
    int n = 0;
    int64_t r = 0;
    while (r < n_rows && n < max_chunks - 1) {
        const int64_t c = SP_MIN(SP_MAX(round16((n_rows - r) / (2 * nth)), small), big);
        bounds[n++] = (int32_t)r;
        r += c;
    }
    if (r < n_rows) bounds[n++] = (int32_t)r; /* not reached with the bound above */
    bounds[n] = (int32_t)n_rows;
    return n;
}

static void matmul_run(thread_pool *pool, const mm_kernel *mm, const void *w, size_t w_stride, int64_t n_rows,
                       int64_t k, const float *x, int64_t n_tok, float *y, int64_t ldy, void *scratch);

void matmul(thread_pool *pool, const void *w, tensor_type wt, int64_t n_rows, int64_t k, const float *x,
               int64_t n_tok, float *y, int64_t ldy, void *scratch) {
    const type_traits *tt = type_info(wt);
    SP_ASSERT(tt && tt->supported && k > 0 && k % tt->blck == 0 && ldy >= n_rows);
    if (n_rows <= 0 || n_tok <= 0) return;
    matmul_run(pool, mm_for(kernel_ops_get(), wt, n_rows), w, row_size(wt, k), n_rows, k, x, n_tok, y,
               ldy, scratch);
}

size_t matmul_packed_size(tensor_type wt, int64_t n_rows, int64_t k) {
    const kernel_ops *o = kernel_ops_get();
    const type_traits *tt = type_info(wt);
    if (!tt || !tt->supported || k <= 0 || k % tt->blck || n_rows <= 0 || !o->mm_packed[wt]) return 0;
    if (o->packed_rows_multiple > 1 && n_rows % o->packed_rows_multiple) return 0;
    return o->packed_row_size(wt, k) * (size_t)n_rows;
}

const char *matmul_pack(tensor_type wt, const void *w, int64_t n_rows, int64_t k, void *dst) {
    const kernel_ops *o = kernel_ops_get();
    SP_ASSERT(matmul_packed_size(wt, n_rows, k) > 0);
    SP_TSAN_READ(w, row_size(wt, k) * (size_t)n_rows);
    SP_TSAN_WRITE(dst, matmul_packed_size(wt, n_rows, k));
    o->pack_rows(wt, w, dst, n_rows, k);
    return o->name;
}

void matmul_packed(thread_pool *pool, const void *wp, tensor_type wt, int64_t n_rows, int64_t k, const float *x,
                      int64_t n_tok, float *y, int64_t ldy, void *scratch) {
    const kernel_ops *o = kernel_ops_get();
    SP_ASSERT(matmul_packed_size(wt, n_rows, k) > 0 && ldy >= n_rows);
    if (n_tok <= 0) return;
    matmul_run(pool, o->mm_packed[wt], wp, o->packed_row_size(wt, k), n_rows, k, x, n_tok, y, ldy, scratch);
}

const char *kernels_level(void) { return kernel_ops_get()->name; }

static void matmul_run(thread_pool *pool, const mm_kernel *mm, const void *w, size_t w_stride, int64_t n_rows,
                       int64_t k, const float *x, int64_t n_tok, float *y, int64_t ldy, void *scratch) {
    const int nth = pool_size(pool);

    mm_job j = {0};
    j.mm = mm;
    j.w = w;
    j.w_stride = w_stride;
    j.n_rows = n_rows;
    j.k = k;
    j.x = x;
    j.n_tok = n_tok;
    j.xs = (uint8_t *)SP_ALIGN_UP((uintptr_t)scratch, 64);
    j.xs_stride = xrow_stride(mm, k);
    j.y = y;
    j.ldy = ldy;

    SP_ASSERT(n_rows <= INT32_MAX);
    if (n_tok <= mm->max_nt && nth > 1 && nth <= SP_MM_MAX_REGIONS && n_rows >= 32 * nth) {
        /* decode / verification: each thread streams its own contiguous
         * region (equal shares, 16-row multiples), planned like a whole
         * matrix for one thread (big chunks, then guided ones at its end) */
        j.n_regions = nth;
        int n = 0;
        for (int i = 0; i < nth; i++) {
            const int64_t ra = round16(n_rows * i / nth), rb = i + 1 == nth ? n_rows : round16(n_rows * (i + 1) / nth);
            const int m = plan_chunks(rb - ra, j.w_stride, 1, j.chunk_row + n, (SP_MM_MAX_CHUNKS - n) / (nth - i));
            for (int c = 0; c < m; c++) j.chunk_row[n + c] += (int32_t)ra;
            j.region_chunk[i] = n;
            atomic_init(&j.region[i].next, n);
            n += m;
        }
        j.region_chunk[nth] = n;
        j.chunk_row[n] = (int32_t)n_rows;
        j.n_chunks = n;
    } else {
        j.n_regions = 1;
        j.n_chunks = plan_chunks(n_rows, j.w_stride, nth, j.chunk_row, SP_MM_MAX_CHUNKS);
        atomic_init(&j.region[0].next, 0);
    }
    atomic_init(&j.conv_next, 0);
    atomic_init(&j.converted, 0);

    /* K range per tile call: the tile's activations fit the L1 budget.
     * The ranges depend on the matrix only, never on n_tok: a token's
     * result is then the same sum in the same order whatever batch it is
     * in (decode, a verification of k proposals, a prefill chunk), which
     * is what makes speculative and batched output equal plain decoding
     * bit for bit; splitting K differently per batch size changed the
     * rounding and flipped argmaxes of chaotic (random-weight) models. */
    if (mm->kgroup && !mm->whole_k) {
        const int64_t nt = mm->max_nt;
        const int64_t ngroups = (k + mm->kgroup - 1) / mm->kgroup;
        const size_t budget = SP_MM_X_BUDGET_PREFILL;
        int64_t g = (int64_t)(budget / ((size_t)nt * mm->xgroup_bytes));
        g = SP_MAX(1, SP_MIN(g, ngroups));
        const int64_t nranges = (ngroups + g - 1) / g;
        g = (ngroups + nranges - 1) / nranges; /* equal ranges */
        j.kc = g * mm->kgroup;
    } else {
        j.kc = k;
    }

    if (nth == 1 || n_tok == 1) {
        for (int64_t t = 0; t < n_tok; t++) convert_token(&j, t);
        j.convert_in_run = 0;
    } else {
        j.convert_in_run = 1;
    }
    pool_run(pool, mm_worker, &j);
}
