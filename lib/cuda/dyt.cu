// dyt.cu: DyT, y = weight * tanh(alpha * x) + bias, and its gradients on CUDA.
//
// Each thread owns one 8-element chunk of columns and walks down the rows,
// so its weight and bias chunks are loaded once, and in backward its weight
// and bias gradient partials stay in registers, as in bias_scale_relu.cu.
// Backward writes the column partials of dweight and dbias, and a dalpha
// partial a block, to the workspace; one finishing kernel sums each in a
// fixed order.
#include <algorithm>

#include "common.cuh"

namespace fo {
namespace {

__device__ __forceinline__ float tanh_of(float v) { return tanhf(v); }
__device__ __forceinline__ double tanh_of(double v) { return tanh(v); }

// The forward's tanh: for fp16 and bf16 outputs the hardware's (MUFU.TANH,
// relative error under 2^-10.9, below their rounding), as tanhf's
// instructions made the bf16 forward compute-bound at 60-69% of the copy
// ceiling; fp32 and fp64 keep tanhf's and tanh's accuracy.
template <typename T>
__device__ __forceinline__ acc_t<T> forward_tanh(acc_t<T> v) {
    if constexpr (sizeof(T) == 2) {
        float t;
        asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(v));
        return t;
    } else {
        return tanh_of(v);
    }
}

// The backward's slope 1 - t^2 is computed as kSlopeScale<T> times the
// value backward_tanh returns; the kernel multiplies the factor back in
// outside the row loop (a power of two: exact).
template <typename T>
constexpr acc_t<T> kSlopeScale = sizeof(T) == 2 ? 4 : 1;

// The backward's t = tanh(|alpha| v) and slope / kSlopeScale, from
// magnitude = |alpha| and exp2_factor = -2 |alpha| log2(e). The kernel
// restores alpha's sign in t once per column sum, so no product alpha * v is
// formed per element. For fp16 and bf16 x: both from e = exp(-2|alpha v|)
// (MUFU.EX2 and MUFU.RCP), t = (1 - e) / (1 + e) and slope = 4e / (1 + e)^2,
// errors of a few float ulps (slope's relative, with no cancellation near
// saturation), where tanhf's instructions make the backward compute-bound;
// fp32 and fp64 keep tanhf's and tanh's accuracy.
template <typename T>
__device__ __forceinline__ void backward_tanh(acc_t<T> v, acc_t<T> magnitude, acc_t<T> exp2_factor,
                                              acc_t<T> &t, acc_t<T> &slope) {
    if constexpr (sizeof(T) == 2) {
        float e, r;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(exp2_factor * fabsf(v)));
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
        t = copysignf((1.0f - e) * r, v);
        slope = e * r * r;
    } else {
        t = tanh_of(magnitude * v);
        slope = acc_t<T>(1) - t * t;
    }
}

// A parameter chunk (weight or bias; 0: zeros) of chunk c: 16-byte loads
// where x's are (the launcher checked the parameters' alignment). P may
// differ from T (fp32 beside bf16 x: then a chunk is two vectors side by
// side, kVector, the only layout a half T takes).
template <typename T, typename P, Access ACCESS>
__device__ __forceinline__ void load_param_chunk(acc_t<T> (&out)[kChunk], const P *__restrict__ p,
                                                 int64_t c, int64_t cols) {
    if (!p) {
#pragma unroll
        for (int i = 0; i < kChunk; i++) out[i] = acc_t<T>(0);
    } else if constexpr (ACCESS == kScalar) {
        const int64_t col = c * kChunk;
#pragma unroll
        for (int i = 0; i < kChunk; i++)
            out[i] = col + i < cols ? acc_t<T>(to_acc(p[col + i])) : acc_t<T>(0);
    } else {
        acc_t<P> raw[kChunk];
        load_row_chunk<P, ACCESS>(raw, p, c, cols);
#pragma unroll
        for (int i = 0; i < kChunk; i++) out[i] = acc_t<T>(raw[i]);
    }
}

