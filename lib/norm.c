/* norm.c: LayerNorm and RMSNorm with fused residual add and dropout, forward
 * and backward: argument checks, CPU/CUDA dispatch and the CPU kernels.
 * The CPU works in double over CPU_CHUNK-element pieces of a row (float32
 * has its own faster path), rows (and, for the weight and bias gradients,
 * column chunks) split over threads (cpu_parallel.h). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "cpu_convert.h"
#include "cpu_lanes.h"
#include "cpu_parallel.h"
#include "internal.h"
#include "philox.h"

/* --- argument checks ---------------------------------------------------- */

/* A dtype that must equal `dtype`, or be float32 beside a half `dtype`. */
static int check_companion_dtype(const char *op, const char *name, int value,
                                 int dtype) {
    int status = fo_check_dtype(op, name, value);
    if (status) return status;
    int half = dtype == FO_DTYPE_F16 || dtype == FO_DTYPE_BF16;
    if (value != dtype && !(half && value == FO_DTYPE_F32))
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: %s %s with dtype %s; it must be %s, or float32 "
                       "when dtype is float16/bfloat16",
                       op, name, fo_dtype_name(value), fo_dtype_name(dtype),
                       fo_dtype_name(dtype));
    return FO_OK;
}

static int check_norm_common(const char *op, int device_type, int device_index,
                             int64_t rows, int64_t cols, int dtype,
                             int param_dtype, int kind, double dropout_p) {
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = check_companion_dtype(op, "param_dtype", param_dtype, dtype)))
        return status;
    if (kind != FO_NORM_LAYER && kind != FO_NORM_RMS)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: kind=%d is neither FO_NORM_LAYER (0) nor "
                       "FO_NORM_RMS (1)",
                       op, kind);
    if (!(dropout_p >= 0.0 && dropout_p < 1.0))
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: dropout_p=%g is outside [0, 1)", op, dropout_p);
    return FO_OK;
}

static int check_stats(const char *op, const char *name, uintptr_t address,
                       int64_t rows, int dtype) {
    return fo_check_operand(op, name, address, 1, rows, 1,
                            fo_stats_dtype(dtype), 1);
}

/* --- CPU kernels -------------------------------------------------------- */

/* Multiplies v[0..n) (columns col0..) by the dropout keep mask / (1 - p). */
static void cpu_dropout(double *v, int64_t n, int64_t row, int64_t col0,
                        double p, uint64_t seed, uint64_t offset,
                        int64_t cols) {
    uint32_t threshold = fo_dropout_threshold(p);
    double scale = 1.0 / (1.0 - p);
    uint64_t base = offset + (uint64_t)row * fo_dropout_row_counters(cols);
    fo_philox_block block = fo_philox(seed, base + (uint64_t)col0 / 4);
    for (int64_t i = 0; i < n; i++) {
        int64_t col = col0 + i;
        if (col % 4 == 0 && i > 0)
            block = fo_philox(seed, base + (uint64_t)col / 4);
        v[i] = block.lane[col % 4] >= threshold ? v[i] * scale : 0.0;
    }
}

static double stat_at(const void *stats, int64_t row, int dtype) {
    double value;
    fo_cpu_load(&value, stats, row, 1, fo_stats_dtype(dtype));
    return value;
}

/* The float32 path: the generic one below converts every element to double
 * and back through buffers, and reads a row three times; here the floats
 * are read directly, LayerNorm's statistics come in one pass, and the
 * output is the generic path's double arithmetic, rounded once.
 * Taken when every tensor is float32 and there is no dropout. */
static int forward_is_f32(const fo_norm_forward_params *a) {
    return a->dtype == FO_DTYPE_F32 && a->param_dtype == FO_DTYPE_F32 &&
           (!a->residual || a->residual_dtype == FO_DTYPE_F32) &&
           a->dropout_p == 0.0;
}

