/* pool.c: a persistent thread pool tuned for dispatch latency.
 *
 * A decode step issues a few hundred short runs per token, so a run must cost
 * about a microsecond, not a futex round trip (~5-10 us per wake-up):
 *   - pool_run publishes the job and bumps an atomic generation counter;
 *   - idle workers spin on that counter (with pause) for SP_POOL_SPIN_NS
 *     after their last job and only then sleep on a futex; the publisher
 *     issues FUTEX_WAKE only when some worker is asleep;
 *   - the run's nth parts ("slots", the ith of fn) are claimed, not
 *     assigned: the caller takes slot 0, a worker that wakes takes the next
 *     unclaimed one, and the caller, done with its own, takes whatever no
 *     worker has claimed yet. The caller then waits only for slots that are
 *     under way, never for a worker that has not started: on a shared CPU a
 *     descheduled worker costs its slot's time on the caller, not a
 *     scheduler time slice (milliseconds) per run;
 *   - completion is an atomic count of finished slots the caller spins on
 *     (then sleeps on, if a worker was descheduled in the middle of a slot);
 *   - when the caller keeps waiting that way, longer than it worked on
 *     the run itself (another process holds the cores), the pool runs solo
 *     for a while: the caller does every slot, the workers sleep, and
 *     decode keeps the one-thread rate instead of collapsing; it then tries
 *     its workers again (SP_POOL_SOLO_RUNS).
 * Nothing is allocated per run. The spinning costs CPU only while runs keep
 * coming; a pool left idle sleeps after SP_POOL_SPIN_NS.
 */
#include <limits.h>
#include <stdbool.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels_internal.h"

#define SP_POOL_MAX_THREADS 256
/* How long an idle worker (or a waiting caller) spins before sleeping. */
#define SP_POOL_SPIN_NS 200000
/* Stalls among the last 64 runs that switch the pool to solo, and how many
 * runs it then stays solo before trying its workers again. Under a busy
 * neighbour most runs of a decode stall, so 4 is reached within a token;
 * on a quiet machine a rare real deschedule (a timer, a daemon) costs one
 * chunk's wait, where solo would cost half the machine for 2,048 runs. */
#define SP_POOL_STALLS_TO_SOLO 4
#define SP_POOL_SOLO_RUNS 2048
/* A pool that goes back to solo within SP_POOL_SOLO_RUNS runs of trying its
 * workers doubles its next solo period, up to this. */
#define SP_POOL_SOLO_MAX (64 * 1024)

struct thread_pool {
    int n; /* threads including the caller */
    pthread_t *threads;
    int started; /* workers successfully created */

    void (*fn)(void *arg, int ith, int nth);
    void *arg;

    /* gen and done are futex words (32-bit), each on its own cache line:
     * workers poll gen while others count done. */
    _Alignas(64) _Atomic uint32_t gen; /* bumped once per run (and at shutdown) */
    _Atomic int32_t sleepers;          /* workers asleep (or about to be) on gen */
    _Atomic int stop;
    /* (gen << 32) | next unclaimed slot: a slot is claimed by one CAS, and a
     * worker that saw an older generation cannot claim a slot of a newer
     * run (nor read that run's fn/arg before it has claimed one) */
    _Alignas(64) _Atomic uint64_t claim;
    _Alignas(64) _Atomic int32_t done; /* slots of the current run finished */
    _Atomic int32_t caller_waiting;
    /* the caller's own bookkeeping (no other thread reads it) */
    uint64_t stall_bits; /* 1 per recent run in which the caller stalled */
    int32_t solo_left;   /* runs left to do alone */
    int32_t solo_len;    /* length of the next solo period (backs off) */
    uint64_t solo_end;   /* p->runs when the last solo period ended */
    uint64_t runs, solo_runs, stalls; /* statistics (pool_stats) */
};

typedef struct {
    thread_pool *p;
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
static uint32_t spin_gen(thread_pool *p, uint32_t seen) {
    spin_state s = {0, 0, 0};
    for (;;) {
        const uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || !spin_step(&s)) return g;
    }
}

/* Claims the next slot of run g, or returns -1 when none is left (or run
 * g is over). */
static int claim_slot(thread_pool *p, uint32_t g) {
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(c >> 32) != g || (int64_t)(c & 0xffffffffu) >= p->n) return -1;
        if (atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return (int)(c & 0xffffffffu);
    }
}

