/* reduce_sum.c: the sum of all elements: argument checks, CPU/CUDA dispatch
 * and the CPU implementation. The CPU sums in double in eight interleaved
 * lanes (cpu_lanes.h), at least as precise as the fp32 accumulation the GPU
 * uses for float types, in a fixed order (the same on any number of
 * threads). */
#include <inttypes.h>
#include <stdlib.h>

#include "cpu_convert.h"
#include "cpu_lanes.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

static int check_numel(const char *op, int64_t numel) {
    if (numel < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: numel=%" PRId64 " must be >= 0", op, numel);
    if (numel > INT64_MAX / 16)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: numel=%" PRId64 " overflows 64-bit byte offsets", op, numel);
    return FO_OK;
}

int fo_reduce_sum_workspace_bytes(int device_type, int64_t numel, int dtype, int64_t *bytes) {
    static const char op[] = "fo_reduce_sum_workspace_bytes";
    int status;
    if (!bytes) return fo_fail(FO_ERR_INVALID_ARGUMENT, "%s: bytes is a null pointer", op);
    if ((status = fo_check_device(op, device_type, 0)) || (status = check_numel(op, numel)) ||
        (status = fo_check_dtype(op, "dtype", dtype)))
        return status;
    *bytes = device_type == FO_DEVICE_CUDA ? fo_cuda_reduce_sum_workspace_bytes(numel, dtype) : 0;
    return FO_OK;
}

int fo_reduce_sum(int device_type, int device_index, uintptr_t stream, uintptr_t out,
                  uintptr_t workspace, int64_t workspace_bytes, uintptr_t x, int64_t numel,
                  int dtype) {
    static const char op[] = "fo_reduce_sum";
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = check_numel(op, numel)) || (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_operand(op, "out", out, 1, 1, 1, dtype, 0)) ||
        (status = fo_check_operand(op, "x", x, numel, 1, numel, dtype, 0)))
        return status;
    if ((status = fo_check_workspace(
             op, workspace, workspace_bytes,
             device_type == FO_DEVICE_CUDA ? fo_cuda_reduce_sum_workspace_bytes(numel, dtype) : 0)))
        return status;
    fo_reduce_sum_args a = {(void *)out, (void *)workspace, (const void *)x, numel, dtype};
    if (device_type == FO_DEVICE_CUDA) return fo_cuda_reduce_sum(device_index, stream, &a);
    fo_cpu()->reduce_sum(&a);
    return FO_OK;
}
