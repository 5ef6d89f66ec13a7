// norm_registers.cuh: the fast path of LayerNorm and RMSNorm, for rows whose
// operands are 16-byte aligned with cols a multiple of 8, and short enough to
// live in registers (norm_plan.cuh says how short).
//
// Why: the norms are memory-bound, so the least traffic wins. Each element
// is read from memory once and written once: forward keeps the row (h =
// dropout(x) + residual) in registers between the statistics and the
// output, and backward keeps dy and h between the row sums and dx (xhat is
// recomputed from them), and also adds this block's rows into per-column
// weight and bias partials in registers, so the column reduction needs no
// second read of dy and h. A
// second tiny kernel (finish_column_partials) sums the partials in a fixed
// order: no float atomics, the same bits on every run and every GPU.
//
// Each thread owns CPT chunks of 8 elements of a row, strided by TX (the
// threads of the row), so a warp's 16-byte loads are contiguous. The chunks
// are held as stored in memory (Held), not widened to fp32: a bf16 row takes
// half the registers, so twice as many rows fit on an SM and twice as many
// loads are in flight, which is what a memory-bound kernel lives on.
#pragma once

#include "norm_common.cuh"
#include "norm_held_partials.cuh"
#include "quantize_fp8.cuh"

namespace fo {
namespace {

// Two 16-bit values packed in a word, lower first, widened to fp32 from the
// word itself (bf16 by shifts, exact; fp16 by the paired conversion).
// Converted one element at a time, each half went through a 16-bit register
// first, and ptxas spilled 8-28 bytes of the 64-register forward.
template <typename S>
__device__ __forceinline__ float2 widen_pair(uint32_t word) {
    if constexpr (std::is_same_v<S, __nv_bfloat16>) {
        return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
    } else {
        static_assert(std::is_same_v<S, __half>, "a 16-bit type");
        __half2 pair;
        memcpy(&pair, &word, sizeof(word));
        return __half22float2(pair);
    }
}

// CPT x 8 values of a type S, held as their bits: 16-bit types take half
// the registers of fp32. Exact: every value held is an S already (x, or h
// as rounded to residual_out's dtype, or dy and h as loaded).
// PAIRS: 16-bit values are widened a word at a time (widen_pair), as the
// forward does; the backward widens them one by one (paired, up to 2.4%
// slower at 1024-2048 elements).
template <typename S, bool PAIRS = false>
struct Held {
    uint32_t words[kChunk * sizeof(S) / 4];

    // chunk c of a row, its vectors placed as ACCESS says (not kScalar),
    // or zeros where the chunk is past the row (or the row past the
    // tensor): a predicated load, no branch between this and the next
    template <Access ACCESS>
    __device__ __forceinline__ void load_if(bool ok, const S *__restrict__ row, int64_t c) {
        if (!ok) {
            clear();
            return;
        }
        load<ACCESS>(row, c);
    }
    // chunk c of a weight or bias, or `missing` in every element where
    // there is none: a predicated load onto the constant, not a select an
    // element after it
    template <Access ACCESS>
    __device__ __forceinline__ void load_or_fill(const S *__restrict__ row, int64_t c, S missing) {
        if (row) {
            load<ACCESS>(row, c);
            return;
        }
        alignas(16) S raw[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) raw[i] = missing;
        memcpy(words, raw, sizeof(words));
    }
    template <Access ACCESS>
    __device__ __forceinline__ void load(const S *__restrict__ row, int64_t c) {
#pragma unroll
        for (int v = 0; v < kVectorsPerChunk<S>; v++)
            reinterpret_cast<uint4 *>(words)[v] =
                __ldg(reinterpret_cast<const uint4 *>(row + vector_offset<S, ACCESS>(c, v)));
    }
    template <typename A>
    __device__ __forceinline__ void set(const A (&values)[kChunk]) {
        alignas(16) S raw[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) raw[i] = from_acc<S>(values[i]);
        memcpy(words, raw, sizeof(words));
    }
    template <typename A>
    __device__ __forceinline__ void get(A (&values)[kChunk]) const {
        if constexpr (PAIRS && sizeof(S) == 2) {
#pragma unroll
            for (int i = 0; i < kChunk / 2; i++) {
                const float2 pair = widen_pair<S>(words[i]);
                values[2 * i] = A(pair.x);
                values[2 * i + 1] = A(pair.y);
            }
        } else {
            alignas(16) S raw[kChunk];
            memcpy(raw, words, sizeof(words));
#pragma unroll
            for (int i = 0; i < kChunk; i++) values[i] = A(to_acc(raw[i]));
        }
    }
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int i = 0; i < int(sizeof(words) / 4); i++) words[i] = 0;
    }
};

