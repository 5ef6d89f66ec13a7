/* cpu_parallel.c: the threads of the CPU kernels (see cpu_parallel.h). */
#define _GNU_SOURCE /* sched_getaffinity */
#include "cpu_parallel.h"

#include "internal.h"

#if !defined(_WIN32)
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#endif

/* Starting and joining a thread cost about 60 us on a 2-core x86-64 VM,
 * and the CPU kernels take 1-3 ns an element: a thread is worth starting
 * for 2^18 elements (0.3-0.8 ms of work), not much less. */
#define MIN_ELEMENTS_A_THREAD ((int64_t)1 << 18)
/* The ranges live on the caller's stack. */
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

void fo_cpu_parallel(int64_t items, int64_t item_elements, fo_cpu_range_fn fn,
                     const void *ctx) {
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
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

int fo_get_cpu_threads(void) {
    int threads = atomic_load(&requested_threads);
    if (threads <= 0) threads = usable_cpus();
    return threads < MAX_THREADS ? threads : MAX_THREADS;
}

typedef struct {
    fo_cpu_range_fn fn;
    const void *ctx;
    int64_t begin, end;
} range;

static void *run_range(void *arg) {
    const range *r = arg;
    r->fn(r->ctx, r->begin, r->end);
    return NULL;
}

int64_t fo_cpu_threads_for(int64_t items, int64_t item_elements) {
    if (item_elements < 1) item_elements = 1;
    /* every thread gets MIN_ELEMENTS_A_THREAD elements of work, and an item */
    int64_t worth = items > INT64_MAX / item_elements
                        ? items
                        : items * item_elements / MIN_ELEMENTS_A_THREAD;
    if (worth > items) worth = items;
    if (worth <= 1) return 1; /* before asking the system for its CPUs */
    const int64_t threads = fo_get_cpu_threads();
    return threads < worth ? threads : worth;
}

void fo_cpu_parallel(int64_t items, int64_t item_elements, fo_cpu_range_fn fn,
                     const void *ctx) {
    if (items <= 0) return;
    const int64_t threads = fo_cpu_threads_for(items, item_elements);
    if (threads <= 1) {
        fn(ctx, 0, items);
        return;
    }
    range ranges[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS];
    /* items / threads each, and one more for the first items % threads */
    const int64_t share = items / threads, extra = items % threads;
    for (int64_t t = 0, begin = 0; t < threads; t++) {
        const int64_t end = begin + share + (t < extra);
        ranges[t] = (range){fn, ctx, begin, end};
        started[t] = t > 0 && pthread_create(&ids[t], NULL, run_range, &ranges[t]) == 0;
        begin = end;
    }
    run_range(&ranges[0]);
    for (int64_t t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else /* no thread to be had: this one does the range */
            run_range(&ranges[t]);
    }
}

#endif
