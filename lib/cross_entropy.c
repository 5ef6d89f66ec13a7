/* cross_entropy.c: the cross-entropy of rows of logits with its gradient,
 * and the in-place row scaling its backward uses: argument checks, CPU/CUDA
 * dispatch and the CPU implementation (cpu/cross_entropy.c: exps in float
 * and sums in double, or all in double for float64; one thread a row, so
 * every thread count gives the same bits). */
#include <inttypes.h>
#include <math.h>

#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

/* The first target neither in [0, vocab) nor ignore_index (host memory). */
static int check_targets(const char *op, const fo_cross_entropy_params *a) {
    for (int64_t r = 0; r < a->rows; r++) {
        const int64_t t = a->target[r];
        if (t != a->ignore_index && (t < 0 || t >= a->vocab))
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: target[%" PRId64 "]=%" PRId64 " is outside [0, vocab=%" PRId64
                           ") and is not ignore_index=%" PRId64,
                           op, r, t, a->vocab, a->ignore_index);
    }
    return FO_OK;
}

/* 1 / (rows not ignored) into scale, in loss_dtype: inf where every row is
 * ignored, so that the mean is NaN, as torch's. */
static void store_mean_scale(void *scale, const fo_cross_entropy_params *a, int loss_dtype) {
    int64_t counted = 0;
    for (int64_t r = 0; r < a->rows; r++) counted += a->target[r] != a->ignore_index;
    const double inverse = 1.0 / (double)counted;
    fo_cpu_store(scale, 0, &inverse, 1, loss_dtype);
}

/* The rows' losses summed in row order, times the mean's scale, rounded
 * once into total (of the logits' dtype). */
static void store_total(const fo_cross_entropy_params *a, int loss_dtype) {
    double sum = 0.0, v;
    for (int64_t r = 0; r < a->rows; r++) {
        fo_cpu_load(&v, a->loss, r, 1, loss_dtype);
        sum += v;
    }
    if (a->reduction == FO_REDUCTION_MEAN) {
        fo_cpu_load(&v, a->scale, 0, 1, loss_dtype);
        sum *= v;
    }
    fo_cpu_store(a->total, 0, &sum, 1, a->dtype);
}

static int check_reduction(const char *op, const fo_cross_entropy_args *c) {
    if (c->reduction < FO_REDUCTION_NONE || c->reduction > FO_REDUCTION_MEAN)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: reduction=%d must be FO_REDUCTION_NONE (0), SUM (1) or MEAN (2)", op,
                       c->reduction);
    if (c->reduction == FO_REDUCTION_NONE && c->total)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: total=0x%" PRIxPTR " must be 0 with reduction=FO_REDUCTION_NONE", op,
                       c->total);
    if (c->reduction == FO_REDUCTION_MEAN && c->scale)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: scale=0x%" PRIxPTR
                       " must be 0 with reduction=FO_REDUCTION_MEAN, "
                       "which scales the gradient by 1 / (rows not ignored)",
                       op, c->scale);
    return FO_OK;
}

#define CROSS_ENTROPY_ARGS_FIRST FO_ARGS_END(fo_cross_entropy_args, softcap)
#define SCALE_ROWS_ARGS_FIRST FO_ARGS_END(fo_scale_rows_args, reserved)

