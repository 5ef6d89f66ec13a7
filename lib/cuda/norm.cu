// norm.cu: LayerNorm and RMSNorm with fused residual add and dropout on CUDA.
//
// Aligned rows that fit in registers take the one-pass kernels of
// norm_registers.cuh; aligned rows too long for registers take, where they
// fit in shared memory, the kernels of norm_shared.cuh (forward without a
// residual) and norm_shared_backward.cuh (backward, not fp64, to 131072
// elements on Hopper, 16384 before). The rest (unaligned or odd-length
// rows, fp64, longer rows) take the streaming kernels here. They run TX
// threads per row (TX = the power of two covering the row's 8-element
// chunks, 32..512) and TY rows per block, so narrow rows still fill a
// block and wide rows (to 262144 and beyond) loop. They make two passes
// over a row: the statistics (LayerNorm's mean and variance together,
// merged by Chan's rule), then the output; the
// second pass re-reads the row, from L2 where it is still there (see
// kForwardHints). Their weight and bias gradients are a column reduction
// with the same fixed two-pass scheme as the bias gradient of
// bias_scale_relu.
//
// Which kind runs depends on the shape and on alignment, and the two sum in
// different orders: the bits of an output are the same on every run of the
// same call (same shapes, strides and alignment), not across layouts.
#include "norm_common.cuh"
#include "norm_registers.cuh"
#include "norm_shared.cuh"
#include "norm_shared_backward.cuh"

namespace fo {
namespace {

// Wide rows outgrow L2 while they are being re-read (ncu, 4096 x 65536
// bf16: 1.4x the minimum bytes forward, 1.7x backward), so a row's last
// read and the outputs are marked evict-first, keeping L2 for the rows
// still to be re-read: on the H100 the 16-bit forward 6-13% faster at 65536
// columns and the backward 3-15%, but the fp32 forward 10-16% slower, so
// the forward marks them for 16-bit types only.
template <typename T>
constexpr bool kForwardHints = sizeof(T) == 2;
constexpr bool kBackwardHints = true;
// Rows a thread of the weight/bias column kernel loads at once (1 was
// 1-3% slower, 4 7% slower in bf16).
constexpr int kColumnBatch = 2;

// T: x and y; R: residual, residual_out (T or float); P: weight, bias.
template <typename T, typename R, typename P, bool VEC>
__global__ void __launch_bounds__(kMaxRowThreads) norm_forward_kernel(fo_norm_forward_params a) {
    using A = acc_t<T>;
    const T *x = static_cast<const T *>(a.x);
    const R *residual = static_cast<const R *>(a.residual);
    R *residual_out = static_cast<R *>(a.residual_out);
    const P *weight = static_cast<const P *>(a.weight);
    const P *bias = static_cast<const P *>(a.bias);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    // the row loop is uniform across the block (row_sum holds barriers)
    for (int64_t base = blockIdx.x * int64_t(blockDim.y); base < a.rows;
         base += int64_t(gridDim.x) * blockDim.y) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        A sum_squares = 0;  // RMSNorm's statistic
        Moments<A> moments = {0, 0, 0};  // LayerNorm's, in the same pass
        // h = dropout(x) + residual, rounded to R as stored, and its statistics
        for (int64_t c = threadIdx.x; active && c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A h[kChunk];
            load_chunk<T, VEC>(h, x + r * a.x_row_stride + col, n);
            if (residual) {
                if (a.dropout_p > 0)
                    apply_dropout(h, r, col, cols, a.dropout_p, a.seed, a.offset);
                acc_t<R> res[kChunk];
                load_chunk<R, VEC>(res, residual + r * a.residual_row_stride + col, n);
                acc_t<R> stored[kChunk];
#pragma unroll
                for (int i = 0; i < kChunk; i++) {
                    stored[i] = acc_t<R>(h[i]) + res[i];
                    h[i] = A(to_acc(from_acc<R>(stored[i])));
                }
                store_chunk<R, VEC>(residual_out + r * cols + col, stored, n);
            }
            if (rms) {
#pragma unroll
                for (int i = 0; i < kChunk; i++) sum_squares += h[i] * h[i];  // 0 past n
                continue;
            }
            // the chunk's moments (about its own mean, from registers), merged in
            A sum = 0;
#pragma unroll
            for (int i = 0; i < kChunk; i++) sum += h[i];
            Moments<A> chunk = {A(n), sum * reciprocal(A(n)), 0};
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                if (i < n) chunk.m2 += (h[i] - chunk.mean) * (h[i] - chunk.mean);
            moments = merge(moments, chunk);
        }
        A mean = 0, variance;
        if (rms) {
            variance = row_sum(sum_squares) / A(cols);
        } else {
            moments = row_moments(moments);
            mean = moments.mean;
            variance = moments.m2 / A(cols);
        }
        // the h of the output pass: residual_out as just written (plain
        // loads: this kernel wrote it), or x; its last read
        auto load_h = [&](A(&h)[kChunk], int64_t col, int n) {
            if (residual) {
                acc_t<R> v[kChunk];
                load_chunk<R, VEC, false, kForwardHints<T>>(v, residual_out + r * cols + col, n);
#pragma unroll
                for (int i = 0; i < kChunk; i++) h[i] = A(v[i]);
            } else {
                load_chunk<T, VEC, true, kForwardHints<T>>(h, x + r * a.x_row_stride + col, n);
            }
        };
        if (!active) continue;
        const A rstd = A(1) / sqrt(variance + A(a.eps));
        if (threadIdx.x == 0) {
            if (a.mean) static_cast<A *>(a.mean)[r] = mean;
            if (a.rstd) static_cast<A *>(a.rstd)[r] = rstd;
        }
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A h[kChunk], w[kChunk], b[kChunk];
            load_h(h, col, n);
            load_params(w, weight ? weight + col : nullptr, n, A(1));
            load_params(b, bias ? bias + col : nullptr, n, A(0));
#pragma unroll
            for (int i = 0; i < kChunk; i++) h[i] = (h[i] - mean) * rstd * w[i] + b[i];
            store_chunk<T, VEC, kForwardHints<T>>(static_cast<T *>(a.y) + r * cols + col, h, n);
        }
    }
}

