// norm_plan.cuh: which kernel a norm call takes, on what grid, in what
// clusters, with what workspace: norm_forward_plan and norm_backward_plan,
// one function a direction, from the shape, the dtypes, the operands'
// alignment and the device. The launchers launch what the plan says; the
// backward's workspace query answers the plan's workspace_bytes, so the
// query, norm.c's workspace check and the launch cannot disagree. The
// choices that differ by dtype are the table kNormTuning; what a device can
// do is asked once a device (device_info, resident_blocks: common.cuh).
//
// The kernels, fastest first where they apply (all but the streaming ones
// need every operand 16-byte aligned and rows of whole 8-element chunks):
//   forward  registers (norm_registers.cuh): a row held in registers;
//            cluster (same kernel): RMSNorm rows past a block's registers,
//              held by a thread block cluster (sm_90+);
//            shared (norm_shared.cuh): longer rows without a residual,
//              held in shared memory;
//            streaming (norm_streaming.cuh): the rest, reading a row twice.
//   backward registers: dy and h held in registers, the weight and bias
//              partials parked in dx (no workspace) where the grid can be
//              resident at once (norm_held_partials.cuh);
//            shared (norm_shared_backward.cuh): 8193 to 131072 elements,
//              in clusters past 16384, partials parked likewise where they
//              can be (norm_shared_held_partials.cuh);
//            streaming: a row kernel and a column kernel.
// Which kernel runs decides the order of the sums, so an output's bits are
// the same on every run of the same call, not across layouts or GPUs.
#pragma once

#include "norm_registers.cuh"
#include "norm_shared.cuh"
#include "norm_shared_backward.cuh"
#include "norm_streaming.cuh"

