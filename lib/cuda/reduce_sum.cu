// reduce_sum.cu: the sum of all elements on CUDA, deterministically.
//
// Two passes and no atomics: a fixed number of blocks (a function of numel
// only) each sum a fixed set of 8-element chunks and reduce in a fixed
// tree; one block then sums those partials in order. The same input gives
// the same bits on every run and every GPU, aligned or not.
//
// Build-time knobs for tuning (bench/tune.sh): FO_SUM_BYTES, the bytes a
// thread loads before it adds any (every load of a step in flight at once;
// 16: one chunk of a 16-bit type), FO_SUM_CONTIGUOUS (1: each block sums
// one contiguous range of chunks; 0: the grid strides over the tensor) and
// FO_SUM_BLOCKS (the most partials), FO_SUM_EVICT_FIRST (1: loads marked
// evict-first, __ldcs).
#include "common.cuh"

#ifndef FO_SUM_BYTES
#define FO_SUM_BYTES 64
#endif
#ifndef FO_SUM_CONTIGUOUS
#define FO_SUM_CONTIGUOUS 0
#endif
#ifndef FO_SUM_EVICT_FIRST
#define FO_SUM_EVICT_FIRST 1
#endif
#ifndef FO_SUM_BLOCKS
#define FO_SUM_BLOCKS 1024
#endif

namespace fo {
namespace {

constexpr int64_t kMaxBlocks = FO_SUM_BLOCKS;
static_assert(kMaxBlocks <= 4 * kThreads, "final_sum_kernel loads 4 partials a thread");

// Chunks a thread loads in one step: FO_SUM_BYTES of them, at least one.
template <typename T>
constexpr int kStepChunks =
    FO_SUM_BYTES / (kChunk * int(sizeof(T))) > 0 ? FO_SUM_BYTES / (kChunk * int(sizeof(T))) : 1;

inline int64_t sum_blocks(int64_t numel) {
    int64_t chunks = chunks_per_row(numel);
    int64_t blocks = (chunks + kThreads - 1) / kThreads;
    return blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// Sum of `value` over the block, in a fixed order; the result is in thread 0.
template <typename A>
__device__ A block_sum(A value) {
    __shared__ A warp_sums[kThreads / 32];
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_down_sync(0xffffffffu, value, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
    __syncthreads();
    A total = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < kThreads / 32; w++) total += warp_sums[w];
    return total;
}

// Each thread sums its chunks in increasing order, kStepChunks at a time:
// every load of a step is issued before any is added (a loop that added
// each chunk before loading the next kept one 16-byte load in flight a
// thread). A thread's consecutive chunks are `spacing` apart: kThreads
// within a block's own contiguous range, or the whole grid's threads.
template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads) partial_sum_kernel(acc_t<T> *__restrict__ partials,
                                                              const T *__restrict__ x, int64_t numel) {
    using A = acc_t<T>;
    constexpr int kStep = kStepChunks<T>;
    constexpr bool kEvictFirst = FO_SUM_EVICT_FIRST != 0;
    const int64_t chunks = chunks_per_row(numel), full_chunks = numel / kChunk;
    int64_t c, end, spacing;
    if (FO_SUM_CONTIGUOUS) {
        // kThreads-aligned ranges, so each warp's loads stay 512-byte aligned
        const int64_t per_block =
            (chunks + gridDim.x * int64_t(kThreads) - 1) / (gridDim.x * int64_t(kThreads)) * kThreads;
        c = blockIdx.x * per_block + threadIdx.x;
        end = (blockIdx.x + 1) * per_block < chunks ? (blockIdx.x + 1) * per_block : chunks;
        spacing = kThreads;
    } else {
        c = blockIdx.x * int64_t(kThreads) + threadIdx.x;
        end = chunks;
        spacing = int64_t(gridDim.x) * kThreads;
    }
    const int64_t step_end = end < full_chunks ? end : full_chunks;  // whole chunks only
    A sum = 0;
    for (; c + (kStep - 1) * spacing < step_end; c += kStep * spacing) {
        A v[kStep][kChunk];
#pragma unroll
        for (int s = 0; s < kStep; s++) load_chunk<T, VEC, true, kEvictFirst>(v[s], x + (c + s * spacing) * kChunk, kChunk);
#pragma unroll
        for (int s = 0; s < kStep; s++)
#pragma unroll
            for (int i = 0; i < kChunk; i++) sum += v[s][i];
    }
    for (; c < end; c += spacing) {  // what is left, and the partial last chunk
        const int64_t start = c * kChunk;
        const int n = int(numel - start < kChunk ? numel - start : kChunk);
        A v[kChunk];
        load_chunk<T, VEC, true, kEvictFirst>(v, x + start, n);
#pragma unroll
        for (int i = 0; i < kChunk; i++) sum += v[i];
    }
    A total = block_sum(sum);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Thread t adds partials t, t + kThreads, ... in order; the four loads are
// issued together (count <= kMaxBlocks = 4 kThreads).
template <typename T>
__global__ void __launch_bounds__(kThreads) final_sum_kernel(T *__restrict__ out,
                                                            const acc_t<T> *__restrict__ partials,
                                                            int64_t count) {
    using A = acc_t<T>;
    A v[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int64_t i = threadIdx.x + int64_t(k) * kThreads;
        v[k] = i < count ? partials[i] : A(0);
    }
    A total = block_sum(((v[0] + v[1]) + v[2]) + v[3]);
    if (threadIdx.x == 0) *out = from_acc<T>(total);
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int64_t fo_cuda_reduce_sum_workspace_bytes(int64_t numel,
                                                      int dtype) {
    return sum_blocks(numel) * (dtype == FO_DTYPE_F64 ? 8 : 4);
}

extern "C" int fo_cuda_reduce_sum(int device_index, uintptr_t stream,
                                  const fo_reduce_sum_args *a) {
    return launch_on("fo_reduce_sum", device_index, [&] {
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            using A = acc_t<T>;
            const int64_t blocks = sum_blocks(a->numel);
            A *partials = static_cast<A *>(a->workspace);
            const T *x = static_cast<const T *>(a->x);
            auto kernel = a->numel % kChunk == 0 && aligned16(x)
                              ? partial_sum_kernel<T, true>
                              : partial_sum_kernel<T, false>;
            kernel<<<unsigned(blocks), kThreads, 0, cudaStream_t(stream)>>>(
                partials, x, a->numel);
            final_sum_kernel<T><<<1, kThreads, 0, cudaStream_t(stream)>>>(
                static_cast<T *>(a->out), partials, blocks);
        });
    });
}
