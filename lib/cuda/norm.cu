// norm.cu: LayerNorm and RMSNorm with fused residual add and dropout on CUDA:
// the entry points. Each makes the call's plan (norm_plan.cuh: which
// kernel, grid, cluster and workspace) and launches what it says. The FP8
// output is one pass where the register kernel writes it rowwise; else two
// passes: the plan's kernel writes each row's statistics
// (and, tensorwise, the max of |y|) without y, then quantize_fp8.cuh's cast
// computes y again from h and them (NormSource), the same bits.
#include "norm_plan.cuh"
#include "quantize_fp8.cuh"

namespace fo {
namespace {

// The register forward kernel of this call (its types, input, row access
// and chunks a thread), in clusters of plan.cluster blocks where above 1.
// FP8_ROWS: with y in FP8, rowwise (a 16-bit T, the residual and the
// parameters of T, no cluster: launch_forward_fp8).
template <typename T, typename P, bool FP8_ROWS = false>
void launch_forward_registers(const fo_norm_forward_params &a, const ForwardPlan &plan,
                              cudaStream_t stream) {
    dispatch_row_access<T>(a.cols, [&](auto access) {
        constexpr Access ACCESS = access.value;
        dispatch_chunks<kForwardMaxChunks<T>>(plan.cpt, [&](auto chunks) {
            constexpr int CPT = chunks.value;
            auto launch = [&](auto input, auto residual_tag, auto cluster) {
                constexpr int CLUSTER = cluster.value;
                using R = decltype(residual_tag);
                if constexpr (!FP8_ROWS || (std::is_same_v<R, T> && CLUSTER == 1)) {
                    const auto kernel = norm_forward_registers_kernel<T, R, P, CPT, input.value,
                                                                      ACCESS, CLUSTER, FP8_ROWS>;
                    if constexpr (CLUSTER == 1)
                        kernel<<<plan.grid, plan.block, 0, stream>>>(a);
                    else
                        launch_clustered(kernel, plan.grid, plan.block, CLUSTER, stream, a);
                }
            };
            auto with_input = [&](auto cluster) {
                if (!a.residual) {
                    launch(std::integral_constant<ForwardInput, kX>{}, T{}, cluster);
                    return;
                }
                dispatch_companion<T>(a.residual_dtype, [&](auto residual_tag) {
                    if (a.dropout_p > 0)
                        launch(std::integral_constant<ForwardInput, kDropoutXPlusResidual>{},
                               residual_tag, cluster);
                    else
                        launch(std::integral_constant<ForwardInput, kXPlusResidual>{}, residual_tag,
                               cluster);
                });
            };
            if (FP8_ROWS || plan.cluster == 1) {
                with_input(std::integral_constant<int, 1>{});
                return;
            }
            // clusters: every row access, kForwardMaxChunks chunks a thread,
            // a residual of T in fp32 only (kNormTuning); no fp64
            if constexpr (CPT == kForwardMaxChunks<T> && !std::is_same_v<T, double>) {
                auto clustered = [&](auto cluster) {
                    if (!a.residual) {
                        launch(std::integral_constant<ForwardInput, kX>{}, T{}, cluster);
                        return;
                    }
                    if constexpr (std::is_same_v<T, float>) {
                        if (a.dropout_p > 0)
                            launch(std::integral_constant<ForwardInput, kDropoutXPlusResidual>{},
                                   T{}, cluster);
                        else
                            launch(std::integral_constant<ForwardInput, kXPlusResidual>{}, T{},
                                   cluster);
                    }
                };
                if (plan.cluster == 2) clustered(std::integral_constant<int, 2>{});
                if (plan.cluster == 4) clustered(std::integral_constant<int, 4>{});
                if (plan.cluster == 8) clustered(std::integral_constant<int, 8>{});
            }
        });
    });
}

template <typename T>
void launch_forward(const fo_norm_forward_params &a, const ForwardPlan &plan, cudaStream_t stream) {
    dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
        using P = decltype(param_tag);
        switch (plan.kernel) {
            case NormKernel::kShared:
                norm_forward_shared_kernel<T, P>
                    <<<plan.grid, plan.block, plan.shared_bytes, stream>>>(a);
                return;
            case NormKernel::kRegisters:
            case NormKernel::kCluster:
                launch_forward_registers<T, P>(a, plan, stream);
                return;
            case NormKernel::kStreaming:
                dispatch_companion<T>(a.residual_dtype, [&](auto residual_tag) {
                    using R = decltype(residual_tag);
                    auto kernel = plan.vec ? norm_forward_kernel<T, R, P, true>
                                           : norm_forward_kernel<T, R, P, false>;
                    kernel<<<plan.grid, plan.block, 0, stream>>>(a);
                });
                return;
        }
    });
}