/* One row of the float32 forward. */
static void forward_row_f32(const fo_norm_forward_params *a, int64_t r) {
    const int64_t cols = a->cols;
    const float *restrict x = (const float *)a->x + r * a->x_row_stride;
    const float *restrict w = a->weight, *restrict b = a->bias;
    float *restrict y = (float *)a->y + r * cols;
    const float *h = x;
    if (a->residual) { /* h = x + residual: one float rounding, as in double */
        const float *restrict res =
            (const float *)a->residual + r * a->residual_row_stride;
        float *restrict h_out = (float *)a->residual_out + r * cols;
        for (int64_t i = 0; i < cols; i++) h_out[i] = x[i] + res[i];
        h = h_out;
    }
    /* LayerNorm: mean and sum of squared deviations M2, each chunk's own,
     * in double, merged in order by Chan's rule, so M2 never takes a
     * difference of two large sums. RMSNorm: the sum of squares in lanes
     * across the row, the generic path's order (the same bits). */
    double mean = 0.0, m2 = 0.0;
    if (a->kind == FO_NORM_RMS) {
        fo_lanes squares = fo_lanes_zero();
        for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
            const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
            fo_lanes_add_squares_f32(&squares, h + c0, 0.0, n);
        }
        m2 = fo_lanes_total(&squares);
    }
    for (int64_t c0 = 0; a->kind != FO_NORM_RMS && c0 < cols; c0 += CPU_CHUNK) {
        const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
        fo_lanes sum = fo_lanes_zero();
        fo_lanes_add_f32(&sum, h + c0, n);
        const double chunk_mean = fo_lanes_total(&sum) / (double)n;
        fo_lanes squares = fo_lanes_zero();
        fo_lanes_add_squares_f32(&squares, h + c0, chunk_mean, n);
        const double delta = chunk_mean - mean;
        mean += delta * (double)n / (double)(c0 + n);
        m2 += fo_lanes_total(&squares) +
              delta * delta * (double)c0 * (double)n / (double)(c0 + n);
    }
    const double rstd = 1.0 / sqrt(m2 / (double)cols + a->eps);
    if (a->mean) ((float *)a->mean)[r] = (float)mean;
    if (a->rstd) ((float *)a->rstd)[r] = (float)rstd;
    /* the output as the generic path computes it, in double, rounded once */
    for (int64_t i = 0; i < cols; i++) {
        double v = (h[i] - mean) * rstd;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = (float)v;
    }
}