static void finish_slot(thread_pool *p) {
    if (atomic_fetch_add(&p->done, 1) + 1 == p->n && atomic_load(&p->caller_waiting))
        futex((void *)&p->done, FUTEX_WAKE_PRIVATE, 1);
}

static void *worker_main(void *varg) {
    worker_arg *wa = varg;
    thread_pool *p = wa->p;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = spin_gen(p, seen);
        if (g == seen) {
            atomic_fetch_add(&p->sleepers, 1); /* seq_cst: pairs with the load in pool_run */
            while ((g = atomic_load(&p->gen)) == seen) futex((void *)&p->gen, FUTEX_WAIT_PRIVATE, seen);
            atomic_fetch_sub(&p->sleepers, 1);
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        /* fn and arg are run g's while a claimed slot of it is unfinished:
         * the caller publishes the next run only after every slot is done */
        for (int ith; (ith = claim_slot(p, g)) >= 0;) {
            p->fn(p->arg, ith, p->n);
            finish_slot(p);
        }
    }
    (void)wa->ith;
    return NULL;
}

thread_pool *pool_create(int n_threads) {
    if (n_threads < 1 || n_threads > SP_POOL_MAX_THREADS) return NULL;
    thread_pool *p = aligned_alloc(64, SP_ALIGN_UP(sizeof *p, 64));
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
            pool_free(p);
            return NULL;
        }
    }
    return p;
}

void pool_free(thread_pool *p) {
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

int pool_size(const thread_pool *p) { return p ? p->n : 1; }

void pool_run(thread_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->runs++;
    if (p->solo_left > 0) { /* the cores are taken: every slot here, workers asleep */
        p->solo_left--;
        p->solo_runs++;
        for (int i = 0; i < p->n; i++) fn(arg, i, p->n);
        return;
    }
    const uint64_t t_pub = now_ns();
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->claim, ((uint64_t)g << 32) | 1u, memory_order_release); /* slot 0: ours */
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes fn/arg/claim, orders with sleepers */
    if (atomic_load(&p->sleepers) > 0) futex((void *)&p->gen, FUTEX_WAKE_PRIVATE, INT_MAX);

    fn(arg, 0, p->n);
    finish_slot(p);
    for (int ith; (ith = claim_slot(p, g)) >= 0;) { /* what no worker has started */
        fn(arg, ith, p->n);
        finish_slot(p);
    }

    /* Wait for the slots under way: spin first (they usually finish within
     * microseconds of ours), then sleep if a worker lost its core. */
    spin_state s = {0, 0, 0};
    bool stalled = false;
    for (;;) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == p->n) goto out;
        if (!spin_step(&s)) break;
    }
    atomic_store(&p->caller_waiting, 1);
    int32_t d;
    while ((d = atomic_load(&p->done)) != p->n) futex((void *)&p->done, FUTEX_WAIT_PRIVATE, (uint32_t)d);
    atomic_store(&p->caller_waiting, 0);
    atomic_thread_fence(memory_order_acquire);
out:
    if (s.t0) {
        const uint64_t wait = now_ns() - s.t0;
        stalled = pool_stalled(wait, s.t0 - t_pub);
    }
    p->stall_bits = (p->stall_bits << 1) | stalled;
    if (stalled) {
        p->stalls++;
        if (__builtin_popcountll(p->stall_bits) >= SP_POOL_STALLS_TO_SOLO) {
            /* back to solo soon after trying the workers again: the
             * neighbour is still there, so try them less often (each try
             * costs a few scheduler time slices) */
            const bool soon = p->solo_end && p->runs - p->solo_end < (uint64_t)SP_POOL_SOLO_RUNS;
            p->solo_len = soon ? SP_MIN(2 * p->solo_len, SP_POOL_SOLO_MAX) : SP_POOL_SOLO_RUNS;
            p->solo_left = p->solo_len;
            p->solo_end = p->runs + (uint64_t)p->solo_len;
            p->stall_bits = 0;
        }
    }
}

void pool_stats(const thread_pool *p, uint64_t *runs, uint64_t *solo_runs, uint64_t *stalls) {
    *runs = p ? p->runs : 0;
    *solo_runs = p ? p->solo_runs : 0;
    *stalls = p ? p->stalls : 0;
}
