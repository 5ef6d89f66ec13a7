/* cpu/norm.c: LayerNorm and RMSNorm with fused residual add and dropout, forward and backward: the
 * CPU kernels, compiled once for each instruction set (cpu_kernels.h) and chosen at load. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_double.h"
#include "cpu_float.h"
#include "cpu_kernels.h"
#include "cpu_lanes.h"
#include "cpu_parallel.h"
#include "cpu_philox.h"

/* Multiplies v[0..n) (columns col0.., a multiple of 4; n <= CPU_CHUNK) by the dropout keep mask /
 * (1 - p), from the Philox words of the piece's counters (cpu_philox.h). */
static void cpu_dropout(double *v, int64_t n, int64_t row, int64_t col0, double p, uint64_t seed,
                        uint64_t offset, int64_t cols) {
    const uint32_t threshold = fo_dropout_threshold(p);
    const double scale = 1.0 / (1.0 - p);
    const uint64_t base =
        offset + (uint64_t)row * fo_dropout_row_counters(cols) + (uint64_t)col0 / 4;
    _Static_assert(4 * FO_PHILOX_RUN >= CPU_CHUNK, "a piece's counters fit one run");
    uint32_t word[4][FO_PHILOX_RUN];
    fo_philox_words(seed, base, (n + 3) / 4, word);
    int64_t j = 0;
    for (; 4 * j + 4 <= n; j++)
        for (int l = 0; l < 4; l++)
            v[4 * j + l] = word[l][j] >= threshold ? v[4 * j + l] * scale : 0.0;
    for (int64_t i = 4 * j; i < n; i++) v[i] = word[i - 4 * j][j] >= threshold ? v[i] * scale : 0.0;
}

/* Element offset of src (of `dtype`) as double. */
static double value_at(const void *src, int64_t offset, int dtype) {
    double value;
    fo_cpu_load(&value, src, offset, 1, dtype);
    return value;
}

static double stat_at(const void *stats, int64_t row, int dtype) {
    return value_at(stats, row, fo_stats_dtype(dtype));
}

/* float32, bfloat16 and float16 without dropout read their floats directly (float32 in place, the
 * halves through a buffer): each CPU_CHUNK piece's sums in FLOAT_LANES double lanes (a fixed order,
 * so the same bits on any thread count), the pieces merged in double, and the output in double,
 * rounded once (the fuzz harness holds float32 to 1 ulp). float64 and dropout take the double path
 * below. */
static int forward_in_float(const fo_norm_forward_params *a) {
    return a->dtype != FO_DTYPE_F64 && a->param_dtype != FO_DTYPE_F64 &&
           (!a->residual || a->residual_dtype != FO_DTYPE_F64) && a->dropout_p == 0.0;
}

/* 32: four AVX-512 vectors (eight AVX2 ones) of independent chains, so a
 * sum runs at the adder's throughput rather than its latency */
#define FLOAT_LANES 32
_Static_assert(FLOAT_LANES == 32, "fold_lanes adds 32 lanes");

/* The lanes added in one fixed tree, halves at a time (each line vector adds). */
static inline double fold_lanes(double *lane) {
    for (int l = 0; l < 16; l++) lane[l] += lane[l + 16];
    for (int l = 0; l < 8; l++) lane[l] += lane[l + 8];
    for (int l = 0; l < 4; l++) lane[l] += lane[l + 4];
    return (lane[0] + lane[2]) + (lane[1] + lane[3]);
}

/* Adds d = x[i] - center over i < n to lane (when given) and d^2 to square_lane, in double
 * lanes, in one pass: bfloat16 spans float's range, where float sums overflow or lose digits.
 * A row's pieces (each a multiple of FLOAT_LANES long but the last) share the lanes, folded once
 * a row. */
static inline void piece_sums(const float *restrict x, int64_t n, double center,
                              double *restrict lane, double *restrict square_lane) {
    int64_t i = 0;
    for (; i + FLOAT_LANES <= n; i += FLOAT_LANES)
        for (int l = 0; l < FLOAT_LANES; l++) {
            const double d = x[i + l] - center;
            if (lane) lane[l] += d;
            square_lane[l] += d * d;
        }
    for (int l = 0; i + l < n; l++) {
        const double d = x[i + l] - center;
        if (lane) lane[l] += d;
        square_lane[l] += d * d;
    }
}

