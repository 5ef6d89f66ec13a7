// quantize_fp8.cu: FP8 quantization with a dynamic scale (fused_ops.h,
// fo_quantize_fp8) on CUDA.
//
// Rowwise: a warp (rows of up to 1024 elements; 16-bit rows of up to 4096,
// held as loaded) or a block a row; its chunks stay in registers between the
// row's amax and its cast (up to kHeld chunks a thread; longer rows are read
// again, from L2). Tensorwise:
// one pass of per-block maxima, then the cast, each of whose blocks first
// takes the max of those maxima; the transposed copy is written from
// 64 x 64 tiles through shared memory, beside the row-major one. The
// scales come from fp8.h, as on the CPU, and the rounding is the
// hardware's (cvt with satfinite), so both write the same bytes.
#include <cuda_fp8.h>

#include <cfloat>

#include "../fp8.h"
#include "common.cuh"

namespace fo {
namespace {

constexpr int kHeld = 4;  // chunks a thread keeps between amax and cast
constexpr int kRawHeld = 16;  // 16-byte vectors a lane keeps, 16-bit rows of up to 4096 (warp_held)
constexpr int kAmaxBlocks = 512;  // the tensorwise maxima (and the cast's first read)
constexpr int kCastBlocks = 4096;  // the tensorwise cast's grid, at most
constexpr int kTile = 64;  // the transposed copy's tile: kTile x kTile elements

__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ float as_float(double v) { return float(v); }
__device__ __forceinline__ float as_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Elements [c0, c0 + 8) of a row as floats: VEC, 16-byte loads (the
// launcher saw cols % 8 == 0 and the rows aligned); else one at a time,
// zeros past cols.
template <typename T, bool VEC>
__device__ __forceinline__ void load8(float (&v)[kChunk], const T *__restrict__ row, int64_t c0,
                                      int64_t cols) {
    if constexpr (VEC) {
        constexpr int kVectors = int(sizeof(T)) * kChunk / 16;
        uint4 raw[kVectors];
#pragma unroll
        for (int i = 0; i < kVectors; i++) raw[i] = reinterpret_cast<const uint4 *>(row + c0)[i];
        const T *e = reinterpret_cast<const T *>(raw);
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = as_float(e[i]);
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = c0 + i < cols ? as_float(row[c0 + i]) : 0.0f;
    }
}

__device__ __forceinline__ float finite_max(float amax, const float (&v)[kChunk]) {
#pragma unroll
    for (int i = 0; i < kChunk; i++) {
        const float m = fabsf(v[i]);
        if (m <= FLT_MAX) amax = fmaxf(amax, m);  // NaN and inf left out
    }
    return amax;
}

// Eight values times q as FP8 codes, packed little-endian: to nearest with
// satfinite (beyond the max saturates, as clamping first would), NaN as
// 0x7F (the CPU's code, whatever the sign).
template <bool E4M3>
__device__ __forceinline__ uint2 encode8(const float (&v)[kChunk], float q) {
    uint32_t word[2];
#pragma unroll
    for (int w = 0; w < 2; w++) {
        uint32_t packed = 0;
#pragma unroll
        for (int p = 0; p < 2; p++) {
            const float a = __fmul_rn(v[4 * w + 2 * p], q), b = __fmul_rn(v[4 * w + 2 * p + 1], q);
            uint32_t pair = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE,
                                                     E4M3 ? __NV_E4M3 : __NV_E5M2);
            if (a != a) pair = (pair & 0xFF00u) | 0x7Fu;
            if (b != b) pair = (pair & 0x00FFu) | 0x7F00u;
            packed |= pair << (16 * p);
        }
        word[w] = packed;
    }
    return make_uint2(word[0], word[1]);
}

// Stores chunk c0's eight codes in a row of n bytes (VEC: one 8-byte store).
template <bool VEC>
__device__ __forceinline__ void store8(uint8_t *__restrict__ row, int64_t c0, int64_t n,
                                       uint2 codes) {
    if constexpr (VEC) {
        *reinterpret_cast<uint2 *>(row + c0) = codes;
    } else {
        const uint8_t *b = reinterpret_cast<const uint8_t *>(&codes);
#pragma unroll
        for (int i = 0; i < kChunk; i++)
            if (c0 + i < n) row[c0 + i] = b[i];
    }
}

// The max over a warp, in every lane (max is exact in any order).
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// The max over a block of 256 threads, in every thread.
__device__ float block_max(float v) {
    __shared__ float warps[kThreads / 32];
    v = warp_max(v);
    __syncthreads();  // warps[] may still be read from a previous call
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
    __syncthreads();
    v = warps[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; w++) v = fmaxf(v, warps[w]);
    return v;
}

// Rowwise: GROUP threads a row (32: a warp, 256: the block).
template <typename T, bool VEC, bool E4M3, int GROUP>
__global__ void __launch_bounds__(kThreads)
    rowwise_kernel(uint8_t *__restrict__ y, float *__restrict__ scale, float *__restrict__ amax_out,
                   const T *__restrict__ x, int64_t x_row_stride, int64_t rows, int64_t cols) {
    const int64_t r = int64_t(blockIdx.x) * (kThreads / GROUP) + threadIdx.x / GROUP;
    const int lane = int(threadIdx.x % GROUP);
    if (GROUP == 32 && r >= rows) return;  // (a block's GROUP == 256 row is its own)
    const T *row = x + r * x_row_stride;
    const int64_t chunks = chunks_per_row(cols);
    float held[kHeld][kChunk], amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kHeld; j++) {
        const int64_t c = lane + int64_t(j) * GROUP;
        if (c < chunks) {
            load8<T, VEC>(held[j], row, c * kChunk, cols);
            amax = finite_max(amax, held[j]);
        }
    }
    for (int64_t c = lane + int64_t(kHeld) * GROUP; c < chunks; c += GROUP) {
        float v[kChunk];
        load8<T, VEC>(v, row, c * kChunk, cols);
        amax = finite_max(amax, v);
    }
    if constexpr (GROUP == 32)
        amax = warp_max(amax);
    else
        amax = block_max(amax);
    const float q = fo_fp8_multiplier(amax, E4M3 ? FO_FP8_E4M3 : FO_FP8_E5M2, 1);
    uint8_t *out = y + r * cols;
#pragma unroll
    for (int j = 0; j < kHeld; j++) {
        const int64_t c = lane + int64_t(j) * GROUP;
        if (c < chunks) store8<VEC>(out, c * kChunk, cols, encode8<E4M3>(held[j], q));
    }
    for (int64_t c = lane + int64_t(kHeld) * GROUP; c < chunks; c += GROUP) {
        float v[kChunk];
        load8<T, VEC>(v, row, c * kChunk, cols);
        store8<VEC>(out, c * kChunk, cols, encode8<E4M3>(v, q));
    }
    if (lane == 0) {
        scale[r] = 1.0f / q;
        if (amax_out) amax_out[r] = amax;
    }
}

// Rowwise, 16-bit rows of 32 * kHeld to 32 * kRawHeld chunks (cols % 8 == 0,
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

// The row and first column of chunk k of the chunks of all rows, in one
// index: FLAT (a dense x taken as one row, the launcher's doing) needs no
// 64-bit division, which otherwise costs more than the loads it addresses.
template <bool FLAT>
__device__ __forceinline__ void chunk_at(int64_t k, int64_t chunks, int64_t &row, int64_t &c0) {
    if constexpr (FLAT) {
        row = 0;
        c0 = k * kChunk;
    } else {
        row = k / chunks;
        c0 = (k - row * chunks) * kChunk;
    }
}

// Tensorwise, first pass: partials[block] = the block's max over its
// chunks, four loads in flight a thread.
template <typename T, bool VEC, bool FLAT>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(float *__restrict__ partials, const T *__restrict__ x, int64_t x_row_stride,
                int64_t rows, int64_t cols) {
    const int64_t chunks = chunks_per_row(cols), total = rows * chunks;
    const int64_t step = int64_t(gridDim.x) * kThreads;
    float amax = 0.0f;
    for (int64_t k0 = blockIdx.x * int64_t(kThreads) + threadIdx.x; k0 < total; k0 += 4 * step) {
        float v[4][kChunk];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int64_t r, c0;
            chunk_at<FLAT>(k0 + u * step, chunks, r, c0);
            if (k0 + u * step < total) load8<T, VEC>(v[u], x + r * x_row_stride, c0, cols);
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (k0 + u * step < total) amax = finite_max(amax, v[u]);
    }
    amax = block_max(amax);
    if (threadIdx.x == 0) partials[blockIdx.x] = amax;
}

// The tensor's amax and q from the first pass's maxima, in every thread;
// block 0 writes the scale and amax.
template <bool E4M3>
__device__ float tensor_multiplier(const float *__restrict__ partials, int count, float *scale,
                                   float *amax_out) {
    float amax = 0.0f;
    for (int i = threadIdx.x; i < count; i += kThreads) amax = fmaxf(amax, partials[i]);
    amax = block_max(amax);
    const float q = fo_fp8_multiplier(amax, E4M3 ? FO_FP8_E4M3 : FO_FP8_E5M2, 0);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
        *scale = 1.0f / q;
        if (amax_out) *amax_out = amax;
    }
    return q;
}

