// quantize_fp8.cuh: the FP8 quantization kernels (fused_ops.h,
// fo_quantize_fp8 and fo_fp8_out), over a Source of the values: x itself
// (quantize_fp8.cu), or an op's output computed where it is cast
// (swiglu.cu, geglu.cu), which is then never written in 16 bits.
//
// A Source gives a chunk of 8 values (row r, columns c0 .. c0 + 8, zeros
// past cols) in two steps, so that a thread has several chunks' loads in
// flight before it computes on any: fetch(Raw &, r, c0) loads what the
// chunk needs, values(float (&)[8], const Raw &, r, c0) computes its
// values (r and c0 passed again, not held in Raw: the tensorwise cast
// holds four chunks' Raw), and amax(running, const Raw &, r, c0) is
// max(running, |values|) over the finite
// ones (a Source may skip the values a cheaper bound shows are below
// running). kVec: 8-byte stores of the codes (cols % 8 == 0, y 8-byte
// aligned; the Source's loads may vectorize). Held: a type that holds the
// values exactly (the op's output dtype), for a row kept in registers, and
// kHeldChunks of them a thread. kFlattens: flattened(rows) is the Source of
// dense operands taken as one row of rows * cols values. kFewGroups: rowwise
// takes groups of 64 or 256 threads only.
//
// Rowwise: a warp (rows of up to 32 * kHeldChunks chunks) or a block a
// row; its chunks stay in registers between the row's amax and its cast
// (longer rows are read again, from L2). Tensorwise: one pass of per-block
// maxima, then the cast, each of whose blocks first takes the max of those
// maxima; the transposed copy is written from 64 x 64 tiles through shared
// memory, beside the row-major one. The scales come from fp8.h, as on the
// CPU, and the rounding is the hardware's (cvt with satfinite), so both
// write the same bytes.
#pragma once

#include <cuda_fp8.h>

#include <cfloat>

#include "../fp8.h"
#include "common.cuh"