// T: dy, dx; H: h, dresidual_out, dresidual (T or float); P: weight.
template <typename T, typename H, typename P, bool VEC>
__global__ void __launch_bounds__(kMaxRowThreads) norm_backward_rows_kernel(fo_norm_backward_params a) {
    using A = acc_t<T>;
    const T *dy = static_cast<const T *>(a.dy);
    const H *h = static_cast<const H *>(a.h);
    const H *dresidual_out = static_cast<const H *>(a.dresidual_out);
    const P *weight = static_cast<const P *>(a.weight);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    for (int64_t base = blockIdx.x * int64_t(blockDim.y); base < a.rows;
         base += int64_t(gridDim.x) * blockDim.y) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        const A mean = !active || rms ? A(0) : static_cast<const A *>(a.mean)[r];
        const A rstd = active ? static_cast<const A *>(a.rstd)[r] : A(0);
        // w * dy and the normalized input xhat of one chunk (last: the
        // row's last read of them, the dx pass)
        auto load = [&](auto last, A(&wdy)[kChunk], A(&xhat)[kChunk], int64_t col, int n) {
            constexpr bool kLast = decltype(last)::value && kBackwardHints;
            A w[kChunk];
            acc_t<H> hv[kChunk];
            load_chunk<T, VEC, true, kLast>(wdy, dy + r * a.dy_row_stride + col, n);
            load_chunk<H, VEC, true, kLast>(hv, h + r * a.h_row_stride + col, n);
            load_params(w, weight ? weight + col : nullptr, n, A(1));
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                wdy[i] *= w[i];
                xhat[i] = (A(hv[i]) - mean) * rstd;
            }
        };
        A sum_wdy = 0, sum_wdy_xhat = 0;
        for (int64_t c = threadIdx.x; active && c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A wdy[kChunk], xhat[kChunk];
            load(std::false_type{}, wdy, xhat, col, n);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                sum_wdy += wdy[i];  // zero past n: load_chunk pads with 0
                sum_wdy_xhat += wdy[i] * xhat[i];
            }
        }
        const A mean_wdy = rms ? A(0) : row_sum(sum_wdy) / A(cols);
        const A mean_wdy_xhat = row_sum(sum_wdy_xhat) / A(cols);
        for (int64_t c = threadIdx.x; active && c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A dh[kChunk], xhat[kChunk];
            load(std::true_type{}, dh, xhat, col, n);
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                dh[i] = rstd * (dh[i] - mean_wdy - xhat[i] * mean_wdy_xhat);
            if (dresidual_out) {
                acc_t<H> g[kChunk];
                load_chunk<H, VEC>(g, dresidual_out + r * a.dresidual_out_row_stride + col, n);
#pragma unroll
                for (int i = 0; i < kChunk; i++) dh[i] += A(g[i]);
            }
            if (a.dresidual) {
                acc_t<H> out[kChunk];
#pragma unroll
                for (int i = 0; i < kChunk; i++) out[i] = acc_t<H>(dh[i]);
                store_chunk<H, VEC, kBackwardHints>(static_cast<H *>(a.dresidual) + r * cols + col, out, n);
            }
            if (a.dx) {
                if (a.dropout_p > 0)
                    apply_dropout(dh, r, col, cols, a.dropout_p, a.seed, a.offset);
                store_chunk<T, VEC, kBackwardHints>(static_cast<T *>(a.dx) + r * cols + col, dh, n);
            }
        }
    }
}

