/* cpu_parallel.c: the threads of the CPU kernels (see cpu_parallel.h): a
 * pool that lives across calls, started on first use and grown to the
 * thread count asked for. A child of fork() has none of its parent's
 * threads, so pthread_atfork resets the pool there (a DataLoader's workers
 * fork) and the child starts its own. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "cpu_parallel.h"

#include "internal.h"

#if !defined(_WIN32)
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FO_PAUSE() _mm_pause()
#else
#define FO_PAUSE() ((void)0)
#endif
#endif

/* Waking the pool's threads and waiting for them costs 10-90 us on a 2-core
 * x86-64 VM, and the CPU kernels take 0.1-2 ns an element: a thread is worth
 * waking for 2^16 elements, not less (callers count a piece's real
 * elements: a row narrower than a chunk is worth its width). */
#define MIN_ELEMENTS_A_THREAD ((int64_t)1 << 16)
#define MAX_THREADS 256

#if defined(_WIN32)

/* no pthreads: one thread */
void fo_set_cpu_threads(int threads) { (void)threads; }

int fo_get_cpu_threads(void) { return 1; }

int64_t fo_cpu_threads_for(int64_t items, int64_t item_elements) {
    (void)items;
    (void)item_elements;
    return 1;
}

void fo_cpu_parallel(int64_t items, int64_t item_elements, fo_cpu_range_fn fn, const void *ctx) {
    (void)item_elements;
    if (items > 0) fn(ctx, 0, items);
}

#else

static atomic_int requested_threads; /* 0: the default */

void fo_set_cpu_threads(int threads) {
    atomic_store(&requested_threads, threads > 0 ? threads : 0);
}

/* The CPUs this process may run on (its affinity mask, which taskset and
 * container CPU sets narrow), or the online CPUs where that is unknown. */
static int usable_cpus(void) {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

int fo_get_cpu_threads(void) {
    int threads = atomic_load(&requested_threads);
    if (threads <= 0) threads = usable_cpus();
    return threads < MAX_THREADS ? threads : MAX_THREADS;
}

int64_t fo_cpu_threads_for(int64_t items, int64_t item_elements) {
    if (item_elements < 1) item_elements = 1;
    /* every thread gets MIN_ELEMENTS_A_THREAD elements of work, and an item */
    int64_t worth =
        items > INT64_MAX / item_elements ? items : items * item_elements / MIN_ELEMENTS_A_THREAD;
    if (worth > items) worth = items;
    if (worth <= 1) return 1; /* before asking the system for its CPUs */
    const int64_t threads = fo_get_cpu_threads();
    return threads < worth ? threads : worth;
}

/* A job's items split in `ranges` contiguous ranges: items / ranges each,
 * and one more for the first items % ranges. */
static void run_range(fo_cpu_range_fn fn, const void *ctx, int64_t items, int64_t ranges,
                      int64_t k) {
    const int64_t share = items / ranges, extra = items % ranges;
    const int64_t begin = k * share + (k < extra ? k : extra);
    fn(ctx, begin, begin + share + (k < extra));
}

/* Ranges a job is cut into for each of its threads: the caller and the
 * workers claim them one at a time, so a thread the system has not yet
 * scheduled (torch's OpenMP threads spin on the cores after each of its
 * ops) leaves its share to the others instead of holding up the call. */
#define RANGES_A_THREAD 4

/* The pool: one job at a time (a second caller meanwhile runs its call on
 * its own thread, with the same bits). Workers below the job's thread
 * count join it while it is open and claim its ranges with the caller. */
static struct {
    pthread_mutex_t busy; /* held by the caller whose job the pool runs */
    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t posted, finished;
    int workers; /* started */
    _Atomic uint64_t generation; /* one more for each job posted */
    fo_cpu_range_fn fn;
    const void *ctx;
    int64_t items, ranges, threads;
    int open; /* workers may still join the job */
    _Atomic int64_t next; /* the next range to claim */
    _Atomic int64_t running; /* workers in the job (changed under lock) */
    uint64_t born[MAX_THREADS]; /* the generation when worker w started */
} pool = {PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_MUTEX_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER,
          0,
          0,
          NULL,
          NULL,
          0,
          0,
          0,
          0,
          0,
          0,
          {0}};

/* Runs the job's ranges until none is left (the job's fields stay as they
 * are while a worker is in it or the caller has not closed it). */
static void claim_ranges(fo_cpu_range_fn fn, const void *ctx, int64_t items, int64_t ranges) {
    for (;;) {
        const int64_t k = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed);
        if (k >= ranges) return;
        run_range(fn, ctx, items, ranges, k);
    }
}

