/* internal.h: what the C sources and the CUDA launchers share; not installed. */
#ifndef FO_INTERNAL_H
#define FO_INTERNAL_H

#include <stddef.h>

#include "fused_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record a thread-local error message (printf-style) and return `status`. */
int fo_fail(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Bytes per element of a dtype code, or 0 for an unknown code. */
int64_t fo_dtype_size(int dtype);
const char *fo_dtype_name(int dtype);

/* Argument checks shared by every entry point. Each returns FO_OK, or records
 * a message naming `op` and the offending value and returns the status. */
int fo_check_device(const char *op, int device_type, int device_index);
int fo_check_dtype(const char *op, const char *name, int dtype);
/* A companion's dtype code (weight, bias, residual): `dtype`, or float32
 * beside a half `dtype`. */
int fo_check_companion_dtype(const char *op, const char *name, int value, int dtype);
int fo_check_shape(const char *op, int64_t rows, int64_t cols);
int fo_check_operand(const char *op, const char *name, uintptr_t address, int64_t row_stride,
                     int64_t rows, int64_t cols, int dtype, int optional);
int fo_check_workspace(const char *op, uintptr_t workspace, int64_t given, int64_t needed);

/* The prologue of every entry point that takes an argument struct: copies
 * the caller's struct at `args` into `local` (the library's own version,
 * local_size bytes), reading only the caller's struct_size bytes and zeroing
 * the fields past them. struct_size (the first field, int64_t) must lie in
 * [first_size, local_size], first_size being the struct's size in its first
 * version: under it a caller's struct misses fields that have no default;
 * over local_size it comes from a newer header than the library's. Fails
 * with FO_ERR_INVALID_ARGUMENT naming `op`, `type` and the value, or when
 * args is NULL. */
int fo_read_args(const char *op, const char *type, void *local, size_t local_size,
                 size_t first_size, const void *args);

/* The end of `field` in `type`: a struct's size in the version whose last
 * field is `field` (fields are only added at the end, and every struct so
 * far ends on an 8-byte field, so no padding follows it). */
#define FO_ARGS_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* Fails with FO_ERR_INVALID_ARGUMENT unless an argument struct's `reserved`
 * field is 0 (kept 0 so that a later version may give it a meaning). */
int fo_check_reserved(const char *op, int32_t reserved);

/* Whether an op's FP8 output is asked for (fo_fp8_out: y, y_t or scale
 * given; an empty output's y and y_t may be 0, its scales are not). */
static inline int fo_fp8_out_given(const fo_fp8_out *out) {
    return out->y || out->y_t || out->scale;
}

/* Checks an op's output (quantize_fp8.c): y, rows x cols, dense, `dtype`,
 * or where fp8 is given (y then 0), its FP8 output. */
int fo_check_output_or_fp8(const char *op, uintptr_t y, const fo_fp8_out *fp8, int64_t rows,
                           int64_t cols, int dtype);

/* Fails with FO_ERR_INVALID_ARGUMENT when the `bytes` out-pointer of a
 * workspace query is NULL. */
int fo_check_bytes_pointer(const char *op, const int64_t *bytes);

/* Arguments of each op, as the C entry point validated them, addresses as
 * pointers; the CPU and CUDA implementations take the same struct so a
 * signature is written once. (The public fo_*_args structs are what a caller
 * passes; these are what the kernels read.) */
typedef struct fo_bias_scale_relu_forward_params {
    void *y;
    unsigned char *mask; /* optional */
    const void *x;
    int64_t x_row_stride;
    const void *bias; /* optional */
    int64_t rows, cols;
    int dtype, bias_dtype;
    double scale;
} fo_bias_scale_relu_forward_params;

typedef struct fo_bias_scale_relu_backward_params {
    void *dx; /* optional */
    void *dbias; /* optional */
    void *workspace;
    const void *dy;
    int64_t dy_row_stride;
    const unsigned char *mask;
    int64_t rows, cols;
    int dtype, bias_dtype;
    double scale;
} fo_bias_scale_relu_backward_params;

typedef struct fo_square_params {
    void *out; /* y (forward) or dx (backward) */
    const void *x;
    int64_t x_row_stride;
    const void *dy; /* 0 for the forward pass */
    int64_t dy_row_stride;
    int64_t rows, cols;
    int dtype;
} fo_square_params;

typedef struct fo_reduce_sum_params {
    void *out;
    void *workspace;
    const void *x;
    int64_t numel;
    int dtype;
} fo_reduce_sum_params;

typedef struct fo_norm_forward_params {
    void *y;
    void *residual_out; /* with residual only */
    void *mean, *rstd; /* optional */
    const void *x;
    int64_t x_row_stride;
    const void *residual; /* optional */
    int64_t residual_row_stride;
    int residual_dtype;
    const void *weight, *bias; /* optional */
    int param_dtype;
    int64_t rows, cols;
    int dtype, kind;
    double eps, dropout_p;
    uint64_t seed, offset;
    const fo_fp8_out *fp8; /* y in FP8 (y then NULL), or NULL */
    void *workspace; /* with fp8: fo_norm_forward_workspace_bytes' bytes */
    /* set by the CUDA launcher for its first pass (norm.cu), else NULL:
     * each row's (mean, rstd as y took it) in fp32, and the running max of
     * |y| (tensorwise) */
    void *row_stats;
    float *fp8_amax;
    /* set by the CUDA launcher where the register kernel writes the
     * rowwise FP8 output in its one pass: the codes, scales and row maxima
     * (optional) */
    uint8_t *fp8_y;
    float *fp8_scale, *fp8_row_amax;
} fo_norm_forward_params;

/* The CPU's FP8 norm workspace: y in `dtype` first, these bytes (8-byte
 * aligned), then the tensorwise row groups' maxima (lib/norm.c sizes it,
 * lib/cpu/norm.c lays it out). */
static inline int64_t fo_norm_fp8_y_bytes(int64_t rows, int64_t cols, int dtype) {
    return (rows * cols * fo_dtype_size(dtype) + 7) / 8 * 8;
}

typedef struct fo_norm_backward_params {
    void *dx, *dresidual, *dweight, *dbias; /* each optional */
    void *workspace;
    int64_t workspace_bytes; /* checked against the plan by the launcher */
    const void *dy;
    int64_t dy_row_stride;
    const void *dresidual_out; /* optional */
    int64_t dresidual_out_row_stride;
    const void *h;
    int64_t h_row_stride;
    int h_dtype;
    const void *mean, *rstd, *weight;
    int param_dtype;
    int64_t rows, cols;
    int dtype, kind;
    double dropout_p;
    uint64_t seed, offset;
} fo_norm_backward_params;

typedef struct fo_swiglu_params {
    void *y_or_dgate; /* y (forward) or dgate (backward, optional) */
    void *dup; /* backward only, optional */
    const void *dy; /* 0 for the forward pass */
    int64_t dy_row_stride;
    const void *gate;
    int64_t gate_row_stride;
    const void *up;
    int64_t up_row_stride;
    int64_t rows, cols;
    int dtype;
    const fo_fp8_out *fp8; /* forward: the output in FP8 (y_or_dgate 0), or NULL */
} fo_swiglu_params;

typedef struct fo_cross_entropy_params {
    void *loss; /* rows, loss dtype */
    void *dlogits; /* optional; may be logits itself */
    const void *logits;
    int64_t logits_row_stride;
    const int64_t *target;
    const void *scale; /* optional: one loss-dtype element */
    int64_t rows, vocab;
    int64_t ignore_index;
    int dtype;
    double label_smoothing, softcap;
    int reduction; /* enum fo_reduction */
    void *total; /* one element of dtype, with a sum or a mean */
} fo_cross_entropy_params;

typedef struct fo_scale_rows_params {
    void *x;
    const void *scale;
    int64_t rows, cols;
    int dtype, scale_dtype, per_row;
} fo_scale_rows_params;

typedef struct fo_geglu_params {
    void *y_or_dgate; /* y (forward) or dgate (backward, optional) */
    void *dup; /* backward only, optional */
    const void *dy; /* 0 for the forward pass */
    int64_t dy_row_stride;
    const void *gate;
    int64_t gate_row_stride;
    const void *up;
    int64_t up_row_stride;
    int64_t rows, cols;
    int dtype, approximate;
    const fo_fp8_out *fp8; /* forward: the output in FP8 (y_or_dgate 0), or NULL */
} fo_geglu_params;

/* One of q and k: its input and its dense output, strides in elements in
 * the order (batch, head, token); the last dimension is contiguous. */
typedef struct fo_rope_tensor {
    void *out; /* 0: this tensor is skipped */
    const void *in;
    int64_t in_batch_stride, in_head_stride, in_token_stride;
    int64_t out_batch_stride, out_head_stride, out_token_stride;
    int64_t heads;
} fo_rope_tensor;

typedef struct fo_rope_params {
    fo_rope_tensor q, k;
    const void *cos, *sin;
    int64_t cos_batch_stride, cos_token_stride;
    int64_t sin_batch_stride, sin_token_stride;
    int64_t batch, tokens, head_dim, rotary_dim;
    int dtype, cos_dtype, backward, interleaved;
} fo_rope_params;

/* Statistics are fp32, fp64 for fp64 data. */
static inline int fo_stats_dtype(int dtype) {
    return dtype == FO_DTYPE_F64 ? FO_DTYPE_F64 : FO_DTYPE_F32;
}

/* Bytes per row of a relu mask: one bit per element. */
static inline int64_t fo_mask_row_bytes(int64_t cols) { return (cols + 7) / 8; }

/* CUDA side (lib/cuda). Declared always; defined only in a CUDA build. */
/* Every CUDA launcher, X(name, argument type):
 * int fo_cuda_<name>(int device_index, uintptr_t stream, const type *a).
 * An op's launchers take one line each here; a CPU-only build gets a stub
 * for each (cuda_stubs.c). */
#define FO_CUDA_LAUNCHERS(X)                                        \
    X(bias_scale_relu_forward, fo_bias_scale_relu_forward_params)   \
    X(bias_scale_relu_backward, fo_bias_scale_relu_backward_params) \
    X(square, fo_square_params)                                     \
    X(reduce_sum, fo_reduce_sum_params)                             \
    X(norm_forward, fo_norm_forward_params)                         \
    X(norm_backward, fo_norm_backward_params)                       \
    X(swiglu, fo_swiglu_params)                                     \
    X(geglu, fo_geglu_params)                                       \
    X(clamped_swiglu, fo_clamped_swiglu_args)                       \
    X(rope, fo_rope_params)                                         \
    X(cross_entropy, fo_cross_entropy_params)                       \
    X(scale_rows, fo_scale_rows_params)                             \
    X(dyt_forward, fo_dyt_args)                                     \
    X(dyt_backward, fo_dyt_args)                                    \
    X(quantize_fp8, fo_quantize_fp8_args)

#define FO_CUDA_DECLARE(name, type) \
    int fo_cuda_##name(int device_index, uintptr_t stream, const type *a);
FO_CUDA_LAUNCHERS(FO_CUDA_DECLARE)

/* Every CUDA workspace query, X(name, argument type):
 * int64_t fo_cuda_<name>_workspace_bytes(int device_index, const type *a),
 * the bytes the launcher fo_cuda_<name> needs (0 in a CPU-only build). */
#define FO_CUDA_WORKSPACES(X)                                     \
    X(reduce_sum, fo_reduce_sum_args)                             \
    X(bias_scale_relu_backward, fo_bias_scale_relu_backward_args) \
    X(norm_backward, fo_norm_backward_params)                     \
    X(dyt_backward, fo_dyt_args)                                  \
    X(quantize_fp8, fo_quantize_fp8_args)

#define FO_CUDA_DECLARE_WORKSPACE(name, type) \
    int64_t fo_cuda_##name##_workspace_bytes(int device_index, const type *a);
FO_CUDA_WORKSPACES(FO_CUDA_DECLARE_WORKSPACE)

int fo_cuda_runtime_version_built(void);

#ifdef __cplusplus
}
#endif

#endif
