// norm_shared_held_partials.cuh: the shared-memory backward's weight and
// bias partials without a workspace: parked in dx rows that are not written
// yet, whose dx is then computed a second time.
//
// Why: as in the register backward (norm_held_partials.cuh), the partials'
// workspace was the only memory the norms' forward+backward took beyond
// eager torch's (32 MiB at bf16 LayerNorm 4096 x 16384, on eager's 256).
// But here a row slice fills the block's shared memory, so the rows whose
// dx room the partials borrow cannot wait there. Instead:
//   1. the owner blocks (the first `owners` groups, in every rank of the
//      cluster) defer their last `deferred` rows: the row sums and the
//      partials as usual, but no dx, only the two row means it needs
//      (kept in shared memory);
//   2. the chunks of 8 columns of both gradients in a rank's slice are
//      dealt out to that rank's owners, `owned` each, and every block
//      writes its partial of each into its owner's deferred rows: owner
//      o's values, slot after slot (its deferred rows in order, its slice
//      of each), hold the entries (p, j), group p's partial of the j-th
//      chunk o owns, 8 values at (p * owned + j) * 8;
//   3. one grid-wide barrier (a cooperative launch, with its clusters);
//   4. each owner sums its chunks' partials in group order (the same bits
//      on every run) into dweight and dbias; then, since no other block
//      reads its deferred rows, it computes their dx from dy and h, copied
//      in again through the row slots (the last deferred row is still
//      there; in fp32 the rows' first copies asked L2 to keep them).
// Bytes: the workspace scheme's partials (written once, read once), plus
// dy and h of all but the last deferred row read a second time: 5 rows a
// block in bf16 LayerNorm (its partials, 8 bytes a column, fill 4.1 rows of
// 2 bytes a column at 132 groups), 3 in RMSNorm. The price is time, the
// deferred rows being read and written after the barrier, when nothing else
// streams: on the H100, against the workspace path, 0.89-0.95x at 4096 x
// 16384 bf16, 0.96-1.01x at 16384 x 16384 and 4096 x 65536, fp32
// 0.97-1.03x.
#pragma once

#include <cooperative_groups.h>

#include "norm_held_partials.cuh"
#include "norm_shared.cuh"

namespace fo {
namespace {

// The most rows an owner defers (its row means' room in shared memory).
constexpr int kMaxDeferred = 8;

// What the shared-memory backward is told of its deferred rows
// (host-computed: no 64-bit division in the kernel).
struct DeferArgs {
    int deferred = 0;  // an owner defers its last `deferred` row iterations (0: the workspace)
    int owned = 0;  // chunks an owner owns (the last owner of a rank fewer)
    int owners = 0;  // groups 0 to owners - 1 own chunks and defer rows, in every rank
    int per_slot = 0;  // values a deferred row's slice holds (a multiple of 8)
    int64_t full = 0;  // every group runs `full` row iterations, and
    int64_t extra = 0;  // those below `extra` one more
};

// The deferred rows of the owners of this block's rank.
template <typename T>
struct DeferredRows {
    using A = acc_t<T>;
    char *park;  // dx (or dresidual, when it is of T and dx is not written)
    int64_t cols, col0, groups;  // col0: the rank's slice's first column
    DeferArgs d;

    // the row of group g's deferred iteration k (0: its first deferred)
    __device__ int64_t row(int64_t g, int k) const {
        const int64_t iterations = d.full + (g < d.extra);
        return g + (iterations - d.deferred + k) * groups;
    }
    // value v of group o's deferred rows (32-bit: they are few)
    __device__ A *value(int64_t o, int v) const {
        const int slot = v / d.per_slot;
        return reinterpret_cast<A *>(park + (row(o, slot) * cols + col0) * int64_t(sizeof(T))) +
               v % d.per_slot;
    }
};

// Step 2: this block's partials (its slice's `here` chunks, thread-strided
// as the kernel holds them) to their owners.
template <typename T, int CPT>
__device__ __forceinline__ void park_shared_partials(const DeferredRows<T> &held, int64_t group,
                                                     int here, bool dweight, bool dbias,
                                                     const acc_t<T> (&dw)[CPT][kChunk],
                                                     const acc_t<T> (&db)[CPT][kChunk]) {
    auto park = [&](int kind, int c, const acc_t<T>(&values)[kChunk]) {
        const int ck = kind * here + c, owner = ck / held.d.owned, j = ck - owner * held.d.owned;
        store_chunk<acc_t<T>, true>(held.value(owner, (int(group) * held.d.owned + j) * kChunk),
                                    values, kChunk);
    };
#pragma unroll
    for (int k = 0; k < CPT; k++) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c >= here) continue;
        if (dweight) park(0, c, dw[k]);
        if (dbias) park(dweight ? 1 : 0, c, db[k]);
    }
}

