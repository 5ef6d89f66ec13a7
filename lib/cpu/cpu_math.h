/* cpu_math.h: float functions that vectorize. libm's expf is a call the
 * compiler cannot vectorize; these are arithmetic and selects, inline in
 * each instruction set's copy of a kernel. */
#ifndef FO_CPU_MATH_H
#define FO_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) within 2 ulp (Cephes' expf): x = n ln2 + r, |r| <= ln2 / 2, exp(r)
 * by a degree-7 polynomial, 2^n from exponent bits. Overflow gives inf,
 * underflow past the normal range 0, NaN stays NaN. */
static inline float fo_expf(float x) {
    const float max = 88.7228391f, min = -87.3365479f;
    float c = x > max ? max : x;
    c = c < min ? min : c;
    c = x != x ? 0.0f : c; /* no NaN in the integer conversion below */
    /* n = round(c / ln2) by the 1.5 * 2^23 shifter: no rounding instruction
     * the baseline lacks */
    const float shifter = 12582912.0f;
    const float n = (c * 1.44269504088896341f + shifter) - shifter;
    const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    /* 2^n: n in [-126, 128]; 128 (c = max) as 2^127 * 2 */
    const int32_t e = (int32_t)n;
    const int32_t half = e > 127 ? 1 : 0;
    const uint32_t bits = (uint32_t)(e - half + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale * (half ? 2.0f : 1.0f);
    y = x > max ? (float)INFINITY : y;
    y = x < min ? 0.0f : y;
    return x != x ? x : y;
}

/* 1 / (1 + exp(-x)): 0 and 1 at the ends, NaN for NaN. */
static inline float fo_sigmoidf(float x) { return 1.0f / (1.0f + fo_expf(-x)); }

#endif
