// norm_shared.cuh: the forward of LayerNorm and RMSNorm (without a residual)
// for aligned rows too long for registers but short enough for shared
// memory: 16-bit rows of 16385 to about 100000 elements and fp32 rows of
// 16385 to about 50000 (RMSNorm's take a cluster where the GPU has them),
// and fp64 rows of 2049 to about 25000.
//
// Why: the streaming kernel reads such a row twice, and at 65536 columns
// the second read mostly misses L2 (ncu: 1.4x the minimum bytes from
// memory). Here a block copies its row into shared
// memory once (cp.async: global to shared without registers, a thread's 16
// or more 16-byte copies all in flight), takes the statistics from there
// (the two-pass form of the register kernels: the mean, then the
// deviations about it), and writes the output. Each thread reads back only
// the chunks it copied itself, so no barrier guards the row; and as it
// writes a chunk of the output it copies the same chunk of the block's next
// row into the slot just freed, so the next row is in flight during this
// one's output (where an SM holds several blocks, the others keep the
// memory busy during this one's statistics).
#pragma once

#include <cuda_pipeline.h>

#include "norm_common.cuh"

namespace fo {
namespace {

// The dynamic shared memory of one row.
template <typename T>
int64_t shared_row_bytes(int64_t cols) {
    return chunks_per_row(cols) * kVectorsPerChunk<T> * 16;
}
// Threads a row: enough that each copies about kSharedTargetChunks chunks
// (all in flight at once), 128 to 512. Fewer threads a row leave room for
// more rows an SM, whose phases overlap.
constexpr int kSharedTargetChunks = 8;
constexpr int kSharedRowThreads = kMaxRowThreads;  // the most
inline int shared_row_threads(int64_t cols) {
    int threads = 128;
    while (threads < kSharedRowThreads &&
           threads * int64_t(kSharedTargetChunks) < chunks_per_row(cols))
        threads *= 2;
    return threads;
}

// The shared-memory kernels hold one row a block, and a block's next row
// is only copied in as this one's output is written: during the row sums
// the block has nothing in flight. The 16-bit backward (one block an SM)
// therefore starts moving its next row's dy and h into L2 as a row begins
// (cp.async.bulk.prefetch, sm_90: one instruction a warp and operand), and
// the copies of its dx pass find them there: on the H100 +1-8% at 16384 to
// 65536 columns. The fp32 backward ran 5-8% slower with it and the forward
// 2-23% slower; 16-bit x with an fp32 h spilled 8 bytes with it.
template <typename T, typename H>
constexpr bool kBackwardPrefetchL2 = sizeof(T) == 2 && std::is_same_v<H, T>;

// L2 priorities for a row's copies: the deferred rows (norm_shared_held_
// partials.cuh) are read twice, so in fp32 their first copies ask L2 to
// keep them (evict_last) and their second to let them go (evict_first):
// fp32 backward 1-6% faster on the H100; 16-bit 1-2% slower at 16384
// columns, where the next row's L2 prefetch competes for the same L2.
enum L2Priority { kL2Normal, kL2Keep, kL2Drop };
template <typename T>
constexpr bool kDeferredL2Priority = std::is_same_v<T, float>;

// cp.async of 16 bytes into shared memory, with an L2 priority.
__device__ __forceinline__ void copy16_async(void *to, const void *from, L2Priority priority) {
#if __CUDA_ARCH__ >= 800
    if (priority != kL2Normal) {
        uint64_t policy;
        if (priority == kL2Keep)
            asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
        else
            asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(
                         unsigned(__cvta_generic_to_shared(to))),
                     "l"(__cvta_generic_to_global(from)), "l"(policy)
                     : "memory");
        return;
    }
#endif
    __pipeline_memcpy_async(to, from, 16);
}

// Lane 0 of each warp of the block starts moving its 1/warps of
// [p, p + bytes) into L2 (p 16-byte aligned, bytes a multiple of 16);
// a hint, and nothing before sm_90.
__device__ __forceinline__ void prefetch_l2_by_warps(const void *p, int64_t bytes) {
#if __CUDA_ARCH__ >= 900
    if (threadIdx.x % 32 != 0) return;
    const int64_t warps = (blockDim.x + 31) / 32;
    const int64_t piece = (bytes / warps + 15) / 16 * 16;
    const int64_t begin = int64_t(threadIdx.x / 32) * piece;
    if (piece == 0 || begin >= bytes) return;
    const int64_t n = bytes - begin < piece ? bytes - begin : piece;
    // (the instruction takes a .global address, not a generic one)
    const size_t global = __cvta_generic_to_global(static_cast<const char *>(p) + begin);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(global), "r"(uint32_t(n))
                 : "memory");
#endif
}

