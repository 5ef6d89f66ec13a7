// norm_held_partials.cuh: the register backward's weight and bias partials
// without a workspace: parked in dx rows that are not written yet.
//
// Why: the partials (fp32, a row of them per block and per gradient) were
// the only memory the norms' forward+backward took beyond eager torch's: 8
// MiB at 4096 x 4096 bf16 LayerNorm, on top of eager's 64. Eager has none
// because it reads dy and x a second time for the column sums; we read them
// once. So the partials borrow room from dx itself:
//   1. each block keeps the dx of its last `iterations` row iterations in
//      shared memory instead of writing them (the held rows), enough bytes
//      to hold its partials (kinds x cols fp32 values);
//   2. it writes its partials into those rows' place in dx;
//   3. a grid-wide barrier (a cooperative launch: every block resident);
//   4. every block sums a share of the columns over all blocks' partials,
//      in a fixed order (the same bits on every run), into dweight and dbias;
//   5. a second barrier (every partial read), then each block writes its
//      held rows from shared memory over its partials.
// The bytes moved are those of the workspace scheme (the partials are
// written and read once, from L2), with no second launch.
#pragma once

#include <cooperative_groups.h>

#include <atomic>

#include "norm_common.cuh"

namespace fo {
namespace {

// Build-time knob, for tuning: FO_BACKWARD_HELD_PARTIALS (1) or 0 (the
// workspace and the finishing kernel everywhere).
#ifndef FO_BACKWARD_HELD_PARTIALS
#define FO_BACKWARD_HELD_PARTIALS 1
#endif

// What the register kernel is told of the held rows (host-computed, so
// that the kernel divides nothing: a 64-bit division is a subroutine whose
// registers made ptxas spill the kernel, at its cap of 64).
struct HeldArgs {
    int iterations = 0;      // a block holds its last `iterations` (0: none held)
    int64_t full = 0;        // every block runs `full` row iterations, and
    int64_t extra = 0;       // those whose first row is below `extra` one more
};

// Where block `block`'s partials lie: its held rows, slot s being the row of
// its iteration (iterations - held + s / ty) at ty-row s % ty (ty a power
// of two), each slot holding per_slot = cols * sizeof(T) / sizeof(A)
// values: a gradient's partials take sizeof(A) / sizeof(T) slots (1 or 2),
// the weight's first.
template <typename T>
struct HeldRows {
    using A = acc_t<T>;
    static constexpr int kSlotsAGradient = int(sizeof(A) / sizeof(T));
    char *park;  // dx (or dresidual, when it is of T and dx is not written)
    int64_t cols, step, per_slot;  // step: rows a grid iteration (gridDim.x * ty)
    HeldArgs args;
    int ty;

    __device__ HeldRows(void *park_, int64_t cols_, int ty_, const HeldArgs &args_)
        : park(static_cast<char *>(park_)), cols(cols_), step(int64_t(gridDim.x) * ty_),
          per_slot(cols_ / kSlotsAGradient), args(args_), ty(ty_) {}

    __device__ int64_t row(int64_t block, int slot) const {
        const int64_t first = block * ty;
        const int64_t iterations = args.full + (first < args.extra);
        return first + (slot & (ty - 1)) + (iterations - args.iterations + slot / ty) * step;
    }
    __device__ A *slot_values(int64_t block, int slot) const {
        return reinterpret_cast<A *>(park + row(block, slot) * cols * int64_t(sizeof(T)));
    }
    // value `col` of gradient `kind`'s partials of block `block`
    __device__ A *value(int64_t block, int kind, int64_t col) const {
        const int half = kSlotsAGradient == 2 && col >= per_slot;  // no division
        return slot_values(block, kind * kSlotsAGradient + half) + (col - half * per_slot);
    }
};

// Step 2: chunk c of gradient `kind`'s partials (dw or db) of this block.
// kSpread (fp32 only, a slot a gradient) keeps them where the row's own
// values are; else the chunk's 8 values are contiguous (per_slot is a
// multiple of 8: cols % 16 == 0).
template <typename T, Access ACCESS>
__device__ __forceinline__ void park_partial_chunk(const HeldRows<T> &held, int kind,
                                                   const acc_t<T> (&values)[kChunk], int64_t c) {
    using A = acc_t<T>;
    if constexpr (ACCESS == kSpread)
        store_row_chunk<A, kSpread>(held.slot_values(blockIdx.x, kind), values, c, held.cols);
    else
        store_chunk<A, true>(held.value(blockIdx.x, kind, c * kChunk), values, kChunk);
}

// Step 4: columns in tiles of 32 (a warp's lanes), the tiles of both
// gradients shared out over the blocks; a warp sums the blocks w, w +
// warps, ... in order, then warp 0 adds the warps' sums in order.
template <typename T, typename P>
__device__ void sum_parked_partials(const HeldRows<T> &held, P *dweight, P *dbias) {
    using A = acc_t<T>;
    __shared__ A warp_sums[kMaxRowThreads / 32][32];
    const int thread = threadIdx.y * blockDim.x + threadIdx.x;
    const int warps = blockDim.x * blockDim.y / 32, warp = thread / 32, lane = thread % 32;
    const int64_t col_tiles = (held.cols + 31) / 32;
    const int64_t tiles = (dweight && dbias ? 2 : 1) * col_tiles;
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int kind = int(t / col_tiles);
        const int64_t col = (t % col_tiles) * 32 + lane;
        A sum = 0;
        if (col < held.cols) {
#pragma unroll 4
            for (int64_t block = warp; block < gridDim.x; block += warps)
                sum += __ldcg(held.value(block, kind, col));  // written this launch: not __ldg
        }
        warp_sums[warp][lane] = sum;
        __syncthreads();
        if (warp == 0 && col < held.cols) {
            A total = 0;
            for (int w = 0; w < warps; w++) total += warp_sums[w][lane];
            P *out = kind == 0 && dweight ? dweight : dbias;
            out[col] = from_acc<P>(total);
        }
        __syncthreads();
    }
}

// Step 5: this block's held rows, from shared memory to their place.
template <typename T>
__device__ void write_held_rows(const HeldRows<T> &held, const uint4 *staged) {
    const int thread = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
    const int vectors = int(held.cols * int64_t(sizeof(T)) / 16);
    for (int s = 0; s < held.args.iterations * held.ty; s++) {
        uint4 *to = reinterpret_cast<uint4 *>(held.park + held.row(blockIdx.x, s) * held.cols *
                                                              int64_t(sizeof(T)));
        for (int v = thread; v < vectors; v += threads) to[v] = staged[int64_t(s) * vectors + v];
    }
}

// Steps 3-5, every thread of the grid. Not inlined: the register kernel
// it ends is at its register cap, and inlined, its state beside the row
// loop's made ptxas spill.
template <typename T, typename P>
__device__ __noinline__ void sum_and_restore(const HeldRows<T> held, P *dweight, P *dbias,
                                             const uint4 *staged) {
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    grid.sync();
    sum_parked_partials<T>(held, dweight, dbias);
    grid.sync();
    write_held_rows<T>(held, staged);
}

// Steps 2-5 for the register backward, its partials summed over its ty rows
// already (dw, db: thread ty 0's). Every thread of the grid calls it.
template <typename T, typename P, int CPT, Access ACCESS>
__device__ __forceinline__ void finish_held_partials(const fo_norm_backward_args &a,
                                                     const HeldRows<T> &held,
                                                     const acc_t<T> (&dw)[CPT][kChunk],
                                                     const acc_t<T> (&db)[CPT][kChunk],
                                                     const uint4 *staged) {
    const int64_t chunks = chunks_per_row(a.cols);
    if (threadIdx.y == 0) {
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            if (c >= chunks) continue;
            if (a.dweight) park_partial_chunk<T, ACCESS>(held, 0, dw[k], c);
            if (a.dbias) park_partial_chunk<T, ACCESS>(held, a.dweight ? 1 : 0, db[k], c);
        }
    }
    sum_and_restore<T>(held, static_cast<P *>(a.dweight), static_cast<P *>(a.dbias), staged);
}

