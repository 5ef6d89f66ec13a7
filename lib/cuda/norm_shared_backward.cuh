// norm_shared_backward.cuh: the backward of LayerNorm and RMSNorm for
// aligned rows too long for the register kernel (8193 to 131072 elements,
// half types and fp32), held in shared memory: a row of up to 16384
// elements in one block, a longer one split across a cluster of 2, 4 or 8
// blocks (Hopper and newer).
//
// Why: the streaming backward reads dy and h three times (the row sums, dx,
// then the weight and bias column kernel); at 16384 and 65536 columns it
// ran at 1050-1650 GB/s on the H100, behind torch.compile and Liger-Kernel.
// Here a block copies its slice of a row's dy and h
// into shared memory once (cp.async, every copy of a thread in flight
// together), takes the row sums and the weight and bias partials from
// there, and writes dx: each element of dy and h crosses the memory bus
// once, as in the register kernel. Each thread reads back only the chunks
// it copied itself, so no barrier guards the row; and as it finishes a
// chunk of dx it copies the same chunk of the block's next row into the
// freed slot, so the next row is in flight while this one is written (a
// second buffer, the next row in flight during all of this one, was 1-4%
// faster for LayerNorm but 2-9% slower for RMSNorm). In 16-bit types,
// with h of the same type, the next row is also prefetched into L2 as a
// row begins (kBackwardPrefetchL2). The weight is copied in once a block.
//
// The blocks of a cluster add their row sums through distributed shared
// memory, in rank order (the same bits in each). The weight and bias
// partials of a thread's columns live in registers (4 chunks x 8 columns x
// 2: 64 fp32 registers at 512 threads), so a block runs at 128 registers,
// one an SM. The grid is as many groups as this GPU holds at once, up to
// one block an SM of an H100 or H200 (norm_plan.cuh): it decides which
// rows each partial sums, and so the bits of dweight, which are the same
// on every run on one GPU (DESIGN: determinism). A GPU that holds groups
// on fewer than half its SMs streams instead.
//
// Where defer_plan allows (dx, or dresidual of T, written; see there), the
// partials need no workspace: they are parked in rows whose dx
// the owner blocks defer, and summed in the same launch
// (norm_shared_held_partials.cuh).
#pragma once

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <climits>

#include "norm_shared.cuh"
#include "norm_shared_held_partials.cuh"

namespace fo {
namespace {

constexpr int kSharedBackwardThreads = kMaxRowThreads;
constexpr int kSharedBackwardChunks = 4;  // a thread's: 16384 elements a block
constexpr int64_t kSliceChunks = int64_t(kSharedBackwardThreads) * kSharedBackwardChunks;
// The chunks of a row one block of the cluster holds.
__host__ __device__ inline int64_t slice_chunks(int64_t cols, int cluster) {
    return (chunks_per_row(cols) + cluster - 1) / cluster;
}
// The dynamic shared memory of a block: the weight's slots, dy's, h's.
template <typename T, typename H, typename P>
int64_t shared_backward_bytes(int64_t cols, int cluster) {
    return slice_chunks(cols, cluster) * 16 *
           (kVectorsPerChunk<P> + kVectorsPerChunk<T> + kVectorsPerChunk<H>);
}

// A region of shared memory holding a block's slice of one row of S, chunk
// by chunk, with vector v of chunk c at v * chunks + c: a warp's 16-byte
// accesses to its 32 consecutive chunks are then contiguous (no bank
// conflicts for fp32's two vectors a chunk either).
template <typename S>
struct SharedRow {
    using Value = S;
    static constexpr int V = kVectorsPerChunk<S>;
    uint4 *vectors;
    int chunks;