// Registers: 40 for 16-bit types, so that six blocks of a 16384-element row
// (the most its 32 KiB of shared memory allow) fit an SM, not the four of
// the 58 ptxas picks (+3-9% at 16384 columns, no spills); fp32 ran 8-13%
// slower at 40 and takes 128, as does fp64 (at ptxas's 64 on sm_80 the
// slow path of its division spilled; one 512-thread block still fits).
template <typename T>
constexpr int kSharedForwardRegisters = sizeof(T) == 2 ? 40 : 128;
// T: x and y; P: weight, bias. One row a block at a time, grid-stride.
template <typename T, typename P>
__global__ void __maxnreg__(kSharedForwardRegisters<T>)
    norm_forward_shared_kernel(fo_norm_forward_params a) {
    using A = acc_t<T>;
    extern __shared__ uint4 row_vectors[];  // the row as loaded, chunk by chunk
    constexpr int V = kVectorsPerChunk<T>;
    const T *x = static_cast<const T *>(a.x);
    const P *weight = static_cast<const P *>(a.weight);
    const P *bias = static_cast<const P *>(a.bias);
    const int chunks = int(chunks_per_row(a.cols));
    const bool rms = a.kind == FO_NORM_RMS;
    const A inv_cols = A(1) / A(a.cols);
    // this thread's chunks of row r into their slots (one commit group)
    auto copy_chunk = [&](int64_t r, int c) {
        const uint4 *from = reinterpret_cast<const uint4 *>(x + r * a.x_row_stride + c * kChunk);
#pragma unroll
        for (int v = 0; v < V; v++) __pipeline_memcpy_async(&row_vectors[c * V + v], from + v, 16);
    };
    auto held = [&](int c, A(&values)[kChunk]) {
        alignas(16) T raw[kChunk];
        memcpy(raw, &row_vectors[c * V], sizeof(raw));
#pragma unroll
        for (int i = 0; i < kChunk; i++) values[i] = to_acc(raw[i]);
    };
    float amax = 0.0f;  // the FP8 output's (a.fp8_amax)
    if (blockIdx.x < a.rows)
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) copy_chunk(blockIdx.x, c);
    __pipeline_commit();
    // the row loop is uniform across the block (row_sum holds barriers)
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const int64_t next = r + gridDim.x;
        __pipeline_wait_prior(0);  // this thread's copies of row r have landed
        A sum = 0;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            A v[kChunk];
            held(c, v);
#pragma unroll
            for (int i = 0; i < kChunk; i++) sum += v[i];
        }
        A mean = rms ? A(0) : row_sum(sum) * inv_cols;
        A deviations = 0, offsets = 0;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            A v[kChunk];
            held(c, v);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                deviations += (v[i] - mean) * (v[i] - mean);
                if constexpr (kExactNormalize<T>) offsets += v[i] - mean;
            }
        }
        if constexpr (kExactNormalize<T>) {
            row_sum2(offsets, deviations);
            if (!rms) mean = corrected_mean(mean, offsets, inv_cols);
        } else {
            deviations = row_sum(deviations);
        }
        const A variance = deviations * inv_cols;
        const A rstd = row_rstd(variance, a.eps);
        if (threadIdx.x == 0) {
            if (a.mean) static_cast<A *>(a.mean)[r] = mean;
            if (a.rstd) static_cast<A *>(a.rstd)[r] = rstd;
            if (a.row_stats) store_row_stats(a.row_stats, r, mean, rstd);
        }
        const A shift = -mean * rstd;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            const int col = c * kChunk;
            A v[kChunk], w[kChunk], b[kChunk];
            held(c, v);
            if (weight)
                load_chunk<P, true>(w, weight + col, kChunk);
            else
                fill(w, A(1));
            if (bias)
                load_chunk<P, true>(b, bias + col, kChunk);
            else
                fill(b, A(0));
            normalize_chunk<kExactNormalize<T>>(v, mean, rstd, shift, w, b);
            if (a.y)
                store_chunk<T, true, true>(static_cast<T *>(a.y) + r * a.cols + col, v, kChunk);
            else
                amax = output_amax<T>(amax, v);
            // the slot is free: its values were read (and used) above
            if (next < a.rows) copy_chunk(next, c);
        }
        __pipeline_commit();
    }
    if (a.fp8_amax) block_atomic_max(a.fp8_amax, amax);
}

}  // namespace
}  // namespace fo
