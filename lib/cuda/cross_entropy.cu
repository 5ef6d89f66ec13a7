// cross_entropy.cu: the cross-entropy of rows of logits with its gradient,
// and the in-place row scaling of its backward, on CUDA.
//
// One block a row, two passes over it: the first finds the row's max and
// sum of exponentials (online, in the log2 domain: one FFMA and one EX2 an
// element), the second writes the gradient. The second pass reads what the
// first just read, from L2: the logits come from HBM about once. Rows are
// reduced in a fixed order (shuffles, then every warp over the warps): the
// same bits on every run.
#include <cuda_pipeline.h>

#include <cstdio>

#include "common.cuh"

namespace fo {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kUnroll = 4;  // chunks a thread loads before it computes on them (16-bit)
// the same bytes in flight for wider types, within 64 registers (1024 threads)
template <typename T>
constexpr int kUnrollOf = sizeof(T) == 2   ? kUnroll
                          : sizeof(T) == 4 ? kUnroll / 2
                                           : 1;

template <typename A>
struct Log2 {
    static constexpr A kLog2e = A(1.4426950408889634);
    static constexpr A kLn2 = A(0.6931471805599453);
};

// ex2.approx.ftz: one MUFU instruction; exp2f adds the scaling of
// subnormal results, which no sum or gradient here can tell from 0
__device__ __forceinline__ float exp2_of(float v) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}
__device__ __forceinline__ double exp2_of(double v) { return exp2(v); }
__device__ __forceinline__ float log2_of(float v) { return log2f(v); }
__device__ __forceinline__ double log2_of(double v) { return log2(v); }

// A partial softmax sum in the log2 domain: sum of 2^(y - max) over the
// values seen, y = z * log2(e).
template <typename A>
struct Partial {
    A max, sum, sum_z;
};

// The warp's partial, in every lane: the max first, then each lane's sum
// rescaled to it once (one EX2 a lane), then the sums. Butterfly shuffles
// leave the same bits in every lane.
template <typename A>
__device__ __forceinline__ Partial<A> warp_combine(Partial<A> p) {
    A max = p.max;
#pragma unroll
    for (int m = 16; m > 0; m /= 2) {
        const A other = __shfl_xor_sync(0xffffffffu, max, m);
        max = other > max ? other : max;
    }
    // an equal max (both -inf included) needs no rescaling
    A sum = p.max == max ? p.sum : p.sum * exp2_of(p.max - max), sum_z = p.sum_z;
#pragma unroll
    for (int m = 16; m > 0; m /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, m);
        sum_z += __shfl_xor_sync(0xffffffffu, sum_z, m);
    }
    return {max, sum, sum_z};
}

// Per-warp partials of a block, two rows' worth: a row's slots are written
// again only two rows on, past the next row's barrier.
template <typename A>
using BlockSlots = Partial<A>[2][kMaxThreads / 32];

// The whole block's partial, in every thread: one barrier, then every warp
// combines the warps' partials itself, in the same order.
template <typename A>
__device__ Partial<A> block_combine(Partial<A> p, BlockSlots<A> &slots, int &parity) {
    p = warp_combine(p);
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    Partial<A> *row = slots[parity];
    if (lane == 0) row[threadIdx.x / 32] = p;
    parity ^= 1;
    __syncthreads();
    return warp_combine(lane < warps ? row[lane] : Partial<A>{A(-INFINITY), A(0), A(0)});
}

template <typename A, bool SOFTCAP>
__device__ __forceinline__ A capped(A v, A softcap) {
    if constexpr (SOFTCAP)
        return softcap * tanh(v / softcap);
    else
        return v;
}

