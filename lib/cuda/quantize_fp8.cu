// quantize_fp8.cu: FP8 quantization with a dynamic scale (fused_ops.h,
// fo_quantize_fp8) on CUDA: quantize_fp8.cuh's kernels over x's rows, and
// for 16-bit rows of 1025-4096 elements a warp a row holding them as loaded.
#include "quantize_fp8.cuh"

namespace fo {
namespace {

constexpr int kRawHeld = 16;  // 16-byte vectors a lane keeps, 16-bit rows of up to 4096 (warp_held)

// Rowwise, 16-bit rows of 32 * 4 to 32 * kRawHeld chunks (cols % 8 == 0,
// aligned): a warp a row, each lane keeping its 16-byte vectors as loaded
// (64 registers), so a row needs no block barrier and a lane has up to 256
// bytes in flight: with a block a row, its barrier and 32 bytes a thread
// held the 4096-column cast to 55% of the copy ceiling.
template <typename T, bool E4M3>
__global__ void __launch_bounds__(kThreads, 2)  // at most 128 registers: two blocks an SM
    rowwise_warp_held_kernel(uint8_t *__restrict__ y, float *__restrict__ scale,
                             float *__restrict__ amax_out, const T *__restrict__ x,
                             int64_t x_row_stride, int64_t rows, int64_t cols) {
    static_assert(sizeof(T) == 2, "a 16-byte vector holds one chunk");
    const int64_t r = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
    const int lane = int(threadIdx.x % 32);
    if (r >= rows) return;
    const uint4 *row = reinterpret_cast<const uint4 *>(x + r * x_row_stride);
    const int chunks = int(cols / kChunk);
    uint4 raw[kRawHeld];
#pragma unroll
    for (int j = 0; j < kRawHeld; j++)
        if (lane + j * 32 < chunks) raw[j] = row[lane + j * 32];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kRawHeld; j++) {
        if (lane + j * 32 >= chunks) continue;
        const T *e = reinterpret_cast<const T *>(&raw[j]);
        float v[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = as_float(e[i]);
        amax = finite_max(amax, v);
    }
    amax = warp_max(amax);
    // the cast converts the vectors again: keeping the amax pass's floats
    // instead takes 128 registers and spills
#pragma unroll
    for (int j = 0; j < kRawHeld; j++)
        asm volatile("" : "+r"(raw[j].x), "+r"(raw[j].y), "+r"(raw[j].z), "+r"(raw[j].w));
    const float q = fo_fp8_multiplier(amax, E4M3 ? FO_FP8_E4M3 : FO_FP8_E5M2, 1);
    uint8_t *out = y + r * cols;
#pragma unroll
    for (int j = 0; j < kRawHeld; j++) {
        const int c = lane + j * 32;
        if (c >= chunks) continue;
        const T *e = reinterpret_cast<const T *>(&raw[j]);
        float v[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = as_float(e[i]);
        store8<true>(out, int64_t(c) * kChunk, cols, encode8<E4M3>(v, q));
    }
    if (lane == 0) {
        scale[r] = 1.0f / q;
        if (amax_out) amax_out[r] = amax;
    }
}

template <typename T>
bool vector_rows(const fo_quantize_fp8_args *a) {
    return a->cols % kChunk == 0 && aligned16(reinterpret_cast<const void *>(a->x)) &&
           stride_aligned16<T>(a->x_row_stride, a->rows) && a->y % 8 == 0;
}

int amax_blocks(const fo_quantize_fp8_args *a) { return amax_blocks_for(a->rows, a->cols); }

}  // namespace
}  // namespace fo

using namespace fo;

extern "C" int64_t fo_cuda_quantize_fp8_workspace_bytes(int device_index,
                                                        const fo_quantize_fp8_args *a) {
    (void)device_index;  // the grid depends on the shape alone
    return int64_t(amax_blocks(a)) * int64_t(sizeof(float));
}

template <bool E4M3, typename T, bool VEC>
static void launch(const fo_quantize_fp8_args *a, cudaStream_t stream) {
    const T *x = reinterpret_cast<const T *>(a->x);
    uint8_t *y = reinterpret_cast<uint8_t *>(a->y);
    float *scale = reinterpret_cast<float *>(a->scale), *amax = reinterpret_cast<float *>(a->amax);
    const RowsSource<T, VEC> src{x, a->x_row_stride, a->cols};
    if (a->recipe == FO_FP8_ROWWISE) {
        const int64_t chunks = chunks_per_row(a->cols);
        if constexpr (VEC && sizeof(T) == 2) {
            if (a->rows > 0 && chunks > 32 * RowsSource<T, VEC>::kHeldChunks &&
                chunks <= 32 * kRawHeld) {
                const int64_t warp_blocks = (a->rows + kThreads / 32 - 1) / (kThreads / 32);
                rowwise_warp_held_kernel<T, E4M3><<<unsigned(warp_blocks), kThreads, 0, stream>>>(
                    y, scale, amax, x, a->x_row_stride, a->rows, a->cols);
                return;
            }
        }
        launch_rowwise<E4M3>(y, scale, amax, src, a->rows, a->cols, stream);
        return;
    }
    float *partials = reinterpret_cast<float *>(a->workspace);
    const int count = amax_blocks(a);
    // a dense x is one row of rows * cols elements (VEC held for every row, so for it)
    const bool flat = a->rows <= 1 || a->x_row_stride == a->cols;
    if (flat)
        amax_kernel<RowsSource<T, VEC>, true, false><<<count, kThreads, 0, stream>>>(
            partials, src.flattened(a->rows), 1, a->rows * a->cols);
    else
        amax_kernel<RowsSource<T, VEC>, false, false>
            <<<count, kThreads, 0, stream>>>(partials, src, a->rows, a->cols);
    launch_tensorwise_cast<E4M3>(y, reinterpret_cast<uint8_t *>(a->y_t), scale, amax, partials,
                                 count, src, flat, a->rows, a->cols, stream);
}

extern "C" int fo_cuda_quantize_fp8(int device_index, uintptr_t stream,
                                    const fo_quantize_fp8_args *a) {
    return launch_on("fo_quantize_fp8", device_index, [&] {
        dispatch_dtype(a->dtype, [&](auto tag) {
            using T = decltype(tag);
            const bool vec = vector_rows<T>(a);
            const cudaStream_t s = cudaStream_t(stream);
            if (a->fp8_dtype == FO_FP8_E4M3)
                vec ? launch<true, T, true>(a, s) : launch<true, T, false>(a, s);
            else
                vec ? launch<false, T, true>(a, s) : launch<false, T, false>(a, s);
        });
    });
}
