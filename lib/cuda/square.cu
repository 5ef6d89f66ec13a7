// square.cu: y = x * x and dx = 2 * x * dy on CUDA, one kernel for both.
#include "common.cuh"

namespace fo {
namespace {

template <typename T, Access ACCESS, bool BACKWARD, bool DENSE>
__global__ void square_kernel(T *__restrict__ out, const T *__restrict__ x, int64_t x_row_stride,
                              const T *__restrict__ dy, int64_t dy_row_stride, int64_t rows,
                              int64_t cols) {
    using A = acc_t<T>;
    for_each_chunk<DENSE>(rows, chunks_per_row(cols), [&](int64_t c, int64_t r) {
        A v[kChunk];
        load_row_chunk<T, ACCESS>(v, x + r * x_row_stride, c, cols);
        if constexpr (BACKWARD) {
            A g[kChunk];
            load_row_chunk<T, ACCESS>(g, dy + r * dy_row_stride, c, cols);
#pragma unroll
            for (int i = 0; i < kChunk; i++) v[i] = A(2) * v[i] * g[i];
        } else {
#pragma unroll
            for (int i = 0; i < kChunk; i++) v[i] = v[i] * v[i];
        }
        store_row_chunk<T, ACCESS>(out + r * cols, v, c, cols);
    });
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int fo_cuda_square(int device_index, uintptr_t stream, const fo_square_params *a) {
    const bool backward = a->dy != nullptr;
    const char *op = backward ? "fo_square_backward" : "fo_square_forward";
    return launch_on(op, device_index, [&] {
        int64_t rows = a->rows, cols = a->cols;
        int64_t x_row_stride = a->x_row_stride, dy_row_stride = a->dy_row_stride;
        // dense operands are one long row: the whole grid spreads over it
        if (rows > 1 && x_row_stride == cols && (!backward || dy_row_stride == cols)) {
            cols *= rows;
            x_row_stride = dy_row_stride = cols;
            rows = 1;
        }
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            const bool vec =
                cols % kChunk == 0 && aligned16(a->out) && aligned16(a->x) &&
                stride_aligned16<T>(x_row_stride, rows) &&
                (!backward || (aligned16(a->dy) && stride_aligned16<T>(dy_row_stride, rows)));
            const bool dense = dense_walk(rows, cols);
            const RowGeometry g = dense ? dense_geometry(cols) : row_geometry(rows, cols);
            dispatch_access<T>(vec, chunks_per_row(cols), [&](auto access) {
                constexpr Access kAccess = decltype(access)::value;
                auto kernel = backward ? (dense ? square_kernel<T, kAccess, true, true>
                                                : square_kernel<T, kAccess, true, false>)
                                       : (dense ? square_kernel<T, kAccess, false, true>
                                                : square_kernel<T, kAccess, false, false>);
                kernel<<<g.grid, g.block, 0, cudaStream_t(stream)>>>(
                    static_cast<T *>(a->out), static_cast<const T *>(a->x), x_row_stride,
                    static_cast<const T *>(a->dy), dy_row_stride, rows, cols);
            });
        });
    });
}