/* h of row r of the float forward (with a residual), and its mean and rstd. */
static void forward_stats_float(const fo_norm_forward_params *a, int64_t r, double *mean_out,
                                double *rstd_out) {
    const int64_t cols = a->cols;
    const int h_dtype = a->residual ? a->residual_dtype : a->dtype;
    const void *h_src = a->residual ? a->residual_out : a->x;
    const int64_t h_at = a->residual ? r * cols : r * a->x_row_stride;
    const int rms = a->kind == FO_NORM_RMS;
    float h_buf[CPU_CHUNK], x_buf[CPU_CHUNK], other_buf[CPU_CHUNK];
    /* LayerNorm: the sums of d = h - h[0] and of d^2 over the row. h[0] is one of the row's
     * values, so (h[0] - mean)^2 <= M2 = sum d^2 - (sum d)^2 / n: the difference cancels away at
     * most log2(n + 1) of double's 53 bits, and a constant row has M2 exactly 0 and its value as
     * its mean. RMSNorm: the sum of squares. */
    double lane[FLOAT_LANES] = {0}, square_lane[FLOAT_LANES] = {0}, center = 0.0;
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
        const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
        if (a->residual) { /* h = x + residual, rounded to residual's dtype */
            const float *restrict x =
                fo_float_in(x_buf, a->x, r * a->x_row_stride + c0, n, a->dtype);
            const float *restrict res = fo_float_in(
                other_buf, a->residual, r * a->residual_row_stride + c0, n, a->residual_dtype);
            float *restrict h =
                fo_float_out(h_buf, a->residual_out, r * cols + c0, a->residual_dtype);
            for (int64_t i = 0; i < n; i++) h[i] = x[i] + res[i];
            fo_float_done(a->residual_out, r * cols + c0, h, n, a->residual_dtype);
        }
        const float *h = fo_float_in(h_buf, h_src, h_at + c0, n, h_dtype);
        if (rms) {
            piece_sums(h, n, 0.0, NULL, square_lane);
            continue;
        }
        if (c0 == 0) center = h[0];
        piece_sums(h, n, center, lane, square_lane);
    }
    double mean = 0.0, m2 = fold_lanes(square_lane);
    if (!rms && cols > 0) {
        const double sum = fold_lanes(lane);
        mean = center + sum / (double)cols;
        /* not below 0 through rounding (NaN stays NaN) */
        m2 = m2 < sum * (sum / (double)cols) ? 0.0 : m2 - sum * (sum / (double)cols);
    }
    const double rstd = 1.0 / sqrt(m2 / (double)cols + a->eps);
    /* float statistics: the dtype is not float64 */
    if (a->mean) ((float *)a->mean)[r] = (float)mean;
    if (a->rstd) ((float *)a->rstd)[r] = (float)rstd;
    *mean_out = mean;
    *rstd_out = rstd;
}

#define FLOAT_BLOCK_ROWS 16

/* Rows [r0, r1) of the float forward, in blocks of rows that stay in cache
 * between their statistics and their output: the output a piece at a time
 * over the block's rows, with the weight and bias converted to double once
 * a block, not once a row. */