/* Rows [r0, r1) of the forward (each row is independent: any thread). */
static void forward_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_norm_forward_params *a = ctx;
    if (forward_is_f32(a)) {
        for (int64_t r = r0; r < r1; r++) forward_row_f32(a, r);
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
                    cpu_dropout(h, n, r, c0, a->dropout_p, a->seed, a->offset,
                                cols);
                fo_cpu_load(other, a->residual, r * a->residual_row_stride + c0,
                            n, a->residual_dtype);
                for (int64_t i = 0; i < n; i++) h[i] += other[i];
                fo_cpu_store(a->residual_out, r * cols + c0, h, n,
                             a->residual_dtype);
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

static void cpu_forward(const fo_norm_forward_params *a) {
    fo_cpu_parallel(a->rows, a->cols, forward_rows, a);
}

/* dy * weight for columns c0.. of row r, into wdy. */
static void load_weighted_dy(double *wdy, double *weight,
                             const fo_norm_backward_params *a, int64_t r,
                             int64_t c0, int64_t n) {
    fo_cpu_load(wdy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
    if (!a->weight) return;
    fo_cpu_load(weight, a->weight, c0, n, a->param_dtype);
    for (int64_t i = 0; i < n; i++) wdy[i] *= weight[i];
}

/* The float32 backward, for the same reason as the forward's: when every
 * tensor is float32 and there is no dropout. */
static int backward_is_f32(const fo_norm_backward_params *a) {
    return a->dtype == FO_DTYPE_F32 && a->h_dtype == FO_DTYPE_F32 &&
           a->param_dtype == FO_DTYPE_F32 && a->dropout_p == 0.0;
}

/* The two row sums of the float32 backward, of wdy - wdy0 (wdy = dy * w,
 * wdy0 its first element) and wdy * xhat, as the generic path adds them
 * (double terms in cpu_lanes.h's order), from the floats themselves. Called
 * with w either null or known not to be, so each inlined copy vectorizes. */
static inline void row_sums_f32(fo_lanes *shifted_sum_wdy,
                                fo_lanes *sum_wdy_xhat,
                                const float *restrict dy,
                                const float *restrict w,
                                const float *restrict h, double wdy0,
                                double mean, double rstd, int64_t cols) {
    double wdy[CPU_CHUNK], xhat[CPU_CHUNK];
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
        const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
        for (int64_t i = 0; i < n; i++) {
            wdy[i] = w ? (double)dy[c0 + i] * w[c0 + i] : dy[c0 + i];
            xhat[i] = (h[c0 + i] - mean) * rstd;
        }
        fo_lanes_add(sum_wdy_xhat, wdy, xhat, n);
        for (int64_t i = 0; i < n; i++) wdy[i] -= wdy0;
        fo_lanes_add(shifted_sum_wdy, wdy, NULL, n);
    }
}

/* One row of the float32 dx (and dresidual), in double as the generic path. */
static void backward_row_f32(const fo_norm_backward_params *a, int64_t r) {
    const int64_t cols = a->cols;
    const int rms = a->kind == FO_NORM_RMS;
    const float *restrict dy = (const float *)a->dy + r * a->dy_row_stride;
    const float *restrict h = (const float *)a->h + r * a->h_row_stride;
    const float *restrict w = a->weight;
    const double mean = rms ? 0.0 : ((const float *)a->mean)[r];
    const double rstd = ((const float *)a->rstd)[r];
    /* mean(wdy) as wdy0 + mean(wdy - wdy0): exactly wdy0 where wdy is
     * constant along the row, so that with xhat = 0 (a constant row) dx is
     * exactly 0, not a rounding residue times rstd = 1 / sqrt(eps) */
    const double wdy0 = w ? (double)dy[0] * w[0] : dy[0];
    fo_lanes s1 = fo_lanes_zero(), s2 = fo_lanes_zero();
    if (w)
        row_sums_f32(&s1, &s2, dy, w, h, wdy0, mean, rstd, cols);
    else
        row_sums_f32(&s1, &s2, dy, NULL, h, wdy0, mean, rstd, cols);
    const double mean_wdy = rms ? 0.0 : wdy0 + fo_lanes_total(&s1) / (double)cols;
    const double mean_wdy_xhat = fo_lanes_total(&s2) / (double)cols;
    const float *restrict more =
        a->dresidual_out ? (const float *)a->dresidual_out + r * a->dresidual_out_row_stride : NULL;
    /* dx and dresidual are the same values without dropout */
    float *restrict out = (float *)(a->dx ? a->dx : a->dresidual) + r * cols;
    /* a piece at a time, in loops without branches: so gcc 12 vectorizes */
    double dh[CPU_CHUNK];
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
        const int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
        if (w)
            for (int64_t i = 0; i < n; i++) dh[i] = (double)dy[c0 + i] * w[c0 + i];
        else
            for (int64_t i = 0; i < n; i++) dh[i] = dy[c0 + i];
        for (int64_t i = 0; i < n; i++) {
            const double xhat = (h[c0 + i] - mean) * rstd;
            dh[i] = rstd * (dh[i] - mean_wdy - xhat * mean_wdy_xhat);
        }
        if (more)
            for (int64_t i = 0; i < n; i++) dh[i] += more[c0 + i];
        for (int64_t i = 0; i < n; i++) out[c0 + i] = (float)dh[i];
    }
    if (a->dx && a->dresidual)
        memcpy((float *)a->dresidual + r * cols, out, (size_t)cols * sizeof(float));
}