// Adds the first `valid` of a chunk's z values to a partial: the chunk's
// max of z, then one FFMA and one EX2 an element (max(z) * log2(e) is the
// max of the y); the sum of z only where label smoothing reads it.
template <typename A>
__device__ __forceinline__ void add_chunk(Partial<A> &p, const A (&z)[kChunk], int valid,
                                          bool smoothing) {
    A chunk_max = A(-INFINITY);
#pragma unroll
    for (int i = 0; i < kChunk; i++)
        if (i < valid) chunk_max = z[i] > chunk_max ? z[i] : chunk_max;
    if (smoothing)
#pragma unroll
        for (int i = 0; i < kChunk; i++)
            if (i < valid) p.sum_z += z[i];
    chunk_max *= Log2<A>::kLog2e;
    if (chunk_max > p.max) {
        p.sum = p.max == A(-INFINITY) ? A(0) : p.sum * exp2_of(p.max - chunk_max);
        p.max = chunk_max;
    }
    if (p.max == A(-INFINITY)) return;  // all -inf so far: nothing to add
#pragma unroll
    for (int i = 0; i < kChunk; i++)
        if (i < valid) p.sum += exp2_of(fma(z[i], Log2<A>::kLog2e, -p.max));
}

// The loss of a row from its total partial (lse2: log2 of the sum of e^z).
template <typename A>
__device__ __forceinline__ A row_loss(A lse2, A z_t, const Partial<A> &total, A ls, int64_t vocab) {
    const A lse = lse2 * Log2<A>::kLn2;
    return (A(1) - ls) * (lse - z_t) + ls * (lse - total.sum_z / A(vocab));
}

// The gradient of a chunk of logits v (overwritten) whose first column is
// col: softmax - the smoothed one-hot of t, through the softcap, times scale.
// Without a softcap, two FFMAs and one EX2 an element; the target's term
// is subtracted in the one chunk that holds it.
template <typename A, bool SOFTCAP>
__device__ __forceinline__ void chunk_gradient(A (&v)[kChunk], int64_t col, int64_t t, A lse2, A ls,
                                               int64_t vocab, A softcap, A scale) {
    const A smooth = ls / A(vocab), hit = A(1) - ls;
    if constexpr (SOFTCAP) {
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            const A z = capped<A, SOFTCAP>(v[i], softcap);
            A d = exp2_of(z * Log2<A>::kLog2e - lse2) - smooth;
            if (col + i == t) d -= hit;
            const A th = z / softcap;
            v[i] = d * (A(1) - th * th) * scale;
        }
    } else {
        const A smooth_scaled = smooth * scale;
#pragma unroll
        for (int i = 0; i < kChunk; i++)
            v[i] = fma(exp2_of(fma(v[i], Log2<A>::kLog2e, -lse2)), scale, -smooth_scaled);
        const int64_t at = t - col;
        if (at >= 0 && at < kChunk)
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                if (i == at) v[i] -= hit * scale;
    }
}

// A target neither ignore_index nor a class stops the kernel, as torch's
// device asserts do (one thread says which).
__device__ __forceinline__ void check_target(int64_t r, int64_t t, int64_t vocab,
                                             int64_t ignore_index, bool says) {
    if (t >= 0 && t < vocab) return;
    if (says)
        printf(
            "fo_cross_entropy: target[%lld]=%lld is outside [0, vocab=%lld) and is "
            "not ignore_index=%lld\n",
            (long long)r, (long long)t, (long long)vocab, (long long)ignore_index);
    __trap();
}

