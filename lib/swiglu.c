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

static int run(int device_type, int device_index, uintptr_t stream, const fo_swiglu_params *a) {
    if ((a->rows == 0 || a->cols == 0) && !a->fp8) return FO_OK; /* FP8 writes its scales */
    if (device_type == FO_DEVICE_CUDA) return fo_cuda_swiglu(device_index, stream, a);
    fo_cpu()->swiglu(a);
    return FO_OK;
}

/* The sizes of the argument structs' first versions. */
#define FORWARD_ARGS_FIRST FO_ARGS_END(fo_swiglu_forward_args, reserved)
#define BACKWARD_ARGS_FIRST FO_ARGS_END(fo_swiglu_backward_args, reserved)

int fo_swiglu_forward(const fo_swiglu_forward_args *args) {
    static const char op[] = "fo_swiglu_forward";
    fo_swiglu_forward_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_swiglu_forward_args", &c, sizeof c, FORWARD_ARGS_FIRST, args)) ||
        (status = check_inputs(op, c.device_type, c.device_index, c.gate, c.gate_row_stride, c.up,
                               c.up_row_stride, c.rows, c.cols, c.dtype)) ||
        (status = fo_check_output_or_fp8(op, c.y, &c.fp8, c.rows, c.cols, c.dtype)) ||
        (status = fo_check_reserved(op, c.reserved)))
        return status;
    fo_swiglu_params a = {(void *)c.y,
                          0,
                          0,
                          0,
                          (const void *)c.gate,
                          c.gate_row_stride,
                          (const void *)c.up,
                          c.up_row_stride,
                          c.rows,
                          c.cols,
                          c.dtype,
                          fo_fp8_out_given(&c.fp8) ? &c.fp8 : NULL};
    return run(c.device_type, c.device_index, c.stream, &a);
}

int fo_swiglu_backward(const fo_swiglu_backward_args *args) {
    static const char op[] = "fo_swiglu_backward";
    fo_swiglu_backward_args c;
    int status;
    if ((status = fo_read_args(op, "fo_swiglu_backward_args", &c, sizeof c, BACKWARD_ARGS_FIRST,
                               args)) ||
        (status = check_inputs(op, c.device_type, c.device_index, c.gate, c.gate_row_stride, c.up,
                               c.up_row_stride, c.rows, c.cols, c.dtype)) ||
        (status = fo_check_operand(op, "dgate", c.dgate, c.cols, c.rows, c.cols, c.dtype, 1)) ||
        (status = fo_check_operand(op, "dup", c.dup, c.cols, c.rows, c.cols, c.dtype, 1)) ||
        (status = fo_check_operand(op, "dy", c.dy, c.dy_row_stride, c.rows, c.cols, c.dtype, 0)) ||
        (status = fo_check_reserved(op, c.reserved)))
        return status;
    if (!c.dgate && !c.dup) return FO_OK;
    fo_swiglu_params a = {(void *)c.dgate,
                          (void *)c.dup,
                          (const void *)c.dy,
                          c.dy_row_stride,
                          (const void *)c.gate,
                          c.gate_row_stride,
                          (const void *)c.up,
                          c.up_row_stride,
                          c.rows,
                          c.cols,
                          c.dtype,
                          NULL};
    return run(c.device_type, c.device_index, c.stream, &a);
}