// Per-column sums of dy * xhat (weight) and dy (bias) over this block's
// rows, to partials[0 or 1][blockIdx.y][col]; geometry as row_geometry.
template <typename T, typename H, bool VEC>
__global__ void norm_backward_columns_kernel(fo_norm_backward_params a,
                                             acc_t<T> *__restrict__ partials) {
    using A = acc_t<T>;
    __shared__ A column_sums[2][kThreads * kChunk];
    const T *dy = static_cast<const T *>(a.dy);
    const H *h = static_cast<const H *>(a.h);
    const A *mean = static_cast<const A *>(a.mean);
    const A *rstd = static_cast<const A *>(a.rstd);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    A *weight_partials = partials;
    A *bias_partials = partials + int64_t(gridDim.y) * cols;
    for (int64_t base = blockIdx.x * int64_t(blockDim.x); base < chunks;
         base += int64_t(gridDim.x) * blockDim.x) {
        const int64_t c = base + threadIdx.x;
        const bool active = c < chunks;
        const int64_t col = c * kChunk;
        const int n = active ? int(cols - col < kChunk ? cols - col : kChunk) : 0;
        A dw[kChunk] = {}, db[kChunk] = {};
        // kColumnBatch rows at a time, all their loads issued first (one at
        // a time, ncu found this kernel waiting on memory at 62% of its
        // bandwidth); added up in row order all the same
        const int64_t stride = int64_t(gridDim.y) * blockDim.y;
        for (int64_t r0 = blockIdx.y * int64_t(blockDim.y) + threadIdx.y;
             active && r0 < a.rows; r0 += kColumnBatch * stride) {
            A g[kColumnBatch][kChunk], m[kColumnBatch], s[kColumnBatch];
            acc_t<H> hv[kColumnBatch][kChunk];
#pragma unroll
            for (int b = 0; b < kColumnBatch; b++) {
                const int64_t r = r0 + b * stride;
                if (r < a.rows) {
                    load_chunk<T, VEC>(g[b], dy + r * a.dy_row_stride + col, n);
                    load_chunk<H, VEC>(hv[b], h + r * a.h_row_stride + col, n);
                    m[b] = rms ? A(0) : mean[r];
                    s[b] = rstd[r];
                } else {  // adds nothing
#pragma unroll
                    for (int i = 0; i < kChunk; i++) g[b][i] = hv[b][i] = 0;
                    m[b] = s[b] = 0;
                }
            }
#pragma unroll
            for (int b = 0; b < kColumnBatch; b++)
#pragma unroll
                for (int i = 0; i < kChunk; i++) {
                    dw[i] += g[b][i] * (A(hv[b][i]) - m[b]) * s[b];
                    db[i] += g[b][i];
                }
        }
        // the TY threads of each column, summed in ty order
        const int slot = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            column_sums[0][slot * kChunk + i] = dw[i];
            column_sums[1][slot * kChunk + i] = db[i];
        }
        __syncthreads();
        if (threadIdx.y == 0 && active) {
            for (unsigned t = 1; t < blockDim.y; t++)
#pragma unroll
                for (int i = 0; i < kChunk; i++) {
                    const int other = (t * blockDim.x + threadIdx.x) * kChunk + i;
                    dw[i] += column_sums[0][other];
                    db[i] += column_sums[1][other];
                }
            // only the partials asked for (the workspace of a call without
            // dbias ends with the weight's); VEC: 16-byte stores
            if (a.dweight) store_chunk<A, VEC>(weight_partials + blockIdx.y * cols + col, dw, n);
            if (a.dbias) store_chunk<A, VEC>(bias_partials + blockIdx.y * cols + col, db, n);
        }
        __syncthreads();
    }
}

