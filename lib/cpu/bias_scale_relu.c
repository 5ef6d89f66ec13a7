/* cpu/bias_scale_relu.c: relu(x * scale + bias), forward and backward: the CPU kernels, compiled once for each instruction set
 * (cpu_kernels.h) and chosen at load. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* Mask bits of y[0..n): set where y is not <= 0 (see forward_pieces).
 * Flags a byte each first (a vector compare), then eight flags x (byte b
 * of x is flag b, 0 or 1) into one byte: x * 0x0102040810204080 gathers
 * flag b at bit 56 + b, with no carries (each column of the product has
 * at most one set bit). */
static void mask_of_f32(unsigned char *restrict mask, const float *restrict y,
                        int64_t n) {
    unsigned char flag[CPU_CHUNK + 8] = {0};
    for (int64_t i = 0; i < n; i++) flag[i] = !(y[i] <= 0.0f);
    for (int64_t j = 0; j < (n + 7) / 8; j++) {
        uint64_t x = 0;
        for (int b = 0; b < 8; b++) x |= (uint64_t)flag[8 * j + b] << (8 * b);
        mask[j] = (unsigned char)((x * 0x0102040810204080u) >> 56);
    }
}

/* The float32 piece straight from and to memory: the generic path's double
 * arithmetic (the same bits: x * scale + bias rounds once, and + 0.0 makes
 * -0 +0 as there), without its buffers. */
static void forward_piece_f32(const fo_bias_scale_relu_forward_params *a,
                              int64_t r, int64_t c0, int64_t n) {
    const float *restrict x = (const float *)a->x + r * a->x_row_stride + c0;
    const float *restrict bias = a->bias ? (const float *)a->bias + c0 : NULL;
    float *restrict y = (float *)a->y + r * a->cols + c0;
    const double scale = a->scale;
    double v[CPU_CHUNK];
    if (bias)
        for (int64_t i = 0; i < n; i++) v[i] = x[i] * scale + bias[i];
    else
        for (int64_t i = 0; i < n; i++) v[i] = x[i] * scale + 0.0;
    /* apart from the conversion: in one loop with it, gcc 12 vectorized
     * neither */
    for (int64_t i = 0; i < n; i++) v[i] = v[i] < 0.0 ? 0.0 : v[i];
    for (int64_t i = 0; i < n; i++) y[i] = (float)v[i];
    if (a->mask)
        mask_of_f32(a->mask + r * fo_mask_row_bytes(a->cols) + c0 / 8, y, n);
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces, each
 * independent (a piece's mask bytes are its own: CPU_CHUNK is a multiple of
 * 8). */
static void forward_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_bias_scale_relu_forward_params *a = ctx;
    double x[CPU_CHUNK], bias[CPU_CHUNK], y[CPU_CHUNK];
    const double scale = a->scale;
    const int64_t mask_row_bytes = fo_mask_row_bytes(a->cols);
    const int64_t chunks = fo_cpu_chunks(a->cols);
    const int f32 = a->dtype == FO_DTYPE_F32 && a->bias_dtype == FO_DTYPE_F32;
    for (int64_t k = k0; k < k1; k++) {
        const int64_t r = k / chunks, c0 = k % chunks * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        if (f32) {
            forward_piece_f32(a, r, c0, n);
            continue;
        }
        fo_cpu_load(x, a->x, r * a->x_row_stride + c0, n, a->dtype);
        if (a->bias)
            fo_cpu_load(bias, a->bias, c0, n, a->bias_dtype);
        else
            for (int64_t i = 0; i < n; i++) bias[i] = 0.0;
        /* branch-free, so it vectorizes; NaN passes through, as in torch */
        for (int64_t i = 0; i < n; i++) {
            double v = x[i] * scale + bias[i];
            y[i] = v < 0.0 ? 0.0 : v;
        }
        fo_cpu_store(a->y, r * a->cols + c0, y, n, a->dtype);
        if (!a->mask)
            continue;
        /* the mask says where the y as stored is not <= 0: a tiny positive
         * value rounded to 0 passes no gradient, and NaN passes it, as
         * torch's threshold_backward does */
        fo_cpu_load(y, a->y, r * a->cols + c0, n, a->dtype);
        /* c0 is a multiple of 8, so every mask byte lies in one chunk */
        unsigned char *mask = a->mask + r * mask_row_bytes + c0 / 8;
        for (int64_t i = 0; i < n; i += 8) {
            unsigned bits = 0;
            for (int64_t b = 0; b < 8 && i + b < n; b++)
                bits |= (unsigned)!(y[i + b] <= 0.0) << b;
            mask[i / 8] = (unsigned char)bits;
        }
    }
}

