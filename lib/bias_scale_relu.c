/* bias_scale_relu.c: relu(x * scale + bias), forward and backward: argument
 * checks, CPU/CUDA dispatch and the CPU implementation.
 *
 * Forward saves a 1-bit mask (y > 0) rather than x or y: backward then reads
 * dy plus 1/8 byte an element instead of dy plus a whole element, the fewest
 * bytes that can tell it where the gradient flows. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

static int fo_check_mask(const char *op, uintptr_t mask, int64_t rows, int64_t cols) {
    if (mask == 0 && rows > 0 && cols > 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: mask is a null address; backward needs the mask "
                       "the forward pass wrote",
                       op);
    return FO_OK;
}

/* Checks shared by forward and backward, before anything runs. */
static int check_common(const char *op, int device_type, int device_index, int64_t rows,
                        int64_t cols, int dtype, int bias_dtype, double scale) {
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_dtype(op, "bias_dtype", bias_dtype)))
        return status;
    int half_x = dtype == FO_DTYPE_F16 || dtype == FO_DTYPE_BF16;
    if (bias_dtype != dtype && !(half_x && bias_dtype == FO_DTYPE_F32))
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: bias dtype %s with x dtype %s; the bias must have "
                       "x's dtype, or float32 when x is float16/bfloat16",
                       op, fo_dtype_name(bias_dtype), fo_dtype_name(dtype));
    if (!isfinite(scale))
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: scale=%g is not finite", op, (double)scale);
    return FO_OK;
}

/* --- entry points ------------------------------------------------------- */

/* The sizes of the argument structs' first versions (FO_ABI_VERSION 4). */
#define FORWARD_ARGS_FIRST FO_ARGS_END(fo_bias_scale_relu_forward_args, scale)
#define BACKWARD_ARGS_FIRST FO_ARGS_END(fo_bias_scale_relu_backward_args, scale)

int fo_bias_scale_relu_forward(const fo_bias_scale_relu_forward_args *args) {
    static const char op[] = "fo_bias_scale_relu_forward";
    fo_bias_scale_relu_forward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_bias_scale_relu_forward_args", &c, sizeof c,
                               FORWARD_ARGS_FIRST, args)) ||
        (status = check_common(op, c.device_type, c.device_index, c.rows, c.cols, c.dtype,
                               c.bias_dtype, c.scale)) ||
        (status = fo_check_operand(op, "y", c.y, c.cols, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "x", c.x, c.x_row_stride, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "bias", c.bias, c.cols, 1, c.cols, c.bias_dtype, 1)))
        return status;
    fo_bias_scale_relu_forward_params a = {(void *)c.y,
                                           (unsigned char *)c.mask,
                                           (const void *)c.x,
                                           c.x_row_stride,
                                           (const void *)c.bias,
                                           c.rows,
                                           c.cols,
                                           c.dtype,
                                           c.bias_dtype,
                                           c.scale};
    if (c.rows == 0 || c.cols == 0) return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA)
        return fo_cuda_bias_scale_relu_forward(c.device_index, c.stream, &a);
    fo_cpu()->bias_scale_relu_forward(&a);
    return FO_OK;
}

/* Every check of the backward but the workspace's: the call and its
 * workspace query both make them. */
static int check_backward(const char *op, const fo_bias_scale_relu_backward_args *c) {
    int status;
    if ((status = check_common(op, c->device_type, c->device_index, c->rows, c->cols, c->dtype,
                               c->bias_dtype, c->scale)) ||
        (status = fo_check_operand(op, "dx", c->dx, c->cols, c->rows, c->cols, c->dtype, 1)) ||
        (status = fo_check_operand(op, "dbias", c->dbias, c->cols, 1, c->cols, c->bias_dtype, 1)) ||
        (status =
             fo_check_operand(op, "dy", c->dy, c->dy_row_stride, c->rows, c->cols, c->dtype, 0)) ||
        (status = fo_check_mask(op, c->mask, c->rows, c->cols)))
        return status;
    return FO_OK;
}

/* The workspace a checked call needs: the CUDA bias gradient's partials. */
static int64_t backward_workspace(const fo_bias_scale_relu_backward_args *c) {
    if (!c->dbias || c->device_type != FO_DEVICE_CUDA) return 0;
    return fo_cuda_bias_scale_relu_backward_workspace_bytes(c->device_index, c);
}

int fo_bias_scale_relu_backward_workspace_bytes(const fo_bias_scale_relu_backward_args *args,
                                                int64_t *bytes) {
    static const char op[] = "fo_bias_scale_relu_backward_workspace_bytes";
    fo_bias_scale_relu_backward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_bias_scale_relu_backward_args", &c, sizeof c,
                               BACKWARD_ARGS_FIRST, args)) ||
        (status = fo_check_bytes_pointer(op, bytes)) || (status = check_backward(op, &c)))
        return status;
    *bytes = backward_workspace(&c);
    return FO_OK;
}

int fo_bias_scale_relu_backward(const fo_bias_scale_relu_backward_args *args) {
    static const char op[] = "fo_bias_scale_relu_backward";
    fo_bias_scale_relu_backward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_bias_scale_relu_backward_args", &c, sizeof c,
                               BACKWARD_ARGS_FIRST, args)) ||
        (status = check_backward(op, &c)) ||
        (status = fo_check_workspace(op, c.workspace, c.workspace_bytes, backward_workspace(&c))))
        return status;
    fo_bias_scale_relu_backward_params a = {(void *)c.dx,
                                            (void *)c.dbias,
                                            (void *)c.workspace,
                                            (const void *)c.dy,
                                            c.dy_row_stride,
                                            (const unsigned char *)c.mask,
                                            c.rows,
                                            c.cols,
                                            c.dtype,
                                            c.bias_dtype,
                                            c.scale};
    /* nothing to write: no rows and no bias gradient (zeros) to give */
    if (c.cols == 0 || (!c.dx && !c.dbias) || (c.rows == 0 && !c.dbias)) return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA)
        return fo_cuda_bias_scale_relu_backward(c.device_index, c.stream, &a);
    fo_cpu()->bias_scale_relu_backward(&a);
    return FO_OK;
}
