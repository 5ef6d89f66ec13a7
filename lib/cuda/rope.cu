// rope.cu: the rotary position embedding of q and k (rotate-half or
// interleaved pairs, partial rotary) and its transpose on CUDA: one launch
// for both tensors.
#include "common.cuh"

namespace fo {
namespace {

// n / d and n % d for n < 2^31 by a multiply and a shift (Granlund and
// Montgomery), d set on the host: a 32-bit division costs about 20
// instructions, and each item takes three.
struct FastDivmod {
    uint32_t d = 1, m = 1, s = 0;
    FastDivmod() = default;
    explicit FastDivmod(uint32_t divisor) : d(divisor) {
        while ((uint64_t(1) << s) < d) s++;
        m = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << s) - d) / d + 1);
    }
    __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

// The launch's items: (token, head slice, chunk), the chunk fastest. A
// thread takes one chunk of a row (8 rotated pairs (i, i + rotary_dim / 2),
// or 8 elements past rotary_dim, copied) in every `slices`-th head of q and
// of k at its token (of the two as one list, with 16-byte accesses): the
// chunk's cos and sin are loaded once for all of them.
struct RopeItems {
    FastDivmod chunks, slices, tokens;
    int64_t rotation_chunks;
};

// The rotation of one pair (lo, hi) = (x[i], x[i + rotary_dim / 2]):
// forward (lo c_lo - hi s_lo, hi c_hi + lo s_hi), backward (its transpose)
// (lo c_lo + hi s_hi, hi c_hi - lo s_lo).
template <typename A, bool BACKWARD>
__device__ __forceinline__ void rotate_pair(A lo, A hi, A c_lo, A c_hi, A s_lo, A s_hi, A &out_lo,
                                            A &out_hi) {
    out_lo = lo * c_lo + (BACKWARD ? A(1) : A(-1)) * (hi * (BACKWARD ? s_hi : s_lo));
    out_hi = hi * c_hi + (BACKWARD ? A(-1) : A(1)) * (lo * (BACKWARD ? s_lo : s_hi));
}

// q_out, k_out of one tensor's heads s, s + slices, ... at (b, t), element
// by element (unaligned operands; rotate_grouped takes 16-byte accesses)
template <typename T, typename A, bool BACKWARD>
__device__ __forceinline__ void rotate_heads(const fo_rope_tensor &x, int64_t b, int64_t t, int s,
                                             int slices, int64_t i, int64_t half, int n,
                                             const A (&c_lo)[kChunk], const A (&c_hi)[kChunk],
                                             const A (&s_lo)[kChunk], const A (&s_hi)[kChunk]) {
    const T *in = static_cast<const T *>(x.in) + b * x.in_batch_stride + t * x.in_token_stride + i;
    T *out = static_cast<T *>(x.out) + b * x.out_batch_stride + t * x.out_token_stride + i;
#pragma unroll 2
    for (int64_t h = s; h < x.heads; h += slices) {
        A lo[kChunk], hi[kChunk], out_lo[kChunk], out_hi[kChunk];
        load_chunk<T, false>(lo, in + h * x.in_head_stride, n);
        load_chunk<T, false>(hi, in + h * x.in_head_stride + half, n);
#pragma unroll
        for (int e = 0; e < kChunk; e++)
            rotate_pair<A, BACKWARD>(lo[e], hi[e], c_lo[e], c_hi[e], s_lo[e], s_hi[e], out_lo[e],
                                     out_hi[e]);
        store_chunk<T, false>(out + h * x.out_head_stride, out_lo, n);
        store_chunk<T, false>(out + h * x.out_head_stride + half, out_hi, n);
    }
}

// The heads rotate_grouped loads before it rotates or stores any: 128 bytes
// in flight, held as loaded (120 registers for 16-bit types, 2 blocks an
// SM; held to 3 blocks, it spilled and ran 1.5x slower).
template <typename T>
constexpr int kGroup = 8 / int(sizeof(T));
constexpr int64_t kRopeBlocksPerSM = 2;  // of the 16-byte kernel at 16-bit (above)

