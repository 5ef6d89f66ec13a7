/* cuda_stubs.c: the lib/cuda entry points of a CPU-only build. The public
 * functions refuse CUDA calls before reaching these (fo_check_device); they
 * exist so that a CPU-only library links, and fail safely if ever reached. */
#include "internal.h"

static int not_built(void) {
    return fo_fail(FO_ERR_CUDA_NOT_BUILT, "this library was built without CUDA");
}

int fo_cuda_bias_scale_relu_forward(int device_index, uintptr_t stream,
                                    const fo_bias_scale_relu_forward_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int fo_cuda_bias_scale_relu_backward(int device_index, uintptr_t stream,
                                     const fo_bias_scale_relu_backward_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int64_t fo_cuda_bias_scale_relu_workspace_bytes(int64_t rows, int64_t cols, int dtype) {
    (void)rows, (void)cols, (void)dtype;
    return 0;
}

int fo_cuda_square(int device_index, uintptr_t stream, const fo_square_args *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int fo_cuda_reduce_sum(int device_index, uintptr_t stream, const fo_reduce_sum_args *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int64_t fo_cuda_reduce_sum_workspace_bytes(int64_t numel, int dtype) {
    (void)numel, (void)dtype;
    return 0;
}

int fo_cuda_norm_forward(int device_index, uintptr_t stream, const fo_norm_forward_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int fo_cuda_norm_backward(int device_index, uintptr_t stream, const fo_norm_backward_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int64_t fo_cuda_norm_workspace_bytes(const fo_norm_backward_params *a, int device_index) {
    (void)a, (void)device_index;
    return 0;
}

int fo_cuda_swiglu(int device_index, uintptr_t stream, const fo_swiglu_args *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int fo_cuda_runtime_version_built(void) { return 0; }

int fo_cuda_cross_entropy(int device_index, uintptr_t stream, const fo_cross_entropy_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int fo_cuda_scale_rows(int device_index, uintptr_t stream, const fo_scale_rows_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int fo_cuda_geglu(int device_index, uintptr_t stream, const fo_geglu_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}

int fo_cuda_clamped_swiglu(const fo_clamped_swiglu_args *a) {
    (void)a;
    return not_built();
}

int fo_cuda_rope(int device_index, uintptr_t stream, const fo_rope_params *a) {
    (void)device_index, (void)stream, (void)a;
    return not_built();
}