// ONE: forward_geometry's grid covers every (chunk, row) once, so a thread
// takes one chunk of one row, its indices in 32 bits, with no loops: 30
// registers instead of 40, so a full SM of 2048 threads keeps a third more
// loads in flight (bench/results/h200/dyt.md). Otherwise the loops below
// cover the rest.
template <typename T, typename P, Access ACCESS, bool ONE>
__global__ void dyt_forward_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t x_row_stride,
                                   const P *__restrict__ alpha, const P *__restrict__ weight,
                                   const P *__restrict__ bias, int64_t rows, int64_t cols) {
    using A = acc_t<T>;
    const A scale = A(to_acc(*alpha));
    const int64_t chunks = chunks_per_row(cols);
    if constexpr (ONE) {
        const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
        const unsigned r = blockIdx.y * blockDim.y + threadIdx.y;
        if (c >= unsigned(chunks) || r >= unsigned(rows)) return;
        A w[kChunk], b[kChunk], v[kChunk];
        load_row_chunk<T, ACCESS>(v, x + int64_t(r) * x_row_stride, c, cols);
        load_param_chunk<T, P, ACCESS>(w, weight, c, cols);
        load_param_chunk<T, P, ACCESS>(b, bias, c, cols);
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = w[i] * forward_tanh<T>(scale * v[i]) + b[i];
        store_row_chunk<T, ACCESS>(y + int64_t(r) * cols, v, c, cols);
        return;
    }
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks;
         c += int64_t(gridDim.x) * blockDim.x) {
        A w[kChunk], b[kChunk];
        load_param_chunk<T, P, ACCESS>(w, weight, c, cols);
        load_param_chunk<T, P, ACCESS>(b, bias, c, cols);
        for (int64_t r = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; r < rows;
             r += int64_t(gridDim.y) * blockDim.y) {
            A v[kChunk];
            load_row_chunk<T, ACCESS>(v, x + r * x_row_stride, c, cols);
#pragma unroll
            for (int i = 0; i < kChunk; i++) v[i] = w[i] * forward_tanh<T>(scale * v[i]) + b[i];
            store_row_chunk<T, ACCESS>(y + r * cols, v, c, cols);
        }
    }
}

