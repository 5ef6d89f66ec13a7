/* clamped_swiglu.c: gpt-oss's clamped SwiGLU and its gradients: argument
 * checks and CPU/CUDA dispatch (the CPU kernels: cpu/clamped_swiglu.c). */
#include <inttypes.h>
#include <math.h>

#include "cpu/cpu_kernels.h"
#include "internal.h"

/* Checks shared by both passes: device, sizes, dtype, layout, alpha, limit
 * and gate_up. */
static int check_inputs(const char *op, const fo_clamped_swiglu_args *c) {
    int status;
    if ((status = fo_check_device(op, c->device_type, c->device_index)) ||
        (status = fo_check_shape(op, c->rows, c->cols)) ||
        (status = fo_check_dtype(op, "dtype", c->dtype)))
        return status;
    if (c->cols > INT64_MAX / 2)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: cols=%" PRId64 " overflows 2 * cols", op,
                       c->cols);
    if (c->layout != FO_GLU_HALVES && c->layout != FO_GLU_INTERLEAVED)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: layout=%d is neither FO_GLU_HALVES (0) nor FO_GLU_INTERLEAVED (1)", op,
                       (int)c->layout);
    if (!isfinite(c->alpha))
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: alpha=%g is not finite", op, c->alpha);
    if (!(c->limit > 0))
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: limit=%g is not positive", op, c->limit);
    return fo_check_operand(op, "gate_up", c->gate_up, c->gate_up_row_stride, c->rows, 2 * c->cols,
                            c->dtype, 0);
}

static int run(const fo_clamped_swiglu_args *c) {
    if (c->rows == 0 || c->cols == 0) return FO_OK;
    if (c->device_type == FO_DEVICE_CUDA)
        return fo_cuda_clamped_swiglu(c->device_index, c->stream, c);
    fo_cpu()->clamped_swiglu(c);
    return FO_OK;
}

#define ARGS_FIRST FO_ARGS_END(fo_clamped_swiglu_args, grad_at_limit)

int fo_clamped_swiglu_forward(const fo_clamped_swiglu_args *args) {
    static const char op[] = "fo_clamped_swiglu_forward";
    fo_clamped_swiglu_args c;
    int status;
    if ((status = fo_read_args(op, "fo_clamped_swiglu_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = check_inputs(op, &c)) ||
        (status = fo_check_operand(op, "y", c.y, c.cols, c.rows, c.cols, c.dtype, 0)))
        return status;
    c.dy = c.dgate_up = 0;
    return run(&c);
}

int fo_clamped_swiglu_backward(const fo_clamped_swiglu_args *args) {
    static const char op[] = "fo_clamped_swiglu_backward";
    fo_clamped_swiglu_args c;
    int status;
    if ((status = fo_read_args(op, "fo_clamped_swiglu_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = check_inputs(op, &c)) ||
        (status = fo_check_operand(op, "dy", c.dy, c.dy_row_stride, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "dgate_up", c.dgate_up, 2 * c.cols, c.rows, 2 * c.cols,
                                   c.dtype, 0)))
        return status;
    c.y = 0;
    return run(&c);
}
