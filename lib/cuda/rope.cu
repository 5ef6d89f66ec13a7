// rope.cu: the rotary position embedding of q and k (rotate-half, partial
// rotary) and its transpose on CUDA: one launch for both tensors.
#include "common.cuh"

namespace fo {
namespace {

// The heads a thread takes at one token and one chunk of its row: the
// chunk's cos and sin are read once for all of them, and all their loads
// are in flight before the first store. 2 (fp64: 1) keep a thread within
// 128 registers, two 256-thread blocks an SM (sm_90, ptxas -v: 92-126);
// 4 took 160-230, one block an SM, for the same bytes in flight.
template <typename T>
constexpr int kHeadsPerThread = sizeof(T) == 8 ? 1 : 2;

// The launch's items: for each token (batch-major), the head groups of q
// then of k (none for a tensor skipped), and in each group the chunks of a
// row: rotation chunks (8 pairs (i, i + rotary_dim / 2) each) then the
// chunks past rotary_dim, copied. Adjacent threads take adjacent chunks of
// one row.
struct RopeItems {
    int64_t chunks, rotation_chunks;
    int64_t q_groups, groups;
};

template <typename T, typename C, bool VEC, bool BACKWARD, typename I>
__global__ void __launch_bounds__(kThreads, 2)
    rope_kernel(const fo_rope_params a, const RopeItems walk, const I items) {
    using A = acc_t<T>;
    constexpr int G = kHeadsPerThread<T>;
    const int64_t half = a.rotary_dim / 2;
    for (I item = I(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
         item += I(gridDim.x) * blockDim.x) {
        const I c = item % I(walk.chunks), rest = item / I(walk.chunks);
        const I group = rest % I(walk.groups), token = rest / I(walk.groups);
        const int64_t b = int64_t(token / I(a.tokens)), t = int64_t(token % I(a.tokens));
        // this group's tensor, each field picked by value (a reference
        // into the parameters would copy them to local memory)
        const bool is_q = int64_t(group) < walk.q_groups;
        const int64_t head0 = (is_q ? int64_t(group) : int64_t(group) - walk.q_groups) * G;
        const int64_t heads = is_q ? a.q.heads : a.k.heads;
        const int64_t in_head = is_q ? a.q.in_head_stride : a.k.in_head_stride;
        const int64_t out_head = is_q ? a.q.out_head_stride : a.k.out_head_stride;
        const T *in = static_cast<const T *>(is_q ? a.q.in : a.k.in) +
                      b * (is_q ? a.q.in_batch_stride : a.k.in_batch_stride) +
                      t * (is_q ? a.q.in_token_stride : a.k.in_token_stride) + head0 * in_head;
        T *out = static_cast<T *>(is_q ? a.q.out : a.k.out) +
                 b * (is_q ? a.q.out_batch_stride : a.k.out_batch_stride) +
                 t * (is_q ? a.q.out_token_stride : a.k.out_token_stride) + head0 * out_head;
        const int count = int(heads - head0 < G ? heads - head0 : G);
        if (int64_t(c) < walk.rotation_chunks) {
            const int64_t i = int64_t(c) * kChunk;
            const int n = int(half - i < kChunk ? half - i : kChunk);
            // the pairs' two halves, then each output half from two table
            // chunks (forward: lo c_lo - hi s_lo, hi c_hi + lo s_hi;
            // backward: lo c_lo + hi s_hi, hi c_hi - lo s_lo), so that two
            // of the four table chunks live at a time
            const C *cos = static_cast<const C *>(a.cos) + b * a.cos_batch_stride +
                           t * a.cos_token_stride + i;
            const C *sin = static_cast<const C *>(a.sin) + b * a.sin_batch_stride +
                           t * a.sin_token_stride + i;
            A lo[G][kChunk], hi[G][kChunk];
#pragma unroll
            for (int h = 0; h < G; h++) {
                if (h < count) {
                    load_chunk<T, VEC>(lo[h], in + h * in_head + i, n);
                    load_chunk<T, VEC>(hi[h], in + h * in_head + half + i, n);
                }
            }
#pragma unroll
            for (int part = 0; part < 2; part++) {
                // part 0 writes the first half (its sine term negative
                // forward), part 1 the second (negative backward)
                A c[kChunk], s[kChunk];
                load_chunk<C, VEC>(c, cos + part * half, n);
                load_chunk<C, VEC>(s, sin + ((part == 0) == BACKWARD ? half : 0), n);
                const A sign = (part == 0) == BACKWARD ? A(1) : A(-1);
#pragma unroll
                for (int h = 0; h < G; h++) {
                    if (h < count) {
                        A result[kChunk];
#pragma unroll
                        for (int e = 0; e < kChunk; e++) {
                            const A same = part == 0 ? lo[h][e] : hi[h][e];
                            const A other = part == 0 ? hi[h][e] : lo[h][e];
                            result[e] = same * c[e] + sign * (other * s[e]);
                        }
                        store_chunk<T, VEC>(out + h * out_head + part * half + i, result, n);
                    }
                }
            }
        } else {
            // past rotary_dim: copied
            const int64_t j = a.rotary_dim + (int64_t(c) - walk.rotation_chunks) * kChunk;
            const int n = int(a.head_dim - j < kChunk ? a.head_dim - j : kChunk);
            A v[G][kChunk];
#pragma unroll
            for (int h = 0; h < G; h++)
                if (h < count) load_chunk<T, VEC>(v[h], in + h * in_head + j, n);
#pragma unroll
            for (int h = 0; h < G; h++)
                if (h < count) store_chunk<T, VEC>(out + h * out_head + j, v[h], n);
        }
    }
}

// A tensor's input and output strides keep 16-byte alignment (where the
// dimension has more than one entry).
template <typename T>
bool tensor_aligned16(const fo_rope_tensor &x, int64_t batch, int64_t tokens) {
    return !x.out || (aligned16(x.in) && aligned16(x.out) &&
                      stride_aligned16<T>(x.in_batch_stride, batch) &&
                      stride_aligned16<T>(x.in_head_stride, x.heads) &&
                      stride_aligned16<T>(x.in_token_stride, tokens) &&
                      stride_aligned16<T>(x.out_batch_stride, batch) &&
                      stride_aligned16<T>(x.out_head_stride, x.heads) &&
                      stride_aligned16<T>(x.out_token_stride, tokens));
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int fo_cuda_rope(int device_index, uintptr_t stream, const fo_rope_params *in) {
    return launch_on(in->backward ? "fo_rope_backward" : "fo_rope_forward", device_index, [&] {
        const fo_rope_params a = *in;
        const int64_t half = a.rotary_dim / 2;
        dispatch_dtype(a.dtype, [&](auto tag) {
            using T = decltype(tag);
            constexpr int G = kHeadsPerThread<T>;
            RopeItems walk;
            walk.rotation_chunks = chunks_per_row(half);
            walk.chunks = walk.rotation_chunks + chunks_per_row(a.head_dim - a.rotary_dim);
            walk.q_groups = a.q.out ? (a.q.heads + G - 1) / G : 0;
            walk.groups = walk.q_groups + (a.k.out ? (a.k.heads + G - 1) / G : 0);
            const int64_t items = a.batch * a.tokens * walk.groups * walk.chunks;
            int64_t blocks = (items + kThreads - 1) / kThreads;
            if (blocks > kMaxColBlocks) blocks = kMaxColBlocks;
            // 16-byte accesses: whole chunks on both sides of rotary_dim
            // and every operand and stride aligned
            const bool whole = half % kChunk == 0 && (a.head_dim - a.rotary_dim) % kChunk == 0;
            dispatch_companion<T>(a.cos_dtype, [&](auto cos_tag) {
                using C = decltype(cos_tag);
                const bool vec = whole && tensor_aligned16<T>(a.q, a.batch, a.tokens) &&
                                 tensor_aligned16<T>(a.k, a.batch, a.tokens) &&
                                 (half == 0 ||
                                  (aligned16(a.cos) && aligned16(a.sin) &&
                                   stride_aligned16<C>(a.cos_batch_stride, a.batch) &&
                                   stride_aligned16<C>(a.cos_token_stride, a.tokens) &&
                                   stride_aligned16<C>(a.sin_batch_stride, a.batch) &&
                                   stride_aligned16<C>(a.sin_token_stride, a.tokens)));
                auto launch = [&](auto kernel, auto count) {
                    kernel<<<unsigned(blocks), kThreads, 0, cudaStream_t(stream)>>>(a, walk, count);
                };
                auto with_index = [&](auto is_vec, auto is_backward) {
                    constexpr bool kVec = decltype(is_vec)::value;
                    constexpr bool kBackward = decltype(is_backward)::value;
                    // 32-bit index arithmetic where the items allow it (a
                    // 64-bit division costs several times a 32-bit one)
                    if (items <= INT32_MAX)
                        launch(rope_kernel<T, C, kVec, kBackward, uint32_t>, uint32_t(items));
                    else
                        launch(rope_kernel<T, C, kVec, kBackward, uint64_t>, uint64_t(items));
                };
                using yes = std::true_type;
                using no = std::false_type;
                if (vec) {
                    if (a.backward) with_index(yes{}, yes{});
                    else with_index(yes{}, no{});
                } else {
                    if (a.backward) with_index(no{}, yes{});
                    else with_index(no{}, no{});
                }
            });
        });
    });
}