/* A worker that finished a job, and a caller waiting for its workers, spin
 * this long before they sleep: a sleeping thread takes 10-90 us to wake on
 * a 2-core VM, and back-to-back calls then find the pool awake (relu of
 * 512 x 256 on 2 threads 105 -> 14 us, LayerNorm 131 -> 56 us; 4096 x 1024
 * relu 795 -> 750 us). The spin yields the core to any other thread ready
 * to run on it. */
#define SPIN_NS 50000

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spins up to SPIN_NS while no job newer than seen is posted. */
static void spin_for_job(uint64_t seen) {
    const int64_t end = now_ns() + SPIN_NS;
    do {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&pool.generation, memory_order_relaxed) != seen) return;
            FO_PAUSE();
        }
        sched_yield();
    } while (now_ns() < end);
}

/* Spins up to SPIN_NS while workers are still in the job. */
static void spin_for_workers(void) {
    const int64_t end = now_ns() + SPIN_NS;
    do {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&pool.running, memory_order_relaxed) == 0) return;
            FO_PAUSE();
        }
    } while (now_ns() < end);
}

static void *worker(void *arg) {
    const int64_t w = (int64_t)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    /* the job posted right after its start is already one to run */
    uint64_t seen = pool.born[w];
    for (;;) {
        if (pool.generation == seen) {
            pthread_mutex_unlock(&pool.lock);
            spin_for_job(seen);
            pthread_mutex_lock(&pool.lock);
        }
        while (pool.generation == seen) pthread_cond_wait(&pool.posted, &pool.lock);
        seen = pool.generation;
        if (!pool.open || w >= pool.threads) continue; /* closed, or a job of fewer threads */
        const fo_cpu_range_fn fn = pool.fn;
        const void *ctx = pool.ctx;
        const int64_t items = pool.items, ranges = pool.ranges;
        pool.running++;
        pthread_mutex_unlock(&pool.lock);
        claim_ranges(fn, ctx, items, ranges);
        pthread_mutex_lock(&pool.lock);
        if (--pool.running == 0 && !pool.open) pthread_cond_signal(&pool.finished);
    }
    return NULL;
}

/* Starts workers up to threads - 1 (under pool.lock); returns the threads
 * the pool can run now, fewer where the system gave no more. */
static int64_t grow(int64_t threads) {
    while (pool.workers < threads - 1) {
        pthread_t id;
        pthread_attr_t attr;
        pool.born[pool.workers + 1] = pool.generation;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&id, &attr, worker, (void *)(intptr_t)(pool.workers + 1));
        pthread_attr_destroy(&attr);
        if (failed) break;
        pool.workers++;
    }
    return pool.workers + 1 < threads ? pool.workers + 1 : threads;
}

/* The forking thread holds both locks (no job is half posted); the parent
 * lets go, the child starts over with no workers. */
static void before_fork(void) {
    pthread_mutex_lock(&pool.busy);
    pthread_mutex_lock(&pool.lock);
}

static void after_fork_parent(void) {
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
}

static void after_fork_child(void) {
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.posted, NULL);
    pthread_cond_init(&pool.finished, NULL);
    pool.workers = 0;
    pool.running = 0;
    pool.open = 0;
}

static pthread_once_t fork_handlers = PTHREAD_ONCE_INIT;

static void register_fork_handlers(void) {
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void fo_cpu_parallel(int64_t items, int64_t item_elements, fo_cpu_range_fn fn, const void *ctx) {
    if (items <= 0) return;
    int64_t threads = fo_cpu_threads_for(items, item_elements);
    if (threads <= 1 || (pthread_once(&fork_handlers, register_fork_handlers),
                         pthread_mutex_trylock(&pool.busy) != 0)) {
        fn(ctx, 0, items);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    threads = grow(threads);
    const int64_t ranges = items < threads * RANGES_A_THREAD ? items : threads * RANGES_A_THREAD;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.items = items;
    pool.ranges = ranges;
    pool.threads = threads;
    pool.next = 0;
    pool.running = 0;
    pool.open = 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.posted);
    pthread_mutex_unlock(&pool.lock);
    claim_ranges(fn, ctx, items, ranges);
    pthread_mutex_lock(&pool.lock);
    pool.open = 0; /* a worker not yet in finds every range taken: it need not join */
    pthread_mutex_unlock(&pool.lock);
    spin_for_workers();
    pthread_mutex_lock(&pool.lock);
    while (pool.running > 0) pthread_cond_wait(&pool.finished, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
}

#endif
