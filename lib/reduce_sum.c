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

/* Checks shared by the call and its workspace query. */
static int check_args(const char *op, const fo_reduce_sum_args *c) {
    int status;
    if ((status = fo_check_device(op, c->device_type, c->device_index)) ||
        (status = check_numel(op, c->numel)) || (status = fo_check_dtype(op, "dtype", c->dtype)) ||
        (status = fo_check_operand(op, "out", c->out, 1, 1, 1, c->dtype, 0)) ||
        (status = fo_check_operand(op, "x", c->x, c->numel, 1, c->numel, c->dtype, 0)) ||
        (status = fo_check_reserved(op, c->reserved)))
        return status;
    return FO_OK;
}

/* The workspace a checked call needs: the CUDA blocks' partial sums. */
static int64_t workspace_needed(const fo_reduce_sum_args *c) {
    if (c->device_type != FO_DEVICE_CUDA) return 0;
    return fo_cuda_reduce_sum_workspace_bytes(c->device_index, c);
}

#define ARGS_FIRST FO_ARGS_END(fo_reduce_sum_args, reserved)

int fo_reduce_sum_workspace_bytes(const fo_reduce_sum_args *args, int64_t *bytes) {
    static const char op[] = "fo_reduce_sum_workspace_bytes";
    fo_reduce_sum_args c;
    int status;
    if ((status = fo_read_args(op, "fo_reduce_sum_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = fo_check_bytes_pointer(op, bytes)) || (status = check_args(op, &c)))
        return status;
    *bytes = workspace_needed(&c);
    return FO_OK;
}

int fo_reduce_sum(const fo_reduce_sum_args *args) {
    static const char op[] = "fo_reduce_sum";
    fo_reduce_sum_args c;
    int status;
    if ((status = fo_read_args(op, "fo_reduce_sum_args", &c, sizeof c, ARGS_FIRST, args)) ||
        (status = check_args(op, &c)) ||
        (status = fo_check_workspace(op, c.workspace, c.workspace_bytes, workspace_needed(&c))))
        return status;
    fo_reduce_sum_params a = {(void *)c.out, (void *)c.workspace, (const void *)c.x, c.numel,
                              c.dtype};
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_reduce_sum(c.device_index, c.stream, &a);
    fo_cpu()->reduce_sum(&a);
    return FO_OK;
}
