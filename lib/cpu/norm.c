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

/* The Philox words of a piece's dropout counters (columns col0.., a multiple of 4; n <=
 * CPU_CHUNK; cpu_philox.h), and the threshold a kept element's word reaches. */
static uint32_t dropout_words(uint32_t word[4][FO_PHILOX_RUN], int64_t n, int64_t row, int64_t col0,
                              double p, uint64_t seed, uint64_t offset, int64_t cols) {
    const uint64_t base =
        offset + (uint64_t)row * fo_dropout_row_counters(cols) + (uint64_t)col0 / 4;
    _Static_assert(4 * FO_PHILOX_RUN >= CPU_CHUNK, "a piece's counters fit one run");
    fo_philox_words(seed, base, (n + 3) / 4, word);
    return fo_dropout_threshold(p);
}

/* Multiplies v[0..n) (a piece, as dropout_words') by the dropout keep mask / (1 - p). */
static void cpu_dropout(double *v, int64_t n, int64_t row, int64_t col0, double p, uint64_t seed,
                        uint64_t offset, int64_t cols) {
    uint32_t word[4][FO_PHILOX_RUN];
    const uint32_t threshold = dropout_words(word, n, row, col0, p, seed, offset, cols);
    const double scale = 1.0 / (1.0 - p);
    int64_t j = 0;
    for (; 4 * j + 4 <= n; j++)
        for (int l = 0; l < 4; l++)
            v[4 * j + l] = word[l][j] >= threshold ? v[4 * j + l] * scale : 0.0;
    for (int64_t i = 4 * j; i < n; i++) v[i] = word[i - 4 * j][j] >= threshold ? v[i] * scale : 0.0;
}