template <typename T, Access ACCESS, bool SOFTCAP>
__global__ void __launch_bounds__(kMaxThreads) cross_entropy_kernel(fo_cross_entropy_params a) {
    using A = acc_t<T>;
    __shared__ BlockSlots<A> slots;
    int parity = 0;
    const T *logits = static_cast<const T *>(a.logits);
    T *dlogits = static_cast<T *>(a.dlogits);
    const int64_t vocab = a.vocab, chunks = chunks_per_row(vocab);
    const A softcap = A(a.softcap), ls = A(a.label_smoothing);
    const A scale = a.scale ? *static_cast<const A *>(a.scale) : A(1);
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const T *row = logits + r * a.logits_row_stride;
        const int64_t t = a.target[r];
        if (t == a.ignore_index) {
            A zeros[kChunk] = {};
            if (dlogits)
                for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x)
                    store_row_chunk<T, ACCESS>(dlogits + r * vocab, zeros, c, vocab);
            if (threadIdx.x == 0) static_cast<A *>(a.loss)[r] = A(0);
            continue;
        }
        check_target(r, t, vocab, a.ignore_index, threadIdx.x == 0);
        // pass 1: the row's max and sum of 2^(y - max), and its sum of z
        Partial<A> p{A(-INFINITY), A(0), A(0)};
        for (int64_t c0 = threadIdx.x; c0 < chunks; c0 += int64_t(blockDim.x) * kUnrollOf<T>) {
            A v[kUnrollOf<T>][kChunk];
#pragma unroll
            for (int u = 0; u < kUnrollOf<T>; u++) {
                const int64_t c = c0 + int64_t(u) * blockDim.x;
                if (c < chunks) load_row_chunk<T, ACCESS>(v[u], row, c, vocab);
            }
#pragma unroll
            for (int u = 0; u < kUnrollOf<T>; u++) {
                const int64_t c = c0 + int64_t(u) * blockDim.x;
                if (c >= chunks) continue;
                A z[kChunk];
#pragma unroll
                for (int i = 0; i < kChunk; i++) z[i] = capped<A, SOFTCAP>(v[u][i], softcap);
                const int64_t left = vocab - c * kChunk;
                add_chunk(p, z, ACCESS != kScalar || left >= kChunk ? kChunk : int(left),
                          ls != A(0));
            }
        }
        // z of the target, read before the barrier in block_combine: past it,
        // pass 2 may overwrite the row (dlogits in place)
        const A z_t = threadIdx.x == 0 ? capped<A, SOFTCAP>(to_acc(row[t]), softcap) : A(0);
        const Partial<A> total = block_combine(p, slots, parity);
        const A lse2 = total.max + log2_of(total.sum);  // log2 of the sum of e^z
        if (threadIdx.x == 0) static_cast<A *>(a.loss)[r] = row_loss(lse2, z_t, total, ls, vocab);
        if (!dlogits) continue;
        // pass 2: the gradient, from the row again (an L2 hit, mostly)
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
            A v[kChunk];
            load_row_chunk<T, ACCESS>(v, row, c, vocab);
            chunk_gradient<A, SOFTCAP>(v, c * kChunk, t, lse2, ls, vocab, softcap, scale);
            store_row_chunk<T, ACCESS>(dlogits + r * vocab, v, c, vocab);
        }
    }
}

// The row held in shared memory: a cluster of CLUSTER blocks shares a row,
// each block a slice of slice_chunks chunks, copied from HBM once into
// shared memory (cp.async; the block's next row is copied while this one's
// gradient is written), its partial taken from there (pass 1) and turned
// into the gradient (pass 2). The blocks' partials meet through distributed
// shared memory, combined in rank order: the same bits in every block.
constexpr int kHeldThreads = 256;  // fastest of 128-1024 on the H100, at 16-bit and fp32
constexpr int64_t kHeldSliceBytes = 72 * 1024;  // three blocks an SM

// The cluster's partial, in every thread of every block: the same bits
// everywhere, as every warp combines the blocks' partials in rank order.
template <int CLUSTER, typename A>
__device__ Partial<A> cluster_combine(Partial<A> p, Partial<A> (&slots)[2], int &parity) {
    if constexpr (CLUSTER == 1) {
        return p;
    } else {
#if __CUDA_ARCH__ >= 900
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (threadIdx.x == 0) slots[parity] = p;
        cluster.sync();
        // lane r keeps rank r's partial; every lane loads every rank's, so
        // that each load has one address (one remote block) for the warp
        const int lane = threadIdx.x % 32;
        Partial<A> mine{A(-INFINITY), A(0), A(0)};
#pragma unroll
        for (int rank = 0; rank < CLUSTER; rank++) {
            const Partial<A> theirs = *cluster.map_shared_rank(&slots[parity], rank);
            if (lane == rank) mine = theirs;
        }
        parity ^= 1;  // a slot is written again two rows on, past the next barrier
        return warp_combine(mine);
#else
        __trap();  // launched only where the device has clusters
        return p;
#endif
    }
}

