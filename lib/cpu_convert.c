/* cpu_convert.c: elements of any dtype to and from double (cpu_convert.h). */
#include "cpu_convert.h"
#include "cpu_halves.h"
#include "fused_ops.h"

void fo_cpu_load(double *dst, const void *src, int64_t offset, int64_t n, int dtype) {
    switch (dtype) {
        case FO_DTYPE_F32: {
            const float *s = (const float *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = s[i];
            break;
        }
        case FO_DTYPE_F64: {
            const double *s = (const double *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = s[i];
            break;
        }
        case FO_DTYPE_F16: {
            const uint16_t *s = (const uint16_t *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = f16_to_float(s[i]);
            break;
        }
        case FO_DTYPE_BF16: {
            const uint16_t *s = (const uint16_t *)src + offset;
            for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_float(s[i]);
            break;
        }
        default:
            break;
    }
}

void fo_cpu_store(void *dst, int64_t offset, const double *src, int64_t n, int dtype) {
    /* Half types round via float, as torch's fp32-compute kernels do. */
    switch (dtype) {
        case FO_DTYPE_F32: {
            float *d = (float *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = (float)src[i];
            break;
        }
        case FO_DTYPE_F64: {
            double *d = (double *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = src[i];
            break;
        }
        case FO_DTYPE_F16: {
            uint16_t *d = (uint16_t *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = float_to_f16((float)src[i]);
            break;
        }
        case FO_DTYPE_BF16: {
            uint16_t *d = (uint16_t *)dst + offset;
            for (int64_t i = 0; i < n; i++) d[i] = float_to_bf16((float)src[i]);
            break;
        }
        default:
            break;
    }
}