static void forward_rows_float(const fo_norm_forward_params *a, int64_t r0, int64_t r1) {
    const int64_t cols = a->cols;
    const int h_dtype = a->residual ? a->residual_dtype : a->dtype;
    const void *h_src = a->residual ? a->residual_out : a->x;
    const int has_weight = a->weight != NULL, has_bias = a->bias != NULL;
    const int64_t fit = (int64_t)8192 / (cols > 0 ? cols : 1), block = fit < 1 ? 1
                                                                       : fit > FLOAT_BLOCK_ROWS
                                                                           ? FLOAT_BLOCK_ROWS
                                                                           : fit;
    float h_buf[CPU_CHUNK], y_buf[CPU_CHUNK], p_buf[CPU_CHUNK];
    double mean[FLOAT_BLOCK_ROWS], rstd[FLOAT_BLOCK_ROWS], w[CPU_CHUNK], b[CPU_CHUNK];
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
        const int64_t rows = r1 - b0 < block ? r1 - b0 : block;
        for (int64_t k = 0; k < rows; k++) forward_stats_float(a, b0 + k, &mean[k], &rstd[k]);
        for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
            const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
            if (has_weight) {
                const float *p = fo_float_in(p_buf, a->weight, c0, n, a->param_dtype);
                for (int64_t i = 0; i < n; i++) w[i] = p[i];
            }
            if (has_bias) {
                const float *p = fo_float_in(p_buf, a->bias, c0, n, a->param_dtype);
                for (int64_t i = 0; i < n; i++) b[i] = p[i];
            }
            for (int64_t k = 0; k < rows; k++) {
                const int64_t r = b0 + k;
                const int64_t h_at = a->residual ? r * cols : r * a->x_row_stride;
                const float *restrict h = fo_float_in(h_buf, h_src, h_at + c0, n, h_dtype);
                float *restrict y = fo_float_out(y_buf, a->y, r * cols + c0, a->dtype);
                const double m = mean[k], s = rstd[k];
                /* in double, rounded once: h - mean can overflow float across bfloat16's range */
                for (int64_t i = 0; i < n; i++) {
                    double v = (h[i] - m) * s;
                    if (has_weight) v *= w[i];
                    if (has_bias) v += b[i];
                    y[i] = (float)v;
                }
                fo_float_done(a->y, r * cols + c0, y, n, a->dtype);
            }
        }
    }
}

/* Rows [r0, r1) of the forward (each row is independent: any thread). */
static void forward_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_norm_forward_params *a = ctx;
    if (forward_in_float(a)) {
        forward_rows_float(a, r0, r1);
        return;
    }
    double h[CPU_CHUNK], other[CPU_CHUNK];
    const int64_t cols = a->cols;
    const int rms = a->kind == FO_NORM_RMS;
    /* where h lives after the first pass, and its dtype */
    const void *h_src = a->residual ? a->residual_out : a->x;
    const int h_dtype = a->residual ? a->residual_dtype : a->dtype;
    const int stats = fo_stats_dtype(a->dtype);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t h_offset = a->residual ? r * cols : r * a->x_row_stride;
        fo_lanes shifted_sum = fo_lanes_zero(), sum_squares = fo_lanes_zero();
        double h0 = 0.0;
        /* h = dropout(x) + residual, rounded to its dtype, and its sums:
         * of squares, and of h - h[0], so the mean of a constant row is
         * exactly its value (a sum of n copies of an fp64 value rounds) */
        for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
            int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
            if (a->residual) {
                fo_cpu_load(h, a->x, r * a->x_row_stride + c0, n, a->dtype);
                if (a->dropout_p > 0.0)
                    cpu_dropout(h, n, r, c0, a->dropout_p, a->seed, a->offset, cols);
                fo_cpu_load(other, a->residual, r * a->residual_row_stride + c0, n,
                            a->residual_dtype);
                for (int64_t i = 0; i < n; i++) h[i] += other[i];
                fo_cpu_store(a->residual_out, r * cols + c0, h, n, a->residual_dtype);
            }
            fo_cpu_load(h, h_src, h_offset + c0, n, h_dtype);
            fo_lanes_add(&sum_squares, h, h, n);
            if (c0 == 0) h0 = h[0];
            for (int64_t i = 0; i < n; i++) h[i] -= h0;
            fo_lanes_add(&shifted_sum, h, NULL, n);
        }
        double mean = rms ? 0.0 : h0 + fo_lanes_total(&shifted_sum) / (double)cols;
        double variance = fo_lanes_total(&sum_squares) / (double)cols;
        if (!rms) {
            /* a second pass: sum of squares about the mean, no cancellation */
            fo_lanes deviations = fo_lanes_zero();
            for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
                int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
                fo_cpu_load(h, h_src, h_offset + c0, n, h_dtype);
                for (int64_t i = 0; i < n; i++) h[i] -= mean;
                fo_lanes_add(&deviations, h, h, n);
            }
            variance = fo_lanes_total(&deviations) / (double)cols;
        }
        double rstd = 1.0 / sqrt(variance + a->eps);
        if (a->mean) fo_cpu_store(a->mean, r, &mean, 1, stats);
        if (a->rstd) fo_cpu_store(a->rstd, r, &rstd, 1, stats);
        for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
            int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
            fo_cpu_load(h, h_src, h_offset + c0, n, h_dtype);
            for (int64_t i = 0; i < n; i++) h[i] = (h[i] - mean) * rstd;
            if (a->weight) {
                fo_cpu_load(other, a->weight, c0, n, a->param_dtype);
                for (int64_t i = 0; i < n; i++) h[i] *= other[i];
            }
            if (a->bias) {
                fo_cpu_load(other, a->bias, c0, n, a->param_dtype);
                for (int64_t i = 0; i < n; i++) h[i] += other[i];
            }
            fo_cpu_store(a->y, r * cols + c0, h, n, a->dtype);
        }
    }
}

