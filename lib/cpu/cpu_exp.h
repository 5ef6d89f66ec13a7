/* cpu_exp.h: exp in double without libm's call, so that a loop of it
 * vectorizes in each instruction set's copy of a kernel (cpu_kernels.h),
 * for results that are rounded to float32 or narrower: relative error
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

#endif