namespace fo {
namespace {

// The launch choices that differ by dtype, by element size. Measured on the
// H100 against the alternatives, one line each:
// - forward_target_chunks, forward_row_threads: the register forward aims
//   for that many chunks a thread on at most that many threads a row (more
//   threads only where the row would not fit kForwardMaxChunks a thread).
//   16-bit 4 on 128: 4-9% faster than 2 on 256 from 16384 x 1024 up. fp32 2
//   on 256 (4 on fewer threads at 1024-4096 elements: 0-5% slower), holding
//   4 on 256 past 4096 elements (3-9% faster than shared memory at 8192).
// - forward_cluster, forward_cluster_residual: RMSNorm rows past a block's
//   registers take a cluster (65536 columns: +5-8% in 16-bit against shared
//   memory, +11% fp32 against streaming), with a residual in fp32 only
//   (+7%; 16-bit x with a residual 6% slower). LayerNorm never (3-11%
//   slower: its moments cross the cluster).
// - forward_shared_rows_of_512: rows that take 512 threads in registers go
//   to the shared-memory kernel where they fit: fp64's (one block an SM at
//   128 registers); 16-bit and fp32 rows of 16384 ran 5-13% faster in
//   registers.
// - backward_target_chunks: 16-bit 2 (10-25% faster than 1 on 512 threads),
//   fp32 and fp64 1 (fp32 at 2: 0-12% slower).
// - backward_shared: the shared-memory backward (fp64's partials would not
//   fit its registers).
struct NormTuning {
    int forward_target_chunks, forward_row_threads;
    bool forward_cluster, forward_cluster_residual, forward_shared_rows_of_512;
    int backward_target_chunks;
    bool backward_shared;
};
constexpr NormTuning kNormTuning[] = {
    //        forward: target  row      cluster  cluster    512 rows  | backward: target  shared
    //                 chunks  threads  (RMS)    +residual  shared    |           chunks
    /* 16-bit */ {4, 128, true, false, false, 2, true},
    /* fp32   */ {2, 256, true, true, false, 1, true},
    /* fp64   */ {1, 128, false, false, true, 1, false},
};
template <typename T>
constexpr NormTuning kTuning = kNormTuning[sizeof(T) == 2   ? 0
                                           : sizeof(T) == 4 ? 1
                                                            : 2];

// Fixed choices, the same for every dtype:
// - short rows share a block of kThreads (TY rows of TX): a warp a block,
//   as torch.compile launches them, ran 0.82-0.86x;
// - the register backward's grid is persistent and depends on the shape
//   and dtype alone (it decides which rows each partial sums, and so the
//   bits of dweight): the threads resident at once on kPersistentSMs SMs
//   (an H100 or H200 has 132) at the register budget of the instantiation
//   with h of the same type, so no block waits for a second wave and the
//   partials stay small;
// - the shared-memory backward takes at most kClusterGroups groups of 1, 2,
//   4 or 8 blocks (a block on each SM of an H100 or H200), as many as are
//   resident at once (a second wave runs at half the speed; on the H100 66,
//   31 and 15 clusters of 2, 4 and 8; counts that fit every H100 and H200
//   left SMs idle, 4-18% slower), and streams where those would leave half
//   the SMs idle.
constexpr int kForwardBlockThreads = kThreads;
constexpr int64_t kPersistentSMs = 128;
constexpr int kMaxCluster = 8;  // the portable cluster size limit
constexpr int64_t kClusterGroups[] = {132, 66, 33, 16};
// Shared memory a block keeps beside a row held there (the row sums' own).
constexpr int64_t kSharedReserve = 4096;

// The launch shape of the register kernels for one row length.
struct RegisterRows {
    int tx = 0, ty = 0, cpt = 0;  // cpt = 0: the row does not fit
    int64_t groups = 0;  // blocks (clusters): ceil(rows / ty), capped
    int cluster = 1;  // blocks a row
};

// Chunks a thread: as few threads as keep `target` chunks each (so every
// thread has several 16-byte loads in flight), at least a warp and at most
// `max_tx` a row, more (to kMaxRowThreads) only where the row would not fit
// in max_chunks a thread; then the power-of-two chunks a thread that covers
// the row. Narrow rows share a block of block_threads (TY rows).
inline RegisterRows register_rows(int64_t rows, int64_t cols, int target, int max_tx,
                                  int max_chunks, int64_t max_groups,
                                  int block_threads = kThreads) {
    RegisterRows g;
    const int64_t chunks = chunks_per_row(cols);
    if (target > max_chunks) target = max_chunks;
    int tx = 32;
    while (tx < max_tx && int64_t(tx) * target < chunks) tx *= 2;
    while (tx < kMaxRowThreads && int64_t(tx) * max_chunks < chunks) tx *= 2;
    int cpt = 1;
    while (int64_t(tx) * cpt < chunks) cpt *= 2;
    if (cpt > max_chunks) return g;
    g.tx = tx;
    g.cpt = cpt;
    g.ty = tx >= block_threads ? 1 : block_threads / tx;
    g.groups = (rows + g.ty - 1) / g.ty;
    if (g.groups > max_groups) g.groups = max_groups;
    if (g.groups < 1) g.groups = 1;
    return g;
}

template <typename T>
RegisterRows forward_register_rows(int64_t rows, int64_t cols) {
    return register_rows(rows, cols, kTuning<T>.forward_target_chunks,
                         kTuning<T>.forward_row_threads, kForwardMaxChunks<T>, kMaxRowGroups,
                         kForwardBlockThreads);
}

// A cluster of 2, 4 or 8 blocks of up to kMaxRowThreads threads, a row held
// kForwardMaxChunks chunks a thread; cpt = 0 where the row is too long.
template <typename T>
RegisterRows forward_cluster_rows(int64_t rows, int64_t cols) {
    RegisterRows g;
    constexpr int kCpt = kForwardMaxChunks<T>;
    const int64_t chunks = chunks_per_row(cols);
    int cluster = 2;
    while (cluster < kMaxCluster && int64_t(cluster) * kMaxRowThreads * kCpt < chunks) cluster *= 2;
    if (int64_t(cluster) * kMaxRowThreads * kCpt < chunks) return g;
    int tx = 32;
    while (int64_t(cluster) * tx * kCpt < chunks) tx *= 2;
    g.tx = tx;
    g.ty = 1;
    g.cpt = kCpt;
    g.cluster = cluster;
    g.groups = rows < kMaxRowGroups ? (rows < 1 ? 1 : rows) : kMaxRowGroups;
    return g;
}

// The register backward's shape: as register_rows, its groups capped at
// the persistent grid (1024 threads an SM within 64 registers, else 512).
template <typename T>
RegisterRows backward_register_rows(int64_t rows, int64_t cols) {
    RegisterRows g = register_rows(rows, cols, kTuning<T>.backward_target_chunks, kMaxRowThreads,
                                   kBackwardMaxChunks<T>, kMaxRowGroups);
    if (g.cpt == 0) return g;
    const bool two_blocks =
        !std::is_same_v<T, double> && backward_held_bytes<T>(g.cpt, sizeof(T)) <= 128;
    const int64_t blocks =
        kPersistentSMs * kMaxRowThreads * (two_blocks ? 2 : 1) / (int64_t(g.tx) * g.ty);
    if (g.groups > blocks) g.groups = blocks;
    return g;
}

// The blocks a row of the shared-memory backward is split across: 1, 2, 4
// or 8, or 0 where it is too long.
inline int shared_backward_cluster(int64_t cols) {
    for (int cluster = 1; cluster <= kMaxCluster; cluster *= 2)
        if (chunks_per_row(cols) <= cluster * kSliceChunks) return cluster;
    return 0;
}

// The register backward kernel of this call (its types, row access and
// chunks a thread), passed to f as std::integral_constant<kernel type, kernel>.
template <typename T, typename F>
void with_backward_registers_kernel(const fo_norm_backward_params &a, int cpt, F &&f) {
    dispatch_companion<T>(a.h_dtype, [&](auto h_tag) {
        using H = decltype(h_tag);  // here, not in an inner lambda (below)
        dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
            using P = decltype(param_tag);
            dispatch_row_access<T>(a.cols, [&](auto access) {
                dispatch_chunks<kBackwardMaxChunks<T>>(cpt, [&](auto chunks) {
                    constexpr auto kernel =
                        norm_backward_registers_kernel<T, H, P, chunks.value, access.value>;
                    f(std::integral_constant<decltype(kernel), kernel>{});
                });
            });
        });
    });
}