/* With fp8, y goes to the workspace and is cast from there: the bytes of
 * fo_quantize_fp8(y) by construction (the maxima follow y: internal.h). */
void FO_CPU(norm_forward)(const fo_norm_forward_params *a) {
    if (!a->fp8) {
        fo_cpu_parallel(a->rows, a->cols, forward_rows, a);
        return;
    }
    fo_norm_forward_params b = *a;
    b.y = a->workspace;
    fo_cpu_parallel(b.rows, b.cols, forward_rows, &b);
    float *maxima =
        (float *)((char *)a->workspace + fo_norm_fp8_y_bytes(a->rows, a->cols, a->dtype));
    FO_CPU(write_fp8_rows)(a->fp8, a->rows, a->cols, b.y, a->cols, a->dtype, maxima);
}

/* dy * weight for columns c0.. of row r, into wdy. */
static void load_weighted_dy(double *wdy, double *weight, const fo_norm_backward_params *a,
                             int64_t r, int64_t c0, int64_t n) {
    fo_double_in(wdy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
    if (!a->weight) return;
    fo_double_in(weight, a->weight, c0, n, a->param_dtype);
    for (int64_t i = 0; i < n; i++) wdy[i] *= weight[i];
}

/* The float backward: every tensor float32, bfloat16 or float16 (float64 takes the double path).
 * Pieces are read as floats (float32 in place) and computed in double as the double path does,
 * dropout included. */
static int backward_in_float(const fo_norm_backward_params *a) {
    return a->dtype != FO_DTYPE_F64 && a->h_dtype != FO_DTYPE_F64 && a->param_dtype != FO_DTYPE_F64;
}

/* The two row sums of the backward over a piece, of wdy - wdy0 (wdy = dy * w, wdy0 its first
 * element) and wdy * xhat, in FLOAT_LANES double lanes, one pass. Called with w either null or
 * known not to be, so each inlined copy vectorizes. */
static inline void row_sums_float(double *restrict lane1, double *restrict lane2,
                                  const float *restrict dy, const float *restrict w,
                                  const float *restrict h, double wdy0, double mean, double rstd,
                                  int64_t n) {
    int64_t i = 0;
    for (; i + FLOAT_LANES <= n; i += FLOAT_LANES)
        for (int l = 0; l < FLOAT_LANES; l++) {
            const double wdy = w ? (double)dy[i + l] * w[i + l] : dy[i + l];
            lane1[l] += wdy - wdy0;
            lane2[l] += wdy * ((h[i + l] - mean) * rstd);
        }
    for (int l = 0; i + l < n; l++) {
        const double wdy = w ? (double)dy[i + l] * w[i + l] : dy[i + l];
        lane1[l] += wdy - wdy0;
        lane2[l] += wdy * ((h[i + l] - mean) * rstd);
    }
}

/* dh = rstd * (wdy - mean(wdy) - xhat * mean(wdy * xhat)) (+ more) of a piece, in double, into
 * out (rounded to float) or out_double, and the piece's terms of dweight and dbias (each optional)
 * in the same pass (neither output: dweight's and dbias' terms only); called with each pointer
 * either null or known not to be, so each inlined copy vectorizes. */
static inline void piece_out_float(float *restrict out, double *restrict out_double,
                                   const float *restrict dy, const float *restrict w,
                                   const float *restrict h, const float *restrict more, double mean,
                                   double rstd, double mean_wdy, double mean_wdy_xhat,
                                   double *restrict dweight, double *restrict dbias, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double xhat = (h[i] - mean) * rstd;
        const double wdy = w ? (double)dy[i] * w[i] : dy[i];
        double dh = rstd * (wdy - mean_wdy - xhat * mean_wdy_xhat);
        if (more) dh += more[i];
        if (out_double)
            out_double[i] = dh;
        else if (out)
            out[i] = (float)dh;
        if (dweight) dweight[i] += dy[i] * xhat;
        if (dbias) dbias[i] += dy[i];
    }
}

