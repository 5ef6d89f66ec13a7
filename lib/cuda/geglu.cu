// geglu.cu: GeGLU's entry point, and its exact GELU form (geglu.cuh).
#include "geglu.cuh"

using namespace fo;

extern "C" int fo_cuda_geglu(int device_index, uintptr_t stream, const fo_geglu_params *a) {
    return launch_on(a->dy ? "fo_geglu_backward" : "fo_geglu_forward", device_index, [&] {
        if (a->approximate == FO_GELU_TANH)
            launch_geglu_tanh(*a, cudaStream_t(stream));
        else
            launch_geglu_form<false>(*a, cudaStream_t(stream));
    });
}