/* dx (and dresidual) of rows [r0, r1): each row is independent. */
static void backward_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_norm_backward_params *a = ctx;
    if (backward_is_f32(a)) {
        for (int64_t r = r0; r < r1; r++) backward_row_f32(a, r);
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
            fo_cpu_load(xhat, a->h, r * a->h_row_stride + c0, n, a->h_dtype);
            for (int64_t i = 0; i < n; i++) xhat[i] = (xhat[i] - mean) * rstd;
            fo_lanes_add(&sum_wdy_xhat, wdy, xhat, n);
            if (c0 == 0) wdy0 = wdy[0];
            for (int64_t i = 0; i < n; i++) wdy[i] -= wdy0;
            fo_lanes_add(&shifted_sum_wdy, wdy, NULL, n);
        }
        const double mean_wdy =
            rms ? 0.0 : wdy0 + fo_lanes_total(&shifted_sum_wdy) / (double)cols;
        const double mean_wdy_xhat = fo_lanes_total(&sum_wdy_xhat) / (double)cols;
        for (int64_t c0 = 0; c0 < cols; c0 += CPU_CHUNK) {
            int64_t n = cols - c0 < CPU_CHUNK ? cols - c0 : CPU_CHUNK;
            load_weighted_dy(wdy, other, a, r, c0, n);
            fo_cpu_load(xhat, a->h, r * a->h_row_stride + c0, n, a->h_dtype);
            for (int64_t i = 0; i < n; i++) {
                xhat[i] = (xhat[i] - mean) * rstd;
                wdy[i] = rstd * (wdy[i] - mean_wdy - xhat[i] * mean_wdy_xhat);
            }
            if (a->dresidual_out) {
                fo_cpu_load(other, a->dresidual_out,
                            r * a->dresidual_out_row_stride + c0, n, a->h_dtype);
                for (int64_t i = 0; i < n; i++) wdy[i] += other[i];
            }
            if (a->dresidual)
                fo_cpu_store(a->dresidual, r * cols + c0, wdy, n, a->h_dtype);
            if (a->dx) {
                if (a->dropout_p > 0.0)
                    cpu_dropout(wdy, n, r, c0, a->dropout_p, a->seed, a->offset,
                                cols);
                fo_cpu_store(a->dx, r * cols + c0, wdy, n, a->dtype);
            }
        }
    }
}

