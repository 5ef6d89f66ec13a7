/* cpu/reduce_sum.c: the sum of all elements: the CPU kernels, compiled once for each instruction
 * set (cpu_kernels.h) and chosen at load. */
#include <stdlib.h>

#include "cpu_convert.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* The sum is taken in blocks of SUM_BLOCK elements, each in SUM_LANES
 * double lanes (lane l: the elements i with i % SUM_LANES == l, in order;
 * the lanes added in one fixed tree), and the blocks' totals added in order:
 * the blocks are what threads share out, and their size is fixed, so the
 * bits of the sum do not depend on the number of threads. 32 lanes are four
 * AVX-512 (eight AVX2) add chains: cpu_lanes.h's 8 are one, and held the
 * sum to an add's latency, below the memory's rate. float32, bfloat16 and
 * float16 accumulate in fp32, as the header says: each piece of SUM_PIECE in
 * float lanes (32 terms a lane), then into the double lanes, so the error is
 * a piece's, whatever the length; a piece that overflows float is summed in
 * double. */
#define SUM_BLOCK ((int64_t)1 << 16)
#define SUM_LANES 32
#define SUM_PIECE 1024
_Static_assert(CPU_CHUNK % SUM_LANES == 0, "each chunk of a block starts at lane 0");
_Static_assert(SUM_BLOCK % SUM_PIECE == 0, "each piece of a block starts at lane 0");

typedef struct {
    double lane[SUM_LANES];
} sum_lanes;

/* Element i of bfloat16 (BF16) or float x as a float, and 16 of them from i. */
static inline float float_at(const void *restrict x, int64_t i, int bf16) {
    return bf16 ? bf16_to_float(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}
static inline void floats_at(fo_f16x *v, const void *restrict x, int64_t i, int bf16) {
    if (bf16)
        fo_bf16x_at(v, (const uint16_t *)x + i);
    else
        fo_f16x_at(v, (const float *)x + i);
}

/* s += x[i] for float or bfloat16 x[i < n] (n a multiple of SUM_LANES but for the block's last
 * piece), a piece at a time in float lanes (lo: lanes 0-15, hi: 16-31); a piece whose lanes
 * overflowed float (or met a NaN) is added in double. bfloat16 is converted in the loop (a
 * shift): no float buffer to write and read again. Called with bf16 a constant. */
static inline void add_floats(sum_lanes *s, const void *restrict x, int bf16, int64_t n) {
    for (int64_t p = 0; p < n; p += SUM_PIECE) {
        const int64_t end = n - p < SUM_PIECE ? n : p + SUM_PIECE;
        fo_f16x lo = {0}, hi = {0}, v;
        int64_t i = p;
        for (; i + SUM_LANES <= end; i += SUM_LANES) {
            floats_at(&v, x, i, bf16);
            lo += v;
            floats_at(&v, x, i + 16, bf16);
            hi += v;
        }
        for (int l = 0; i + l < end; l++) {
            if (l < 16)
                lo[l] += float_at(x, i + l, bf16);
            else
                hi[l - 16] += float_at(x, i + l, bf16);
        }
        const fo_f16x zero = lo * 0.0f + hi * 0.0f; /* NaN where a lane is not finite */
        int finite = 1;
        for (int l = 0; l < 16; l++) finite &= zero[l] == 0.0f;
        if (finite) {
            for (int l = 0; l < 16; l++) {
                s->lane[l] += lo[l];
                s->lane[16 + l] += hi[l];
            }
        } else {
            for (int64_t k = p; k < end; k++) s->lane[k % SUM_LANES] += float_at(x, k, bf16);
        }
    }
}

static inline void add_f64(sum_lanes *s, const double *restrict x, int64_t n) {
    double lane[SUM_LANES];
    for (int l = 0; l < SUM_LANES; l++) lane[l] = s->lane[l];
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++) lane[l] += x[i + l];
    for (; i < n; i++) lane[i % SUM_LANES] += x[i];
    for (int l = 0; l < SUM_LANES; l++) s->lane[l] = lane[l];
}

static inline double lanes_total(sum_lanes *s) {
    for (int width = SUM_LANES / 2; width > 0; width /= 2)
        for (int l = 0; l < width; l++) s->lane[l] += s->lane[l + width];
    return s->lane[0];
}

typedef struct {
    const fo_reduce_sum_params *a;
    double *totals; /* one a block */
} sum_work;

static double block_total(const fo_reduce_sum_params *a, int64_t block) {
    sum_lanes lanes = {{0.0}};
    const int64_t end =
        a->numel - block * SUM_BLOCK < SUM_BLOCK ? a->numel : (block + 1) * SUM_BLOCK;
    if (a->dtype == FO_DTYPE_F32) {
        add_floats(&lanes, (const float *)a->x + block * SUM_BLOCK, 0, end - block * SUM_BLOCK);
        return lanes_total(&lanes);
    }
    if (a->dtype == FO_DTYPE_F64) {
        add_f64(&lanes, (const double *)a->x + block * SUM_BLOCK, end - block * SUM_BLOCK);
        return lanes_total(&lanes);
    }
    if (a->dtype == FO_DTYPE_BF16) { /* exact in float: the same sum as through a float buffer */
        add_floats(&lanes, (const uint16_t *)a->x + block * SUM_BLOCK, 1, end - block * SUM_BLOCK);
        return lanes_total(&lanes);
    }
    for (int64_t i0 = block * SUM_BLOCK; i0 < end; i0 += SUM_PIECE) {
        const int64_t n = end - i0 < SUM_PIECE ? end - i0 : SUM_PIECE;
        float x[SUM_PIECE]; /* f16 is exact in float: the same sum as bf16's */
        add_floats(&lanes, fo_float_in(x, a->x, i0, n, a->dtype), 0, n);
    }
    return lanes_total(&lanes);
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
