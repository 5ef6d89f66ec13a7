// norm_common.cuh: what both kinds of norm kernel share (norm_registers.cuh,
// which holds a row in registers, and the streaming kernels of norm.cu):
// the launch shape of a row, the deterministic row sum, dropout, parameter
// loads, and the residual and gradient steps of one chunk. Included by norm.cu only.
#pragma once

#include <cooperative_groups.h>

#include <cfloat>

#include "../philox.h"
#include "common.cuh"

namespace fo {
namespace {

struct RowBlocks {
    dim3 grid, block;
};

constexpr int64_t kMaxRowGroups = 65535;
// At most 512 threads a row: with __launch_bounds__(kMaxRowThreads) every
// instantiation (fp64, the unaligned path, debug builds) gets the registers
// it needs; 1024 threads of more than 64 registers would not launch.
constexpr int kMaxRowThreads = 512;

inline RowBlocks row_blocks(int64_t rows, int64_t cols) {
    int64_t chunks = chunks_per_row(cols);
    int tx = 32;
    while (tx < kMaxRowThreads && tx < chunks) tx *= 2;
    int ty = tx >= kThreads ? 1 : kThreads / tx;
    int64_t groups = (rows + ty - 1) / ty;
    if (groups > kMaxRowGroups) groups = kMaxRowGroups;
    if (groups < 1) groups = 1;
    return {dim3(unsigned(groups)), dim3(unsigned(tx), unsigned(ty))};
}

// The sum of v over the blockDim.x threads of this row, the same bits in
// every thread: a butterfly within warps (commutative adds, so all lanes
// agree), then the warps' sums in order. Every thread of the block calls it.
template <typename A>
__device__ A row_sum(A v) {
    __shared__ A warp_sums[8][kMaxRowThreads / 32];  // ty <= 8 (tx >= 32)
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int warps = blockDim.x / 32;
    if (warps == 1) return v;
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.y][threadIdx.x / 32] = v;
    __syncthreads();
    A total = 0;
    for (int w = 0; w < warps; w++) total += warp_sums[threadIdx.y][w];
    __syncthreads();  // the next call reuses warp_sums
    return total;
}

// The max of v over the blockDim.x threads of this row, in every thread
// (max is exact in any order). Every thread of the block calls it.
__device__ float row_max(float v) {
    __shared__ float warp_maxima[8][kMaxRowThreads / 32];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    const int warps = blockDim.x / 32;
    if (warps == 1) return v;
    if (threadIdx.x % 32 == 0) warp_maxima[threadIdx.y][threadIdx.x / 32] = v;
    __syncthreads();
    for (int w = 0; w < warps; w++) v = fmaxf(v, warp_maxima[threadIdx.y][w]);
    __syncthreads();  // the next call reuses warp_maxima
    return v;
}

// row_sum over a row that a cluster of CLUSTER blocks holds (one row a
// block, blockDim.y == 1): each block's row_sum, then the blocks' totals
// read from each other's shared memory in rank order, the same bits in
// every block. The slot alternates with `parity`, so one cluster barrier a
// call suffices: a block writes a slot again two calls later, past the
// barrier of the call between, which no block reaches before it has read
// that slot. A kernel that calls this ends with cluster_sync(): a block's
// shared memory must outlive the others' reads of it.
template <int CLUSTER, typename A>
__device__ A cluster_row_sum(A v, int &parity) {
    const A total = row_sum(v);
    if constexpr (CLUSTER == 1) {
        return total;
    } else {
#if __CUDA_ARCH__ >= 900
        __shared__ A slots[2];
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (threadIdx.x == 0) slots[parity] = total;
        cluster.sync();
        A sum = 0;
#pragma unroll
        for (int rank = 0; rank < CLUSTER; rank++)
            sum += *cluster.map_shared_rank(&slots[parity], rank);
        parity ^= 1;
        return sum;
#else
        __trap();  // launched only where the device has clusters
        return total;
#endif
    }
}

// row_sum of two values at once: one pass through shared memory for both.
template <typename A>
__device__ void row_sum2(A &u, A &v) {
    __shared__ A warp_sums[8][kMaxRowThreads / 32][2];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        u += __shfl_xor_sync(0xffffffffu, u, offset);
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    const int warps = blockDim.x / 32;
    if (warps == 1) return;
    if (threadIdx.x % 32 == 0) {
        warp_sums[threadIdx.y][threadIdx.x / 32][0] = u;
        warp_sums[threadIdx.y][threadIdx.x / 32][1] = v;
    }
    __syncthreads();
    u = v = 0;
    for (int w = 0; w < warps; w++) {
        u += warp_sums[threadIdx.y][w][0];
        v += warp_sums[threadIdx.y][w][1];
    }
    __syncthreads();  // the next call reuses warp_sums
}

// 1 / sqrt(v): one MUFU.RSQ in fp32 (2 ulp, as torch's own CUDA norms
// use), where the IEEE square root and division cost about 30 instructions
// a row: these kernels are bound by instructions issued, not only by bytes
// (ncu, H100: schedulers issuing in 62-76% of cycles).
template <typename A>
__device__ __forceinline__ A reciprocal_sqrt(A v) {
    if constexpr (std::is_same_v<A, float>)
        return rsqrtf(v);
    else
        return A(1) / sqrt(v);
}

// The count, mean and M2 (sum of squared deviations about the mean) of some
// values: a LayerNorm row's statistics in one pass over it, where the
// two-pass form (the mean, then the deviations about it) reads it twice.
// merge is Chan et al.'s rule, exact where E[h^2] - mean^2 would cancel.
template <typename A>
struct Moments {
    A n, mean, m2;  // no initializers: it also lives in __shared__
};

// 1 / n for a count n > 0, without a division: division (and __frcp_rn,
// __drcp_rn) call a slow path that made ptxas spill. fp32: the hardware
// reciprocal, within an ulp; fp64: two Newton steps from it (22 bits, then
// 44, then all 53).
__device__ __forceinline__ float reciprocal(float n) { return __fdividef(1.0f, n); }
__device__ __forceinline__ double reciprocal(double n) {
    double r = __fdividef(1.0f, float(n));
    r = r * (2 - n * r);
    return r * (2 - n * r);
}

template <typename A>
__device__ __forceinline__ Moments<A> merge(const Moments<A> &a, const Moments<A> &b) {
    if (a.n == A(0)) return b;  // exactly b's mean: a constant row's stays exact
    const A n = a.n + b.n;
    const A share = n > A(0) ? b.n * reciprocal(n) : A(0);  // an empty side changes nothing
    const A delta = b.mean - a.mean;
    return {n, a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.n * share};
}

// merge over the blockDim.x threads of this row, the same bits in every
// thread: a fixed tree within each warp (lane i takes lane i + offset; the
// merge is not commutative in its rounding, so no butterfly), then the
// warps' results in order. Every thread of the block calls it.
template <typename A>
__device__ Moments<A> row_moments(Moments<A> m) {
    __shared__ Moments<A> warp_moments[8][kMaxRowThreads / 32];  // ty <= 8
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        Moments<A> other;  // past the warp's end a lane reads its own: only lane 0's result counts
        other.n = __shfl_down_sync(0xffffffffu, m.n, offset);
        other.mean = __shfl_down_sync(0xffffffffu, m.mean, offset);
        other.m2 = __shfl_down_sync(0xffffffffu, m.m2, offset);
        m = merge(m, other);
    }
    const int warps = blockDim.x / 32;
    if (warps == 1) {
        m.n = __shfl_sync(0xffffffffu, m.n, 0);
        m.mean = __shfl_sync(0xffffffffu, m.mean, 0);
        m.m2 = __shfl_sync(0xffffffffu, m.m2, 0);
        return m;
    }
    if (threadIdx.x % 32 == 0) warp_moments[threadIdx.y][threadIdx.x / 32] = m;
    __syncthreads();
    Moments<A> total = warp_moments[threadIdx.y][0];
    for (int w = 1; w < warps; w++) total = merge(total, warp_moments[threadIdx.y][w]);
    __syncthreads();  // the next call reuses warp_moments
    return total;
}

