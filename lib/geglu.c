/* geglu.c: y = gelu(gate) * up and its gradients: argument checks,
 * CPU/CUDA dispatch and the CPU implementation. */
#include <math.h>

#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

/* Checks shared by both passes: device, sizes, dtype, the approximation
 * and the inputs. */
static int check_inputs(const char *op, int device_type, int device_index, uintptr_t gate,
                        int64_t gate_row_stride, uintptr_t up, int64_t up_row_stride, int64_t rows,
                        int64_t cols, int dtype, int approximate) {
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) || (status = fo_check_dtype(op, "dtype", dtype)))
        return status;
    if (approximate != FO_GELU_NONE && approximate != FO_GELU_TANH)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: approximate=%d is neither FO_GELU_NONE (0) nor FO_GELU_TANH (1)", op,
                       approximate);
    if ((status = fo_check_operand(op, "gate", gate, gate_row_stride, rows, cols, dtype, 0)) ||
        (status = fo_check_operand(op, "up", up, up_row_stride, rows, cols, dtype, 0)))
        return status;
    return FO_OK;
}

static int run(int device_type, int device_index, uintptr_t stream, const fo_geglu_params *a) {
    if ((a->rows == 0 || a->cols == 0) && !a->fp8) return FO_OK; /* FP8 writes its scales */
    if (device_type == FO_DEVICE_CUDA) return fo_cuda_geglu(device_index, stream, a);
    fo_cpu()->geglu(a);
    return FO_OK;
}

/* The sizes of the argument structs' first versions. */
#define FORWARD_ARGS_FIRST FO_ARGS_END(fo_geglu_forward_args, approximate)
#define BACKWARD_ARGS_FIRST FO_ARGS_END(fo_geglu_backward_args, approximate)

int fo_geglu_forward(const fo_geglu_forward_args *args) {
    static const char op[] = "fo_geglu_forward";
    fo_geglu_forward_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_geglu_forward_args", &c, sizeof c, FORWARD_ARGS_FIRST, args)) ||
        (status = check_inputs(op, c.device_type, c.device_index, c.gate, c.gate_row_stride, c.up,
                               c.up_row_stride, c.rows, c.cols, c.dtype, c.approximate)) ||
        (status = fo_check_output_or_fp8(op, c.y, &c.fp8, c.rows, c.cols, c.dtype)))
        return status;
    fo_geglu_params a = {(void *)c.y,
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
                         c.approximate,
                         fo_fp8_out_given(&c.fp8) ? &c.fp8 : NULL};
    return run(c.device_type, c.device_index, c.stream, &a);
}

int fo_geglu_backward(const fo_geglu_backward_args *args) {
    static const char op[] = "fo_geglu_backward";
    fo_geglu_backward_args c;
    int status;
    if ((status =
             fo_read_args(op, "fo_geglu_backward_args", &c, sizeof c, BACKWARD_ARGS_FIRST, args)) ||
        (status = check_inputs(op, c.device_type, c.device_index, c.gate, c.gate_row_stride, c.up,
                               c.up_row_stride, c.rows, c.cols, c.dtype, c.approximate)) ||
        (status = fo_check_operand(op, "dgate", c.dgate, c.cols, c.rows, c.cols, c.dtype, 1)) ||
        (status = fo_check_operand(op, "dup", c.dup, c.cols, c.rows, c.cols, c.dtype, 1)) ||
        (status = fo_check_operand(op, "dy", c.dy, c.dy_row_stride, c.rows, c.cols, c.dtype, 0)))
        return status;
    if (!c.dgate && !c.dup) return FO_OK;
    fo_geglu_params a = {(void *)c.dgate,
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
                         c.approximate,
                         NULL};
    return run(c.device_type, c.device_index, c.stream, &a);
}
