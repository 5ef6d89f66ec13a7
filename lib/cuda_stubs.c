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

#define FO_CUDA_WORKSPACE_STUB(name, type)                                      \
    int64_t fo_cuda_##name##_workspace_bytes(int device_index, const type *a) { \
        (void)device_index, (void)a;                                            \
        return 0;                                                               \
    }
FO_CUDA_WORKSPACES(FO_CUDA_WORKSPACE_STUB)

int fo_cuda_runtime_version_built(void) { return 0; }
