/* cpu/clamped_swiglu.c: gpt-oss's clamped SwiGLU and its gradients: the CPU
 * kernels, compiled once for each instruction set (cpu_kernels.h) and chosen
 * at load. Arithmetic in double, rounded once. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* Piece (r, c0, n)'s gate and up: columns [c0, c0 + n) of each. */
static void load_gate_up(const fo_clamped_swiglu_args *a, int64_t r, int64_t c0, int64_t n,
                         double *gate, double *up) {
    const int64_t row = r * a->gate_up_row_stride;
    if (a->layout == FO_GLU_HALVES) {
        fo_cpu_load(gate, (const void *)a->gate_up, row + c0, n, a->dtype);
        fo_cpu_load(up, (const void *)a->gate_up, row + a->cols + c0, n, a->dtype);
        return;
    }
    double pairs[2 * CPU_CHUNK];
    fo_cpu_load(pairs, (const void *)a->gate_up, row + 2 * c0, 2 * n, a->dtype);
    for (int64_t i = 0; i < n; i++) gate[i] = pairs[2 * i], up[i] = pairs[2 * i + 1];
}

/* Piece (r, c0, n)'s gradients, laid out as gate_up. */
static void store_gradients(const fo_clamped_swiglu_args *a, int64_t r, int64_t c0, int64_t n,
                            const double *dgate, const double *dup) {
    const int64_t row = r * 2 * a->cols;
    if (a->layout == FO_GLU_HALVES) {
        fo_cpu_store((void *)a->dgate_up, row + c0, dgate, n, a->dtype);
        fo_cpu_store((void *)a->dgate_up, row + a->cols + c0, dup, n, a->dtype);
        return;
    }
    double pairs[2 * CPU_CHUNK];
    for (int64_t i = 0; i < n; i++) pairs[2 * i] = dgate[i], pairs[2 * i + 1] = dup[i];
    fo_cpu_store((void *)a->dgate_up, row + 2 * c0, pairs, 2 * n, a->dtype);
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces (each
 * independent); one loop for both passes: dy == 0 means forward. The
 * comparisons keep a NaN gate or up NaN, as torch.clamp does. */
static void clamped_swiglu_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_clamped_swiglu_args *a = ctx;
    const double alpha = a->alpha, limit = a->limit;
    double gate[CPU_CHUNK], up[CPU_CHUNK], dy[CPU_CHUNK], first[CPU_CHUNK], second[CPU_CHUNK];
    const int64_t chunks = fo_cpu_chunks(a->cols);
    int64_t r = k0 < k1 ? k0 / chunks : 0,
            c0 = k0 < k1 ? k0 % chunks * CPU_CHUNK : 0; /* stepped: no division a piece */
    for (int64_t k = k0; k < k1; k++, c0 += CPU_CHUNK) {
        if (c0 >= a->cols) r++, c0 = 0;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        load_gate_up(a, r, c0, n, gate, up);
        if (a->dy) fo_cpu_load(dy, (const void *)a->dy, r * a->dy_row_stride + c0, n, a->dtype);
        for (int64_t i = 0; i < n; i++) {
            const double g = gate[i] > limit ? limit : gate[i];
            const double u = up[i] > limit ? limit : up[i] < -limit ? -limit : up[i];
            const double s = 1.0 / (1.0 + exp(-alpha * g));
            if (!a->dy) {
                first[i] = (u + 1.0) * (g * s);
                continue;
            }
            const int gate_passes = a->grad_at_limit ? gate[i] <= limit : gate[i] < limit;
            const int up_passes = a->grad_at_limit ? up[i] >= -limit && up[i] <= limit
                                                   : up[i] > -limit && up[i] < limit;
            first[i] = gate_passes ? dy[i] * (u + 1.0) * s * (1.0 + alpha * g * (1.0 - s)) : 0.0;
            second[i] = up_passes ? dy[i] * (g * s) : 0.0;
        }
        if (a->dy)
            store_gradients(a, r, c0, n, first, second);
        else
            fo_cpu_store((void *)a->y, r * a->cols + c0, first, n, a->dtype);
    }
}

void FO_CPU(clamped_swiglu)(const fo_clamped_swiglu_args *a) {
    fo_cpu_parallel_pieces(a->rows, a->cols, clamped_swiglu_pieces, a);
}