enum class NormKernel { kStreaming, kRegisters, kCluster, kShared };

struct ForwardPlan {
    NormKernel kernel = NormKernel::kStreaming;
    bool vec = false;  // kStreaming: 16-byte chunks
    int cpt = 0;  // kRegisters, kCluster: chunks a thread
    int cluster = 1;  // kCluster: blocks a row
    dim3 grid, block;
    size_t shared_bytes = 0;  // kShared: the row's dynamic shared memory
};

// The forward's plan. `device` is current (its kernel queries are the
// current device's), `info` its DeviceInfo (all zeros: nothing is asked).
template <typename T>
ForwardPlan norm_forward_plan(const fo_norm_forward_params &a, int device, const DeviceInfo &info) {
    constexpr NormTuning kTune = kTuning<T>;
    ForwardPlan plan;
    plan.vec =
        a.cols % kChunk == 0 && aligned16(a.x) && aligned16(a.y) &&
        stride_aligned16<T>(a.x_row_stride, a.rows) && aligned16(a.residual) &&
        aligned16(a.residual_out) &&
        (a.residual_dtype == FO_DTYPE_F32 ? stride_aligned16<float>(a.residual_row_stride, a.rows)
                                          : stride_aligned16<T>(a.residual_row_stride, a.rows));
    const bool aligned = plan.vec && aligned16(a.weight) && aligned16(a.bias);
    const RegisterRows fast = forward_register_rows<T>(a.rows, a.cols);
    const bool registers = aligned && fast.cpt > 0;
    if (registers && !(kTune.forward_shared_rows_of_512 && fast.tx == kMaxRowThreads)) {
        plan.kernel = NormKernel::kRegisters;
        plan.cpt = fast.cpt;
        plan.grid = dim3(unsigned(fast.groups));
        plan.block = dim3(unsigned(fast.tx), unsigned(fast.ty));
        return plan;
    }
    if (aligned && !registers && kTune.forward_cluster && a.kind == FO_NORM_RMS &&
        (!a.residual || kTune.forward_cluster_residual) && info.clusters) {
        const RegisterRows held = forward_cluster_rows<T>(a.rows, a.cols);
        if (held.cpt > 0) {
            plan.kernel = NormKernel::kCluster;
            plan.cpt = held.cpt;
            plan.cluster = held.cluster;
            plan.grid = dim3(unsigned(held.groups * held.cluster));
            plan.block = dim3(unsigned(held.tx));
            return plan;
        }
    }
    if (aligned && !a.residual) {
        // the shared-memory kernel: the blocks resident at once (each
        // prefetches its next row), at most one a row
        const int64_t bytes = shared_row_bytes<T>(a.cols);
        const int threads = shared_row_threads(a.cols);
        int64_t blocks = 0;
        if (bytes + kSharedReserve <= info.shared_optin)
            dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
                const void *kernel = reinterpret_cast<const void *>(
                    norm_forward_shared_kernel<T, decltype(param_tag)>);
                blocks = int64_t(info.multiprocessors) *
                         resident_blocks(kernel, device, threads, size_t(bytes));
            });
        if (blocks > 0) {
            plan.kernel = NormKernel::kShared;
            plan.grid = dim3(unsigned(blocks < a.rows ? blocks : a.rows));
            plan.block = dim3(unsigned(threads));
            plan.shared_bytes = size_t(bytes);
            return plan;
        }
    }
    if (registers) {  // (rows of 512 threads that shared memory does not hold)
        plan.kernel = NormKernel::kRegisters;
        plan.cpt = fast.cpt;
        plan.grid = dim3(unsigned(fast.groups));
        plan.block = dim3(unsigned(fast.tx), unsigned(fast.ty));
        return plan;
    }
    const RowBlocks g = row_blocks(a.rows, a.cols);
    plan.grid = g.grid;
    plan.block = g.block;
    return plan;
}

