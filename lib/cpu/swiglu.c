/* cpu/swiglu.c: y = silu(gate) * up and its gradients: the CPU kernels, compiled once for each instruction set
 * (cpu_kernels.h) and chosen at load. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_math.h"
#include "cpu_parallel.h"

/* A piece of a float32, bfloat16 or float16 tensor, in float as torch
 * computes these dtypes (float64 takes the double path below). */
static void swiglu_piece_float(const fo_swiglu_args *a, int64_t r, int64_t c0,
                               int64_t n) {
    float gate_buf[CPU_CHUNK], up_buf[CPU_CHUNK], dy_buf[CPU_CHUNK];
    float first_buf[CPU_CHUNK], second_buf[CPU_CHUNK];
    const float *restrict gate = fo_float_in(gate_buf, a->gate, r * a->gate_row_stride + c0, n, a->dtype);
    const float *restrict up = fo_float_in(up_buf, a->up, r * a->up_row_stride + c0, n, a->dtype);
    const int64_t out = r * a->cols + c0;
    if (!a->dy) {
        float *restrict y = fo_float_out(first_buf, a->y_or_dgate, out, a->dtype);
        for (int64_t i = 0; i < n; i++) y[i] = gate[i] * fo_sigmoidf(gate[i]) * up[i];
        fo_float_done(a->y_or_dgate, out, y, n, a->dtype);
        return;
    }
    const float *restrict dy = fo_float_in(dy_buf, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
    /* both gradients into buffers where one is not wanted: loops without branches */
    float *restrict first = a->y_or_dgate ? fo_float_out(first_buf, a->y_or_dgate, out, a->dtype) : first_buf;
    float *restrict second = a->dup ? fo_float_out(second_buf, a->dup, out, a->dtype) : second_buf;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], d = dy[i], s = fo_sigmoidf(g);
        first[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
        second[i] = d * g * s;
    }
    if (a->y_or_dgate) fo_float_done(a->y_or_dgate, out, first, n, a->dtype);
    if (a->dup) fo_float_done(a->dup, out, second, n, a->dtype);
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces (each
 * independent); one loop for both passes: dy == 0 means forward. */
static void swiglu_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_swiglu_args *a = ctx;
    double gate[CPU_CHUNK], up[CPU_CHUNK], dy[CPU_CHUNK];
    double first[CPU_CHUNK], second[CPU_CHUNK];
    const int64_t chunks = fo_cpu_chunks(a->cols);
    for (int64_t k = k0; k < k1; k++) {
        const int64_t r = k / chunks, c0 = k % chunks * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        if (a->dtype != FO_DTYPE_F64) {
            swiglu_piece_float(a, r, c0, n);
            continue;
        }
        fo_cpu_load(gate, a->gate, r * a->gate_row_stride + c0, n, a->dtype);
        fo_cpu_load(up, a->up, r * a->up_row_stride + c0, n, a->dtype);
        if (!a->dy) {
            for (int64_t i = 0; i < n; i++)
                first[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
            fo_cpu_store(a->y_or_dgate, r * a->cols + c0, first, n, a->dtype);
            continue;
        }
        fo_cpu_load(dy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
        for (int64_t i = 0; i < n; i++) {
            double s = 1.0 / (1.0 + exp(-gate[i]));
            first[i] = dy[i] * up[i] * s * (1.0 + gate[i] * (1.0 - s));
            second[i] = dy[i] * gate[i] * s;
        }
        if (a->y_or_dgate)
            fo_cpu_store(a->y_or_dgate, r * a->cols + c0, first, n, a->dtype);
        if (a->dup)
            fo_cpu_store(a->dup, r * a->cols + c0, second, n, a->dtype);
    }
}

void FO_CPU(swiglu)(const fo_swiglu_args *a) {
    fo_cpu_parallel(a->rows * fo_cpu_chunks(a->cols), CPU_CHUNK, swiglu_pieces, a);
}
