/* cpu/dyt.c: DyT, y = weight * tanh(alpha * x) + bias, and its gradients: the CPU kernels,
 * compiled once for each instruction set (cpu_kernels.h) and chosen at load. They compute in
 * double and round once. */
#include <math.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

static double alpha_of(const fo_dyt_args *a) {
    double alpha;
    fo_cpu_load(&alpha, (const void *)a->alpha, 0, 1, a->param_dtype);
    return alpha;
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces, each independent. */
static void forward_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_dyt_args *a = ctx;
    double x[CPU_CHUNK], weight[CPU_CHUNK], bias[CPU_CHUNK];
    const double alpha = alpha_of(a);
    const int64_t chunks = fo_cpu_chunks(a->cols);
    int64_t r = k0 < k1 ? k0 / chunks : 0,
            c0 = k0 < k1 ? k0 % chunks * CPU_CHUNK : 0; /* stepped: no division a piece */
    for (int64_t k = k0; k < k1; k++, c0 += CPU_CHUNK) {
        if (c0 >= a->cols) r++, c0 = 0;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        fo_cpu_load(x, (const void *)a->x, r * a->x_row_stride + c0, n, a->dtype);
        fo_cpu_load(weight, (const void *)a->weight, c0, n, a->param_dtype);
        if (a->bias)
            fo_cpu_load(bias, (const void *)a->bias, c0, n, a->param_dtype);
        else
            for (int64_t i = 0; i < n; i++) bias[i] = 0.0;
        for (int64_t i = 0; i < n; i++) x[i] = weight[i] * tanh(alpha * x[i]) + bias[i];
        fo_cpu_store((void *)a->y, r * a->cols + c0, x, n, a->dtype);
    }
}

void FO_CPU(dyt_forward)(const fo_dyt_args *a) {
    fo_cpu_parallel_pieces(a->rows, a->cols, forward_pieces, a);
}

/* The gradients of row r, columns c0 .. c0 + n: dx written, the sums added
 * into dweight[0 .. n), dbias[0 .. n) and *dalpha (each where not NULL). */
static void backward_piece(const fo_dyt_args *a, double alpha, int64_t r, int64_t c0, int64_t n,
                           double *dweight, double *dbias, double *dalpha) {
    double x[CPU_CHUNK], dy[CPU_CHUNK], weight[CPU_CHUNK];
    fo_cpu_load(x, (const void *)a->x, r * a->x_row_stride + c0, n, a->dtype);
    fo_cpu_load(dy, (const void *)a->dy, r * a->dy_row_stride + c0, n, a->dtype);
    fo_cpu_load(weight, (const void *)a->weight, c0, n, a->param_dtype);
    double alpha_sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double t = tanh(alpha * x[i]), slope = 1.0 - t * t, dyw = dy[i] * weight[i];
        if (dweight) dweight[i] += dy[i] * t;
        if (dbias) dbias[i] += dy[i];
        alpha_sum += dyw * x[i] * slope;
        x[i] = dyw * alpha * slope; /* dx */
    }
    if (dalpha) *dalpha += alpha_sum;
    if (a->dx) fo_cpu_store((void *)a->dx, r * a->cols + c0, x, n, a->dtype);
}

/* With parameter gradients: column chunks [k0, k1), all rows, columns
 * outer, so each sum runs in row order whichever thread takes the chunk;
 * chunk k's part of dalpha goes to the workspace's double k. */
static void backward_columns(const void *ctx, int64_t k0, int64_t k1) {
    const fo_dyt_args *a = ctx;
    double dweight[CPU_CHUNK], dbias[CPU_CHUNK];
    unsigned char *alpha_parts = (unsigned char *)a->workspace; /* any alignment: memcpy */
    const double alpha = alpha_of(a);
    for (int64_t k = k0; k < k1; k++) {
        const int64_t c0 = k * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        double dalpha = 0.0;
        for (int64_t i = 0; i < n; i++) dweight[i] = dbias[i] = 0.0;
        for (int64_t r = 0; r < a->rows; r++)
            backward_piece(a, alpha, r, c0, n, a->dweight ? dweight : NULL, a->dbias ? dbias : NULL,
                           &dalpha);
        if (a->dweight) fo_cpu_store((void *)a->dweight, c0, dweight, n, a->param_dtype);
        if (a->dbias) fo_cpu_store((void *)a->dbias, c0, dbias, n, a->param_dtype);
        if (a->dalpha) memcpy(alpha_parts + k * sizeof dalpha, &dalpha, sizeof dalpha);
    }
}

/* dx alone: pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces. */
static void backward_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_dyt_args *a = ctx;
    const double alpha = alpha_of(a);
    const int64_t chunks = fo_cpu_chunks(a->cols);
    int64_t r = k0 < k1 ? k0 / chunks : 0,
            c0 = k0 < k1 ? k0 % chunks * CPU_CHUNK : 0; /* stepped: no division a piece */
    for (int64_t k = k0; k < k1; k++, c0 += CPU_CHUNK) {
        if (c0 >= a->cols) r++, c0 = 0;
        backward_piece(a, alpha, r, c0, a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK, NULL,
                       NULL, NULL);
    }
}

void FO_CPU(dyt_backward)(const fo_dyt_args *a) {
    const int64_t chunks = fo_cpu_chunks(a->cols);
    if (!a->dalpha && !a->dweight && !a->dbias) {
        fo_cpu_parallel_pieces(a->rows, a->cols, backward_pieces, a);
        return;
    }
    fo_cpu_parallel(chunks, a->rows * fo_cpu_chunk_width(a->cols), backward_columns, a);
    if (!a->dalpha) return;
    double dalpha = 0.0; /* the chunks' parts in chunk order: the same bits on any thread count */
    for (int64_t k = 0; k < chunks; k++) {
        double part;
        memcpy(&part, (const unsigned char *)a->workspace + k * sizeof part, sizeof part);
        dalpha += part;
    }
    fo_cpu_store((void *)a->dalpha, 0, &dalpha, 1, a->param_dtype);
}