// Registers, by the bytes a thread holds at its peak (ptxas -v for sm_80
// and sm_90 shows no spills in any instantiation; the knees were found
// there):
// - forward (ForwardHeld): __maxnreg__ 64 up to 96 bytes (four blocks of
//   256 threads an SM), 80 up to 160 (three), else 128 (two; one of 512).
//   fp64 always 128. (64 for 128 bytes spilled 8-64 bytes and was slower;
//   x with a residual of its own type and no dropout is the exception, at
//   64: 16-bit at any CPT, fp32 at up to 2.)
// - backward (backward_held_bytes: dy and h, the next row's where it
//   prefetches, and the fp32 weight/bias partials; 96 bytes for a bf16
//   chunk): __launch_bounds__(512, 2), i.e. 64 registers, up to 128 bytes;
//   else 128. fp64 always 128.
constexpr int forward_registers(int held_bytes) {
    return held_bytes <= 96 ? 64 : held_bytes <= 160 ? 80 : 128;
}
template <typename A, int HELD_BYTES>
constexpr int kBackwardMinBlocks = !std::is_same_v<A, double> && HELD_BYTES <= 128 ? 2 : 1;
// What a forward thread holds at its peak: x and the residual of kBatch
// chunks at a time (all CPT where they fit in 128 bytes: every load of a
// batch is in flight at once), beside the h of the batches before. The
// weight and bias are loaded at the output, a chunk at a time: holding
// them from the start (their latency hidden behind the row sums) measured
// no faster on the H100 and made ptxas spill. Without a residual x is
// loaded straight into h, and 16-bit rows count that one copy: 4 chunks a
// thread take 64 registers, four 256-thread blocks an SM or two of 512
// (against 80 registers: 6-21% faster at 4096 x 1024 and 16384 elements).
// fp32 still counts x twice at 2 chunks (80 registers; 64 ran 1-10%
// slower); at 4 chunks (rows of 8192) it counts one copy, 80 registers.
template <typename T, typename R, int CPT, bool RESIDUAL, bool DROPOUT = false>
struct ForwardHeld {
    static constexpr bool kOneCopy = !RESIDUAL && (sizeof(T) == 2 || (sizeof(T) == 4 && CPT >= 4));
    static constexpr int kChunkBytes = kChunk * int(sizeof(T) + (kOneCopy ? 0 : sizeof(R)));
    static constexpr int kBatch = CPT * kChunkBytes <= 128 || CPT == 1 ? CPT : CPT / 2;
    static_assert(kBatch * kChunkBytes <= 128 || CPT == 1, "a batch is at most 128 bytes");
    // (a residual also costs its pointers and the residual_out stores)
    static constexpr int kBytes =
        (CPT - kBatch) * kChunk * int(sizeof(R)) + kBatch * kChunkBytes + (RESIDUAL ? 64 : 0);
    // 16-bit x and residual without dropout fit 64 registers at any CPT (no
    // spills), below the budget of their held bytes: add + RMSNorm 2-14%
    // faster up to 4096 x 2048 (with dropout it spilled 4-20 bytes). So do
    // fp32 x and residual without dropout at up to 2 chunks a thread (at 4
    // it spilled 100 bytes): +2-10% at 4096 x 512-1024.
    static constexpr bool kHalfResidual = RESIDUAL && !DROPOUT && sizeof(T) == 2 && sizeof(R) == 2;
    static constexpr bool kFloatResidual =
        RESIDUAL && !DROPOUT && sizeof(T) == 4 && sizeof(R) == 4 && CPT <= 2;
    static constexpr int kRegisters = std::is_same_v<T, double>         ? 128
                                      : kHalfResidual || kFloatResidual ? 64
                                                                        : forward_registers(kBytes);
};
// Forward holds CPT chunks of the row: up to 4 (16384 elements at 512
// threads), fp64 1 (8 chunks spilled once all their loads were issued
// together; fp32 did at 4 chunks while x was counted twice). Backward
// holds more a chunk: up to 2, fp64 1 (4 spilled 136-628 bytes, even
// without the prefetch).
template <typename T>
constexpr int kForwardMaxChunks = sizeof(T) == 8 ? 1 : 4;
template <typename T>
constexpr int kBackwardMaxChunks = std::is_same_v<T, double> ? 1 : 2;
// Backward prefetches the next row's dy and h: in 16-bit types from 2
// chunks a thread (26% faster; at 1 chunk the extra registers spill within
// 64), in fp32 at 1 chunk (one 512-thread block an SM at up to 128
// registers instead of two without: 2-21% faster; at 2 chunks it spilled).
template <typename T>
constexpr bool backward_prefetch(int cpt) {
    return (sizeof(T) == 2 && cpt >= 2) || (std::is_same_v<T, float> && cpt == 1);
}
// dy and h (twice with the next row's), and the fp32 weight/bias partials
template <typename T>
constexpr int backward_held_bytes(int cpt, int h_size) {
    return cpt * kChunk *
           ((backward_prefetch<T>(cpt) ? 2 : 1) * (int(sizeof(T)) + h_size) +
            2 * int(sizeof(acc_t<T>)));
}
// Calls f(std::integral_constant<int, CPT>) for a chunks-a-thread count of
// 1, 2, 4 .. MAX (the only ones instantiated).
template <int MAX, typename F>
void dispatch_chunks(int cpt, F &&f) {
    if (cpt == 1) f(std::integral_constant<int, 1>{});
    if constexpr (MAX >= 2)
        if (cpt == 2) f(std::integral_constant<int, 2>{});
    if constexpr (MAX >= 4)
        if (cpt == 4) f(std::integral_constant<int, 4>{});
    if constexpr (MAX >= 8)
        if (cpt == 8) f(std::integral_constant<int, 8>{});
}

