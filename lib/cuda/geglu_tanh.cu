// geglu_tanh.cu: GeGLU in the tanh form of GELU (geglu.cuh).
#include "geglu.cuh"

namespace fo {
void launch_geglu_tanh(const fo_geglu_params &a, cudaStream_t stream) {
    launch_geglu_form<true>(a, stream);
}
}  // namespace fo
