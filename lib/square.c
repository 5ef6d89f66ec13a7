/* square.c: y = x * x and its gradient dx = 2 * x * dy: argument checks,
 * CPU/CUDA dispatch and the CPU implementation. */
#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

static int run(int device_type, int device_index, uintptr_t stream, const fo_square_args *a) {
    if (a->rows == 0 || a->cols == 0) return FO_OK;
    if (device_type == FO_DEVICE_CUDA) return fo_cuda_square(device_index, stream, a);
    fo_cpu()->square(a);
    return FO_OK;
}

int fo_square_forward(int device_type, int device_index, uintptr_t stream, uintptr_t y, uintptr_t x,
                      int64_t x_row_stride, int64_t rows, int64_t cols, int dtype) {
    static const char op[] = "fo_square_forward";
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_operand(op, "y", y, cols, rows, cols, dtype, 0)) ||
        (status = fo_check_operand(op, "x", x, x_row_stride, rows, cols, dtype, 0)))
        return status;
    fo_square_args a = {(void *)y, (const void *)x, x_row_stride, 0, 0, rows, cols, dtype};
    return run(device_type, device_index, stream, &a);
}

int fo_square_backward(int device_type, int device_index, uintptr_t stream, uintptr_t dx,
                       uintptr_t dy, int64_t dy_row_stride, uintptr_t x, int64_t x_row_stride,
                       int64_t rows, int64_t cols, int dtype) {
    static const char op[] = "fo_square_backward";
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_operand(op, "dx", dx, cols, rows, cols, dtype, 0)) ||
        (status = fo_check_operand(op, "dy", dy, dy_row_stride, rows, cols, dtype, 0)) ||
        (status = fo_check_operand(op, "x", x, x_row_stride, rows, cols, dtype, 0)))
        return status;
    fo_square_args a = {
        (void *)dx, (const void *)x, x_row_stride, (const void *)dy, dy_row_stride, rows, cols,
        dtype};
    return run(device_type, device_index, stream, &a);
}