// Calls f(std::integral_constant<Access, ...>) for a register kernel's rows
// of `cols`: kSpread in fp32 where they can be spread (see Access), else
// kVector. (fp64 stays side by side: a dropout counter is 4 adjacent
// columns, and a spread fp64 vector 2.)
template <typename T, typename F>
void dispatch_row_access(int64_t cols, F &&f) {
    if constexpr (std::is_same_v<T, float>)
        if (spreadable(chunks_per_row(cols))) return f(std::integral_constant<Access, kSpread>{});
    f(std::integral_constant<Access, kVector>{});
}

// The sum of the squares of a thread's held values about `center` (the
// row's mean; RMSNorm's is 0 and skips the subtraction), from registers:
// no cancellation, and no second read. Four sums, not one chain.
template <bool CENTRED, int CPT, typename S, typename A>
__device__ __forceinline__ A sum_squares(const Held<S, true> (&h)[CPT], int lane, int row_threads,
                                         int chunks, A center) {
    A squares[4] = {};
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        if (lane + k * row_threads >= chunks) continue;
        A v[kChunk];
        h[k].get(v);
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            const A d = CENTRED ? v[i] - center : v[i];
            squares[i % 4] = fma(d, d, squares[i % 4]);
        }
    }
    return (squares[0] + squares[1]) + (squares[2] + squares[3]);
}

// The sums of the deviations of a thread's held values from `mean` and of
// their squares (corrected_mean's and the variance's; four sums of the
// squares, one of the deviations: more spilled past 64 registers).
template <int CPT, typename S, typename A>
__device__ __forceinline__ void sum_deviations(const Held<S, true> (&h)[CPT], int lane,
                                               int row_threads, int chunks, A mean, A &offsets,
                                               A &squares) {
    A sum = 0, squared[4] = {};
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        if (lane + k * row_threads >= chunks) continue;
        A v[kChunk];
        h[k].get(v);
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            const A d = v[i] - mean;
            sum += d;
            squared[i % 4] = fma(d, d, squared[i % 4]);
        }
    }
    offsets = sum;
    squares = (squared[0] + squared[1]) + (squared[2] + squared[3]);
}

// What the forward adds to x before the norm. A template parameter, not a
// runtime test: branches on it between the chunks made ptxas merge the
// held row through local memory (spills of 100-400 bytes).
enum ForwardInput { kX, kXPlusResidual, kDropoutXPlusResidual };

