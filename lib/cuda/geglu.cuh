// geglu.cuh: y = gelu(gate) * up and its gradients on CUDA, one kernel for
// both passes and both GELUs, in 8-element chunks (16-byte accesses when
// aligned): swiglu.cu's walk with another activation; y in FP8 through
// quantize_fp8.cuh's kernels, computed where it is cast. A GELU form a
// translation unit (geglu.cu the exact one, geglu_tanh.cu the tanh form):
// together they were the library's longest compile, which ran alone on one
// core at the end of the build.
#pragma once

#include "quantize_fp8.cuh"

namespace fo {
namespace {

// gelu(g), and gelu'(g) where GRAD: lib/geglu.c's formulas (Phi(g) as
// erfc(-g / sqrt(2)) / 2, exact for negative g) in fp32 (fp64 for fp64).
template <bool TANH, bool GRAD, typename A>
__device__ __forceinline__ A gelu(A g, A &grad) {
    if constexpr (TANH) {
        const A k = A(0.79788456080286535588), cubic = A(0.044715);
        const A t = tanh(k * (g + cubic * g * g * g));
        if constexpr (GRAD)
            grad = A(0.5) * (A(1) + t) +
                   A(0.5) * g * (A(1) - t * t) * k * (A(1) + A(3) * cubic * g * g);
        return A(0.5) * g * (A(1) + t);
    } else {
        const A cdf = A(0.5) * erfc(-g * A(0.70710678118654752440));
        if constexpr (GRAD) grad = cdf + g * exp(A(-0.5) * g * g) * A(0.39894228040143267794);
        return g * cdf;
    }
}

template <typename T, Access ACCESS, bool BACKWARD, bool DENSE, bool TANH>
__global__ void geglu_kernel(fo_geglu_params a) {
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
            for (int i = 0; i < kChunk; i++) {
                A unused;
                first[i] = gelu<TANH, false>(g[i], unused) * u[i];
            }
            store_row_chunk<T, ACCESS>(y_or_dgate + r * cols, first, c, cols);
        } else {
            A d[kChunk], second[kChunk];
            load_row_chunk<T, ACCESS>(d, dy + r * a.dy_row_stride, c, cols);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                A grad;
                const A value = gelu<TANH, true>(g[i], grad);
                first[i] = d[i] * u[i] * grad;
                second[i] = d[i] * value;
            }
            if (y_or_dgate) store_row_chunk<T, ACCESS>(y_or_dgate + r * cols, first, c, cols);
            if (dup) store_row_chunk<T, ACCESS>(dup + r * cols, second, c, cols);
        }
    });
}

// One direction of geglu_kernel over the call's operands.
template <bool BACKWARD, bool TANH>
void launch_geglu(fo_geglu_params a, cudaStream_t stream) {
    // dense operands are one long row: the whole grid spreads over it
    if (a.rows > 1 && a.gate_row_stride == a.cols && a.up_row_stride == a.cols &&
        (!BACKWARD || a.dy_row_stride == a.cols)) {
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
            if (dense)
                geglu_kernel<T, kAccess, BACKWARD, true, TANH><<<g.grid, g.block, 0, stream>>>(a);
            else
                geglu_kernel<T, kAccess, BACKWARD, false, TANH><<<g.grid, g.block, 0, stream>>>(a);
        });
    });
}

// gelu for GateSource, as geglu_kernel computes it; |gelu(g)| < 0.1702 for g < 0 (its
// minimum: -0.16997 at g = -0.752, -0.17004 in the tanh form).
template <bool TANH>
struct Gelu {
    static constexpr double kNegativeBound = 0.1702;
    template <typename A>
    __device__ __forceinline__ A value(A g) const {
        A unused;
        return gelu<TANH, false>(g, unused);
    }
};

template <bool TANH>
void launch_geglu_fp8(const fo_geglu_params &a, cudaStream_t stream) {
    dispatch_dtype(a.dtype, [&](auto tag) {
        using T = decltype(tag);
        const T *gate = static_cast<const T *>(a.gate), *up = static_cast<const T *>(a.up);
        const bool vec = a.cols % kChunk == 0 && aligned16(gate) && aligned16(up) &&
                         stride_aligned16<T>(a.gate_row_stride, a.rows) &&
                         stride_aligned16<T>(a.up_row_stride, a.rows) && a.fp8->y % 8 == 0;
        const bool flat = a.rows <= 1 || (a.gate_row_stride == a.cols && a.up_row_stride == a.cols);
        auto with = [&](auto is_vec) {
            const GateSource<T, decltype(is_vec)::value, Gelu<TANH>> src{
                gate, up, a.gate_row_stride, a.up_row_stride, a.cols, Gelu<TANH>{}};
            launch_fp8_out(*a.fp8, src, flat, a.rows, a.cols, stream);
        };
        if (vec)
            with(std::true_type{});
        else
            with(std::false_type{});
    });
}

// The call in one GELU form: forward (y, or y in FP8) or backward.
template <bool TANH>
void launch_geglu_form(const fo_geglu_params &a, cudaStream_t stream) {
    if (a.fp8)
        launch_geglu_fp8<TANH>(a, stream);
    else if (a.dy)
        launch_geglu<true, TANH>(a, stream);
    else
        launch_geglu<false, TANH>(a, stream);
}

}  // namespace

void launch_geglu_tanh(const fo_geglu_params &a, cudaStream_t stream);  // geglu_tanh.cu

}  // namespace fo
