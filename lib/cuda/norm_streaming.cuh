// norm_streaming.cuh: the streaming kernels of LayerNorm and RMSNorm, for
// the rows no other kernel takes (unaligned or odd-length rows, rows too
// long for registers and shared memory, fp64's past registers). They run TX
// threads a row (TX = the power of two covering the row's 8-element chunks,
// 32..512) and TY rows a block, so narrow rows still fill a block and wide
// rows (to 262144 and beyond) loop. They make two passes over a row: the
// statistics (LayerNorm's mean and variance together, merged by Chan's
// rule), then the output; the second pass re-reads the row, from L2 where
// it is still there (see kForwardHints). Their weight and bias gradients
// are a column reduction with the same fixed two-pass scheme as the bias
// gradient of bias_scale_relu.
#pragma once

#include "norm_common.cuh"

namespace fo {
namespace {

// Wide rows outgrow L2 while they are being re-read (ncu, 4096 x 65536
// bf16: 1.4x the minimum bytes forward, 1.7x backward), so a row's last
// read and the outputs are marked evict-first, keeping L2 for the rows
// still to be re-read: on the H100 the 16-bit forward 6-13% faster at 65536
// columns and the backward 3-15%, but the fp32 forward 10-16% slower, so
// the forward marks them for 16-bit types only.
template <typename T>
constexpr bool kForwardHints = sizeof(T) == 2;
constexpr bool kBackwardHints = true;
// Rows a thread of the weight/bias column kernel loads at once (1 was
// 1-3% slower, 4 7% slower in bf16).
constexpr int kColumnBatch = 2;

// T: x and y; R: residual, residual_out (T or float); P: weight, bias.
template <typename T, typename R, typename P, bool VEC>
__global__ void __launch_bounds__(kMaxRowThreads) norm_forward_kernel(fo_norm_forward_params a) {
    using A = acc_t<T>;
    const T *x = static_cast<const T *>(a.x);
    const R *residual = static_cast<const R *>(a.residual);
    R *residual_out = static_cast<R *>(a.residual_out);
    const P *weight = static_cast<const P *>(a.weight);
    const P *bias = static_cast<const P *>(a.bias);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    float amax = 0.0f;  // the FP8 output's (a.fp8_amax)
    // the row loop is uniform across the block (row_sum holds barriers)
    for (int64_t base = blockIdx.x * int64_t(blockDim.y); base < a.rows;
         base += int64_t(gridDim.x) * blockDim.y) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        A sum_squares = 0;  // RMSNorm's statistic
        Moments<A> moments = {0, 0, 0};  // LayerNorm's, in the same pass
        // h = dropout(x) + residual, rounded to R as stored, and its statistics
        for (int64_t c = threadIdx.x; active && c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A h[kChunk];
            load_chunk<T, VEC>(h, x + r * a.x_row_stride + col, n);
            if (residual) {
                if (a.dropout_p > 0) apply_dropout(h, r, col, cols, a.dropout_p, a.seed, a.offset);
                acc_t<R> res[kChunk];
                load_chunk<R, VEC>(res, residual + r * a.residual_row_stride + col, n);
                acc_t<R> stored[kChunk];
#pragma unroll
                for (int i = 0; i < kChunk; i++) {
                    stored[i] = acc_t<R>(h[i]) + res[i];
                    h[i] = A(to_acc(from_acc<R>(stored[i])));
                }
                store_chunk<R, VEC>(residual_out + r * cols + col, stored, n);
            }
            if (rms) {
#pragma unroll
                for (int i = 0; i < kChunk; i++) sum_squares += h[i] * h[i];  // 0 past n
                continue;
            }
            // the chunk's moments (about its own mean, from registers), merged
            // in; its mean as h[0] + mean(h - h[0]), exactly h[0] where the
            // chunk is constant
            A sum = 0;
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                if (i < n) sum += h[i] - h[0];
            Moments<A> chunk = {A(n), h[0] + sum * reciprocal(A(n)), 0};
#pragma unroll
            for (int i = 0; i < kChunk; i++)
                if (i < n) chunk.m2 += (h[i] - chunk.mean) * (h[i] - chunk.mean);
            moments = merge(moments, chunk);
        }
        A mean = 0, variance;
        if (rms) {
            variance = row_sum(sum_squares) / A(cols);
        } else {
            moments = row_moments(moments);
            mean = moments.mean;
            variance = moments.m2 / A(cols);
        }
        // the h of the output pass: residual_out as just written (plain
        // loads: this kernel wrote it), or x; its last read
        auto load_h = [&](A(&h)[kChunk], int64_t col, int n) {
            if (residual) {
                acc_t<R> v[kChunk];
                load_chunk<R, VEC, false, kForwardHints<T>>(v, residual_out + r * cols + col, n);
#pragma unroll
                for (int i = 0; i < kChunk; i++) h[i] = A(v[i]);
            } else {
                load_chunk<T, VEC, true, kForwardHints<T>>(h, x + r * a.x_row_stride + col, n);
            }
        };
        if (!active) continue;
        const A rstd = row_rstd(variance, a.eps);
        if (threadIdx.x == 0) {
            if (a.mean) static_cast<A *>(a.mean)[r] = mean;
            if (a.rstd) static_cast<A *>(a.rstd)[r] = rstd;
            if (a.row_stats) store_row_stats(a.row_stats, r, mean, rstd);
        }
        if (!a.y && !a.fp8_amax) continue;  // FP8 rowwise: the cast computes y
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A h[kChunk], w[kChunk], b[kChunk];
            load_h(h, col, n);
            load_params(w, weight ? weight + col : nullptr, n, A(1));
            load_params(b, bias ? bias + col : nullptr, n, A(0));
            normalize_chunk<true>(h, mean, rstd, A(0), w, b);
            if (a.y)
                store_chunk<T, VEC, kForwardHints<T>>(static_cast<T *>(a.y) + r * cols + col, h, n);
            else
                amax = output_amax<T>(amax, h, n);
        }
    }
    if (a.fp8_amax) block_atomic_max(a.fp8_amax, amax);
}

