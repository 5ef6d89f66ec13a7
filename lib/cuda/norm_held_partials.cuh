// norm_held_partials.cuh: the register backward's weight and bias partials
// without a workspace: parked in dx rows that are not written yet.
//
// Why: the partials (fp32, a row of them per block and per gradient) were
// the only memory the norms' forward+backward took beyond eager torch's: 8
// MiB at 4096 x 4096 bf16 LayerNorm, on top of eager's 64. Eager has none
// because it reads dy and x a second time for the column sums; we read them
// once. So the partials borrow room from dx itself:
//   1. each block keeps the dx of its last `iterations` row iterations in
//      shared memory instead of writing them (its held rows);
//   2. the chunks of 8 columns of both gradients are dealt out to the
//      blocks in runs (the owners: as few blocks as own a power of two
//      chunks each, only they hold rows), and every block writes its
//      partial of each chunk into the owner's held rows;
//   3. one grid-wide barrier (a cooperative launch: every block resident);
//   4. each block sums the partials of the chunks it owns in a fixed order
//      (the same bits on every run) into dweight and dbias, and then, since
//      no other block reads its held rows, writes them from shared memory.
// The bytes moved are those of the workspace scheme (the partials are
// written and read once, from L2), with no second launch. The price: the
// held rows are written after the barrier and the sums, when nothing else
// streams: on the H100 3-8 us more than with the workspace at 4096 rows
// (8-16% at 4096 x 4096), 2-5% at 16384 rows and 2% at 65536.
#pragma once

#include <cooperative_groups.h>

#include "norm_common.cuh"

namespace fo {
namespace {

// What the register kernel is told of the held rows (host-computed, so
// that the kernel divides nothing in 64 bits: that subroutine's registers
// made ptxas spill the kernel, at its cap of 64).
struct HeldArgs {
    int iterations = 0;  // a block holds its last `iterations` (0: none held)
    int owned_shift = 0;  // an owner owns 1 << owned_shift chunks (the last one fewer)
    int owners = 0;  // blocks 0 to owners - 1 own chunks and hold rows; the rest neither
    int64_t full = 0;  // every block runs `full` row iterations, and
    int64_t extra = 0;  // those whose first row is below `extra` one more
};

// The held rows of the owners: owner b's slot s is the row of its
// iteration (iterations - held + s / ty) at ty-row s % ty (ty a power of
// two), and holds per_slot = cols * sizeof(T) / sizeof(A) values (a
// multiple of 8: cols % 16 == 0). b owns chunks b * owned to b * owned +
// owned - 1 (owned a power of two, owned * 8 at most the block's threads),
// and its values, slot after slot, are the entries (p, j): block p's
// partial of the j-th chunk b owns, 8 values at (p * owned + j) * 8. So a
// warp's parking stores of its 32 chunks land in runs, and the owner reads
// its values in order, thread t the values t, t + threads, ... (value t %
// (owned * 8) of the chunks it owns, every block's in turn).
template <typename T>
struct HeldRows {
    using A = acc_t<T>;
    char *park;  // dx (or dresidual, when it is of T and dx is not written)
    int64_t row_bytes, step;  // step: rows a grid iteration (gridDim.x * ty)
    int chunks_of_both, per_slot;  // chunks of the gradients asked for, together
    int ty_shift;
    HeldArgs args;

    __device__ HeldRows(void *park_, int64_t cols, int kinds, const HeldArgs &args_)
        : park(static_cast<char *>(park_)),
          row_bytes(cols * int64_t(sizeof(T))),
          step(int64_t(gridDim.x) * blockDim.y),
          chunks_of_both(kinds * int(cols / kChunk)),
          per_slot(int(cols * int64_t(sizeof(T)) / int64_t(sizeof(A)))),
          ty_shift(0),
          args(args_) {
        while ((1u << ty_shift) < blockDim.y) ty_shift++;
    }

