/* cpu/quantize_fp8.c: FP8 quantization with a dynamic scale (fused_ops.h,
 * fo_quantize_fp8), and the FP8 outputs of other ops (fo_fp8_out): the CPU
 * kernels, compiled once for each instruction set (cpu_kernels.h) and
 * chosen at load. The CUDA kernels give the same bytes: the scales come
 * from fp8.h, and the rounding below is the hardware's. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../fp8.h"
#include "cpu_convert.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* v (already within the format's range, or NaN) as FP8, to nearest, ties
 * to even; NaN as 0x7F whatever its sign, as the CUDA kernels write it. */
static inline uint8_t fp8_encode(float v, int fp8_dtype) {
    if (v != v) return 0x7F;
    const int e4m3 = fp8_dtype == FO_FP8_E4M3;
    const int mantissa = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    const uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    bits &= 0x7FFFFFFFu;
    const float a = fabsf(v);
    if (a < (e4m3 ? 0x1p-6f : 0x1p-14f)) {
        /* subnormal: a multiple of the smallest step (an exact scaling, then
         * rint rounds ties to even); 2^mantissa steps is the smallest
         * normal, whose code it also is */
        return sign | (uint8_t)rintf(a * (e4m3 ? 0x1p9f : 0x1p16f));
    }
    const int shift = 23 - mantissa;
    const uint32_t rounded = bits + ((1u << (shift - 1)) - 1) + ((bits >> shift) & 1);
    return sign | (uint8_t)((rounded >> shift) - ((uint32_t)(127 - bias) << mantissa));
}

/* One write_fp8 call. */
typedef struct {
    const fo_fp8_out *out;
    int64_t rows, cols, groups;
    fo_fp8_piece_fn piece;
    const void *src;
    float *maxima; /* tensorwise: a group of rows' amax each */
    float q; /* tensorwise: the tensor's multiplier */
} job;

/* The largest |value| of row r among its finite values (0 if none). */
static float row_amax(const job *j, int64_t r) {
    float buf[CPU_CHUNK], amax = 0.0f;
    for (int64_t c0 = 0; c0 < j->cols; c0 += CPU_CHUNK) {
        const int64_t n = j->cols - c0 < CPU_CHUNK ? j->cols - c0 : CPU_CHUNK;
        const float *v = j->piece(j->src, buf, r, c0, n);
        for (int64_t i = 0; i < n; i++) {
            const float m = fabsf(v[i]);
            if (m <= FLT_MAX && m > amax) amax = m;
        }
    }
    return amax;
}

/* Row r as FP8 with multiplier q, into y and y_t (where given). */
static void quantize_row(const job *j, int64_t r, float q) {
    const int fp8_dtype = j->out->fp8_dtype;
    const float limit = fo_fp8_max(fp8_dtype);
    uint8_t *y = (uint8_t *)j->out->y, *y_t = (uint8_t *)j->out->y_t;
    float buf[CPU_CHUNK];
    for (int64_t c0 = 0; c0 < j->cols; c0 += CPU_CHUNK) {
        const int64_t n = j->cols - c0 < CPU_CHUNK ? j->cols - c0 : CPU_CHUNK;
        const float *v = j->piece(j->src, buf, r, c0, n);
        for (int64_t i = 0; i < n; i++) {
            float s = v[i] * q;
            if (s > limit) s = limit; /* NaN passes both: it stays NaN */
            if (s < -limit) s = -limit;
            const uint8_t code = fp8_encode(s, fp8_dtype);
            if (y) y[r * j->cols + c0 + i] = code;
            if (y_t) y_t[(c0 + i) * j->rows + r] = code;
        }
    }
}

static void rowwise_rows(const void *ctx, int64_t r0, int64_t r1) {
    const job *j = ctx;
    float *scale = (float *)j->out->scale, *amax = (float *)j->out->amax;
    for (int64_t r = r0; r < r1; r++) {
        const float m = row_amax(j, r), q = fo_fp8_multiplier(m, j->out->fp8_dtype, 1);
        quantize_row(j, r, q);
        scale[r] = 1.0f / q;
        if (amax) amax[r] = m;
    }
}

/* Rows [g * rows / groups, (g + 1) * rows / groups) are group g. */
static int64_t group_start(const job *j, int64_t g) { return g * j->rows / j->groups; }

