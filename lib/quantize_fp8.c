/* quantize_fp8.c: FP8 quantization with a dynamic scale (rowwise or
 * tensorwise, optionally with the transposed copy): argument checks and
 * CPU/CUDA dispatch (the CPU kernels: cpu/quantize_fp8.c). */
#include <inttypes.h>
#include <stdio.h>

#include "cpu/cpu_kernels.h"
#include "internal.h"

/* An FP8 operand has no dtype code of fo_dtype's; a code whose size is
 * unknown makes fo_check_operand skip the alignment check (1-byte
 * elements need none). */
#define FP8_OPERAND (-1)

static int check_fp8_out(const char *op, const char *prefix, const fo_fp8_out *out, int64_t rows,
                         int64_t cols) {
    char y[32], y_t[32], scale[32], amax[32];
    snprintf(y, sizeof y, "%s.y", prefix);
    snprintf(y_t, sizeof y_t, "%s.y_t", prefix);
    snprintf(scale, sizeof scale, "%s.scale", prefix);
    snprintf(amax, sizeof amax, "%s.amax", prefix);
    if (out->fp8_dtype != FO_FP8_E4M3 && out->fp8_dtype != FO_FP8_E5M2)
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: %s.fp8_dtype=%d is not an FP8 dtype code (e4m3=0, e5m2=1)", op, prefix,
                       out->fp8_dtype);
    if (out->recipe != FO_FP8_TENSORWISE && out->recipe != FO_FP8_ROWWISE)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: %s.recipe=%d is not a recipe code (tensorwise=0, rowwise=1)", op,
                       prefix, out->recipe);
    if (out->y_t && out->recipe != FO_FP8_TENSORWISE)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: %s (the transposed copy) needs %s.recipe=0 (tensorwise), got %d", op,
                       y_t, prefix, out->recipe);
    if (rows > INT64_MAX / 16)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: rows=%" PRId64 " overflows 64-bit byte offsets of the per-row scales",
                       op, rows);
    const int rowwise = out->recipe == FO_FP8_ROWWISE;
    const int64_t scales = rowwise ? rows : 1;
    int status;
    if ((status = fo_check_operand(op, y, out->y, cols, rows, cols, FP8_OPERAND, 1)) ||
        (status = fo_check_operand(op, y_t, out->y_t, rows, cols, rows, FP8_OPERAND, 1)) ||
        (status = fo_check_operand(op, scale, out->scale, scales, 1, scales, FO_DTYPE_F32, 0)) ||
        (status = fo_check_operand(op, amax, out->amax, scales, 1, scales, FO_DTYPE_F32, rowwise)))
        return status;
    return FO_OK;
}

int fo_check_output_or_fp8(const char *op, uintptr_t y, const fo_fp8_out *fp8, int64_t rows,
                           int64_t cols, int dtype) {
    if (!fo_fp8_out_given(fp8)) return fo_check_operand(op, "y", y, cols, rows, cols, dtype, 0);
    if (y)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: y=0x%" PRIxPTR
                       " is given beside the FP8 output (fp8), which replaces y: y must be 0",
                       op, y);
    return check_fp8_out(op, "fp8", fp8, rows, cols);
}

static int check_call(const char *op, const fo_quantize_fp8_args *c) {
    int status;
    if ((status = fo_check_device(op, c->device_type, c->device_index)) ||
        (status = fo_check_shape(op, c->rows, c->cols)) ||
        (status = fo_check_dtype(op, "dtype", c->dtype)) ||
        (status = fo_check_reserved(op, c->reserved)))
        return status;
    /* scale and amax (rowwise) and the CPU's workspace (tensorwise) hold a
     * float a row even where cols is 0, which fo_check_shape leaves rows
     * unbounded beside */
    if (c->rows > INT64_MAX / 16)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: rows=%" PRId64 " overflows 64-bit byte offsets of the per-row scales",
                       op, c->rows);
    if (c->fp8_dtype != FO_FP8_E4M3 && c->fp8_dtype != FO_FP8_E5M2)
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: fp8_dtype=%d is not an FP8 dtype code (e4m3=0, e5m2=1)", op,
                       c->fp8_dtype);
    if (c->recipe != FO_FP8_TENSORWISE && c->recipe != FO_FP8_ROWWISE)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: recipe=%d is not a recipe code (tensorwise=0, rowwise=1)", op,
                       c->recipe);
    if (c->y_t && c->recipe != FO_FP8_TENSORWISE)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: y_t (the transposed copy) needs recipe=0 (tensorwise), got recipe=%d",
                       op, c->recipe);
    if (!c->y && !c->y_t && c->rows > 0 && c->cols > 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: y and y_t are both null; give one or both",
                       op);
    const int64_t scales = c->recipe == FO_FP8_ROWWISE ? c->rows : 1;
    if ((status =
             fo_check_operand(op, "x", c->x, c->x_row_stride, c->rows, c->cols, c->dtype, 0)) ||
        (status = fo_check_operand(op, "y", c->y, c->cols, c->rows, c->cols, FP8_OPERAND, 1)) ||
        (status = fo_check_operand(op, "y_t", c->y_t, c->rows, c->cols, c->rows, FP8_OPERAND, 1)) ||
        (status = fo_check_operand(op, "scale", c->scale, scales, 1, scales, FO_DTYPE_F32, 0)) ||
        (status = fo_check_operand(op, "amax", c->amax, scales, 1, scales, FO_DTYPE_F32, 1)))
        return status;
    return FO_OK;
}

/* The workspace of a checked call: tensorwise keeps per-part maxima. */
static int64_t workspace_bytes(const fo_quantize_fp8_args *c) {
    if (c->recipe != FO_FP8_TENSORWISE) return 0;
    if (c->device_type == FO_DEVICE_CUDA)
        return fo_cuda_quantize_fp8_workspace_bytes(c->device_index, c);
    return (c->rows > 0 ? c->rows : 1) * (int64_t)sizeof(float);
}

#define ARGS_FIRST FO_ARGS_END(fo_quantize_fp8_args, reserved)

int fo_quantize_fp8_workspace_bytes(const fo_quantize_fp8_args *args, int64_t *bytes) {
    static const char op[] = "fo_quantize_fp8_workspace_bytes";
    fo_quantize_fp8_args c;
    int status;
    if ((status = fo_read_args(op, "fo_quantize_fp8_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = fo_check_bytes_pointer(op, bytes)) || (status = check_call(op, &c)))
        return status;
    *bytes = workspace_bytes(&c);
    return FO_OK;
}

int fo_quantize_fp8(const fo_quantize_fp8_args *args) {
    static const char op[] = "fo_quantize_fp8";
    fo_quantize_fp8_args c;
    int status;
    if ((status = fo_read_args(op, "fo_quantize_fp8_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = check_call(op, &c)) ||
        (status = fo_check_workspace(op, c.workspace, c.workspace_bytes, workspace_bytes(&c))))
        return status;
    if (c.workspace % sizeof(float) != 0) /* the CUDA kernels keep floats there */
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: workspace=0x%" PRIxPTR " is not aligned to 4 bytes", op, c.workspace);
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_quantize_fp8(c.device_index, c.stream, &c);
    fo_cpu()->quantize_fp8(&c);
    return FO_OK;
}