/* piece_out_float with each of its pointers null or not, known at the call. */
static void piece_out_cases(float *restrict out, double *restrict out_double,
                            const float *restrict dy, const float *restrict w,
                            const float *restrict h, const float *restrict more, double mean,
                            double rstd, double mean_wdy, double mean_wdy_xhat,
                            double *restrict dweight, double *restrict dbias, int64_t n) {
#define PIECE_OUT(OUT, OUT_DOUBLE, W, MORE, DW, DB) \
    piece_out_float(OUT, OUT_DOUBLE, dy, W, h, MORE, mean, rstd, mean_wdy, mean_wdy_xhat, DW, DB, n)
#define BY_W_AND_MORE(OUT, OUT_DOUBLE, DW, DB)          \
    if (w && more)                                      \
        PIECE_OUT(OUT, OUT_DOUBLE, w, more, DW, DB);    \
    else if (w)                                         \
        PIECE_OUT(OUT, OUT_DOUBLE, w, NULL, DW, DB);    \
    else if (more)                                      \
        PIECE_OUT(OUT, OUT_DOUBLE, NULL, more, DW, DB); \
    else                                                \
        PIECE_OUT(OUT, OUT_DOUBLE, NULL, NULL, DW, DB)
#define BY_PARAMETERS(OUT, OUT_DOUBLE)                  \
    if (dweight && dbias) {                             \
        BY_W_AND_MORE(OUT, OUT_DOUBLE, dweight, dbias); \
    } else if (dweight) {                               \
        BY_W_AND_MORE(OUT, OUT_DOUBLE, dweight, NULL);  \
    } else if (dbias) {                                 \
        BY_W_AND_MORE(OUT, OUT_DOUBLE, NULL, dbias);    \
    } else {                                            \
        BY_W_AND_MORE(OUT, OUT_DOUBLE, NULL, NULL);     \
    }
    if (out_double) {
        BY_PARAMETERS(NULL, out_double)
    } else if (out) {
        BY_PARAMETERS(out, NULL)
    } else {
        BY_PARAMETERS(NULL, NULL)
    }
#undef BY_PARAMETERS
#undef BY_W_AND_MORE
#undef PIECE_OUT
}

/* Stores a float piece of dx or dresidual: nothing where it was written in place. */
static void store_piece(void *dst, int64_t offset, const float *src, int64_t n, int dtype) {
    if (dtype != FO_DTYPE_F32)
        fo_float_done(dst, offset, src, n, dtype);
    else if ((const float *)dst + offset != src)
        memcpy((float *)dst + offset, src, (size_t)n * sizeof(float));
}

/* One row of dx (and dresidual) of the float backward, a piece at a time (each piece read twice:
 * for the sums, then from cache for the output); with dweight and dbias given, the row's terms of
 * them added there. */
