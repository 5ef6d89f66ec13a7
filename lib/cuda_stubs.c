/* cuda_stubs.c: the lib/cuda entry points of a CPU-only build. The public
 * functions refuse CUDA calls before reaching these (fo_check_device); they
 * exist so that a CPU-only library links, and fail safely if ever reached. */
#include "internal.h"

static int not_built(void) {
    return fo_fail(FO_ERR_CUDA_NOT_BUILT, "this library was built without CUDA");
}

#define FO_CUDA_STUB(name, type)                                            \
    int fo_cuda_##name(int device_index, uintptr_t stream, const type *a) { \
        (void)device_index, (void)stream, (void)a;                          \
        return not_built();                                                 \
    }
FO_CUDA_LAUNCHERS(FO_CUDA_STUB)

int64_t fo_cuda_bias_scale_relu_workspace_bytes(int64_t rows, int64_t cols, int dtype) {
    (void)rows, (void)cols, (void)dtype;
    return 0;
}

int64_t fo_cuda_reduce_sum_workspace_bytes(int64_t numel, int dtype) {
    (void)numel, (void)dtype;
    return 0;
}

int64_t fo_cuda_norm_workspace_bytes(const fo_norm_backward_params *a, int device_index) {
    (void)a, (void)device_index;
    return 0;
}

int fo_cuda_runtime_version_built(void) { return 0; }
