/* swiglu.c: y = silu(gate) * up and its gradients: argument checks,
 * CPU/CUDA dispatch and the CPU implementation. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

/* Checks shared by both passes: device, sizes, dtype and the inputs. */
static int check_inputs(const char *op, int device_type, int device_index, uintptr_t gate,
                        int64_t gate_row_stride, uintptr_t up, int64_t up_row_stride, int64_t rows,
                        int64_t cols, int dtype) {
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_operand(op, "gate", gate, gate_row_stride, rows, cols, dtype, 0)) ||
        (status = fo_check_operand(op, "up", up, up_row_stride, rows, cols, dtype, 0)))
        return status;
    return FO_OK;
}

static int run(int device_type, int device_index, uintptr_t stream, const fo_swiglu_args *a) {
    if (a->rows == 0 || a->cols == 0) return FO_OK;
    if (device_type == FO_DEVICE_CUDA) return fo_cuda_swiglu(device_index, stream, a);
    fo_cpu()->swiglu(a);
    return FO_OK;
}

int fo_swiglu_forward(int device_type, int device_index, uintptr_t stream, uintptr_t y,
                      uintptr_t gate, int64_t gate_row_stride, uintptr_t up, int64_t up_row_stride,
                      int64_t rows, int64_t cols, int dtype) {
    static const char op[] = "fo_swiglu_forward";
    int status;
    if ((status = check_inputs(op, device_type, device_index, gate, gate_row_stride, up,
                               up_row_stride, rows, cols, dtype)) ||
        (status = fo_check_operand(op, "y", y, cols, rows, cols, dtype, 0)))
        return status;
    fo_swiglu_args a = {
        (void *)y,     0,    0,    0,    (const void *)gate, gate_row_stride, (const void *)up,
        up_row_stride, rows, cols, dtype};
    return run(device_type, device_index, stream, &a);
}

int fo_swiglu_backward(int device_type, int device_index, uintptr_t stream, uintptr_t dgate,
                       uintptr_t dup, uintptr_t dy, int64_t dy_row_stride, uintptr_t gate,
                       int64_t gate_row_stride, uintptr_t up, int64_t up_row_stride, int64_t rows,
                       int64_t cols, int dtype) {
    static const char op[] = "fo_swiglu_backward";
    int status;
    if ((status = check_inputs(op, device_type, device_index, gate, gate_row_stride, up,
                               up_row_stride, rows, cols, dtype)) ||
        (status = fo_check_operand(op, "dgate", dgate, cols, rows, cols, dtype, 1)) ||
        (status = fo_check_operand(op, "dup", dup, cols, rows, cols, dtype, 1)) ||
        (status = fo_check_operand(op, "dy", dy, dy_row_stride, rows, cols, dtype, 0)))
        return status;
    if (!dgate && !dup) return FO_OK;
    fo_swiglu_args a = {(void *)dgate,
                        (void *)dup,
                        (const void *)dy,
                        dy_row_stride,
                        (const void *)gate,
                        gate_row_stride,
                        (const void *)up,
                        up_row_stride,
                        rows,
                        cols,
                        dtype};
    return run(device_type, device_index, stream, &a);
}
