// bias_scale_relu.cu: relu(x * scale + bias) forward and backward on CUDA.
//
// Each thread owns one 8-element chunk of columns and walks down the rows, so
// its bias chunk is loaded once (forward) and its bias-gradient partial stays
// in registers (backward). Mask byte b of a row holds columns 8b..8b+7:
// one chunk's byte, or, spread (see Access), bits of 2 (fp64: 4) lanes.
#include "common.cuh"

namespace fo {
namespace {

// Mask byte b of a row holds columns 8b..8b+7 (bit i: column 8b + i), in
// every layout: a spread chunk's vectors (see Access) are parts of 2 (fp64:
// 4) bytes, so the lanes that share a byte gather their bits with shuffles
// (kSpread leaves no lane of a warp idle) and the first of them writes it.
// mask_row: this row's bytes; bits: value i of chunk c in bit i.
template <typename T, Access ACCESS>
__device__ __forceinline__ void store_mask(uint8_t *__restrict__ mask_row, int64_t c,
                                           unsigned bits) {
    if constexpr (ACCESS != kSpread) {
        mask_row[c] = uint8_t(bits);
    } else {
        constexpr int kVectors = kVectorsPerChunk<T>, kPerVector = kChunk / kVectors;
        const int lane = int(threadIdx.x % kSpreadGroup);  // = c % 32, as vector_offset's
        uint8_t *group = mask_row + (c - lane);  // the group's 32 bytes
#pragma unroll
        for (int v = 0; v < kVectors; v++) {
            const unsigned piece = (bits >> (v * kPerVector)) & ((1u << kPerVector) - 1);
            unsigned byte = piece;
#pragma unroll
            for (int j = 1; j < kVectors; j++)
                byte |= __shfl_down_sync(0xffffffffu, piece, j) << (j * kPerVector);
            // vector v of this lane is vector lane + 32 v of the group
            if (lane % kVectors == 0) group[(lane + v * kSpreadGroup) / kVectors] = uint8_t(byte);
        }
    }
}

// The bits of chunk c as store_mask placed them (bit i: value i).
template <typename T, Access ACCESS>
__device__ __forceinline__ unsigned load_mask(const uint8_t *__restrict__ mask_row, int64_t c) {
    if constexpr (ACCESS != kSpread) {
        return mask_row[c];
    } else {
        constexpr int kVectors = kVectorsPerChunk<T>, kPerVector = kChunk / kVectors;
        const int lane = int(threadIdx.x % kSpreadGroup);  // = c % 32, as vector_offset's
        const uint8_t *group = mask_row + (c - lane);
        unsigned bits = 0;
#pragma unroll
        for (int v = 0; v < kVectors; v++) {
            const int vector = lane + v * kSpreadGroup;
            const unsigned piece = group[vector / kVectors] >> (vector % kVectors * kPerVector);
            bits |= (piece & ((1u << kPerVector) - 1)) << (v * kPerVector);
        }
        return bits;
    }
}

template <typename T, typename B, Access ACCESS, bool DENSE>
__global__ void bias_scale_relu_forward_kernel(T *__restrict__ y, uint8_t *__restrict__ mask,
                                               const T *__restrict__ x, int64_t x_row_stride,
                                               const B *__restrict__ bias, int64_t rows,
                                               int64_t cols, double scale) {
    using A = acc_t<T>;
    const int64_t chunks = chunks_per_row(cols);
    // the chunk of a row, with b the chunk's bias
    auto chunk = [&](int64_t c, int64_t r, const A(&b)[kChunk]) {
        A v[kChunk];
        load_row_chunk<T, ACCESS>(v, x + r * x_row_stride, c, cols);
        unsigned bits = 0;
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            A t = v[i] * A(scale) + b[i];
            // NaN passes through, as in torch; the mask bit says where
            // y as stored is not <= 0 (a tiny value may round to 0; NaN
            // passes the gradient, as torch's threshold_backward does)
            v[i] = A(to_acc(from_acc<T>(t < A(0) ? A(0) : t)));
            bits |= unsigned(!(v[i] <= A(0))) << i;
        }
        store_row_chunk<T, ACCESS>(y + r * cols, v, c, cols);
        if (mask) store_mask<T, ACCESS>(mask + r * chunks, c, bits);
    };
    if constexpr (DENSE) {  // without a bias (see for_each_chunk)
        const A zeros[kChunk] = {};
        for_each_chunk<true>(rows, chunks, [&](int64_t c, int64_t r) { chunk(c, r, zeros); });
    } else {
        for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks;
             c += int64_t(gridDim.x) * blockDim.x) {
            // bias is read once per column chunk, element-wise: it is small and
            // stays in L2, and B may differ from T (fp32 bias, bf16 x)
            A b[kChunk];
            if constexpr (ACCESS == kScalar) {
                const int64_t col = c * kChunk;
                const int n = int(cols - col < kChunk ? cols - col : kChunk);
#pragma unroll
                for (int i = 0; i < kChunk; i++)
                    b[i] = bias && i < n ? A(to_acc(bias[col + i])) : A(0);
            } else {
#pragma unroll
                for (int i = 0; i < kChunk; i++)
                    b[i] = bias ? A(to_acc(bias[element_offset<T, ACCESS>(c, i)])) : A(0);
            }
            for (int64_t r = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; r < rows;
                 r += int64_t(gridDim.y) * blockDim.y)
                chunk(c, r, b);
        }
    }
}

