// common.cuh: what every CUDA launcher shares: the device guard, error
// reporting, dtype dispatch, fp32/fp64 accumulation types, 8-element chunk
// loads and stores, and the launch geometry of the row-wise kernels.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../internal.h"

namespace fo {

#ifndef FO_CUDA_ARCHS
#define FO_CUDA_ARCHS ""
#endif

// Turns a CUDA error into a status and a message naming the op, and, for
// the two failures a user can fix, what to do.
inline int cuda_status(const char *op, cudaError_t error) {
    if (error == cudaSuccess) return FO_OK;
    if (error == cudaErrorNoKernelImageForDevice || error == cudaErrorUnsupportedPtxVersion) {
        int device = 0, major = 0, minor = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
        cudaGetLastError();  // these queries must not leave an error behind
        return fo_fail(FO_ERR_CUDA_RUNTIME,
                       "%s: this GPU is sm_%d%d but the library holds code for "
                       "'%s' only (%s); rebuild with -Dgpu_archs=...,%d%d "
                       "(pip install . -Csetup-args=-Dgpu_archs=%d%d)",
                       op, major, minor, FO_CUDA_ARCHS, cudaGetErrorName(error), major, minor,
                       major, minor);
    }
    if (error == cudaErrorInsufficientDriver) {
        int driver = 0;
        cudaDriverGetVersion(&driver);
        return fo_fail(FO_ERR_CUDA_RUNTIME,
                       "%s: the NVIDIA driver supports CUDA %d.%d but this "
                       "library was built with the CUDA %d.%d runtime; update "
                       "the driver, or build with an older CUDA toolkit",
                       op, driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000,
                       CUDART_VERSION % 1000 / 10);
    }
    return fo_fail(FO_ERR_CUDA_RUNTIME, "%s: CUDA error %s: %s", op, cudaGetErrorName(error),
                   cudaGetErrorString(error));
}

// Makes `device_index` current for the launch only if it is not already,
// and restores the caller's device afterwards (DESIGN: never leave it moved).
class DeviceGuard {
  public:
    explicit DeviceGuard(int device_index) {
        error_ = cudaGetDevice(&previous_);
        if (error_ == cudaSuccess && previous_ != device_index) {
            error_ = cudaSetDevice(device_index);
            switched_ = error_ == cudaSuccess;
        }
    }
    ~DeviceGuard() {
        if (switched_) cudaSetDevice(previous_);
    }
    cudaError_t error() const { return error_; }

  private:
    int previous_ = 0;
    bool switched_ = false;
    cudaError_t error_;
};

// Runs `launch` (which enqueues kernels) on `device_index` and reports the
// launch error, if any, as a status.
template <typename Launch>
int launch_on(const char *op, int device_index, Launch &&launch) {
    DeviceGuard guard(device_index);
    if (guard.error() != cudaSuccess) return cuda_status(op, guard.error());
    // an error someone else left pending is theirs, not this op's (a sticky
    // error comes back at once and is reported below all the same)
    cudaGetLastError();
    launch();
    return cuda_status(op, cudaGetLastError());
}

// What the launchers need to know of a device, asked once a device: the
// attribute queries cost 0.3-0.5 us each, and a model calls the same ops
// again and again.
struct DeviceInfo {
    int multiprocessors = 0;
    int shared_optin = 0;  // bytes of shared memory a block may opt in to
    bool clusters = false;  // thread block clusters and programmatic dependent launches (sm_90+)
    bool cooperative = false;  // cooperative launches (grid-wide barriers)
};

constexpr int kMaxCachedDevices = 64;

// `device`'s DeviceInfo; all zeros where it cannot be asked (no GPU), and
// then asked again next time. Thread-safe: a slot is filled once, under a
// lock, and read without one once marked ready.
inline DeviceInfo device_info(int device) {
    struct Slot {
        std::atomic<bool> ready{false};
        DeviceInfo info;
    };
    static Slot slots[kMaxCachedDevices];
    static std::mutex filling;
    const bool cached = device >= 0 && device < kMaxCachedDevices;
    if (cached && slots[device].ready.load(std::memory_order_acquire)) return slots[device].info;
    DeviceInfo info;
    int clusters = 0, cooperative = 0;
    if (cudaDeviceGetAttribute(&info.multiprocessors, cudaDevAttrMultiProcessorCount, device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&info.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               device) != cudaSuccess ||
        cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device) != cudaSuccess) {
        cudaGetLastError();  // a failed query is "no", not this op's error
        return DeviceInfo{};
    }
    info.clusters = clusters != 0;
    info.cooperative = cooperative != 0;
    if (cached) {
        std::lock_guard<std::mutex> lock(filling);
        if (!slots[device].ready.load(std::memory_order_relaxed)) {
            slots[device].info = info;
            slots[device].ready.store(true, std::memory_order_release);
        }
    }
    return info;
}

