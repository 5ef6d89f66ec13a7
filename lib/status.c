/* status.c: versions, status strings and the thread-local last error. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#ifndef FO_CUDA_ARCHS
#define FO_CUDA_ARCHS ""
#endif

/* Per thread, so an error in one thread never shows up as another's. */
static _Thread_local char last_error[1024];

int fo_fail(int status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}

int fo_version(void) {
    return FO_VERSION_MAJOR * 10000 + FO_VERSION_MINOR * 100 + FO_VERSION_PATCH;
}

int fo_abi_version(void) { return FO_ABI_VERSION; }

const char *fo_last_error(void) { return last_error; }

const char *fo_status_string(int status) {
    switch (status) {
        case FO_OK:
            return "ok";
        case FO_ERR_INVALID_ARGUMENT:
            return "invalid argument";
        case FO_ERR_UNSUPPORTED_DTYPE:
            return "unsupported dtype";
        case FO_ERR_UNSUPPORTED_DEVICE:
            return "unsupported device";
        case FO_ERR_CUDA_NOT_BUILT:
            return "library built without CUDA";
        case FO_ERR_CUDA_RUNTIME:
            return "CUDA runtime error";
        case FO_ERR_WORKSPACE_TOO_SMALL:
            return "workspace too small";
        default:
            return "unknown status";
    }
}

int fo_cuda_built(void) {
#ifdef FO_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *fo_cuda_archs(void) { return FO_CUDA_ARCHS; }

int fo_cuda_runtime_version(void) {
#ifdef FO_WITH_CUDA
    return fo_cuda_runtime_version_built();
#else
    return 0;
#endif
}