// dx = dy * scale * m; the per-column sums of dy * m go to
// partials[blockIdx.y][col] in a fixed order (threads of a block in ty order).
template <typename T, Access ACCESS>
__global__ void bias_scale_relu_backward_kernel(T *__restrict__ dx, acc_t<T> *__restrict__ partials,
                                                const T *__restrict__ dy, int64_t dy_row_stride,
                                                const uint8_t *__restrict__ mask, int64_t rows,
                                                int64_t cols, double scale) {
    using A = acc_t<T>;
    __shared__ A column_sums[kThreads * kChunk];
    const int64_t chunks = chunks_per_row(cols);
    // the chunk loop is uniform across the block (it holds __syncthreads)
    for (int64_t base = blockIdx.x * int64_t(blockDim.x); base < chunks;
         base += int64_t(gridDim.x) * blockDim.x) {
        const int64_t c = base + threadIdx.x;
        const bool active = c < chunks;
        A sum[kChunk] = {};
        for (int64_t r = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; active && r < rows;
             r += int64_t(gridDim.y) * blockDim.y) {
            A g[kChunk];
            load_row_chunk<T, ACCESS>(g, dy + r * dy_row_stride, c, cols);
            const unsigned bits = load_mask<T, ACCESS>(mask + r * chunks, c);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                g[i] = (bits >> i) & 1u ? g[i] : A(0);
                sum[i] += g[i];
                g[i] *= A(scale);
            }
            if (dx) store_row_chunk<T, ACCESS>(dx + r * cols, g, c, cols);
        }
        if (!partials) continue;
        // sum the TY threads of each column in ty order
        const int slot = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
        for (int i = 0; i < kChunk; i++) column_sums[slot * kChunk + i] = sum[i];
        __syncthreads();
        if (threadIdx.y == 0 && active) {
            for (unsigned t = 1; t < blockDim.y; t++)
#pragma unroll
                for (int i = 0; i < kChunk; i++)
                    sum[i] += column_sums[(t * blockDim.x + threadIdx.x) * kChunk + i];
            A *out = partials + blockIdx.y * cols;
            if constexpr (ACCESS == kScalar) {
                // unrolled with a guard: a loop bound of n would index sum[]
                // dynamically and move it to local memory
#pragma unroll
                for (int i = 0; i < kChunk; i++)
                    if (c * kChunk + i < cols) out[c * kChunk + i] = sum[i];
            } else {
                // 16-byte stores, where the chunk's values lie in T's row
                // (kSpread's vectors included; cols % 8 == 0 keeps rows
                // 32-byte aligned). 4-byte stores, a warp's 32 sectors
                // apart, cost the norm backward 10-36% at 4096 rows.
                store_row_chunk<A, ACCESS == kSpread ? kSpread : kVector>(out, sum, c, cols);
            }
        }
        __syncthreads();
    }
}

