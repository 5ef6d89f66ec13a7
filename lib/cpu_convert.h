/* cpu_convert.h: moving elements of any dtype to and from double on the CPU.
 * The CPU kernels are written once, in double, over chunks of CPU_CHUNK
 * elements: the dtype switch then runs once a chunk, not once an element.
 * Float32, the common case, also has a direct path in each kernel. */
#ifndef FO_CPU_CONVERT_H
#define FO_CPU_CONVERT_H

#include <stdint.h>

#include "cpu_parallel.h"

#define CPU_CHUNK 256

/* The CPU_CHUNK-element pieces of a row of cols elements (the last one may
 * be short). */
static inline int64_t fo_cpu_chunks(int64_t cols) { return (cols + CPU_CHUNK - 1) / CPU_CHUNK; }

/* The elements of one piece, but for a short last one: a column chunk of
 * `rows` rows holds rows * fo_cpu_chunk_width(cols) elements, which fits in
 * int64 wherever rows * cols does. */
static inline int64_t fo_cpu_chunk_width(int64_t cols) {
    return cols < CPU_CHUNK ? cols : CPU_CHUNK;
}

/* fn over the rows x fo_cpu_chunks(cols) pieces (item k: row k / chunks,
 * chunk k % chunks), each worth its width to the thread count. */
static inline void fo_cpu_parallel_pieces(int64_t rows, int64_t cols, fo_cpu_range_fn fn,
                                          const void *ctx) {
    fo_cpu_parallel(rows * fo_cpu_chunks(cols), fo_cpu_chunk_width(cols), fn, ctx);
}

/* dst[i] = src[offset + i] as double, for i < n. */
void fo_cpu_load(double *dst, const void *src, int64_t offset, int64_t n, int dtype);

/* dst[offset + i] = src[i] rounded to dtype (to nearest, ties to even). */
void fo_cpu_store(void *dst, int64_t offset, const double *src, int64_t n, int dtype);

#endif
