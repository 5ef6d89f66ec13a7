/*
 * fused_ops.h: the whole public ABI of libfused_ops.
 *
 * A plain C library: no libtorch, no Python. Callers pass device addresses as
 * integers, the CUDA stream as an integer, and dtypes as the pinned codes
 * below. The library never allocates device memory, never synchronizes and
 * never creates streams: outputs and workspaces come from the caller.
 *
 * Conventions shared by every op entry point:
 *  - The return value is an fo_status (0 = FO_OK). On error,
 *    fo_last_error() describes it (op name and offending values); the message
 *    is thread-local and stays until the next failing call on that thread.
 *  - Every op entry point takes one argument struct (see "Argument
 *    structs" below), which carries device_type, device_index and stream
 *    as fields.
 *  - device_type is FO_DEVICE_CPU or FO_DEVICE_CUDA; device_index is the CUDA
 *    ordinal (ignored on the CPU). The CUDA path switches the current device
 *    only if it differs, and restores it before returning.
 *  - stream is a cudaStream_t as an integer (0 = legacy default stream);
 *    ignored on the CPU. Work is enqueued asynchronously.
 *  - Every argument is checked before anything runs; a bad one gives
 *    FO_ERR_INVALID_ARGUMENT (or _UNSUPPORTED_DTYPE, _UNSUPPORTED_DEVICE)
 *    and a message naming the function, the argument and its value.
 *  - A 2-d operand is `rows` x `cols` elements; its rows start `*_row_stride`
 *    elements apart (>= 0; ignored when rows <= 1) and each row is
 *    contiguous. Outputs are always dense (row stride = cols); input rows may
 *    overlap (a stride under cols, even 0, reads rows broadcast). An output
 *    must not overlap an input: a kernel may read an input after writing an
 *    output (the norm backward parks partial sums in dx, then reads dy and h
 *    again): an output aliasing an input gives wrong values.
 *  - Addresses are plain integers (uintptr_t). An address may be 0 only where
 *    the function says it is optional, or when the operand is empty.
 *  - Sizes are int64_t and must be >= 0.
 *  - 16-byte-aligned operands take a vectorized path; any other alignment of
 *    the element size is handled correctly, just slower.
 */
#ifndef FUSED_OPS_H
#define FUSED_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifndef FO_API
#if defined(_WIN32)
#define FO_API __declspec(dllexport)
#else
#define FO_API __attribute__((visibility("default")))
#endif
#endif

#define FO_VERSION_MAJOR 0
#define FO_VERSION_MINOR 2
#define FO_VERSION_PATCH 0
/* Bumped on any change that breaks a caller built against an older header. */
#define FO_ABI_VERSION 7