// Multiplies the 8 values of a chunk by the dropout keep mask / (1 - p):
// values 0-3 by the Philox block of counter0, 4-7 by counter1's (see
// philox.h; a counter is four columns of a row).
template <typename A>
__device__ __forceinline__ void apply_dropout_counters(A (&v)[kChunk], uint64_t counter0,
                                                       uint64_t counter1, double p, uint64_t seed) {
    const uint32_t threshold = fo_dropout_threshold(p);
    const A scale = A(1.0 / (1.0 - p));
    const fo_philox_block b0 = fo_philox(seed, counter0);
    const fo_philox_block b1 = fo_philox(seed, counter1);
#pragma unroll
    for (int i = 0; i < kChunk; i++) {
        const uint32_t word = i < 4 ? b0.lane[i] : b1.lane[i - 4];
        v[i] = word >= threshold ? v[i] * scale : A(0);
    }
}

// The Philox counter of row `row`'s first four columns; columns c to c + 3
// (c % 4 == 0) take the counter c / 4 after it.
__device__ __forceinline__ uint64_t dropout_row_counter(int64_t row, int64_t cols,
                                                        uint64_t offset) {
    return offset + uint64_t(row) * fo_dropout_row_counters(cols);
}

// The chunk of 8 columns from col of row `row`.
template <typename A>
__device__ __forceinline__ void apply_dropout(A (&v)[kChunk], int64_t row, int64_t col,
                                              int64_t cols, double p, uint64_t seed,
                                              uint64_t offset) {
    const uint64_t counter = dropout_row_counter(row, cols, offset) + uint64_t(col) / 4;
    apply_dropout_counters(v, counter, counter + 1, p, seed);
}

