// norm_registers.cuh: the fast path of LayerNorm and RMSNorm, for rows whose
// operands are 16-byte aligned with cols a multiple of 8, and short enough to
// live in registers (RegisterRows says how short).
//
// Why: the norms are memory-bound, so the least traffic wins. Each element
// is read from memory once and written once: forward keeps the row (h =
// dropout(x) + residual) in registers between the statistics and the
// output, and backward keeps dy and xhat between the row sums and dx, and
// also adds this block's rows into per-column weight and bias partials in
// registers, so the column reduction needs no second read of dy and h. A
// second tiny kernel (finish_column_partials) sums the partials in a fixed
// order: no float atomics, the same bits on every run and every GPU.
//
// Each thread owns CPT chunks of 8 elements of a row, strided by TX (the
// threads of the row), so a warp's 16-byte loads are contiguous.
#pragma once

#include "norm_common.cuh"

namespace fo {
namespace {

// The launch shape of the register kernels for one row length.
struct RegisterRows {
    int tx = 0, ty = 0, cpt = 0;  // cpt = 0: the row does not fit
    int64_t groups = 0;           // blocks: ceil(rows / ty), capped
};

// Forward holds one array of CPT x 8 accumulators a thread, backward four
// (dy, xhat, and the weight and bias partials): within 128 registers at
// 512 threads (ptxas -v for sm_80 and sm_90 shows no spills), forward takes
// up to 8 chunks a thread and backward 2; fp64, whose values take two
// registers, 2 and 1.
template <typename T>
constexpr int kForwardMaxChunks = std::is_same_v<T, double> ? 2 : 8;
template <typename T>
constexpr int kBackwardMaxChunks = std::is_same_v<T, double> ? 1 : 2;
// Backward's grid is persistent and fixed (it decides which rows each
// partial sums, and so the bits of dweight): enough blocks to fill an
// H100/H200 twice over, few enough that the partials (2 x blocks x cols
// fp32) stay a few percent of the traffic.
constexpr int64_t kBackwardBlocks = 512;

// Chunks a thread: as few threads as keep `target` chunks each (so every
// thread has several 16-byte loads in flight), at least a warp and at most
// kMaxRowThreads a row; then the power-of-two chunks a thread that covers
// the row. Narrow rows share a block of kThreads (TY rows).
inline RegisterRows register_rows(int64_t rows, int64_t cols, int target,
                                  int max_chunks, int64_t max_groups) {
    RegisterRows g;
    const int64_t chunks = chunks_per_row(cols);
    if (target > max_chunks) target = max_chunks;  // fp64: fewer a thread
    int tx = 32;
    while (tx < kMaxRowThreads && int64_t(tx) * target < chunks) tx *= 2;
    int cpt = 1;
    while (int64_t(tx) * cpt < chunks) cpt *= 2;
    if (cpt > max_chunks) return g;
    g.tx = tx;
    g.cpt = cpt;
    g.ty = tx >= kThreads ? 1 : kThreads / tx;
    g.groups = (rows + g.ty - 1) / g.ty;
    if (g.groups > max_groups) g.groups = max_groups;
    if (g.groups < 1) g.groups = 1;
    return g;
}

// Calls f(std::integral_constant<int, CPT>) for a chunks-a-thread count of
// 1, 2, 4 .. MAX (the only ones instantiated).
template <int MAX, typename F>
void dispatch_chunks(int cpt, F &&f) {
    if (cpt == 1) f(std::integral_constant<int, 1>{});
    if constexpr (MAX >= 2) if (cpt == 2) f(std::integral_constant<int, 2>{});
    if constexpr (MAX >= 4) if (cpt == 4) f(std::integral_constant<int, 4>{});
    if constexpr (MAX >= 8) if (cpt == 8) f(std::integral_constant<int, 8>{});
}

template <typename T>
RegisterRows forward_register_rows(int64_t rows, int64_t cols) {
    return register_rows(rows, cols, 4, kForwardMaxChunks<T>, kMaxRowGroups);
}
template <typename T>
RegisterRows backward_register_rows(int64_t rows, int64_t cols) {
    return register_rows(rows, cols, 2, kBackwardMaxChunks<T>, kBackwardBlocks);
}

// T: x and y; R: residual, residual_out (T or float); P: weight, bias.
template <typename T, typename R, typename P, int CPT>
__global__ void __launch_bounds__(kMaxRowThreads)
    norm_forward_registers_kernel(fo_norm_forward_args a) {
    using A = acc_t<T>;
    const P *weight = static_cast<const P *>(a.weight);
    const P *bias = static_cast<const P *>(a.bias);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    // the row loop is uniform across the block (row_sum holds barriers)
    for (int64_t base = blockIdx.x * int64_t(blockDim.y); base < a.rows;
         base += int64_t(gridDim.x) * blockDim.y) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        // h = dropout(x) + residual, as stored in residual_out's dtype
        A h[CPT][kChunk];
        A sum = 0;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            const int64_t col = c * kChunk;
            if (active && c < chunks) {
                load_h_chunk<T, R, true>(h[k], a, r, col, kChunk);
            } else {
#pragma unroll
                for (int i = 0; i < kChunk; i++) h[k][i] = 0;
            }
#pragma unroll
            for (int i = 0; i < kChunk; i++) sum += h[k][i];
        }
        const A mean = rms ? A(0) : row_sum(sum) / A(cols);
        // the variance about the mean, from registers: no cancellation, and
        // no second read (the zeros of absent chunks are left out)
        A deviations = 0;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            if (threadIdx.x + int64_t(k) * blockDim.x >= chunks) continue;
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                deviations += (h[k][i] - mean) * (h[k][i] - mean);
        }
        const A variance = row_sum(deviations) / A(cols);
        if (!active) continue;
        const A rstd = A(1) / sqrt(variance + A(a.eps));
        if (threadIdx.x == 0) {
            if (a.mean) static_cast<A *>(a.mean)[r] = mean;
            if (a.rstd) static_cast<A *>(a.rstd)[r] = rstd;
        }
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            if (c >= chunks) continue;
            const int64_t col = c * kChunk;
            acc_t<P> w[kChunk], b[kChunk];
            if (weight) load_chunk<P, true>(w, weight + col, kChunk);
            if (bias) load_chunk<P, true>(b, bias + col, kChunk);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                A v = (h[k][i] - mean) * rstd;
                if (weight) v *= A(w[i]);
                v += bias ? A(b[i]) : A(0);  // + 0 as the streaming kernel: -0 becomes +0
                h[k][i] = v;
            }
            store_chunk<T, true>(static_cast<T *>(a.y) + r * cols + col, h[k], kChunk);
        }
    }
}