// Whether `device` launches thread block clusters (sm_90 and later).
inline bool has_clusters(int device) { return device_info(device).clusters; }

// Blocks of `kernel` resident at once on one SM of `device` (the current
// device) at `threads` a block and `shared_bytes` of dynamic shared memory;
// with `cluster` > 1, clusters of that many blocks resident at once on the
// whole device, for a grid of `grid` blocks (0 where the kernel's code is
// older than sm_90, which compiles clusters out). 0 where they do not fit
// or a query fails. Each answer is asked once and kept, as is the kernel's
// dynamic shared memory limit, raised (never lowered) to the largest
// shared_bytes asked for: a launch planned from a kept answer has the room
// it needs. Thread-safe.
inline int resident_blocks(const void *kernel, int device, int threads, size_t shared_bytes,
                           int cluster = 1, unsigned grid = 0) {
    using Key = std::tuple<const void *, int, int, size_t, int, unsigned>;
    static std::mutex lock;
    static std::map<Key, int> answers;
    static std::map<std::pair<const void *, int>, size_t> shared_limits;
    const Key key{kernel, device, threads, shared_bytes, cluster, cluster > 1 ? grid : 0u};
    std::lock_guard<std::mutex> held(lock);
    const auto found = answers.find(key);
    if (found != answers.end()) return found->second;
    int resident = 0;
    size_t &limit = shared_limits[{kernel, device}];
    bool fits = true;
    if (shared_bytes > limit) {
        // (the static and dynamic shared memory together past 48 KB need this)
        fits = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(shared_bytes)) == cudaSuccess;
        if (fits) limit = shared_bytes;
    }
    if (fits && cluster > 1) {
        cudaFuncAttributes compiled = {};
        cudaLaunchAttribute shape = {};
        shape.id = cudaLaunchAttributeClusterDimension;
        shape.val.clusterDim.x = unsigned(cluster);
        shape.val.clusterDim.y = 1;
        shape.val.clusterDim.z = 1;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(grid);
        config.blockDim = dim3(unsigned(threads));
        config.dynamicSmemBytes = shared_bytes;
        config.attrs = &shape;
        config.numAttrs = 1;
        fits = cudaFuncGetAttributes(&compiled, kernel) == cudaSuccess &&
               compiled.ptxVersion >= 90 &&
               cudaOccupancyMaxActiveClusters(&resident, kernel, &config) == cudaSuccess;
    } else if (fits) {
        fits = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads,
                                                             shared_bytes) == cudaSuccess;
    }
    if (!fits) {
        cudaGetLastError();  // none resident: another kernel runs
        resident = 0;
    }
    answers.emplace(key, resident);
    return resident;
}

// A launch of `grid` in clusters of `cluster` consecutive blocks along x
// (a plain launch where cluster is 1), for cudaLaunchKernelEx and the
// cluster occupancy queries; `shape` holds the cluster attribute and must
// outlive the config.
inline cudaLaunchConfig_t clustered_config(dim3 grid, dim3 block, size_t shared_bytes,
                                           cudaStream_t stream, int cluster,
                                           cudaLaunchAttribute &shape) {
    shape = {};
    shape.id = cudaLaunchAttributeClusterDimension;
    shape.val.clusterDim.x = unsigned(cluster);
    shape.val.clusterDim.y = 1;
    shape.val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = &shape;
    config.numAttrs = cluster > 1 ? 1 : 0;
    return config;
}