// T: dy, dx; H: h, dresidual_out, dresidual (T or float); P: weight.
template <typename T, typename H, typename P, bool VEC>
__global__ void __launch_bounds__(kMaxRowThreads)
    norm_backward_rows_kernel(fo_norm_backward_params a) {
    using A = acc_t<T>;
    const T *dy = static_cast<const T *>(a.dy);
    const H *h = static_cast<const H *>(a.h);
    const H *dresidual_out = static_cast<const H *>(a.dresidual_out);
    const P *weight = static_cast<const P *>(a.weight);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    const A inv_cols = A(1) / A(cols);
    for (int64_t base = blockIdx.x * int64_t(blockDim.y); base < a.rows;
         base += int64_t(gridDim.x) * blockDim.y) {
        const int64_t r = base + threadIdx.y;
        const bool active = r < a.rows;
        const A mean = !active || rms ? A(0) : static_cast<const A *>(a.mean)[r];
        const A rstd = active ? static_cast<const A *>(a.rstd)[r] : A(0);
        // w * dy and h of one chunk (last: the row's last read of them,
        // the dx pass)
        auto load = [&](auto last, A(&wdy)[kChunk], A(&hv)[kChunk], int64_t col, int n) {
            constexpr bool kLast = decltype(last)::value && kBackwardHints;
            A w[kChunk];
            acc_t<H> hs[kChunk];
            load_chunk<T, VEC, true, kLast>(wdy, dy + r * a.dy_row_stride + col, n);
            load_chunk<H, VEC, true, kLast>(hs, h + r * a.h_row_stride + col, n);
            load_params(w, weight ? weight + col : nullptr, n, A(1));
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                wdy[i] = weighted_dy<T, P>(wdy[i], w[i]);
                hv[i] = A(hs[i]);
            }
        };
        A sum_wdy = 0, sum_wdy_xhat = 0;
        for (int64_t c = threadIdx.x; active && c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A wdy[kChunk], hv[kChunk];
            load(std::false_type{}, wdy, hv, col, n);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                sum_wdy += wdy[i];  // zero past n: load_chunk pads with 0
                sum_wdy_xhat += wdy[i] * normalized(hv[i], mean, rstd);
            }
        }
        const RowGradient<A> row = row_gradient(mean, rstd, rms ? A(0) : row_sum(sum_wdy),
                                                row_sum(sum_wdy_xhat), inv_cols, rms);
        for (int64_t c = threadIdx.x; active && c < chunks; c += blockDim.x) {
            const int64_t col = c * kChunk;
            const int n = int(cols - col < kChunk ? cols - col : kChunk);
            A dh[kChunk], hv[kChunk];
            load(std::true_type{}, dh, hv, col, n);
#pragma unroll
            for (int i = 0; i < kChunk; i++) dh[i] = norm_dh(row, dh[i], hv[i]);
            if (dresidual_out) {
                acc_t<H> g[kChunk];
                load_chunk<H, VEC>(g, dresidual_out + r * a.dresidual_out_row_stride + col, n);
#pragma unroll
                for (int i = 0; i < kChunk; i++) dh[i] += A(g[i]);
            }
            if (a.dresidual) {
                acc_t<H> out[kChunk];
#pragma unroll
                for (int i = 0; i < kChunk; i++) out[i] = acc_t<H>(dh[i]);
                store_chunk<H, VEC, kBackwardHints>(static_cast<H *>(a.dresidual) + r * cols + col,
                                                    out, n);
            }
            if (a.dx) {
                if (a.dropout_p > 0) apply_dropout(dh, r, col, cols, a.dropout_p, a.seed, a.offset);
                store_chunk<T, VEC, kBackwardHints>(static_cast<T *>(a.dx) + r * cols + col, dh, n);
            }
        }
    }
}