// T: dy, dx; H: h, dresidual_out, dresidual (T or float); P: weight.
// Writes this block's per-column sums of dy * xhat (weight) and dy (bias)
// to partials[0 or 1][blockIdx.x][col].
template <typename T, typename H, typename P, int CPT>
__global__ void __launch_bounds__(kMaxRowThreads)
    norm_backward_registers_kernel(fo_norm_backward_args a, acc_t<T> *__restrict__ partials) {
    using A = acc_t<T>;
    const T *dy = static_cast<const T *>(a.dy);
    const H *h = static_cast<const H *>(a.h);
    const P *weight = static_cast<const P *>(a.weight);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    const bool columns = a.dweight || a.dbias;
    A dw[CPT][kChunk] = {}, db[CPT][kChunk] = {};
    for (int64_t base = blockIdx.x * int64_t(blockDim.y); base < a.rows;
         base += int64_t(gridDim.x) * blockDim.y) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        const A mean = !active || rms ? A(0) : static_cast<const A *>(a.mean)[r];
        const A rstd = active ? static_cast<const A *>(a.rstd)[r] : A(0);
        // wdy = weight * dy and xhat of the row, kept for the second step
        A wdy[CPT][kChunk], xhat[CPT][kChunk];
        A sum_wdy = 0, sum_wdy_xhat = 0;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            const int64_t col = c * kChunk;
            if (active && c < chunks) {
                acc_t<H> hv[kChunk];
                load_chunk<T, true>(wdy[k], dy + r * a.dy_row_stride + col, kChunk);
                load_chunk<H, true>(hv, h + r * a.h_row_stride + col, kChunk);
                acc_t<P> w[kChunk];
                if (weight) load_chunk<P, true>(w, weight + col, kChunk);
#pragma unroll
                for (int i = 0; i < kChunk; i++) {
                    xhat[k][i] = (A(hv[i]) - mean) * rstd;
                    dw[k][i] += wdy[k][i] * xhat[k][i];
                    db[k][i] += wdy[k][i];
                    if (weight) wdy[k][i] *= A(w[i]);
                }
            } else {
#pragma unroll
                for (int i = 0; i < kChunk; i++) wdy[k][i] = xhat[k][i] = 0;
            }
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                sum_wdy += wdy[k][i];
                sum_wdy_xhat += wdy[k][i] * xhat[k][i];
            }
        }
        // dh = rstd * (wdy - mean(wdy) - xhat * mean(wdy * xhat)); RMSNorm
        // drops the mean(wdy) term
        const A mean_wdy = rms ? A(0) : row_sum(sum_wdy) / A(cols);
        const A mean_wdy_xhat = row_sum(sum_wdy_xhat) / A(cols);
        if (!active) continue;
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
            if (c >= chunks) continue;
            const int64_t col = c * kChunk;
            A dh[kChunk];
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                dh[i] = rstd * (wdy[k][i] - mean_wdy - xhat[k][i] * mean_wdy_xhat);
            store_dh_chunk<T, H, true>(dh, a, r, col, kChunk);
        }
    }
    if (!columns) return;
    // The TY rows of a block own the same columns: add them in ty order
    // through shared memory, one chunk index k at a time, then write.
    __shared__ A column_sums[2][kThreads * kChunk];
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
        if (threadIdx.y != 0 || c >= chunks) continue;
        const int64_t at = int64_t(blockIdx.x) * cols + c * kChunk;
        A *weight_partials = partials, *bias_partials = partials + int64_t(gridDim.x) * cols;
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            weight_partials[at + i] = dw[k][i];
            bias_partials[at + i] = db[k][i];
        }
    }
}

}  // namespace
}  // namespace fo