// dx = dy * weight * alpha * (1 - t^2); the per-column sums of dy * t
// (dweight) and dy (dbias) go to partials[0 or 1][blockIdx.y][col], summed
// over the block's threads in ty order, and the block's sum of
// dy * weight * x * (1 - t^2) (dalpha) to alpha_partials[block]. Without
// partials (no parameter gradient wanted) it writes dx alone.
template <typename T, typename P, Access ACCESS>
__global__ void dyt_backward_kernel(T *__restrict__ dx, acc_t<T> *__restrict__ partials,
                                    acc_t<T> *__restrict__ alpha_partials, const T *__restrict__ dy,
                                    int64_t dy_row_stride, const T *__restrict__ x,
                                    int64_t x_row_stride, const P *__restrict__ alpha,
                                    const P *__restrict__ weight, int64_t rows, int64_t cols) {
    using A = acc_t<T>;
    __shared__ A column_sums[kThreads * kChunk];
    const A scale = A(to_acc(*alpha));
    const A magnitude = scale < A(0) ? -scale : scale;
    const A exp2_factor = A(-2.8853900817779268) * magnitude;  // -2 log2(e) |alpha|
    const A dx_factor = scale * kSlopeScale<T>;
    const int64_t chunks = chunks_per_row(cols);
    const int thread = int(threadIdx.y * blockDim.x + threadIdx.x);
    A alpha_sum = 0;
    // the chunk loop is uniform across the block (it holds __syncthreads)
    for (int64_t base = blockIdx.x * int64_t(blockDim.x); base < chunks;
         base += int64_t(gridDim.x) * blockDim.x) {
        const int64_t c = base + threadIdx.x;
        const bool active = c < chunks;
        A w[kChunk], weight_sum[kChunk] = {}, bias_sum[kChunk] = {};
        if (active) load_param_chunk<T, P, ACCESS>(w, weight, c, cols);
        for (int64_t r = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; active && r < rows;
             r += int64_t(gridDim.y) * blockDim.y) {
            A g[kChunk], v[kChunk];
            load_row_chunk<T, ACCESS>(g, dy + r * dy_row_stride, c, cols);
            load_row_chunk<T, ACCESS>(v, x + r * x_row_stride, c, cols);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                A t, slope;
                backward_tanh<T>(v[i], magnitude, exp2_factor, t, slope);
                const A gws = g[i] * w[i] * slope;
                weight_sum[i] += g[i] * t;
                bias_sum[i] += g[i];
                alpha_sum += gws * v[i];
                g[i] = gws * dx_factor;
            }
            if (dx) store_row_chunk<T, ACCESS>(dx + r * cols, g, c, cols);
        }
        if (!partials) continue;
        const A t_sign = scale < A(0) ? A(-1) : A(1);  // t above is tanh(|alpha| v)
#pragma unroll
        for (int i = 0; i < kChunk; i++) weight_sum[i] *= t_sign;
            // each sum over the TY threads of a column, in ty order
#pragma unroll
        for (int which = 0; which < 2; which++) {
            A(&sum)[kChunk] = which == 0 ? weight_sum : bias_sum;
#pragma unroll
            for (int i = 0; i < kChunk; i++) column_sums[thread * kChunk + i] = sum[i];
            __syncthreads();
            if (threadIdx.y == 0 && active) {
                for (unsigned t = 1; t < blockDim.y; t++)
#pragma unroll
                    for (int i = 0; i < kChunk; i++)
                        sum[i] += column_sums[(t * blockDim.x + threadIdx.x) * kChunk + i];
                A *out = partials + (which * int64_t(gridDim.y) + blockIdx.y) * cols;
                if constexpr (ACCESS == kScalar) {
#pragma unroll
                    for (int i = 0; i < kChunk; i++)
                        if (c * kChunk + i < cols) out[c * kChunk + i] = sum[i];
                } else {
                    store_row_chunk<A, ACCESS == kSpread ? kSpread : kVector>(out, sum, c, cols);
                }
            }
            __syncthreads();
        }
    }
    if (!alpha_partials) return;
    // the block's dalpha partial: warps (whole rows of the block: blockDim.x
    // is a multiple of 32) by shuffles, then the warps in order
    __shared__ A warp_sums[kThreads / 32];
    alpha_sum *= kSlopeScale<T>;
    for (int offset = 16; offset > 0; offset /= 2)
        alpha_sum += __shfl_down_sync(0xffffffffu, alpha_sum, offset);
    if (thread % 32 == 0) warp_sums[thread / 32] = alpha_sum;
    __syncthreads();
    if (thread == 0) {
        A sum = 0;
        for (int w = 0; w < kThreads / 32; w++) sum += warp_sums[w];
        alpha_partials[blockIdx.y * gridDim.x + blockIdx.x] = sum;
    }
}

// The backward's grid: row_geometry's, but rows of 256 chunks or more take
// blocks of 128 x 2 threads and at most kMaxRowBlocks / 2 row blocks, which
// halves the column partials (H200, bf16 16384x4096: 114.0 -> 112.2 us;
// 4096x4096: 39.0 -> 36.6 us).
inline RowGeometry backward_geometry(int64_t rows, int64_t cols) {
    RowGeometry g = row_geometry(rows, cols);
    if (g.block.y == 1) {
        g.block = dim3(kThreads / 2, 2);
        g.grid.x = unsigned((chunks_per_row(cols) + g.block.x - 1) / g.block.x);
        const int64_t blocks = (rows + 1) / 2;
        g.grid.y = unsigned(std::clamp<int64_t>(blocks, 1, kMaxRowBlocks / 2));
    }
    return g;
}

