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
#include "cpu/cpu_kernels.h"
#include "internal.h"
#include "philox.h"

/* --- argument checks ---------------------------------------------------- */

static int check_norm_common(const char *op, int device_type, int device_index, int64_t rows,
                             int64_t cols, int dtype, int param_dtype, int kind, double dropout_p) {
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_companion_dtype(op, "param_dtype", param_dtype, dtype)))
        return status;
    if (kind != FO_NORM_LAYER && kind != FO_NORM_RMS)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: kind=%d is neither FO_NORM_LAYER (0) nor "
                       "FO_NORM_RMS (1)",
                       op, kind);
    if (!(dropout_p >= 0.0 && dropout_p < 1.0))
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: dropout_p=%g is outside [0, 1)", op,
                       dropout_p);
    return FO_OK;
}

static int check_stats(const char *op, const char *name, uintptr_t address, int64_t rows,
                       int dtype) {
    return fo_check_operand(op, name, address, 1, rows, 1, fo_stats_dtype(dtype), 1);
}

/* --- entry points ------------------------------------------------------- */

/* The sizes of the argument structs' first versions (FO_ABI_VERSION 4). */
#define FORWARD_ARGS_FIRST FO_ARGS_END(fo_norm_forward_args, offset)
#define BACKWARD_ARGS_FIRST FO_ARGS_END(fo_norm_backward_args, offset)

/* Every check of the forward but the workspace's: the call and its
 * workspace query both make them. */
static int check_forward(const char *op, fo_norm_forward_args *c) {
    int status;
    if ((status = check_norm_common(op, c->device_type, c->device_index, c->rows, c->cols, c->dtype,
                                    c->param_dtype, c->kind, c->dropout_p)))
        return status;
    if (!(isfinite(c->eps) && c->eps > 0.0))
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: eps=%g must be finite and > 0", op, c->eps);
    if (c->kind == FO_NORM_RMS && c->bias)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: RMSNorm takes no bias (bias=0x%" PRIxPTR ")",
                       op, c->bias);
    if (c->residual) {
        if ((status = fo_check_companion_dtype(op, "residual_dtype", c->residual_dtype, c->dtype)))
            return status;
        if (!c->residual_out && c->rows > 0 && c->cols > 0)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: residual is given but residual_out is a null "
                           "address",
                           op);
    } else {
        c->residual_dtype = c->dtype;
        if (c->residual_out)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: residual_out=0x%" PRIxPTR " is given without a residual", op,
                           c->residual_out);
        if (c->dropout_p > 0.0)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: dropout_p=%g needs a residual (the dropped-out "
                           "sum is what backward reads)",
                           op, c->dropout_p);
    }
    if (fo_fp8_out_given(&c->fp8) && c->dtype == FO_DTYPE_F64)
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: dtype float64 has no FP8 output (fp8); it takes float32, float16 or "
                       "bfloat16",
                       op);
    /* a norm's output is an activation: e4m3, as in torchao's and TransformerEngine's recipes */
    if (fo_fp8_out_given(&c->fp8) && c->fp8.fp8_dtype == FO_FP8_E5M2)
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: fp8.fp8_dtype=1 (e5m2); a norm's FP8 output is e4m3 (0), the format "
                       "of activations",
                       op);
    if ((status = fo_check_output_or_fp8(op, c->y, &c->fp8, c->rows, c->cols, c->dtype)) ||
        (status = fo_check_operand(op, "residual_out", c->residual_out, c->cols, c->rows, c->cols,
                                   c->residual_dtype, 1)) ||
        (status = check_stats(op, "mean", c->mean, c->rows, c->dtype)) ||
        (status = check_stats(op, "rstd", c->rstd, c->rows, c->dtype)) ||
        (status =
             fo_check_operand(op, "x", c->x, c->x_row_stride, c->rows, c->cols, c->dtype, 0)) ||
        (status = fo_check_operand(op, "residual", c->residual, c->residual_row_stride, c->rows,
                                   c->cols, c->residual_dtype, 1)) ||
        (status =
             fo_check_operand(op, "weight", c->weight, c->cols, 1, c->cols, c->param_dtype, 1)) ||
        (status = fo_check_operand(op, "bias", c->bias, c->cols, 1, c->cols, c->param_dtype, 1)))
        return status;
    return FO_OK;
}