#ifdef __cplusplus
extern "C" {
#endif

/* FO_CDEF_BEGIN: fused_ops_py/_ffi.py hands everything up to FO_CDEF_END to
 * cffi, so only plain declarations live here (no preprocessor lines). */

/* Status codes. The numbers are part of the ABI and never change. */
enum fo_status {
    FO_OK = 0,
    FO_ERR_INVALID_ARGUMENT = 1, /* a size, stride, address or flag is wrong */
    FO_ERR_UNSUPPORTED_DTYPE = 2, /* dtype code unknown or not valid here */
    FO_ERR_UNSUPPORTED_DEVICE = 3, /* device_type unknown, or bad device_index */
    FO_ERR_CUDA_NOT_BUILT = 4, /* a CUDA call to a library built without CUDA */
    FO_ERR_CUDA_RUNTIME = 5, /* the CUDA runtime reported an error */
    FO_ERR_WORKSPACE_TOO_SMALL = 6 /* workspace_bytes under the size asked for */
};

/* Element types. Pinned numbers. */
enum fo_dtype { FO_DTYPE_F32 = 0, FO_DTYPE_F16 = 1, FO_DTYPE_BF16 = 2, FO_DTYPE_F64 = 3 };

enum fo_device_type { FO_DEVICE_CPU = 0, FO_DEVICE_CUDA = 1 };

/* @return the library version as MAJOR * 10000 + MINOR * 100 + PATCH. */
FO_API int fo_version(void);

/* @return FO_ABI_VERSION of the header the library was built from. A caller
 * refuses a library whose value differs from its own header's. */
FO_API int fo_abi_version(void);

/* @return a static, never-NULL description of a status code (unknown codes
 * give "unknown status"). */
FO_API const char *fo_status_string(int status);

/* @return the message of the last failing call on this thread ("" if none).
 * Valid until the next failing call on the same thread. */
FO_API const char *fo_last_error(void);

/* @return 1 if the library was built with CUDA kernels, else 0. */
FO_API int fo_cuda_built(void);

/* @return a static string listing the GPU code built in, e.g.
 * "sm_80 sm_90 compute_90"; "" for a CPU-only build. */
FO_API const char *fo_cuda_archs(void);

/* @return the CUDA runtime version the library was built against
 * (1000 * major + 10 * minor), or 0 for a CPU-only build. */
FO_API int fo_cuda_runtime_version(void);

/* The threads the CPU kernels may use (process-wide): threads > 0 sets the
 * count (at most 256 are used), 0 restores the default, every CPU this
 * process may run on (its affinity mask). A call too small to be worth a
 * thread runs on the caller's alone. The outputs have the same bits on any number of threads.
 * The Python package sets it to torch.get_num_threads(). */
FO_API void fo_set_cpu_threads(int threads);

/* @return the threads the CPU kernels may use now (1 where the library was
 * built without pthreads). */
FO_API int fo_get_cpu_threads(void);

/* @return the instruction set the CPU kernels were chosen for, once, on the
 * first call: "avx512" (x86-64-v4), "avx2" (x86-64-v3) or "baseline". The
 * best this CPU runs, unless the environment variable FUSED_OPS_PY_CPU_ISA
 * names a lower one (a higher one than the CPU runs falls back to the best). */
FO_API const char *fo_cpu_isa(void);

/*
 * Argument structs. The first field, struct_size, is the caller's
 * sizeof(struct): fields are only ever added at the end, and the library
 * reads only the fields a caller's struct_size covers (a field past it takes
 * the value 0), so a caller built against an older header keeps working.
 * A struct_size under the first version's size, or over the library's own, is
 * FO_ERR_INVALID_ARGUMENT, as is a NULL struct pointer (every struct below
 * is in its first version, FO_ABI_VERSION 4 (those of square, reduce_sum and
 * swiglu: 5; the FP8 output of swiglu's and geglu's forward: 6; the FP8 output of
 * fo_norm_forward: 7), but fo_rope_args, whose first
 * version ends at `pairs`, and fo_cross_entropy_args, at `softcap`). The library reads the struct
 * during the call only. Each struct carries the call's device: device_type (FO_DEVICE_CPU or
 * FO_DEVICE_CUDA), device_index (the CUDA ordinal; ignored on the CPU) and stream (a cudaStream_t
 * as an integer, 0 = legacy default; ignored on the CPU).
 */

/*
 * relu(x * scale + bias), row-wise: y[r, c] = max(x[r, c] * scale + bias[c], 0).
 *   y:     output, rows x cols, dense, dtype `dtype`.
 *   mask:  optional output (0 = not wanted) for the backward pass: one bit
 *          per element, 1 where the stored y is not <= 0 (y > 0, or NaN:
 *          torch's relu backward passes the gradient there too), bit (c % 8) of byte
 *          mask[r * ((cols + 7) / 8) + c / 8]; (cols + 7) / 8 bytes a row.
 *   x:     input, rows x cols with row stride x_row_stride, dtype `dtype`.
 *   bias:  optional (0 = none), cols elements of bias_dtype, which is either
 *          `dtype` or FO_DTYPE_F32 (fp32 bias with fp16/bf16 x).
 *   scale: any finite number (applied in the compute precision).
 * Arithmetic is in fp32 (fp64 for fp64). With bias 0 and scale 1 this is relu.
 */
typedef struct fo_bias_scale_relu_forward_args {
    int64_t struct_size; /* sizeof(fo_bias_scale_relu_forward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y, mask;
    uintptr_t x;
    int64_t x_row_stride; /* elements */
    uintptr_t bias;
    int64_t rows, cols;
    int32_t dtype, bias_dtype;
    double scale;
} fo_bias_scale_relu_forward_args;

FO_API int fo_bias_scale_relu_forward(const fo_bias_scale_relu_forward_args *args);

/*
 * Gradients of relu(x * scale + bias) from the mask the forward pass wrote:
 *   dx[r, c] = dy[r, c] * scale * m[r, c]        (dx optional, dense, `dtype`)
 *   dbias[c] = sum over r of dy[r, c] * m[r, c]  (dbias optional, bias_dtype)
 * dbias is reduced in fp32 (fp64 for fp64) in a fixed order: the same bits on
 * every run. It needs `workspace` of workspace_bytes >= the size
 * fo_bias_scale_relu_backward_workspace_bytes gives for the same arguments
 * (device memory on CUDA; 0 and 0 where that size is 0).
 *   dy:   rows x cols with row stride dy_row_stride, dtype `dtype`.
 *   mask: as written by fo_bias_scale_relu_forward for the same rows, cols.
 */
typedef struct fo_bias_scale_relu_backward_args {
    int64_t struct_size; /* sizeof(fo_bias_scale_relu_backward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t dx, dbias;
    uintptr_t workspace;
    int64_t workspace_bytes;
    uintptr_t dy;
    int64_t dy_row_stride; /* elements */
    uintptr_t mask;
    int64_t rows, cols;
    int32_t dtype, bias_dtype;
    double scale;
} fo_bias_scale_relu_backward_args;

/* Bytes of workspace fo_bias_scale_relu_backward needs for these arguments
 * (the workspace fields are not read). @return FO_OK and *bytes, or an error
 * status (the arguments are checked as the call itself checks them). */
FO_API int fo_bias_scale_relu_backward_workspace_bytes(const fo_bias_scale_relu_backward_args *args,
                                                       int64_t *bytes);

FO_API int fo_bias_scale_relu_backward(const fo_bias_scale_relu_backward_args *args);

/*
 * y = x * x, elementwise.
 *   y: output, rows x cols, dense, `dtype`.
 *   x: rows x cols with row stride x_row_stride, `dtype`.
 */
typedef struct fo_square_forward_args {
    int64_t struct_size; /* sizeof(fo_square_forward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y;
    uintptr_t x;
    int64_t x_row_stride; /* elements */
    int64_t rows, cols;
    int32_t dtype;
    int32_t reserved; /* 0 */
} fo_square_forward_args;

FO_API int fo_square_forward(const fo_square_forward_args *args);

/*
 * dx = 2 * x * dy, elementwise.
 *   dx:    output, rows x cols, dense, `dtype`.
 *   dy, x: rows x cols with their row strides, `dtype`.
 */
typedef struct fo_square_backward_args {
    int64_t struct_size; /* sizeof(fo_square_backward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t dx;
    uintptr_t dy;
    int64_t dy_row_stride; /* elements */
    uintptr_t x;
    int64_t x_row_stride; /* elements */
    int64_t rows, cols;
    int32_t dtype;
    int32_t reserved; /* 0 */
} fo_square_backward_args;

FO_API int fo_square_backward(const fo_square_backward_args *args);

/*
 * out[0] = sum of the numel contiguous elements of x, accumulated in fp32
 * (fp64 for fp64) in a fixed order: the same bits on every run; numel = 0
 * gives 0. It needs `workspace` of workspace_bytes >= the size
 * fo_reduce_sum_workspace_bytes gives for the same arguments (device memory
 * on CUDA; 0 and 0 where that size is 0).
 *   out: output, one element of `dtype` (never optional, even for numel 0).
 *   x:   numel contiguous elements of `dtype`.
 */
typedef struct fo_reduce_sum_args {
    int64_t struct_size; /* sizeof(fo_reduce_sum_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t out;
    uintptr_t workspace;
    int64_t workspace_bytes;
    uintptr_t x;
    int64_t numel;
    int32_t dtype;
    int32_t reserved; /* 0 */
} fo_reduce_sum_args;

/* Bytes of workspace fo_reduce_sum needs for these arguments (the workspace
 * fields are not read): it depends on device_type, numel and dtype alone, 0
 * on the CPU. @return FO_OK and *bytes, or an error status (the arguments
 * are checked as the call itself checks them). */
FO_API int fo_reduce_sum_workspace_bytes(const fo_reduce_sum_args *args, int64_t *bytes);

FO_API int fo_reduce_sum(const fo_reduce_sum_args *args);

/* The FP8 formats and recipes of fo_quantize_fp8 and of the FP8 outputs. */
enum fo_fp8_dtype { FO_FP8_E4M3 = 0, FO_FP8_E5M2 = 1 };
enum fo_fp8_recipe { FO_FP8_TENSORWISE = 0, FO_FP8_ROWWISE = 1 };

/*
 * An op's output written in FP8 instead of `dtype`, in the same pass: the
 * bytes and scales fo_quantize_fp8 gives for the output as `dtype` would
 * hold it (its rounding to `dtype` included), without writing that output.
 *   y, y_t, scale: as fo_quantize_fp8's (y and y_t dense, y_t tensorwise
 *             only; either may be 0, not both).
 *   amax:     float32, one a row (rowwise; optional) or one (tensorwise;
 *             required: the pass keeps the running max there).
 * An op takes its FP8 output when y, y_t or scale is given (its own y is
 * then 0).
 */
typedef struct fo_fp8_out {
    uintptr_t y, y_t, scale, amax;
    int32_t fp8_dtype; /* enum fo_fp8_dtype */
    int32_t recipe; /* enum fo_fp8_recipe */
} fo_fp8_out;

/* Normalizations. */
enum fo_norm_kind {
    FO_NORM_LAYER = 0, /* (h - mean(h)) / sqrt(var(h) + eps) * weight + bias */
    FO_NORM_RMS = 1 /* h / sqrt(mean(h^2) + eps) * weight */
};

/*
 * LayerNorm or RMSNorm of each row, with an optional fused residual add and
 * dropout (the pre-norm transformer block in one pass):
 *   h            = dropout(x, dropout_p) + residual   if residual is given,
 *                  else x (and dropout_p must be 0)
 *   residual_out = h in residual_dtype                 (when residual is given)
 *   y            = norm(residual_out or x) * weight + bias, in `dtype`,
 *                  or in FP8 (fp8: the bytes and scales fo_quantize_fp8
 *                  gives for y)
 * Statistics and arithmetic are fp32 (fp64 for fp64).
 */
typedef struct fo_norm_forward_args {
    int64_t struct_size; /* sizeof(fo_norm_forward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y; /* output, rows x cols, dense, `dtype` */
    uintptr_t residual_out; /* output, rows x cols, dense, residual_dtype;
                               required with residual, else 0 */
    uintptr_t mean, rstd; /* optional outputs (0 = not wanted), `rows`
                             values each, fp32 (fp64 for fp64 dtype);
                             RMSNorm writes 0 as its mean. rstd =
                             1 / sqrt(var + eps) (LayerNorm),
                             1 / sqrt(mean of squares + eps) (RMSNorm) */
    uintptr_t x; /* rows x cols, `dtype` */
    int64_t x_row_stride; /* elements */
    uintptr_t residual; /* optional, rows x cols, residual_dtype */
    int64_t residual_row_stride;
    int32_t residual_dtype; /* `dtype`, or FO_DTYPE_F32 (an fp32 residual
                               stream); ignored without residual */
    uintptr_t weight, bias; /* optional (0 = none), cols dense elements of
                               param_dtype; RMSNorm takes no bias */
    int32_t param_dtype; /* `dtype` or FO_DTYPE_F32 */
    int64_t rows, cols;
    int32_t dtype; /* of x and y */
    int32_t kind; /* an fo_norm_kind */
    double eps; /* finite, > 0 */
    double dropout_p; /* in [0, 1); each element of x is kept with
                         probability 1 - p and scaled by 1 / (1 - p) */
    uint64_t seed, offset; /* the dropout mask is a pure function of
                              (seed, offset, row, col): element (row, col)
                              is kept when lane col % 4 of Philox4x32-10(key
                              seed, counter offset + row * 2 * ceil(cols / 8)
                              + col / 4) is at least floor(p * 2^32)
                              (lib/philox.h); the same on the CPU and the
                              GPU, and backward regenerates it */
    fo_fp8_out fp8; /* y in FP8 instead (fo_fp8_out; y then 0), or all 0;
                       e4m3, from dtype float32, float16 or bfloat16 */
    uintptr_t workspace; /* with fp8: fo_norm_forward_workspace_bytes bytes,
                            device memory on CUDA, 8-byte aligned */
    int64_t workspace_bytes;
} fo_norm_forward_args;

/* Bytes of workspace fo_norm_forward needs for these arguments (the
 * workspace fields are not read): 0 without fp8; with it, on CUDA 2 *
 * sizeof(float) a row (the statistics the cast reads), on the
 * CPU y in `dtype` and, tensorwise, a float for each of up to 256 row groups.
 * @return FO_OK and *bytes, or an error status (the arguments are checked as
 * the call itself checks them). */
FO_API int fo_norm_forward_workspace_bytes(const fo_norm_forward_args *args, int64_t *bytes);

FO_API int fo_norm_forward(const fo_norm_forward_args *args);

/* @return how many Philox counters a dropout mask over rows x cols takes
 * (rows * 2 * ceil(cols / 8)): a caller that hands out (seed, offset) pairs
 * from one stream advances the offset by this much a call. */
FO_API uint64_t fo_norm_dropout_counters(int64_t rows, int64_t cols);

/*
 * Gradients of fo_norm_forward, from what it saved:
 *   dh        = d norm(h) / dh applied to dy, plus dresidual_out if given
 *   dresidual = dh in residual_dtype (optional output; with residual only)
 *   dx        = dh * dropout mask / (1 - p) in `dtype` (optional output)
 *   dweight   = sum over rows of dy * (h - mean) * rstd   (optional, param_dtype)
 *   dbias     = sum over rows of dy                       (optional, LayerNorm)
 * dweight and dbias are reduced in fp32 (fp64 for fp64) in a fixed order:
 * the same bits on every run; they need the workspace that
 * fo_norm_backward_workspace_bytes asks for (none where it answers 0).
 */
typedef struct fo_norm_backward_args {
    int64_t struct_size; /* sizeof(fo_norm_backward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t dx; /* optional output, rows x cols, dense, `dtype` */
    uintptr_t dresidual; /* optional output, rows x cols, dense, h_dtype */
    uintptr_t dweight, dbias; /* optional outputs, cols, param_dtype */
    uintptr_t workspace; /* device memory on CUDA */
    int64_t workspace_bytes;
    uintptr_t dy; /* rows x cols, `dtype` */
    int64_t dy_row_stride;
    uintptr_t dresidual_out; /* optional incoming gradient of residual_out,
                                rows x cols, h_dtype */
    int64_t dresidual_out_row_stride;
    uintptr_t h; /* the normalized input: residual_out when there
                    was a residual, else x */
    int64_t h_row_stride;
    int32_t h_dtype; /* residual_dtype with a residual, else `dtype` */
    uintptr_t mean, rstd; /* as the forward pass wrote them (mean unused
                             for RMSNorm) */
    uintptr_t weight; /* optional, as in forward */
    int32_t param_dtype;
    int64_t rows, cols;
    int32_t dtype, kind;
    double dropout_p; /* the forward pass's, to regenerate the mask */
    uint64_t seed, offset;
} fo_norm_backward_args;

/* Bytes of workspace fo_norm_backward needs for these arguments (the
 * workspace fields are not read): the plan the call makes decides it, from
 * the devices, shapes, row strides, dtypes, optional outputs and the
 * operands' alignment, so a caller may keep the answer for calls that agree
 * in all of these (the call checks its workspace against its plan). 0
 * where no dweight or dbias is asked for, on the CPU, or where the CUDA
 * kernel parks its column partials in dx (or dresidual) until they are
 * summed. @return FO_OK and *bytes, or an error status (the arguments are
 * checked as the call itself checks them). */
FO_API int fo_norm_backward_workspace_bytes(const fo_norm_backward_args *args, int64_t *bytes);

FO_API int fo_norm_backward(const fo_norm_backward_args *args);

/*
 * SwiGLU: y = silu(gate) * up = gate / (1 + exp(-gate)) * up, elementwise.
 *   y:        output, rows x cols, dense, `dtype`.
 *   gate, up: rows x cols with their row strides, `dtype`.
 *   fp8:      the output in FP8 instead of y (fo_fp8_out), or all 0.
 */
typedef struct fo_swiglu_forward_args {
    int64_t struct_size; /* sizeof(fo_swiglu_forward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y;
    uintptr_t gate;
    int64_t gate_row_stride; /* elements */
    uintptr_t up;
    int64_t up_row_stride; /* elements */
    int64_t rows, cols;
    int32_t dtype;
    int32_t reserved; /* 0 */
    fo_fp8_out fp8;
} fo_swiglu_forward_args;

FO_API int fo_swiglu_forward(const fo_swiglu_forward_args *args);

/*
 * Gradients of fo_swiglu_forward from its inputs (saved by the caller):
 *   dgate = dy * up * s * (1 + gate * (1 - s)) with s = sigmoid(gate)
 *   dup   = dy * silu(gate)
 * dgate and dup are rows x cols, dense, `dtype`, each optional (0 = not
 * wanted). Unlike other outputs they may be gate and up themselves (dense,
 * the same addresses): each element is read before its gradient is written
 * over it. dy, gate and up are rows x cols with their row strides.
 */
typedef struct fo_swiglu_backward_args {
    int64_t struct_size; /* sizeof(fo_swiglu_backward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t dgate, dup;
    uintptr_t dy;
    int64_t dy_row_stride; /* elements */
    uintptr_t gate;
    int64_t gate_row_stride;
    uintptr_t up;
    int64_t up_row_stride;
    int64_t rows, cols;
    int32_t dtype;
    int32_t reserved; /* 0 */
} fo_swiglu_backward_args;

FO_API int fo_swiglu_backward(const fo_swiglu_backward_args *args);

/*
 * Cross-entropy of each row of logits against its target class, with its
 * gradient written in the same pass (so that backward need not read the
 * logits again). For row r with t = target[r]:
 *   z[v]     = softcap > 0 ? softcap * tanh(logits[r, v] / softcap) : logits[r, v]
 *   lse      = log(sum over v of exp(z[v]))
 *   loss[r]  = (1 - label_smoothing) * (lse - z[t])
 *              + label_smoothing * (lse - mean over v of z[v])
 *   dlogits[r, v] = scale * (softmax(z)[v] - (1 - label_smoothing) * (v == t)
 *                            - label_smoothing / vocab) * dz[v]/dlogits[r, v]
 * and loss[r] = 0, dlogits[r, :] = 0 where t == ignore_index. Arithmetic is
 * fp32 (fp64 for fp64), each row reduced in a fixed order: the same bits on
 * every run. A target neither in [0, vocab) nor ignore_index is an error:
 * FO_ERR_INVALID_ARGUMENT on the CPU; on CUDA the kernel stops with a
 * device-side trap, as torch's device asserts do (the CPU path checks every
 * target before writing; a GPU check would need a synchronization).
 *   loss:     rows elements of loss_dtype = fp32 (fp64 for fp64 logits);
 *             rows + 1 with FO_REDUCTION_MEAN, the last for the gradient's
 *             scale, 1 / (rows not ignored), which the library writes there.
 *   dlogits:  optional, rows x vocab dense of `dtype`; it may be logits
 *             itself (dense logits, overwritten in place by their gradient).
 *   logits:   rows x vocab with row stride logits_row_stride, `dtype`.
 *   target:   rows int64 elements.
 *   scale:    optional address of one loss_dtype element (device memory on
 *             CUDA) that multiplies the gradient; 0 means 1. It must be 0
 *             with FO_REDUCTION_MEAN, which scales by 1 / (rows not ignored).
 *   softcap:  0 for none, else > 0.
 *   reduction, total: with FO_REDUCTION_SUM or FO_REDUCTION_MEAN, total is
 *             the address of one element of `dtype` (device memory on CUDA)
 *             that receives the rows' losses reduced in loss_dtype and
 *             rounded once, as torch's loss (loss still receives each
 *             row's); 0 with FO_REDUCTION_NONE. The first version of this
 *             struct ends at softcap, with 0 (none) in reduction.
 */
enum fo_reduction {
    FO_REDUCTION_NONE = 0, /* each row's loss, in loss, and nothing more */
    FO_REDUCTION_SUM = 1, /* total = the sum of the rows' losses, in a fixed order */
    /* total = that sum / (rows not ignored), NaN where every row is (as
     * torch), and the gradient is scaled by 1 / (rows not ignored): the
     * library counts them on the device, with no synchronization */
    FO_REDUCTION_MEAN = 2
};

typedef struct fo_cross_entropy_args {
    int64_t struct_size; /* sizeof(fo_cross_entropy_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t loss, dlogits;
    uintptr_t logits;
    int64_t logits_row_stride; /* elements */
    uintptr_t target, scale;
    int64_t rows, vocab;
    int64_t ignore_index;
    int32_t dtype, reduction; /* reduction: enum fo_reduction */
    double label_smoothing, softcap;
    uintptr_t total;
} fo_cross_entropy_args;

FO_API int fo_cross_entropy(const fo_cross_entropy_args *args);

/*
 * x[r, :] *= scale[r] (per_row) or scale[0], in place, rows x cols dense of
 * `dtype`; scale is `scale_dtype` (device memory on CUDA). A scale of
 * exactly 1 leaves x untouched, and on CUDA each block reads it on the
 * device and returns at once: the backward of a loss scales its saved
 * gradient by the incoming one at almost no cost when that is 1, with no
 * synchronization (CUDA graphs capture it).
 */
typedef struct fo_scale_rows_args {
    int64_t struct_size; /* sizeof(fo_scale_rows_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t x, scale;
    int64_t rows, cols;
    int32_t dtype, scale_dtype;
    int32_t per_row, reserved; /* per_row: 0 or 1; reserved: 0 */
} fo_scale_rows_args;

FO_API int fo_scale_rows(const fo_scale_rows_args *args);

/* The GELU of fo_geglu_*, as torch.nn.functional.gelu's `approximate`. */
enum fo_gelu_approximate {
    FO_GELU_NONE = 0, /* gelu(v) = v / 2 * (1 + erf(v / sqrt(2))) */
    FO_GELU_TANH = 1 /* gelu(v) = v / 2 * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 v^3))) */
};

/*
 * GeGLU: y = gelu(gate) * up, elementwise (the gated MLP of Gemma-style
 * models). Arithmetic is fp32 (fp64 for fp64).
 *   y:        output, rows x cols, dense, `dtype`.
 *   gate, up: rows x cols with their row strides, `dtype`.
 *   fp8:      the output in FP8 instead of y (fo_fp8_out), or all 0.
 */
typedef struct fo_geglu_forward_args {
    int64_t struct_size; /* sizeof(fo_geglu_forward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y;
    uintptr_t gate;
    int64_t gate_row_stride; /* elements */
    uintptr_t up;
    int64_t up_row_stride; /* elements */
    int64_t rows, cols;
    int32_t dtype;
    int32_t approximate; /* an fo_gelu_approximate */
    fo_fp8_out fp8;
} fo_geglu_forward_args;

FO_API int fo_geglu_forward(const fo_geglu_forward_args *args);

/*
 * Gradients of fo_geglu_forward from its inputs (saved by the caller):
 *   dgate = dy * up * gelu'(gate)
 *   dup   = dy * gelu(gate)
 * dgate and dup are rows x cols, dense, `dtype`, each optional (0 = not
 * wanted); dy is rows x cols with its row stride (0 is fine: an expanded
 * gradient).
 */
typedef struct fo_geglu_backward_args {
    int64_t struct_size; /* sizeof(fo_geglu_backward_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t dgate, dup;
    uintptr_t dy;
    int64_t dy_row_stride; /* elements */
    uintptr_t gate;
    int64_t gate_row_stride;
    uintptr_t up;
    int64_t up_row_stride;
    int64_t rows, cols;
    int32_t dtype;
    int32_t approximate; /* an fo_gelu_approximate, the forward pass's */
} fo_geglu_backward_args;

FO_API int fo_geglu_backward(const fo_geglu_backward_args *args);

/* Where gate and up lie in a row of fo_clamped_swiglu's gate_up. */
enum fo_glu_layout {
    FO_GLU_HALVES = 0, /* gate's cols, then up's: [gate | up] (chunk(2, dim=-1)) */
    FO_GLU_INTERLEAVED = 1 /* (gate, up) pairs: gate_up[..., ::2], gate_up[..., 1::2] (gpt-oss) */
};

/*
 * Clamped SwiGLU (gpt-oss's experts), elementwise over each row's gate and
 * up, with g = min(gate, limit) and u = clamp(up, -limit, limit) (NaN
 * stays NaN):
 *   y = (u + 1) * g * sigmoid(alpha * g)
 * and its gradients, with s = sigmoid(alpha * g):
 *   dgate = gate < limit          ? dy * (u + 1) * s * (1 + alpha * g * (1 - s)) : 0
 *   dup   = -limit < up < limit   ? dy * g * s : 0
 * where the comparisons are <= with grad_at_limit set: torch.clamp's
 * gradient passes at its bounds up to torch 2.13, and not from 2.14.
 * Arithmetic is fp32 (fp64 for fp64).
 *   gate_up:  rows x (2 * cols) with its row stride, `dtype`, laid out as
 *             `layout` says.
 *   y:        fo_clamped_swiglu_forward's output, rows x cols, dense.
 *   dy:       fo_clamped_swiglu_backward's input, rows x cols with its row
 *             stride (0 is fine: an expanded gradient).
 *   dgate_up: fo_clamped_swiglu_backward's output, rows x (2 * cols), dense,
 *             laid out as gate_up.
 * An entry point reads only its own fields (forward: y; backward: dy and
 * dgate_up). alpha is finite; limit is positive (+inf: no clamp).
 */
typedef struct fo_clamped_swiglu_args {
    int64_t struct_size; /* sizeof(fo_clamped_swiglu_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y;
    uintptr_t dgate_up;
    uintptr_t dy;
    int64_t dy_row_stride; /* elements */
    uintptr_t gate_up;
    int64_t gate_up_row_stride; /* elements */
    int64_t rows, cols; /* cols: of y; gate_up has 2 * cols */
    int32_t dtype;
    int32_t layout; /* an fo_glu_layout */
    double alpha, limit;
    int64_t grad_at_limit; /* 1: the gradient passes at gate == limit and up == +-limit */
} fo_clamped_swiglu_args;

FO_API int fo_clamped_swiglu_forward(const fo_clamped_swiglu_args *args);
FO_API int fo_clamped_swiglu_backward(const fo_clamped_swiglu_args *args);

/* Where the heads dimension of q and k lies. */
enum fo_rope_layout {
    FO_ROPE_HEADS_FIRST = 0, /* [batch, heads, tokens, head_dim] (Hugging Face's unsqueeze_dim=1) */
    FO_ROPE_TOKENS_FIRST = 1 /* [batch, tokens, heads, head_dim] (unsqueeze_dim=2) */
};

/* Which dimensions of a head's first rotary_dim form the rotated pairs. */
enum fo_rope_pairs {
    FO_ROPE_HALVES = 0, /* (i, i + rotary_dim / 2): rotate-half (Llama, most models) */
    FO_ROPE_INTERLEAVED = 1 /* (2i, 2i + 1): GPT-J style (Cohere, GLM) */
};

/*
 * Rotary position embedding (Hugging Face's apply_rotary_pos_emb, with
 * partial rotary), of q and k in one launch. For each row x (head_dim
 * elements) of q or k at batch b and token t, with R = rotary_dim,
 * h = R / 2, c = cos[b, t, :], s = sin[b, t, :] and each pair (l, u) =
 * (i, i + h) for FO_ROPE_HALVES or (2i, 2i + 1) for FO_ROPE_INTERLEAVED:
 *   fo_rope_forward:
 *     out[l] = x[l] * c[l] - x[u] * s[l]                      (i < h)
 *     out[u] = x[u] * c[u] + x[l] * s[u]
 *     out[j] = x[j]                                           (R <= j < head_dim)
 *   fo_rope_backward, its transpose (x is then the incoming gradient):
 *     out[l] = x[l] * c[l] + x[u] * s[u]
 *     out[u] = x[u] * c[u] - x[l] * s[l]
 *     out[j] = x[j]
 * Arithmetic is fp32 (fp64 for fp64). Both entry points take this struct.
 *   q_out, k_out: outputs in q's (k's) shape, `dtype`, placed as
 *            q_out_strides (k_out_strides) say; either may be 0, and then
 *            that tensor is neither read nor written.
 *   q, k:    batch x q_heads (k_heads) x tokens x head_dim elements, placed
 *            as `layout` says, read through their strides (elements, in the
 *            tensors' own dimension order; any >= 0, rows may overlap), the
 *            last of which must be 1 (where head_dim > 1).
 *   cos, sin: batch x tokens x rotary_dim elements of cos_dtype, through
 *            their strides (batch, token, rotary dimension; the last must
 *            be 1 where rotary_dim > 1; a batch stride of 0 shares one
 *            table among the batch). Not read where rotary_dim is 0.
 *   rotary_dim: even, in [0, head_dim].
 *   cos_dtype: `dtype`, or FO_DTYPE_F32 beside FO_DTYPE_F16 and
 *            FO_DTYPE_BF16 (fp32 tables beside half q and k).
 */
typedef struct fo_rope_args {
    int64_t struct_size; /* sizeof(fo_rope_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t q_out, k_out;
    uintptr_t q, k;
    int64_t q_strides[4], k_strides[4];
    uintptr_t cos, sin;
    int64_t cos_strides[3], sin_strides[3];
    int64_t batch, tokens, q_heads, k_heads, head_dim, rotary_dim;
    int32_t layout; /* an fo_rope_layout */
    int32_t dtype; /* of q, k and the outputs */
    int32_t cos_dtype; /* of cos and sin */
    int32_t pairs; /* an fo_rope_pairs */
    /* The outputs' strides (elements, in the tensors' own dimension order,
     * as q_strides): any layout whose elements do not overlap and whose
     * last stride is 1 (q's own, where q is a transposed projection, so
     * that attention reads it with no copy). All 0 (or a struct_size that
     * ends before them): dense in `layout`. */
    int64_t q_out_strides[4], k_out_strides[4];
} fo_rope_args;

FO_API int fo_rope_forward(const fo_rope_args *args);
FO_API int fo_rope_backward(const fo_rope_args *args);

/*
 * DyT, Dynamic Tanh ("Transformers without Normalization"), over each row:
 *   y[r, c] = weight[c] * tanh(alpha * x[r, c]) + bias[c]
 * and its gradients, with t = tanh(alpha * x):
 *   dx      = dy * weight * alpha * (1 - t^2)
 *   dalpha  = sum over all elements of dy * weight * x * (1 - t^2)
 *   dweight = sum over rows of dy * t
 *   dbias   = sum over rows of dy
 * Arithmetic is fp32 (fp64 for fp64; the CUDA forward of fp16 and bf16
 * takes the hardware's tanh, within 2^-10.9 relative, under their rounding);
 * every sum is taken in a fixed order, so the gradients have the same bits
 * on every run.
 *   x:      rows x cols with its row stride, `dtype`.
 *   alpha:  one element; weight: cols elements; bias: cols elements or 0
 *           (none); all of param_dtype: `dtype`, or float32 beside
 *           float16/bfloat16 x.
 *   y:      fo_dyt_forward's output, rows x cols, dense, `dtype`.
 *   dy:     fo_dyt_backward's input, rows x cols with its row stride.
 *   dx:     dense, `dtype`; dalpha (one element), dweight and dbias (cols
 *           each): param_dtype. Each optional (0 = not wanted).
 *   workspace: what fo_dyt_backward_workspace_bytes asks for: the
 *           gradients' partial sums, on the call's device.
 * An entry point reads only its own fields (forward: y; backward: the rest).
 */
typedef struct fo_dyt_args {
    int64_t struct_size; /* sizeof(fo_dyt_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y;
    uintptr_t dx, dalpha, dweight, dbias;
    uintptr_t workspace;
    int64_t workspace_bytes;
    uintptr_t dy;
    int64_t dy_row_stride; /* elements */
    uintptr_t x;
    int64_t x_row_stride; /* elements */
    uintptr_t alpha, weight, bias;
    int64_t rows, cols;
    int32_t dtype, param_dtype;
} fo_dyt_args;

FO_API int fo_dyt_forward(const fo_dyt_args *args);
/* Bytes of workspace the backward with these arguments needs (workspace
 * fields not read); the arguments are checked as the call checks them. */
FO_API int fo_dyt_backward_workspace_bytes(const fo_dyt_args *args, int64_t *bytes);
FO_API int fo_dyt_backward(const fo_dyt_args *args);

/*
 * FP8 quantization with a dynamic scale, as torchao.float8 computes it:
 *   amax  = the largest |x| among the finite elements of x rounded to
 *           float32 (NaN and inf are left out; a float64 value beyond
 *           float32's range rounds to inf) of a row (FO_FP8_ROWWISE) or of
 *           the tensor (FO_FP8_TENSORWISE);
 *   q     = float32(fp8_max / double(max(amax, 1e-12))), for rowwise then
 *           rounded down to a power of two;
 *   y     = fp8(clamp(float32(x) * q, -fp8_max, fp8_max)), to nearest, ties
 *           to even (NaN stays NaN, as 0x7F; inf saturates);
 *   scale = float32(1 / q), the dequantization factor: x ~ y * scale, as
 *           torch._scaled_mm takes it.
 *   y:        output, rows x cols, dense, fp8_dtype (optional when y_t is
 *             given).
 *   y_t:      output, optional, cols x rows, dense: y transposed, for the
 *             GEMMs that reduce over rows (FO_FP8_TENSORWISE only).
 *   scale:    output, float32, one a row (rowwise) or one.
 *   amax:     output, optional, float32, like scale.
 *   x:        rows x cols with row stride x_row_stride (>= 0) elements,
 *             `dtype`.
 *   workspace: fo_quantize_fp8_workspace_bytes bytes (tensorwise needs
 *             some, an empty x too), 4-byte aligned, on x's device.
 * y and y_t must not overlap each other or x. Empty x still writes its
 * scales (amax 0).
 * @return FO_OK, FO_ERR_INVALID_ARGUMENT, FO_ERR_UNSUPPORTED_DTYPE (dtype or
 *         fp8_dtype), FO_ERR_UNSUPPORTED_DEVICE, FO_ERR_WORKSPACE_TOO_SMALL,
 *         FO_ERR_CUDA_NOT_BUILT or FO_ERR_CUDA_RUNTIME.
 */

typedef struct fo_quantize_fp8_args {
    int64_t struct_size; /* sizeof(fo_quantize_fp8_args) */
    int32_t device_type, device_index;
    uintptr_t stream;
    uintptr_t y, y_t, scale, amax;
    uintptr_t workspace;
    int64_t workspace_bytes;
    uintptr_t x;
    int64_t x_row_stride; /* elements */
    int64_t rows, cols;
    int32_t dtype;
    int32_t fp8_dtype; /* enum fo_fp8_dtype */
    int32_t recipe; /* enum fo_fp8_recipe */
    int32_t reserved; /* 0 */
} fo_quantize_fp8_args;

/* Bytes of workspace the call with these arguments needs (workspace fields
 * not read); the arguments are checked as the call checks them. */
FO_API int fo_quantize_fp8_workspace_bytes(const fo_quantize_fp8_args *args, int64_t *bytes);
FO_API int fo_quantize_fp8(const fo_quantize_fp8_args *args);

/* FO_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* FUSED_OPS_H */