/* cpu_dropout of floats: the same mask, and each kept v * (1 / (1 - p)) rounded once. */
static void cpu_dropout_float(float *v, int64_t n, int64_t row, int64_t col0, double p,
                              uint64_t seed, uint64_t offset, int64_t cols) {
    uint32_t word[4][FO_PHILOX_RUN];
    const uint32_t threshold = dropout_words(word, n, row, col0, p, seed, offset, cols);
    const double scale = 1.0 / (1.0 - p);
    int64_t j = 0;
    for (; 4 * j + 4 <= n; j++)
        for (int l = 0; l < 4; l++)
            v[4 * j + l] = word[l][j] >= threshold ? (float)(v[4 * j + l] * scale) : 0.0f;
    for (int64_t i = 4 * j; i < n; i++)
        v[i] = word[i - 4 * j][j] >= threshold ? (float)(v[i] * scale) : 0.0f;
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

/* float32, bfloat16 and float16 without dropout compute in float, as the header says
 * ("statistics and arithmetic are fp32") and torch's CPU kernels do: float32 pieces read in place,
 * the halves through a buffer. Each FLOAT_PIECE piece sums into FLOAT_LANES float lanes (32 terms a
 * lane), added into double lanes folded once a row (a fixed order: the same bits on any thread
 * count), so a row's error is a piece's, whatever its length. float64 and dropout take the double
 * path below. */
static int forward_in_float(const fo_norm_forward_params *a) {
    return a->dtype != FO_DTYPE_F64 && a->param_dtype != FO_DTYPE_F64 &&
           (!a->residual || a->residual_dtype != FO_DTYPE_F64) && a->dropout_p == 0.0;
}

/* 32: two AVX-512 vectors (four AVX2 ones) of independent float chains, of 32 terms each a piece
 * of FLOAT_PIECE (a piece of 256 spent as long clearing and folding its lanes as adding) */
#define FLOAT_LANES 32
#define FLOAT_PIECE 1024
_Static_assert(FLOAT_LANES == 32, "fold_lanes adds 32 lanes");
_Static_assert(FLOAT_PIECE % FLOAT_LANES == 0, "a piece fills the lanes");

/* The lanes added in one fixed tree, halves at a time (each line vector adds). */
static inline double fold_lanes(double *lane) {
    for (int l = 0; l < 16; l++) lane[l] += lane[l + 16];
    for (int l = 0; l < 8; l++) lane[l] += lane[l + 8];
    for (int l = 0; l < 4; l++) lane[l] += lane[l + 4];
    return (lane[0] + lane[2]) + (lane[1] + lane[3]);
}

/* A piece's float lanes, lo (0-15) and hi (16-31), added into 32 double lanes. */
static inline void add_to_lanes(double *restrict lane, const fo_f16x *lo, const fo_f16x *hi) {
    for (int l = 0; l < 16; l++) {
        lane[l] += (*lo)[l];
        lane[16 + l] += (*hi)[l];
    }
}

/* Adds t to lane l (< FLOAT_LANES) of a piece's lanes lo and hi (a tail shorter than the lanes). */
#define TAIL_ADD(lo, hi, l, t)   \
    do {                         \
        if ((l) < 16)            \
            (lo)[l] += (t);      \
        else                     \
            (hi)[(l)-16] += (t); \
    } while (0)

/* The sum of h - center over a piece of n <= FLOAT_PIECE, into lane. */
static inline void piece_offsets(const float *restrict h, int64_t n, float center,
                                 double *restrict lane) {
    fo_f16x lo = {0}, hi = {0}, v;
    int64_t i = 0;
    for (; i + FLOAT_LANES <= n; i += FLOAT_LANES) {
        fo_f16x_at(&v, h + i);
        lo += v - center;
        fo_f16x_at(&v, h + i + 16);
        hi += v - center;
    }
    for (int l = 0; i + l < n; l++) TAIL_ADD(lo, hi, l, h[i + l] - center);
    add_to_lanes(lane, &lo, &hi);
}

/* The sums of d = h - center and of d^2 over a piece, into lane and square_lane. */
static inline void piece_deviations(const float *restrict h, int64_t n, float center,
                                    double *restrict lane, double *restrict square_lane) {
    fo_f16x lo = {0}, hi = {0}, square_lo = {0}, square_hi = {0}, d;
    int64_t i = 0;
    for (; i + FLOAT_LANES <= n; i += FLOAT_LANES) {
        fo_f16x_at(&d, h + i);
        d -= center;
        lo += d;
        square_lo += d * d;
        fo_f16x_at(&d, h + i + 16);
        d -= center;
        hi += d;
        square_hi += d * d;
    }
    for (int l = 0; i + l < n; l++) {
        const float e = h[i + l] - center;
        TAIL_ADD(lo, hi, l, e);
        TAIL_ADD(square_lo, square_hi, l, e * e);
    }
    add_to_lanes(lane, &lo, &hi);
    add_to_lanes(square_lane, &square_lo, &square_hi);
}

/* The sum of h^2 over a piece, into square_lane (RMSNorm). */
static inline void piece_squares(const float *restrict h, int64_t n, double *restrict square_lane) {
    fo_f16x lo = {0}, hi = {0}, v;
    int64_t i = 0;
    for (; i + FLOAT_LANES <= n; i += FLOAT_LANES) {
        fo_f16x_at(&v, h + i);
        lo += v * v;
        fo_f16x_at(&v, h + i + 16);
        hi += v * v;
    }
    for (int l = 0; i + l < n; l++) TAIL_ADD(lo, hi, l, h[i + l] * h[i + l]);
    add_to_lanes(square_lane, &lo, &hi);
}

/* The same sums of d = h - center in double lanes, for the rows float cannot hold (below). */
static inline void piece_deviations_double(const float *restrict h, int64_t n, double center,
                                           double *restrict lane, double *restrict square_lane) {
    for (int64_t i = 0; i < n; i++) {
        const double d = h[i] - center;
        lane[i % FLOAT_LANES] += d;
        square_lane[i % FLOAT_LANES] += d * d;
    }
}

/* A row as floats: float32 in place, a 16-bit row of up to FLOAT_ROW converted once (held), else
 * converted a piece at a time. */
#define FLOAT_ROW 4096
typedef struct {
    const void *src;
    int dtype;
    int64_t at;
    const float *held; /* the whole row as floats, or NULL */
} float_row;

static inline const float *row_piece(const float_row *row, float *buf, int64_t c0, int64_t n) {
    return row->held ? row->held + c0 : fo_float_in(buf, row->src, row->at + c0, n, row->dtype);
}

/* Elements [at, at + n) of src as a float_row, converted into held_buf (FLOAT_ROW floats) where
 * they are 16-bit and fit. */
static float_row float_row_of(const void *src, int dtype, int64_t at, int64_t n, float *held_buf) {
    float_row row = {src, dtype, at, NULL};
    if (!src) return row;
    if (dtype == FO_DTYPE_F32)
        row.held = (const float *)src + at;
    else if (n <= FLOAT_ROW)
        row.held = fo_float_in(held_buf, src, at, n, dtype);
    return row;
}

/* A variance + eps below this, or sums that overflowed, is a row whose float squares lost bits
 * among the subnormals or overflowed (a bfloat16 row spans float's range): its sums are taken
 * again in double. */
#define FLOAT_SMALLEST_VARIANCE 0x1p-100

/* Row r's h as floats (with a residual, x + residual written to residual_out, rounded to its
 * dtype, and read as stored; held in held_buf where it fits). */
static float_row forward_h(const fo_norm_forward_params *a, int64_t r, float *held_buf) {
    const int64_t cols = a->cols;
    if (!a->residual) return float_row_of(a->x, a->dtype, r * a->x_row_stride, cols, held_buf);
    float x_buf[FLOAT_PIECE], res_buf[FLOAT_PIECE], h_buf[FLOAT_PIECE];
    const int held = a->residual_dtype != FO_DTYPE_F32 && cols <= FLOAT_ROW;
    for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
        const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
        const float *restrict x = fo_float_in(x_buf, a->x, r * a->x_row_stride + c0, n, a->dtype);
        const float *restrict res = fo_float_in(
            res_buf, a->residual, r * a->residual_row_stride + c0, n, a->residual_dtype);
        float *restrict h = fo_float_out(h_buf, a->residual_out, r * cols + c0, a->residual_dtype);
        for (int64_t i = 0; i < n; i++) h[i] = x[i] + res[i];
        fo_float_done(a->residual_out, r * cols + c0, h, n, a->residual_dtype);
        if (held) fo_float_in(held_buf + c0, a->residual_out, r * cols + c0, n, a->residual_dtype);
    }
    float_row row = {a->residual_out, a->residual_dtype, r * cols, NULL};
    if (a->residual_dtype == FO_DTYPE_F32)
        row.held = (const float *)a->residual_out + r * cols;
    else if (held)
        row.held = held_buf;
    return row;
}