// A constant row's mean must be exactly its value. A row of 16-bit h sums
// exactly in fp32 (8 or 11 significant bits times at most 2^16 or 2^13
// elements: bf16, fp16), and sum / cols is then the value. An fp32 row's
// sum of n copies rounds: LayerNorm sums it about its first element,
// row_center, at one more instruction an element (in 16-bit rows that cost
// 3-8% of the forward's time on the H100; in fp32 nothing). With dropout:
// not centred, as one element's mask is a Philox draw.
template <typename R, ForwardInput INPUT>
constexpr bool kCentredRow = INPUT != kDropoutXPlusResidual &&std::is_same_v<R, float>;
template <typename T, typename R, ForwardInput INPUT>
__device__ __forceinline__ acc_t<T> row_center(const fo_norm_forward_params &a, int64_t r) {
    using A = acc_t<T>;
    const A x0 = A(to_acc(static_cast<const T *>(a.x)[r * a.x_row_stride]));
    if constexpr (INPUT == kX)
        return x0;
    else
        return A(to_acc(from_acc<R>(
            acc_t<R>(to_acc(static_cast<const R *>(a.residual)[r * a.residual_row_stride])) +
            acc_t<R>(x0))));
}

// y of a held chunk c of h: normalized, then weight and bias (loaded here,
// widened a word at a time, as the row).
template <typename T, typename P, Access ACCESS, typename R, typename A>
__device__ __forceinline__ void output_chunk(A (&v)[kChunk], const Held<R, true> &h_chunk,
                                             const P *__restrict__ weight,
                                             const P *__restrict__ bias, int c, A mean, A y_rstd,
                                             A shift) {
    A w[kChunk], b[kChunk];
    h_chunk.get(v);
    Held<P, true> weight_chunk, bias_chunk;
    weight_chunk.template load_or_fill<ACCESS>(weight, c, from_acc<P>(1.0f));
    bias_chunk.template load_or_fill<ACCESS>(bias, c, from_acc<P>(0.0f));
    weight_chunk.get(w);
    bias_chunk.get(b);
    normalize_chunk<kExactNormalize<T>>(v, mean, y_rstd, shift, w, b);
}

// The rowwise FP8 output of a held row (R == T, 16-bit), in the pass that
// holds it: y as T stores it takes h's registers, then the row's max, then
// the codes and the scale, computed as quantize_fp8.cuh's rowwise kernel
// does, so the bytes are fo_quantize_fp8's of y. The two-pass cast read h
// again and took 75 us against the norm's own 40 at 8192 x 4096 bf16.
// Every thread of the block calls it (row_max's barriers).
template <typename T, typename P, int CPT, Access ACCESS, typename R, typename A>
__device__ __forceinline__ void fp8_row(const fo_norm_forward_params &a, Held<R, true> (&h)[CPT],
                                        int64_t r, bool active, int lane, int row_threads,
                                        int chunks, A mean, A variance) {
    static_assert(std::is_same_v<R, T> && sizeof(T) == 2, "y held exactly in h's place");
    const A rstd = row_rstd(variance, a.eps);
    if (active && lane == 0) {
        if (a.mean) static_cast<A *>(a.mean)[r] = mean;
        if (a.rstd) static_cast<A *>(a.rstd)[r] = rstd;
    }
    const A y_rstd = variance == A(0) && a.eps > 0 ? A(0) : rstd;  // as the kernel's own y
    const A shift = -mean * y_rstd;
    // The max of |y| as T stores it is the max of |y| rounded once (rounding
    // is monotone and odd), NaN if any y is: one max.NaN an element. Where
    // that is not a finite T, the row takes the cast's finite-only max.
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        const int c = lane + k * row_threads;
        if (!active || c >= chunks) continue;
        A v[kChunk];
        output_chunk<T, P, ACCESS>(v, h[k], static_cast<const P *>(a.weight),
                                   static_cast<const P *>(a.bias), c, mean, y_rstd, shift);
        h[k].set(v);
#pragma unroll
        for (int i = 0; i < kChunk; i++) amax = max_abs_nan(amax, float(v[i]));
    }
    amax = float(to_acc(from_acc<T>(amax)));
    amax = row_max(amax <= FLT_MAX ? amax : INFINITY);
    // (the block's rows together: row_max holds barriers)
    const bool finite = !__syncthreads_or(!(amax <= FLT_MAX));
    if (!finite) {
        amax = 0.0f;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int c = lane + k * row_threads;
            if (!active || c >= chunks) continue;
            float v[kChunk];
            h[k].get(v);
            amax = finite_max(amax, v);
        }
        amax = row_max(amax);
    }
    if (!active) return;
    const float q = fo_fp8_multiplier(amax, FO_FP8_E4M3, 1);
    uint8_t *codes = a.fp8_y + r * a.cols;
    auto store_codes = [&](auto nan_free) {
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int c = lane + k * row_threads;
            if (c >= chunks) continue;
            float v[kChunk];
            h[k].get(v);
            store8<true>(codes, int64_t(c) * kChunk, a.cols,
                         encode8<true, decltype(nan_free)::value>(v, q));
        }
    };
    if (finite)
        store_codes(std::true_type{});
    else
        store_codes(std::false_type{});
    if (lane == 0) {
        a.fp8_scale[r] = 1.0f / q;
        if (a.fp8_row_amax) a.fp8_row_amax[r] = amax;
    }
}

