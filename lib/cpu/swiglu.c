/* cpu/swiglu.c: y = silu(gate) * up and its gradients: the CPU kernels, compiled once for each
 * instruction set (cpu_kernels.h) and chosen at load. */
#include <float.h>
#include <math.h>

#include "cpu_convert.h"
#include "cpu_exp.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* n elements of float32, bfloat16 or float16 operands as floats, in double
 * arithmetic with the exp that vectorizes (cpu_exp.h); dy == NULL: forward
 * (y into first), else dgate into first and dup into second (either NULL). */
static void swiglu_doubles(const float *restrict gate, const float *restrict up,
                           const float *restrict dy, float *restrict first, float *restrict second,
                           int64_t n) {
    if (!dy) {
        for (int64_t i = 0; i < n; i++) {
            const double g = gate[i];
            first[i] = (float)(g / (1.0 + fo_exp_for_float(-g)) * up[i]);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) { /* read before either write: the outputs may be the inputs */
        const double g = gate[i], u = up[i], d = dy[i], s = 1.0 / (1.0 + fo_exp_for_float(-g));
        if (first) first[i] = (float)(d * u * s * (1.0 + g * (1.0 - s)));
        if (second) second[i] = (float)(d * g * s);
    }
}

/* Where float's exp(-|g|) underflows (cpu_exp.h): such a gate's sigmoid is
 * below float's normals, so those elements take the double arithmetic. */
#define FLOAT_SIGMOID_MIN_GATE -87.0f

/* Whether float cannot hold an element's terms: its gate's sigmoid, or (with
 * dy) dy * up, which silu'(g) (at most 1.1) may bring back into range. */
static inline int needs_double(float g, float u, const float *dy, int64_t i) {
    return g < FLOAT_SIGMOID_MIN_GATE || (dy && !(fabsf(dy[i] * u) <= FLT_MAX));
}

/* swiglu_doubles' values in float arithmetic, for outputs of 16 bits: with
 * e = exp(-|g|) and q = 1 / (1 + e), sigmoid(g) and 1 - sigmoid(g) are q and
 * e q (swapped for g < 0), neither cancelling; each has a relative error
 * under 4e-7, far under a 16-bit half ulp (2^-11 at best). Each output's
 * last product joins a term that is either a normal float or at most 1.1
 * times the other (g s and silu'(g) = s (1 + g (1 - s))), so one under- or
 * overflow costs only that product's rounding. Returns whether any element
 * needs_double (swiglu_halves redoes those). */
static inline int swiglu_float_math(const float *restrict gate, const float *restrict up,
                                    const float *restrict dy, float *restrict first,
                                    float *restrict second, int64_t n) {
    int redo = 0;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], u = up[i];
        const float e = fo_expf_nonpositive(-fabsf(g)), q = 1.0f / (1.0f + e), p = e * q;
        const float s = g >= 0.0f ? q : p, one_minus_s = g >= 0.0f ? p : q;
        redo |= needs_double(g, u, dy, i);
        if (!dy) {
            first[i] = (g * s) * u;
            continue;
        }
        const float d = dy[i];
        if (first) first[i] = (d * u) * (s * (1.0f + g * one_minus_s));
        if (second) second[i] = d * (g * s);
    }
    return redo;
}

/* swiglu_doubles for outputs rounded to 16 bits: in float, and the rare
 * elements that float cannot hold again in double. The outputs are buffers
 * apart from the inputs (16-bit operands are converted). */
static inline void swiglu_halves(const float *restrict gate, const float *restrict up,
                                 const float *restrict dy, float *restrict first,
                                 float *restrict second, int64_t n) {
    if (!swiglu_float_math(gate, up, dy, first, second, n)) return;
    for (int64_t i = 0; i < n; i++) {
        if (!needs_double(gate[i], up[i], dy, i)) continue;
        float one_first, one_second;
        swiglu_doubles(gate + i, up + i, dy ? dy + i : NULL, first ? &one_first : NULL,
                       second ? &one_second : NULL, 1);
        if (first) first[i] = one_first;
        if (second) second[i] = one_second;
    }
}

/* y (dy == NULL) or the gradients of n elements as floats, in the arithmetic
 * the output dtype's rounding allows. */
static void swiglu_floats(const float *restrict gate, const float *restrict up,
                          const float *restrict dy, float *restrict first, float *restrict second,
                          int64_t n, int dtype) {
    if (dtype == FO_DTYPE_F32)
        swiglu_doubles(gate, up, dy, first, second, n);
    else
        swiglu_halves(gate, up, dy, first, second, n);
}

/* The forward's elements [c0, c0 + n) of row r into dst, n of `dtype`
 * (float64 with libm's exp). */
static void forward_piece(const void *op, int64_t r, int64_t c0, int64_t n, void *dst) {
    const fo_swiglu_params *a = op;
    if (a->dtype == FO_DTYPE_F64) {
        const double *restrict gate = (const double *)a->gate + r * a->gate_row_stride + c0;
        const double *restrict up = (const double *)a->up + r * a->up_row_stride + c0;
        double *restrict y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
        return;
    }
    float gate[CPU_CHUNK], up[CPU_CHUNK], y_buf[CPU_CHUNK];
    const float *g = fo_float_in(gate, a->gate, r * a->gate_row_stride + c0, n, a->dtype);
    const float *u = fo_float_in(up, a->up, r * a->up_row_stride + c0, n, a->dtype);
    float *y = fo_float_out(y_buf, dst, 0, a->dtype);
    swiglu_floats(g, u, NULL, y, NULL, n, a->dtype);
    fo_float_done(dst, 0, y, n, a->dtype);
}

/* A float64 backward piece, with libm's exp. */
static void backward_piece_f64(const fo_swiglu_params *a, int64_t r, int64_t c0, int64_t n) {
    const double *restrict gate = (const double *)a->gate + r * a->gate_row_stride + c0;
    const double *restrict up = (const double *)a->up + r * a->up_row_stride + c0;
    double *restrict first = a->y_or_dgate ? (double *)a->y_or_dgate + r * a->cols + c0 : NULL;
    const double *restrict dy = (const double *)a->dy + r * a->dy_row_stride + c0;
    double *restrict second = a->dup ? (double *)a->dup + r * a->cols + c0 : NULL;
    for (int64_t i = 0; i < n; i++) { /* read before either write: the outputs may be the inputs */
        const double g = gate[i], u = up[i], d = dy[i], s = 1.0 / (1.0 + exp(-g));
        if (first) first[i] = d * u * s * (1.0 + g * (1.0 - s));
        if (second) second[i] = d * g * s;
    }
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces (each
 * independent); dy == 0 means forward. */
static void swiglu_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_swiglu_params *a = ctx;
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
        swiglu_floats(g, u, d, y1, y2, n, a->dtype);
        if (y1) fo_float_done(a->y_or_dgate, out, y1, n, a->dtype);
        if (y2) fo_float_done(a->dup, out, y2, n, a->dtype);
    }
}

void FO_CPU(swiglu)(const fo_swiglu_params *a) {
    if (a->fp8) {
        FO_CPU(write_fp8_output)(a->fp8, a->rows, a->cols, forward_piece, a, a->dtype);
        return;
    }
    fo_cpu_parallel_pieces(a->rows, a->cols, swiglu_pieces, a);
}