/* The workspace of a checked call (fused_ops.h, fo_norm_forward_workspace_bytes). */
static int64_t forward_workspace(const fo_norm_forward_args *c) {
    if (!fo_fp8_out_given(&c->fp8)) return 0;
    if (c->device_type == FO_DEVICE_CUDA) return 2 * c->rows * (int64_t)sizeof(float);
    const int64_t y = fo_norm_fp8_y_bytes(c->rows, c->cols, c->dtype);
    if (c->fp8.recipe == FO_FP8_ROWWISE) return y;
    return y + (c->rows < FO_FP8_GROUPS ? c->rows : FO_FP8_GROUPS) * (int64_t)sizeof(float);
}

int fo_norm_forward_workspace_bytes(const fo_norm_forward_args *args, int64_t *bytes) {
    static const char op[] = "fo_norm_forward_workspace_bytes";
    fo_norm_forward_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_norm_forward_args", &c, sizeof c, FORWARD_ARGS_FIRST, args)) ||
        (status = fo_check_bytes_pointer(op, bytes)) || (status = check_forward(op, &c)))
        return status;
    *bytes = forward_workspace(&c);
    return FO_OK;
}

int fo_norm_forward(const fo_norm_forward_args *args) {
    static const char op[] = "fo_norm_forward";
    fo_norm_forward_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_norm_forward_args", &c, sizeof c, FORWARD_ARGS_FIRST, args)) ||
        (status = check_forward(op, &c)) ||
        (status = fo_check_workspace(op, c.workspace, c.workspace_bytes, forward_workspace(&c))))
        return status;
    const int fp8 = fo_fp8_out_given(&c.fp8);
    if (fp8 && c.workspace % 8 != 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: workspace=0x%" PRIxPTR " is not 8-byte aligned", op, c.workspace);
    fo_norm_forward_params a = {(void *)c.y,
                                (void *)c.residual_out,
                                (void *)c.mean,
                                (void *)c.rstd,
                                (const void *)c.x,
                                c.x_row_stride,
                                (const void *)c.residual,
                                c.residual_row_stride,
                                c.residual_dtype,
                                (const void *)c.weight,
                                (const void *)c.bias,
                                c.param_dtype,
                                c.rows,
                                c.cols,
                                c.dtype,
                                c.kind,
                                c.eps,
                                c.dropout_p,
                                c.seed,
                                c.offset,
                                fp8 ? &c.fp8 : NULL,
                                (void *)c.workspace,
                                NULL,
                                NULL,
                                NULL,
                                NULL,
                                NULL};
    if ((c.rows == 0 || c.cols == 0) && !fp8) return FO_OK; /* FP8 writes its scales */
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_norm_forward(c.device_index, c.stream, &a);
    fo_cpu()->norm_forward(&a);
    return FO_OK;
}

/* Every check of the backward but the workspace's: the call and its
 * workspace query both make them. */