// Launches `kernel` in clusters of `cluster` consecutive blocks along x;
// the error, if any, is left for launch_on.
template <typename... Params, typename... Args>
void launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, int cluster,
                      cudaStream_t stream, Args &&...args) {
    cudaLaunchAttribute shape;
    const cudaLaunchConfig_t config = clustered_config(grid, block, 0, stream, cluster, shape);
    cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// This block's cluster: its size and rank (1 and 0 before Hopper, where
// the launcher never asks for a cluster).
__device__ __forceinline__ int cluster_blocks() {
#if __CUDA_ARCH__ >= 900
    return int(cooperative_groups::this_cluster().num_blocks());
#else
    return 1;
#endif
}
__device__ __forceinline__ int cluster_rank() {
#if __CUDA_ARCH__ >= 900
    return int(cooperative_groups::this_cluster().block_rank());
#else
    return 0;
#endif
}
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#endif
}

// Calls f(T{}) with T the element type of `dtype`; the caller validated it.
template <typename F>
void dispatch_dtype(int dtype, F &&f) {
    switch (dtype) {
        case FO_DTYPE_F32:
            f(float{});
            break;
        case FO_DTYPE_F16:
            f(__half{});
            break;
        case FO_DTYPE_BF16:
            f(__nv_bfloat16{});
            break;
        case FO_DTYPE_F64:
            f(double{});
            break;
    }
}

// Half types compute and accumulate in fp32, fp64 in fp64.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, typename A>
__device__ __forceinline__ T from_acc(A v) {
    if constexpr (std::is_same_v<T, __half>)
        return __float2half_rn(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16_rn(v);
    else
        return static_cast<T>(v);
}

// Every row-wise kernel works in chunks of 8 elements a thread: 16 bytes for
// half types, and one mask byte (whose bits a spread chunk shares with its
// neighbour lanes: see Access and bias_scale_relu.cu's store_mask).
constexpr int kChunk = 8;

// A chunk is moved with 16-byte accesses when VEC (all operands 16-byte
// aligned, cols a multiple of 8), else element by element up to `n`.
// READ_ONLY loads go through the non-coherent cache (__ldg): only for data
// that nothing writes while the kernel runs.
// LAST_USE loads (VEC) are marked evict-first (__ldcs): the data is not
// read again, so L2 keeps what will be.
template <typename T, bool VEC, bool READ_ONLY = true, bool LAST_USE = false>
__device__ __forceinline__ void load_chunk(acc_t<T> (&out)[kChunk], const T *__restrict__ p,
                                           int n) {
    if constexpr (VEC) {
        constexpr int kVectors = sizeof(T) * kChunk / 16;
        alignas(16) T raw[kChunk];
        const uint4 *vectors = reinterpret_cast<const uint4 *>(p);
#pragma unroll
        for (int v = 0; v < kVectors; v++)
            reinterpret_cast<uint4 *>(raw)[v] = LAST_USE    ? __ldcs(vectors + v)
                                                : READ_ONLY ? __ldg(vectors + v)
                                                            : vectors[v];
#pragma unroll
        for (int i = 0; i < kChunk; i++) out[i] = to_acc(raw[i]);
    } else {
        assert(n > 0 && n <= kChunk);  // debug builds: a chunk is 1..8 elements
#pragma unroll
        for (int i = 0; i < kChunk; i++) out[i] = i < n ? to_acc(p[i]) : acc_t<T>(0);
    }
}

// STREAM stores (VEC) are marked evict-first (__stcs): an output that this
// kernel does not read back should not push out of L2 what it will.
template <typename T, bool VEC, bool STREAM = false>
__device__ __forceinline__ void store_chunk(T *__restrict__ p, const acc_t<T> (&in)[kChunk],
                                            int n) {
    if constexpr (VEC) {
        constexpr int kVectors = sizeof(T) * kChunk / 16;
        alignas(16) T raw[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; i++) raw[i] = from_acc<T>(in[i]);
#pragma unroll
        for (int v = 0; v < kVectors; v++) {
            uint4 *to = reinterpret_cast<uint4 *>(p) + v;
            const uint4 value = reinterpret_cast<const uint4 *>(raw)[v];
            if constexpr (STREAM)
                __stcs(to, value);
            else
                *to = value;
        }
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; i++)
            if (i < n) p[i] = from_acc<T>(in[i]);
    }
}