/* backward_piece for float32, straight from and to memory (dy * scale in
 * double, rounded once, as there). */
static void backward_piece_f32(const fo_bias_scale_relu_backward_params *a,
                               int64_t r, int64_t c0, int64_t n,
                               double *restrict dbias) {
    const float *restrict dy = (const float *)a->dy + r * a->dy_row_stride + c0;
    const unsigned char *restrict mask =
        a->mask + r * fo_mask_row_bytes(a->cols) + c0 / 8;
    float g[CPU_CHUNK];
    unsigned char kept[CPU_CHUNK];
    /* byte by byte, each bit by a constant test: this vectorizes */
    for (int64_t j = 0; j < (n + 7) / 8; j++)
        for (int b = 0; b < 8; b++) kept[8 * j + b] = (mask[j] & (1u << b)) != 0;
    for (int64_t i = 0; i < n; i++) {
        const float d = dy[i]; /* loaded either way: a select, no branch */
        g[i] = kept[i] ? d : 0.0f;
    }
    if (dbias)
        for (int64_t i = 0; i < n; i++) dbias[i] += (double)g[i];
    if (a->dx) {
        float *restrict dx = (float *)a->dx + r * a->cols + c0;
        const double scale = a->scale;
        for (int64_t i = 0; i < n; i++) dx[i] = (float)(g[i] * scale);
    }
}

/* dx of one piece (row r, columns c0 .. c0 + n), its gradient added into
 * dbias[0 .. n) (when dbias is not null). */
static void backward_piece(const fo_bias_scale_relu_backward_params *a,
                           int64_t r, int64_t c0, int64_t n, double *dbias) {
    double dy[CPU_CHUNK], dx[CPU_CHUNK];
    unsigned char kept[CPU_CHUNK];
    const unsigned char *mask = a->mask + r * fo_mask_row_bytes(a->cols) + c0 / 8;
    if (a->dtype == FO_DTYPE_F32 && a->bias_dtype == FO_DTYPE_F32) {
        backward_piece_f32(a, r, c0, n, dbias);
        return;
    }
    fo_cpu_load(dy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
    /* bits to flags first: the select below then compiles to a vector
     * blend, not a branch that random masks mispredict */
    for (int64_t i = 0; i < n; i++)
        kept[i] = (mask[i >> 3] >> (i & 7)) & 1u;
    for (int64_t i = 0; i < n; i++) {
        double g = kept[i] ? dy[i] : 0.0;
        if (dbias) dbias[i] += g;
        dx[i] = g * a->scale;
    }
    if (a->dx)
        fo_cpu_store(a->dx, r * a->cols + c0, dx, n, a->dtype);
}

/* With a bias gradient: column chunks [k0, k1), all rows, columns outer,
 * so each dbias chunk is summed in row order, whichever thread takes it. */
static void backward_columns(const void *ctx, int64_t k0, int64_t k1) {
    const fo_bias_scale_relu_backward_params *a = ctx;
    double dbias[CPU_CHUNK];
    for (int64_t k = k0; k < k1; k++) {
        const int64_t c0 = k * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        for (int64_t i = 0; i < n; i++) dbias[i] = 0.0;
        for (int64_t r = 0; r < a->rows; r++) backward_piece(a, r, c0, n, dbias);
        fo_cpu_store(a->dbias, c0, dbias, n, a->bias_dtype);
    }
}

/* Without one: pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces. */
static void backward_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_bias_scale_relu_backward_params *a = ctx;
    const int64_t chunks = fo_cpu_chunks(a->cols);
    for (int64_t k = k0; k < k1; k++) {
        const int64_t r = k / chunks, c0 = k % chunks * CPU_CHUNK;
        backward_piece(a, r, c0, a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK, NULL);
    }
}

void FO_CPU(bias_scale_relu_backward)(const fo_bias_scale_relu_backward_params *a) {
    const int64_t chunks = fo_cpu_chunks(a->cols);
    if (a->dbias)
        fo_cpu_parallel(chunks, a->rows * fo_cpu_chunk_width(a->cols), backward_columns, a);
    else
        fo_cpu_parallel(a->rows * chunks, CPU_CHUNK, backward_pieces, a);
}

void FO_CPU(bias_scale_relu_forward)(const fo_bias_scale_relu_forward_params *a) {
    fo_cpu_parallel(a->rows * fo_cpu_chunks(a->cols), CPU_CHUNK, forward_pieces, a);
}
