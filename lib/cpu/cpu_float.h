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
#include <string.h>

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

/* 16 floats as one value of GCC's generic vectors (one AVX-512 register, two AVX2 or four SSE
 * ones): accumulators the compiler keeps in registers, where arrays of lanes it kept in memory,
 * each step waiting on a store's forwarding. fo_f16x_at and fo_bf16x_at load 16 elements from
 * anywhere (unaligned). Passed by pointer: a vector argument's ABI differs between the objects. */
typedef float fo_f16x __attribute__((vector_size(64)));
typedef uint32_t fo_u32x16 __attribute__((vector_size(64)));
typedef uint16_t fo_u16x16 __attribute__((vector_size(32)));

static inline void fo_f16x_at(fo_f16x *v, const float *p) { memcpy(v, p, sizeof *v); }

static inline void fo_bf16x_at(fo_f16x *v, const uint16_t *p) {
    fo_u16x16 bits;
    memcpy(&bits, p, sizeof bits);
    const fo_u32x16 wide = __builtin_convertvector(bits, fo_u32x16) << 16;
    memcpy(v, &wide, sizeof *v);
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
