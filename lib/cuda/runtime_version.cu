// runtime_version.cu: the CUDA runtime version this library was built with.
#include "common.cuh"

extern "C" int fo_cuda_runtime_version_built(void) { return CUDART_VERSION; }