// The forward of rows that a cluster of blocks holds in registers
// (forward_cluster_rows: RMSNorm, with a residual only in fp32): every
// access, kForwardMaxChunks chunks a thread, clusters of 2, 4 or 8 blocks.
template <typename T, typename P>
void launch_forward_clustered(const fo_norm_forward_params &a, const RegisterRows &g,
                              cudaStream_t stream) {
    constexpr int CPT = kForwardMaxChunks<T>;
    const dim3 grid(unsigned(g.groups * g.cluster)), block(unsigned(g.tx));
    dispatch_row_access<T>(a.cols, [&](auto access) {
        constexpr Access ACCESS = access.value;
        auto launch = [&](auto cluster) {
            constexpr int CLUSTER = cluster.value;
            if (!a.residual) {
                launch_clustered(norm_forward_registers_kernel<T, T, P, CPT, kX, ACCESS, CLUSTER>,
                                 grid, block, CLUSTER, stream, a);
                return;
            }
            if constexpr (std::is_same_v<T, float>) {  // the only residual rows it takes
                if (a.dropout_p > 0)
                    launch_clustered(
                        norm_forward_registers_kernel<T, T, P, CPT, kDropoutXPlusResidual, ACCESS,
                                                      CLUSTER>,
                        grid, block, CLUSTER, stream, a);
                else
                    launch_clustered(
                        norm_forward_registers_kernel<T, T, P, CPT, kXPlusResidual, ACCESS, CLUSTER>,
                        grid, block, CLUSTER, stream, a);
            }
        };
        if (g.cluster == 2) launch(std::integral_constant<int, 2>{});
        if (g.cluster == 4) launch(std::integral_constant<int, 4>{});
        if (g.cluster == 8) launch(std::integral_constant<int, 8>{});
    });
}

// Whether the backward's operands are 16-byte aligned with rows of whole
// chunks (the vector paths).
template <typename T>
bool backward_vectors(const fo_norm_backward_params &a) {
    const bool h_is_float = a.h_dtype == FO_DTYPE_F32;
    return a.cols % kChunk == 0 && aligned16(a.dy) && aligned16(a.h) && aligned16(a.dx) &&
           aligned16(a.dresidual) && aligned16(a.dresidual_out) &&
           stride_aligned16<T>(a.dy_row_stride, a.rows) &&
           (h_is_float ? stride_aligned16<float>(a.h_row_stride, a.rows) &&
                             stride_aligned16<float>(a.dresidual_out_row_stride, a.rows)
                       : stride_aligned16<T>(a.h_row_stride, a.rows) &&
                             stride_aligned16<T>(a.dresidual_out_row_stride, a.rows));
}

// The register backward's launch shape for this call; cpt = 0 where it does
// not run (unaligned operands, or rows too long for registers).
template <typename T>
RegisterRows backward_registers(const fo_norm_backward_params &a) {
    RegisterRows fast = backward_register_rows<T>(a.rows, a.cols);
    if (!backward_vectors<T>(a) || !aligned16(a.weight)) fast.cpt = 0;
    return fast;
}

// Calls f(std::integral_constant<kernel type, kernel>) with the register
// backward kernel of this call (of its types, row access and chunks a
// thread).
template <typename T, typename F>
void with_backward_registers_kernel(const fo_norm_backward_params &a, const RegisterRows &fast,
                                    F &&f) {
    dispatch_companion<T>(a.h_dtype, [&](auto h_tag) {
        dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
            dispatch_row_access<T>(a.cols, [&](auto access) {
                dispatch_chunks<kBackwardMaxChunks<T>>(fast.cpt, [&](auto cpt) {
                    constexpr auto kernel =
                        norm_backward_registers_kernel<T, decltype(h_tag), decltype(param_tag),
                                                       cpt.value, access.value>;
                    f(std::integral_constant<decltype(kernel), kernel>{});
                });
            });
        });
    });
}