static void backward_row_float(const fo_norm_backward_params *a, int64_t r,
                               double *restrict dweight, double *restrict dbias) {
    const int64_t cols = a->cols;
    const int rms = a->kind == FO_NORM_RMS;
    const int64_t dy_at = r * a->dy_row_stride, h_at = r * a->h_row_stride;
    /* float statistics: no dtype is float64 */
    const double mean = rms ? 0.0 : ((const float *)a->mean)[r];
    const double rstd = ((const float *)a->rstd)[r];
    float dy_buf[CPU_CHUNK], h_buf[CPU_CHUNK], w_buf[CPU_CHUNK], more_buf[CPU_CHUNK],
        out_buf[CPU_CHUNK];
    double out_double[CPU_CHUNK];
    /* mean(wdy) as wdy0 + mean(wdy - wdy0): exactly wdy0 where wdy is constant along the row, so
     * that with xhat = 0 (a constant row) dx is exactly 0, not a rounding residue times
     * rstd = 1 / sqrt(eps) */
    const double dy0 = cols < 1 ? 0.0 : value_at(a->dy, dy_at, a->dtype);
    const double wdy0 = a->weight && cols > 0 ? dy0 * value_at(a->weight, 0, a->param_dtype) : dy0;
    /* dx and dresidual are the same values without dropout (neither wanted: dweight's terms only)
     */
    void *out_dst = a->dx ? a->dx : a->dresidual;
    const int out_dtype = a->dx ? a->dtype : a->h_dtype;
    const int dropout = a->dropout_p > 0.0 && a->dx;
    double lane1[FLOAT_LANES] = {0}, lane2[FLOAT_LANES] = {0};
    for (int64_t c0 = 0; out_dst && c0 < cols; c0 += CPU_CHUNK) {
        const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
        const float *dy = fo_float_in(dy_buf, a->dy, dy_at + c0, n, a->dtype);
        const float *h = fo_float_in(h_buf, a->h, h_at + c0, n, a->h_dtype);
        if (a->weight)
            row_sums_float(lane1, lane2, dy, fo_float_in(w_buf, a->weight, c0, n, a->param_dtype),
                           h, wdy0, mean, rstd, n);
        else
            row_sums_float(lane1, lane2, dy, NULL, h, wdy0, mean, rstd, n);
    }
    const double mean_wdy = rms ? 0.0 : wdy0 + fold_lanes(lane1) / (double)cols;
    const double mean_wdy_xhat = fold_lanes(lane2) / (double)cols;
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
        const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
        const int64_t at = r * cols + c0;
        const float *dy = fo_float_in(dy_buf, a->dy, dy_at + c0, n, a->dtype);
        const float *h = fo_float_in(h_buf, a->h, h_at + c0, n, a->h_dtype);
        const float *w = a->weight ? fo_float_in(w_buf, a->weight, c0, n, a->param_dtype) : NULL;
        const float *more = a->dresidual_out
                                ? fo_float_in(more_buf, a->dresidual_out,
                                              r * a->dresidual_out_row_stride + c0, n, a->h_dtype)
                                : NULL;
        float *out = out_dst && !dropout ? fo_float_out(out_buf, out_dst, at, out_dtype) : NULL;
        piece_out_cases(out, dropout ? out_double : NULL, dy, w, h, more, mean, rstd, mean_wdy,
                        mean_wdy_xhat, dweight ? dweight + c0 : NULL, dbias ? dbias + c0 : NULL, n);
        /* with dropout, dresidual = dh and dx = its dropout, each rounded from double */
        if (dropout) {
            if (a->dresidual) fo_double_out(a->dresidual, at, out_double, n, a->h_dtype);
            cpu_dropout(out_double, n, r, c0, a->dropout_p, a->seed, a->offset, cols);
            fo_double_out(a->dx, at, out_double, n, a->dtype);
        } else if (out) {
            store_piece(out_dst, at, out, n, out_dtype);
            if (a->dx && a->dresidual) store_piece(a->dresidual, at, out, n, a->h_dtype);
        }
    }
}