namespace fo {
namespace {

constexpr int kAmaxBlocks = 512;  // the tensorwise maxima (and the cast's first read)
constexpr int kCastBlocks = 4096;  // the tensorwise cast's grid, at most
constexpr int kTile = 64;  // the transposed copy's tile: kTile x kTile elements

__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ float as_float(double v) { return float(v); }
__device__ __forceinline__ float as_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// A chunk's 8 values held in registers as Held, which holds them exactly:
// floats as they are, 16-bit values two to a register.
template <typename Held>
struct HeldChunk {
    float v[kChunk];
    __device__ __forceinline__ void set(const float (&in)[kChunk]) {
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = in[i];
    }
    __device__ __forceinline__ void get(float (&out)[kChunk]) const {
#pragma unroll
        for (int i = 0; i < kChunk; i++) out[i] = v[i];
    }
};

template <>
struct HeldChunk<__nv_bfloat16> {
    __nv_bfloat162 pair[kChunk / 2];
    __device__ __forceinline__ void set(const float (&in)[kChunk]) {
#pragma unroll
        for (int i = 0; i < kChunk / 2; i++)
            pair[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
    }
    __device__ __forceinline__ void get(float (&out)[kChunk]) const {
#pragma unroll
        for (int i = 0; i < kChunk / 2; i++) {
            const float2 f = __bfloat1622float2(pair[i]);
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        }
    }
};

template <>
struct HeldChunk<__half> {
    __half2 pair[kChunk / 2];
    __device__ __forceinline__ void set(const float (&in)[kChunk]) {
#pragma unroll
        for (int i = 0; i < kChunk / 2; i++) pair[i] = __floats2half2_rn(in[2 * i], in[2 * i + 1]);
    }
    __device__ __forceinline__ void get(float (&out)[kChunk]) const {
#pragma unroll
        for (int i = 0; i < kChunk / 2; i++) {
            const float2 f = __half22float2(pair[i]);
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        }
    }
};

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

// max(m, |v|), NaN if either is (PTX max.NaN, sm_80+): one instruction an
// element where finite_max takes three; a row whose result is not finite
// takes finite_max after all.
__device__ __forceinline__ float max_abs_nan(float m, float v) {
    float out;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(out) : "f"(m), "f"(fabsf(v)));
    return out;
}

// Eight values times q as FP8 codes, packed little-endian: to nearest with
// satfinite (beyond the max saturates, as clamping first would), NaN as
// 0x7F (the CPU's code, whatever the sign). NAN_FREE: the caller knows no v
// is NaN (nor then is v * q, q being finite), and skips that fix.
template <bool E4M3, bool NAN_FREE = false>
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
            if (!NAN_FREE && a != a) pair = (pair & 0xFF00u) | 0x7Fu;
            if (!NAN_FREE && b != b) pair = (pair & 0x00FFu) | 0x7F00u;
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

// The max over each GROUP threads of a block of 256 (a multiple of 32), in
// every thread of the group; every thread of the block calls it.
template <int GROUP = kThreads>
__device__ float group_max(float v) {
    __shared__ float warps[kThreads / 32];
    v = warp_max(v);
    if constexpr (GROUP == 32) return v;
    __syncthreads();  // warps[] may still be read from a previous call
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
    __syncthreads();
    const int first = int(threadIdx.x) / GROUP * (GROUP / 32);
    v = warps[first];
#pragma unroll
    for (int w = 1; w < GROUP / 32; w++) v = fmaxf(v, warps[first + w]);
    return v;
}

__device__ float block_max(float v) { return group_max<kThreads>(v); }

// A chunk's values from src (fetch, then values).
template <typename Source>
__device__ __forceinline__ void load_values(const Source &src, float (&v)[kChunk], int64_t r,
                                            int64_t c0) {
    typename Source::Raw raw;
    src.fetch(raw, r, c0);
    src.values(v, raw, r, c0);
}

// Rowwise: GROUP threads a row (32, 64, 128 or 256: the block).
template <typename Source, bool E4M3, int GROUP>
__global__ void __launch_bounds__(kThreads)
    rowwise_kernel(uint8_t *__restrict__ y, float *__restrict__ scale, float *__restrict__ amax_out,
                   Source src, int64_t rows, int64_t cols) {
    constexpr bool VEC = Source::kVec;
    constexpr int kHeld = Source::kHeldChunks;
    const int64_t r = int64_t(blockIdx.x) * (kThreads / GROUP) + threadIdx.x / GROUP;
    const int lane = int(threadIdx.x % GROUP);
    if (GROUP == 32 && r >= rows) return;
    // a wider group past the last row has no chunks, but meets the others at group_max's barriers
    const int64_t chunks = r < rows ? chunks_per_row(cols) : 0;
    HeldChunk<typename Source::Held> held[kHeld];
    // the held values' max.NaN (max_abs_nan), their finite max unless it is not finite
    float held_max = 0.0f;
    {
        typename Source::Raw raw[kHeld];
#pragma unroll
        for (int j = 0; j < kHeld; j++)
            if (lane + int64_t(j) * GROUP < chunks)
                src.fetch(raw[j], r, (lane + int64_t(j) * GROUP) * kChunk);
#pragma unroll
        for (int j = 0; j < kHeld; j++) {
            if (lane + int64_t(j) * GROUP >= chunks) continue;
            float v[kChunk];
            src.values(v, raw[j], r, (lane + int64_t(j) * GROUP) * kChunk);
#pragma unroll
            for (int i = 0; i < kChunk; i++) held_max = max_abs_nan(held_max, v[i]);
            held[j].set(v);
        }
    }
    float amax = 0.0f;
    for (int64_t c = lane + int64_t(kHeld) * GROUP; c < chunks; c += GROUP) {
        typename Source::Raw raw;
        src.fetch(raw, r, c * kChunk);
        amax = src.amax(amax, raw, r, c * kChunk);
    }
    // the block's threads decide together (group_max's barriers follow)
    bool finite = held_max <= FLT_MAX;
    if constexpr (GROUP == 32)
        finite = __all_sync(0xffffffffu, finite);
    else
        finite = !__syncthreads_or(!finite);
    if (!finite) {
        held_max = 0.0f;
#pragma unroll
        for (int j = 0; j < kHeld; j++) {
            if (lane + int64_t(j) * GROUP >= chunks) continue;
            float v[kChunk];
            held[j].get(v);
            held_max = finite_max(held_max, v);
        }
    }
    amax = group_max<GROUP>(fmaxf(amax, held_max));
    const float q = fo_fp8_multiplier(amax, E4M3 ? FO_FP8_E4M3 : FO_FP8_E5M2, 1);
    uint8_t *out = y + r * cols;
    auto store_held = [&](auto nan_free) {
#pragma unroll
        for (int j = 0; j < kHeld; j++) {
            const int64_t c = lane + int64_t(j) * GROUP;
            if (c >= chunks) continue;
            float v[kChunk];
            held[j].get(v);
            store8<VEC>(out, c * kChunk, cols, encode8<E4M3, decltype(nan_free)::value>(v, q));
        }
    };
    if (finite)
        store_held(std::true_type{});
    else
        store_held(std::false_type{});
    for (int64_t c = lane + int64_t(kHeld) * GROUP; c < chunks; c += GROUP) {
        float v[kChunk];
        load_values(src, v, r, c * kChunk);
        store8<VEC>(out, c * kChunk, cols, encode8<E4M3>(v, q));
    }
    if (lane == 0 && r < rows) {
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
        // a 32-bit division where both fit: a third of the 64-bit one's instructions
        row = k <= UINT32_MAX && chunks <= UINT32_MAX ? int64_t(uint32_t(k) / uint32_t(chunks))
                                                      : k / chunks;
        c0 = (k - row * chunks) * kChunk;
    }
}

// Tensorwise, first pass: the block's max over its chunks, four loads in
// flight a thread, into partials[block], or with ATOMIC into partials[0]
// (zeroed before; non-negative floats order as their bits do).
template <typename Source, bool FLAT, bool ATOMIC>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(float *__restrict__ partials, Source src, int64_t rows, int64_t cols) {
    const int64_t chunks = chunks_per_row(cols), total = rows * chunks;
    const int64_t step = int64_t(gridDim.x) * kThreads;
    float amax = 0.0f;
    for (int64_t k0 = blockIdx.x * int64_t(kThreads) + threadIdx.x; k0 < total; k0 += 4 * step) {
        typename Source::Raw raw[4];
        int64_t r[4], c0[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            chunk_at<FLAT>(k0 + u * step, chunks, r[u], c0[u]);
            if (k0 + u * step < total) src.fetch(raw[u], r[u], c0[u]);
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (k0 + u * step < total) amax = src.amax(amax, raw[u], r[u], c0[u]);
    }
    amax = block_max(amax);
    if (threadIdx.x == 0) {
        if constexpr (ATOMIC)
            atomicMax(reinterpret_cast<int *>(partials), __float_as_int(amax));
        else
            partials[blockIdx.x] = amax;
    }
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
template <typename Source, bool E4M3, bool FLAT>
__global__ void __launch_bounds__(kThreads)
    tensorwise_cast_kernel(uint8_t *__restrict__ y, float *__restrict__ scale,
                           float *__restrict__ amax_out, const float *__restrict__ partials,
                           int partial_count, Source src, int64_t rows, int64_t cols) {
    constexpr bool VEC = Source::kVec;
    const float q = tensor_multiplier<E4M3>(partials, partial_count, scale, amax_out);
    const int64_t chunks = chunks_per_row(cols), total = rows * chunks;
    const int64_t step = int64_t(gridDim.x) * kThreads;
    for (int64_t k0 = blockIdx.x * int64_t(kThreads) + threadIdx.x; k0 < total; k0 += 4 * step) {
        typename Source::Raw raw[4];
        int64_t r[4], c0[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            chunk_at<FLAT>(k0 + u * step, chunks, r[u], c0[u]);
            if (k0 + u * step < total) src.fetch(raw[u], r[u], c0[u]);
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (k0 + u * step < total) {
                float v[kChunk];
                src.values(v, raw[u], r[u], c0[u]);
                store8<VEC>(y + r[u] * cols, c0[u], cols, encode8<E4M3>(v, q));
            }
    }
}

// Tensorwise cast with the transposed copy: a block a 64 x 64 tile (and
// the tiles below it, grid-stride), each thread two chunks of it; the codes
// go to y directly and to y_t through shared memory, 16 bytes a thread.
template <typename Source, bool E4M3>
__global__ void __launch_bounds__(kThreads)
    cast_transpose_kernel(uint8_t *__restrict__ y, uint8_t *__restrict__ y_t,
                          float *__restrict__ scale, float *__restrict__ amax_out,
                          const float *__restrict__ partials, int partial_count, Source src,
                          int64_t rows, int64_t cols) {
    constexpr bool VEC = Source::kVec;
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
                load_values(src, v, r, c0);
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

// x rows with row stride `stride` (VEC: 16-byte loads, the launcher saw
// cols % 8 == 0 and the rows aligned); its values are held as floats.
template <typename T, bool VEC>
struct RowsSource {
    static constexpr bool kVec = VEC;
    static constexpr bool kFlattens = true;
    static constexpr bool kFewGroups = false;
    static constexpr int kHeldChunks = 4;
    using Held = float;
    struct Raw {
        float v[kChunk];
    };
    const T *x;
    int64_t stride, cols;
    __device__ __forceinline__ void fetch(Raw &raw, int64_t r, int64_t c0) const {
        load8<T, VEC>(raw.v, x + r * stride, c0, cols);
    }
    __device__ __forceinline__ void values(float (&v)[kChunk], const Raw &raw, int64_t,
                                           int64_t) const {
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = raw.v[i];
    }
    __device__ __forceinline__ float amax(float running, const Raw &raw, int64_t, int64_t) const {
        return finite_max(running, raw.v);
    }
    RowsSource flattened(int64_t rows) const { return {x, stride, rows * cols}; }
};

// An elementwise gate's output y = act(gate) * up as the op stores it in T
// (swiglu.cu, geglu.cu): Act::value(g) in acc_t<T>, and Act::kNegativeBound
// > |act(g)| for any g < 0, while act(g) <= g for g >= 0 (so |y| <= the
// bound times |up|: tensorwise's amax pass computes act only where that
// bound reaches the running max).
template <typename T, bool VEC, typename Act>
struct GateSource {
    using A = acc_t<T>;
    static constexpr bool kVec = VEC;
    static constexpr bool kFlattens = true;
    static constexpr bool kFewGroups = false;
    static constexpr int kHeldChunks = sizeof(T) == 2 ? 8 : 4;  // 16-bit rows of 16384 held
    using Held = std::conditional_t<sizeof(T) == 2, T, float>;
    struct Raw {  // as loaded: 16-bit chunks in 8 registers, not 16
        alignas(16) T g[kChunk];
        alignas(16) T u[kChunk];
    };
    const T *gate, *up;
    int64_t gate_stride, up_stride, cols;
    Act act;
    __device__ __forceinline__ void fetch_one(T (&out)[kChunk], const T *__restrict__ p,
                                              int64_t c0) const {
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < int(sizeof(T)) * kChunk / 16; i++)
                reinterpret_cast<uint4 *>(out)[i] = reinterpret_cast<const uint4 *>(p + c0)[i];
        } else {
#pragma unroll
            for (int i = 0; i < kChunk; i++) out[i] = c0 + i < cols ? p[c0 + i] : T(0.0f);
        }
    }
    __device__ __forceinline__ void fetch(Raw &raw, int64_t r, int64_t c0) const {
        fetch_one(raw.g, gate + r * gate_stride, c0);
        fetch_one(raw.u, up + r * up_stride, c0);
    }
    __device__ __forceinline__ float value(A g, A u) const {
        return as_float(from_acc<T>(act.value(g) * u));
    }
    __device__ __forceinline__ void values(float (&v)[kChunk], const Raw &raw, int64_t,
                                           int64_t) const {
#pragma unroll
        for (int i = 0; i < kChunk; i++) v[i] = value(to_acc(raw.g[i]), to_acc(raw.u[i]));
    }
    __device__ __forceinline__ float amax(float running, const Raw &raw, int64_t, int64_t) const {
#pragma unroll
        for (int i = 0; i < kChunk; i++) {
            const A g = to_acc(raw.g[i]), u = to_acc(raw.u[i]);
            // |y| <= bound, each rounding on the way monotonic; NaN goes on to be left out
            const float bound =
                float((g >= A(0) ? g : A(Act::kNegativeBound)) * (u < A(0) ? -u : u));
            if (!(bound <= running)) {
                const float m = fabsf(value(g, u));
                if (m <= FLT_MAX) running = fmaxf(running, m);
            }
        }
        return running;
    }
    GateSource flattened(int64_t rows) const {
        return {gate, up, gate_stride, up_stride, rows * cols, act};
    }
};

inline int amax_blocks_for(int64_t rows, int64_t cols) {
    const int64_t work = (rows * chunks_per_row(cols) + 4 * kThreads - 1) / (4 * kThreads);
    return int(work < 1 ? 1 : work > kAmaxBlocks ? kAmaxBlocks : work);
}

// The rowwise launch: the narrowest group of 32, 64, 128 or 256 threads a
// row whose lanes hold the row (kHeldChunks each), else the block.
template <bool E4M3, typename Source>
void launch_rowwise(uint8_t *y, float *scale, float *amax, const Source &src, int64_t rows,
                    int64_t cols, cudaStream_t stream) {
    if (rows == 0) return;
    const int64_t chunks = chunks_per_row(cols);
    auto with = [&](auto group) {
        constexpr int kGroup = decltype(group)::value;
        const int64_t blocks = (rows + kThreads / kGroup - 1) / (kThreads / kGroup);
        rowwise_kernel<Source, E4M3, kGroup>
            <<<unsigned(blocks), kThreads, 0, stream>>>(y, scale, amax, src, rows, cols);
    };
    constexpr int64_t kHeld = Source::kHeldChunks;
    if constexpr (Source::kFewGroups) {  // (fewer instantiations)
        if (chunks <= 64 * kHeld)
            with(std::integral_constant<int, 64>{});
        else
            with(std::integral_constant<int, kThreads>{});
        return;
    }
    if (chunks <= 32 * kHeld)
        with(std::integral_constant<int, 32>{});
    else if (chunks <= 64 * kHeld)
        with(std::integral_constant<int, 64>{});
    else if (chunks <= 128 * kHeld)
        with(std::integral_constant<int, 128>{});
    else
        with(std::integral_constant<int, kThreads>{});
}

// The tensorwise cast after its maxima (partials, count of them): the
// row-major copy alone (a flat Source where dense), or with y_t.
template <bool E4M3, typename Source>
void launch_tensorwise_cast(uint8_t *y, uint8_t *y_t, float *scale, float *amax,
                            const float *partials, int count, const Source &src, bool flat,
                            int64_t rows, int64_t cols, cudaStream_t stream) {
    flat = flat && Source::kFlattens;
    if (!y_t) {
        const int64_t flat_rows = flat ? 1 : rows, flat_cols = flat ? rows * cols : cols;
        const int64_t work =
            (flat_rows * chunks_per_row(flat_cols) + 4 * kThreads - 1) / (4 * kThreads);
        const int blocks = int(work < 1 ? 1 : work > kCastBlocks ? kCastBlocks : work);
        if constexpr (Source::kFlattens) {
            if (flat) {
                tensorwise_cast_kernel<Source, E4M3, true><<<blocks, kThreads, 0, stream>>>(
                    y, scale, amax, partials, count, src.flattened(rows), 1, rows * cols);
                return;
            }
        }
        tensorwise_cast_kernel<Source, E4M3, false>
            <<<blocks, kThreads, 0, stream>>>(y, scale, amax, partials, count, src, rows, cols);
        return;
    }
    const int64_t tiles_x = (cols + kTile - 1) / kTile, tiles_y = (rows + kTile - 1) / kTile;
    const dim3 grid(unsigned(tiles_x < 1 ? 1 : tiles_x), unsigned(tiles_y < 1           ? 1
                                                                  : tiles_y > kMaxGridY ? kMaxGridY
                                                                                        : tiles_y));
    cast_transpose_kernel<Source, E4M3>
        <<<grid, kThreads, 0, stream>>>(y, y_t, scale, amax, partials, count, src, rows, cols);
}

// An op's FP8 output (fo_fp8_out) of rows x cols values from src (flat:
// its operands are dense, so src.flattened(rows) spans them): tensorwise
// keeps the running max in out.amax, zeroed first.
template <typename Source>
void launch_fp8_out(const fo_fp8_out &out, const Source &src, bool flat, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
    uint8_t *y = reinterpret_cast<uint8_t *>(out.y), *y_t = reinterpret_cast<uint8_t *>(out.y_t);
    float *scale = reinterpret_cast<float *>(out.scale),
          *amax = reinterpret_cast<float *>(out.amax);
    const bool e4m3 = out.fp8_dtype == FO_FP8_E4M3;
    if (out.recipe == FO_FP8_ROWWISE) {
        e4m3 ? launch_rowwise<true>(y, scale, amax, src, rows, cols, stream)
             : launch_rowwise<false>(y, scale, amax, src, rows, cols, stream);
        return;
    }
    cudaMemsetAsync(amax, 0, sizeof(float), stream);
    const int count = amax_blocks_for(rows, cols);
    if (flat)
        amax_kernel<Source, true, true>
            <<<count, kThreads, 0, stream>>>(amax, src.flattened(rows), 1, rows * cols);
    else
        amax_kernel<Source, false, true><<<count, kThreads, 0, stream>>>(amax, src, rows, cols);
    e4m3 ? launch_tensorwise_cast<true>(y, y_t, scale, nullptr, amax, 1, src, flat, rows, cols,
                                        stream)
         : launch_tensorwise_cast<false>(y, y_t, scale, nullptr, amax, 1, src, flat, rows, cols,
                                         stream);
}

}  // namespace
}  // namespace fo