/* dweight and dbias of columns [c0, c0 + n), float32, into double sums. */
static void parameter_gradient_chunk_f32(const fo_norm_backward_params *a,
                                         int64_t c0, int64_t n,
                                         double *restrict dweight,
                                         double *restrict dbias) {
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
static void parameter_gradient_chunk(const fo_norm_backward_params *a,
                                     int64_t c0, int64_t n, double *dweight,
                                     double *dbias) {
    double wdy[CPU_CHUNK], xhat[CPU_CHUNK];
    const int rms = a->kind == FO_NORM_RMS;
    for (int64_t r = 0; r < a->rows; r++) {
        const double mean = rms ? 0.0 : stat_at(a->mean, r, a->dtype);
        const double rstd = stat_at(a->rstd, r, a->dtype);
        fo_cpu_load(wdy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
        fo_cpu_load(xhat, a->h, r * a->h_row_stride + c0, n, a->h_dtype);
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
        if (backward_is_f32(a))
            parameter_gradient_chunk_f32(a, c0, n, dweight, dbias);
        else
            parameter_gradient_chunk(a, c0, n, dweight, dbias);
        if (a->dweight)
            fo_cpu_store(a->dweight, c0, dweight, n, a->param_dtype);
        if (a->dbias) fo_cpu_store(a->dbias, c0, dbias, n, a->param_dtype);
    }
}

static void cpu_backward(const fo_norm_backward_params *a) {
    if (a->dx || a->dresidual)
        fo_cpu_parallel(a->rows, a->cols, backward_rows, a);
    if (a->dweight || a->dbias)
        fo_cpu_parallel(fo_cpu_chunks(a->cols), a->rows * fo_cpu_chunk_width(a->cols),
                        parameter_gradient_chunks, a);
}

/* --- entry points ------------------------------------------------------- */

/* The sizes of the argument structs' first versions (FO_ABI_VERSION 4). */
#define FORWARD_ARGS_FIRST FO_ARGS_END(fo_norm_forward_args, offset)
#define BACKWARD_ARGS_FIRST FO_ARGS_END(fo_norm_backward_args, offset)

int fo_norm_forward(const fo_norm_forward_args *args) {
    static const char op[] = "fo_norm_forward";
    fo_norm_forward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_norm_forward_args", &c, sizeof c,
                               FORWARD_ARGS_FIRST, args)) ||
        (status = check_norm_common(op, c.device_type, c.device_index, c.rows,
                                    c.cols, c.dtype, c.param_dtype, c.kind,
                                    c.dropout_p)))
        return status;
    if (!(isfinite(c.eps) && c.eps > 0.0))
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: eps=%g must be finite and > 0", op, c.eps);
    if (c.kind == FO_NORM_RMS && c.bias)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: RMSNorm takes no bias (bias=0x%" PRIxPTR ")", op,
                       c.bias);
    if (c.residual) {
        if ((status = check_companion_dtype(op, "residual_dtype",
                                            c.residual_dtype, c.dtype)))
            return status;
        if (!c.residual_out && c.rows > 0 && c.cols > 0)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: residual is given but residual_out is a null "
                           "address",
                           op);
    } else {
        c.residual_dtype = c.dtype;
        if (c.residual_out)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: residual_out=0x%" PRIxPTR
                           " is given without a residual",
                           op, c.residual_out);
        if (c.dropout_p > 0.0)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: dropout_p=%g needs a residual (the dropped-out "
                           "sum is what backward reads)",
                           op, c.dropout_p);
    }
    if ((status = fo_check_operand(op, "y", c.y, c.cols, c.rows, c.cols,
                                   c.dtype, 0)) ||
        (status = fo_check_operand(op, "residual_out", c.residual_out, c.cols,
                                   c.rows, c.cols, c.residual_dtype, 1)) ||
        (status = check_stats(op, "mean", c.mean, c.rows, c.dtype)) ||
        (status = check_stats(op, "rstd", c.rstd, c.rows, c.dtype)) ||
        (status = fo_check_operand(op, "x", c.x, c.x_row_stride, c.rows,
                                   c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "residual", c.residual,
                                   c.residual_row_stride, c.rows, c.cols,
                                   c.residual_dtype, 1)) ||
        (status = fo_check_operand(op, "weight", c.weight, c.cols, 1, c.cols,
                                   c.param_dtype, 1)) ||
        (status = fo_check_operand(op, "bias", c.bias, c.cols, 1, c.cols,
                                   c.param_dtype, 1)))
        return status;
    fo_norm_forward_params a = {
        (void *)c.y, (void *)c.residual_out, (void *)c.mean, (void *)c.rstd,
        (const void *)c.x, c.x_row_stride, (const void *)c.residual,
        c.residual_row_stride, c.residual_dtype, (const void *)c.weight,
        (const void *)c.bias, c.param_dtype, c.rows, c.cols, c.dtype, c.kind,
        c.eps, c.dropout_p, c.seed, c.offset};
    if (c.rows == 0 || c.cols == 0)
        return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA)
        return fo_cuda_norm_forward(c.device_index, c.stream, &a);
    cpu_forward(&a);
    return FO_OK;
}

/* Every check of the backward but the workspace's: the call and its
 * workspace query both make them. */