template <typename T>
struct RawChunk {
    uint4 v[sizeof(T) * kChunk / 16];
};

template <typename T>
__device__ __forceinline__ RawChunk<T> load_raw(const T *p) {
    RawChunk<T> r;
#pragma unroll
    for (int v = 0; v < int(sizeof(T) * kChunk / 16); v++)
        r.v[v] = __ldg(reinterpret_cast<const uint4 *>(p) + v);
    return r;
}

template <typename T, typename A, bool BACKWARD>
__device__ __forceinline__ void rotate_store(const RawChunk<T> &lo_raw, const RawChunk<T> &hi_raw,
                                             T *out, int64_t half, const A (&c_lo)[kChunk],
                                             const A (&c_hi)[kChunk], const A (&s_lo)[kChunk],
                                             const A (&s_hi)[kChunk]) {
    const T *lo = reinterpret_cast<const T *>(lo_raw.v),
            *hi = reinterpret_cast<const T *>(hi_raw.v);
    RawChunk<T> out_lo, out_hi;
    T *ol = reinterpret_cast<T *>(out_lo.v), *oh = reinterpret_cast<T *>(out_hi.v);
#pragma unroll
    for (int e = 0; e < kChunk; e++) {
        A l, h;
        rotate_pair<A, BACKWARD>(to_acc(lo[e]), to_acc(hi[e]), c_lo[e], c_hi[e], s_lo[e], s_hi[e],
                                 l, h);
        ol[e] = from_acc<T>(l);
        oh[e] = from_acc<T>(h);
    }
#pragma unroll
    for (int v = 0; v < int(sizeof(T) * kChunk / 16); v++) {
        reinterpret_cast<uint4 *>(out)[v] = out_lo.v[v];
        reinterpret_cast<uint4 *>(out + half)[v] = out_hi.v[v];
    }
}

