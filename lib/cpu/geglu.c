/* cpu/geglu.c: y = gelu(gate) * up and its gradients: the CPU kernels, compiled once for each
 * instruction set (cpu_kernels.h) and chosen at load. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

#define SQRT_HALF 0.70710678118654752440 /* 1 / sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */
#define SQRT_2_OVER_PI 0.79788456080286535588 /* sqrt(2 / pi) */
#define TANH_CUBIC 0.044715

/* gelu(g), and gelu'(g) into *grad where grad is not NULL. The exact
 * form's Phi(g) is erfc(-g / sqrt(2)) / 2, which keeps its digits for
 * negative g, where 1 + erf(g / sqrt(2)) cancels. */
static double gelu(double g, int approximate, double *grad) {
    if (approximate == FO_GELU_TANH) {
        const double t = tanh(SQRT_2_OVER_PI * (g + TANH_CUBIC * g * g * g));
        if (grad)
            *grad = 0.5 * (1.0 + t) +
                    0.5 * g * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * TANH_CUBIC * g * g);
        return 0.5 * g * (1.0 + t);
    }
    const double cdf = 0.5 * erfc(-g * SQRT_HALF);
    if (grad) *grad = cdf + g * exp(-0.5 * g * g) * INV_SQRT_2PI;
    return g * cdf;
}

/* A float32 piece straight from and to memory: the generic path's double
 * arithmetic, term for term (the same bits), without its buffers. */
static void geglu_piece_f32(const fo_geglu_params *a, int64_t r, int64_t c0, int64_t n) {
    const float *restrict gate = (const float *)a->gate + r * a->gate_row_stride + c0;
    const float *restrict up = (const float *)a->up + r * a->up_row_stride + c0;
    float *restrict first = a->y_or_dgate ? (float *)a->y_or_dgate + r * a->cols + c0 : NULL;
    if (!a->dy) {
        for (int64_t i = 0; i < n; i++)
            first[i] = (float)(gelu(gate[i], a->approximate, NULL) * up[i]);
        return;
    }
    const float *restrict dy = (const float *)a->dy + r * a->dy_row_stride + c0;
    float *restrict second = a->dup ? (float *)a->dup + r * a->cols + c0 : NULL;
    for (int64_t i = 0; i < n; i++) {
        double grad;
        const double d = dy[i], value = gelu(gate[i], a->approximate, &grad);
        if (first) first[i] = (float)(d * up[i] * grad);
        if (second) second[i] = (float)(d * value);
    }
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces (each
 * independent); one loop for both passes: dy == 0 means forward. */
static void geglu_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_geglu_params *a = ctx;
    double gate[CPU_CHUNK], up[CPU_CHUNK], dy[CPU_CHUNK];
    double first[CPU_CHUNK], second[CPU_CHUNK];
    const int64_t chunks = fo_cpu_chunks(a->cols);
    for (int64_t k = k0; k < k1; k++) {
        const int64_t r = k / chunks, c0 = k % chunks * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        if (a->dtype == FO_DTYPE_F32) {
            geglu_piece_f32(a, r, c0, n);
            continue;
        }
        fo_cpu_load(gate, a->gate, r * a->gate_row_stride + c0, n, a->dtype);
        fo_cpu_load(up, a->up, r * a->up_row_stride + c0, n, a->dtype);
        if (!a->dy) {
            for (int64_t i = 0; i < n; i++) first[i] = gelu(gate[i], a->approximate, NULL) * up[i];
            fo_cpu_store(a->y_or_dgate, r * a->cols + c0, first, n, a->dtype);
            continue;
        }
        fo_cpu_load(dy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
        for (int64_t i = 0; i < n; i++) {
            double grad;
            const double value = gelu(gate[i], a->approximate, &grad);
            first[i] = dy[i] * up[i] * grad;
            second[i] = dy[i] * value;
        }
        if (a->y_or_dgate) fo_cpu_store(a->y_or_dgate, r * a->cols + c0, first, n, a->dtype);
        if (a->dup) fo_cpu_store(a->dup, r * a->cols + c0, second, n, a->dtype);
    }
}

void FO_CPU(geglu)(const fo_geglu_params *a) {
    fo_cpu_parallel(a->rows * fo_cpu_chunks(a->cols), CPU_CHUNK, geglu_pieces, a);
}