template <typename T, bool SOFTCAP, int CLUSTER>
__global__ void __launch_bounds__(kHeldThreads)
    cross_entropy_held_kernel(fo_cross_entropy_params a, int64_t slice_chunks) {
    using A = acc_t<T>;
    constexpr int kVectors = kVectorsPerChunk<T>;
    extern __shared__ uint4 held[];
    __shared__ BlockSlots<A> slots;
    __shared__ Partial<A> cluster_slots[2];
    int parity = 0, block_parity = 0;
    const int rank = CLUSTER > 1 ? cluster_rank() : 0;
    const T *logits = static_cast<const T *>(a.logits);
    T *dlogits = static_cast<T *>(a.dlogits);
    const int64_t vocab = a.vocab, chunks = vocab / kChunk;
    const int64_t first = rank * slice_chunks;
    const int64_t mine = (chunks - first < slice_chunks ? chunks - first : slice_chunks);
    const A softcap = A(a.softcap), ls = A(a.label_smoothing);
    const A scale = a.scale ? *static_cast<const A *>(a.scale) : A(1);
    const int64_t clusters = gridDim.x / CLUSTER;
    // Row r's slice into shared memory, every copy in flight at once, each
    // thread into the slots it alone reads and overwrites (no barrier); an
    // ignored row is never read.
    auto fetch = [&](int64_t r) {
        if (r >= a.rows || a.target[r] == a.ignore_index) return;
        const uint4 *row =
            reinterpret_cast<const uint4 *>(logits + r * a.logits_row_stride + first * kChunk);
        for (int64_t k = threadIdx.x; k < mine; k += blockDim.x)
#pragma unroll
            for (int v = 0; v < kVectors; v++)
                __pipeline_memcpy_async(&held[k * kVectors + v], &row[k * kVectors + v], 16);
        __pipeline_commit();
    };
    // the row loop is uniform across the cluster (cluster_combine holds
    // barriers); the next row's slice is fetched while this one's gradient
    // is written, from the slots already turned into gradient
    int64_t r = blockIdx.x / CLUSTER;
    fetch(r);
    for (; r < a.rows; r += clusters) {
        const int64_t next = r + clusters;
        T *out = dlogits + r * vocab + first * kChunk;
        const int64_t t = a.target[r];
        if (t == a.ignore_index) {
            const uint4 zero = {0, 0, 0, 0};
            if (dlogits)
                for (int64_t k = threadIdx.x; k < mine; k += blockDim.x)
#pragma unroll
                    for (int v = 0; v < kVectors; v++)
                        __stcs(reinterpret_cast<uint4 *>(out) + k * kVectors + v, zero);
            if (rank == 0 && threadIdx.x == 0) static_cast<A *>(a.loss)[r] = A(0);
            fetch(next);
            continue;
        }
        check_target(r, t, vocab, a.ignore_index, rank == 0 && threadIdx.x == 0);
        // z of the target, read before any barrier: past them the row may be
        // overwritten (dlogits in place)
        const A z_t = rank == 0 && threadIdx.x == 0
                          ? capped<A, SOFTCAP>(to_acc(logits[r * a.logits_row_stride + t]), softcap)
                          : A(0);
        // pass 1: the slice's partial, from this thread's own slots
        __pipeline_wait_prior(0);
        Partial<A> p{A(-INFINITY), A(0), A(0)};
        for (int64_t k = threadIdx.x; k < mine; k += blockDim.x) {
            uint4 raw[kVectors];
#pragma unroll
            for (int v = 0; v < kVectors; v++) raw[v] = held[k * kVectors + v];
            const T *values = reinterpret_cast<const T *>(raw);
            A z[kChunk];
#pragma unroll
            for (int i = 0; i < kChunk; i++) z[i] = capped<A, SOFTCAP>(to_acc(values[i]), softcap);
            add_chunk(p, z, kChunk, ls != A(0));
        }
        const Partial<A> block = block_combine(p, slots, block_parity);
        const Partial<A> total = cluster_combine<CLUSTER>(block, cluster_slots, parity);
        const A lse2 = total.max + log2_of(total.sum);
        if (rank == 0 && threadIdx.x == 0)
            static_cast<A *>(a.loss)[r] = row_loss(lse2, z_t, total, ls, vocab);
        if (dlogits) {
            // pass 2: the gradient of the held slice
            for (int64_t k = threadIdx.x; k < mine; k += blockDim.x) {
                uint4 raw[kVectors];
#pragma unroll
                for (int v = 0; v < kVectors; v++) raw[v] = held[k * kVectors + v];
                T *values = reinterpret_cast<T *>(raw);
                A v[kChunk];
#pragma unroll
                for (int i = 0; i < kChunk; i++) v[i] = to_acc(values[i]);
                chunk_gradient<A, SOFTCAP>(v, (first + k) * kChunk, t, lse2, ls, vocab, softcap,
                                           scale);
#pragma unroll
                for (int i = 0; i < kChunk; i++) values[i] = from_acc<T>(v[i]);
#pragma unroll
                for (int v = 0; v < kVectors; v++)
                    reinterpret_cast<uint4 *>(out)[k * kVectors + v] = raw[v];
            }
        }
        // (a thread's slots are refilled only after its own reads of them:
        // each store above waits on the values it read)
        fetch(next);
    }
    // a block's shared memory must outlive the others' reads of it
    if constexpr (CLUSTER > 1) cluster_sync();
}