// With 16-byte accesses, a thread's heads at its token: q's wanted heads
// then k's as one list, every `slices`-th from s, a group of kGroup<T> at a
// time: every load of the group issued before any rotation or store, so no
// load waits on a store (k's on q's, the next head's on this one's).
template <typename T, typename A, bool BACKWARD>
__device__ __forceinline__ void rotate_grouped(const fo_rope_params &a, int64_t b, int64_t t, int s,
                                               int slices, int64_t i, int64_t half,
                                               const A (&c_lo)[kChunk], const A (&c_hi)[kChunk],
                                               const A (&s_lo)[kChunk], const A (&s_hi)[kChunk]) {
    constexpr int G = kGroup<T>;
    const int64_t q_heads = a.q.out ? a.q.heads : 0;
    const int64_t heads = q_heads + (a.k.out ? a.k.heads : 0);
    for (int64_t h0 = s; h0 < heads; h0 += int64_t(G) * slices) {
        RawChunk<T> lo[G], hi[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const int64_t h = h0 + int64_t(g) * slices;
            if (h < heads) {
                const fo_rope_tensor &x = h < q_heads ? a.q : a.k;
                const T *in = static_cast<const T *>(x.in) + b * x.in_batch_stride +
                              t * x.in_token_stride +
                              (h < q_heads ? h : h - q_heads) * x.in_head_stride + i;
                lo[g] = load_raw(in);
                hi[g] = load_raw(in + half);
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            const int64_t h = h0 + int64_t(g) * slices;
            if (h < heads) {
                const fo_rope_tensor &x = h < q_heads ? a.q : a.k;
                T *out = static_cast<T *>(x.out) + b * x.out_batch_stride + t * x.out_token_stride +
                         (h < q_heads ? h : h - q_heads) * x.out_head_stride + i;
                rotate_store<T, A, BACKWARD>(lo[g], hi[g], out, half, c_lo, c_hi, s_lo, s_hi);
            }
        }
    }
}

// The interleaved pairs [i, i + n) of a row whose pair i starts at p:
// lo[e] = p[2 e], hi[e] = p[2 e + 1], as two chunks of elements.
template <typename T, bool VEC>
__device__ __forceinline__ void load_interleaved(acc_t<T> (&lo)[kChunk], acc_t<T> (&hi)[kChunk],
                                                 const T *p, int n) {
    acc_t<T> first[kChunk], second[kChunk];
    load_chunk<T, VEC>(first, p, 2 * n < kChunk ? 2 * n : kChunk);
    if (2 * n > kChunk) {
        load_chunk<T, VEC>(second, p + kChunk, 2 * n - kChunk);
    } else {
#pragma unroll
        for (int e = 0; e < kChunk; e++) second[e] = acc_t<T>(0);
    }
#pragma unroll
    for (int e = 0; e < kChunk / 2; e++) {
        lo[e] = first[2 * e], hi[e] = first[2 * e + 1];
        lo[e + kChunk / 2] = second[2 * e], hi[e + kChunk / 2] = second[2 * e + 1];
    }
}

template <typename T, bool VEC>
__device__ __forceinline__ void store_interleaved(T *p, const acc_t<T> (&lo)[kChunk],
                                                  const acc_t<T> (&hi)[kChunk], int n) {
    acc_t<T> first[kChunk], second[kChunk];
#pragma unroll
    for (int e = 0; e < kChunk / 2; e++) {
        first[2 * e] = lo[e], first[2 * e + 1] = hi[e];
        second[2 * e] = lo[e + kChunk / 2], second[2 * e + 1] = hi[e + kChunk / 2];
    }
    store_chunk<T, VEC>(p, first, 2 * n < kChunk ? 2 * n : kChunk);
    if (2 * n > kChunk) store_chunk<T, VEC>(p + kChunk, second, 2 * n - kChunk);
}

// rotate_heads for interleaved pairs: pair i is (x[2 i], x[2 i + 1])
template <typename T, typename A, bool VEC, bool BACKWARD>
__device__ __forceinline__ void rotate_heads_interleaved(const fo_rope_tensor &x, int64_t b,
                                                         int64_t t, int s, int slices, int64_t i,
                                                         int n, const A (&c_lo)[kChunk],
                                                         const A (&c_hi)[kChunk],
                                                         const A (&s_lo)[kChunk],
                                                         const A (&s_hi)[kChunk]) {
    const T *in =
        static_cast<const T *>(x.in) + b * x.in_batch_stride + t * x.in_token_stride + 2 * i;
    T *out = static_cast<T *>(x.out) + b * x.out_batch_stride + t * x.out_token_stride + 2 * i;
#pragma unroll 2
    for (int64_t h = s; h < x.heads; h += slices) {
        A lo[kChunk], hi[kChunk], out_lo[kChunk], out_hi[kChunk];
        load_interleaved<T, VEC>(lo, hi, in + h * x.in_head_stride, n);
#pragma unroll
        for (int e = 0; e < kChunk; e++)
            rotate_pair<A, BACKWARD>(lo[e], hi[e], c_lo[e], c_hi[e], s_lo[e], s_hi[e], out_lo[e],
                                     out_hi[e]);
        store_interleaved<T, VEC>(out + h * x.out_head_stride, out_lo, out_hi, n);
    }
}

template <typename T, bool VEC>
__device__ __forceinline__ void copy_heads(const fo_rope_tensor &x, int64_t b, int64_t t, int s,
                                           int slices, int64_t j, int n) {
    using A = acc_t<T>;
    const T *in = static_cast<const T *>(x.in) + b * x.in_batch_stride + t * x.in_token_stride + j;
    T *out = static_cast<T *>(x.out) + b * x.out_batch_stride + t * x.out_token_stride + j;
#pragma unroll 2
    for (int64_t h = s; h < x.heads; h += slices) {
        A v[kChunk];
        load_chunk<T, VEC>(v, in + h * x.in_head_stride, n);
        store_chunk<T, VEC>(out + h * x.out_head_stride, v, n);
    }
}

template <typename T, typename C, bool VEC, bool BACKWARD, bool INTERLEAVED, typename I>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const fo_rope_params a, const RopeItems walk, const I items) {
    using A = acc_t<T>;
    const int64_t half = a.rotary_dim / 2;
    const int slices = int(walk.slices.d);
    for (I item = I(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
         item += I(gridDim.x) * blockDim.x) {
        I c, rest, s, token, b, t;
        if constexpr (sizeof(I) == 4) {
            rest = walk.chunks.div(item), c = item - rest * walk.chunks.d;
            token = walk.slices.div(rest), s = rest - token * walk.slices.d;
            b = walk.tokens.div(token), t = token - b * walk.tokens.d;
        } else {
            rest = item / walk.chunks.d, c = item % walk.chunks.d;
            token = rest / walk.slices.d, s = rest % walk.slices.d;
            b = token / I(a.tokens), t = token % I(a.tokens);
        }
        if (int64_t(c) < walk.rotation_chunks) {
            const int64_t i = int64_t(c) * kChunk;
            const int n = int(half - i < kChunk ? half - i : kChunk);
            const C *cos = static_cast<const C *>(a.cos) + int64_t(b) * a.cos_batch_stride +
                           int64_t(t) * a.cos_token_stride;
            const C *sin = static_cast<const C *>(a.sin) + int64_t(b) * a.sin_batch_stride +
                           int64_t(t) * a.sin_token_stride;
            A c_lo[kChunk], c_hi[kChunk], s_lo[kChunk], s_hi[kChunk];
            if constexpr (INTERLEAVED) {
                load_interleaved<C, VEC>(c_lo, c_hi, cos + 2 * i, n);
                load_interleaved<C, VEC>(s_lo, s_hi, sin + 2 * i, n);
                if (a.q.out)
                    rotate_heads_interleaved<T, A, VEC, BACKWARD>(a.q, b, t, int(s), slices, i, n,
                                                                  c_lo, c_hi, s_lo, s_hi);
                if (a.k.out)
                    rotate_heads_interleaved<T, A, VEC, BACKWARD>(a.k, b, t, int(s), slices, i, n,
                                                                  c_lo, c_hi, s_lo, s_hi);
                continue;
            }
            cos += i, sin += i;
            load_chunk<C, VEC>(c_lo, cos, n);
            load_chunk<C, VEC>(c_hi, cos + half, n);
            load_chunk<C, VEC>(s_lo, sin, n);
            load_chunk<C, VEC>(s_hi, sin + half, n);
            if constexpr (VEC) {
                rotate_grouped<T, A, BACKWARD>(a, b, t, int(s), slices, i, half, c_lo, c_hi, s_lo,
                                               s_hi);
            } else {
                if (a.q.out)
                    rotate_heads<T, A, BACKWARD>(a.q, b, t, int(s), slices, i, half, n, c_lo, c_hi,
                                                 s_lo, s_hi);
                if (a.k.out)
                    rotate_heads<T, A, BACKWARD>(a.k, b, t, int(s), slices, i, half, n, c_lo, c_hi,
                                                 s_lo, s_hi);
            }
        } else {
            const int64_t j = a.rotary_dim + (int64_t(c) - walk.rotation_chunks) * kChunk;
            const int n = int(a.head_dim - j < kChunk ? a.head_dim - j : kChunk);
            if (a.q.out) copy_heads<T, VEC>(a.q, b, t, int(s), slices, j, n);
            if (a.k.out) copy_heads<T, VEC>(a.k, b, t, int(s), slices, j, n);
        }
    }
}

// A tensor's input and output strides keep 16-byte alignment (where the
// dimension has more than one entry).
template <typename T>
bool tensor_aligned16(const fo_rope_tensor &x, int64_t batch, int64_t tokens) {
    return !x.out ||
           (aligned16(x.in) && aligned16(x.out) && stride_aligned16<T>(x.in_batch_stride, batch) &&
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
            // a thread takes 4 to 7 of the wanted heads of q and k together
            // (more past 16 slices): their loads in flight, the tables read
            // once for them (fewer heads a thread, more threads: slower).
            // Where the blocks fit one wave even so, at most 4 (one group at
            // 16-bit, one round of loads): 1.03-1.12x at 1-4M elements
            const int64_t heads = (a.q.out ? a.q.heads : 0) + (a.k.out ? a.k.heads : 0);
            RopeItems walk;
            walk.rotation_chunks = chunks_per_row(half);
            const int64_t chunks = walk.rotation_chunks + chunks_per_row(a.head_dim - a.rotary_dim);
            const int64_t slice_items = a.batch * a.tokens * chunks;
            int64_t slices = std::min<int64_t>(16, std::max<int64_t>(1, heads / 4));
            const int64_t one_group = std::min<int64_t>(16, (heads + 3) / 4);
            const int64_t wave =
                kRopeBlocksPerSM * int64_t(device_info(device_index).multiprocessors);
            if (one_group > slices && (slice_items * one_group + kThreads - 1) / kThreads <= wave)
                slices = one_group;
            const int64_t items = slice_items * slices;
            walk.chunks = FastDivmod(uint32_t(chunks));
            walk.slices = FastDivmod(uint32_t(slices));
            walk.tokens =
                FastDivmod(uint32_t(std::min<int64_t>(a.tokens, INT32_MAX)));  // (32-bit items)
            int64_t blocks = (items + kThreads - 1) / kThreads;
            if (blocks > kMaxColBlocks) blocks = kMaxColBlocks;
            // 16-byte accesses: whole chunks on both sides of rotary_dim
            // and every operand and stride aligned
            const bool whole = half % kChunk == 0 && (a.head_dim - a.rotary_dim) % kChunk == 0;
            dispatch_companion<T>(a.cos_dtype, [&](auto cos_tag) {
                using C = decltype(cos_tag);
                const bool vec = whole && tensor_aligned16<T>(a.q, a.batch, a.tokens) &&
                                 tensor_aligned16<T>(a.k, a.batch, a.tokens) &&
                                 (half == 0 || (aligned16(a.cos) && aligned16(a.sin) &&
                                                stride_aligned16<C>(a.cos_batch_stride, a.batch) &&
                                                stride_aligned16<C>(a.cos_token_stride, a.tokens) &&
                                                stride_aligned16<C>(a.sin_batch_stride, a.batch) &&
                                                stride_aligned16<C>(a.sin_token_stride, a.tokens)));
                auto launch = [&](auto kernel, auto count) {
                    kernel<<<unsigned(blocks), kThreads, 0, cudaStream_t(stream)>>>(a, walk, count);
                };
                auto with_index = [&](auto is_vec, auto is_backward, auto is_interleaved) {
                    constexpr bool kVec = decltype(is_vec)::value;
                    constexpr bool kBackward = decltype(is_backward)::value;
                    constexpr bool kInterleaved = decltype(is_interleaved)::value;
                    // 32-bit index arithmetic where the items allow it (a
                    // 64-bit division costs several times a 32-bit one)
                    if (items <= INT32_MAX)
                        launch(rope_kernel<T, C, kVec, kBackward, kInterleaved, uint32_t>,
                               uint32_t(items));
                    else
                        launch(rope_kernel<T, C, kVec, kBackward, kInterleaved, uint64_t>,
                               uint64_t(items));
                };
                auto with_pairs = [&](auto is_vec, auto is_backward) {
                    if (a.interleaved)
                        with_index(is_vec, is_backward, std::true_type{});
                    else
                        with_index(is_vec, is_backward, std::false_type{});
                };
                using yes = std::true_type;
                using no = std::false_type;
                if (vec) {
                    if (a.backward)
                        with_pairs(yes{}, yes{});
                    else
                        with_pairs(yes{}, no{});
                } else {
                    if (a.backward)
                        with_pairs(no{}, yes{});
                    else
                        with_pairs(no{}, no{});
                }
            });
        });
    });
}