// Tensorwise cast, row-major copy only.
template <typename T, bool VEC, bool E4M3, bool FLAT>
__global__ void __launch_bounds__(kThreads)
    tensorwise_cast_kernel(uint8_t *__restrict__ y, float *__restrict__ scale,
                           float *__restrict__ amax_out, const float *__restrict__ partials,
                           int partial_count, const T *__restrict__ x, int64_t x_row_stride,
                           int64_t rows, int64_t cols) {
    const float q = tensor_multiplier<E4M3>(partials, partial_count, scale, amax_out);
    const int64_t chunks = chunks_per_row(cols), total = rows * chunks;
    const int64_t step = int64_t(gridDim.x) * kThreads;
    for (int64_t k0 = blockIdx.x * int64_t(kThreads) + threadIdx.x; k0 < total; k0 += 4 * step) {
        float v[4][kChunk];
        int64_t r[4], c0[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            chunk_at<FLAT>(k0 + u * step, chunks, r[u], c0[u]);
            if (k0 + u * step < total) load8<T, VEC>(v[u], x + r[u] * x_row_stride, c0[u], cols);
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (k0 + u * step < total)
                store8<VEC>(y + r[u] * cols, c0[u], cols, encode8<E4M3>(v[u], q));
    }
}

// Tensorwise cast with the transposed copy: a block a 64 x 64 tile (and
// the tiles below it, grid-stride), each thread two chunks of it; the codes
// go to y directly and to y_t through shared memory, 16 bytes a thread.
template <typename T, bool VEC, bool E4M3>
__global__ void __launch_bounds__(kThreads)
    cast_transpose_kernel(uint8_t *__restrict__ y, uint8_t *__restrict__ y_t,
                          float *__restrict__ scale, float *__restrict__ amax_out,
                          const float *__restrict__ partials, int partial_count,
                          const T *__restrict__ x, int64_t x_row_stride, int64_t rows,
                          int64_t cols) {
    __shared__ alignas(16) uint8_t tile[kTile][kTile + 16];  // rows 16-byte aligned: 8-byte stores
    const float q = tensor_multiplier<E4M3>(partials, partial_count, scale, amax_out);
    const int64_t col0 = int64_t(blockIdx.x) * kTile;
    constexpr int kChunksAcross = kTile / kChunk;  // 8
    for (int64_t row0 = int64_t(blockIdx.y) * kTile; row0 < rows;
         row0 += int64_t(gridDim.y) * kTile) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int tr = threadIdx.x / kChunksAcross + j * (kThreads / kChunksAcross);
            const int tc = threadIdx.x % kChunksAcross * kChunk;
            const int64_t r = row0 + tr, c0 = col0 + tc;
            uint2 codes = make_uint2(0, 0);
            if (r < rows && c0 < cols) {
                float v[kChunk];
                load8<T, VEC>(v, x + r * x_row_stride, c0, cols);
                codes = encode8<E4M3>(v, q);
                if (y) store8<VEC>(y + r * cols, c0, cols, codes);
            }
            *reinterpret_cast<uint2 *>(&tile[tr][tc]) = codes;
        }
        __syncthreads();
        // y_t row col0 + out (a column of the tile), bytes [16 part, +16)
        const int out = threadIdx.x / 4, part = threadIdx.x % 4;
        const int64_t c = col0 + out, r0 = row0 + part * 16;
        if (c < cols) {
            alignas(16) uint8_t b[16];
#pragma unroll
            for (int i = 0; i < 16; i++) b[i] = tile[part * 16 + i][out];
            uint8_t *dst = y_t + c * rows + r0;
            if (r0 + 16 <= rows && (reinterpret_cast<uintptr_t>(dst) % 16) == 0) {
                *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(b);
            } else {
                for (int i = 0; i < 16; i++)
                    if (r0 + i < rows) dst[i] = b[i];
            }
        }
        __syncthreads();  // the tile is written again below
    }
}