int fo_cross_entropy(const fo_cross_entropy_args *args) {
    static const char op[] = "fo_cross_entropy";
    fo_cross_entropy_args c;
    int status;
    if ((status = fo_read_args(op, "fo_cross_entropy_args", &c, sizeof c, CROSS_ENTROPY_ARGS_FIRST,
                               args)) ||
        (status = fo_check_device(op, c.device_type, c.device_index)) ||
        (status = fo_check_shape(op, c.rows, c.vocab)) ||
        (status = fo_check_dtype(op, "dtype", c.dtype)) || (status = check_reduction(op, &c)))
        return status;
    const int loss_dtype = fo_stats_dtype(c.dtype);
    if (c.rows > 0 && c.vocab == 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: vocab=0 with rows=%" PRId64 "; a row needs at least one class", op,
                       c.rows);
    if (!(c.label_smoothing >= 0.0 && c.label_smoothing <= 1.0))
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: label_smoothing=%g must be in [0, 1]", op,
                       c.label_smoothing);
    if (!(c.softcap >= 0.0 && isfinite(c.softcap)))
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: softcap=%g must be finite and > 0 (0 for none)", op, c.softcap);
    if ((status = fo_check_operand(op, "loss", c.loss, 1, c.rows, 1, loss_dtype, 0)) ||
        (status =
             fo_check_operand(op, "dlogits", c.dlogits, c.vocab, c.rows, c.vocab, c.dtype, 1)) ||
        (status = fo_check_operand(op, "logits", c.logits, c.logits_row_stride, c.rows, c.vocab,
                                   c.dtype, 0)) ||
        /* int64 targets: checked as 8-byte elements */
        (status = fo_check_operand(op, "target", c.target, 1, c.rows, 1, FO_DTYPE_F64, 0)) ||
        (status = fo_check_operand(op, "scale", c.scale, 1, 1, 1, loss_dtype, 1)) ||
        (status = fo_check_operand(op, "total", c.total, 1, 1, 1, c.dtype,
                                   c.reduction == FO_REDUCTION_NONE)))
        return status;
    if (c.dlogits && c.dlogits == c.logits && c.rows > 1 && c.logits_row_stride != c.vocab)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: dlogits is logits (in place) but logits has row stride %" PRId64
                       ", not vocab=%" PRId64 "; in place needs dense logits",
                       op, c.logits_row_stride, c.vocab);
    fo_cross_entropy_params a = {(void *)c.loss,
                                 (void *)c.dlogits,
                                 (const void *)c.logits,
                                 c.logits_row_stride,
                                 (const int64_t *)c.target,
                                 (const void *)c.scale,
                                 c.rows,
                                 c.vocab,
                                 c.ignore_index,
                                 c.dtype,
                                 c.label_smoothing,
                                 c.softcap,
                                 c.reduction,
                                 (void *)c.total};
    if (c.rows == 0 && c.reduction == FO_REDUCTION_NONE) return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_cross_entropy(c.device_index, c.stream, &a);
    if ((status = check_targets(op, &a))) return status;
    if (c.reduction == FO_REDUCTION_MEAN) { /* loss[rows] */
        a.scale = (char *)a.loss + c.rows * fo_dtype_size(loss_dtype);
        store_mean_scale((void *)a.scale, &a, loss_dtype);
    }
    fo_cpu()->cross_entropy(&a);
    if (c.reduction != FO_REDUCTION_NONE) store_total(&a, loss_dtype);
    return FO_OK;
}

int fo_scale_rows(const fo_scale_rows_args *args) {
    static const char op[] = "fo_scale_rows";
    fo_scale_rows_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_scale_rows_args", &c, sizeof c, SCALE_ROWS_ARGS_FIRST, args)) ||
        (status = fo_check_device(op, c.device_type, c.device_index)) ||
        (status = fo_check_shape(op, c.rows, c.cols)) ||
        (status = fo_check_dtype(op, "dtype", c.dtype)) ||
        (status = fo_check_dtype(op, "scale_dtype", c.scale_dtype)) ||
        (status = fo_check_reserved(op, c.reserved)))
        return status;
    if (c.per_row != 0 && c.per_row != 1)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: per_row=%d must be 0 or 1", op, c.per_row);
    if ((status = fo_check_operand(op, "x", c.x, c.cols, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "scale", c.scale, 1, c.per_row ? c.rows : 1, 1,
                                   c.scale_dtype, 0)))
        return status;
    fo_scale_rows_params a = {(void *)c.x, (const void *)c.scale, c.rows,   c.cols,
                              c.dtype,     c.scale_dtype,         c.per_row};
    if (c.rows == 0 || c.cols == 0) return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_scale_rows(c.device_index, c.stream, &a);
    fo_cpu()->scale_rows(&a);
    return FO_OK;
}