static int check_backward(const char *op, const fo_norm_backward_args *c) {
    int status;
    if ((status = check_norm_common(op, c->device_type, c->device_index,
                                    c->rows, c->cols, c->dtype,
                                    c->param_dtype, c->kind, c->dropout_p)) ||
        (status = check_companion_dtype(op, "h_dtype", c->h_dtype, c->dtype)))
        return status;
    if (c->kind == FO_NORM_RMS && c->dbias)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: RMSNorm has no bias gradient (dbias=0x%" PRIxPTR ")",
                       op, c->dbias);
    if ((status = fo_check_operand(op, "dx", c->dx, c->cols, c->rows, c->cols,
                                   c->dtype, 1)) ||
        (status = fo_check_operand(op, "dresidual", c->dresidual, c->cols,
                                   c->rows, c->cols, c->h_dtype, 1)) ||
        (status = fo_check_operand(op, "dweight", c->dweight, c->cols, 1,
                                   c->cols, c->param_dtype, 1)) ||
        (status = fo_check_operand(op, "dbias", c->dbias, c->cols, 1, c->cols,
                                   c->param_dtype, 1)) ||
        (status = fo_check_operand(op, "dy", c->dy, c->dy_row_stride, c->rows,
                                   c->cols, c->dtype, 0)) ||
        (status = fo_check_operand(op, "dresidual_out", c->dresidual_out,
                                   c->dresidual_out_row_stride, c->rows,
                                   c->cols, c->h_dtype, 1)) ||
        (status = fo_check_operand(op, "h", c->h, c->h_row_stride, c->rows,
                                   c->cols, c->h_dtype, 0)) ||
        (status = fo_check_operand(op, "mean", c->mean, 1, c->rows, 1,
                                   fo_stats_dtype(c->dtype),
                                   c->kind == FO_NORM_RMS)) ||
        (status = fo_check_operand(op, "rstd", c->rstd, 1, c->rows, 1,
                                   fo_stats_dtype(c->dtype), 0)) ||
        (status = fo_check_operand(op, "weight", c->weight, c->cols, 1,
                                   c->cols, c->param_dtype, 1)))
        return status;
    return FO_OK;
}

static fo_norm_backward_params backward_params(const fo_norm_backward_args *c) {
    fo_norm_backward_params a = {
        (void *)c->dx, (void *)c->dresidual, (void *)c->dweight,
        (void *)c->dbias, (void *)c->workspace, c->workspace_bytes, (const void *)c->dy,
        c->dy_row_stride, (const void *)c->dresidual_out,
        c->dresidual_out_row_stride, (const void *)c->h, c->h_row_stride,
        c->h_dtype, (const void *)c->mean, (const void *)c->rstd,
        (const void *)c->weight, c->param_dtype, c->rows, c->cols, c->dtype,
        c->kind, c->dropout_p, c->seed, c->offset};
    return a;
}

/* The workspace of a checked call: on CUDA, what the plan of the kernel it
 * takes needs (the launcher checks the call's workspace against its own
 * plan). */
static int64_t backward_workspace(int device_type, int device_index,
                                  const fo_norm_backward_params *a) {
    if (device_type != FO_DEVICE_CUDA || (!a->dweight && !a->dbias))
        return 0;
    return fo_cuda_norm_workspace_bytes(a, device_index);
}

int fo_norm_backward_workspace_bytes(const fo_norm_backward_args *args,
                                     int64_t *bytes) {
    static const char op[] = "fo_norm_backward_workspace_bytes";
    fo_norm_backward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_norm_backward_args", &c, sizeof c,
                               BACKWARD_ARGS_FIRST, args)) ||
        (status = fo_check_bytes_pointer(op, bytes)) ||
        (status = check_backward(op, &c)))
        return status;
    c.workspace = 0; /* not read: the size it needs is the question */
    const fo_norm_backward_params a = backward_params(&c);
    *bytes = backward_workspace(c.device_type, c.device_index, &a);
    return FO_OK;
}

int fo_norm_backward(const fo_norm_backward_args *args) {
    static const char op[] = "fo_norm_backward";
    fo_norm_backward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_norm_backward_args", &c, sizeof c,
                               BACKWARD_ARGS_FIRST, args)) ||
        (status = check_backward(op, &c)))
        return status;
    const fo_norm_backward_params a = backward_params(&c);
    /* the size the call needs is checked by the CUDA launcher, against its plan */
    if ((status = fo_check_workspace(op, c.workspace, c.workspace_bytes, 0)))
        return status;
    if (c.cols == 0 || (!c.dx && !c.dresidual && !c.dweight && !c.dbias) ||
        (c.rows == 0 && !c.dweight && !c.dbias))
        return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA)
        return fo_cuda_norm_backward(c.device_index, c.stream, &a);
    cpu_backward(&a);
    return FO_OK;
}