// Chunk c of row `row`, its values placed as ACCESS says: spread, values
// 0-3 and 4-7 are 4 adjacent columns each, 128 columns apart.
template <typename T, Access ACCESS, typename A>
__device__ __forceinline__ void apply_dropout_chunk(A (&v)[kChunk], int64_t row, int64_t c,
                                                    int64_t cols, double p, uint64_t seed,
                                                    uint64_t offset) {
    static_assert(ACCESS != kSpread || kVectorsPerChunk<T> == 2, "a vector is 4 columns");
    if constexpr (ACCESS == kSpread) {
        const uint64_t counter = dropout_row_counter(row, cols, offset);
        apply_dropout_counters(v, counter + uint64_t(element_offset<T, ACCESS>(c, 0)) / 4,
                               counter + uint64_t(element_offset<T, ACCESS>(c, 4)) / 4, p, seed);
    } else {
        apply_dropout(v, row, c * kChunk, cols, p, seed, offset);
    }
}

template <typename P, typename A>
__device__ __forceinline__ void load_params(A (&out)[kChunk], const P *__restrict__ p, int n,
                                            A missing) {
#pragma unroll
    for (int i = 0; i < kChunk; i++) out[i] = p && i < n ? A(to_acc(p[i])) : missing;
}

template <typename A>
__device__ __forceinline__ void fill(A (&v)[kChunk], A value) {
#pragma unroll
    for (int i = 0; i < kChunk; i++) v[i] = value;
}

// The formulas of the norms, each written once and used by every kernel.
//
// A row's rstd = 1 / sqrt(variance + eps).
template <typename A>
__device__ __forceinline__ A row_rstd(A variance, double eps) {
    return reciprocal_sqrt(variance + A(eps));
}

// xhat = (h - mean) * rstd: exactly 0 where h is the row's mean.
template <typename A>
__device__ __forceinline__ A normalized(A h, A mean, A rstd) {
    return (h - mean) * rstd;
}