struct BackwardPlan {
    NormKernel kernel = NormKernel::kStreaming;  // kRegisters, kShared or kStreaming
    bool vec = false;  // kStreaming: 16-byte chunks
    int cpt = 0;  // kRegisters: chunks a thread
    int cluster = 1;  // kShared: blocks a row
    dim3 grid, block;  // kStreaming: the row kernel's
    size_t shared_bytes = 0;  // kRegisters parked: the held rows; kShared: the row slices
    // the weight and bias partials: parked in dx (one cooperative launch
    // sums them, no workspace), or `groups` rows of each gradient asked for
    // in the workspace, summed by finish_column_partials
    bool parked = false;
    HeldArgs held;  // kRegisters, parked
    DeferArgs defer;  // kShared, parked
    int64_t groups = 0;
    RowGeometry columns;  // kStreaming: the column kernel's grid (groups = grid.y)
    int64_t workspace_bytes = 0;
};

// The backward's plan (device and info as for the forward's).
template <typename T>
BackwardPlan norm_backward_plan(const fo_norm_backward_params &a, int device,
                                const DeviceInfo &info) {
    BackwardPlan plan;
    const bool h_is_float = a.h_dtype == FO_DTYPE_F32;
    plan.vec = a.cols % kChunk == 0 && aligned16(a.dy) && aligned16(a.h) && aligned16(a.dx) &&
               aligned16(a.dresidual) && aligned16(a.dresidual_out) &&
               stride_aligned16<T>(a.dy_row_stride, a.rows) &&
               (h_is_float ? stride_aligned16<float>(a.h_row_stride, a.rows) &&
                                 stride_aligned16<float>(a.dresidual_out_row_stride, a.rows)
                           : stride_aligned16<T>(a.h_row_stride, a.rows) &&
                                 stride_aligned16<T>(a.dresidual_out_row_stride, a.rows));
    const bool aligned = plan.vec && aligned16(a.weight);
    // the weight partials, then the bias partials: the kernels write the
    // bias set after the weight's place, so dbias takes two sets even
    // without dweight (RMSNorm, with no dbias, needs one)
    const int64_t sets = a.dbias ? 2 : a.dweight ? 1 : 0;
    auto partials_bytes = [&](int64_t groups) {
        return sets * groups * a.cols * int64_t(sizeof(acc_t<T>));
    };
    const RegisterRows fast = backward_register_rows<T>(a.rows, a.cols);
    if (aligned && fast.cpt > 0) {
        plan.kernel = NormKernel::kRegisters;
        plan.cpt = fast.cpt;
        plan.grid = dim3(unsigned(fast.groups));
        plan.block = dim3(unsigned(fast.tx), unsigned(fast.ty));
        plan.groups = fast.groups;
        plan.workspace_bytes = partials_bytes(fast.groups);
        // the partials parked in held dx rows: a grid of the same blocks
        // (fewer where the rows are too few for each to hold its
        // iterations), all resident at once on this GPU
        const int threads = fast.tx * fast.ty;
        int64_t groups = fast.groups;
        HeldPlan held = held_plan<T>(a, fast.ty, threads, groups, info.cooperative);
        if (held.iterations == 0) return plan;
        const int64_t holding = a.rows / (int64_t(fast.ty) * held.iterations);
        if (groups > holding) {
            groups = holding;
            held = held_plan<T>(a, fast.ty, threads, groups, info.cooperative);
            if (held.iterations == 0 || groups > a.rows / (int64_t(fast.ty) * held.iterations))
                return plan;
        }
        int per_sm = 0;
        with_backward_registers_kernel<T>(a, fast.cpt, [&](auto kernel) {
            per_sm = resident_blocks(reinterpret_cast<const void *>(kernel.value), device, threads,
                                     held.shared_bytes);
        });
        if (int64_t(per_sm) * info.multiprocessors < groups) return plan;
        const int64_t step = groups * fast.ty;
        plan.parked = true;
        plan.grid = dim3(unsigned(groups));
        plan.shared_bytes = held.shared_bytes;
        plan.held.iterations = held.iterations;
        plan.held.owned_shift = held.owned_shift;
        plan.held.owners = held.owners;
        plan.held.full = a.rows / step;
        plan.held.extra = a.rows % step;
        plan.groups = groups;
        plan.workspace_bytes = 0;
        return plan;
    }
    const int cluster = shared_backward_cluster(a.cols);
    if constexpr (kTuning<T>.backward_shared) {
        int64_t bytes = 0, groups = 0;
        if (aligned && cluster > 0)
            dispatch_companion<T>(a.h_dtype, [&](auto h_tag) {
                // A tag's type is named where the tag is a parameter: in an
                // inner lambda, where it is a capture, the host code nvcc
                // gives g++ 12 made decltype(h_tag) a reference, a kernel
                // instantiation the device code lacks (invalid device
                // function, invalid resource handle on the GPU)
                using H = decltype(h_tag);
                dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
                    using P = decltype(param_tag);
                    bytes = shared_backward_bytes<T, H, P>(a.cols, cluster);
                    if (bytes + kSharedReserve > info.shared_optin) return;
                    const int64_t most = kClusterGroups[cluster == 8   ? 3
                                                        : cluster == 4 ? 2
                                                        : cluster == 2 ? 1
                                                                       : 0];
                    groups = a.rows < 1 ? 1 : a.rows < most ? a.rows : most;
                    const void *kernel =
                        reinterpret_cast<const void *>(norm_backward_shared_kernel<T, H, P>);
                    int64_t resident =
                        resident_blocks(kernel, device, kSharedBackwardThreads, size_t(bytes),
                                        cluster, unsigned(groups * cluster));
                    if (cluster == 1) resident *= info.multiprocessors;
                    if (resident == 0 || 2 * resident * cluster < info.multiprocessors)
                        groups = 0;
                    else if (resident < groups)
                        groups = resident;
                });
            });
        if (groups > 0) {
            plan.kernel = NormKernel::kShared;
            plan.cluster = cluster;
            plan.grid = dim3(unsigned(groups * cluster));
            plan.block = dim3(kSharedBackwardThreads);
            plan.shared_bytes = size_t(bytes);
            plan.groups = groups;
            plan.defer = defer_plan<T>(a, cluster, groups, info.cooperative);
            plan.parked = plan.defer.deferred > 0;
            plan.workspace_bytes = plan.parked ? 0 : partials_bytes(groups);
            return plan;
        }
    }
    const RowBlocks g = row_blocks(a.rows, a.cols);
    plan.grid = g.grid;
    plan.block = g.block;
    plan.columns = row_geometry(a.rows, a.cols);
    plan.groups = plan.columns.grid.y;
    plan.workspace_bytes = partials_bytes(plan.groups);
    return plan;
}

}  // namespace
}  // namespace fo
