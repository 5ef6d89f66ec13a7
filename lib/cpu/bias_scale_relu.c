/* cpu/bias_scale_relu.c: relu(x * scale + bias), forward and backward: the CPU kernels, compiled
 * once for each instruction set (cpu_kernels.h) and chosen at load. */
#include <math.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* Mask bits of y[0..n): set where y is not <= 0 (see forward_pieces).
 * Flags a byte each first (a vector compare), then eight flags x (byte b
 * of x is flag b, 0 or 1) into one byte: x * 0x0102040810204080 gathers
 * flag b at bit 56 + b, with no carries (each column of the product has
 * at most one set bit). */
static void pack_flags(unsigned char *restrict mask, const unsigned char *restrict flag,
                       int64_t n) {
    for (int64_t j = 0; j < (n + 7) / 8; j++) {
        uint64_t x; /* little-endian: byte b is flag b */
        memcpy(&x, flag + 8 * j, sizeof x);
        mask[j] = (unsigned char)((x * 0x0102040810204080u) >> 56);
    }
}

static void mask_of_f32(unsigned char *restrict mask, const float *restrict y, int64_t n) {
    unsigned char flag[CPU_CHUNK + 8] = {0};
    for (int64_t i = 0; i < n; i++) flag[i] = !(y[i] <= 0.0f);
    pack_flags(mask, flag, n);
}

/* relu of a bfloat16 or float16 piece on its bits, in one pass: a negative
 * value or -0 becomes +0, the rest (NaN too) is kept, which is x + 0.0
 * rounded back; y is not <= 0 exactly where its bits are not 0. Converting
 * to float and back, then y again for the mask, took 1.3 ms at 4096 x 1024
 * bf16 against torch's 0.84. */
static void relu_piece_halves(const fo_bias_scale_relu_forward_params *a, int64_t r, int64_t c0,
                              int64_t n) {
    const uint16_t *restrict x = (const uint16_t *)a->x + r * a->x_row_stride + c0;
    uint16_t *restrict y = (uint16_t *)a->y + r * a->cols + c0;
    const uint16_t inf = a->dtype == FO_DTYPE_BF16 ? 0x7f80 : 0x7c00;
    unsigned char flag[CPU_CHUNK + 8] = {0};
    for (int64_t i = 0; i < n; i++) {
        const uint16_t b = x[i];
        const uint16_t v = !(b & 0x8000) || (b & 0x7fff) > inf ? b : 0;
        y[i] = v;
        flag[i] = v != 0;
    }
    if (a->mask) pack_flags(a->mask + r * fo_mask_row_bytes(a->cols) + c0 / 8, flag, n);
}

/* A piece of a float32, bfloat16 or float16 tensor, in float as torch
 * computes these dtypes (+ 0.0 makes -0 +0; NaN passes through). The mask
 * is taken from y as stored: a tiny positive value that float16 rounds to 0
 * passes no gradient. */