    // starts copying chunk c of `row` in (into this thread's commit group)
    __device__ __forceinline__ void copy_in(const S *__restrict__ row, int c,
                                            L2Priority priority = kL2Normal) const {
        const uint4 *from = reinterpret_cast<const uint4 *>(row + int64_t(c) * kChunk);
#pragma unroll
        for (int v = 0; v < V; v++) copy16_async(&vectors[v * chunks + c], from + v, priority);
    }
    template <typename A>
    __device__ __forceinline__ void get(int c, A (&values)[kChunk]) const {
        alignas(16) S raw[kChunk];
#pragma unroll
        for (int v = 0; v < V; v++) reinterpret_cast<uint4 *>(raw)[v] = vectors[v * chunks + c];
#pragma unroll
        for (int i = 0; i < kChunk; i++) values[i] = A(to_acc(raw[i]));
    }
    // the region after this one
    __device__ __forceinline__ uint4 *end() const { return vectors + V * chunks; }
};

// u and v summed over the blocks of the cluster (each holding its block's
// sums), in rank order, the same bits in every block. Two slots, by the
// parity of the row: a block is at most one row ahead of another (the
// sync), so it never writes a slot that another still reads.
template <typename A>
__device__ void cluster_sum2(A &u, A &v, int parity) {
#if __CUDA_ARCH__ >= 900
    __shared__ A block_sums[2][2];
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    if (threadIdx.x == 0) {
        block_sums[parity][0] = u;
        block_sums[parity][1] = v;
    }
    cluster.sync();
    u = v = 0;
    for (unsigned rank = 0; rank < cluster.num_blocks(); rank++) {
        const A *sums = cluster.map_shared_rank(&block_sums[parity][0], rank);
        u += sums[0];
        v += sums[1];
    }
#endif
}

// T: dy, dx; H: h, dresidual_out, dresidual (T or float); P: weight.
// Writes its cluster's per-column sums of dy * xhat (weight) and dy (bias),
// for its slice of the columns, to partials[0 or 1][cluster][col]; or,
// where d.deferred > 0 (a cooperative launch), parks them in deferred dx
// rows and sums them itself (norm_shared_held_partials.cuh).
template <typename T, typename H, typename P>
__global__ void __launch_bounds__(kSharedBackwardThreads, 1)
    norm_backward_shared_kernel(fo_norm_backward_params a, acc_t<T> *__restrict__ partials,
                                const DeferArgs d) {
    using A = acc_t<T>;
    constexpr int CPT = kSharedBackwardChunks;
    extern __shared__ uint4 slots[];
    // this block's slice of the row: chunks [first, first + here)
    const int cluster = cluster_blocks();
    const int slice = int(slice_chunks(a.cols, cluster));
    const int64_t first = int64_t(cluster_rank()) * slice;
    const int64_t left = chunks_per_row(a.cols) - first;
    const int here = left < slice ? int(left > 0 ? left : 0) : slice;
    const int64_t col0 = first * kChunk;
    const int64_t group = blockIdx.x / cluster, groups = gridDim.x / cluster;
    const SharedRow<P> weight_row{slots, slice};
    const SharedRow<T> dy_row{weight_row.end(), slice};
    const SharedRow<H> h_row{dy_row.end(), slice};
    const T *dy = static_cast<const T *>(a.dy) + col0;
    const H *h = static_cast<const H *>(a.h) + col0;
    const P *weight = a.weight ? static_cast<const P *>(a.weight) + col0 : nullptr;
    const bool rms = a.kind == FO_NORM_RMS;
    const A inv_cols = A(1) / A(a.cols);
    // an owner's deferred rows: their mean(wdy) and xhat_scale kept, their dx later
    __shared__ A row_means[kMaxDeferred][2];
    const int first_deferred =
        d.deferred > 0 && group < d.owners ? int(d.full + (group < d.extra)) - d.deferred : INT_MAX;
    auto copy_row = [&](int64_t r, int c, L2Priority priority) {
        dy_row.copy_in(dy + r * a.dy_row_stride, c, priority);
        h_row.copy_in(h + r * a.h_row_stride, c, priority);
    };
    // a row's first copy: kept in L2 where its dx is deferred (fp32)
    auto first_copy = [&](int row_iteration) {
        return kDeferredL2Priority<T> && row_iteration >= first_deferred ? kL2Keep : kL2Normal;
    };
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c >= here) continue;
        if (weight) weight_row.copy_in(weight, c);
        if (group < a.rows) copy_row(group, c, first_copy(0));
    }
    __pipeline_commit();
    A dw[CPT][kChunk] = {}, db[CPT][kChunk] = {};
    // the row loop is uniform across the cluster (row_sum2 and cluster_sum2
    // hold barriers)
    int iteration = 0;
    for (int64_t r = group; r < a.rows; r += groups, iteration++) {
        const int64_t next = r + groups;
        if (kBackwardPrefetchL2<T, H> && next < a.rows) {  // (see kBackwardPrefetchL2)
            prefetch_l2_by_warps(dy + next * a.dy_row_stride,
                                 int64_t(here) * kChunk * int64_t(sizeof(T)));
            prefetch_l2_by_warps(h + next * a.h_row_stride,
                                 int64_t(here) * kChunk * int64_t(sizeof(H)));
        }
        const A mean = rms ? A(0) : static_cast<const A *>(a.mean)[r];
        const A rstd = static_cast<const A *>(a.rstd)[r];
        __pipeline_wait_prior(0);  // this thread's copies of row r have landed
        // the chunk's dy, h and weight * dy, from shared memory
        auto expand = [&](int c, A(&g)[kChunk], A(&hv)[kChunk], A(&wdy)[kChunk]) {
            dy_row.get(c, g);
            h_row.get(c, hv);
            A w[kChunk];
            if (weight) weight_row.get(c, w);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                wdy[i] = weight ? weighted_dy<T, P>(g[i], w[i]) : g[i];
            }
        };
        A sum_wdy = 0, sum_wdy_xhat = 0;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c >= here) continue;
            A g[kChunk], hv[kChunk], wdy[kChunk];
            expand(c, g, hv, wdy);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                const A xhat = normalized(hv[i], mean, rstd);
                dw[k][i] += g[i] * xhat;
                db[k][i] += g[i];
                sum_wdy += wdy[i];
                sum_wdy_xhat += wdy[i] * xhat;
            }
        }
        row_sum2(sum_wdy, sum_wdy_xhat);
        if (cluster > 1) cluster_sum2(sum_wdy, sum_wdy_xhat, iteration % 2);
        const RowGradient<A> row = row_gradient(mean, rstd, sum_wdy, sum_wdy_xhat, inv_cols, rms);
        if (iteration >= first_deferred) {  // no dx yet: the next row's copies alone
            if (threadIdx.x == 0) {
                row_means[iteration - first_deferred][0] = row.mean_wdy;
                row_means[iteration - first_deferred][1] = row.xhat_scale;
            }
#pragma unroll
            for (int k = 0; k < CPT; k++) {
                const int c = threadIdx.x + k * blockDim.x;
                if (c < here && next < a.rows) copy_row(next, c, first_copy(iteration + 1));
            }
            __pipeline_commit();
            continue;
        }
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c >= here) continue;
            A g[kChunk], hv[kChunk], dh[kChunk];
            expand(c, g, hv, dh);
            // the slots are free (read above): the next row's chunk goes in
            if (next < a.rows) copy_row(next, c, first_copy(iteration + 1));