// Where the 16-byte vectors of a chunk lie. An fp32 chunk is 2 vectors
// (fp64: 4); side by side in one thread (kVector), a warp's load of its
// first vectors reads half of each of 32 sectors and its second load the
// other halves. Spread (kSpread), vector v of the 32 chunks of a warp's
// lanes (chunk c on lane c % 32) is the v-th run of 32 vectors in their
// span: each warp instruction moves 512 contiguous bytes (on the H100, fp32:
// 1-19% faster in the elementwise ops and the norms' register kernels; the
// shared-memory norm forward, whose cp.async copies land in shared memory,
// ran 18% slower spread and keeps kVector). A chunk's values are then 4
// (fp64: 2) elements from each of 2 (4) places, the same places in every
// operand of the op. kSpread needs rows of a whole number of such groups
// (chunks a multiple of 32) and blockDim.x a multiple of 32; 16-bit chunks
// are one vector, where the two layouts are the same.
enum Access { kScalar, kVector, kSpread };

template <typename T>
constexpr int kVectorsPerChunk = int(sizeof(T)) * kChunk / 16;
constexpr int kSpreadGroup = 32;  // chunks, one a lane

// The element offset in its row of vector v of chunk c (not kScalar).
// Spread, that is (c - lane) * 8 + (lane + 32 v) * (elements a vector),
// written as c * 8 less a shift of the lane's own, plus a constant for v:
// the shift is the same for all of a thread's chunks and the constant an
// immediate of the instruction, so a spread access costs what a side by
// side one does (the lane as c % 32 in 64 bits, per access, made the
// instruction-bound fp32 norm backward 12-14% slower).
template <typename T, Access ACCESS>
__device__ __forceinline__ int64_t vector_offset(int64_t c, int v) {
    constexpr int kPerVector = 16 / int(sizeof(T));
    if constexpr (ACCESS == kSpread) {
        // chunk c is on lane c % 32: blockDim.x and the chunk strides are
        // multiples of 32
        const int lane = int(threadIdx.x % kSpreadGroup);
        assert(c % kSpreadGroup == lane);
        return c * kChunk - lane * (kChunk - kPerVector) + v * kSpreadGroup * kPerVector;
    } else {
        return c * kChunk + v * kPerVector;
    }
}

// A row of `chunks` chunks can be spread.
__host__ __device__ inline bool spreadable(int64_t chunks) { return chunks % kSpreadGroup == 0; }

// The element offset in its row of value i of chunk c.
template <typename T, Access ACCESS>
__device__ __forceinline__ int64_t element_offset(int64_t c, int i) {
    constexpr int kPerVector = 16 / int(sizeof(T));
    return vector_offset<T, ACCESS>(c, i / kPerVector) + i % kPerVector;
}

// Chunk c of a row of `cols` elements: 16-byte vectors placed as ACCESS
// says, or (kScalar) element by element, the last chunk short.
template <typename T, Access ACCESS>
__device__ __forceinline__ void load_row_chunk(acc_t<T> (&out)[kChunk], const T *__restrict__ row,
                                               int64_t c, int64_t cols) {
    if constexpr (ACCESS == kScalar) {
        const int64_t col = c * kChunk;
        load_chunk<T, false>(out, row + col, int(cols - col < kChunk ? cols - col : kChunk));
    } else {
        constexpr int kPerVector = 16 / int(sizeof(T));
#pragma unroll
        for (int v = 0; v < kVectorsPerChunk<T>; v++) {
            alignas(16) T raw[kPerVector];
            *reinterpret_cast<uint4 *>(raw) =
                __ldg(reinterpret_cast<const uint4 *>(row + vector_offset<T, ACCESS>(c, v)));
#pragma unroll
            for (int i = 0; i < kPerVector; i++) out[v * kPerVector + i] = to_acc(raw[i]);
        }
    }
}