/* Row h's mean and variance; 1 where they were taken in float, which then holds |h - mean|
 * (below sqrt(FLT_MAX)) and so its output. LayerNorm: the mean of h - h[0], then the sums of
 * d = h - m and d^2 about that float m, whose sum corrects the mean and leaves the variance
 * without cancellation (the mean of a constant row is its value: every d is 0). RMSNorm: the
 * mean of h^2. */
static int row_stats_float(const fo_norm_forward_params *a, const float_row *h_row,
                           double *mean_out, double *variance_out) {
    const int64_t cols = a->cols;
    const int rms = a->kind == FO_NORM_RMS;
    float h_buf[FLOAT_PIECE];
    double lane[FLOAT_LANES] = {0}, square_lane[FLOAT_LANES] = {0};
    double mean = 0.0, m2 = 0.0;
    if (rms) {
        for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
            const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
            piece_squares(row_piece(h_row, h_buf, c0, n), n, square_lane);
        }
        m2 = fold_lanes(square_lane);
    } else if (cols > 0) {
        const float center = row_piece(h_row, h_buf, 0, 1)[0];
        for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
            const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
            piece_offsets(row_piece(h_row, h_buf, c0, n), n, center, lane);
        }
        const float m = (float)(center + fold_lanes(lane) / (double)cols);
        for (int l = 0; l < FLOAT_LANES; l++) lane[l] = 0.0;
        for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
            const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
            piece_deviations(row_piece(h_row, h_buf, c0, n), n, m, lane, square_lane);
        }
        const double sum = fold_lanes(lane), squares = fold_lanes(square_lane);
        mean = m + sum / (double)cols;
        /* not below 0 through rounding (NaN stays NaN) */
        m2 = squares < sum * (sum / (double)cols) ? 0.0 : squares - sum * (sum / (double)cols);
    }
    const int in_float = m2 / (double)cols + a->eps >= FLOAT_SMALLEST_VARIANCE && isfinite(m2);
    if (!in_float) {
        /* double lanes about h[0]: (h[0] - mean)^2 <= M2 bounds the cancellation to
         * log2(n + 1) of double's bits */
        double dl[FLOAT_LANES] = {0}, dsq[FLOAT_LANES] = {0}, c = 0.0;
        for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
            const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
            const float *h = row_piece(h_row, h_buf, c0, n);
            if (c0 == 0 && !rms) c = h[0];
            piece_deviations_double(h, n, c, dl, dsq);
        }
        const double sum = rms ? 0.0 : fold_lanes(dl);
        mean = rms ? 0.0 : c + sum / (double)cols;
        m2 = fold_lanes(dsq);
        if (!rms) m2 = m2 < sum * (sum / (double)cols) ? 0.0 : m2 - sum * (sum / (double)cols);
    }
    *mean_out = mean;
    *variance_out = m2 / (double)cols;
    return in_float;
}