/* The maxima of groups [g0, g1) (max is exact in any order). */
static void amax_groups(const void *ctx, int64_t g0, int64_t g1) {
    const job *j = ctx;
    for (int64_t g = g0; g < g1; g++) {
        float m = 0.0f;
        for (int64_t r = group_start(j, g); r < group_start(j, g + 1); r++) {
            const float v = row_amax(j, r);
            if (v > m) m = v;
        }
        memcpy(j->maxima + g, &m, sizeof m); /* no alignment assumed */
    }
}

static void tensorwise_rows(const void *ctx, int64_t r0, int64_t r1) {
    const job *j = ctx;
    for (int64_t r = r0; r < r1; r++) quantize_row(j, r, j->q);
}

void FO_CPU(write_fp8)(const fo_fp8_out *out, int64_t rows, int64_t cols, fo_fp8_piece_fn piece,
                       const void *src, float *maxima) {
    job j = {out,   rows, cols,   rows < FO_FP8_GROUPS ? rows : FO_FP8_GROUPS,
             piece, src,  maxima, 0.0f};
    if (out->recipe == FO_FP8_ROWWISE) {
        fo_cpu_parallel(rows, cols, rowwise_rows, &j);
        return;
    }
    fo_cpu_parallel(j.groups, j.groups > 0 ? rows / j.groups * cols : 0, amax_groups, &j);
    float m = 0.0f;
    for (int64_t g = 0; g < j.groups; g++) {
        float v;
        memcpy(&v, maxima + g, sizeof v);
        if (v > m) m = v;
    }
    j.q = fo_fp8_multiplier(m, out->fp8_dtype, 0);
    fo_cpu_parallel(rows, cols, tensorwise_rows, &j);
    *(float *)out->scale = 1.0f / j.q;
    if (out->amax) *(float *)out->amax = m;
}

/* An op's forward, for write_fp8_output. */
typedef struct {
    fo_forward_piece_fn forward;
    const void *op;
    int dtype;
} output_source;

/* The forward's piece as `dtype` holds it, as floats. */
static const float *output_piece(const void *src, float *buf, int64_t r, int64_t c0, int64_t n) {
    const output_source *o = src;
    double stored[CPU_CHUNK]; /* room for any dtype's n elements */
    if (o->dtype == FO_DTYPE_F32) {
        o->forward(o->op, r, c0, n, buf);
        return buf;
    }
    o->forward(o->op, r, c0, n, stored);
    if (o->dtype == FO_DTYPE_F64)
        for (int64_t i = 0; i < n; i++) buf[i] = (float)stored[i];
    else
        fo_float_in(buf, stored, 0, n, o->dtype);
    return buf;
}

void FO_CPU(write_fp8_output)(const fo_fp8_out *out, int64_t rows, int64_t cols,
                              fo_forward_piece_fn forward, const void *op, int dtype) {
    const output_source src = {forward, op, dtype};
    float maxima[FO_FP8_GROUPS];
    FO_CPU(write_fp8)(out, rows, cols, output_piece, &src, maxima);
}

/* Rows of x, with their row stride and dtype, for write_fp8_rows. */
typedef struct {
    const void *x;
    int64_t stride;
    int dtype;
} rows_source;

/* Elements [c0, c0 + n) of row r of x as floats (float64 rounded once). */
static const float *x_piece(const void *src, float *buf, int64_t r, int64_t c0, int64_t n) {
    const rows_source *x = src;
    const int64_t at = r * x->stride + c0;
    if (x->dtype != FO_DTYPE_F64) return fo_float_in(buf, x->x, at, n, x->dtype);
    double d[CPU_CHUNK];
    fo_cpu_load(d, x->x, at, n, x->dtype);
    for (int64_t i = 0; i < n; i++) buf[i] = (float)d[i];
    return buf;
}

void FO_CPU(write_fp8_rows)(const fo_fp8_out *out, int64_t rows, int64_t cols, const void *x,
                            int64_t stride, int dtype, float *maxima) {
    const rows_source src = {x, stride, dtype};
    FO_CPU(write_fp8)(out, rows, cols, x_piece, &src, maxima);
}

void FO_CPU(quantize_fp8)(const fo_quantize_fp8_args *a) {
    const fo_fp8_out out = {a->y, a->y_t, a->scale, a->amax, a->fp8_dtype, a->recipe};
    FO_CPU(write_fp8_rows)
    (&out, a->rows, a->cols, (const void *)a->x, a->x_row_stride, a->dtype, (float *)a->workspace);
}