// The output of a chunk, y = (h - mean) * rstd * w + b. EXACT: as
// written, the subtraction first, so that y is exactly b where h is the
// mean (a constant row, whose mean the kernels take exactly). Else in two
// FFMAs an element, h * rstd + shift (shift = -mean * rstd, the caller's,
// once a row), then * w + b:
// the 16-bit forward of a short row runs in one wave, every warp loading,
// then all computing, so the instructions after the loads are time the
// memory waits (five an element took 5% more cycles); shift rounds once
// more than h - mean would, an error of |mean| * rstd ulps of fp32, below
// a 16-bit output's. A missing weight is ones, a missing bias zeros (+ 0:
// -0 becomes +0).
template <bool EXACT, typename A>
__device__ __forceinline__ void normalize_chunk(A (&v)[kChunk], A mean, A rstd, A shift,
                                                const A (&w)[kChunk], const A (&b)[kChunk]) {
#pragma unroll
    for (int i = 0; i < kChunk; i++)
        v[i] = EXACT ? fma(normalized(v[i], mean, rstd), w[i], b[i])
                     : fma(fma(v[i], rstd, shift), w[i], b[i]);
}

// The FP8 output's first pass (norm.cu): the running max of |y| over the
// chunk's first n values as T stores them, the finite ones only (as the
// cast's amax takes them).
template <typename T, typename A>
__device__ __forceinline__ float output_amax(float running, const A (&v)[kChunk], int n = kChunk) {
#pragma unroll
    for (int i = 0; i < kChunk; i++) {
        const float m = fabsf(float(to_acc(from_acc<T>(v[i]))));
        if (i < n && m <= FLT_MAX) running = fmaxf(running, m);
    }
    return running;
}

// max(*out, the block's v) into *out (zeroed before the launch; non-negative
// floats order as their bits do). Every thread of the block calls it.
__device__ void block_atomic_max(float *out, float v) {
    __shared__ float warps[32];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    const int t = int(threadIdx.y * blockDim.x + threadIdx.x);
    if (t % 32 == 0) warps[t / 32] = v;
    __syncthreads();
    if (t == 0) {
        for (int w = 1; w < int(blockDim.x * blockDim.y / 32); w++) v = fmaxf(v, warps[w]);
        atomicMax(reinterpret_cast<int *>(out), __float_as_int(v));
    }
}

// Row r's statistics as the output took them, for the FP8 output's cast
// (norm.cu's NormSource): mean and the rstd that y used.
template <typename A>
__device__ __forceinline__ void store_row_stats(void *row_stats, int64_t r, A mean, A rstd) {
    A *s = static_cast<A *>(row_stats) + 2 * r;
    s[0] = mean;
    s[1] = rstd;
}

// The register and shared-memory forward of fp64 take the exact order and
// mean (corrected_mean); the register forward of fp32 and 16-bit the FFMAs,
// a mean exact where the row is constant (kCentredRow) and y = b where the
// variance is 0: the exact order took two instructions an element more and
// 64 -> 72 registers at 2 chunks a thread (3 blocks an SM, not 4). The
// streaming forward is exact in every dtype.
template <typename T>
constexpr bool kExactNormalize = std::is_same_v<T, double>;

// A row's mean made exact where the row is constant: mean + sum(h - mean)
// / cols, from the deviations of the variance pass. In a constant row every
// deviation is the same small multiple of an ulp, their sum and its share
// are exact, and so is the corrected mean; the sum of n copies of a value
// and its product with 1/n, the first mean, round.
template <typename A>
__device__ __forceinline__ A corrected_mean(A mean, A deviations, A inv_cols) {
    return mean + deviations * inv_cols;
}

// wdy = dy * weight, rounded once: the row sums and dh take the same
// value, so wdy - mean(wdy) is exactly 0 where they are equal (a row of one
// element) instead of the product's rounding error that an FMA of the
// product and the subtraction would leave (it is multiplied by rstd, up to
// 1/sqrt(eps)). A product of two 16-bit values (T and P) is exact in fp32:
// there the compiler may fuse it, with the same bits.
template <typename T, typename P, typename A>
__device__ __forceinline__ A weighted_dy(A dy, A w) {
    if constexpr (sizeof(T) == 2 && sizeof(P) == 2)
        return dy * w;
    else if constexpr (std::is_same_v<A, float>)
        return __fmul_rn(dy, w);
    else
        return __dmul_rn(dy, w);
}