template <typename T>
void launch_backward(const fo_norm_backward_params &a, const BackwardPlan &plan,
                     cudaStream_t stream) {
    using A = acc_t<T>;
    A *partials = static_cast<A *>(a.workspace);
    cudaLaunchAttribute attributes[2];
    switch (plan.kernel) {
        case NormKernel::kRegisters:
            // one pass over dy and h for every output
            with_backward_registers_kernel<T>(a, plan.cpt, [&](auto kernel) {
                if (!plan.parked) {
                    kernel.value<<<plan.grid, plan.block, 0, stream>>>(a, partials, HeldArgs{});
                    return;
                }
                cudaLaunchConfig_t config = clustered_config(
                    plan.grid, plan.block, plan.shared_bytes, stream, 1, attributes[0]);
                attributes[0] = {};
                attributes[0].id = cudaLaunchAttributeCooperative;
                attributes[0].val.cooperative = 1;
                config.attrs = attributes;
                config.numAttrs = 1;
                cudaLaunchKernelEx(&config, kernel.value, a, static_cast<A *>(nullptr), plan.held);
            });
            break;
        case NormKernel::kShared:
            dispatch_companion<T>(a.h_dtype, [&](auto h_tag) {
                using H = decltype(h_tag);  // here, not in the inner lambda (norm_plan.cuh)
                dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
                    if constexpr (kTuning<T>.backward_shared) {
                        const auto kernel = norm_backward_shared_kernel<T, H, decltype(param_tag)>;
                        cudaLaunchConfig_t config =
                            clustered_config(plan.grid, plan.block, plan.shared_bytes, stream,
                                             plan.cluster, attributes[0]);
                        if (plan.parked) {  // a grid-wide barrier
                            attributes[config.numAttrs] = {};
                            attributes[config.numAttrs].id = cudaLaunchAttributeCooperative;
                            attributes[config.numAttrs].val.cooperative = 1;
                            config.attrs = attributes;
                            config.numAttrs++;
                        }
                        cudaLaunchKernelEx(&config, kernel, a, partials, plan.defer);
                    }
                });
            });
            break;
        case NormKernel::kStreaming:
        case NormKernel::kCluster:  // (not a backward kernel)
            dispatch_companion<T>(a.h_dtype, [&](auto h_tag) {
                using H = decltype(h_tag);
                if (a.dx || a.dresidual)
                    dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
                        using P = decltype(param_tag);
                        auto kernel = plan.vec ? norm_backward_rows_kernel<T, H, P, true>
                                               : norm_backward_rows_kernel<T, H, P, false>;
                        kernel<<<plan.grid, plan.block, 0, stream>>>(a);
                    });
                if (!a.dweight && !a.dbias) return;
                auto kernel = plan.vec ? norm_backward_columns_kernel<T, H, true>
                                       : norm_backward_columns_kernel<T, H, false>;
                kernel<<<plan.columns.grid, plan.columns.block, 0, stream>>>(a, partials);
            });
            break;
    }
    // the partials' fixed-order sum, where the kernel did not sum them
    if ((a.dweight || a.dbias) && !plan.parked)
        dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
            using P = decltype(param_tag);
            finish_column_partials(static_cast<P *>(a.dweight), static_cast<P *>(a.dbias), partials,
                                   plan.groups, a.cols, stream);
        });
}

// y = norm(h) as the first pass's kernel computed it and stores it in T,
// from h (x, or residual_out with a residual), each row's (mean, rstd as y
// took it) and the weight and bias; exact: the kernel's normalize_chunk
// form. Typed (T a 16-bit type): h and the parameters of T, read by 16-byte
// vectors (rows of whole chunks, every operand aligned). Otherwise
// (RuntimeDtype: float32 x, fp32 parameters or residual stream, odd rows)
// every dtype is a code, read an element at a time: one instantiation for
// all. Rowwise groups of 64 or 256 threads and tensorwise never flattened
// (each row has its statistics): the kernels a Source instantiates are what
// this file's build time is made of.
struct RuntimeDtype {};

// v rounded to dtype (f32, f16 or bf16), as a float
__device__ __forceinline__ float round_to(float v, int dtype) {
    switch (dtype) {
        case FO_DTYPE_F16:
            return __half2float(__float2half_rn(v));
        case FO_DTYPE_BF16:
            return __bfloat162float(__float2bfloat16_rn(v));
        default:
            return v;
    }
}

__device__ __forceinline__ float load_as_float(const void *p, int64_t at, int dtype) {
    switch (dtype) {
        case FO_DTYPE_F32:
            return static_cast<const float *>(p)[at];
        case FO_DTYPE_F16:
            return __half2float(static_cast<const __half *>(p)[at]);
        default:
            return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[at]);
    }
}

