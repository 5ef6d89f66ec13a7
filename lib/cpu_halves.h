/* cpu_halves.h: fp16 and bf16 to and from float by bit manipulation, so the
 * CPU build needs no compiler support for _Float16 or __bf16. Rounding
 * matches torch: to nearest, ties to even; NaN stays NaN, overflow gives
 * infinity. Inline, so each instruction set's kernels vectorize them. */
#ifndef FO_CPU_HALVES_H
#define FO_CPU_HALVES_H

#include <stdint.h>
#include <string.h>

static inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float bf16_to_float(uint16_t h) { return bits_float((uint32_t)h << 16); }

static inline uint16_t float_to_bf16(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) {
        /* zero or subnormal: mantissa units of 2^-24 */
        float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static inline uint16_t float_to_f16(float f) {
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t magnitude = u & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) /* infinity or NaN (kept quiet) */
        return (uint16_t)(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
    if (magnitude >= 0x477ff000u) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (magnitude < 0x38800000u) { /* under 2^-14: subnormal or zero */
        if (magnitude < 0x33000000u) /* under 2^-25: rounds to zero */
            return (uint16_t)sign;
        uint32_t exponent = magnitude >> 23;
        uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exponent; /* 14..24 */
        uint32_t result = mantissa >> shift;
        uint32_t rest = mantissa & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (result & 1u))) result++;
        return (uint16_t)(sign | result);
    }
    uint32_t result = (magnitude - (112u << 23)) >> 13;
    uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (result & 1u)))
        result++; /* a carry into the exponent is the right rounding */
    return (uint16_t)(sign | result);
}

#endif