    // slot s of block b's held rows
    __device__ A *slot_values(int64_t block, int slot) const {
        const int64_t first = block << ty_shift;
        const int64_t iterations = args.full + (first < args.extra);
        const int64_t row = first + (slot & ((1 << ty_shift) - 1)) +
                            (iterations - args.iterations + (slot >> ty_shift)) * step;
        return reinterpret_cast<A *>(park + row * row_bytes);
    }
    // value v of block b's held rows
    __device__ A *value(int64_t block, int v) const {
        return slot_values(block, v / per_slot) + v % per_slot;  // 32-bit: the held rows are small
    }
};

// Step 2: this block's partial of chunk c of gradient `kind` (0: the first
// asked for), to its owner.
template <typename T>
__device__ __forceinline__ void park_partial_chunk(const HeldRows<T> &held, int kind,
                                                   const acc_t<T> (&values)[kChunk], int64_t c) {
    const int ck = kind * int(held.row_bytes / int64_t(sizeof(T)) / kChunk) + int(c);
    const int owner = ck >> held.args.owned_shift, j = ck & ((1 << held.args.owned_shift) - 1);
    store_chunk<acc_t<T>, true>(
        held.value(owner, ((int(blockIdx.x) << held.args.owned_shift) + j) * kChunk), values,
        kChunk);
}

// The column of value i of chunk c as ACCESS places it (vector_offset's
// spread layout, computed for any chunk, not the calling lane's own).
template <typename A, Access ACCESS>
__device__ __forceinline__ int64_t chunk_column(int64_t c, int i) {
    if constexpr (ACCESS == kSpread) {
        constexpr int kPerVector = 16 / int(sizeof(A));
        const int64_t lane = c % kSpreadGroup;
        return (c - lane) * kChunk + lane * kPerVector +
               (i / kPerVector) * kSpreadGroup * kPerVector + i % kPerVector;
    } else {
        return c * kChunk + i;
    }
}

// Steps 3-4, every thread of the grid. Thread t adds value t % (owned *
// 8) of the owned chunks of blocks t / (owned * 8), then that plus
// threads / (owned * 8), ...: the block's values in order, 8 loads in
// flight; then the lanes of a warp that share a value by shuffles, then the
// warps in order: a fixed order, the same bits on every run. Once every
// value is read, no other block reads this block's held rows: they are
// written. Not inlined: the register kernel it ends is at its register cap,
// and inlined, its state beside the row loop's made ptxas spill. (Read a
// chunk at a time, each load's place found by divisions, the sums took
// 5-12 us at 4096 rows, against the finishing kernel's 2-3 us.)
template <typename T, typename P, Access ACCESS>
__device__ __noinline__ void sum_owned_and_restore(const HeldRows<T> held, P *dweight, P *dbias,
                                                   const uint4 *staged) {
    using A = acc_t<T>;
    constexpr int kInFlight = 8;
    __shared__ A lane_sums[kMaxRowThreads];
    cooperative_groups::this_grid().sync();
    if (int(blockIdx.x) >= held.args.owners) return;
    const int thread = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
    const int owned = 1 << held.args.owned_shift,
              width = owned * kChunk;  // values a block, a chunk each
    const int total = width * int(gridDim.x);
    // the values v = thread + u * threads, walked slot by slot (no division a load)
    int slot = thread / held.per_slot, offset = thread % held.per_slot;
    A *values = held.slot_values(blockIdx.x, slot);
    A sums[kInFlight] = {};
    for (int v0 = thread; v0 < total; v0 += kInFlight * threads) {
#pragma unroll
        for (int u = 0; u < kInFlight; u++) {
            if (v0 + u * threads < total)
                sums[u] += __ldcg(values + offset);  // written this launch
            offset += threads;
            while (offset >= held.per_slot) {
                offset -= held.per_slot;
                values = held.slot_values(blockIdx.x, ++slot);
            }
        }
    }
    A sum =
        ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
    for (int lanes = width; lanes < 32; lanes *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, lanes);
    lane_sums[thread] = sum;
    __syncthreads();  // every value read
    const int stride = width > 32 ? width : 32;  // lanes [0, width) of each such run hold sums
    const int first = int(blockIdx.x) * owned,
              chunks = int(held.row_bytes / int64_t(sizeof(T)) / kChunk);
    if (thread < width && first + thread / kChunk < held.chunks_of_both) {
        A out_value = 0;
        for (int g = 0; g < threads / stride; g++) out_value += lane_sums[g * stride + thread];
        const int ck = first + thread / kChunk, i = thread % kChunk;
        const bool second = ck >= chunks;  // dbias's chunk, where both are asked for
        P *out = dweight && !second ? dweight : dbias;
        out[chunk_column<A, ACCESS>(ck - (second ? chunks : 0), i)] = from_acc<P>(out_value);
    }
    const int vectors = int(held.row_bytes / 16);
    for (int s = 0; s < held.args.iterations << held.ty_shift; s++) {
        uint4 *to = reinterpret_cast<uint4 *>(held.slot_values(blockIdx.x, s));
        for (int v = thread; v < vectors; v += threads) to[v] = staged[int64_t(s) * vectors + v];
    }
}

// Steps 2-4 for the register backward, its partials summed over its ty rows
// already (dw, db: thread ty 0's). Every thread of the grid calls it.
template <typename T, typename P, int CPT, Access ACCESS>
__device__ __forceinline__ void finish_held_partials(const fo_norm_backward_params &a,
                                                     const HeldArgs &args,
                                                     const acc_t<T> (&dw)[CPT][kChunk],
                                                     const acc_t<T> (&db)[CPT][kChunk],
                                                     const uint4 *staged) {
    const HeldRows<T> held(a.dx ? a.dx : a.dresidual, a.cols,
                           (a.dweight ? 1 : 0) + (a.dbias ? 1 : 0), args);
    const int64_t chunks = chunks_per_row(a.cols);
    if (threadIdx.y == 0) {
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            if (c >= chunks) continue;
            if (a.dweight) park_partial_chunk<T>(held, 0, dw[k], c);
            if (a.dbias) park_partial_chunk<T>(held, a.dweight ? 1 : 0, db[k], c);
        }
    }
    sum_owned_and_restore<T, P, ACCESS>(held, static_cast<P *>(a.dweight),
                                        static_cast<P *>(a.dbias), staged);
}

// The held scheme for a call, or iterations = 0 where it does not apply.
struct HeldPlan {
    int iterations = 0;  // a block holds its last `iterations` row iterations
    int owned_shift = 0, owners = 0;
    size_t shared_bytes = 0;
};

// Where it applies: weight or bias gradients asked for, a row buffer of T
// to park in (dx, or dresidual where it is of T and dx is not written),
// rows a whole number of ty (every held iteration is whole), cols % 16 ==
// 0 (a slot holds whole entries) and a GPU with cooperative launches; at
// most `blocks` blocks of `threads`, each owner holding the entries of the
// chunks it owns (8 values each a thread at most). Whether the held rows
// fit in shared memory beside the kernel's own, and every block at once on
// the GPU, is the plan's to check (resident_blocks), as is that the
// register kernel runs, with ty rows a block.
template <typename T>
HeldPlan held_plan(const fo_norm_backward_params &a, int ty, int threads, int64_t blocks,
                   bool cooperative) {
    HeldPlan plan;
    const bool park = a.dx || (a.dresidual && a.h_dtype == a.dtype);
    if (!(a.dweight || a.dbias) || !park || a.cols % 16 != 0 || a.rows % ty != 0 || blocks < 1)
        return plan;
    const int64_t kinds = (a.dweight ? 1 : 0) + (a.dbias ? 1 : 0);
    int owned_shift = 0;  // chunks a block owns: a power of two, 8 values each a thread at most
    const int64_t chunks_of_both = kinds * (a.cols / kChunk);
    while ((int64_t(1) << owned_shift) * blocks < chunks_of_both) owned_shift++;
    const int64_t owned = int64_t(1) << owned_shift;
    if (owned * kChunk > threads) return plan;
    plan.owners = int((chunks_of_both + owned - 1) / owned);
    const int64_t per_slot = a.cols * int64_t(sizeof(T)) / int64_t(sizeof(acc_t<T>));
    const int64_t slots = (owned * blocks * kChunk + per_slot - 1) / per_slot;
    const int64_t iterations = (slots + ty - 1) / ty;
    if (a.rows < iterations * ty) return plan;
    const int64_t bytes = iterations * ty * a.cols * int64_t(sizeof(T));
    if (!cooperative || bytes >= (int64_t(1) << 24)) return plan;  // (past any GPU's shared memory)
    plan.iterations = int(iterations);
    plan.owned_shift = owned_shift;
    plan.shared_bytes = size_t(bytes);
    return plan;
}

}  // namespace
}  // namespace fo