/* y of a piece in float: (h - mean) * rstd * w + b, the mean as hi + lo floats so that h - hi is
 * exact where h is near the mean (Sterbenz) and the mean's rounding does not enter d. Called with w
 * and b each null or known not to be, so each inlined copy vectorizes. */
static inline void piece_y(float *restrict y, const float *restrict h, const float *restrict w,
                           const float *restrict b, float hi, float lo, float rstd, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = ((h[i] - hi) - lo) * rstd;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

/* piece_y in double, rounded once: for the rows and calls float cannot hold. */
static void piece_y_double(float *restrict y, const float *restrict h, const float *restrict w,
                           const float *restrict b, double mean, double rstd, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double v = (h[i] - mean) * rstd;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = (float)v;
    }
}

/* Whether y's float arithmetic can hold every product: |xhat| <= sqrt(cols) always, so with |w|
 * and |b| below these no intermediate overflows where y is finite (else the call's outputs are
 * computed in double). */
static int float_y_fits(const fo_norm_forward_params *a) {
    float buf[FLOAT_PIECE];
    const double limit = 0x1p120 / sqrt((double)(a->cols > 0 ? a->cols : 1));
    for (int64_t c0 = 0; c0 < a->cols; c0 += FLOAT_PIECE) {
        const int64_t n = a->cols - c0 < FLOAT_PIECE ? a->cols - c0 : FLOAT_PIECE;
        float most = 0.0f;
        if (a->weight) {
            const float *w = fo_float_in(buf, a->weight, c0, n, a->param_dtype);
            for (int64_t i = 0; i < n; i++) most = fmaxf(most, fabsf(w[i]));
        }
        if (!(most <= limit)) return 0;
        most = 0.0f;
        if (a->bias) {
            const float *b = fo_float_in(buf, a->bias, c0, n, a->param_dtype);
            for (int64_t i = 0; i < n; i++) most = fmaxf(most, fabsf(b[i]));
        }
        if (!(most <= 0x1p120)) return 0;
    }
    return 1;
}

typedef struct {
    const fo_norm_forward_params *a;
    int float_y; /* float_y_fits */
} float_forward;

/* Rows [r0, r1) of the float forward, a row at a time: its output follows its statistics while
 * the row is in cache, and is written in order. */
static void forward_rows_float(const float_forward *f, int64_t r0, int64_t r1) {
    const fo_norm_forward_params *a = f->a;
    const int64_t cols = a->cols;
    float h_held[FLOAT_ROW], w_held[FLOAT_ROW], b_held[FLOAT_ROW];
    float h_buf[FLOAT_PIECE], y_buf[FLOAT_PIECE], w_buf[FLOAT_PIECE], b_buf[FLOAT_PIECE];
    const float_row w_row = float_row_of(a->weight, a->param_dtype, 0, cols, w_held),
                    b_row = float_row_of(a->bias, a->param_dtype, 0, cols, b_held);
    for (int64_t r = r0; r < r1; r++) {
        const float_row h_row = forward_h(a, r, h_held);
        double mean, variance;
        const int float_y = row_stats_float(a, &h_row, &mean, &variance) && f->float_y;
        const double rstd = 1.0 / sqrt(variance + a->eps);
        /* float statistics: the dtype is not float64 */
        if (a->mean) ((float *)a->mean)[r] = (float)mean;
        if (a->rstd) ((float *)a->rstd)[r] = (float)rstd;
        const float hi = (float)mean, lo = (float)(mean - hi), s = (float)rstd;
        for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
            const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
            const float *w = a->weight ? row_piece(&w_row, w_buf, c0, n) : NULL;
            const float *b = a->bias ? row_piece(&b_row, b_buf, c0, n) : NULL;
            const float *restrict h = row_piece(&h_row, h_buf, c0, n);
            float *restrict y = fo_float_out(y_buf, a->y, r * cols + c0, a->dtype);
            if (!float_y)
                piece_y_double(y, h, w, b, mean, rstd, n);
            else if (w && b)
                piece_y(y, h, w, b, hi, lo, s, n);
            else if (w)
                piece_y(y, h, w, NULL, hi, lo, s, n);
            else if (b)
                piece_y(y, h, NULL, b, hi, lo, s, n);
            else
                piece_y(y, h, NULL, NULL, hi, lo, s, n);
            fo_float_done(a->y, r * cols + c0, y, n, a->dtype);
        }
    }
}

