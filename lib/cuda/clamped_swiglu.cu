// clamped_swiglu.cu: gpt-oss's clamped SwiGLU and its gradients on CUDA, one
// kernel for both passes and both layouts, 8 outputs a thread (16-byte
// accesses when aligned): geglu.cu's walk, gate and up read from one row.
#include "common.cuh"

namespace fo {
namespace {

// The rows of gate_up: in 8-output chunk c, gate and up are 8 elements each,
// from chunks 2c and 2c + 1 of a pairs row (2 * cols elements), or from
// chunk c of each half.
template <typename T, Access ACCESS, bool INTERLEAVED>
__device__ __forceinline__ void load_gate_up(acc_t<T> (&g)[kChunk], acc_t<T> (&u)[kChunk],
                                             const T *row, int64_t c, int64_t cols) {
    if constexpr (INTERLEAVED) {
        acc_t<T> pairs[2][kChunk];
        load_row_chunk<T, ACCESS>(pairs[0], row, 2 * c, 2 * cols);
        if (ACCESS != kScalar || (2 * c + 1) * kChunk < 2 * cols)
            load_row_chunk<T, ACCESS>(pairs[1], row, 2 * c + 1, 2 * cols);
        else
#pragma unroll
            for (int i = 0; i < kChunk; i++) pairs[1][i] = 0;
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            g[i] = pairs[i / 4][2 * (i % 4)];
            u[i] = pairs[i / 4][2 * (i % 4) + 1];
        }
    } else {
        load_row_chunk<T, ACCESS>(g, row, c, cols);
        load_row_chunk<T, ACCESS>(u, row + cols, c, cols);
    }
}

template <typename T, Access ACCESS, bool INTERLEAVED>
__device__ __forceinline__ void store_gradients(T *row, const acc_t<T> (&dg)[kChunk],
                                                const acc_t<T> (&du)[kChunk], int64_t c,
                                                int64_t cols) {
    if constexpr (INTERLEAVED) {
        acc_t<T> pairs[2][kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            pairs[i / 4][2 * (i % 4)] = dg[i];
            pairs[i / 4][2 * (i % 4) + 1] = du[i];
        }
        store_row_chunk<T, ACCESS>(row, pairs[0], 2 * c, 2 * cols);
        if (ACCESS != kScalar || (2 * c + 1) * kChunk < 2 * cols)
            store_row_chunk<T, ACCESS>(row, pairs[1], 2 * c + 1, 2 * cols);
    } else {
        store_row_chunk<T, ACCESS>(row, dg, c, cols);
        store_row_chunk<T, ACCESS>(row + cols, du, c, cols);
    }
}

// lib/fused_ops.h's formulas; the comparisons keep a NaN gate or up NaN.
template <typename T, Access ACCESS, bool BACKWARD, bool DENSE, bool INTERLEAVED>
__global__ void clamped_swiglu_kernel(fo_clamped_swiglu_args a) {
    using A = acc_t<T>;
    const T *gate_up = reinterpret_cast<const T *>(a.gate_up);
    const T *dy = reinterpret_cast<const T *>(a.dy);
    const int64_t cols = a.cols;
    const A alpha = A(a.alpha), limit = A(a.limit);
    const bool closed = a.grad_at_limit != 0;
    for_each_chunk<DENSE>(a.rows, chunks_per_row(cols), [&](int64_t c, int64_t r) {
        A g[kChunk], u[kChunk], first[kChunk];
        load_gate_up<T, ACCESS, INTERLEAVED>(g, u, gate_up + r * a.gate_up_row_stride, c, cols);
        if constexpr (!BACKWARD) {
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                const A gc = g[i] > limit ? limit : g[i];
                const A uc = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
                first[i] = (uc + A(1)) * (gc / (A(1) + exp(-alpha * gc)));
            }
            store_row_chunk<T, ACCESS>(reinterpret_cast<T *>(a.y) + r * cols, first, c, cols);
        } else {
            A d[kChunk], second[kChunk];
            load_row_chunk<T, ACCESS>(d, dy + r * a.dy_row_stride, c, cols);
#pragma unroll
            for (int i = 0; i < kChunk; i++) {
                const A gc = g[i] > limit ? limit : g[i];
                const A uc = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
                const A s = A(1) / (A(1) + exp(-alpha * gc));
                const bool gate_passes = closed ? g[i] <= limit : g[i] < limit;
                const bool up_passes =
                    closed ? u[i] >= -limit && u[i] <= limit : u[i] > -limit && u[i] < limit;
                first[i] =
                    gate_passes ? d[i] * (uc + A(1)) * s * (A(1) + alpha * gc * (A(1) - s)) : A(0);
                second[i] = up_passes ? d[i] * (gc * s) : A(0);
            }
            store_gradients<T, ACCESS, INTERLEAVED>(
                reinterpret_cast<T *>(a.dgate_up) + r * 2 * cols, first, second, c, cols);
        }
    });
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int fo_cuda_clamped_swiglu(int device_index, uintptr_t stream,
                                      const fo_clamped_swiglu_args *in) {
    const bool backward = in->dy != 0;
    return launch_on(
        backward ? "fo_clamped_swiglu_backward" : "fo_clamped_swiglu_forward", device_index, [&] {
            fo_clamped_swiglu_args a = *in;
            const bool interleaved = a.layout == FO_GLU_INTERLEAVED;
            // dense pairs rows are one long row: the whole grid spreads over it
            if (interleaved && a.rows > 1 && a.gate_up_row_stride == 2 * a.cols &&
                (!backward || a.dy_row_stride == a.cols)) {
                a.cols *= a.rows;
                a.gate_up_row_stride = 2 * a.cols;
                a.dy_row_stride = a.cols;
                a.rows = 1;
            }
            dispatch_dtype(a.dtype, [&](auto tag) {
                using T = decltype(tag);
                const void *y = reinterpret_cast<const void *>(a.y);
                const void *dgate_up = reinterpret_cast<const void *>(a.dgate_up);
                const bool vec = a.cols % kChunk == 0 && aligned16(y) && aligned16(dgate_up) &&
                                 aligned16(reinterpret_cast<const void *>(a.dy)) &&
                                 aligned16(reinterpret_cast<const void *>(a.gate_up)) &&
                                 stride_aligned16<T>(a.gate_up_row_stride, a.rows) &&
                                 stride_aligned16<T>(a.dy_row_stride, a.rows);
                const bool dense = dense_walk(a.rows, a.cols);
                const RowGeometry g = dense ? dense_geometry(a.cols) : row_geometry(a.rows, a.cols);
                auto launch = [&](auto access, auto is_backward, auto is_dense,
                                  auto is_interleaved) {
                    clamped_swiglu_kernel<T, decltype(access)::value, decltype(is_backward)::value,
                                          decltype(is_dense)::value,
                                          decltype(is_interleaved)::value>
                        <<<g.grid, g.block, 0, cudaStream_t(stream)>>>(a);
                };
                using yes = std::true_type;
                using no = std::false_type;
                auto with_access = [&](auto... flags) {
                    if (vec)
                        launch(std::integral_constant<Access, kVector>{}, flags...);
                    else
                        launch(std::integral_constant<Access, kScalar>{}, flags...);
                };
                auto with_layout = [&](auto... flags) {
                    if (interleaved)
                        with_access(flags..., yes{});
                    else
                        with_access(flags..., no{});
                };
                auto with_walk = [&](auto is_backward) {
                    if (dense)
                        with_layout(is_backward, yes{});
                    else
                        with_layout(is_backward, no{});
                };
                if (backward)
                    with_walk(yes{});
                else
                    with_walk(no{});
            });
        });
}
