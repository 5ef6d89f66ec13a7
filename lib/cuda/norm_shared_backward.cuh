// norm_shared_backward.cuh: the backward of LayerNorm and RMSNorm for
// aligned rows too long for the register kernel (8193 to 16384 elements,
// half types and fp32) but whose dy, h and weight fit in shared memory.
//
// Why: the streaming backward reads dy and h three times (the row sums, dx,
// then the weight and bias column kernel), and at 16384 columns it ran at
// 1100-1650 GB/s on the H100, behind torch.compile and Liger-Kernel
// (bench/results/h100). Here a block copies a row's dy and h into shared
// memory once (cp.async, every copy of a thread in flight together), takes
// the row sums and the weight and bias partials from there, and writes dx:
// each element of dy and h crosses the memory bus once, as in the register
// kernel. Each thread reads back only the chunks it copied itself, so no
// barrier guards the row; and as it finishes a chunk it copies the same
// chunk of the block's next row into the freed slot, so the next row is in
// flight while this one is written. The weight is copied in once a block.
//
// The weight and bias partials of a thread's columns live in registers
// (4 chunks x 8 columns x 2, 64 fp32 registers at 512 threads), so a
// block runs at 128 registers, one block an SM: the grid is one block an
// SM of an H100 or H200, whatever GPU runs it, since it decides which rows
// each partial sums (and so the bits of dweight, DESIGN: determinism).
#pragma once

#include <cuda_pipeline.h>

#include "norm_shared.cuh"

namespace fo {
namespace {

constexpr int kSharedBackwardThreads = kMaxRowThreads;
constexpr int kSharedBackwardChunks = 4;  // a thread's: 16384 elements a row
constexpr int64_t kSharedBackwardBlocks = 132;

// The dynamic shared memory of a block: the weight's, dy's and h's slots.
template <typename T, typename H, typename P>
int64_t shared_backward_bytes(int64_t cols) {
    return chunks_per_row(cols) * 16 *
           (kVectorsPerChunk<T> + kVectorsPerChunk<H> + kVectorsPerChunk<P>);
}

// A region of shared memory holding one row of S, chunk by chunk, with
// vector v of chunk c at v * chunks + c: a warp's 16-byte accesses to its
// 32 consecutive chunks are then contiguous (no bank conflicts for fp32's
// two vectors a chunk either).
template <typename S>
struct SharedRow {
    uint4 *vectors;
    int chunks;
    static constexpr int V = kVectorsPerChunk<S>;

