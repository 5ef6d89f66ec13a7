// reduce_sum.cu: the sum of all elements on CUDA, deterministically.
//
// Two passes and no atomics: a fixed number of blocks (a function of numel
// only) each sum a fixed, strided set of 8-element chunks and reduce in a
// fixed tree; one block then sums those partials in order. The same input
// gives the same bits on every run and every GPU, aligned or not. Where
// one block takes it all (up to kThreads chunks), its sum is the result:
// one launch and no workspace.
#include "common.cuh"

namespace fo {
namespace {

constexpr int64_t kMaxBlocks = 1024;
static_assert(kMaxBlocks <= 4 * kThreads, "final_sum_kernel loads 4 partials a thread");

// A thread loads 64 bytes before it adds any (4 chunks of a 16-bit type, 2
// of fp32, 1 of fp64), all in flight at once: on the H100 +1-3% over one
// chunk at a time. One contiguous range of chunks a block
// instead of the grid stride measured 0-8% slower there.
template <typename T>
constexpr int kStepChunks = 64 / (kChunk * int(sizeof(T))) > 0 ? 64 / (kChunk * int(sizeof(T))) : 1;

// Tensors up to 128 MiB are loaded evict-first (__ldcs): each byte is read
// once, and L2 keeps the lines others wrote (in the benchmark, do_bench's
// flush; in a model, the previous kernel's outputs) instead of writing them
// back to make room. H100: +9-16% from 16 to 128 MiB, where
// it caught up with torch.compile; level at 256 MiB and 3-4% slower from
// 512 MiB, so larger tensors are loaded as usual.
constexpr int64_t kEvictFirstMaxBytes = int64_t(128) << 20;

inline int64_t sum_blocks(int64_t numel) {
    int64_t chunks = chunks_per_row(numel);
    int64_t blocks = (chunks + kThreads - 1) / kThreads;
    return blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// Each thread sums its chunks (the grid's threads apart) in increasing
// order, kStepChunks at a time: every load of a step is issued before any
// is added (a loop that added each chunk before loading the next kept one
// 16-byte load in flight a thread). Out: acc_t<T> for the partials, T where
// one block writes the result.
template <typename T, typename Out, bool VEC, bool EVICT_FIRST>
__global__ void __launch_bounds__(kThreads)
    partial_sum_kernel(Out *__restrict__ sums, const T *__restrict__ x, int64_t numel) {
    using A = acc_t<T>;
    constexpr int kStep = kStepChunks<T>;
    const int64_t chunks = chunks_per_row(numel), whole_chunks = numel / kChunk;
    const int64_t spacing = int64_t(gridDim.x) * kThreads;
    int64_t c = blockIdx.x * int64_t(kThreads) + threadIdx.x;
    A sum = 0;
    for (; c + (kStep - 1) * spacing < whole_chunks; c += kStep * spacing) {
        A v[kStep][kChunk];
#pragma unroll
        for (int s = 0; s < kStep; s++)
            load_chunk<T, VEC, true, EVICT_FIRST>(v[s], x + (c + s * spacing) * kChunk, kChunk);
#pragma unroll
        for (int s = 0; s < kStep; s++)
#pragma unroll
            for (int i = 0; i < kChunk; i++) sum += v[s][i];
    }
    for (; c < chunks; c += spacing) {  // what is left, and the partial last chunk
        const int64_t start = c * kChunk;
        const int n = int(numel - start < kChunk ? numel - start : kChunk);
        A v[kChunk];
        load_chunk<T, VEC, true, EVICT_FIRST>(v, x + start, n);
#pragma unroll
        for (int i = 0; i < kChunk; i++) sum += v[i];
    }
    A total = block_sum<kThreads>(sum);
    if (threadIdx.x == 0) sums[blockIdx.x] = from_acc<Out>(total);
}

// Thread t adds partials t, t + kThreads, ... in order; the four loads are
// issued together (count <= kMaxBlocks = 4 kThreads).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    final_sum_kernel(T *__restrict__ out, const acc_t<T> *__restrict__ partials, int64_t count) {
    using A = acc_t<T>;
    A v[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int64_t i = threadIdx.x + int64_t(k) * kThreads;
        v[k] = i < count ? partials[i] : A(0);
    }
    A total = block_sum<kThreads>(((v[0] + v[1]) + v[2]) + v[3]);
    if (threadIdx.x == 0) *out = from_acc<T>(total);
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int64_t fo_cuda_reduce_sum_workspace_bytes(int device_index,
                                                      const fo_reduce_sum_args *a) {
    (void)device_index;  // the grid depends on the size alone
    const int64_t blocks = sum_blocks(a->numel);
    return blocks == 1 ? 0 : blocks * (a->dtype == FO_DTYPE_F64 ? 8 : 4);
}

extern "C" int fo_cuda_reduce_sum(int device_index, uintptr_t stream,
                                  const fo_reduce_sum_params *a) {
    return launch_on("fo_reduce_sum", device_index, [&] {
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            using A = acc_t<T>;
            const int64_t blocks = sum_blocks(a->numel);
            const T *x = static_cast<const T *>(a->x);
            const bool vec = a->numel % kChunk == 0 && aligned16(x);
            const bool evict_first = a->numel * int64_t(sizeof(T)) <= kEvictFirstMaxBytes;
            auto launch = [&](auto *sums) {
                using Out = std::remove_pointer_t<decltype(sums)>;
                auto kernel = vec ? (evict_first ? partial_sum_kernel<T, Out, true, true>
                                                 : partial_sum_kernel<T, Out, true, false>)
                                  : partial_sum_kernel<T, Out, false, false>;
                kernel<<<unsigned(blocks), kThreads, 0, cudaStream_t(stream)>>>(sums, x, a->numel);
            };
            if (blocks == 1) {
                launch(static_cast<T *>(a->out));
                return;
            }
            A *partials = static_cast<A *>(a->workspace);
            launch(partials);
            final_sum_kernel<T><<<1, kThreads, 0, cudaStream_t(stream)>>>(static_cast<T *>(a->out),
                                                                          partials, blocks);
        });
    });
}