template <typename T, typename S, Access ACCESS>
__global__ void scale_rows_kernel(fo_scale_rows_params a) {
    using A = acc_t<T>;
    const S *scale = static_cast<const S *>(a.scale);
    const int64_t chunks = chunks_per_row(a.cols);
    for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        const A s = A(to_acc(scale[a.per_row ? r : 0]));
        if (s == A(1)) continue;  // the common incoming gradient: nothing to do
        T *row = static_cast<T *>(a.x) + r * a.cols;
        for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks;
             c += int64_t(gridDim.x) * blockDim.x) {
            A v[kChunk];
            load_row_chunk<T, ACCESS>(v, row, c, a.cols);
#pragma unroll
            for (int i = 0; i < kChunk; i++) v[i] *= s;
            store_row_chunk<T, ACCESS>(row, v, c, a.cols);
        }
    }
}

// The reductions of a mean or sum: one block, each thread over every
// kReduceThreads-th row in order, kReduceBatch rows loaded before any is
// added (one round of memory latency for 8192 rows), then a fixed tree.
constexpr int kReduceThreads = 1024;
constexpr int kReduceBatch = 8;

// The sum over rows of value(r), in a fixed order; the result is in thread 0.
template <typename V, typename Value>
__device__ V rows_total(int64_t rows, Value value) {
    V sum = 0;
    for (int64_t r0 = threadIdx.x; r0 < rows; r0 += int64_t(kReduceThreads) * kReduceBatch) {
        V v[kReduceBatch];
#pragma unroll
        for (int i = 0; i < kReduceBatch; i++) {
            const int64_t r = r0 + int64_t(i) * kReduceThreads;
            v[i] = r < rows ? value(r) : V(0);
        }
#pragma unroll
        for (int i = 0; i < kReduceBatch; i++) sum += v[i];
    }
    return block_sum<kReduceThreads>(sum);
}

__device__ __forceinline__ float reciprocal(float v) { return __frcp_rn(v); }
__device__ __forceinline__ double reciprocal(double v) { return __drcp_rn(v); }

// 1 / (rows not ignored), rounded once, in thread 0: inf where every row
// is ignored, so that the mean is NaN, as torch's.
template <typename A>
__device__ A mean_scale(const int64_t *target, int64_t rows, int64_t ignore_index) {
    const long long counted = rows_total<long long>(
        rows, [&](int64_t r) { return (long long)(target[r] != ignore_index); });
    return reciprocal(A(counted));
}

template <typename A>
__global__ void __launch_bounds__(kReduceThreads)
    mean_scale_kernel(A *scale, const int64_t *target, int64_t rows, int64_t ignore_index) {
    const A factor = mean_scale<A>(target, rows, ignore_index);
    if (threadIdx.x == 0) *scale = factor;
}