// The register backward's partials parked in held dx rows, one cooperative
// launch (norm_held_partials.cuh): groups = 0 where not. Its grid is the
// workspace path's (fewer blocks only where the rows are too few for each
// to hold its iterations): from the shape alone, not the GPU. Where this
// GPU cannot hold it all at once, the workspace path runs instead.
struct HeldLaunch {
    HeldArgs args;
    int64_t groups = 0;
    size_t shared_bytes = 0;
};

template <typename T>
HeldLaunch held_launch(const fo_norm_backward_params &a, const RegisterRows &fast, int device) {
    HeldLaunch launch;
    if (fast.cpt == 0) return launch;
    int64_t groups = fast.groups;
    const int threads = fast.tx * fast.ty;
    HeldPlan plan = held_plan<T>(a, fast.ty, threads, groups, device);
    if (plan.iterations == 0) return launch;
    // blocks that each have their iterations to hold (fewer blocks own more
    // chunks each, which may take another iteration: then none)
    const int64_t holding = a.rows / (int64_t(fast.ty) * plan.iterations);
    if (groups > holding) {
        groups = holding;
        plan = held_plan<T>(a, fast.ty, threads, groups, device);
        if (plan.iterations == 0 || groups > a.rows / (int64_t(fast.ty) * plan.iterations))
            return launch;
    }
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        cudaGetLastError();  // a failed query is "no", not this op's error
        return launch;
    }
    with_backward_registers_kernel<T>(a, fast, [&](auto kernel) {
        per_sm = resident_blocks<kernel.value>(device, threads, plan.shared_bytes);
    });
    if (int64_t(per_sm) * sms < groups) return launch;
    const int64_t step = groups * fast.ty;
    launch.args.iterations = plan.iterations;
    launch.args.owned_shift = plan.owned_shift;
    launch.args.owners = plan.owners;
    launch.args.full = a.rows / step;
    launch.args.extra = a.rows % step;
    launch.groups = groups;
    launch.shared_bytes = plan.shared_bytes;
    return launch;
}

template <typename A, typename Kernel>
void launch_held(Kernel kernel, const fo_norm_backward_params &a, const RegisterRows &fast,
                 const HeldLaunch &held, cudaStream_t stream) {
    cudaLaunchAttribute cooperative = {};
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(held.groups));
    config.blockDim = dim3(fast.tx, fast.ty);
    config.dynamicSmemBytes = held.shared_bytes;
    config.stream = stream;
    config.attrs = &cooperative;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, kernel, a, static_cast<A *>(nullptr), held.args);
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int64_t fo_cuda_norm_workspace_bytes(const fo_norm_backward_params *a, int device_index) {
    if (!a->dweight && !a->dbias) return 0;
    bool held = false;  // the partials parked in dx: no workspace
    {
        // on the call's device, as the launch will be: the occupancy
        // query and the shared-memory attribute are the current device's
        DeviceGuard guard(device_index);
        if (guard.error() == cudaSuccess)
            dispatch_dtype(a->dtype, [&](auto tag) {
                using T = decltype(tag);
                const RegisterRows fast = backward_registers<T>(*a);
                if (fast.cpt > 0) {
                    held = held_launch<T>(*a, fast, device_index).groups > 0;
                    return;
                }
                // (fo_cuda_norm_backward's choice, made without launching)
                if (backward_vectors<T>(*a) && aligned16(a->weight))
                    dispatch_companion<T>(a->h_dtype, [&](auto h_tag) {
                        norm_backward_shared<T, decltype(h_tag)>(*a, nullptr, false, &held);
                    });
            });
        cudaGetLastError();  // a failed switch is "no", not this op's error
    }
    if (held) return 0;
    const int64_t rows = a->rows, cols = a->cols;
    const int dtype = a->dtype, with_bias = a->dbias != nullptr;
    const int64_t acc_bytes = dtype == FO_DTYPE_F64 ? 8 : 4;
    // room for whichever backward runs: the partials of the register
    // kernel, the shared-memory kernel or the streaming column kernel
    // (the register kernel's grid depends on the input's type: the largest)
    int64_t groups = row_geometry(rows, cols).grid.y;
    for (int64_t kernel_groups :
         {shared_backward_groups(rows, cols), backward_register_rows<double>(rows, cols).groups,
          backward_register_rows<float>(rows, cols).groups,
          backward_register_rows<__half>(rows, cols).groups})
        if (kernel_groups > groups) groups = kernel_groups;
    // the weight partials, then the bias partials (written only when dbias
    // is: RMSNorm's backward needs half)
    return (with_bias ? 2 : 1) * groups * cols * acc_bytes;
}

