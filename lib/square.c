/* square.c: y = x * x and its gradient dx = 2 * x * dy: argument checks,
 * CPU/CUDA dispatch and the CPU implementation. */
#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

static int run(int device_type, int device_index, uintptr_t stream, const fo_square_params *a) {
    if (a->rows == 0 || a->cols == 0) return FO_OK;
    if (device_type == FO_DEVICE_CUDA) return fo_cuda_square(device_index, stream, a);
    fo_cpu()->square(a);
    return FO_OK;
}

/* The sizes of the argument structs' first versions. */
#define FORWARD_ARGS_FIRST FO_ARGS_END(fo_square_forward_args, reserved)
#define BACKWARD_ARGS_FIRST FO_ARGS_END(fo_square_backward_args, reserved)

int fo_square_forward(const fo_square_forward_args *args) {
    static const char op[] = "fo_square_forward";
    fo_square_forward_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_square_forward_args", &c, sizeof c, FORWARD_ARGS_FIRST, args)) ||
        (status = fo_check_device(op, c.device_type, c.device_index)) ||
        (status = fo_check_shape(op, c.rows, c.cols)) ||
        (status = fo_check_dtype(op, "dtype", c.dtype)) ||
        (status = fo_check_operand(op, "y", c.y, c.cols, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "x", c.x, c.x_row_stride, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_reserved(op, c.reserved)))
        return status;
    fo_square_params a = {(void *)c.y, (const void *)c.x, c.x_row_stride, 0, 0, c.rows, c.cols,
                          c.dtype};
    return run(c.device_type, c.device_index, c.stream, &a);
}

int fo_square_backward(const fo_square_backward_args *args) {
    static const char op[] = "fo_square_backward";
    fo_square_backward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_square_backward_args", &c, sizeof c, BACKWARD_ARGS_FIRST,
                               args)) ||
        (status = fo_check_device(op, c.device_type, c.device_index)) ||
        (status = fo_check_shape(op, c.rows, c.cols)) ||
        (status = fo_check_dtype(op, "dtype", c.dtype)) ||
        (status = fo_check_operand(op, "dx", c.dx, c.cols, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "dy", c.dy, c.dy_row_stride, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_operand(op, "x", c.x, c.x_row_stride, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_reserved(op, c.reserved)))
        return status;
    fo_square_params a = {(void *)c.dx,    (const void *)c.x,
                          c.x_row_stride,  (const void *)c.dy,
                          c.dy_row_stride, c.rows,
                          c.cols,          c.dtype};
    return run(c.device_type, c.device_index, c.stream, &a);
}
