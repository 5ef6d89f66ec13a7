/* checks.c: argument validation shared by every entry point. The messages name
 * the op, the argument and the value, since Python shows them verbatim. */
#include <inttypes.h>
#include <string.h>

#include "internal.h"

int64_t fo_dtype_size(int dtype) {
    switch (dtype) {
        case FO_DTYPE_F32:
            return 4;
        case FO_DTYPE_F16:
            return 2;
        case FO_DTYPE_BF16:
            return 2;
        case FO_DTYPE_F64:
            return 8;
        default:
            return 0;
    }
}

const char *fo_dtype_name(int dtype) {
    switch (dtype) {
        case FO_DTYPE_F32:
            return "float32";
        case FO_DTYPE_F16:
            return "float16";
        case FO_DTYPE_BF16:
            return "bfloat16";
        case FO_DTYPE_F64:
            return "float64";
        default:
            return "unknown";
    }
}

int fo_check_device(const char *op, int device_type, int device_index) {
    if (device_type == FO_DEVICE_CPU) return FO_OK;
    if (device_type != FO_DEVICE_CUDA)
        return fo_fail(FO_ERR_UNSUPPORTED_DEVICE,
                       "%s: device_type=%d is neither CPU (0) nor CUDA (1)", op, device_type);
#ifndef FO_WITH_CUDA
    (void)device_index;
    return fo_fail(FO_ERR_CUDA_NOT_BUILT,
                   "%s: this library was built without CUDA (rebuild with "
                   "-Dcuda=enabled and nvcc on PATH)",
                   op);
#else
    if (device_index < 0)
        return fo_fail(FO_ERR_UNSUPPORTED_DEVICE, "%s: device_index=%d is negative", op,
                       device_index);
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

int fo_check_companion_dtype(const char *op, const char *name, int value, int dtype) {
    int status = fo_check_dtype(op, name, value);
    if (status) return status;
    int half = dtype == FO_DTYPE_F16 || dtype == FO_DTYPE_BF16;
    if (value != dtype && !(half && value == FO_DTYPE_F32))
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: %s %s with dtype %s; it must be %s, or float32 "
                       "when dtype is float16/bfloat16",
                       op, name, fo_dtype_name(value), fo_dtype_name(dtype), fo_dtype_name(dtype));
    return FO_OK;
}

int fo_check_shape(const char *op, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: rows=%" PRId64 " and cols=%" PRId64 " must be >= 0", op, rows, cols);
    if (cols > INT64_MAX / 16 || (cols > 0 && rows > INT64_MAX / 16 / cols))
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: rows=%" PRId64 " x cols=%" PRId64 " overflows 64-bit byte offsets", op,
                       rows, cols);
    return FO_OK;
}

int fo_check_operand(const char *op, const char *name, uintptr_t address, int64_t row_stride,
                     int64_t rows, int64_t cols, int dtype, int optional) {
    int64_t size = fo_dtype_size(dtype);
    if (rows == 0 || cols == 0 || (optional && address == 0)) return FO_OK;
    if (address == 0) return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: %s is a null address", op, name);
    if (size > 0 && address % (uintptr_t)size != 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: %s=0x%" PRIxPTR " is not aligned to its element size %" PRId64, op,
                       name, address, size);
    /* Only inputs take a stride, so overlapping rows (a stride under cols,
     * even 0 for a gradient expanded over rows) are fine to read. */
    if (rows > 1 && row_stride < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: %s row stride %" PRId64 " is negative", op,
                       name, row_stride);
    if (rows > 1 && row_stride > INT64_MAX / 16 / rows)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: %s row stride %" PRId64 " x rows=%" PRId64
                       " overflows 64-bit byte offsets",
                       op, name, row_stride, rows);
    return FO_OK;
}

int fo_check_workspace(const char *op, uintptr_t workspace, int64_t given, int64_t needed) {
    if (given < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: workspace_bytes=%" PRId64 " is negative", op,
                       given);
    if (given < needed)
        return fo_fail(FO_ERR_WORKSPACE_TOO_SMALL,
                       "%s: workspace_bytes=%" PRId64 " but %" PRId64 " are needed", op, given,
                       needed);
    if (needed > 0 && workspace == 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: workspace is a null address but %" PRId64 " bytes are needed", op,
                       needed);
    return FO_OK;
}

int fo_read_args(const char *op, const char *type, void *local, size_t local_size,
                 size_t first_size, const void *args) {
    int64_t struct_size;
    if (!args)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: args is a null pointer (want a pointer to a %s)", op, type);
    /* the first field, read before anything else is known to be there */
    memcpy(&struct_size, args, sizeof struct_size);
    if (struct_size < (int64_t)first_size || struct_size > (int64_t)local_size)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: struct_size=%" PRId64
                       " is outside [%zu, %zu], "
                       "the sizes of %s this library reads (set it to "
                       "sizeof(%s))",
                       op, struct_size, first_size, local_size, type, type);
    memcpy(local, args, (size_t)struct_size);
    memset((unsigned char *)local + struct_size, 0, local_size - (size_t)struct_size);
    return FO_OK;
}

int fo_check_reserved(const char *op, int32_t reserved) {
    if (reserved != 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: reserved=%d must be 0", op, reserved);
    return FO_OK;
}

int fo_check_bytes_pointer(const char *op, const int64_t *bytes) {
    if (!bytes) return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: bytes is a null pointer", op);
    return FO_OK;
}
