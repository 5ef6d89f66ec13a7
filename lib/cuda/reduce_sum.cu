// reduce_sum.cu: the sum of all elements on CUDA, deterministically.
//
// Two passes and no atomics: a fixed number of blocks (a function of numel
// only) each sum a fixed, strided set of 8-element chunks and reduce in a
// fixed tree; one block then sums those partials in order. The same input
// gives the same bits on every run and every GPU, aligned or not.
#include "common.cuh"

namespace fo {
namespace {

constexpr int64_t kMaxBlocks = 1024;

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

template <typename T, bool VEC>
__global__ void partial_sum_kernel(acc_t<T> *__restrict__ partials,
                                   const T *__restrict__ x, int64_t numel) {
    using A = acc_t<T>;
    const int64_t chunks = chunks_per_row(numel);
    A sum = 0;
    for (int64_t c = blockIdx.x * int64_t(kThreads) + threadIdx.x; c < chunks;
         c += int64_t(gridDim.x) * kThreads) {
        const int64_t start = c * kChunk;
        const int n = int(numel - start < kChunk ? numel - start : kChunk);
        A v[kChunk];
        load_chunk<T, VEC>(v, x + start, n);
#pragma unroll
        for (int i = 0; i < kChunk; i++) sum += v[i];
    }
    A total = block_sum(sum);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <typename T>
__global__ void final_sum_kernel(T *__restrict__ out,
                                 const acc_t<T> *__restrict__ partials,
                                 int64_t count) {
    using A = acc_t<T>;
    A sum = 0;
    for (int64_t i = threadIdx.x; i < count; i += kThreads) sum += partials[i];
    A total = block_sum(sum);
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
