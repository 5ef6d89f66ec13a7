/* dyt.c: DyT, y = weight * tanh(alpha * x) + bias, and its gradients:
 * argument checks and CPU/CUDA dispatch (the CPU kernels: cpu/dyt.c). */
#include "cpu_convert.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

/* Checks shared by both passes: device, sizes, dtypes, x and the
 * parameters. */
static int check_inputs(const char *op, const fo_dyt_args *c) {
    int status;
    if ((status = fo_check_device(op, c->device_type, c->device_index)) ||
        (status = fo_check_shape(op, c->rows, c->cols)) ||
        (status = fo_check_dtype(op, "dtype", c->dtype)) ||
        (status = fo_check_companion_dtype(op, "param_dtype", c->param_dtype, c->dtype)) ||
        (status =
             fo_check_operand(op, "x", c->x, c->x_row_stride, c->rows, c->cols, c->dtype, 0)) ||
        (status = fo_check_operand(op, "alpha", c->alpha, 1, 1, 1, c->param_dtype, 0)) ||
        (status =
             fo_check_operand(op, "weight", c->weight, c->cols, 1, c->cols, c->param_dtype, 0)) ||
        (status = fo_check_operand(op, "bias", c->bias, c->cols, 1, c->cols, c->param_dtype, 1)))
        return status;
    return FO_OK;
}

#define ARGS_FIRST FO_ARGS_END(fo_dyt_args, param_dtype)

int fo_dyt_forward(const fo_dyt_args *args) {
    static const char op[] = "fo_dyt_forward";
    fo_dyt_args c;
    int status;
    if ((status = fo_read_args(op, "fo_dyt_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = check_inputs(op, &c)) ||
        (status = fo_check_operand(op, "y", c.y, c.cols, c.rows, c.cols, c.dtype, 0)))
        return status;
    if (c.rows == 0 || c.cols == 0) return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_dyt_forward(c.device_index, c.stream, &c);
    fo_cpu()->dyt_forward(&c);
    return FO_OK;
}

/* Every check of the backward but the workspace's: the call and its
 * workspace query both make them. */
static int check_backward(const char *op, const fo_dyt_args *c) {
    int status;
    if ((status = check_inputs(op, c)) ||
        (status =
             fo_check_operand(op, "dy", c->dy, c->dy_row_stride, c->rows, c->cols, c->dtype, 0)) ||
        (status = fo_check_operand(op, "dx", c->dx, c->cols, c->rows, c->cols, c->dtype, 1)) ||
        (status = fo_check_operand(op, "dalpha", c->dalpha, 1, 1, 1, c->param_dtype, 1)) ||
        (status =
             fo_check_operand(op, "dweight", c->dweight, c->cols, 1, c->cols, c->param_dtype, 1)) ||
        (status = fo_check_operand(op, "dbias", c->dbias, c->cols, 1, c->cols, c->param_dtype, 1)))
        return status;
    return FO_OK;
}

/* The workspace a checked call needs: the gradients' partial sums (on the
 * CPU, dalpha's: a double per column chunk). */
static int64_t backward_workspace(const fo_dyt_args *c) {
    if (!(c->dalpha || c->dweight || c->dbias)) return 0;
    if (c->device_type == FO_DEVICE_CUDA)
        return fo_cuda_dyt_backward_workspace_bytes(c->device_index, c);
    return c->dalpha ? fo_cpu_chunks(c->cols) * (int64_t)sizeof(double) : 0;
}

int fo_dyt_backward_workspace_bytes(const fo_dyt_args *args, int64_t *bytes) {
    static const char op[] = "fo_dyt_backward_workspace_bytes";
    fo_dyt_args c;
    int status;
    if ((status = fo_read_args(op, "fo_dyt_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = fo_check_bytes_pointer(op, bytes)) || (status = check_backward(op, &c)))
        return status;
    *bytes = backward_workspace(&c);
    return FO_OK;
}

int fo_dyt_backward(const fo_dyt_args *args) {
    static const char op[] = "fo_dyt_backward";
    fo_dyt_args c;
    int status;
    if ((status = fo_read_args(op, "fo_dyt_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = check_backward(op, &c)) ||
        (status = fo_check_workspace(op, c.workspace, c.workspace_bytes, backward_workspace(&c))))
        return status;
    /* without elements the parameter gradients are still written (zeros) */
    if (!c.dalpha && !c.dweight && !c.dbias && (!c.dx || c.rows == 0 || c.cols == 0)) return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_dyt_backward(c.device_index, c.stream, &c);
    fo_cpu()->dyt_backward(&c);
    return FO_OK;
}