// T: x and y; R: residual, residual_out (T, or float with a residual);
// P: weight, bias. ACCESS: where a chunk's vectors lie, in every operand
// (kSpread only where T is fp32, and so are R and P). CLUSTER: the blocks
// that hold a row together (consecutive blockIdx.x, launched as a thread
// block cluster where above 1; see forward_cluster_rows).
// FP8_ROWS: y in FP8, rowwise, in this one pass (fp8_row), never in T.
template <typename T, typename R, typename P, int CPT, ForwardInput INPUT, Access ACCESS,
          int CLUSTER = 1, bool FP8_ROWS = false>
__global__ void __maxnreg__(
    (ForwardHeld<T, R, CPT, INPUT != kX, INPUT == kDropoutXPlusResidual>::kRegisters))
    norm_forward_registers_kernel(fo_norm_forward_params a) {
    using A = acc_t<T>;
    constexpr int kBatch = ForwardHeld<T, R, CPT, INPUT != kX>::kBatch;
    const T *x = static_cast<const T *>(a.x);
    const R *residual = static_cast<const R *>(a.residual);
    const P *weight = static_cast<const P *>(a.weight);
    const P *bias = static_cast<const P *>(a.bias);
    // Chunk indices are 32-bit (the row is at most 131072 elements here): the
    // 64-bit column offsets ptxas hoisted out of the row loop, 2 registers
    // for each chunk of each operand, spilled. (vector_offset widens them at
    // each access; ptxas -v: no spills.)
    const int64_t cols = a.cols;
    const int chunks = int(chunks_per_row(cols));
    const bool rms = a.kind == FO_NORM_RMS;
    const A inv_cols = A(1) / A(cols);  // once: a division costs a dozen instructions
    // this thread's place among the row's threads, across the cluster
    const int lane = int(blockIdx.x % CLUSTER) * blockDim.x + threadIdx.x;
    const int row_threads = CLUSTER * blockDim.x;
    int parity = 0;  // cluster_row_sum's slot
    float amax = 0.0f;  // the FP8 output's (a.fp8_amax)
    // the row loop is uniform across the block and the cluster (row_sum
    // and cluster_row_sum hold barriers)
    for (int64_t base = blockIdx.x / CLUSTER * int64_t(blockDim.y); base < a.rows;
         base += int64_t(gridDim.x / CLUSTER) * blockDim.y) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        // Every load of a batch is issued before any is used, so all of a
        // thread's chunks in it are in flight at once. (A loop that loaded a
        // chunk and added it up before the next load kept one 16-byte load
        // in flight a thread, in the SASS, and ran at half the bandwidth.)
        Held<R, true> h[CPT];
        constexpr bool kCentred = kCentredRow<R, INPUT>;
        const A center = kCentred && !rms && active ? row_center<T, R, INPUT>(a, r) : A(0);
        // four sums a thread, not one: a chain of 32 dependent adds is time
        // the last warps of a single-wave grid wait out
        A sums[4] = {};
#pragma unroll
        for (int k0 = 0; k0 < CPT; k0 += kBatch) {
            // x itself is h without a residual: loaded straight into h, so
            // no second copy of the row is held
            Held<T, true> xs[INPUT == kX ? 1 : kBatch];
#pragma unroll
            for (int k = k0; k < k0 + kBatch; k++) {
                const int c = lane + k * row_threads;
                if constexpr (INPUT == kX)
                    h[k].template load_if<ACCESS>(active && c < chunks, x + r * a.x_row_stride, c);
                else
                    xs[k - k0].template load_if<ACCESS>(active && c < chunks,
                                                        x + r * a.x_row_stride, c);
            }
            if constexpr (INPUT != kX) {  // held in h until h replaces it
#pragma unroll
                for (int k = k0; k < k0 + kBatch; k++) {
                    const int c = lane + k * row_threads;
                    h[k].template load_if<ACCESS>(active && c < chunks,
                                                  residual + r * a.residual_row_stride, c);
                }
            }
            // h = dropout(x) + residual as stored in residual_out's dtype R
            // (x itself without a residual, and then R is T); zeros past the
            // row
#pragma unroll
            for (int k = k0; k < k0 + kBatch; k++) {
                const int c = lane + k * row_threads;
                A v[kChunk];
                if constexpr (INPUT == kX) {
                    h[k].get(v);
                } else {
                    xs[k - k0].get(v);
                    acc_t<R> stored[kChunk];
                    h[k].get(stored);
                    add_residual<T, R, INPUT == kDropoutXPlusResidual, ACCESS>(
                        v, stored, a, r, c, active && c < chunks);
                    h[k].set(v);
                }
                if (!kCentred || c < chunks)  // (past the row: zeros, not values about center)
#pragma unroll
                    for (int i = 0; i < kChunk; i++) sums[i % 4] += v[i] - center;
            }
        }
        // the variance about the mean: no cancellation
        A mean = rms ? A(0)
                     : center + cluster_row_sum<CLUSTER>((sums[0] + sums[1]) + (sums[2] + sums[3]),
                                                         parity) /
                                    A(cols);  // (not * 1/cols: exact)
        A variance;
        if constexpr (kExactNormalize<T> && CLUSTER == 1) {  // (LayerNorm takes no cluster)
            A offsets = 0, squares;
            if (rms)
                squares = sum_squares<false>(h, lane, row_threads, chunks, mean);
            else
                sum_deviations(h, lane, row_threads, chunks, mean, offsets, squares);
            row_sum2(offsets, squares);
            if (!rms) mean = corrected_mean(mean, offsets, inv_cols);
            variance = squares * inv_cols;
        } else {
            variance = cluster_row_sum<CLUSTER>(
                           rms ? sum_squares<false>(h, lane, row_threads, chunks, mean)
                               : sum_squares<true>(h, lane, row_threads, chunks, mean),
                           parity) *
                       inv_cols;
        }
        if constexpr (FP8_ROWS) {
            fp8_row<T, P, CPT, ACCESS>(a, h, r, active, lane, row_threads, chunks, mean, variance);
            continue;
        }
        if (!active) continue;
        const A rstd = row_rstd(variance, a.eps);
        if (lane == 0) {
            if (a.mean) static_cast<A *>(a.mean)[r] = mean;
            if (a.rstd) static_cast<A *>(a.rstd)[r] = rstd;
        }
        // a constant row (every h the exact mean, variance 0) is y = b exactly:
        // h * rstd + shift would leave the rounding of mean * rstd
        const A y_rstd = variance == A(0) && a.eps > 0 ? A(0) : rstd;  // (eps 0: NaN, as torch)
        const A shift = -mean * y_rstd;
        if (a.row_stats && lane == 0) store_row_stats(a.row_stats, r, mean, y_rstd);
        if (!a.y && !a.fp8_amax) continue;  // FP8 rowwise: the cast computes y
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int c = lane + k * row_threads;
            if (c >= chunks) continue;
            A v[kChunk];
            output_chunk<T, P, ACCESS>(v, h[k], weight, bias, c, mean, y_rstd, shift);
            if (a.y)
                store_row_chunk<T, ACCESS>(static_cast<T *>(a.y) + r * cols, v, c, cols);
            else
                amax = output_amax<T>(amax, v);
        }
    }
    if (a.fp8_amax) block_atomic_max(a.fp8_amax, amax);
    if constexpr (CLUSTER > 1) cluster_sync();
}

