/* cpu_lanes.h: sums of CPU kernels in CPU_LANES interleaved partial sums.
 *
 * Why: a plain `total += x[i]` is one chain of dependent additions, so it
 * runs at the latency of an add (4 cycles an element) and the compiler may
 * not reorder it into vector lanes (that would change the rounding). Lane
 * l holds the elements i with i % CPU_LANES == l, in order, and the lanes
 * are added in one fixed tree at the end: vector adds, independent chains,
 * and still the same bits on every run and every machine (the order is
 * written here, not chosen by the compiler).
 *
 * Every chunk handed in must start at a multiple of CPU_LANES from the start
 * of the sum (CPU_CHUNK is one), so an element's lane is its index mod 8. */
#ifndef FO_CPU_LANES_H
#define FO_CPU_LANES_H

#include <stdint.h>

#define CPU_LANES 8

typedef struct {
    double lane[CPU_LANES];
} fo_lanes;

static inline fo_lanes fo_lanes_zero(void) {
    fo_lanes s = {{0.0}};
    return s;
}

/* s += x[i] (or x[i] * y[i] when y is given) for i < n. The lanes are
 * copied to a local array first: through the pointer, the compiler would
 * have to assume x may alias them and reload them every step. */
static inline void fo_lanes_add(fo_lanes *s, const double *x, const double *y, int64_t n) {
    double lane[CPU_LANES];
    for (int l = 0; l < CPU_LANES; l++) lane[l] = s->lane[l];
    int64_t i = 0;
    if (y) {
        for (; i + CPU_LANES <= n; i += CPU_LANES)
            for (int l = 0; l < CPU_LANES; l++) lane[l] += x[i + l] * y[i + l];
        for (; i < n; i++) lane[i % CPU_LANES] += x[i] * y[i];
    } else {
        for (; i + CPU_LANES <= n; i += CPU_LANES)
            for (int l = 0; l < CPU_LANES; l++) lane[l] += x[i + l];
        for (; i < n; i++) lane[i % CPU_LANES] += x[i];
    }
    for (int l = 0; l < CPU_LANES; l++) s->lane[l] = lane[l];
}

/* s += x[i] for float x[i < n], with the lanes of fo_lanes_add: the same
 * sum as loading x into doubles first, without the buffer (fp32 paths). */
static inline void fo_lanes_add_f32(fo_lanes *s, const float *restrict x, int64_t n) {
    double lane[CPU_LANES];
    for (int l = 0; l < CPU_LANES; l++) lane[l] = s->lane[l];
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) lane[l] += (double)x[i + l];
    for (; i < n; i++) lane[i % CPU_LANES] += (double)x[i];
    for (int l = 0; l < CPU_LANES; l++) s->lane[l] = lane[l];
}

/* s += (x[i] - center)^2 for float x[i < n], in double. */
static inline void fo_lanes_add_squares_f32(fo_lanes *s, const float *restrict x, double center,
                                            int64_t n) {
    double lane[CPU_LANES];
    for (int l = 0; l < CPU_LANES; l++) lane[l] = s->lane[l];
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) {
            const double d = (double)x[i + l] - center;
            lane[l] += d * d;
        }
    for (; i < n; i++) {
        const double d = (double)x[i] - center;
        lane[i % CPU_LANES] += d * d;
    }
    for (int l = 0; l < CPU_LANES; l++) s->lane[l] = lane[l];
}

static inline double fo_lanes_total(const fo_lanes *s) {
    const double *v = s->lane;
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

#endif