template <typename T>
struct NormSource {
    static constexpr bool kVec = !std::is_same_v<T, RuntimeDtype>;
    static constexpr bool kFlattens = false;
    static constexpr bool kFewGroups = true;
    static constexpr int kHeldChunks = kVec ? 8 : 4;
    using Held = std::conditional_t<kVec, T, float>;
    using Stored = std::conditional_t<kVec, T, float>;  // h as fetched
    struct Raw {
        alignas(16) Stored h[kChunk];
    };
    const void *h;
    int64_t stride, cols;
    const float *row_stats;
    const void *weight, *bias;
    bool exact;
    int dtype, h_dtype, param_dtype;  // RuntimeDtype's

    // a parameter chunk as floats, or fill where there is none
    __device__ __forceinline__ void params(float (&out)[kChunk], const void *p, int64_t c0,
                                           float fill) const {
        if (!p) {
#pragma unroll
            for (int i = 0; i < kChunk; i++) out[i] = fill;
        } else if constexpr (kVec) {
            alignas(16) T raw[kChunk];
            *reinterpret_cast<uint4 *>(raw) =
                *reinterpret_cast<const uint4 *>(static_cast<const T *>(p) + c0);
#pragma unroll
            for (int i = 0; i < kChunk; i++) out[i] = to_acc(raw[i]);
        } else {
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                out[i] = c0 + i < cols ? load_as_float(p, c0 + i, param_dtype) : fill;
        }
    }
    __device__ __forceinline__ void fetch(Raw &raw, int64_t r, int64_t c0) const {
        if constexpr (kVec) {
            *reinterpret_cast<uint4 *>(raw.h) =
                *reinterpret_cast<const uint4 *>(static_cast<const T *>(h) + r * stride + c0);
        } else {
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                raw.h[i] = c0 + i < cols ? load_as_float(h, r * stride + c0 + i, h_dtype) : 0.0f;
        }
    }
    __device__ __forceinline__ void values(float (&out)[kChunk], const Raw &raw, int64_t r,
                                           int64_t c0) const {
        const float mean = row_stats[2 * r], rstd = row_stats[2 * r + 1];
        float v[kChunk], w[kChunk], b[kChunk];
        params(w, weight, c0, 1.0f);
        params(b, bias, c0, 0.0f);
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = to_acc(raw.h[i]);
        if (exact)
            normalize_chunk<true>(v, mean, rstd, 0.0f, w, b);
        else
            normalize_chunk<false>(v, mean, rstd, -mean * rstd, w, b);
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            if constexpr (kVec)
                out[i] = to_acc(from_acc<T>(v[i]));
            else
                out[i] = round_to(v[i], dtype);
        }
    }
    __device__ __forceinline__ float amax(float running, const Raw &raw, int64_t r,
                                          int64_t c0) const {
        float v[kChunk];
        values(v, raw, r, c0);
        return finite_max(running, v);
    }
};

// The FP8 output's cast (e4m3: norm.c), after the first pass: rowwise, or
// tensorwise from the max the first pass left in fp8.amax.
template <typename Source>
void launch_norm_fp8_cast(const fo_norm_forward_params &a, const Source &source,
                          cudaStream_t stream) {
    const fo_fp8_out &out = *a.fp8;
    uint8_t *y = reinterpret_cast<uint8_t *>(out.y), *y_t = reinterpret_cast<uint8_t *>(out.y_t);
    float *scale = reinterpret_cast<float *>(out.scale),
          *amax = reinterpret_cast<float *>(out.amax);
    if (out.recipe == FO_FP8_ROWWISE)
        launch_rowwise<true>(y, scale, amax, source, a.rows, a.cols, stream);
    else
        launch_tensorwise_cast<true>(y, y_t, scale, nullptr, amax, 1, source, false, a.rows, a.cols,
                                     stream);
}

