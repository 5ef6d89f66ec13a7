// geglu.cu: y = gelu(gate) * up on CUDA (geglu.cuh's kernel), and y in FP8
// through quantize_fp8.cuh's kernels, computed where it is cast.
#include "geglu.cuh"

namespace fo {
namespace {

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

void launch_geglu_fp8(const fo_geglu_params &a, cudaStream_t stream) {
    dispatch_dtype(a.dtype, [&](auto tag) {
        using T = decltype(tag);
        const T *gate = static_cast<const T *>(a.gate), *up = static_cast<const T *>(a.up);
        const bool vec = a.cols % kChunk == 0 && aligned16(gate) && aligned16(up) &&
                         stride_aligned16<T>(a.gate_row_stride, a.rows) &&
                         stride_aligned16<T>(a.up_row_stride, a.rows) && a.fp8->y % 8 == 0;
        const bool flat = a.rows <= 1 || (a.gate_row_stride == a.cols && a.up_row_stride == a.cols);
        auto with = [&](auto is_vec, auto is_tanh) {
            using Act = Gelu<decltype(is_tanh)::value>;
            const GateSource<T, decltype(is_vec)::value, Act> src{
                gate, up, a.gate_row_stride, a.up_row_stride, a.cols, Act{}};
            launch_fp8_out(*a.fp8, src, flat, a.rows, a.cols, stream);
        };
        using yes = std::true_type;
        using no = std::false_type;
        const bool tanh_form = a.approximate == FO_GELU_TANH;
        if (vec)
            tanh_form ? with(yes{}, yes{}) : with(yes{}, no{});
        else
            tanh_form ? with(no{}, yes{}) : with(no{}, no{});
    });
}

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int fo_cuda_geglu_forward(int device_index, uintptr_t stream, const fo_geglu_params *a) {
    return launch_on("fo_geglu_forward", device_index, [&] {
        if (a->fp8)
            launch_geglu_fp8(*a, cudaStream_t(stream));
        else
            launch_geglu<false>(*a, cudaStream_t(stream));
    });
}