// T: dy, dx; H: h, dresidual_out, dresidual (T or float); P: weight.
// ACCESS as the forward's.
// held.iterations 0: writes this block's per-column sums of dy * xhat
// (weight) and dy (bias) to partials[0 or 1][blockIdx.x][col], each where
// its gradient is wanted, for finish_column_partials. Above 0 (a
// cooperative launch, with held.iterations * ty rows of dynamic shared
// memory): the first held.owners blocks hold their last held.iterations
// row iterations' dx, every block parks its partials in those rows' place
// (norm_held_partials.cuh), and the owners write dweight and dbias.
template <typename T, typename H, typename P, int CPT, Access ACCESS>
__global__ void __launch_bounds__(
    kMaxRowThreads, kBackwardMinBlocks<acc_t<T>, backward_held_bytes<T>(CPT, sizeof(H))>)
    norm_backward_registers_kernel(fo_norm_backward_params a, acc_t<T> *__restrict__ partials,
                                   HeldArgs held) {
    using A = acc_t<T>;
    constexpr bool kPrefetch = backward_prefetch<T>(CPT);
    const T *dy = static_cast<const T *>(a.dy);
    const H *h = static_cast<const H *>(a.h);
    const P *weight = static_cast<const P *>(a.weight);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    const bool columns = a.dweight || a.dbias;
    const A inv_cols = A(1) / A(cols);
    A dw[CPT][kChunk] = {}, db[CPT][kChunk] = {};
    // 16-bit types: each thread copies its chunks of the weight into shared
    // memory once and reads them there in both passes of every row, off the
    // queue of global memory instructions (bf16: +2-7% up to 4096 columns,
    // level at 8192). Each thread reads only its own slots, laid out so
    // that a warp's 16-byte reads are contiguous: no barrier. fp32 and fp64
    // keep the global loads (not measured with it).
    constexpr bool kWeightShared = sizeof(T) == 2;
    constexpr int kWeightVectors = kChunk * int(sizeof(P)) / 16;
    // (after the rows, the slots hold the column sums below: room for both)
    constexpr int kColumnSumVectors = 2 * kThreads * kChunk * int(sizeof(A)) / 16;
    constexpr int kWeightSlots = CPT * kWeightVectors * kMaxRowThreads;
    __shared__ uint4 weight_slots[!kWeightShared                     ? 1
                                  : kWeightSlots > kColumnSumVectors ? kWeightSlots
                                                                     : kColumnSumVectors];
    const int thread = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
    if (kWeightShared && weight) {
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            if (c >= chunks) continue;
            const uint4 *from = reinterpret_cast<const uint4 *>(weight + c * kChunk);
#pragma unroll
            for (int v = 0; v < kWeightVectors; v++)
                weight_slots[(k * kWeightVectors + v) * threads + thread] = __ldg(from + v);
        }
    }
    // The next row's dy, h, mean and rstd are loaded while this one is
    // summed and written: the grid is persistent, so without this a block
    // would have no loads in flight during its reductions and stores.
    const int64_t step = int64_t(gridDim.x) * blockDim.y;
    Held<T> dy_next[CPT];
    Held<H> h_next[CPT];
    A mean_next = 0, rstd_next = 0;
    auto load_row = [&](int64_t r) {
        const bool active = r < a.rows;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            dy_next[k].template load_if<ACCESS>(active && c < chunks, dy + r * a.dy_row_stride, c);
            h_next[k].template load_if<ACCESS>(active && c < chunks, h + r * a.h_row_stride, c);
        }
        mean_next = !active || rms ? A(0) : static_cast<const A *>(a.mean)[r];
        rstd_next = active ? static_cast<const A *>(a.rstd)[r] : A(0);
    };
    if (kPrefetch) load_row(blockIdx.x * int64_t(blockDim.y) + threadIdx.y);
    // the held rows (none where held.iterations is 0): this block's dx of
    // its last held.iterations iterations, in shared memory until the end
    extern __shared__ uint4 held_rows[];
    for (int64_t base = blockIdx.x * int64_t(blockDim.y); base < a.rows; base += step) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        if (!kPrefetch) load_row(r);
        Held<T> dy_held[CPT];
        Held<H> h_held[CPT];
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            dy_held[k] = dy_next[k];
            h_held[k] = h_next[k];
        }
        const A mean = mean_next, rstd = rstd_next;
        if (kPrefetch && base + step < a.rows) load_row(r + step);
        // the chunk's dy, h and weight * dy, from the held dy and h (and
        // the weight: from shared memory, or an L1 hit after the first row)
        auto expand = [&](int k, const Held<T> &dy_k, const Held<H> &h_k, int64_t c, A(&g)[kChunk],
                          A(&hv)[kChunk], A(&wdy)[kChunk]) {
            dy_k.get(g);
            h_k.get(hv);
            acc_t<P> w[kChunk];
            if (kWeightShared && weight) {
                alignas(16) P raw[kChunk];
#pragma unroll
                for (int v = 0; v < kWeightVectors; v++)
                    reinterpret_cast<uint4 *>(raw)[v] =
                        weight_slots[(k * kWeightVectors + v) * threads + thread];
#pragma unroll
                for (int i = 0; i < kChunk; i++) w[i] = to_acc(raw[i]);
            } else if (weight) {
                load_row_chunk<P, ACCESS>(w, weight, c, cols);
            }
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                // rows here have whole chunks, never the one element that
                // needs weighted_dy's unfused product; fused, fp32 keeps 104 registers, not 120
                wdy[i] = weight ? g[i] * A(w[i]) : g[i];
            }
        };
        A sum_wdy = 0, sum_wdy_xhat = 0;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            if (!active || c >= chunks) continue;  // dy and h held as zeros
            A g[kChunk], hv[kChunk], wdy[kChunk];
            expand(k, dy_held[k], h_held[k], c, g, hv, wdy);
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
        const RowGradient<A> row = row_gradient(mean, rstd, sum_wdy, sum_wdy_xhat, inv_cols, rms);
        if (!active) continue;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            if (c >= chunks) continue;
            A g[kChunk], hv[kChunk], dh[kChunk];
            expand(k, dy_held[k], h_held[k], c, g, hv, dh);