// Step 4's sums, in an owner (every thread). Quad q (values 4q to 4q + 3)
// of the width = owned * 8 values that each group parked with the owner is
// summed over the groups in order, 16 bytes a load: where there are fewer
// quads than threads, `teams` threads share it, team t taking groups t, t
// + teams, ... (8 loads in flight), and the teams' sums are added in
// order; else a thread takes quads q, q + threads, ... whole. Not inlined:
// beside the kernel's own state, its loads made ptxas spill 12-16 bytes at
// the kernel's 128 registers.
template <typename T, typename P>
__device__ __noinline__ void sum_owned_partials(const DeferredRows<T> held, int64_t group, int here,
                                                P *dweight, P *dbias) {
    static_assert(std::is_same_v<acc_t<T>, float>, "fp32 partials (fp64 never takes this path)");
    constexpr int kInFlight = 8;
    __shared__ float4 team_sums[kMaxRowThreads];
    const int t = threadIdx.x, threads = blockDim.x;
    const int quads = held.d.owned * kChunk / 4, groups = int(held.groups);
    const int teams = quads < threads ? threads / quads : 1;
    const int kinds = (dweight ? 1 : 0) + (dbias ? 1 : 0);
    auto add = [](float4 &to, const float4 v) {
        to.x += v.x;
        to.y += v.y;
        to.z += v.z;
        to.w += v.w;
    };
    for (int q0 = 0; q0 < quads; q0 += threads) {
        int q = q0 + (teams > 1 ? t % quads : t);
        const int team = teams > 1 ? t / quads : 0;
        float4 sum = {0, 0, 0, 0};
        if (q < quads && team < teams) {
            float4 sums[kInFlight] = {};
            for (int p0 = team; p0 < groups; p0 += kInFlight * teams) {
#pragma unroll
                for (int u = 0; u < kInFlight; u++) {
                    const int p = p0 + u * teams;
                    if (p < groups)  // (written this launch: from L2)
                        add(sums[u], __ldcg(reinterpret_cast<const float4 *>(
                                         held.value(group, (p * quads + q) * 4))));
                }
            }
#pragma unroll
            for (int u = 0; u < kInFlight; u += 2) add(sums[u], sums[u + 1]);
            add(sums[0], sums[2]);
            add(sums[4], sums[6]);
            add(sums[0], sums[4]);
            sum = sums[0];
        }
        if (teams > 1) {
            team_sums[t] = sum;
            __syncthreads();
            sum = team_sums[q];
            for (int u = 1; u < teams; u++) add(sum, team_sums[u * quads + q]);
            if (t >= quads) q = quads;  // (the first team's threads write)
        }
        const int ck = int(group) * held.d.owned + q * 4 / kChunk;
        if (q < quads && ck < kinds * here) {
            const int kind = ck / here, c = ck - kind * here;
            P *out = (dweight && kind == 0 ? dweight : dbias) + held.col0 + int64_t(c) * kChunk +
                     q * 4 % kChunk;
            out[0] = from_acc<P>(sum.x);
            out[1] = from_acc<P>(sum.y);
            out[2] = from_acc<P>(sum.z);
            out[3] = from_acc<P>(sum.w);
        }
    }
}

// Steps 3-4, every thread of the grid: the barrier, an owner's sums, then
// the dx of its deferred rows from dy and h in the block's row slots and
// the RowGradient terms kept (row_means). The slots still hold the last
// deferred row (the block's last): it goes first, and, as in the row loop,
// each chunk a thread frees takes the same chunk of the next deferred row
// (copy_row(r, c), the kernel's), so the next row is in flight while this
// one is written (read again from global memory instead, two chunks at a
// time, it was 0.88x the workspace path).
template <typename T, typename H, int CPT, typename WeightRow, typename DyRow, typename HRow,
          typename CopyRow>
