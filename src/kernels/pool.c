/* pool.c: a persistent thread pool tuned for dispatch latency.
 *
 * A decode step issues a few hundred short runs per token, so a run must cost
 * about a microsecond, not a futex round trip (~5-10 us per wake-up):
 *   - sp_pool_run publishes the job and bumps an atomic generation counter;
 *   - idle workers spin on that counter (with pause) for SP_POOL_SPIN_NS
 *     after their last job and only then sleep on a futex; the publisher
 *     issues FUTEX_WAKE only when some worker is asleep;
 *   - completion is an atomic countdown the caller spins on (then sleeps on,
 *     if a worker was descheduled for long).
 * Nothing is allocated per run. The spinning costs CPU only while runs keep
 * coming; a pool left idle sleeps after SP_POOL_SPIN_NS.
 */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels_internal.h"

#define SP_POOL_MAX_THREADS 256
/* How long an idle worker (or a waiting caller) spins before sleeping. */
#define SP_POOL_SPIN_NS 200000

struct sp_pool {
    int n; /* threads including the caller */
    pthread_t *threads;
    int started; /* workers successfully created */

    void (*fn)(void *arg, int ith, int nth);
    void *arg;

    /* gen and pending are futex words (32-bit), each on its own cache line:
     * workers poll gen while others decrement pending. */
    _Alignas(64) _Atomic uint32_t gen; /* bumped once per run (and at shutdown) */
    _Atomic int32_t sleepers;          /* workers asleep (or about to be) on gen */
    _Atomic int stop;
    _Alignas(64) _Atomic int32_t pending; /* workers still busy with the current run */
    _Atomic int32_t caller_waiting;
};

typedef struct {
    sp_pool *p;
    int ith;
} worker_arg;

static long futex(void *addr, int op, uint32_t val) {
    return syscall(SYS_futex, addr, op, val, NULL, NULL, 0);
}

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin-wait policy shared by workers (waiting for a job) and the caller
 * (waiting for the workers): pure pause-spinning for SP_POOL_PURE_SPIN_NS
 * (a peer running on another core answers within that), then spinning with
 * sched_yield so that a peer descheduled onto this core (more threads than
 * free cores: other processes) gets it, then give up after SP_POOL_SPIN_NS
 * and let the caller sleep on the futex. */
#define SP_POOL_PURE_SPIN_NS 20000
typedef struct {
    unsigned i;
    uint64_t t0, t;
} spin_state;

/* One step of waiting; returns 0 when the budget is spent. */
static inline int spin_step(spin_state *s) {
    cpu_relax();
    if ((++s->i & 63) != 0 && s->t - s->t0 < SP_POOL_PURE_SPIN_NS) return 1;
    s->t = now_ns(); /* ~20 ns: not every pause while pure-spinning */
    if (!s->t0) s->t0 = s->t;
    if (s->t - s->t0 > SP_POOL_SPIN_NS) return 0;
    if (s->t - s->t0 > SP_POOL_PURE_SPIN_NS) sched_yield();
    return 1;
}

/* Spins until *gen != seen or the spin budget is spent; returns the value. */
static uint32_t spin_gen(sp_pool *p, uint32_t seen) {
    spin_state s = {0, 0, 0};
    for (;;) {
        const uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || !spin_step(&s)) return g;
    }
}

static void *worker_main(void *varg) {
    worker_arg *wa = varg;
    sp_pool *p = wa->p;
    const int ith = wa->ith;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = spin_gen(p, seen);
        if (g == seen) {
            atomic_fetch_add(&p->sleepers, 1); /* seq_cst: pairs with the load in sp_pool_run */
            while ((g = atomic_load(&p->gen)) == seen) futex((void *)&p->gen, FUTEX_WAIT_PRIVATE, seen);
            atomic_fetch_sub(&p->sleepers, 1);
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        p->fn(p->arg, ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting))
            futex((void *)&p->pending, FUTEX_WAKE_PRIVATE, 1);
    }
    return NULL;
}

sp_pool *sp_pool_create(int n_threads) {
    if (n_threads < 1 || n_threads > SP_POOL_MAX_THREADS) return NULL;
    sp_pool *p = aligned_alloc(64, SP_ALIGN_UP(sizeof *p, 64));
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    if (n_threads > 1) {
        /* threads and their args in one block: worker_arg after the pthread_t array */
        p->threads = calloc((size_t)n_threads, sizeof(pthread_t) + sizeof(worker_arg));
        if (!p->threads) { free(p); return NULL; }
        worker_arg *args = (worker_arg *)(p->threads + n_threads);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1 << 20); /* kernels use < 64 KiB of stack */
        for (int i = 1; i < n_threads; i++) {
            args[i].p = p;
            args[i].ith = i;
            if (pthread_create(&p->threads[i], &attr, worker_main, &args[i]) != 0) break;
            p->started++;
        }
        pthread_attr_destroy(&attr);
        if (p->started != n_threads - 1) {
            p->n = p->started + 1; /* so that shutdown joins only the started ones */
            sp_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void sp_pool_free(sp_pool *p) {
    if (!p) return;
    if (p->started > 0) {
        atomic_store_explicit(&p->stop, 1, memory_order_release);
        atomic_fetch_add(&p->gen, 1);
        futex((void *)&p->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
        for (int i = 1; i <= p->started; i++) pthread_join(p->threads[i], NULL);
    }
    free(p->threads);
    free(p);
}

int sp_pool_size(const sp_pool *p) { return p ? p->n : 1; }

void sp_pool_run(sp_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes fn/arg/pending, orders with sleepers */
    if (atomic_load(&p->sleepers) > 0) futex((void *)&p->gen, FUTEX_WAKE_PRIVATE, INT_MAX);

    fn(arg, 0, p->n);

    /* Wait for the workers: spin first (they usually finish within
     * microseconds of us), then sleep if one of them was descheduled. */
    spin_state s = {0, 0, 0};
    for (;;) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return;
        if (!spin_step(&s)) break;
    }
    atomic_store(&p->caller_waiting, 1);
    int32_t left;
    while ((left = atomic_load(&p->pending)) != 0) futex((void *)&p->pending, FUTEX_WAIT_PRIVATE, (uint32_t)left);
    atomic_store(&p->caller_waiting, 0);
    atomic_thread_fence(memory_order_acquire);
}