// The backward's workspace, in accumulation-type elements: the two column
// partials (backward_geometry's grid.y groups of cols), then a dalpha
// partial a block.
inline int64_t backward_partials(int64_t rows, int64_t cols) {
    const RowGeometry g = backward_geometry(rows, cols);
    return 2 * int64_t(g.grid.y) * cols + int64_t(g.grid.x) * g.grid.y;
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int64_t fo_cuda_dyt_backward_workspace_bytes(int device_index, const fo_dyt_args *a) {
    (void)device_index;  // the grid depends on the shape alone
    if (a->cols == 0) return 0;
    return backward_partials(a->rows, a->cols) * (a->dtype == FO_DTYPE_F64 ? 8 : 4);
}

extern "C" int fo_cuda_dyt_forward(int device_index, uintptr_t stream, const fo_dyt_args *a) {
    return launch_on("fo_dyt_forward", device_index, [&] {
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            const T *x = reinterpret_cast<const T *>(a->x);
            T *y = reinterpret_cast<T *>(a->y);
            const bool vec = a->cols % kChunk == 0 && aligned16(x) && aligned16(y) &&
                             aligned16(reinterpret_cast<const void *>(a->weight)) &&
                             aligned16(reinterpret_cast<const void *>(a->bias)) &&
                             stride_aligned16<T>(a->x_row_stride, a->rows);
            RowGeometry g = forward_geometry(a->rows, a->cols);
            // fp32: blocks of 128 threads (H200, 16384x4096: 134.3 -> 131.5 us;
            // 4096x4096: 38.5 -> 37.3 us)
            if (std::is_same_v<T, float> && g.block.y == 1) {
                g.block.x /= 2;
                g.grid.x = unsigned((chunks_per_row(a->cols) + g.block.x - 1) / g.block.x);
            }
            dispatch_companion<T>(a->param_dtype, [&](auto param_tag) {
                using P = decltype(param_tag);
                const int64_t chunks = chunks_per_row(a->cols);
                const bool one = int64_t(g.grid.x) * g.block.x >= chunks &&
                                 int64_t(g.grid.y) * g.block.y >= a->rows &&
                                 int64_t(g.grid.x) * g.block.x <= int64_t(UINT32_MAX);
                dispatch_access<T>(vec, chunks, [&](auto access) {
                    const auto kernel = one ? dyt_forward_kernel<T, P, access.value, true>
                                            : dyt_forward_kernel<T, P, access.value, false>;
                    kernel<<<g.grid, g.block, 0, cudaStream_t(stream)>>>(
                        y, x, a->x_row_stride, reinterpret_cast<const P *>(a->alpha),
                        reinterpret_cast<const P *>(a->weight),
                        reinterpret_cast<const P *>(a->bias), a->rows, a->cols);
                });
            });
        });
    });
}

extern "C" int fo_cuda_dyt_backward(int device_index, uintptr_t stream, const fo_dyt_args *a) {
    return launch_on("fo_dyt_backward", device_index, [&] {
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            using A = acc_t<T>;
            dispatch_companion<T>(a->param_dtype, [&](auto param_tag) {
                using P = decltype(param_tag);
                if (a->cols == 0) {  // no elements: dalpha is an empty sum
                    if (a->dalpha)
                        cudaMemsetAsync(reinterpret_cast<void *>(a->dalpha), 0, sizeof(P),
                                        cudaStream_t(stream));
                    return;
                }
                const T *x = reinterpret_cast<const T *>(a->x);
                const T *dy = reinterpret_cast<const T *>(a->dy);
                T *dx = reinterpret_cast<T *>(a->dx);
                const bool vec = a->cols % kChunk == 0 && aligned16(x) && aligned16(dy) &&
                                 (!dx || aligned16(dx)) &&
                                 aligned16(reinterpret_cast<const void *>(a->weight)) &&
                                 stride_aligned16<T>(a->x_row_stride, a->rows) &&
                                 stride_aligned16<T>(a->dy_row_stride, a->rows);
                const RowGeometry g = backward_geometry(a->rows, a->cols);
                const bool sums = a->dalpha || a->dweight || a->dbias;
                A *partials = sums ? reinterpret_cast<A *>(a->workspace) : nullptr;
                A *alpha_partials = sums ? partials + 2 * int64_t(g.grid.y) * a->cols : nullptr;
                dispatch_access<T>(vec, chunks_per_row(a->cols), [&](auto access) {
                    dyt_backward_kernel<T, P, access.value>
                        <<<g.grid, g.block, 0, cudaStream_t(stream)>>>(
                            dx, partials, alpha_partials, dy, a->dy_row_stride, x, a->x_row_stride,
                            reinterpret_cast<const P *>(a->alpha),
                            reinterpret_cast<const P *>(a->weight), a->rows, a->cols);
                });
                if (!sums) return;
                finish_column_partials(reinterpret_cast<P *>(a->dweight),
                                       reinterpret_cast<P *>(a->dbias), partials, g.grid.y, a->cols,
                                       cudaStream_t(stream), reinterpret_cast<P *>(a->dalpha),
                                       alpha_partials, int64_t(g.grid.x) * g.grid.y);
            });
        });
    });
}
