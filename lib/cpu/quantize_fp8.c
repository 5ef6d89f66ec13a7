/* cpu/quantize_fp8.c: FP8 quantization with a dynamic scale (fused_ops.h,
 * fo_quantize_fp8): the CPU kernels, compiled once for each instruction set
 * (cpu_kernels.h) and chosen at load. The CUDA kernels give the same bytes:
 * the scales come from fp8.h, and the rounding below is the hardware's. */
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

/* Elements [c0, c0 + n) of row r of x as floats (float64 rounded once). */
static const float *row_piece(float *buf, const fo_quantize_fp8_args *a, int64_t r, int64_t c0,
                              int64_t n) {
    const int64_t at = r * a->x_row_stride + c0;
    if (a->dtype != FO_DTYPE_F64) return fo_float_in(buf, (const void *)a->x, at, n, a->dtype);
    double d[CPU_CHUNK];
    fo_cpu_load(d, (const void *)a->x, at, n, a->dtype);
    for (int64_t i = 0; i < n; i++) buf[i] = (float)d[i];
    return buf;
}

/* The largest |x| of row r among its finite elements (0 if none). */
static float row_amax(const fo_quantize_fp8_args *a, int64_t r) {
    float buf[CPU_CHUNK], amax = 0.0f;
    for (int64_t c0 = 0; c0 < a->cols; c0 += CPU_CHUNK) {
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        const float *x = row_piece(buf, a, r, c0, n);
        for (int64_t i = 0; i < n; i++) {
            const float m = fabsf(x[i]);
            if (m <= FLT_MAX && m > amax) amax = m;
        }
    }
    return amax;
}

/* Row r as FP8 with multiplier q, into y and y_t (where given). */
static void quantize_row(const fo_quantize_fp8_args *a, int64_t r, float q) {
    const float limit = fo_fp8_max(a->fp8_dtype);
    uint8_t *y = (uint8_t *)a->y, *y_t = (uint8_t *)a->y_t;
    float buf[CPU_CHUNK];
    for (int64_t c0 = 0; c0 < a->cols; c0 += CPU_CHUNK) {
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        const float *x = row_piece(buf, a, r, c0, n);
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] * q;
            if (v > limit) v = limit; /* NaN passes both: it stays NaN */
            if (v < -limit) v = -limit;
            const uint8_t code = fp8_encode(v, a->fp8_dtype);
            if (y) y[r * a->cols + c0 + i] = code;
            if (y_t) y_t[(c0 + i) * a->rows + r] = code;
        }
    }
}

static void rowwise_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_quantize_fp8_args *a = ctx;
    float *scale = (float *)a->scale, *amax = (float *)a->amax;
    for (int64_t r = r0; r < r1; r++) {
        const float m = row_amax(a, r), q = fo_fp8_multiplier(m, a->fp8_dtype, 1);
        quantize_row(a, r, q);
        scale[r] = 1.0f / q;
        if (amax) amax[r] = m;
    }
}

/* The workspace's floats (memcpy: no aliasing or alignment assumed). */
static float workspace_float(const fo_quantize_fp8_args *a, int64_t i) {
    float v;
    memcpy(&v, (const char *)a->workspace + i * (int64_t)sizeof v, sizeof v);
    return v;
}

static void set_workspace_float(const fo_quantize_fp8_args *a, int64_t i, float v) {
    memcpy((char *)a->workspace + i * (int64_t)sizeof v, &v, sizeof v);
}

static void amax_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_quantize_fp8_args *a = ctx;
    for (int64_t r = r0; r < r1; r++) set_workspace_float(a, r, row_amax(a, r));
}

/* The tensor's multiplier rides in the workspace's first float. */
static void tensorwise_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_quantize_fp8_args *a = ctx;
    const float q = workspace_float(a, 0);
    for (int64_t r = r0; r < r1; r++) quantize_row(a, r, q);
}

void FO_CPU(quantize_fp8)(const fo_quantize_fp8_args *a) {
    if (a->recipe == FO_FP8_ROWWISE) {
        fo_cpu_parallel(a->rows, a->cols, rowwise_rows, a);
        return;
    }
    fo_cpu_parallel(a->rows, a->cols, amax_rows, a);
    float m = 0.0f; /* max is exact in any order */
    for (int64_t r = 0; r < a->rows; r++)
        if (workspace_float(a, r) > m) m = workspace_float(a, r);
    const float q = fo_fp8_multiplier(m, a->fp8_dtype, 0);
    set_workspace_float(a, 0, q);
    fo_cpu_parallel(a->rows, a->cols, tensorwise_rows, a);
    *(float *)a->scale = 1.0f / q;
    if (a->amax) *(float *)a->amax = m;
}