#pragma unroll
            for (int i = 0; i < kChunk; i++) dh[i] = norm_dh(row, dh[i], hv[i]);
            // a held row goes to shared memory in place of its dx (or of
            // dresidual, of T then, where there is no dx)
            T *dx_row = a.dx ? static_cast<T *>(a.dx) + r * cols : nullptr;
            H *dresidual_row = a.dresidual ? static_cast<H *>(a.dresidual) + r * cols : nullptr;
            // (one of the last held.iterations: nothing held where it is 0;
            // tested from base, not an iteration count, which held in
            // registers across the loop made ptxas spill)
            if (base + held.iterations * step >= a.rows && int(blockIdx.x) < held.owners) {
                int later = 0;  // iterations after this one (a division spilled)
                while (later + 1 < held.iterations && base + (later + 1) * step < a.rows) later++;
                T *staged = reinterpret_cast<T *>(held_rows) +
                            ((held.iterations - 1 - later) * blockDim.y + threadIdx.y) * cols;
                if (a.dx)
                    dx_row = staged;
                else
                    dresidual_row = reinterpret_cast<H *>(staged);
            }
            store_dh_chunk<T, H, ACCESS>(dh, a, r, c, dx_row, dresidual_row);
        }
    }
    if (!columns) return;
    // The TY rows of a block own the same columns: add them in ty order
    // through shared memory, one chunk index k at a time, then write.
    __shared__ A own_column_sums[kWeightShared ? 1 : 2][kWeightShared ? 1 : kThreads * kChunk];
    A(*column_sums)
    [kThreads * kChunk] = kWeightShared
                              ? reinterpret_cast<A(*)[kThreads * kChunk]>(weight_slots)
                              : reinterpret_cast<A(*)[kThreads * kChunk]>(own_column_sums);
    if (kWeightShared && blockDim.y > 1) __syncthreads();  // every weight slot read
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
        if (blockDim.y > 1) {
            const int slot = (threadIdx.y * blockDim.x + threadIdx.x) * kChunk;
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                column_sums[0][slot + i] = dw[k][i];
                column_sums[1][slot + i] = db[k][i];
            }
            __syncthreads();
            if (threadIdx.y == 0)
                for (unsigned t = 1; t < blockDim.y; t++)