/* dx (and dresidual) of rows [r0, r1): each row is independent. */
static void backward_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_norm_backward_params *a = ctx;
    if (backward_in_float(a)) {
        for (int64_t r = r0; r < r1; r++) backward_row_float(a, r, NULL, NULL);
        return;
    }
    double wdy[CPU_CHUNK], xhat[CPU_CHUNK], other[CPU_CHUNK];
    const int64_t cols = a->cols;
    const int rms = a->kind == FO_NORM_RMS;
    for (int64_t r = r0; r < r1; r++) {
        const double mean = rms ? 0.0 : stat_at(a->mean, r, a->dtype);
        const double rstd = stat_at(a->rstd, r, a->dtype);
        /* the two row sums of the gradient of a normalization; the first
         * of wdy - wdy[0], as in the float32 path (the mean of a constant
         * wdy is then exactly it, and a constant row's dx exactly 0) */
        fo_lanes shifted_sum_wdy = fo_lanes_zero(), sum_wdy_xhat = fo_lanes_zero();
        double wdy0 = 0.0;
        for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
            int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
            load_weighted_dy(wdy, other, a, r, c0, n);
            fo_double_in(xhat, a->h, r * a->h_row_stride + c0, n, a->h_dtype);
            for (int64_t i = 0; i < n; i++) xhat[i] = (xhat[i] - mean) * rstd;
            fo_lanes_add(&sum_wdy_xhat, wdy, xhat, n);
            if (c0 == 0) wdy0 = wdy[0];
            for (int64_t i = 0; i < n; i++) wdy[i] -= wdy0;
            fo_lanes_add(&shifted_sum_wdy, wdy, NULL, n);
        }
        const double mean_wdy = rms ? 0.0 : wdy0 + fo_lanes_total(&shifted_sum_wdy) / (double)cols;
        const double mean_wdy_xhat = fo_lanes_total(&sum_wdy_xhat) / (double)cols;
        for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
            int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
            load_weighted_dy(wdy, other, a, r, c0, n);
            fo_double_in(xhat, a->h, r * a->h_row_stride + c0, n, a->h_dtype);
            for (int64_t i = 0; i < n; i++) {
                xhat[i] = (xhat[i] - mean) * rstd;
                wdy[i] = rstd * (wdy[i] - mean_wdy - xhat[i] * mean_wdy_xhat);
            }
            if (a->dresidual_out) {
                fo_double_in(other, a->dresidual_out, r * a->dresidual_out_row_stride + c0, n,
                             a->h_dtype);
                for (int64_t i = 0; i < n; i++) wdy[i] += other[i];
            }
            if (a->dresidual) fo_double_out(a->dresidual, r * cols + c0, wdy, n, a->h_dtype);
            if (a->dx) {
                if (a->dropout_p > 0.0)
                    cpu_dropout(wdy, n, r, c0, a->dropout_p, a->seed, a->offset, cols);
                fo_double_out(a->dx, r * cols + c0, wdy, n, a->dtype);
            }
        }
    }
}

/* dweight and dbias of columns [c0, c0 + n), float32, into double sums. */
static void parameter_gradient_chunk_f32(const fo_norm_backward_params *a, int64_t c0, int64_t n,
                                         double *restrict dweight, double *restrict dbias) {
    for (int64_t r = 0; r < a->rows; r++) {
        const double mean = a->kind == FO_NORM_RMS ? 0.0 : ((const float *)a->mean)[r];
        const double rstd = ((const float *)a->rstd)[r];
        const float *restrict dy = (const float *)a->dy + r * a->dy_row_stride + c0;
        const float *restrict h = (const float *)a->h + r * a->h_row_stride + c0;
        for (int64_t i = 0; i < n; i++) {
            dweight[i] += (double)dy[i] * ((double)h[i] - mean) * rstd;
            dbias[i] += (double)dy[i];
        }
    }
}

