/* cpu/geglu.c: y = gelu(gate) * up and its gradients: the CPU kernels, compiled once for each
 * instruction set (cpu_kernels.h) and chosen at load. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_exp.h"
#include "cpu_float.h"
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

/* gelu's tanh form, for results rounded to float32 or narrower, from one
 * exp that vectorizes (cpu_exp.h): with s = sigmoid(2y) = 1 / (1 + e),
 * e = exp(-2y), 1 + tanh(y) = 2s and 1 - tanh(y) = 2es, neither cancelling
 * (1 + t and 1 - t*t from t itself lose digits near t = -1 and 1). */
static inline double gelu_tanh_for_float(double g, double *grad) {
    double y = SQRT_2_OVER_PI * (g + TANH_CUBIC * g * g * g);
    y = y < -300.0 ? -300.0 : y > 300.0 ? 300.0 : y; /* e stays finite; past it s rounds the same */
    const double e = fo_exp_for_float(-2.0 * y), s = 1.0 / (1.0 + e);
    if (grad) *grad = s + 2.0 * g * (e * s * s) * SQRT_2_OVER_PI * (1.0 + 3.0 * TANH_CUBIC * g * g);
    return g * s;
}

/* n elements of float32, bfloat16 or float16 operands as floats, in double
 * arithmetic; dy == NULL: forward (y into first), else dgate into first and
 * dup into second (either NULL). The tanh form vectorizes, the erf form
 * calls libm's erfc. */
static void geglu_floats(const float *restrict gate, const float *restrict up,
                         const float *restrict dy, float *restrict first, float *restrict second,
                         int64_t n, int approximate) {
    const int tanh_form = approximate == FO_GELU_TANH;
    if (!dy) {
        if (tanh_form)
            for (int64_t i = 0; i < n; i++)
                first[i] = (float)(gelu_tanh_for_float(gate[i], NULL) * up[i]);
        else
            for (int64_t i = 0; i < n; i++)
                first[i] = (float)(gelu(gate[i], approximate, NULL) * up[i]);
        return;
    }
    /* read before either write: the outputs may be the inputs */
    if (tanh_form)
        for (int64_t i = 0; i < n; i++) {
            double grad;
            const double u = up[i], d = dy[i], value = gelu_tanh_for_float(gate[i], &grad);
            if (first) first[i] = (float)(d * u * grad);
            if (second) second[i] = (float)(d * value);
        }
    else
        for (int64_t i = 0; i < n; i++) {
            double grad;
            const double u = up[i], d = dy[i], value = gelu(gate[i], approximate, &grad);
            if (first) first[i] = (float)(d * u * grad);
            if (second) second[i] = (float)(d * value);
        }
}

/* The forward's elements [c0, c0 + n) of row r into dst, n of `dtype`
 * (float64 with libm's tanh and erfc). */
static void forward_piece(const void *op, int64_t r, int64_t c0, int64_t n, void *dst) {
    const fo_geglu_params *a = op;
    if (a->dtype == FO_DTYPE_F64) {
        const double *restrict gate = (const double *)a->gate + r * a->gate_row_stride + c0;
        const double *restrict up = (const double *)a->up + r * a->up_row_stride + c0;
        double *restrict y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = gelu(gate[i], a->approximate, NULL) * up[i];
        return;
    }
    float gate[CPU_CHUNK], up[CPU_CHUNK], y_buf[CPU_CHUNK];
    const float *g = fo_float_in(gate, a->gate, r * a->gate_row_stride + c0, n, a->dtype);
    const float *u = fo_float_in(up, a->up, r * a->up_row_stride + c0, n, a->dtype);
    float *y = fo_float_out(y_buf, dst, 0, a->dtype);
    geglu_floats(g, u, NULL, y, NULL, n, a->approximate);
    fo_float_done(dst, 0, y, n, a->dtype);
}

/* A float64 backward piece, with libm's tanh, erfc and exp. */
static void backward_piece_f64(const fo_geglu_params *a, int64_t r, int64_t c0, int64_t n) {
    const double *restrict gate = (const double *)a->gate + r * a->gate_row_stride + c0;
    const double *restrict up = (const double *)a->up + r * a->up_row_stride + c0;
    double *restrict first = a->y_or_dgate ? (double *)a->y_or_dgate + r * a->cols + c0 : NULL;
    const double *restrict dy = (const double *)a->dy + r * a->dy_row_stride + c0;
    double *restrict second = a->dup ? (double *)a->dup + r * a->cols + c0 : NULL;
    for (int64_t i = 0; i < n; i++) { /* read before either write: the outputs may be the inputs */
        double grad;
        const double u = up[i], d = dy[i], value = gelu(gate[i], a->approximate, &grad);
        if (first) first[i] = d * u * grad;
        if (second) second[i] = d * value;
    }
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces (each
 * independent); dy == 0 means forward. */
static void geglu_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_geglu_params *a = ctx;
    float gate[CPU_CHUNK], up[CPU_CHUNK], dy[CPU_CHUNK], first[CPU_CHUNK], second[CPU_CHUNK];
    const int64_t chunks = fo_cpu_chunks(a->cols), size = fo_dtype_size(a->dtype);
    int64_t r = k0 < k1 ? k0 / chunks : 0,
            c0 = k0 < k1 ? k0 % chunks * CPU_CHUNK : 0; /* stepped: no division a piece */
    for (int64_t k = k0; k < k1; k++, c0 += CPU_CHUNK) {
        if (c0 >= a->cols) r++, c0 = 0;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        if (!a->dy) {
            forward_piece(a, r, c0, n, (char *)a->y_or_dgate + (r * a->cols + c0) * size);
            continue;
        }
        if (a->dtype == FO_DTYPE_F64) {
            backward_piece_f64(a, r, c0, n);
            continue;
        }
        const int64_t out = r * a->cols + c0;
        const float *g = fo_float_in(gate, a->gate, r * a->gate_row_stride + c0, n, a->dtype);
        const float *u = fo_float_in(up, a->up, r * a->up_row_stride + c0, n, a->dtype);
        const float *d = fo_float_in(dy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
        float *y1 = a->y_or_dgate ? fo_float_out(first, a->y_or_dgate, out, a->dtype) : NULL;
        float *y2 = a->dup ? fo_float_out(second, a->dup, out, a->dtype) : NULL;
        geglu_floats(g, u, d, y1, y2, n, a->approximate);
        if (y1) fo_float_done(a->y_or_dgate, out, y1, n, a->dtype);
        if (y2) fo_float_done(a->dup, out, y2, n, a->dtype);
    }
}

void FO_CPU(geglu)(const fo_geglu_params *a) {
    if (a->fp8) {
        FO_CPU(write_fp8_output)(a->fp8, a->rows, a->cols, forward_piece, a, a->dtype);
        return;
    }
    fo_cpu_parallel_pieces(a->rows, a->cols, geglu_pieces, a);
}