static void forward_piece_float(const fo_bias_scale_relu_forward_params *a, int64_t r, int64_t c0,
                                int64_t n) {
    if (a->scale == 1.0 && !a->bias && a->dtype != FO_DTYPE_F32) {
        relu_piece_halves(a, r, c0, n);
        return;
    }
    float x_buf[CPU_CHUNK], bias_buf[CPU_CHUNK], y_buf[CPU_CHUNK], stored_buf[CPU_CHUNK];
    const float *restrict x = fo_float_in(x_buf, a->x, r * a->x_row_stride + c0, n, a->dtype);
    const int64_t out = r * a->cols + c0;
    float *restrict y = fo_float_out(y_buf, a->y, out, a->dtype);
    /* x * scale + bias in double, rounded once: x * scale may overflow float */
    const double scale = a->scale;
    /* the select in double, the rounding in a loop of its own: a select
     * beside the conversion compiles to a branch, mispredicted on signs */
    double v[CPU_CHUNK];
    if (scale == 1.0 && !a->bias) { /* relu: x + 0.0 is exact in float */
        for (int64_t i = 0; i < n; i++) {
            const float t = x[i] + 0.0f;
            y[i] = t < 0.0f ? 0.0f : t;
        }
    } else if (a->bias) {
        const float *restrict bias = fo_float_in(bias_buf, a->bias, c0, n, a->bias_dtype);
        for (int64_t i = 0; i < n; i++) {
            const double t = x[i] * scale + bias[i];
            v[i] = t < 0.0 ? 0.0 : t;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            const double t = x[i] * scale + 0.0;
            v[i] = t < 0.0 ? 0.0 : t;
        }
    }
    if (scale != 1.0 || a->bias)
        for (int64_t i = 0; i < n; i++) y[i] = (float)v[i];
    fo_float_done(a->y, out, y, n, a->dtype);
    if (a->mask)
        mask_of_f32(a->mask + r * fo_mask_row_bytes(a->cols) + c0 / 8,
                    fo_float_in(stored_buf, a->y, out, n, a->dtype), n);
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
    const int f64 = a->dtype == FO_DTYPE_F64 || a->bias_dtype == FO_DTYPE_F64;
    /* the first piece's row and column, then stepped: a 64-bit division a piece cost as much as
     * relu's 256 elements from cache */
    int64_t r = k0 < k1 ? k0 / chunks : 0, c0 = k0 < k1 ? k0 % chunks * CPU_CHUNK : 0;
    for (int64_t k = k0; k < k1; k++, c0 += CPU_CHUNK) {
        if (c0 >= a->cols) r++, c0 = 0;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        if (!f64) {
            forward_piece_float(a, r, c0, n);
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
        if (!a->mask) continue;
        /* the mask says where the y as stored is not <= 0: a tiny positive
         * value rounded to 0 passes no gradient, and NaN passes it, as
         * torch's threshold_backward does */
        fo_cpu_load(y, a->y, r * a->cols + c0, n, a->dtype);
        /* c0 is a multiple of 8, so every mask byte lies in one chunk */
        unsigned char *mask = a->mask + r * mask_row_bytes + c0 / 8;
        for (int64_t i = 0; i < n; i += 8) {
            unsigned bits = 0;
            for (int64_t b = 0; b < 8 && i + b < n; b++) bits |= (unsigned)!(y[i + b] <= 0.0) << b;
            mask[i / 8] = (unsigned char)bits;
        }
    }
}

/* backward_piece in float for float32, bfloat16 and float16 (dbias sums in
 * double). */
static void backward_piece_float(const fo_bias_scale_relu_backward_params *a, int64_t r, int64_t c0,
                                 int64_t n, double *restrict dbias) {
    float dy_buf[CPU_CHUNK], dx_buf[CPU_CHUNK], g[CPU_CHUNK];
    const unsigned char *restrict mask = a->mask + r * fo_mask_row_bytes(a->cols) + c0 / 8;
    unsigned char kept[CPU_CHUNK];
    /* a mask byte to eight flag bytes: copied into every byte, byte b keeps
     * bit b, and + 0x7f carries any set bit to the byte's top (no carry out) */
    for (int64_t j = 0; j < (n + 7) / 8; j++) {
        const uint64_t bits = (uint64_t)mask[j] * 0x0101010101010101u & 0x8040201008040201u;
        const uint64_t flags = (bits + 0x7f7f7f7f7f7f7f7fu) >> 7 & 0x0101010101010101u;
        memcpy(kept + 8 * j, &flags, sizeof flags); /* little-endian: byte b */
    }
    if (a->scale == 1.0 && !dbias && a->dx && a->dtype != FO_DTYPE_F32) {
        /* relu's: dy's own bits where kept (g * 1.0 rounds to them), else +0 */
        const uint16_t *restrict d16 = (const uint16_t *)a->dy + r * a->dy_row_stride + c0;
        uint16_t *restrict dx16 = (uint16_t *)a->dx + r * a->cols + c0;
        for (int64_t i = 0; i < n; i++) dx16[i] = kept[i] ? d16[i] : 0;
        return;
    }
    const float *restrict dy = fo_float_in(dy_buf, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
    for (int64_t i = 0; i < n; i++) {
        const float d = dy[i]; /* loaded either way: a select, no branch */
        g[i] = kept[i] ? d : 0.0f;
    }
    if (dbias)
        for (int64_t i = 0; i < n; i++) dbias[i] += (double)g[i];
    if (a->dx) {
        const int64_t out = r * a->cols + c0;
        float *restrict dx = fo_float_out(dx_buf, a->dx, out, a->dtype);
        const double scale = a->scale; /* rounded once, as the forward */
        for (int64_t i = 0; i < n; i++) dx[i] = (float)(g[i] * scale);
        fo_float_done(a->dx, out, dx, n, a->dtype);
    }
}

/* dx of one piece (row r, columns c0 .. c0 + n), its gradient added into
 * dbias[0 .. n) (when dbias is not null). */
static void backward_piece(const fo_bias_scale_relu_backward_params *a, int64_t r, int64_t c0,
                           int64_t n, double *dbias) {
    double dy[CPU_CHUNK], dx[CPU_CHUNK];
    unsigned char kept[CPU_CHUNK];
    const unsigned char *mask = a->mask + r * fo_mask_row_bytes(a->cols) + c0 / 8;
    if (a->dtype != FO_DTYPE_F64 && a->bias_dtype != FO_DTYPE_F64) {
        backward_piece_float(a, r, c0, n, dbias);
        return;
    }
    fo_cpu_load(dy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
    /* bits to flags first: the select below then compiles to a vector
     * blend, not a branch that random masks mispredict */
    for (int64_t i = 0; i < n; i++) kept[i] = (mask[i >> 3] >> (i & 7)) & 1u;
    for (int64_t i = 0; i < n; i++) {
        double g = kept[i] ? dy[i] : 0.0;
        if (dbias) dbias[i] += g;
        dx[i] = g * a->scale;
    }
    if (a->dx) fo_cpu_store(a->dx, r * a->cols + c0, dx, n, a->dtype);
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
    int64_t r = k0 < k1 ? k0 / chunks : 0,
            c0 = k0 < k1 ? k0 % chunks * CPU_CHUNK : 0; /* stepped, as forward_pieces' */
    for (int64_t k = k0; k < k1; k++, c0 += CPU_CHUNK) {
        if (c0 >= a->cols) r++, c0 = 0;
        backward_piece(a, r, c0, a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK, NULL);
    }
}

void FO_CPU(bias_scale_relu_backward)(const fo_bias_scale_relu_backward_params *a) {
    const int64_t chunks = fo_cpu_chunks(a->cols);
    if (a->dbias)
        fo_cpu_parallel(chunks, a->rows * fo_cpu_chunk_width(a->cols), backward_columns, a);
    else
        fo_cpu_parallel_pieces(a->rows, a->cols, backward_pieces, a);
}

void FO_CPU(bias_scale_relu_forward)(const fo_bias_scale_relu_forward_params *a) {
    fo_cpu_parallel_pieces(a->rows, a->cols, forward_pieces, a);
}