template <typename T, Access ACCESS>
__device__ __forceinline__ void store_row_chunk(T *__restrict__ row, const acc_t<T> (&in)[kChunk],
                                                int64_t c, int64_t cols) {
    if constexpr (ACCESS == kScalar) {
        const int64_t col = c * kChunk;
        store_chunk<T, false>(row + col, in, int(cols - col < kChunk ? cols - col : kChunk));
    } else {
        constexpr int kPerVector = 16 / int(sizeof(T));
#pragma unroll
        for (int v = 0; v < kVectorsPerChunk<T>; v++) {
            alignas(16) T raw[kPerVector];
#pragma unroll
            for (int i = 0; i < kPerVector; i++) raw[i] = from_acc<T>(in[v * kPerVector + i]);
            *reinterpret_cast<uint4 *>(row + vector_offset<T, ACCESS>(c, v)) =
                *reinterpret_cast<const uint4 *>(raw);
        }
    }
}

// Calls f(std::integral_constant<Access, ...>): kScalar unless every
// operand is 16-byte aligned with rows of whole chunks (vec); then kSpread
// where rows of `chunks` can be spread and T has several vectors a chunk,
// else kVector.
template <typename T, typename F>
void dispatch_access(bool vec, int64_t chunks, F &&f) {
    if (!vec) return f(std::integral_constant<Access, kScalar>{});
    if constexpr (kVectorsPerChunk < T >> 1)
        if (spreadable(chunks)) return f(std::integral_constant<Access, kSpread>{});
    f(std::integral_constant<Access, kVector>{});
}

inline bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A row stride keeps 16-byte alignment from row to row (or there is one row).
template <typename T>
inline bool stride_aligned16(int64_t row_stride, int64_t rows) {
    return rows <= 1 || (row_stride * int64_t(sizeof(T))) % 16 == 0;
}

// Launch geometry of the row-wise kernels: 256 threads a block, TX threads
// across the chunks of a row and TY across rows, so narrow rows still fill a
// block. Grid-stride loops cover the rest. The grid depends only on rows and
// cols (never on the GPU or on alignment): the reduction order of the bias
// gradient, and so its bits, are the same everywhere.
struct RowGeometry {
    dim3 grid, block;
};

constexpr int kThreads = 256;
constexpr int64_t kMaxRowBlocks = 256;  // also the bias partials per column

// Sum of `value` over a block of THREADS threads, in a fixed order; the
// result is in thread 0.
template <int THREADS, typename A>
__device__ A block_sum(A value) {
    __shared__ A warp_sums[THREADS / 32];
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_down_sync(0xffffffffu, value, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
    __syncthreads();
    A total = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < THREADS / 32; w++) total += warp_sums[w];
    return total;
}

// gridDim.x's limit: the dense elementwise kernels give every thread one
// chunk instead of walking 65535 blocks' worth in turn; with one 16-byte load
// in flight a thread, that walk ran 2% under torch at 1G elements (H100).
constexpr int64_t kMaxColBlocks = 2147483647;
constexpr int64_t kMaxGridY = 65535;  // gridDim.y's and gridDim.z's limit

__host__ __device__ inline int64_t chunks_per_row(int64_t cols) {
    return (cols + kChunk - 1) / kChunk;
}

inline RowGeometry row_geometry(int64_t rows, int64_t cols) {
    int64_t chunks = chunks_per_row(cols);
    int tx = 32;
    while (tx < kThreads && tx < chunks) tx *= 2;
    int ty = kThreads / tx;
    int64_t gx = (chunks + tx - 1) / tx;
    int64_t gy = (rows + ty - 1) / ty;
    if (gx > kMaxColBlocks) gx = kMaxColBlocks;
    if (gy > kMaxRowBlocks) gy = kMaxRowBlocks;
    if (gy < 1) gy = 1;
    return {dim3(unsigned(gx), unsigned(gy)), dim3(unsigned(tx), unsigned(ty))};
}