// Per-column sums of dy * xhat (weight) and dy (bias) over this block's
// rows, to partials[0 or 1][blockIdx.y][col]; geometry as row_geometry.
template <typename T, typename H, bool VEC>
__global__ void norm_backward_columns_kernel(fo_norm_backward_params a,
                                             acc_t<T> *__restrict__ partials) {
    using A = acc_t<T>;
    __shared__ A column_sums[2][kThreads * kChunk];
    const T *dy = static_cast<const T *>(a.dy);
    const H *h = static_cast<const H *>(a.h);
    const A *mean = static_cast<const A *>(a.mean);
    const A *rstd = static_cast<const A *>(a.rstd);
    const int64_t cols = a.cols, chunks = chunks_per_row(cols);
    const bool rms = a.kind == FO_NORM_RMS;
    A *weight_partials = partials;
    A *bias_partials = partials + int64_t(gridDim.y) * cols;
    for (int64_t base = blockIdx.x * int64_t(blockDim.x); base < chunks;
         base += int64_t(gridDim.x) * blockDim.x) {
        const int64_t c = base + threadIdx.x;
        const bool active = c < chunks;
        const int64_t col = c * kChunk;
        const int n = active ? int(cols - col < kChunk ? cols - col : kChunk) : 0;
        A dw[kChunk] = {}, db[kChunk] = {};
        // kColumnBatch rows at a time, all their loads issued first (one at
        // a time, ncu found this kernel waiting on memory at 62% of its
        // bandwidth); added up in row order all the same
        const int64_t stride = int64_t(gridDim.y) * blockDim.y;
        for (int64_t r0 = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; active && r0 < a.rows;
             r0 += kColumnBatch * stride) {
            A g[kColumnBatch][kChunk], m[kColumnBatch], s[kColumnBatch];
            acc_t<H> hv[kColumnBatch][kChunk];
#pragma unroll
            for (int b = 0; b < kColumnBatch; b++) {
                const int64_t r = r0 + b * stride;
                if (r < a.rows) {
                    load_chunk<T, VEC>(g[b], dy + r * a.dy_row_stride + col, n);
                    load_chunk<H, VEC>(hv[b], h + r * a.h_row_stride + col, n);
                    m[b] = rms ? A(0) : mean[r];
                    s[b] = rstd[r];
                } else {  // adds nothing
#pragma unroll
                    for (int i = 0; i < kChunk; i++) g[b][i] = hv[b][i] = 0;
                    m[b] = s[b] = 0;
                }
            }
#pragma unroll
            for (int b = 0; b < kColumnBatch; b++)
#pragma unroll
                for (int i = 0; i < kChunk; i++) {
                    dw[i] += g[b][i] * normalized(A(hv[b][i]), m[b], s[b]);
                    db[i] += g[b][i];
                }
        }
        // the TY threads of each column, summed in ty order
        const int slot = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            column_sums[0][slot * kChunk + i] = dw[i];
            column_sums[1][slot * kChunk + i] = db[i];
        }
        __syncthreads();
        if (threadIdx.y == 0 && active) {
            for (unsigned t = 1; t < blockDim.y; t++)
#pragma unroll
                for (int i = 0; i < kChunk; i++) {
                    const int other = (t * blockDim.x + threadIdx.x) * kChunk + i;
                    dw[i] += column_sums[0][other];
                    db[i] += column_sums[1][other];
                }
            // only the partials asked for (the workspace of a call without
            // dbias ends with the weight's); VEC: 16-byte stores
            if (a.dweight) store_chunk<A, VEC>(weight_partials + blockIdx.y * cols + col, dw, n);
            if (a.dbias) store_chunk<A, VEC>(bias_partials + blockIdx.y * cols + col, db, n);
        }
        __syncthreads();
    }
}

}  // namespace
}  // namespace fo
