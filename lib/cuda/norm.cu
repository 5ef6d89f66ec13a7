// norm.cu: LayerNorm and RMSNorm with fused residual add and dropout on CUDA:
// the entry points. Each makes the call's plan (norm_plan.cuh: which
// kernel, grid, cluster and workspace) and launches what it says.
#include "norm_plan.cuh"

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