// A dense operand with cols a multiple of 8 can be seen as one long row: the
// mask layout is unchanged and the whole grid spreads over it.
inline bool flattenable(int64_t rows, int64_t cols, int64_t row_stride) {
    return rows > 1 && row_stride == cols && cols % kChunk == 0;
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int64_t fo_cuda_bias_scale_relu_backward_workspace_bytes(
    int device_index, const fo_bias_scale_relu_backward_args *a) {
    (void)device_index;  // the grid depends on the shape alone
    int64_t acc_bytes = a->dtype == FO_DTYPE_F64 ? 8 : 4;
    return int64_t(row_geometry(a->rows, a->cols).grid.y) * a->cols * acc_bytes;
}

extern "C" int fo_cuda_bias_scale_relu_forward(int device_index, uintptr_t stream,
                                               const fo_bias_scale_relu_forward_params *a) {
    return launch_on("fo_bias_scale_relu_forward", device_index, [&] {
        int64_t rows = a->rows, cols = a->cols, x_row_stride = a->x_row_stride;
        if (!a->bias && flattenable(rows, cols, x_row_stride)) {
            cols *= rows;
            x_row_stride = cols;
            rows = 1;
        }
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            const bool vec = cols % kChunk == 0 && aligned16(a->x) && aligned16(a->y) &&
                             stride_aligned16<T>(x_row_stride, rows);
            const bool dense = !a->bias && dense_walk(rows, cols);
            const RowGeometry g = dense ? dense_geometry(cols) : forward_geometry(rows, cols);
            dispatch_companion<T>(a->bias_dtype, [&](auto bias_tag) {
                using B = decltype(bias_tag);
                dispatch_access<T>(vec, chunks_per_row(cols), [&](auto access) {
                    auto kernel = dense ? bias_scale_relu_forward_kernel<T, B, access.value, true>
                                        : bias_scale_relu_forward_kernel<T, B, access.value, false>;
                    kernel<<<g.grid, g.block, 0, cudaStream_t(stream)>>>(
                        static_cast<T *>(a->y), a->mask, static_cast<const T *>(a->x), x_row_stride,
                        static_cast<const B *>(a->bias), rows, cols, a->scale);
                });
            });
        });
    });
}

extern "C" int fo_cuda_bias_scale_relu_backward(int device_index, uintptr_t stream,
                                                const fo_bias_scale_relu_backward_params *a) {
    return launch_on("fo_bias_scale_relu_backward", device_index, [&] {
        int64_t rows = a->rows, cols = a->cols, dy_row_stride = a->dy_row_stride;
        if (!a->dbias && flattenable(rows, cols, dy_row_stride)) {
            cols *= rows;
            dy_row_stride = cols;
            rows = 1;
        }
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            using A = acc_t<T>;
            const bool vec = cols % kChunk == 0 && aligned16(a->dy) &&
                             (!a->dx || aligned16(a->dx)) &&
                             stride_aligned16<T>(dy_row_stride, rows);
            RowGeometry g = row_geometry(rows, cols);
            A *partials = a->dbias ? static_cast<A *>(a->workspace) : nullptr;
            dispatch_access<T>(vec, chunks_per_row(cols), [&](auto access) {
                bias_scale_relu_backward_kernel<T, access.value>
                    <<<g.grid, g.block, 0, cudaStream_t(stream)>>>(
                        static_cast<T *>(a->dx), partials, static_cast<const T *>(a->dy),
                        dy_row_stride, a->mask, rows, cols, a->scale);
            });
            if (!a->dbias) return;
            dispatch_companion<T>(a->bias_dtype, [&](auto bias_tag) {
                using B = decltype(bias_tag);
                finish_column_partials(static_cast<B *>(a->dbias), static_cast<B *>(nullptr),
                                       partials, g.grid.y, cols, cudaStream_t(stream));
            });
        });
    });
}
