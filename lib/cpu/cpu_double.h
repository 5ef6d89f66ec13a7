/* cpu_double.h: cpu_convert.h's loads and stores between any dtype and
 * double, inline: the library's own fo_cpu_load and fo_cpu_store are built
 * once, for the baseline, and called a chunk at a time, where each
 * instruction set's copy of a kernel (cpu_kernels.h) vectorizes these. The
 * same values: the conversions are exact, and the stores round through
 * float for the 16-bit dtypes, as fo_cpu_store. */
#ifndef FO_CPU_DOUBLE_H
#define FO_CPU_DOUBLE_H

#include <stdint.h>

#include "../cpu_halves.h"
#include "../fused_ops.h"

/* dst[i] = src[offset + i] as double, for i < n. */
static inline void fo_double_in(double *restrict dst, const void *src, int64_t offset, int64_t n,
                                int dtype) {
    switch (dtype) {
        case FO_DTYPE_F32: {
            const float *restrict s = (const float *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = s[i];
            break;
        }
        case FO_DTYPE_F64: {
            const double *restrict s = (const double *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = s[i];
            break;
        }
        case FO_DTYPE_F16: {
            const uint16_t *restrict s = (const uint16_t *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = f16_to_float(s[i]);
            break;
        }
        case FO_DTYPE_BF16: {
            const uint16_t *restrict s = (const uint16_t *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_float(s[i]);
            break;
        }
        default:
            break;
    }
}

/* dst[offset + i] = src[i] rounded to dtype (to nearest, ties to even; the
 * 16-bit dtypes through float, as torch's fp32-compute kernels). */
static inline void fo_double_out(void *dst, int64_t offset, const double *restrict src, int64_t n,
                                 int dtype) {
    switch (dtype) {
        case FO_DTYPE_F32: {
            float *restrict d = (float *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = (float)src[i];
            break;
        }
        case FO_DTYPE_F64: {
            double *restrict d = (double *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = src[i];
            break;
        }
        case FO_DTYPE_F16: {
            uint16_t *restrict d = (uint16_t *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = float_to_f16((float)src[i]);
            break;
        }
        case FO_DTYPE_BF16: {
            uint16_t *restrict d = (uint16_t *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = float_to_bf16((float)src[i]);
            break;
        }
        default:
            break;
    }
}

#endif