/* dweight and dbias of columns [c0, c0 + n), any dtypes, into double sums. */
static void parameter_gradient_chunk(const fo_norm_backward_params *a, int64_t c0, int64_t n,
                                     double *dweight, double *dbias) {
    double wdy[CPU_CHUNK], xhat[CPU_CHUNK];
    const int rms = a->kind == FO_NORM_RMS;
    for (int64_t r = 0; r < a->rows; r++) {
        const double mean = rms ? 0.0 : stat_at(a->mean, r, a->dtype);
        const double rstd = stat_at(a->rstd, r, a->dtype);
        fo_double_in(wdy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
        fo_double_in(xhat, a->h, r * a->h_row_stride + c0, n, a->h_dtype);
        for (int64_t i = 0; i < n; i++) {
            dweight[i] += wdy[i] * (xhat[i] - mean) * rstd;
            dbias[i] += wdy[i];
        }
    }
}

/* dweight and dbias of the column chunks [k0, k1): each column's sums run
 * down the rows in order, whichever thread takes the chunk. */
static void parameter_gradient_chunks(const void *ctx, int64_t k0, int64_t k1) {
    const fo_norm_backward_params *a = ctx;
    double dweight[CPU_CHUNK], dbias[CPU_CHUNK];
    for (int64_t k = k0; k < k1; k++) {
        const int64_t c0 = k * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        for (int64_t i = 0; i < n; i++) dweight[i] = dbias[i] = 0.0;
        if (a->dtype == FO_DTYPE_F32 && a->h_dtype == FO_DTYPE_F32)
            parameter_gradient_chunk_f32(a, c0, n, dweight, dbias);
        else
            parameter_gradient_chunk(a, c0, n, dweight, dbias);
        if (a->dweight) fo_double_out(a->dweight, c0, dweight, n, a->param_dtype);
        if (a->dbias) fo_double_out(a->dbias, c0, dbias, n, a->param_dtype);
    }
}

/* The float backward with dweight or dbias: blocks of rows, each giving
 * dx of its rows and its own partial dweight and dbias (one pass over dy
 * and h), the partials then added in block order. The blocks depend on the
 * shape alone: the same bits on any thread count. */
typedef struct {
    const fo_norm_backward_params *a;
    int64_t block_rows;
    double *partials; /* 2 * cols a block: dweight's, then dbias's */
} fused_backward;

#define FUSED_BLOCKS 64

static void fused_backward_blocks(const void *ctx, int64_t k0, int64_t k1) {
    const fused_backward *f = ctx;
    const fo_norm_backward_params *a = f->a;
    for (int64_t k = k0; k < k1; k++) {
        double *dweight = f->partials + 2 * k * a->cols, *dbias = dweight + a->cols;
        memset(dweight, 0, 2 * (size_t)a->cols * sizeof(double));
        const int64_t r1 = (k + 1) * f->block_rows < a->rows ? (k + 1) * f->block_rows : a->rows;
        for (int64_t r = k * f->block_rows; r < r1; r++)
            backward_row_float(a, r, a->dweight ? dweight : NULL, a->dbias ? dbias : NULL);
    }
}

/* Runs the fused float backward; 0 where it does not apply (or its
 * partials found no memory): the caller then takes the two passes. */
static int fused_backward_float(const fo_norm_backward_params *a) {
    if (!backward_in_float(a) || !(a->dweight || a->dbias) || a->rows < 1 || a->cols < 1 ||
        a->cols > ((int64_t)1 << 16))
        return 0;
    fused_backward f = {a, 16, NULL};
    if (f.block_rows * FUSED_BLOCKS < a->rows)
        f.block_rows = (a->rows + FUSED_BLOCKS - 1) / FUSED_BLOCKS;
    const int64_t blocks = (a->rows + f.block_rows - 1) / f.block_rows;
    f.partials = malloc((size_t)(2 * blocks * a->cols) * sizeof(double));
    if (!f.partials) return 0;
    fo_cpu_parallel(blocks, f.block_rows * a->cols, fused_backward_blocks, &f);
    double *total = f.partials; /* block 0's partials, the others added to them in order */
    for (int64_t k = 1; k < blocks; k++) {
        const double *partial = f.partials + 2 * k * a->cols;
        for (int64_t i = 0; i < 2 * a->cols; i++) total[i] += partial[i];
    }
    if (a->dweight) fo_double_out(a->dweight, 0, total, a->cols, a->param_dtype);
    if (a->dbias) fo_double_out(a->dbias, 0, total + a->cols, a->cols, a->param_dtype);
    free(f.partials);
    return 1;
}

void FO_CPU(norm_backward)(const fo_norm_backward_params *a) {
    if (fused_backward_float(a)) return;
    if (a->dx || a->dresidual) fo_cpu_parallel(a->rows, a->cols, backward_rows, a);
    if (a->dweight || a->dbias)
        fo_cpu_parallel(fo_cpu_chunks(a->cols), a->rows * fo_cpu_chunk_width(a->cols),
                        parameter_gradient_chunks, a);
}
