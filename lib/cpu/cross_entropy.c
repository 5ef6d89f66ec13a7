/* cpu/cross_entropy.c: the cross-entropy of rows of logits with its gradient, and the row scaling
 * its backward uses: the CPU kernels, compiled once for each instruction set (cpu_kernels.h) and
 * chosen at load. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_exp.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_lanes.h"
#include "cpu_parallel.h"

/* z of n logits from offset: softcapped where softcap > 0. */
static void load_z(double *z, const fo_cross_entropy_params *a, int64_t offset, int64_t n) {
    fo_cpu_load(z, a->logits, offset, n, a->dtype);
    if (a->softcap > 0)
        for (int64_t i = 0; i < n; i++) z[i] = a->softcap * tanh(z[i] / a->softcap);
}

/* The max of z[0, n) into CPU_LANES maxima (NaN ignored, as the comparison has it). */
static inline void max_into(double *restrict lanes, const double *restrict z, int64_t n) {
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) lanes[l] = z[i + l] > lanes[l] ? z[i + l] : lanes[l];
    for (; i < n; i++) lanes[0] = z[i] > lanes[0] ? z[i] : lanes[0];
}

/* Lanes of the float max: 32, since gcc unrolls a loop of 16 before it could vectorize it. */
#define MAX_LANES 32

/* The max of float x[0, n) into MAX_LANES maxima, as max_into (a local copy vectorizes, as in
 * cpu_lanes.h). */
static inline void max_into_f32(float *restrict lanes, const float *restrict x, int64_t n) {
    float lane[MAX_LANES];
    for (int l = 0; l < MAX_LANES; l++) lane[l] = lanes[l];
    int64_t i = 0;
    for (; i + MAX_LANES <= n; i += MAX_LANES)
        for (int l = 0; l < MAX_LANES; l++) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    for (; i < n; i++) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    for (int l = 0; l < MAX_LANES; l++) lanes[l] = lane[l];
}

/* Partial sums of the exps: 32, four AVX-512 vectors of doubles, independent add chains (8
 * would be one chain, which the exps wait on). Lane l holds the elements i = l mod 32, in
 * order, and the lanes add in one fixed tree: the same bits on every run. */
#define SUM_LANES 32

static inline void sum_into(double *restrict lanes, const float *restrict x, int64_t n) {
    double lane[SUM_LANES];
    for (int l = 0; l < SUM_LANES; l++) lane[l] = lanes[l];
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++) lane[l] += (double)x[i + l];
    for (; i < n; i++) lane[i % SUM_LANES] += (double)x[i];
    for (int l = 0; l < SUM_LANES; l++) lanes[l] = lane[l];
}

static inline double sum_total(double *lanes) {
    for (int half = SUM_LANES / 2; half > 0; half /= 2)
        for (int l = 0; l < half; l++) lanes[l] += lanes[l + half];
    return lanes[0];
}

/* The row's loss from lse = log(sum of exp(z)), the target's z and the sum of every z (read only
 * with label smoothing: an infinite z then leaves the loss alone, as in torch). */
static double row_loss(double lse, double z_t, const fo_lanes *sums_z, double ls, int64_t vocab) {
    const double hit = (1.0 - ls) * (lse - z_t);
    return ls > 0 ? hit + ls * (lse - fo_lanes_total(sums_z) / (double)vocab) : hit;
}

/* A float64 row: the sums in double, libm's exp. */
static void row_f64(const fo_cross_entropy_params *a, int64_t r, double scale) {
    const int64_t t = a->target[r], base = r * a->logits_row_stride;
    double z[CPU_CHUNK], g[CPU_CHUNK];
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
        for (int64_t i = 0; i < n; i++) g[i] = exp(z[i] - max);
        fo_lanes_add(&sums, g, NULL, n);
        fo_lanes_add(&sums_z, z, NULL, n);
        if (t >= c0 && t < c0 + n) z_t = z[t - c0];
    }
    const double lse = max + log(fo_lanes_total(&sums)), ls = a->label_smoothing;
    const double loss = row_loss(lse, z_t, &sums_z, ls, a->vocab);
    fo_cpu_store(a->loss, r, &loss, 1, FO_DTYPE_F64);
    if (!a->dlogits) return;
    const double smooth = ls / (double)a->vocab;
    for (int64_t c0 = 0; c0 < a->vocab; c0 += CPU_CHUNK) {
        const int64_t n = a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK;
        load_z(z, a, base + c0, n);
        for (int64_t i = 0; i < n; i++) g[i] = exp(z[i] - lse) - smooth;
        if (t >= c0 && t < c0 + n) g[t - c0] -= 1.0 - ls;
        if (a->softcap > 0)
            for (int64_t i = 0; i < n; i++) {
                const double th = z[i] / a->softcap;
                g[i] *= 1.0 - th * th;
            }
        for (int64_t i = 0; i < n; i++) g[i] *= scale;
        fo_cpu_store(a->dlogits, r * a->vocab + c0, g, n, FO_DTYPE_F64);
    }
}

