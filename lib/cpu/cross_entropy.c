/* cpu/cross_entropy.c: the cross-entropy of rows of logits with its gradient, and the row scaling
 * its backward uses: the CPU kernels, compiled once for each instruction set (cpu_kernels.h) and
 * chosen at load. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* z of n logits from offset: softcapped where softcap > 0. */
static void load_z(double *z, const fo_cross_entropy_params *a, int64_t offset, int64_t n) {
    fo_cpu_load(z, a->logits, offset, n, a->dtype);
    if (a->softcap > 0)
        for (int64_t i = 0; i < n; i++) z[i] = a->softcap * tanh(z[i] / a->softcap);
}

static void cpu_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_cross_entropy_params *a = ctx;
    const int loss_dtype = fo_stats_dtype(a->dtype);
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
        double max = -INFINITY, sum = 0.0, sum_z = 0.0, z_t = 0.0;
        for (int64_t c0 = 0; c0 < a->vocab; c0 += CPU_CHUNK) {
            const int64_t n = a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK;
            load_z(z, a, base + c0, n);
            for (int64_t i = 0; i < n; i++) max = z[i] > max ? z[i] : max;
        }
        for (int64_t c0 = 0; c0 < a->vocab; c0 += CPU_CHUNK) {
            const int64_t n = a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK;
            load_z(z, a, base + c0, n);
            for (int64_t i = 0; i < n; i++) {
                sum += exp(z[i] - max);
                sum_z += z[i];
            }
            if (t >= c0 && t < c0 + n) z_t = z[t - c0];
        }
        const double lse = max + log(sum), ls = a->label_smoothing;
        loss = (1.0 - ls) * (lse - z_t) + ls * (lse - sum_z / (double)a->vocab);
        fo_cpu_store(a->loss, r, &loss, 1, loss_dtype);
        if (!a->dlogits) continue;
        const double smooth = ls / (double)a->vocab;
        for (int64_t c0 = 0; c0 < a->vocab; c0 += CPU_CHUNK) {
            const int64_t n = a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK;
            load_z(z, a, base + c0, n);
            for (int64_t i = 0; i < n; i++) {
                double d = exp(z[i] - lse) - smooth - (c0 + i == t ? 1.0 - ls : 0.0);
                if (a->softcap > 0) {
                    const double th = z[i] / a->softcap;
                    d *= 1.0 - th * th;
                }
                g[i] = d * scale;
            }
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