template <typename T>
bool vector_rows(const fo_quantize_fp8_args *a) {
    return a->cols % kChunk == 0 && aligned16(reinterpret_cast<const void *>(a->x)) &&
           stride_aligned16<T>(a->x_row_stride, a->rows) && a->y % 8 == 0;
}

int amax_blocks(const fo_quantize_fp8_args *a) {
    const int64_t work = (a->rows * chunks_per_row(a->cols) + 4 * kThreads - 1) / (4 * kThreads);
    return int(work < 1 ? 1 : work > kAmaxBlocks ? kAmaxBlocks : work);
}

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
    if (a->recipe == FO_FP8_ROWWISE) {
        if (a->rows == 0) return;
        const int64_t chunks = chunks_per_row(a->cols);
        const int64_t warp_blocks = (a->rows + kThreads / 32 - 1) / (kThreads / 32);
        if (chunks <= 32 * kHeld) {
            rowwise_kernel<T, VEC, E4M3, 32><<<unsigned(warp_blocks), kThreads, 0, stream>>>(
                y, scale, amax, x, a->x_row_stride, a->rows, a->cols);
        } else if constexpr (VEC && sizeof(T) == 2) {
            if (chunks <= 32 * kRawHeld)
                rowwise_warp_held_kernel<T, E4M3><<<unsigned(warp_blocks), kThreads, 0, stream>>>(
                    y, scale, amax, x, a->x_row_stride, a->rows, a->cols);
            else
                rowwise_kernel<T, VEC, E4M3, kThreads><<<unsigned(a->rows), kThreads, 0, stream>>>(
                    y, scale, amax, x, a->x_row_stride, a->rows, a->cols);
        } else {
            rowwise_kernel<T, VEC, E4M3, kThreads><<<unsigned(a->rows), kThreads, 0, stream>>>(
                y, scale, amax, x, a->x_row_stride, a->rows, a->cols);
        }
        return;
    }
    float *partials = reinterpret_cast<float *>(a->workspace);
    const int count = amax_blocks(a);
    // a dense x is one row of rows * cols elements (VEC held for every row, so for it)
    const bool flat = a->rows <= 1 || a->x_row_stride == a->cols;
    const int64_t rows = flat ? 1 : a->rows, cols = flat ? a->rows * a->cols : a->cols;
    const auto amax_pass = flat ? amax_kernel<T, VEC, true> : amax_kernel<T, VEC, false>;
    amax_pass<<<count, kThreads, 0, stream>>>(partials, x, a->x_row_stride, rows, cols);
    if (!a->y_t) {
        const int64_t work = (rows * chunks_per_row(cols) + 4 * kThreads - 1) / (4 * kThreads);
        const int blocks = int(work < 1 ? 1 : work > kCastBlocks ? kCastBlocks : work);
        const auto cast = flat ? tensorwise_cast_kernel<T, VEC, E4M3, true>
                               : tensorwise_cast_kernel<T, VEC, E4M3, false>;
        cast<<<blocks, kThreads, 0, stream>>>(y, scale, amax, partials, count, x, a->x_row_stride,
                                              rows, cols);
        return;
    }
    const int64_t tiles_x = (a->cols + kTile - 1) / kTile, tiles_y = (a->rows + kTile - 1) / kTile;
    const dim3 grid(unsigned(tiles_x < 1 ? 1 : tiles_x), unsigned(tiles_y < 1           ? 1
                                                                  : tiles_y > kMaxGridY ? kMaxGridY
                                                                                        : tiles_y));
    cast_transpose_kernel<T, VEC, E4M3>
        <<<grid, kThreads, 0, stream>>>(y, reinterpret_cast<uint8_t *>(a->y_t), scale, amax,
                                        partials, count, x, a->x_row_stride, a->rows, a->cols);
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
