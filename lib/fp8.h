/* fp8.h: the scale arithmetic of FP8 quantization (fused_ops.h,
 * fo_quantize_fp8), shared by the CPU and CUDA kernels so both compute the
 * same bits. */
#ifndef FO_FP8_H
#define FO_FP8_H

#include <stdint.h>
#include <string.h>

#include "fused_ops.h"

#ifdef __CUDACC__
#define FO_FP8_HOST_DEVICE __host__ __device__
#else
#define FO_FP8_HOST_DEVICE
#endif

/* The largest finite value of e4m3 (fn: no inf) and of e5m2. */
#define FO_FP8_E4M3_MAX 448.0f
#define FO_FP8_E5M2_MAX 57344.0f

static inline FO_FP8_HOST_DEVICE float fo_fp8_max(int fp8_dtype) {
    return fp8_dtype == FO_FP8_E4M3 ? FO_FP8_E4M3_MAX : FO_FP8_E5M2_MAX;
}

/* q, the multiplier that maps amax to the format's max: in double and
 * rounded once, as torchao.float8 computes it; rowwise rounds it down to a
 * power of two (clearing the mantissa: q is a normal float for any finite
 * amax), so its reciprocal, the scale, is exact. */
static inline FO_FP8_HOST_DEVICE float fo_fp8_multiplier(float amax, int fp8_dtype, int rowwise) {
    double a = (double)amax;
    if (!(a >= 1e-12)) a = 1e-12; /* zero rows: a finite scale */
    float q = (float)((double)fo_fp8_max(fp8_dtype) / a);
    if (rowwise) {
        uint32_t bits;
        memcpy(&bits, &q, sizeof bits);
        bits &= 0xFF800000u;
        memcpy(&q, &bits, sizeof q);
    }
    return q;
}

#endif