// What dh needs of a row beside its own values: from the row sums of wdy
// and wdy * xhat (RMSNorm drops the mean(wdy) term).
template <typename A>
struct RowGradient {
    A mean, rstd, mean_wdy, xhat_scale;  // xhat_scale: rstd * mean(wdy * xhat)
};
template <typename A>
__device__ __forceinline__ RowGradient<A> row_gradient(A mean, A rstd, A sum_wdy, A sum_wdy_xhat,
                                                       A inv_cols, bool rms) {
    return {mean, rstd, rms ? A(0) : sum_wdy * inv_cols, rstd * (sum_wdy_xhat * inv_cols)};
}

// The gradient of h from the norm, one element: dh = rstd * (wdy -
// mean(wdy) - xhat * mean(wdy * xhat)), as rstd * ((wdy - mean(wdy)) - (h
// - mean) * xhat_scale): where h is the mean (a one-element row, a constant
// one) the second term is exactly 0, and with wdy = mean(wdy) so is dh.
template <typename A>
__device__ __forceinline__ A norm_dh(const RowGradient<A> &row, A wdy, A h) {
    return row.rstd * ((wdy - row.mean_wdy) - (h - row.mean) * row.xhat_scale);
}

// The residual and gradient steps of one chunk, for the register and
// shared-memory kernels. (The streaming backward spells the gradient step
// out: calling store_dh_chunk there made ptxas spill 16 bytes in its fp16
// sm_90 instantiation.)
//
// Forward, chunk c of row r: h = dropout(x) + residual, written to
// residual_out (where `store`) and returned in x's place as stored (rounded
// to R), which is what the statistics and backward then see. ACCESS places
// the chunk's values in every operand (R is T where it spreads them).
template <typename T, typename R, bool DROPOUT, Access ACCESS>
__device__ __forceinline__ void add_residual(acc_t<T> (&x)[kChunk], acc_t<R> (&residual)[kChunk],
                                             const fo_norm_forward_params a, int64_t r, int64_t c,
                                             bool store) {
    using A = acc_t<T>;
    if constexpr (DROPOUT)
        apply_dropout_chunk<T, ACCESS>(x, r, c, a.cols, a.dropout_p, a.seed, a.offset);
#pragma unroll
    for (int i = 0; i < kChunk; i++) {
        residual[i] += acc_t<R>(x[i]);
        x[i] = A(to_acc(from_acc<R>(residual[i])));
    }
    if (store)
        store_row_chunk<R, ACCESS>(static_cast<R *>(a.residual_out) + r * a.cols, residual, c,
                                   a.cols);
}

// Backward, chunk c of row r: dh (the gradient of h from the norm) plus the
// gradient arriving at residual_out is dresidual; dx is that through the
// dropout mask. dx_row and dresidual_row: where the row of each goes (null:
// not wanted; the register kernel holds some rows in shared memory). (ACCESS
// is never kScalar here: rows of whole chunks.)
template <typename T, typename H, Access ACCESS>
__device__ __forceinline__ void store_dh_chunk(acc_t<T> (&dh)[kChunk],
                                               const fo_norm_backward_params a, int64_t r,
                                               int64_t c, T *dx_row, H *dresidual_row) {
    using A = acc_t<T>;
    if (a.dresidual_out) {
        acc_t<H> g[kChunk];
        load_row_chunk<H, ACCESS>(
            g, static_cast<const H *>(a.dresidual_out) + r * a.dresidual_out_row_stride, c, a.cols);
#pragma unroll
        for (int i = 0; i < kChunk; i++) dh[i] += A(g[i]);
    }
    if (dresidual_row) {
        acc_t<H> out[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) out[i] = acc_t<H>(dh[i]);
        store_row_chunk<H, ACCESS>(dresidual_row, out, c, a.cols);
    }
    if (dx_row) {
        if (a.dropout_p > 0)
            apply_dropout_chunk<T, ACCESS>(dh, r, c, a.cols, a.dropout_p, a.seed, a.offset);
        store_row_chunk<T, ACCESS>(dx_row, dh, c, a.cols);
    }
}

}  // namespace
}  // namespace fo