// The rows' losses summed, times the mean's scale (if any), rounded once
// into *total, of the logits' type. With count, the scale is counted here
// and written to *scale first: a mean with no gradient takes one launch less.
template <typename T, typename A>
__global__ void __launch_bounds__(kReduceThreads)
    total_kernel(T *total, const A *loss, int64_t rows, A *scale, bool count, const int64_t *target,
                 int64_t ignore_index) {
    A factor = A(1);
    if (count) {
        factor = mean_scale<A>(target, rows, ignore_index);
        if (threadIdx.x == 0) *scale = factor;
    } else if (scale) {
        factor = *scale;
    }
    const A sum = rows_total<A>(rows, [&](int64_t r) { return loss[r]; });
    if (threadIdx.x == 0) *total = from_acc<T>(scale ? sum * factor : sum);
}

// Threads a row: enough for kUnroll chunks each, a power of two in [32, 1024].
inline int threads_for(int64_t chunks) {
    int threads = 32;
    while (threads < kMaxThreads && int64_t(threads) * kUnroll < chunks) threads *= 2;
    return threads;
}

// The held kernel's launch for this call: the smallest cluster whose blocks
// each hold at most kHeldSliceBytes of a row, and as many clusters as are
// resident at once; false where the row cannot be held (unaligned rows,
// rows past 16 blocks, no clusters) and the two-pass kernel runs instead.
template <typename T>
bool launch_held(const fo_cross_entropy_params &a, cudaStream_t stream) {
    const int64_t chunks = a.vocab / kChunk, chunk_bytes = kChunk * int64_t(sizeof(T));
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    for (int cluster = 1; cluster <= 16; cluster *= 2) {
        const int64_t slice_chunks = (chunks + cluster - 1) / cluster;
        if (slice_chunks * chunk_bytes > kHeldSliceBytes) continue;
        if (cluster > 1 && !has_clusters(device)) return false;
        auto run = [&](auto kernel) {
            const size_t shared = size_t(slice_chunks * chunk_bytes);
            // past 8 blocks a cluster is non-portable: the kernel opts in
            // (one call a launch, against a launch of a 1 MB row or more)
            if (cluster > 8 &&
                cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
                    cudaSuccess) {
                cudaGetLastError();  // a refusal is "no": two passes instead
                return false;
            }
            constexpr unsigned kProbeGrid =
                1024;  // any grid: a cluster's residency does not depend on it
            const int resident =
                resident_blocks(reinterpret_cast<const void *>(kernel), device, kHeldThreads,
                                shared, cluster, kProbeGrid * cluster);
            if (resident == 0) return false;
            const int64_t groups =
                cluster > 1 ? resident : int64_t(resident) * device_info(device).multiprocessors;
            const int64_t used = a.rows < groups ? a.rows : groups;
            cudaLaunchAttribute shape;
            const cudaLaunchConfig_t config = clustered_config(
                dim3(unsigned(used * cluster)), dim3(kHeldThreads), shared, stream, cluster, shape);
            cudaLaunchKernelEx(&config, kernel, a, slice_chunks);
            return true;
        };
        auto with_cluster = [&](auto softcap_tag) -> bool {
            constexpr bool kSoftcap = decltype(softcap_tag)::value;
            switch (cluster) {
                case 1:
                    return run(cross_entropy_held_kernel<T, kSoftcap, 1>);
                case 2:
                    return run(cross_entropy_held_kernel<T, kSoftcap, 2>);
                case 4:
                    return run(cross_entropy_held_kernel<T, kSoftcap, 4>);
                case 8:
                    return run(cross_entropy_held_kernel<T, kSoftcap, 8>);
                default:
                    return run(cross_entropy_held_kernel<T, kSoftcap, 16>);
            }
        };
        return a.softcap > 0 ? with_cluster(std::true_type{}) : with_cluster(std::false_type{});
    }
    return false;
}