__device__ __forceinline__ void sum_and_write_deferred(const fo_norm_backward_params &a,
                                                       const DeferredRows<T> &held, int64_t group,
                                                       int here, const WeightRow &weight_row,
                                                       const DyRow &dy_row, const HRow &h_row,
                                                       CopyRow &&copy_row,
                                                       const acc_t<T> (*row_means)[2]) {
    using A = acc_t<T>;
    using P = typename WeightRow::Value;
    cooperative_groups::this_grid().sync();
    if (group >= held.d.owners) return;
    sum_owned_partials<T, P>(held, group, here, static_cast<P *>(a.dweight),
                             static_cast<P *>(a.dbias));
    __syncthreads();  // every parked value read: the deferred rows are this block's again
    const bool rms = a.kind == FO_NORM_RMS;
    const int64_t first_chunk = held.col0 / kChunk;
    const int last = held.d.deferred - 1;
#pragma unroll 1
    for (int i = 0; i <= last; i++) {
        // the order: the last deferred row (in the slots), then the first
        // to the second last
        const int k = i == 0 ? last : i - 1;
        const int64_t r = held.row(group, k), next = i < last ? held.row(group, i) : -1;
        const A mean = rms ? A(0) : static_cast<const A *>(a.mean)[r];
        const A rstd = static_cast<const A *>(a.rstd)[r];
        const RowGradient<A> row = {mean, rstd, row_means[k][0], row_means[k][1]};
        __pipeline_wait_prior(0);  // this thread's copies of row r have landed
#pragma unroll 1
        for (int j = 0; j < CPT; j++) {  // (unrolled, ptxas spilled 8-24 bytes)
            const int c = threadIdx.x + j * blockDim.x;
            if (c >= here) continue;
            A g[kChunk], x[kChunk], w[kChunk], dh[kChunk];
            dy_row.get(c, g);
            h_row.get(c, x);
            if (a.weight) weight_row.get(c, w);
            if (next >= 0)  // the slots are free (read above)
                copy_row(next, c, kDeferredL2Priority<T> ? kL2Drop : kL2Normal);
#pragma unroll
            for (int e = 0; e < kChunk; e++) {
                const A wdy = a.weight ? weighted_dy<T, P>(g[e], w[e]) : g[e];
                dh[e] = norm_dh(row, wdy, x[e]);
            }
            store_dh_chunk<T, H, kVector>(
                dh, a, r, first_chunk + c, a.dx ? static_cast<T *>(a.dx) + r * a.cols : nullptr,
                a.dresidual ? static_cast<H *>(a.dresidual) + r * a.cols : nullptr);
        }
        __pipeline_commit();
    }
}

// The deferred scheme for a call, or deferred = 0 where it does not apply:
// a parameter's gradient asked for (dweight, dbias or both), a row buffer
// of T to park in (dx; or dresidual, where dx is not written and h is of
// T), slices of the same even number of chunks (a slot then holds whole
// entries), a GPU with cooperative launches, and each owner's entries in
// at most kMaxDeferred of its rows, which every group has. `groups` groups
// of `cluster` blocks; whether they are all resident at once is the
// caller's to check. The deferred rows' dx and dresidual come from the row
// loop's own store_dh_chunk: a gradient arriving at residual_out is added
// there, and dropout's mask is regenerated from row and column. Every
// condition is one the workspace query sees (an address's nullness, a
// dtype), so the query and the launch agree.
template <typename T>
DeferArgs defer_plan(const fo_norm_backward_params &a, int cluster, int64_t groups,
                     bool cooperative) {
    DeferArgs d;
    const int64_t chunks = chunks_per_row(a.cols);
    const bool park_room = a.dx || (a.dresidual && a.h_dtype == a.dtype);
    if (!park_room || !(a.dweight || a.dbias) || a.cols % kChunk != 0 ||
        chunks % (2 * cluster) != 0 || groups < 1)
        return d;
    const int64_t here = chunks / cluster, kinds = (a.dweight ? 1 : 0) + (a.dbias ? 1 : 0);
    const int64_t owned = (kinds * here + groups - 1) / groups;
    const int64_t per_slot = here * kChunk * int64_t(sizeof(T)) / int64_t(sizeof(acc_t<T>));
    const int64_t deferred = (groups * owned * kChunk + per_slot - 1) / per_slot;
    if (deferred > kMaxDeferred || a.rows / groups < deferred) return d;
    if (!cooperative) return d;
    d.deferred = int(deferred);
    d.owned = int(owned);
    d.owners = int((kinds * here + owned - 1) / owned);
    d.per_slot = int(per_slot);
    d.full = a.rows / groups;
    d.extra = a.rows % groups;
    return d;
}

}  // namespace
}  // namespace fo
