/* cpu_parallel.h: the threads of the CPU kernels.
 *
 * A CPU kernel splits its work into items that are independent of each
 * other (rows, or chunks of columns whose sums run down the rows): each
 * item is computed whole by one thread, in the same order on any number of
 * threads, so every output has the same bits on 1 thread or 64.
 * fo_cpu_parallel runs fn over contiguous ranges of the items on up to
 * fo_get_cpu_threads() threads of a pool that lives across calls; a child
 * of fork() (a DataLoader's workers) starts a pool of its own. */
#ifndef FO_CPU_PARALLEL_H
#define FO_CPU_PARALLEL_H

#include <stdint.h>

/* Computes items [begin, end) of the work described by ctx. */
typedef void (*fo_cpu_range_fn)(const void *ctx, int64_t begin, int64_t end);

/* The threads fo_cpu_parallel would run items of item_elements elements
 * each on: 1 where the work is not worth more (without asking the system
 * how many CPUs there are). */
int64_t fo_cpu_threads_for(int64_t items, int64_t item_elements);

/* fn over items [0, items), each costing about item_elements elements of
 * work: on one thread when that is all the call is worth, else cut in
 * contiguous ranges that the caller and up to fo_get_cpu_threads() - 1 of
 * the pool's threads claim in turn (a thread the system runs late leaves
 * its ranges to the others). While the pool runs another caller's job, the
 * call runs on its own thread: the same bits, later. */
void fo_cpu_parallel(int64_t items, int64_t item_elements, fo_cpu_range_fn fn, const void *ctx);

#endif
