/* cpu_exp.h: exp without libm's call, so that a loop of it vectorizes in
 * each instruction set's copy of a kernel (cpu_kernels.h): in float for
 * x <= 0 (fo_expf_nonpositive, below), and in double for results that are
 * rounded to float32 or narrower (fo_exp_for_float): relative error
 * under 3e-10 (a four-hundredth of float32's half ulp) where exp(x) is at
 * least 2^-1021 (x >= -707.7); below that it returns 0, an absolute error
 * under 1e-307. Above ln(DBL_MAX) it returns +inf, as exp does; NaN stays
 * NaN. Float64 results keep libm's exp. */
#ifndef FO_CPU_EXP_H
#define FO_CPU_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline double fo_exp_for_float(double x) {
    /* x = k ln2 + r, |r| <= ln2 / 2: k from rounding x / ln2 by adding
     * 1.5 * 2^52 (k lands in the low bits), ln2 in two parts so k ln2 is exact */
    const double shifter = 0x1.8p52, ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    /* clamped so that 2^(k - 1) is a normal double; NaN passes the comparisons */
    const double xc = x < -707.0 ? -707.0 : x > 710.0 ? 710.0 : x;
    const double shifted = xc * 0x1.71547652b82fep0 + shifter;
    uint64_t bits; /* unsigned: NaN's bits shift without undefined behavior */
    memcpy(&bits, &shifted, sizeof bits);
    const double k = shifted - shifter;
    const double r = (xc - k * ln2_hi) - k * ln2_lo;
    /* exp(r) by its Taylor series to r^8 / 8!: the rest is under 2.1e-10 */
    double p = 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* 2^(k - 1), then times 2: exp(710) overflows to inf as it should */
    const uint64_t scale_bits = (bits - 0x4338000000000000ULL + 1022) << 52;
    double scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    const double y = p * scale * 2.0;
    return x < -707.0 ? 0.0 : x > 710.0 ? (double)INFINITY : y;
}

/* a * b + c, fused where the instruction set has FMA (one rounding, not two) */
#if defined(__FMA__) || defined(FP_FAST_FMAF)
#define FO_FMAF(a, b, c) fmaf(a, b, c)
#else
#define FO_FMAF(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) in float for x <= 0, the shifted logits of a softmax: twice the
 * lanes of fo_exp_for_float and fewer terms. Relative error under 1.1e-7
 * (under one float32 ulp; every float in [-87, 0] checked against libm's
 * exp in double, with FMA and without: tests/c/test_cpu_exp.c) where
 * x >= -87; below that it returns 0, an absolute error under 1.7e-38. NaN
 * stays NaN; x > 0 is outside its range. With FMA the bits differ from the
 * baseline's (both stay within the bound). */
static inline float fo_expf_nonpositive(float x) {
    /* x = k ln2 + r, |r| <= ln2 / 2: k from rounding x / ln2 by adding
     * 1.5 * 2^23 + 127 (k + 127 lands in the low bits, whose nine lowest,
     * shifted to the exponent, make 2^k), ln2 in two parts whose first has
     * 9 bits, so that k ln2_hi and x - k ln2_hi are exact for |k| <= 126.
     * Below -87 the lanes compute garbage that the last line discards. */
    const float shifter = 0x1.8p23f + 127.0f, ln2_hi = 0x1.63p-1f, ln2_lo = -0x1.bd0106p-13f;
    const float shifted = FO_FMAF(x, 0x1.715476p0f, shifter);
    uint32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    const float k = shifted - shifter;
    const float r = FO_FMAF(-k, ln2_lo, FO_FMAF(-k, ln2_hi, x));
    /* exp(r) by its Taylor series to r^7 / 7!: the rest is under 7.7e-9 */
    float p = 1.0f / 5040.0f;
    p = FO_FMAF(p, r, 1.0f / 720.0f);
    p = FO_FMAF(p, r, 1.0f / 120.0f);
    p = FO_FMAF(p, r, 1.0f / 24.0f);
    p = FO_FMAF(p, r, 1.0f / 6.0f);
    p = FO_FMAF(p, r, 0.5f);
    p = FO_FMAF(p, r, 1.0f);
    p = FO_FMAF(p, r, 1.0f);
    const uint32_t scale_bits = bits << 23; /* 2^k */
    float scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return x < -87.0f ? 0.0f : p * scale;
}

#endif