/* x rounded to bfloat16 as float_to_bf16 (cpu_halves.h) does, for x holding no NaN. */
static inline void store_bf16_finite(uint16_t *restrict dst, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = float_bits(x[i]);
        dst[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

/* e = exp(z - zmax) of n logits x in float (cpu_exp.h): z is x, or softcap * tanh(x / softcap)
 * in double (then th = tanh(x / softcap) where th is given); z's sum into sums_z where given.
 * z - zmax is rounded to float once. That moves e by |z - zmax| half ulps at most: under
 * 2^-24 / e = 2.2e-8 of the row's sum (|d| exp(d) <= 1 / e), and the sum by under ln(vocab) half
 * ulps (the softmax's mean of |z - zmax| is at most its entropy). */
static void exps(float *restrict e, double *restrict th, fo_lanes *sums_z, const float *restrict x,
                 int64_t n, const fo_cross_entropy_params *a, double zmax) {
    if (a->softcap > 0) {
        double z[CPU_CHUNK], t[CPU_CHUNK];
        float d[CPU_CHUNK];
        for (int64_t i = 0; i < n; i++) t[i] = tanh(x[i] / a->softcap);
        for (int64_t i = 0; i < n; i++) z[i] = a->softcap * t[i];
        for (int64_t i = 0; i < n; i++) d[i] = (float)(z[i] - zmax);
        for (int64_t i = 0; i < n; i++) e[i] = fo_expf_nonpositive(d[i]);
        if (sums_z) fo_lanes_add(sums_z, z, NULL, n);
        if (th) memcpy(th, t, (size_t)n * sizeof *t);
        return;
    }
    const float max = (float)zmax;
    for (int64_t i = 0; i < n; i++) e[i] = fo_expf_nonpositive(x[i] - max);
    if (sums_z) fo_lanes_add_f32(sums_z, x, n);
}

/* A float32, bfloat16 or float16 row: its exps in float, as torch's kernels take them (within
 * a float ulp, and exps()'s rounding of z - zmax), their sums in double; one exp a logit, kept in
 * `kept` (vocab floats) for the gradient where given, else computed again (the same bits). */
static void row_float(const fo_cross_entropy_params *a, int64_t r, double scale, float *kept) {
    const int64_t t = a->target[r], base = r * a->logits_row_stride, vocab = a->vocab;
    float x_buf[CPU_CHUNK], e[CPU_CHUNK], g_buf[CPU_CHUNK];
    /* the max of x: exact in float, and z's too (tanh keeps the order) */
    float lanes[MAX_LANES];
    for (int l = 0; l < MAX_LANES; l++) lanes[l] = -INFINITY;
    for (int64_t c0 = 0; c0 < vocab; c0 += CPU_CHUNK) {
        const int64_t n = vocab - c0 < CPU_CHUNK ? vocab - c0 : CPU_CHUNK;
        /* 16-bit logits are converted once, into kept, where their exps go */
        max_into_f32(lanes,
                     fo_float_in(kept ? kept + c0 : x_buf, a->logits, base + c0, n, a->dtype), n);
    }
    for (int half = MAX_LANES / 2; half > 0; half /= 2) /* a tree: not one chain of 32 */
        for (int l = 0; l < half; l++)
            lanes[l] = lanes[l + half] > lanes[l] ? lanes[l + half] : lanes[l];
    const float max = lanes[0];
    const double softcap = a->softcap, ls = a->label_smoothing;
    const double zmax = softcap > 0 ? softcap * tanh(max / softcap) : max;
    double sums[SUM_LANES] = {0.0};
    fo_lanes sums_z = fo_lanes_zero();
    for (int64_t c0 = 0; c0 < vocab; c0 += CPU_CHUNK) {
        const int64_t n = vocab - c0 < CPU_CHUNK ? vocab - c0 : CPU_CHUNK;
        float *ek = kept ? kept + c0 : e;
        if (kept && a->dtype != FO_DTYPE_F32) { /* no softcap: z = x, zmax = max */
            if (ls > 0) fo_lanes_add_f32(&sums_z, ek, n);
            for (int64_t i = 0; i < n; i++) ek[i] = fo_expf_nonpositive(ek[i] - max);
        } else {
            exps(ek, NULL, ls > 0 ? &sums_z : NULL,
                 fo_float_in(x_buf, a->logits, base + c0, n, a->dtype), n, a, zmax);
        }
        sum_into(sums, ek, n);
    }
    double z_t;
    fo_cpu_load(&z_t, a->logits, base + t, 1, a->dtype);
    if (softcap > 0) z_t = softcap * tanh(z_t / softcap);
    const double sum = sum_total(sums), loss = row_loss(zmax + log(sum), z_t, &sums_z, ls, vocab);
    fo_cpu_store(a->loss, r, &loss, 1, FO_DTYPE_F32);
    if (!a->dlogits) return;
    /* softmax - smoothing, times scale: e * (scale / sum) - smooth * scale in float, the
     * target's in double (1 - its softmax loses digits) */
    const double smooth = ls / (double)vocab;
    const float factor = (float)(scale / sum), shift = (float)(smooth * scale);
    const int finite = isfinite(sum) && isfinite(factor) && isfinite(shift); /* then so is g */
    for (int64_t c0 = 0; c0 < vocab; c0 += CPU_CHUNK) {
        const int64_t n = vocab - c0 < CPU_CHUNK ? vocab - c0 : CPU_CHUNK;
        double th[CPU_CHUNK];
        const float *restrict ek = e;
        if (kept)
            ek = kept + c0;
        else /* before g is written: dlogits may be logits */
            exps(e, softcap > 0 ? th : NULL, NULL,
                 fo_float_in(x_buf, a->logits, base + c0, n, a->dtype), n, a, zmax);
        float *restrict g = fo_float_out(g_buf, a->dlogits, r * vocab + c0, a->dtype);
        for (int64_t i = 0; i < n; i++) g[i] = FO_FMAF(ek[i], factor, -shift);
        if (t >= c0 && t < c0 + n)
            g[t - c0] = (float)((ek[t - c0] / sum - smooth - (1.0 - ls)) * scale);
        if (softcap > 0)
            for (int64_t i = 0; i < n; i++) g[i] = (float)(g[i] * (1.0 - th[i] * th[i]));
        if (a->dtype == FO_DTYPE_BF16 && finite)
            store_bf16_finite((uint16_t *)a->dlogits + r * vocab + c0, g, n);
        else
            fo_float_done(a->dlogits, r * vocab + c0, g, n, a->dtype);
    }
}

static void cpu_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_cross_entropy_params *a = ctx;
    const int loss_dtype = fo_stats_dtype(a->dtype);
    double scale = 1.0;
    if (a->scale) fo_cpu_load(&scale, a->scale, 0, 1, loss_dtype);
    /* a row's exps kept for its gradient (not with a softcap, whose tanh costs more than the
     * exp); without the memory, computed again */
    float *kept = a->dtype != FO_DTYPE_F64 && a->dlogits && !(a->softcap > 0)
                      ? malloc((size_t)a->vocab * sizeof *kept)
                      : NULL;
    for (int64_t r = r0; r < r1; r++) {
        if (a->target[r] == a->ignore_index) {
            const double zero[CPU_CHUNK] = {0.0}, loss = 0.0;
            for (int64_t c0 = 0; a->dlogits && c0 < a->vocab; c0 += CPU_CHUNK)
                fo_cpu_store(a->dlogits, r * a->vocab + c0, zero,
                             a->vocab - c0 < CPU_CHUNK ? a->vocab - c0 : CPU_CHUNK, a->dtype);
            fo_cpu_store(a->loss, r, &loss, 1, loss_dtype);
        } else if (a->dtype == FO_DTYPE_F64) {
            row_f64(a, r, scale);
        } else {
            row_float(a, r, scale, kept);
        }
    }
    free(kept);
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