/* Rows [r0, r1) of the forward (each row is independent: any thread). */
static void forward_rows(const void *ctx, int64_t r0, int64_t r1) {
    const float_forward *f = ctx;
    const fo_norm_forward_params *a = f->a;
    if (forward_in_float(a)) {
        forward_rows_float(f, r0, r1);
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
        const float_forward f = {a, forward_in_float(a) && float_y_fits(a)};
        fo_cpu_parallel(a->rows, a->cols, forward_rows, &f);
        return;
    }
    fo_norm_forward_params b = *a;
    b.y = a->workspace;
    const float_forward f = {&b, forward_in_float(&b) && float_y_fits(&b)};
    fo_cpu_parallel(b.rows, b.cols, forward_rows, &f);
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
 * Rows compute in float (backward_row_float), but for those float cannot hold, whose pieces are
 * read as floats and computed in double (backward_row_in_double). */
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

/* One row of dx (and dresidual) of the float backward computed in double, a piece at a time (each
 * piece read twice: for the sums, then from cache for the output); with dweight and dbias given,
 * the row's terms of them added there: the rows backward_row_float cannot hold. */
static void backward_row_in_double(const fo_norm_backward_params *a, int64_t r,
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

/* Pass 1 of a float row over a piece: the sums of wdy - wdy0 and wdy * xhat in float lanes, added
 * into double lanes. */
static inline void piece_sums_in_float(double *restrict lane1, double *restrict lane2,
                                       const float *restrict dy, const float *restrict w,
                                       const float *restrict h, float wdy0, float mean, float rstd,
                                       int64_t n) {
    fo_f16x s1[2] = {{0}}, s2[2] = {{0}}, g, v, x;
    int64_t i = 0;
    for (; i + FLOAT_LANES <= n; i += FLOAT_LANES)
        for (int half = 0; half < 2; half++) {
            fo_f16x_at(&g, dy + i + 16 * half);
            fo_f16x_at(&v, w + i + 16 * half);
            fo_f16x_at(&x, h + i + 16 * half);
            const fo_f16x wdy = g * v;
            s1[half] += wdy - wdy0;
            s2[half] += wdy * ((x - mean) * rstd);
        }
    for (int l = 0; i + l < n; l++) {
        const float wdy = dy[i + l] * w[i + l];
        TAIL_ADD(s1[0], s1[1], l, wdy - wdy0);
        TAIL_ADD(s2[0], s2[1], l, wdy * ((h[i + l] - mean) * rstd));
    }
    add_to_lanes(lane1, &s1[0], &s1[1]);
    add_to_lanes(lane2, &s2[0], &s2[1]);
}

/* Pass 2 of a float row over a piece: dh = rstd * (wdy - c1 - xhat * c2) (+ more) into out, and
 * the terms of dweight and dbias added to theirs; returns the sum of dh, not finite where any dh
 * is not (or the sum overflowed). Called with more and the partials each null or known not to
 * be, so each inlined copy vectorizes. */
static inline float piece_dh_in_float(float *restrict out, const float *restrict dy,
                                      const float *restrict w, const float *restrict h,
                                      const float *restrict more, float mean, float rstd, float c1,
                                      float c2, float *restrict dweight, float *restrict dbias,
                                      int64_t n) {
    float check[FLOAT_LANES] = {0};
#define DH_AT(i, l)                                             \
    do {                                                        \
        const float xhat = (h[i] - mean) * rstd;                \
        float dh = rstd * fo_fma(-xhat, c2, dy[i] * w[i] - c1); \
        if (more) dh += more[i];                                \
        out[i] = dh;                                            \
        check[l] += dh;                                         \
        if (dweight) {                                          \
            dweight[i] = fo_fma(dy[i], xhat, dweight[i]);       \
            dbias[i] += dy[i];                                  \
        }                                                       \
    } while (0)
    int64_t i = 0;
    for (; i + FLOAT_LANES <= n; i += FLOAT_LANES)
        for (int l = 0; l < FLOAT_LANES; l++) DH_AT(i + l, l);
    for (int l = 0; i + l < n; l++) DH_AT(i + l, l);
#undef DH_AT
    float total = 0.0f;
    for (int l = 0; l < FLOAT_LANES; l++) total += check[l];
    return total;
}

/* The float backward's held rows (dy and h, each row's in turn; w), a thread's. */
typedef struct {
    float dy[FLOAT_ROW], h[FLOAT_ROW], w[FLOAT_ROW];
    float_row w_row; /* the weight, or ones */
} backward_rows_held;

/* w as floats (ones without a weight), held where it fits. */
static void hold_weight(backward_rows_held *held, const fo_norm_backward_params *a) {
    if (!a->weight && a->cols <= FLOAT_ROW) {
        for (int64_t i = 0; i < a->cols; i++) held->w[i] = 1.0f;
        held->w_row = (float_row){NULL, FO_DTYPE_F32, 0, held->w};
        return;
    }
    held->w_row = float_row_of(a->weight, a->param_dtype, 0, a->cols, held->w);
}

/* Pieces of the weight row, or ones. */
static const float *weight_piece(const backward_rows_held *held, float *buf, int64_t c0,
                                 int64_t n) {
    if (held->w_row.held || held->w_row.src) return row_piece(&held->w_row, buf, c0, n);
    for (int64_t i = 0; i < n; i++) buf[i] = 1.0f;
    return buf;
}

/* What backward_row_float did with a row. */
enum {
    ROW_LEFT, /* nothing: its sums are not finite; backward_row_in_double's */
    ROW_DONE,
    ROW_OVERFLOWED /* written, but a dh is not finite: an intermediate may have overflowed float,
                      and the partials may hold it */
};

/* Row r of the float backward in float: dx (and dresidual), and with dweight given (dbias beside
 * it; either may be scratch) the row's terms added to those float partials. */
static int backward_row_float(const fo_norm_backward_params *a, int64_t r, backward_rows_held *held,
                              float *restrict dweight, float *restrict dbias) {
    const int64_t cols = a->cols;
    const int rms = a->kind == FO_NORM_RMS;
    const float mean = rms ? 0.0f : ((const float *)a->mean)[r];
    const float rstd = ((const float *)a->rstd)[r];
    const float_row dy_row = float_row_of(a->dy, a->dtype, r * a->dy_row_stride, cols, held->dy),
                    h_row = float_row_of(a->h, a->h_dtype, r * a->h_row_stride, cols, held->h);
    float dy_buf[FLOAT_PIECE], h_buf[FLOAT_PIECE], w_buf[FLOAT_PIECE], more_buf[FLOAT_PIECE],
        out_buf[FLOAT_PIECE];
    const float wdy0 =
        cols < 1 ? 0.0f : row_piece(&dy_row, dy_buf, 0, 1)[0] * weight_piece(held, w_buf, 0, 1)[0];
    double lane1[FLOAT_LANES] = {0}, lane2[FLOAT_LANES] = {0};
    for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
        const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
        piece_sums_in_float(lane1, lane2, row_piece(&dy_row, dy_buf, c0, n),
                            weight_piece(held, w_buf, c0, n), row_piece(&h_row, h_buf, c0, n), wdy0,
                            mean, rstd, n);
    }
    /* mean(wdy) as wdy0 + mean(wdy - wdy0): exactly wdy0 where wdy is constant along the row, so
     * that with xhat = 0 (a constant row) dx is exactly 0 */
    const double sum1 = fold_lanes(lane1), sum2 = fold_lanes(lane2);
    if (!(isfinite(sum1) && isfinite(sum2))) return ROW_LEFT;
    const float c1 = rms ? 0.0f : (float)(wdy0 + sum1 / (double)cols),
                c2 = (float)(sum2 / (double)cols);
    void *out_dst = a->dx ? a->dx : a->dresidual;
    const int out_dtype = a->dx ? a->dtype : a->h_dtype;
    const int dropout = a->dropout_p > 0.0 && a->dx; /* dresidual = dh, dx = its dropout */
    float check = 0.0f;
    for (int64_t c0 = 0; c0 < cols; c0 += FLOAT_PIECE) {
        const int64_t n = cols - c0 < FLOAT_PIECE ? cols - c0 : FLOAT_PIECE;
        const int64_t at = r * cols + c0;
        const float *dy = row_piece(&dy_row, dy_buf, c0, n), *h = row_piece(&h_row, h_buf, c0, n),
                    *w = weight_piece(held, w_buf, c0, n);
        const float *more = a->dresidual_out
                                ? fo_float_in(more_buf, a->dresidual_out,
                                              r * a->dresidual_out_row_stride + c0, n, a->h_dtype)
                                : NULL;
        float *out = out_dst && !dropout ? fo_float_out(out_buf, out_dst, at, out_dtype) : out_buf;
        float *dw = dweight ? dweight + c0 : NULL, *db = dbias ? dbias + c0 : NULL;
        if (more && dw)
            check += piece_dh_in_float(out, dy, w, h, more, mean, rstd, c1, c2, dw, db, n);
        else if (more)
            check += piece_dh_in_float(out, dy, w, h, more, mean, rstd, c1, c2, NULL, NULL, n);
        else if (dw)
            check += piece_dh_in_float(out, dy, w, h, NULL, mean, rstd, c1, c2, dw, db, n);
        else
            check += piece_dh_in_float(out, dy, w, h, NULL, mean, rstd, c1, c2, NULL, NULL, n);
        if (dropout) {
            if (a->dresidual) store_piece(a->dresidual, at, out, n, a->h_dtype);
            for (int64_t k = 0; k < n; k += CPU_CHUNK)
                cpu_dropout_float(out + k, n - k < CPU_CHUNK ? n - k : CPU_CHUNK, r, c0 + k,
                                  a->dropout_p, a->seed, a->offset, cols);
            store_piece(a->dx, at, out, n, a->dtype);
        } else if (out_dst) {
            store_piece(out_dst, at, out, n, out_dtype);
            if (a->dx && a->dresidual) store_piece(a->dresidual, at, out, n, a->h_dtype);
        }
    }
    return isfinite(check) ? ROW_DONE : ROW_OVERFLOWED;
}

/* dx (and dresidual) of rows [r0, r1): each row is independent. */
static void backward_rows(const void *ctx, int64_t r0, int64_t r1) {
    const fo_norm_backward_params *a = ctx;
    if (backward_in_float(a)) {
        backward_rows_held held;
        hold_weight(&held, a);
        for (int64_t r = r0; r < r1; r++)
            if (backward_row_float(a, r, &held, NULL, NULL) != ROW_DONE)
                backward_row_in_double(a, r, NULL, NULL);
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
    float *float_partials; /* the same, of up to FLOAT_PARTIAL_ROWS float rows at a time */
} fused_backward;

#define FUSED_BLOCKS 64
#define FLOAT_PARTIAL_ROWS 16

/* Rows [r0, r1) of a block whose float partials (cleared here) may hold an overflow: again in
 * double, their terms into the double partials. */
static void rows_again_in_double(const fo_norm_backward_params *a, int64_t r0, int64_t r1,
                                 double *dweight, double *dbias, float *float_partials) {
    memset(float_partials, 0, 2 * (size_t)a->cols * sizeof(float));
    for (int64_t r = r0; r < r1; r++)
        backward_row_in_double(a, r, a->dweight ? dweight : NULL, a->dbias ? dbias : NULL);
}

/* The float partials of rows [r0, r1) into the double ones (cleared after), or those rows again
 * in double where a partial is not finite. */
static void flush_partials(const fo_norm_backward_params *a, int64_t r0, int64_t r1,
                           double *restrict dweight, double *restrict dbias,
                           float *restrict float_partials) {
    const int64_t cols = a->cols;
    float lane[FLOAT_LANES] = {0}, check = 0.0f;
    int64_t i = 0;
    for (; i + FLOAT_LANES <= 2 * cols; i += FLOAT_LANES)
        for (int l = 0; l < FLOAT_LANES; l++) lane[l] += float_partials[i + l] * 0.0f;
    for (; i < 2 * cols; i++) check += float_partials[i] * 0.0f;
    for (int l = 0; l < FLOAT_LANES; l++) check += lane[l];
    if (check != 0.0f) { /* NaN: a partial is inf or NaN */
        rows_again_in_double(a, r0, r1, dweight, dbias, float_partials);
        return;
    }
    for (i = 0; i < cols; i++) {
        dweight[i] += float_partials[i];
        dbias[i] += float_partials[cols + i];
    }
    memset(float_partials, 0, 2 * (size_t)cols * sizeof(float));
}

static void fused_backward_blocks(const void *ctx, int64_t k0, int64_t k1) {
    const fused_backward *f = ctx;
    const fo_norm_backward_params *a = f->a;
    const int64_t cols = a->cols;
    backward_rows_held held;
    hold_weight(&held, a);
    for (int64_t k = k0; k < k1; k++) {
        double *dweight = f->partials + 2 * k * cols, *dbias = dweight + cols;
        float *fw = f->float_partials + 2 * k * cols, *fb = fw + cols;
        memset(dweight, 0, 2 * (size_t)cols * sizeof(double));
        memset(fw, 0, 2 * (size_t)cols * sizeof(float));
        const int64_t r1 = (k + 1) * f->block_rows < a->rows ? (k + 1) * f->block_rows : a->rows;
        int64_t first = k * f->block_rows; /* the float partials' first row */
        for (int64_t r = first; r < r1; r++) {
            const int row = backward_row_float(a, r, &held, fw, fb);
            if (row == ROW_LEFT) {
                flush_partials(a, first, r, dweight, dbias, fw);
                backward_row_in_double(a, r, a->dweight ? dweight : NULL, a->dbias ? dbias : NULL);
                first = r + 1;
            } else if (row == ROW_OVERFLOWED) {
                rows_again_in_double(a, first, r + 1, dweight, dbias, fw);
                first = r + 1;
            } else if (r + 1 - first == FLOAT_PARTIAL_ROWS) {
                flush_partials(a, first, r + 1, dweight, dbias, fw);
                first = r + 1;
            }
        }
        flush_partials(a, first, r1, dweight, dbias, fw);
    }
}

/* Runs the fused float backward; 0 where it does not apply (or its
 * partials found no memory): the caller then takes the two passes. */
static int fused_backward_float(const fo_norm_backward_params *a) {
    if (!backward_in_float(a) || !(a->dweight || a->dbias) || a->rows < 1 || a->cols < 1 ||
        a->cols > ((int64_t)1 << 16))
        return 0;
    fused_backward f = {a, 16, NULL, NULL};
    if (f.block_rows * FUSED_BLOCKS < a->rows)
        f.block_rows = (a->rows + FUSED_BLOCKS - 1) / FUSED_BLOCKS;
    const int64_t blocks = (a->rows + f.block_rows - 1) / f.block_rows;
    f.partials = malloc((size_t)(2 * blocks * a->cols) * sizeof(double));
    f.float_partials = malloc((size_t)(2 * blocks * a->cols) * sizeof(float));
    if (!f.partials || !f.float_partials) {
        free(f.partials);
        free(f.float_partials);
        return 0;
    }
    fo_cpu_parallel(blocks, f.block_rows * a->cols, fused_backward_blocks, &f);
    double *total = f.partials; /* block 0's partials, the others added to them in order */
    for (int64_t k = 1; k < blocks; k++) {
        const double *partial = f.partials + 2 * k * a->cols;
        for (int64_t i = 0; i < 2 * a->cols; i++) total[i] += partial[i];
    }
    if (a->dweight) fo_double_out(a->dweight, 0, total, a->cols, a->param_dtype);
    if (a->dbias) fo_double_out(a->dbias, 0, total + a->cols, a->cols, a->param_dtype);
    free(f.partials);
    free(f.float_partials);
    return 1;
}

void FO_CPU(norm_backward)(const fo_norm_backward_params *a) {
    if (fused_backward_float(a)) return;
    if (a->dx || a->dresidual) fo_cpu_parallel(a->rows, a->cols, backward_rows, a);
    if (a->dweight || a->dbias)
        fo_cpu_parallel(fo_cpu_chunks(a->cols), a->rows * fo_cpu_chunk_width(a->cols),
                        parameter_gradient_chunks, a);
}