#pragma unroll
                    for (int i = 0; i < kChunk; i++) {
                        const int other = (t * blockDim.x + threadIdx.x) * kChunk + i;
                        dw[k][i] += column_sums[0][other];
                        db[k][i] += column_sums[1][other];
                    }
            __syncthreads();
        }
        if (threadIdx.y != 0 || c >= chunks || held.iterations > 0) continue;
        A *weight_partials = partials + int64_t(blockIdx.x) * cols;
        A *bias_partials = weight_partials + int64_t(gridDim.x) * cols;
        // Only the partials asked for (the workspace of a call without dbias
        // ends with the weight's), in 16-byte stores: an fp32 row holds the
        // chunk's values where T's row does (kSpread's vectors included),
        // and cols % 8 == 0 keeps every row 32-byte aligned (the bias
        // partials RMSNorm did not need had cost it 7-23%, and 4-byte
        // stores, a warp's 32 sectors apart, 10-36% in 16-bit).
        constexpr Access kPartialAccess = ACCESS == kSpread ? kSpread : kVector;
        if (a.dweight) store_row_chunk<A, kPartialAccess>(weight_partials, dw[k], c, cols);
        if (a.dbias) store_row_chunk<A, kPartialAccess>(bias_partials, db[k], c, cols);
    }
    if (held.iterations > 0) finish_held_partials<T, P, CPT, ACCESS>(a, held, dw, db, held_rows);
}

}  // namespace
}  // namespace fo
