/* cpu/cross_entropy.c: the cross-entropy of rows of logits with its gradient, and the row scaling
 * its backward uses: the CPU kernels, compiled once for each instruction set (cpu_kernels.h) and
 * chosen at load. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_exp.h"
#include "cpu_kernels.h"
#include "cpu_lanes.h"
#include "cpu_parallel.h"

/* z of n logits from offset: softcapped where softcap > 0. */
static void load_z(double *z, const fo_cross_entropy_params *a, int64_t offset, int64_t n) {
    fo_cpu_load(z, a->logits, offset, n, a->dtype);
    if (a->softcap > 0)
        for (int64_t i = 0; i < n; i++) z[i] = a->softcap * tanh(z[i] / a->softcap);
}

/* exp(v): libm's for float64 results, else the one that vectorizes (cpu_exp.h). */
static inline double exp_for(double v, int f64) { return f64 ? exp(v) : fo_exp_for_float(v); }

/* The max of z[0, n) into CPU_LANES maxima (NaN ignored, as the comparison has it). */
static inline void max_into(double *restrict lanes, const double *restrict z, int64_t n) {
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) lanes[l] = z[i + l] > lanes[l] ? z[i + l] : lanes[l];
    for (; i < n; i++) lanes[0] = z[i] > lanes[0] ? z[i] : lanes[0];
}

/* e = exp(z - max), then its sum and z's into the lanes. */
static inline void sums_into(fo_lanes *sums, fo_lanes *sums_z, double *restrict e,
                             const double *restrict z, int64_t n, double max, int f64) {
    for (int64_t i = 0; i < n; i++) e[i] = exp_for(z[i] - max, f64);
    fo_lanes_add(sums, e, NULL, n);
    fo_lanes_add(sums_z, z, NULL, n);
}

static void cpu_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_cross_entropy_params *a = ctx;
    const int loss_dtype = fo_stats_dtype(a->dtype), f64 = a->dtype == FO_DTYPE_F64;
    double scale = 1.0;
    if (a->scale) fo_cpu_load(&scale, a->scale, 0, 1, loss_dtype);
    double z[CPU_CHUNK], g[CPU_CHUNK];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t t = a->target[r], base = r * a->logits_row_stride;
        double loss = 0.0;
        if (t == a->ignore_index) {
            for (int64_t i = 0; i < CPU_CHUNK; i++) g[i] = 0.0;
            for (int64_t c0 = 0; a->dlogits && c0 < a->vocab; c0 += CPU_CHUNK)
                fo_cpu_store(a->dlogits, r * a->vocab + c0, g,
                             a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK, a->dtype);
            fo_cpu_store(a->loss, r, &loss, 1, loss_dtype);
            continue;
        }
        double lanes[CPU_LANES], z_t = 0.0;
        fo_lanes sums = fo_lanes_zero(), sums_z = fo_lanes_zero();
        for (int l = 0; l < CPU_LANES; l++) lanes[l] = -INFINITY;
        for (int64_t c0 = 0; c0 < a->vocab; c0 += CPU_CHUNK) {
            const int64_t n = a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK;
            load_z(z, a, base + c0, n);
            max_into(lanes, z, n);
        }
        double max = -INFINITY;
        for (int l = 0; l < CPU_LANES; l++) max = lanes[l] > max ? lanes[l] : max;
        for (int64_t c0 = 0; c0 < a->vocab; c0 += CPU_CHUNK) {
            const int64_t n = a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK;
            load_z(z, a, base + c0, n);
            if (f64)
                sums_into(&sums, &sums_z, g, z, n, max, 1);
            else
                sums_into(&sums, &sums_z, g, z, n, max, 0);
            if (t >= c0 && t < c0 + n) z_t = z[t - c0];
        }
        const double lse = max + log(fo_lanes_total(&sums)), ls = a->label_smoothing;
        /* the sum of z only with smoothing: a -inf logit (a masked class) then leaves the loss
         * finite, as in torch (0 * inf was NaN) */
        loss = (1.0 - ls) * (lse - z_t);
        if (ls > 0) loss += ls * (lse - fo_lanes_total(&sums_z) / (double)a->vocab);
        fo_cpu_store(a->loss, r, &loss, 1, loss_dtype);
        if (!a->dlogits) continue;
        const double smooth = ls / (double)a->vocab;
        for (int64_t c0 = 0; c0 < a->vocab; c0 += CPU_CHUNK) {
            const int64_t n = a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK;
            load_z(z, a, base + c0, n);
            if (f64)
                for (int64_t i = 0; i < n; i++) g[i] = exp(z[i] - lse) - smooth;
            else
                for (int64_t i = 0; i < n; i++) g[i] = fo_exp_for_float(z[i] - lse) - smooth;
            if (t >= c0 && t < c0 + n) g[t - c0] -= 1.0 - ls;
            if (a->softcap > 0)
                for (int64_t i = 0; i < n; i++) {
                    const double th = z[i] / a->softcap;
                    g[i] *= 1.0 - th * th;
                }
            for (int64_t i = 0; i < n; i++) g[i] *= scale;
            fo_cpu_store(a->dlogits, r * a->vocab + c0, g, n, a->dtype);
        }
    }
}

static void cpu_scale_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_scale_rows_params *a = ctx;
    double x[CPU_CHUNK], scale = 1.0;
    for (int64_t r = r0; r < r1; r++) {
        fo_cpu_load(&scale, a->scale, a->per_row ? r : 0, 1, a->scale_dtype);
        if (scale == 1.0) continue;
        for (int64_t c0 = 0; c0 < a->cols; c0 += CPU_CHUNK) {
            const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
            fo_cpu_load(x, a->x, r * a->cols + c0, n, a->dtype);
            for (int64_t i = 0; i < n; i++) x[i] *= scale;
            fo_cpu_store(a->x, r * a->cols + c0, x, n, a->dtype);
        }
    }
}

void FO_CPU(cross_entropy)(const fo_cross_entropy_params *a) {
    fo_cpu_parallel(a->rows, a->vocab * (a->dlogits ? 3 : 2), cpu_rows, a);
}

void FO_CPU(scale_rows)(const fo_scale_rows_params *a) {
    fo_cpu_parallel(a->rows, a->cols, cpu_scale_rows, a);
}
