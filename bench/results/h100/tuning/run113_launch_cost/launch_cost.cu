// Host time of a cooperative launch against a plain one (empty kernel,
// 256 blocks of 256 threads), and of the queries the held path makes.
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>
#include <cooperative_groups.h>

__global__ void empty_kernel(int *p) { if (p && threadIdx.x == 9999) *p = 1; }
__global__ void sync_kernel(int *p) {
    cooperative_groups::this_grid().sync();
    if (p && threadIdx.x == 9999) *p = 1;
}

template <typename F>
double host_us(F f, int n = 2000) {
    for (int i = 0; i < 50; i++) f();
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) f();
    auto t1 = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

int main() {
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaLaunchAttribute coop = {};
    coop.id = cudaLaunchAttributeCooperative;
    coop.val.cooperative = 1;
    auto launch = [&](void (*k)(int *), int attrs) {
        cudaLaunchConfig_t c = {};
        c.gridDim = dim3(256); c.blockDim = dim3(256); c.stream = s;
        c.attrs = &coop; c.numAttrs = attrs;
        cudaLaunchKernelEx(&c, k, (int *)nullptr);
    };
    printf("plain launch, empty kernel: %.2f us\n", host_us([&] { launch(empty_kernel, 0); }));
    printf("cooperative launch, empty kernel: %.2f us\n", host_us([&] { launch(empty_kernel, 1); }));
    printf("cooperative launch, grid.sync kernel: %.2f us\n", host_us([&] { launch(sync_kernel, 1); }));
    int v;
    printf("cudaDeviceGetAttribute(cooperative): %.3f us\n",
           host_us([&] { cudaDeviceGetAttribute(&v, cudaDevAttrCooperativeLaunch, 0); }));
    printf("cudaDeviceGetAttribute(smem optin): %.3f us\n",
           host_us([&] { cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0); }));
    printf("cudaOccupancyMaxActiveBlocksPerMultiprocessor: %.2f us\n",
           host_us([&] { cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, sync_kernel, 256, 0); }));
    printf("cudaFuncSetAttribute(max dynamic smem): %.2f us\n",
           host_us([&] { cudaFuncSetAttribute(sync_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536); }));
    printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
