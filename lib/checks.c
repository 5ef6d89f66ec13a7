/* checks.c: argument validation shared by every entry point. The messages name
 * the op, the argument and the value, since Python shows them verbatim. */
#include <inttypes.h>

#include "internal.h"

int64_t fo_dtype_size(int dtype) {
    switch (dtype) {
    case FO_DTYPE_F32: return 4;
    case FO_DTYPE_F16: return 2;
    case FO_DTYPE_BF16: return 2;
    case FO_DTYPE_F64: return 8;
    default: return 0;
    }
}

const char *fo_dtype_name(int dtype) {
    switch (dtype) {
    case FO_DTYPE_F32: return "float32";
    case FO_DTYPE_F16: return "float16";
    case FO_DTYPE_BF16: return "bfloat16";
    case FO_DTYPE_F64: return "float64";
    default: return "unknown";
    }
}

int fo_check_device(const char *op, int device_type, int device_index) {
    if (device_type == FO_DEVICE_CPU)
        return FO_OK;
    if (device_type != FO_DEVICE_CUDA)
        return fo_fail(FO_ERR_UNSUPPORTED_DEVICE,
                       "%s: device_type=%d is neither CPU (0) nor CUDA (1)", op,
                       device_type);
#ifndef FO_WITH_CUDA
    (void)device_index;
    return fo_fail(FO_ERR_CUDA_NOT_BUILT,
                   "%s: this library was built without CUDA (rebuild with "
                   "-Dcuda=enabled and nvcc on PATH)",
                   op);
#else
    if (device_index < 0)
        return fo_fail(FO_ERR_UNSUPPORTED_DEVICE,
                       "%s: device_index=%d is negative", op, device_index);
    return FO_OK;
#endif
}

int fo_check_dtype(const char *op, const char *name, int dtype) {
    if (fo_dtype_size(dtype) == 0)
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: %s=%d is not a dtype code (f32=0, f16=1, bf16=2, "
                       "f64=3)",
                       op, name, dtype);
    return FO_OK;
}

int fo_check_shape(const char *op, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: rows=%" PRId64 " and cols=%" PRId64
                       " must be >= 0",
                       op, rows, cols);
    if (cols > INT64_MAX / 16 || (cols > 0 && rows > INT64_MAX / 16 / cols))
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: rows=%" PRId64 " x cols=%" PRId64
                       " overflows 64-bit byte offsets",
                       op, rows, cols);
    return FO_OK;
}

int fo_check_operand(const char *op, const char *name, uintptr_t address,
                     int64_t row_stride, int64_t rows, int64_t cols, int dtype,
                     int optional) {
    int64_t size = fo_dtype_size(dtype);
    if (rows == 0 || cols == 0 || (optional && address == 0))
        return FO_OK;
    if (address == 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: %s is a null address", op,
                       name);
    if (size > 0 && address % (uintptr_t)size != 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: %s=0x%" PRIxPTR
                       " is not aligned to its element size %" PRId64,
                       op, name, address, size);
    /* Only inputs take a stride, so overlapping rows (a stride under cols,
     * even 0 for a gradient expanded over rows) are fine to read. */
    if (rows > 1 && row_stride < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: %s row stride %" PRId64 " is negative", op, name,
                       row_stride);
    if (rows > 1 && row_stride > INT64_MAX / 16 / rows)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: %s row stride %" PRId64 " x rows=%" PRId64
                       " overflows 64-bit byte offsets",
                       op, name, row_stride, rows);
    return FO_OK;
}

int fo_check_workspace(const char *op, uintptr_t workspace, int64_t given,
                       int64_t needed) {
    if (given < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: workspace_bytes=%" PRId64 " is negative", op, given);
    if (given < needed)
        return fo_fail(FO_ERR_WORKSPACE_TOO_SMALL,
                       "%s: workspace_bytes=%" PRId64 " but %" PRId64
                       " are needed",
                       op, given, needed);
    if (needed > 0 && workspace == 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: workspace is a null address but %" PRId64
                       " bytes are needed",
                       op, needed);
    return FO_OK;
}

int fo_workspace_query(const char *op, int device_type, int64_t rows,
                       int64_t cols, int dtype, int64_t *bytes,
                       int64_t (*cuda_bytes)(int64_t, int64_t, int)) {
    int status;
    if (!bytes)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: bytes is a null pointer",
                       op);
    if ((status = fo_check_device(op, device_type, 0)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)))
        return status;
    *bytes = device_type == FO_DEVICE_CUDA ? cuda_bytes(rows, cols, dtype) : 0;
    return FO_OK;
}