#pragma unroll
            for (int i = 0; i < kChunk; i++) dh[i] = norm_dh(row, dh[i], hv[i]);
            store_dh_chunk<T, H, kVector>(
                dh, a, r, col0 / kChunk + c, a.dx ? static_cast<T *>(a.dx) + r * a.cols : nullptr,
                a.dresidual ? static_cast<H *>(a.dresidual) + r * a.cols : nullptr);
        }
        __pipeline_commit();
    }
    __pipeline_wait_prior(0);  // no copy in flight as the block ends (the weight's, with no rows)
    // the other blocks may still read this one's row sums
    if (cluster > 1) cluster_sync();
    if (!a.dweight && !a.dbias) return;
    if (d.deferred > 0) {
        const DeferredRows<T> held{static_cast<char *>(a.dx ? a.dx : a.dresidual), a.cols, col0,
                                   groups, d};
        park_shared_partials<T, CPT>(held, group, here, a.dweight, a.dbias, dw, db);
        sum_and_write_deferred<T, H, CPT>(a, held, group, here, weight_row, dy_row, h_row, copy_row,
                                          row_means);
        return;
    }
    A *weight_partials = partials, *bias_partials = partials + groups * a.cols;
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c >= here) continue;
        const int64_t at = group * a.cols + col0 + int64_t(c) * kChunk;
        // only the partials asked for (the workspace of a call without dbias
        // ends with the weight's), in 16-byte stores (rows of whole chunks)
        if (a.dweight) store_chunk<A, true>(weight_partials + at, dw[k], kChunk);
        if (a.dbias) store_chunk<A, true>(bias_partials + at, db[k], kChunk);
    }
}

}  // namespace
}  // namespace fo
