// swiglu.cu: y = silu(gate) * up and its gradients on CUDA, one kernel for
// both passes, in 8-element chunks (16-byte accesses when aligned); y in
// FP8 through quantize_fp8.cuh's kernels, computed where it is cast.
#include "quantize_fp8.cuh"

namespace fo {
namespace {

template <typename A>
__device__ __forceinline__ A sigmoid(A v) {
    return A(1) / (A(1) + exp(-v));
}

template <typename T, Access ACCESS, bool BACKWARD, bool DENSE>
__global__ void swiglu_kernel(fo_swiglu_params a) {
    using A = acc_t<T>;
    const T *gate = static_cast<const T *>(a.gate);
    const T *up = static_cast<const T *>(a.up);
    const T *dy = static_cast<const T *>(a.dy);
    T *y_or_dgate = static_cast<T *>(a.y_or_dgate), *dup = static_cast<T *>(a.dup);
    const int64_t cols = a.cols;
    for_each_chunk<DENSE>(a.rows, chunks_per_row(cols), [&](int64_t c, int64_t r) {
        A g[kChunk], u[kChunk], first[kChunk];
        load_row_chunk<T, ACCESS>(g, gate + r * a.gate_row_stride, c, cols);
        load_row_chunk<T, ACCESS>(u, up + r * a.up_row_stride, c, cols);
        if constexpr (!BACKWARD) {
#pragma unroll
            for (int i = 0; i < kChunk; i++) first[i] = g[i] * sigmoid(g[i]) * u[i];
            store_row_chunk<T, ACCESS>(y_or_dgate + r * cols, first, c, cols);
        } else {
            A d[kChunk], second[kChunk];
            load_row_chunk<T, ACCESS>(d, dy + r * a.dy_row_stride, c, cols);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                const A s = sigmoid(g[i]);
                first[i] = d[i] * u[i] * s * (A(1) + g[i] * (A(1) - s));
                second[i] = d[i] * g[i] * s;
            }
            if (y_or_dgate) store_row_chunk<T, ACCESS>(y_or_dgate + r * cols, first, c, cols);
            if (dup) store_row_chunk<T, ACCESS>(dup + r * cols, second, c, cols);
        }
    });
}

// silu for GateSource: g * sigmoid(g), as swiglu_kernel computes it; |silu(g)| < 0.2785 for g < 0.
struct Silu {
    static constexpr double kNegativeBound = 0.2785;
    template <typename A>
    __device__ __forceinline__ A value(A g) const {
        return g * sigmoid(g);
    }
};

void launch_swiglu_fp8(const fo_swiglu_params &a, cudaStream_t stream) {
    dispatch_dtype(a.dtype, [&](auto tag) {
        using T = decltype(tag);
        const T *gate = static_cast<const T *>(a.gate), *up = static_cast<const T *>(a.up);
        const bool vec = a.cols % kChunk == 0 && aligned16(gate) && aligned16(up) &&
                         stride_aligned16<T>(a.gate_row_stride, a.rows) &&
                         stride_aligned16<T>(a.up_row_stride, a.rows) && a.fp8->y % 8 == 0;
        const bool flat = a.rows <= 1 || (a.gate_row_stride == a.cols && a.up_row_stride == a.cols);
        if (vec)
            launch_fp8_out(*a.fp8,
                           GateSource<T, true, Silu>{gate, up, a.gate_row_stride, a.up_row_stride,
                                                     a.cols, Silu{}},
                           flat, a.rows, a.cols, stream);
        else
            launch_fp8_out(*a.fp8,
                           GateSource<T, false, Silu>{gate, up, a.gate_row_stride, a.up_row_stride,
                                                      a.cols, Silu{}},
                           flat, a.rows, a.cols, stream);
    });
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int fo_cuda_swiglu(int device_index, uintptr_t stream, const fo_swiglu_params *in) {
    const bool backward = in->dy != nullptr;
    if (in->fp8)
        return launch_on("fo_swiglu_forward", device_index,
                         [&] { launch_swiglu_fp8(*in, cudaStream_t(stream)); });
    return launch_on(backward ? "fo_swiglu_backward" : "fo_swiglu_forward", device_index, [&] {
        fo_swiglu_params a = *in;
        // dense operands are one long row: the whole grid spreads over it
        if (a.rows > 1 && a.gate_row_stride == a.cols && a.up_row_stride == a.cols &&
            (!backward || a.dy_row_stride == a.cols)) {
            a.cols *= a.rows;
            a.gate_row_stride = a.up_row_stride = a.dy_row_stride = a.cols;
            a.rows = 1;
        }
        dispatch_dtype(a.dtype, [&](auto tag) {
            using T = decltype(tag);
            const bool vec = a.cols % kChunk == 0 && aligned16(a.y_or_dgate) && aligned16(a.dup) &&
                             aligned16(a.dy) && aligned16(a.gate) && aligned16(a.up) &&
                             stride_aligned16<T>(a.gate_row_stride, a.rows) &&
                             stride_aligned16<T>(a.up_row_stride, a.rows) &&
                             stride_aligned16<T>(a.dy_row_stride, a.rows);
            const bool dense = dense_walk(a.rows, a.cols);
            const RowGeometry g = dense ? dense_geometry(a.cols) : row_geometry(a.rows, a.cols);
            dispatch_access<T>(vec, chunks_per_row(a.cols), [&](auto access) {
                constexpr Access kAccess = decltype(access)::value;
                auto kernel = backward ? (dense ? swiglu_kernel<T, kAccess, true, true>
                                                : swiglu_kernel<T, kAccess, true, false>)
                                       : (dense ? swiglu_kernel<T, kAccess, false, true>
                                                : swiglu_kernel<T, kAccess, false, false>);
                kernel<<<g.grid, g.block, 0, cudaStream_t(stream)>>>(a);
            });
        });
    });
}