// An elementwise forward has no partials, so its grid need not be row_geometry's (at
// most kMaxRowBlocks row blocks, for the bias gradient): a block a row of
// each thread, short blocks that balance themselves over the SMs. On the
// H100 (bf16, fp32) that ran 4-26% faster than row_geometry's grid-stride
// walk down the rows (65536 x 1024 bf16: 2088 -> 2625 GB/s), which kept too
// few loads in flight; loading 2 or 4 rows a thread before using any was
// 1-11% slower than 1 in this grid.
inline RowGeometry forward_geometry(int64_t rows, int64_t cols) {
    RowGeometry g = row_geometry(rows, cols);
    int64_t gy = (rows + g.block.y - 1) / g.block.y;
    if (gy > kMaxGridY) gy = kMaxGridY;  // the loop does the rest
    g.grid.y = unsigned(gy < 1 ? 1 : gy);
    return g;
}

// The elementwise kernels' walk over their chunks (f(c, r): chunk c of row
// r). Strided operands, and large ones, take the grid-stride loops of
// row_geometry's grid. Where every operand is one dense run of at most
// kDenseWalkChunks chunks (DENSE: the launcher saw one row, dense_walk;
// dense_geometry's grid), each thread takes one chunk, its index in 32
// bits: no loops, and its loads issue 18 instructions in, not 60. A small
// tensor's grid is a wave or two, so what comes before the loads is time
// the memory waits: 1-6% faster on the H100 up to 32M elements, hence the
// cap. (A warp is wholly in or out of the chunks where they are spread:
// kSpread rows are a multiple of 32 chunks, so relu's mask shuffles see
// full warps.)
template <bool DENSE, typename F>
__device__ __forceinline__ void for_each_chunk(int64_t rows, int64_t chunks, F &&f) {
    if constexpr (DENSE) {
        const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
        if (c < unsigned(chunks)) f(int64_t(c), int64_t(0));
    } else {
        for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks;
             c += int64_t(gridDim.x) * blockDim.x)
            for (int64_t r = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; r < rows;
                 r += int64_t(gridDim.y) * blockDim.y)
                f(c, r);
    }
}

// Whether an elementwise launch of rows x cols can take the DENSE walk
// (after the launcher flattened dense operands to one row).
constexpr int64_t kDenseWalkChunks = int64_t(1) << 22;  // 32M elements
inline bool dense_walk(int64_t rows, int64_t cols) {
    return rows == 1 && chunks_per_row(cols) <= kDenseWalkChunks;
}
// The grid of the DENSE walk: a thread a chunk, kThreads a block (64 and
// 128 threads measured within 1.5%).
inline RowGeometry dense_geometry(int64_t cols) {
    constexpr int64_t kBlock = kThreads;
    const int64_t blocks = (chunks_per_row(cols) + kBlock - 1) / kBlock;
    return {dim3(unsigned(blocks < 1 ? 1 : blocks)), dim3(unsigned(kBlock))};
}

// out[col] = sum over g < groups of partials[g * cols + col]: the second,
// deterministic pass of every column reduction (bias and weight gradients).
// A block takes 32 adjacent columns (a warp reads 128 contiguous bytes) and
// kFinishLanes lanes of groups: lane t sums g = t, t + kFinishLanes, ... and
// lane 0 adds the lanes' sums in order. The order is fixed by groups alone,
// and many loads are in flight: a column of 512 partials costs a few
// microseconds, not the hundreds of one thread walking them in turn.
constexpr int kFinishLanes = 16;