    // starts copying chunk c of the row at `row` in (this thread's commit group)
    __device__ __forceinline__ void copy_in(const S *__restrict__ row, int c) const {
        const uint4 *from = reinterpret_cast<const uint4 *>(row + int64_t(c) * kChunk);
#pragma unroll
        for (int v = 0; v < V; v++) __pipeline_memcpy_async(&vectors[v * chunks + c], from + v, 16);
    }
    template <typename A>
    __device__ __forceinline__ void get(int c, A (&values)[kChunk]) const {
        alignas(16) S raw[kChunk];
#pragma unroll
        for (int v = 0; v < V; v++) reinterpret_cast<uint4 *>(raw)[v] = vectors[v * chunks + c];
#pragma unroll
        for (int i = 0; i < kChunk; i++) values[i] = A(to_acc(raw[i]));
    }
};

// T: dy, dx; H: h, dresidual_out, dresidual (T or float); P: weight.
// Writes this block's per-column sums of dy * xhat (weight) and dy (bias)
// to partials[0 or 1][blockIdx.x][col].
template <typename T, typename H, typename P>
__global__ void __launch_bounds__(kSharedBackwardThreads, 1)
    norm_backward_shared_kernel(fo_norm_backward_args a, acc_t<T> *__restrict__ partials) {
    using A = acc_t<T>;
    constexpr int CPT = kSharedBackwardChunks;
    extern __shared__ uint4 slots[];
    const int chunks = int(chunks_per_row(a.cols));
    const SharedRow<P> weight_row{slots, chunks};
    const SharedRow<T> dy_row{weight_row.vectors + SharedRow<P>::V * chunks, chunks};
    const SharedRow<H> h_row{dy_row.vectors + SharedRow<T>::V * chunks, chunks};
    const T *dy = static_cast<const T *>(a.dy);
    const H *h = static_cast<const H *>(a.h);
    const P *weight = static_cast<const P *>(a.weight);
    const bool rms = a.kind == FO_NORM_RMS;
    const A inv_cols = A(1) / A(a.cols);
    auto copy_row = [&](int64_t r, int c) {
        dy_row.copy_in(dy + r * a.dy_row_stride, c);
        h_row.copy_in(h + r * a.h_row_stride, c);
    };
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c >= chunks) continue;
        if (weight) weight_row.copy_in(weight, c);
        if (blockIdx.x < a.rows) copy_row(blockIdx.x, c);
    }
    __pipeline_commit();
    A dw[CPT][kChunk] = {}, db[CPT][kChunk] = {};
    // the row loop is uniform across the block (row_sum2 holds barriers)
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const A mean = rms ? A(0) : static_cast<const A *>(a.mean)[r];
        const A rstd = static_cast<const A *>(a.rstd)[r];
        __pipeline_wait_prior(0);  // this thread's copies of row r have landed
        // the chunk's dy, xhat and weight * dy, from shared memory
        auto expand = [&](int c, A(&g)[kChunk], A(&xhat)[kChunk], A(&wdy)[kChunk]) {
            dy_row.get(c, g);
            h_row.get(c, xhat);
            A w[kChunk];
            if (weight) weight_row.get(c, w);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                xhat[i] = (xhat[i] - mean) * rstd;
                wdy[i] = weight ? g[i] * w[i] : g[i];
            }
        };
        A sum_wdy = 0, sum_wdy_xhat = 0;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c >= chunks) continue;
            A g[kChunk], xhat[kChunk], wdy[kChunk];
            expand(c, g, xhat, wdy);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                dw[k][i] += g[i] * xhat[i];
                db[k][i] += g[i];
                sum_wdy += wdy[i];
                sum_wdy_xhat += wdy[i] * xhat[i];
            }
        }
        // dh = rstd * (wdy - mean(wdy) - xhat * mean(wdy * xhat)); RMSNorm
        // drops the mean(wdy) term
        row_sum2(sum_wdy, sum_wdy_xhat);
        const A mean_wdy = rms ? A(0) : sum_wdy * inv_cols;
        const A mean_wdy_xhat = sum_wdy_xhat * inv_cols;
        const int64_t next = r + gridDim.x;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c >= chunks) continue;
            A g[kChunk], xhat[kChunk], dh[kChunk];
            expand(c, g, xhat, dh);
            // the slots are free (read above): the next row's chunk goes in
            if (next < a.rows) copy_row(next, c);
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                dh[i] = rstd * (dh[i] - mean_wdy - xhat[i] * mean_wdy_xhat);
            store_dh_chunk<T, H, true>(dh, a, r, int64_t(c) * kChunk, kChunk);
        }
        __pipeline_commit();
    }
    if (!a.dweight && !a.dbias) return;
    A *weight_partials = partials, *bias_partials = partials + int64_t(gridDim.x) * a.cols;
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c >= chunks) continue;
        const int64_t at = int64_t(blockIdx.x) * a.cols + int64_t(c) * kChunk;
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            weight_partials[at + i] = dw[k][i];
            bias_partials[at + i] = db[k][i];
        }
    }
}

// The blocks of norm_backward_shared_kernel for this shape: the weight and
// bias partials a column has (the workspace holds 2 x blocks x cols).
inline int64_t shared_backward_blocks(int64_t rows) {
    return rows < 1 ? 1 : rows < kSharedBackwardBlocks ? rows : kSharedBackwardBlocks;
}

// Runs the shared-memory backward (and the partials' fixed-order sum) where
// it applies: aligned operands (the caller's test), 8193 to 16384 columns,
// not fp64 (its partials would not fit in registers), and the row fits in
// this GPU's shared memory. False where it does not apply.
template <typename T, typename H>
bool norm_backward_shared(const fo_norm_backward_args &a, cudaStream_t stream) {
    if constexpr (std::is_same_v<T, double>) {
        return false;
    } else {
        if (chunks_per_row(a.cols) > int64_t(kSharedBackwardThreads) * kSharedBackwardChunks)
            return false;
        bool launched = false;
        dispatch_companion<T>(a.param_dtype, [&](auto param_tag) {
            using P = decltype(param_tag);
            auto kernel = norm_backward_shared_kernel<T, H, P>;
            const int64_t bytes = shared_backward_bytes<T, H, P>(a.cols);
            if (!reserve_shared_memory(kernel, bytes)) return;
            const int64_t blocks = shared_backward_blocks(a.rows);
            acc_t<T> *partials = static_cast<acc_t<T> *>(a.workspace);
            kernel<<<unsigned(blocks), kSharedBackwardThreads, size_t(bytes), stream>>>(a, partials);
            if (a.dweight || a.dbias)
                finish_column_partials(static_cast<P *>(a.dweight), static_cast<P *>(a.dbias),
                                       partials, blocks, a.cols, stream);
            launched = true;
        });
        return launched;
    }
}

}  // namespace
}  // namespace fo
