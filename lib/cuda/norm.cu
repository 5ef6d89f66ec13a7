// norm.cu: LayerNorm and RMSNorm with fused residual add and dropout on CUDA:
// the entry points. Each makes the call's plan (norm_plan.cuh: which
// kernel, grid, cluster and workspace) and launches what it says. The FP8
// output takes two passes: the plan's kernel writes each row's statistics
// (and, tensorwise, the max of |y|) without y, then quantize_fp8.cuh's cast
// computes y again from h and them (NormSource), the same bits.
#include "norm_plan.cuh"
#include "quantize_fp8.cuh"

namespace fo {
namespace {

// The register forward kernel of this call (its types, input, row access
// and chunks a thread), in clusters of plan.cluster blocks where above 1.
template <typename T, typename P>
void launch_forward_registers(const fo_norm_forward_params &a, const ForwardPlan &plan,
                              cudaStream_t stream) {
    dispatch_row_access<T>(a.cols, [&](auto access) {
        constexpr Access ACCESS = access.value;
        dispatch_chunks<kForwardMaxChunks<T>>(plan.cpt, [&](auto chunks) {
            constexpr int CPT = chunks.value;
            auto launch = [&](auto input, auto residual_tag, auto cluster) {
                constexpr int CLUSTER = cluster.value;
                const auto kernel = norm_forward_registers_kernel<T, decltype(residual_tag), P, CPT,
                                                                  input.value, ACCESS, CLUSTER>;
                if constexpr (CLUSTER == 1)
                    kernel<<<plan.grid, plan.block, 0, stream>>>(a);
                else
                    launch_clustered(kernel, plan.grid, plan.block, CLUSTER, stream, a);
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
            if (plan.cluster == 1) {
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
// took it) and the weight and bias. EXACT: the kernel's normalize_chunk form.
template <typename T, typename H, typename P, bool VEC, bool EXACT>
struct NormSource {
    using A = acc_t<T>;
    static constexpr bool kVec = VEC;
    static constexpr bool kFlattens = false;  // each row has its statistics
    static constexpr int kHeldChunks = sizeof(T) == 2 ? 8 : 4;
    using Held = std::conditional_t<sizeof(T) == 2, T, float>;
    struct Raw {  // h as loaded, and where
        alignas(16) H h[kChunk];
        int64_t r, c0;
    };
    const H *h;
    int64_t stride, cols;
    const A *row_stats;
    const P *weight, *bias;
    __device__ __forceinline__ void fetch(Raw &raw, int64_t r, int64_t c0) const {
        raw.r = r;
        raw.c0 = c0;
        const H *row = h + r * stride;
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < int(sizeof(H)) * kChunk / 16; i++)
                reinterpret_cast<uint4 *>(raw.h)[i] = reinterpret_cast<const uint4 *>(row + c0)[i];
        } else {
#pragma unroll
            for (int i = 0; i < kChunk; i++) raw.h[i] = c0 + i < cols ? row[c0 + i] : H(0.0f);
        }
    }
    __device__ __forceinline__ void values(float (&out)[kChunk], const Raw &raw) const {
        const A mean = row_stats[2 * raw.r], rstd = row_stats[2 * raw.r + 1];
        const A shift = -mean * rstd;
        A v[kChunk], w[kChunk], b[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            const bool in = VEC || raw.c0 + i < cols;
            v[i] = A(to_acc(raw.h[i]));
            w[i] = weight && in ? A(to_acc(weight[raw.c0 + i])) : A(1);
            b[i] = bias && in ? A(to_acc(bias[raw.c0 + i])) : A(0);
        }
        normalize_chunk<EXACT>(v, mean, rstd, shift, w, b);
#pragma unroll
        for (int i = 0; i < kChunk; i++) out[i] = float(to_acc(from_acc<T>(v[i])));
    }
    __device__ __forceinline__ float amax(float running, const Raw &raw) const {
        float v[kChunk];
        values(v, raw);
        return finite_max(running, v);
    }
};

// The FP8 output's cast, after the first pass: rowwise, or tensorwise from
// the max the first pass left in fp8.amax.
template <typename T, typename H, typename P, bool EXACT>
void launch_norm_fp8_cast(const fo_norm_forward_params &a, cudaStream_t stream) {
    const fo_fp8_out &out = *a.fp8;
    const H *h = static_cast<const H *>(a.residual ? a.residual_out : a.x);
    const int64_t stride = a.residual ? a.cols : a.x_row_stride;
    const bool vec = a.cols % kChunk == 0 && aligned16(h) && stride_aligned16<H>(stride, a.rows) &&
                     out.y % 8 == 0;
    uint8_t *y = reinterpret_cast<uint8_t *>(out.y), *y_t = reinterpret_cast<uint8_t *>(out.y_t);
    float *scale = reinterpret_cast<float *>(out.scale),
          *amax = reinterpret_cast<float *>(out.amax);
    const bool e4m3 = out.fp8_dtype == FO_FP8_E4M3;
    auto with = [&](auto source) {
        if (out.recipe == FO_FP8_ROWWISE)
            e4m3 ? launch_rowwise<true>(y, scale, amax, source, a.rows, a.cols, stream)
                 : launch_rowwise<false>(y, scale, amax, source, a.rows, a.cols, stream);
        else
            e4m3 ? launch_tensorwise_cast<true>(y, y_t, scale, nullptr, amax, 1, source, false,
                                                a.rows, a.cols, stream)
                 : launch_tensorwise_cast<false>(y, y_t, scale, nullptr, amax, 1, source, false,
                                                 a.rows, a.cols, stream);
    };
    const auto *stats = static_cast<const acc_t<T> *>(a.row_stats);
    const P *weight = static_cast<const P *>(a.weight), *bias = static_cast<const P *>(a.bias);
    if (vec)
        with(NormSource<T, H, P, true, EXACT>{h, stride, a.cols, stats, weight, bias});
    else
        with(NormSource<T, H, P, false, EXACT>{h, stride, a.cols, stats, weight, bias});
}

// The FP8 output: the plan's kernel without y (the statistics into the
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
    if (a.rows > 0 && a.cols > 0) launch_forward<T>(a, plan, stream);
    const bool exact = kExactNormalize<T> || plan.kernel == NormKernel::kStreaming;
    dispatch_companion<T>(a.residual ? a.residual_dtype : a.dtype, [&](auto h_tag) {
        using H = decltype(h_tag);
        dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
            using P = decltype(param_tag);
            exact ? launch_norm_fp8_cast<T, H, P, true>(a, stream)
                  : launch_norm_fp8_cast<T, H, P, false>(a, stream);
        });
    });
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
            if (a->fp8)
                launch_forward_fp8<T>(*a, device_index, info, cudaStream_t(stream));
            else
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