static int check_backward(const char *op, const fo_norm_backward_args *c) {
    int status;
    if ((status = check_norm_common(op, c->device_type, c->device_index, c->rows, c->cols, c->dtype,
                                    c->param_dtype, c->kind, c->dropout_p)) ||
        (status = fo_check_companion_dtype(op, "h_dtype", c->h_dtype, c->dtype)))
        return status;
    if (c->kind == FO_NORM_RMS && c->dbias)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: RMSNorm has no bias gradient (dbias=0x%" PRIxPTR ")", op, c->dbias);
    if ((status = fo_check_operand(op, "dx", c->dx, c->cols, c->rows, c->cols, c->dtype, 1)) ||
        (status = fo_check_operand(op, "dresidual", c->dresidual, c->cols, c->rows, c->cols,
                                   c->h_dtype, 1)) ||
        (status =
             fo_check_operand(op, "dweight", c->dweight, c->cols, 1, c->cols, c->param_dtype, 1)) ||
        (status =
             fo_check_operand(op, "dbias", c->dbias, c->cols, 1, c->cols, c->param_dtype, 1)) ||
        (status =
             fo_check_operand(op, "dy", c->dy, c->dy_row_stride, c->rows, c->cols, c->dtype, 0)) ||
        (status = fo_check_operand(op, "dresidual_out", c->dresidual_out,
                                   c->dresidual_out_row_stride, c->rows, c->cols, c->h_dtype, 1)) ||
        (status =
             fo_check_operand(op, "h", c->h, c->h_row_stride, c->rows, c->cols, c->h_dtype, 0)) ||
        (status = fo_check_operand(op, "mean", c->mean, 1, c->rows, 1, fo_stats_dtype(c->dtype),
                                   c->kind == FO_NORM_RMS)) ||
        (status =
             fo_check_operand(op, "rstd", c->rstd, 1, c->rows, 1, fo_stats_dtype(c->dtype), 0)) ||
        (status =
             fo_check_operand(op, "weight", c->weight, c->cols, 1, c->cols, c->param_dtype, 1)))
        return status;
    return FO_OK;
}

static fo_norm_backward_params backward_params(const fo_norm_backward_args *c) {
    fo_norm_backward_params a = {(void *)c->dx,
                                 (void *)c->dresidual,
                                 (void *)c->dweight,
                                 (void *)c->dbias,
                                 (void *)c->workspace,
                                 c->workspace_bytes,
                                 (const void *)c->dy,
                                 c->dy_row_stride,
                                 (const void *)c->dresidual_out,
                                 c->dresidual_out_row_stride,
                                 (const void *)c->h,
                                 c->h_row_stride,
                                 c->h_dtype,
                                 (const void *)c->mean,
                                 (const void *)c->rstd,
                                 (const void *)c->weight,
                                 c->param_dtype,
                                 c->rows,
                                 c->cols,
                                 c->dtype,
                                 c->kind,
                                 c->dropout_p,
                                 c->seed,
                                 c->offset};
    return a;
}

/* The workspace of a checked call: on CUDA, what the plan of the kernel it
 * takes needs (the launcher checks the call's workspace against its own
 * plan). */
static int64_t backward_workspace(int device_type, int device_index,
                                  const fo_norm_backward_params *a) {
    if (device_type != FO_DEVICE_CUDA || (!a->dweight && !a->dbias)) return 0;
    return fo_cuda_norm_backward_workspace_bytes(device_index, a);
}

int fo_norm_backward_workspace_bytes(const fo_norm_backward_args *args, int64_t *bytes) {
    static const char op[] = "fo_norm_backward_workspace_bytes";
    fo_norm_backward_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_norm_backward_args", &c, sizeof c, BACKWARD_ARGS_FIRST, args)) ||
        (status = fo_check_bytes_pointer(op, bytes)) || (status = check_backward(op, &c)))
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
    if ((status =
             fo_read_args(op, "fo_norm_backward_args", &c, sizeof c, BACKWARD_ARGS_FIRST, args)) ||
        (status = check_backward(op, &c)))
        return status;
    const fo_norm_backward_params a = backward_params(&c);
    /* the size the call needs is checked by the CUDA launcher, against its plan */
    if ((status = fo_check_workspace(op, c.workspace, c.workspace_bytes, 0))) return status;
    if (c.cols == 0 || (!c.dx && !c.dresidual && !c.dweight && !c.dbias) ||
        (c.rows == 0 && !c.dweight && !c.dbias))
        return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_norm_backward(c.device_index, c.stream, &a);
    fo_cpu()->norm_backward(&a);
    return FO_OK;
}
