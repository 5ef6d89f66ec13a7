/* cpu/reduce_sum.c: the sum of all elements: the CPU kernels, compiled once for each instruction
 * set (cpu_kernels.h) and chosen at load. */
#include <stdlib.h>

#include "cpu_convert.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_lanes.h"
#include "cpu_parallel.h"

/* The sum is taken in blocks of SUM_BLOCK elements, each in the lanes of
 * cpu_lanes.h, and the blocks' totals added in order: the blocks are what
 * threads share out, and their size is fixed, so the bits of the sum do not
 * depend on the number of threads. */
#define SUM_BLOCK ((int64_t)1 << 16)

typedef struct {
    const fo_reduce_sum_params *a;
    double *totals; /* one a block */
} sum_work;

static double block_total(const fo_reduce_sum_params *a, int64_t block) {
    fo_lanes lanes = fo_lanes_zero();
    const int64_t end =
        a->numel - block * SUM_BLOCK < SUM_BLOCK ? a->numel : (block + 1) * SUM_BLOCK;
    if (a->dtype == FO_DTYPE_F32) { /* no double buffer: the same sum */
        fo_lanes_add_f32(&lanes, (const float *)a->x + block * SUM_BLOCK, end - block * SUM_BLOCK);
        return fo_lanes_total(&lanes);
    }
    for (int64_t i0 = block * SUM_BLOCK; i0 < end; i0 += CPU_CHUNK) {
        int64_t n = end - i0 < CPU_CHUNK ? end - i0 : CPU_CHUNK;
        if (a->dtype == FO_DTYPE_F64) {
            fo_lanes_add(&lanes, (const double *)a->x + i0, NULL, n);
        } else { /* bf16 and f16 are exact in float: the same sum as through double */
            float x[CPU_CHUNK];
            fo_lanes_add_f32(&lanes, fo_float_in(x, a->x, i0, n, a->dtype), n);
        }
    }
    return fo_lanes_total(&lanes);
}

static void block_totals(const void *ctx, int64_t b0, int64_t b1) {
    const sum_work *work = ctx;
    for (int64_t b = b0; b < b1; b++) work->totals[b] = block_total(work->a, b);
}

void FO_CPU(reduce_sum)(const fo_reduce_sum_params *a) {
    const int64_t blocks = (a->numel + SUM_BLOCK - 1) / SUM_BLOCK;
    double total = 0.0;
    sum_work work = {a, NULL};
    if (fo_cpu_threads_for(blocks, SUM_BLOCK) > 1)
        work.totals = malloc((size_t)blocks * sizeof(double));
    if (work.totals) {
        fo_cpu_parallel(blocks, SUM_BLOCK, block_totals, &work);
        for (int64_t b = 0; b < blocks; b++) total += work.totals[b];
        free(work.totals);
    } else { /* one thread (or no memory for the totals): the same sum */
        for (int64_t b = 0; b < blocks; b++) total += block_total(a, b);
    }
    fo_cpu_store(a->out, 0, &total, 1, a->dtype);
}