// The launch of the held scheme, or iterations = 0 where it does not apply.
struct HeldPlan {
    int iterations = 0;  // a block holds its last `iterations` row iterations
    size_t shared_bytes = 0;
};

// Where it applies: weight or bias gradients asked for, a row buffer of T
// to park in (dx, or dresidual where it is of T and dx is not written),
// rows a whole number of TY (every held iteration is whole) and of at least
// one block's held rows, cols % 16 == 0 (16-bit slots hold whole chunks of
// fp32 partials), and the held rows in shared memory beside the kernel's
// own (at most 40 KB of it), on a GPU with cooperative launches. That the
// register kernel runs, with ty rows a block, is the caller's to check.
template <typename T>
HeldPlan held_plan(const fo_norm_backward_args &a, int ty, int device) {
    HeldPlan plan;
    const bool park = a.dx || (a.dresidual && a.h_dtype == a.dtype);
    if (!FO_BACKWARD_HELD_PARTIALS || !(a.dweight || a.dbias) || !park || a.cols % 16 != 0 ||
        a.rows % ty != 0)
        return plan;
    const int64_t kinds = (a.dweight ? 1 : 0) + (a.dbias ? 1 : 0);
    const int64_t rows_needed = kinds * int64_t(sizeof(acc_t<T>)) / int64_t(sizeof(T));
    const int64_t iterations = (rows_needed + ty - 1) / ty;
    if (a.rows < iterations * ty) return plan;
    int cooperative = 0, shared_optin = 0;
    if (cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
        cudaGetLastError();  // a failed query is "no", not this op's error
        return plan;
    }
    const int64_t bytes = iterations * ty * a.cols * int64_t(sizeof(T));
    constexpr int64_t kKernelShared = 40 << 10;  // weight slots, column and warp sums
    if (!cooperative || bytes + kKernelShared > shared_optin) return plan;
    plan.iterations = int(iterations);
    plan.shared_bytes = size_t(bytes);
    return plan;
}

// Blocks an SM of `kernel` at `threads` and `shared_bytes`, for the
// cooperative grid; the last answer is kept, one for each kernel (the
// occupancy query costs microseconds a call, and a model asks the same
// again and again).
template <auto kernel>
int resident_blocks(int device, int threads, size_t shared_bytes) {
    static std::atomic<uint64_t> last{0};  // the key, then the answer
    const uint64_t key = (uint64_t(device) << 40) | (uint64_t(threads) << 24) | shared_bytes;
    const uint64_t seen = last.load(std::memory_order_relaxed);
    if (seen >> 8 == key) return int(seen & 0xff);
    int blocks = 0;
    if ((shared_bytes > (48 << 10) &&
         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              int(shared_bytes)) != cudaSuccess) ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes) !=
            cudaSuccess) {
        cudaGetLastError();  // none resident: the workspace path runs
        return 0;
    }
    last.store((key << 8) | uint64_t(blocks & 0xff), std::memory_order_relaxed);
    return blocks;
}

}  // namespace
}  // namespace fo