extern "C" int fo_cuda_norm_forward(int device_index, uintptr_t stream,
                                    const fo_norm_forward_params *a) {
    return launch_on("fo_norm_forward", device_index, [&] {
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            const bool vec =
                a->cols % kChunk == 0 && aligned16(a->x) && aligned16(a->y) &&
                stride_aligned16<T>(a->x_row_stride, a->rows) &&
                aligned16(a->residual) && aligned16(a->residual_out) &&
                (a->residual_dtype == FO_DTYPE_F32
                     ? stride_aligned16<float>(a->residual_row_stride, a->rows)
                     : stride_aligned16<T>(a->residual_row_stride, a->rows));
            const RegisterRows fast = forward_register_rows<T>(a->rows, a->cols);
            const bool params_aligned = aligned16(a->weight) && aligned16(a->bias);
            const bool registers = vec && fast.cpt > 0 && params_aligned;
            // RMSNorm rows too long for registers take a cluster's
            // (forward_cluster_rows). Without a residual, the other rows too
            // long for registers take the
            // shared-memory kernel, where they fit; so do fp64's rows of 512
            // threads in registers (above 2048 elements). At 80 registers,
            // one block an SM, such rows ran at 64-70% of the copy ceiling
            // on the H100 and the shared-memory kernel 8-30% faster
            // (bench/results/h100/tuning, run 9); since, the register
            // kernel has gained: 16-bit rows of 16384 at 64 registers ran
            // 5-10% faster than in shared memory (runs 20-21), and fp32
            // rows of 16384 at 80 registers, still one block an SM, 6-13%
            // faster (run 82: LayerNorm 16384 x 16384 2643 -> 2989 GB/s).
            // (A row takes 512 threads only once kForwardMaxChunks a thread
            // would not hold it on 256, so it holds that many; unless the
            // tuning knob FO_FORWARD_ROW_THREADS is 512.)
            constexpr bool rows_of_512_in_registers = !std::is_same_v<T, double>;
            const RegisterRows spread =
                registers || !vec || !params_aligned
                    ? RegisterRows{}
                    : forward_cluster_rows<T>(a->rows, a->cols, a->kind, a->residual != nullptr);
            const bool clustered = spread.cpt > 0 && has_clusters(device_index);
            const bool shared = vec && !a->residual && params_aligned &&
                                !clustered &&
                                (!registers || (fast.tx == kMaxRowThreads && !rows_of_512_in_registers));
            const RowBlocks g = row_blocks(a->rows, a->cols);
            const dim3 grid(unsigned(fast.groups)), block(fast.tx, fast.ty);
            const cudaStream_t on = cudaStream_t(stream);
            dispatch_companion<T>(a->param_dtype, [&](auto param_tag) {
                using P = decltype(param_tag);
                if (shared) {
                    const int64_t blocks = shared_forward_blocks<T, P>(a->rows, a->cols);
                    if (blocks > 0) {
                        norm_forward_shared_kernel<T, P>
                            <<<unsigned(blocks), shared_row_threads(a->cols),
                               shared_row_bytes<T>(a->cols), on>>>(*a);
                        return;
                    }
                }
                if (registers) {
                    dispatch_row_access<T>(a->cols, [&](auto access) {
                        constexpr Access ACCESS = access.value;
                        dispatch_chunks<kForwardMaxChunks<T>>(fast.cpt, [&](auto cpt) {
                            constexpr int CPT = cpt.value;
                            if (!a->residual) {
                                norm_forward_registers_kernel<T, T, P, CPT, kX, ACCESS>
                                    <<<grid, block, 0, on>>>(*a);
                                return;
                            }
                            dispatch_companion<T>(a->residual_dtype, [&](auto residual_tag) {
                                using R = decltype(residual_tag);
                                if (a->dropout_p > 0)
                                    norm_forward_registers_kernel<T, R, P, CPT,
                                                                  kDropoutXPlusResidual, ACCESS>
                                        <<<grid, block, 0, on>>>(*a);
                                else
                                    norm_forward_registers_kernel<T, R, P, CPT,
                                                                  kXPlusResidual, ACCESS>
                                        <<<grid, block, 0, on>>>(*a);
                            });
                        });
                    });
                    return;
                }
                if constexpr (!std::is_same_v<T, double>) {  // fp64: no clusters
                    if (clustered) {
                        launch_forward_clustered<T, P>(*a, spread, on);
                        return;
                    }
                }
                dispatch_companion<T>(a->residual_dtype, [&](auto residual_tag) {
                    using R = decltype(residual_tag);
                    auto kernel = vec ? norm_forward_kernel<T, R, P, true>
                                      : norm_forward_kernel<T, R, P, false>;
                    kernel<<<g.grid, g.block, 0, on>>>(*a);
                });
            });
        });
    });
}