// The FP8 output: rowwise where the plan takes the register kernel, in its
// one pass; otherwise the plan's kernel without y (the statistics into the
// workspace, tensorwise the max of |y| into fp8.amax), then the cast.
template <typename T>
void launch_forward_fp8(const fo_norm_forward_params &in, int device, const DeviceInfo &info,
                        cudaStream_t stream) {
    fo_norm_forward_params a = in;
    a.row_stats = a.workspace;
    const bool tensorwise = a.fp8->recipe == FO_FP8_TENSORWISE;
    if (tensorwise) {
        a.fp8_amax = reinterpret_cast<float *>(a.fp8->amax);
        cudaMemsetAsync(a.fp8_amax, 0, sizeof(float), stream);
    }
    const ForwardPlan plan = norm_forward_plan<T>(a, device, info);
    const int h_dtype = a.residual ? a.residual_dtype : a.dtype;
    const void *h = a.residual ? a.residual_out : a.x;
    const int64_t stride = a.residual ? a.cols : a.x_row_stride;
    // typed: a 16-bit T, h and the parameters of T, every operand aligned
    const bool typed = sizeof(T) == 2 && h_dtype == a.dtype &&
                       ((!a.weight && !a.bias) || a.param_dtype == a.dtype) &&
                       a.cols % kChunk == 0 && aligned16(h) &&
                       stride_aligned16<T>(stride, a.rows) && aligned16(a.weight) &&
                       aligned16(a.bias) && a.fp8->y % 8 == 0;
    if constexpr (sizeof(T) == 2) {
        // rowwise from registers: one pass (without parameters, T's fills 1 and 0 are P's)
        if (!tensorwise && typed && a.cols > 0 && plan.kernel == NormKernel::kRegisters) {
            a.row_stats = nullptr;
            a.fp8_y = reinterpret_cast<uint8_t *>(a.fp8->y);
            a.fp8_scale = reinterpret_cast<float *>(a.fp8->scale);
            a.fp8_row_amax = reinterpret_cast<float *>(a.fp8->amax);
            if (a.rows > 0) launch_forward_registers<T, T, true>(a, plan, stream);
            return;
        }
    }
    if (a.rows > 0 && a.cols > 0) launch_forward<T>(a, plan, stream);
    const bool exact = kExactNormalize<T> || plan.kernel == NormKernel::kStreaming;
    auto with = [&](auto source) {
        launch_norm_fp8_cast(
            a,
            decltype(source){h, stride, a.cols, static_cast<const float *>(a.row_stats), a.weight,
                             a.bias, exact, a.dtype, h_dtype, a.param_dtype},
            stream);
    };
    if constexpr (sizeof(T) == 2)
        if (typed) return with(NormSource<T>{});
    with(NormSource<RuntimeDtype>{});
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int64_t fo_cuda_norm_backward_workspace_bytes(int device_index,
                                                         const fo_norm_backward_params *a) {
    if (!a->dweight && !a->dbias) return 0;
    // on the call's device, as the launch will be: the plan's kernel
    // queries are the current device's (without one, nothing is asked, and
    // the plan takes no kernel that needs the device's answer)
    DeviceGuard guard(device_index);
    const bool on_device = guard.error() == cudaSuccess;
    const DeviceInfo info = on_device ? device_info(device_index) : DeviceInfo{};
    cudaGetLastError();  // a failed switch is "no", not this op's error
    int64_t bytes = 0;
    dispatch_dtype(a->dtype, [&](auto tag) {
        bytes = norm_backward_plan<decltype(tag)>(*a, device_index, info).workspace_bytes;
    });
    return bytes;
}

extern "C" int fo_cuda_norm_forward(int device_index, uintptr_t stream,
                                    const fo_norm_forward_params *a) {
    return launch_on("fo_norm_forward", device_index, [&] {
        const DeviceInfo info = device_info(device_index);
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            if constexpr (!std::is_same_v<T, double>) {  // (fp64 has no FP8 output: norm.c)
                if (a->fp8) {
                    launch_forward_fp8<T>(*a, device_index, info, cudaStream_t(stream));
                    return;
                }
            }
            launch_forward<T>(*a, norm_forward_plan<T>(*a, device_index, info),
                              cudaStream_t(stream));
        });
    });
}

extern "C" int fo_cuda_norm_backward(int device_index, uintptr_t stream,
                                     const fo_norm_backward_params *a) {
    const char *const op = "fo_norm_backward";
    DeviceGuard guard(device_index);
    const bool on_device = guard.error() == cudaSuccess;
    const DeviceInfo info = on_device ? device_info(device_index) : DeviceInfo{};
    int status = FO_OK;
    dispatch_dtype(a->dtype, [&](auto tag) {
        using T = decltype(tag);
        // the call's one plan: the workspace it needs (checked with or
        // without a GPU), then its launch
        const BackwardPlan plan = norm_backward_plan<T>(*a, device_index, info);
        status = fo_check_workspace(op, uintptr_t(a->workspace), a->workspace_bytes,
                                    plan.workspace_bytes);
        if (status != FO_OK) return;
        if (!on_device) {
            status = cuda_status(op, guard.error());
            return;
        }
        cudaGetLastError();  // an error left pending by others is theirs (as launch_on)
        launch_backward<T>(*a, plan, cudaStream_t(stream));
        status = cuda_status(op, cudaGetLastError());
    });
    return status;
}