// The rows' kernel: the held kernel where a row fits a cluster, else the
// two passes.
template <typename T>
void launch_rows(const fo_cross_entropy_params &a, cudaStream_t stream) {
    const bool vec = a.vocab % kChunk == 0 && aligned16(a.logits) && aligned16(a.dlogits) &&
                     stride_aligned16<T>(a.logits_row_stride, a.rows);
    if constexpr (!std::is_same_v<T, double>)  // (fp64 would spill: the two passes take it)
        if (vec && launch_held<T>(a, stream)) return;
    const dim3 grid(unsigned(a.rows < kMaxColBlocks ? a.rows : kMaxColBlocks));
    const dim3 block(unsigned(threads_for(chunks_per_row(a.vocab))));
    auto launch = [&](auto access) {
        constexpr Access kAccess = decltype(access)::value;
        auto kernel = a.softcap > 0 ? cross_entropy_kernel<T, kAccess, true>
                                    : cross_entropy_kernel<T, kAccess, false>;
        kernel<<<grid, block, 0, stream>>>(a);
    };
    // side by side: the target's column is then c * 8 + i
    if (vec)
        launch(std::integral_constant<Access, kVector>{});
    else
        launch(std::integral_constant<Access, kScalar>{});
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int fo_cuda_cross_entropy(int device_index, uintptr_t stream,
                                     const fo_cross_entropy_params *in) {
    return launch_on("fo_cross_entropy", device_index, [&] {
        fo_cross_entropy_params a = *in;
        const cudaStream_t on = cudaStream_t(stream);
        dispatch_dtype(a.dtype, [&](auto tag) {
            using T = decltype(tag);
            using A = acc_t<T>;
            A *loss = static_cast<A *>(a.loss);
            // a mean's scale, in loss[rows]: counted before the rows where
            // it scales their gradient, else with the total
            const bool mean = a.reduction == FO_REDUCTION_MEAN;
            const bool count_first = mean && a.dlogits;
            if (count_first) {
                mean_scale_kernel<A>
                    <<<1, kReduceThreads, 0, on>>>(loss + a.rows, a.target, a.rows, a.ignore_index);
                a.scale = loss + a.rows;
            }
            if (a.rows > 0) launch_rows<T>(a, on);
            if (a.reduction != FO_REDUCTION_NONE)
                total_kernel<T, A><<<1, kReduceThreads, 0, on>>>(
                    static_cast<T *>(a.total), loss, a.rows, mean ? loss + a.rows : nullptr,
                    mean && !count_first, a.target, a.ignore_index);
        });
    });
}

extern "C" int fo_cuda_scale_rows(int device_index, uintptr_t stream,
                                  const fo_scale_rows_params *in) {
    return launch_on("fo_scale_rows", device_index, [&] {
        const fo_scale_rows_params a = *in;
        const int64_t chunks = chunks_per_row(a.cols);
        int64_t blocks_x = (chunks + kThreads - 1) / kThreads;
        // one scale: at most a wave of blocks, so that a scale of 1 (the
        // common case) costs one wave, not a block every 2048 elements
        const int64_t wave = int64_t(device_info(device_index).multiprocessors) * (2048 / kThreads);
        if (!a.per_row && wave > 0 && blocks_x > wave) blocks_x = wave;
        const dim3 grid(unsigned(blocks_x < 65535 ? blocks_x : 65535),
                        unsigned(a.rows < kMaxGridY ? a.rows : kMaxGridY));
        dispatch_dtype(a.dtype, [&](auto tag) {
            using T = decltype(tag);
            const bool vec = a.cols % kChunk == 0 && aligned16(a.x);
            auto with_scale = [&](auto scale_tag) {
                using S = decltype(scale_tag);
                if (vec)
                    scale_rows_kernel<T, S, kVector>
                        <<<grid, kThreads, 0, cudaStream_t(stream)>>>(a);
                else
                    scale_rows_kernel<T, S, kScalar>
                        <<<grid, kThreads, 0, cudaStream_t(stream)>>>(a);
            };
            dispatch_dtype(a.scale_dtype, with_scale);
        });
    });
}