extern "C" int fo_cuda_norm_backward(int device_index, uintptr_t stream,
                                     const fo_norm_backward_params *a) {
    return launch_on("fo_norm_backward", device_index, [&] {
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            using A = acc_t<T>;
            const bool vec = backward_vectors<T>(*a);
            const RegisterRows fast = backward_registers<T>(*a);
            if (fast.cpt > 0) {
                // one pass over dy and h for every output; then the
                // partials' fixed-order sum: in the same launch where they
                // are parked in dx (the workspace query made the same
                // choice), else the finishing kernel's
                const HeldLaunch held = held_launch<T>(*a, fast, device_index);
                A *partials = static_cast<A *>(a->workspace);
                with_backward_registers_kernel<T>(*a, fast, [&](auto kernel) {
                    const auto registers_kernel = kernel.value;
                    if (held.groups > 0)
                        launch_held<A>(registers_kernel, *a, fast, held, cudaStream_t(stream));
                    else
                        registers_kernel<<<unsigned(fast.groups), dim3(fast.tx, fast.ty), 0,
                                           cudaStream_t(stream)>>>(*a, partials, HeldArgs{});
                });
                if ((a->dweight || a->dbias) && held.groups == 0)
                    dispatch_companion<T>(a->param_dtype, [&](auto param_tag) {
                        using P = decltype(param_tag);
                        finish_column_partials(static_cast<P *>(a->dweight),
                                               static_cast<P *>(a->dbias), partials, fast.groups,
                                               a->cols, cudaStream_t(stream));
                    });
                return;
            }
            dispatch_companion<T>(a->h_dtype, [&](auto h_tag) {
                using H = decltype(h_tag);
                if (vec && aligned16(a->weight) && norm_backward_shared<T, H>(*a, cudaStream_t(stream)))
                    return;
                if (a->dx || a->dresidual) {
                    const RowBlocks g = row_blocks(a->rows, a->cols);
                    dispatch_companion<T>(a->param_dtype, [&](auto param_tag) {
                        using P = decltype(param_tag);
                        auto kernel = vec ? norm_backward_rows_kernel<T, H, P, true>
                                          : norm_backward_rows_kernel<T, H, P, false>;
                        kernel<<<g.grid, g.block, 0, cudaStream_t(stream)>>>(*a);
                    });
                }
                if (!a->dweight && !a->dbias) return;
                const RowGeometry g = row_geometry(a->rows, a->cols);
                A *partials = static_cast<A *>(a->workspace);
                auto kernel = vec ? norm_backward_columns_kernel<T, H, true>
                                  : norm_backward_columns_kernel<T, H, false>;
                kernel<<<g.grid, g.block, 0, cudaStream_t(stream)>>>(*a, partials);
                dispatch_companion<T>(a->param_dtype, [&](auto param_tag) {
                    using P = decltype(param_tag);
                    finish_column_partials(static_cast<P *>(a->dweight),
                                           static_cast<P *>(a->dbias), partials, g.grid.y,
                                           a->cols, cudaStream_t(stream));
                });
            });
        });
    });
}
