// geglu_backward.cu: the gradients of y = gelu(gate) * up (geglu.cuh).
#include "geglu.cuh"

using namespace fo;

extern "C" int fo_cuda_geglu_backward(int device_index, uintptr_t stream,
                                      const fo_geglu_params *a) {
    return launch_on("fo_geglu_backward", device_index,
                     [&] { launch_geglu<true>(*a, cudaStream_t(stream)); });
}
