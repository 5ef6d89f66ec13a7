/* cpu/swiglu.c: y = silu(gate) * up and its gradients: the CPU kernels, compiled once for each
 * instruction set (cpu_kernels.h) and chosen at load. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* A float32 piece straight from and to memory: the generic path's double
 * arithmetic, term for term (the same bits), without its buffers. */
static void swiglu_piece_f32(const fo_swiglu_params *a, int64_t r, int64_t c0, int64_t n) {
    const float *restrict gate = (const float *)a->gate + r * a->gate_row_stride + c0;
    const float *restrict up = (const float *)a->up + r * a->up_row_stride + c0;
    float *restrict first = a->y_or_dgate ? (float *)a->y_or_dgate + r * a->cols + c0 : NULL;
    if (!a->dy) {
        for (int64_t i = 0; i < n; i++) {
            const double g = gate[i];
            first[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
        }
        return;
    }
    const float *restrict dy = (const float *)a->dy + r * a->dy_row_stride + c0;
    float *restrict second = a->dup ? (float *)a->dup + r * a->cols + c0 : NULL;
    for (int64_t i = 0; i < n; i++) {
        const double g = gate[i], d = dy[i], s = 1.0 / (1.0 + exp(-g));
        if (first) first[i] = (float)(d * up[i] * s * (1.0 + g * (1.0 - s)));
        if (second) second[i] = (float)(d * g * s);
    }
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces (each
 * independent); one loop for both passes: dy == 0 means forward. */
static void swiglu_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_swiglu_params *a = ctx;
    double gate[CPU_CHUNK], up[CPU_CHUNK], dy[CPU_CHUNK];
    double first[CPU_CHUNK], second[CPU_CHUNK];
    const int64_t chunks = fo_cpu_chunks(a->cols);
    for (int64_t k = k0; k < k1; k++) {
        const int64_t r = k / chunks, c0 = k % chunks * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        if (a->dtype == FO_DTYPE_F32) {
            swiglu_piece_f32(a, r, c0, n);
            continue;
        }
        fo_cpu_load(gate, a->gate, r * a->gate_row_stride + c0, n, a->dtype);
        fo_cpu_load(up, a->up, r * a->up_row_stride + c0, n, a->dtype);
        if (!a->dy) {
            for (int64_t i = 0; i < n; i++) first[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
            fo_cpu_store(a->y_or_dgate, r * a->cols + c0, first, n, a->dtype);
            continue;
        }
        fo_cpu_load(dy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
        for (int64_t i = 0; i < n; i++) {
            double s = 1.0 / (1.0 + exp(-gate[i]));
            first[i] = dy[i] * up[i] * s * (1.0 + gate[i] * (1.0 - s));
            second[i] = dy[i] * gate[i] * s;
        }
        if (a->y_or_dgate) fo_cpu_store(a->y_or_dgate, r * a->cols + c0, first, n, a->dtype);
        if (a->dup) fo_cpu_store(a->dup, r * a->cols + c0, second, n, a->dtype);
    }
}

void FO_CPU(swiglu)(const fo_swiglu_params *a) {
    fo_cpu_parallel(a->rows * fo_cpu_chunks(a->cols), CPU_CHUNK, swiglu_pieces, a);
}