// SCALAR: the launch has the scalar's row of blocks (without it, the
// kernel is the column sums alone, as the norms and relu time it).
template <typename A, typename Out, bool SCALAR>
__global__ void __launch_bounds__(32 * kFinishLanes)
    column_partials_finish_kernel(Out *__restrict__ first, Out *__restrict__ second,
                                  const A *__restrict__ partials, int64_t groups, int64_t cols,
                                  Out *__restrict__ scalar, const A *__restrict__ scalar_partials,
                                  int64_t scalar_count) {
#if __CUDA_ARCH__ >= 900
    // launched as a programmatic dependent of the kernel that wrote the
    // partials (finish_column_partials): that grid's writes are complete
    // and visible past this point (a no-op in a plain launch)
    cudaGridDependencySynchronize();
#endif
    if (SCALAR && blockIdx.y == 2) {  // the scalar: one block, its lanes in a fixed order
        if (blockIdx.x != 0) return;
        const int lane = int(threadIdx.y * 32 + threadIdx.x);
        A sum = 0;
        for (int64_t i = lane; i < scalar_count; i += 32 * kFinishLanes) sum += scalar_partials[i];
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_down_sync(0xffffffffu, sum, offset);
        __shared__ A warp_sums[kFinishLanes];
        if (threadIdx.x == 0) warp_sums[threadIdx.y] = sum;
        __syncthreads();
        if (lane == 0) {
            A all = 0;
            for (int w = 0; w < kFinishLanes; w++) all += warp_sums[w];
            *scalar = from_acc<Out>(all);
        }
        return;
    }
    // blockIdx.y picks the output: first's partials, then second's after them
    Out *out = blockIdx.y == 0 ? first : second;
    if (!out) return;
    const A *mine = partials + int64_t(blockIdx.y) * groups * cols;
    __shared__ A lane_sums[kFinishLanes][32];
    for (int64_t base = blockIdx.x * int64_t(32); base < cols; base += int64_t(gridDim.x) * 32) {
        const int64_t col = base + threadIdx.x;
        A sum = 0;
        if (col < cols) {
#pragma unroll 8
            for (int64_t g = threadIdx.y; g < groups; g += kFinishLanes)
                sum += mine[g * cols + col];
        }
        lane_sums[threadIdx.y][threadIdx.x] = sum;
        __syncthreads();
        if (threadIdx.y == 0 && col < cols) {
            A total = 0;
#pragma unroll
            for (int t = 0; t < kFinishLanes; t++) total += lane_sums[t][threadIdx.x];
            out[col] = from_acc<Out>(total);
        }
        __syncthreads();
    }
}

// Whether the current device (launch_on made it the op's) launches
// programmatic dependents: sm_90 and later, as it does clusters.
inline bool current_device_has_dependent_launch() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        cudaGetLastError();  // a failed query is "no", not this op's error
        return false;
    }
    return has_clusters(device);
}

// Finishes one or two column reductions in one launch: first from partials,
// second (if not null) from the groups x cols partials after first's; and
// scalar (if not null), the sum of scalar_count scalar_partials.
// On sm_90 and later it is launched as a programmatic dependent of the
// kernel before it on the stream (the one that wrote the partials): it may
// start as that kernel's last blocks exit, instead of a launch's latency
// after the whole grid, and waits for its writes in the kernel.
template <typename A, typename Out>
void finish_column_partials(Out *first, Out *second, const A *partials, int64_t groups,
                            int64_t cols, cudaStream_t stream, Out *scalar = nullptr,
                            const A *scalar_partials = nullptr, int64_t scalar_count = 0) {
    int64_t blocks = (cols + 31) / 32;
    if (blocks > kMaxColBlocks) blocks = kMaxColBlocks;
    cudaLaunchAttribute early = {};
    early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(blocks), scalar ? 3 : second ? 2 : 1);
    config.blockDim = dim3(32, kFinishLanes);
    config.stream = stream;
    config.attrs = &early;
    config.numAttrs = current_device_has_dependent_launch() ? 1 : 0;
    cudaLaunchKernelEx(&config,
                       scalar ? column_partials_finish_kernel<A, Out, true>
                              : column_partials_finish_kernel<A, Out, false>,
                       first, second, partials, groups, cols, scalar, scalar_partials,
                       scalar_count);  // an error stays for launch_on
}

// Calls f(P{}) for a companion dtype code (bias, weight, residual) that is
// either T's own or float32.
// (fp32 companions exist only beside half types, so only those instantiate
// both.)
template <typename T, typename F>
void dispatch_companion(int dtype, F &&f) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        f(T{});
    } else {
        if (dtype == FO_DTYPE_F32)
            f(float{});
        else
            f(T{});
    }
}

}  // namespace fo
