/* cpu_float.h: float32 pieces of float32, bfloat16 and float16 tensors, for
 * the kernels that compute in float (as torch's CPU kernels do for these
 * dtypes); float64 keeps its double path (cpu_convert.h). Inline, so each
 * instruction set's copy of a kernel vectorizes the conversions.
 *
 *     float buf[CPU_CHUNK];
 *     const float *x = fo_float_in(buf, a->x, offset, n, a->dtype);
 *     float *y = fo_float_out(out_buf, a->y, offset, a->dtype);
 *     ... y[i] = f(x[i]) ...
 *     fo_float_done(a->y, offset, y, n, a->dtype);
 *
 * A float32 tensor is read and written in place, without a copy. */
#ifndef FO_CPU_FLOAT_H
#define FO_CPU_FLOAT_H

#include <stdint.h>

#include "../cpu_halves.h"
#include "../fused_ops.h"

/* Elements [offset, offset + n) of src as floats: src itself for float32,
 * else converted into buf. */
static inline const float *fo_float_in(float *restrict buf, const void *src, int64_t offset,
                                       int64_t n, int dtype) {
    if (dtype == FO_DTYPE_F32) return (const float *)src + offset;
    const uint16_t *restrict s = (const uint16_t *)src + offset;
    if (dtype == FO_DTYPE_BF16)
        for (int64_t i = 0; i < n; i++) buf[i] = bf16_to_float(s[i]);
    else
        for (int64_t i = 0; i < n; i++) buf[i] = f16_to_float(s[i]);
    return buf;
}

/* Where to write elements from offset: dst itself for float32, else buf
 * (then fo_float_done converts). */
static inline float *fo_float_out(float *buf, void *dst, int64_t offset, int dtype) {
    return dtype == FO_DTYPE_F32 ? (float *)dst + offset : buf;
}

/* Stores what fo_float_out's buffer holds (nothing to do for float32). */
static inline void fo_float_done(void *dst, int64_t offset, const float *restrict src, int64_t n,
                                 int dtype) {
    if (dtype == FO_DTYPE_F32) return;
    uint16_t *restrict d = (uint16_t *)dst + offset;
    if (dtype == FO_DTYPE_BF16)
        for (int64_t i = 0; i < n; i++) d[i] = float_to_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++) d[i] = float_to_f16(src[i]);
}

/* a * b + c, rounded once where the instruction set fuses it (AVX2, AVX-512), twice on the
 * baseline, whose fmaf() is a library call. */
static inline float fo_fma(float a, float b, float c) {
#ifdef __FMA__
    return __builtin_fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

#endif
