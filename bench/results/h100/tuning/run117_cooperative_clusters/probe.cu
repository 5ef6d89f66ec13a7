// Does a cooperative launch (grid.sync) combine with thread block clusters
// on this GPU? Launches a grid of clusters of 1, 2, 4 with both attributes,
// each block adds to a counter, grid-syncs, then checks the counter.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

__global__ void probe(int *counter, int *bad) {
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) atomicAdd(counter, 1);
    cg::this_grid().sync();
    cluster.sync();
    if (threadIdx.x == 0 && atomicAdd(counter, 0) != int(gridDim.x)) atomicAdd(bad, 1);
}

int main() {
    int *d;
    cudaMalloc(&d, 8);
    for (int cluster : {1, 2, 4, 8}) {
        for (int groups : {12, 28, 64, 132}) {
            if (groups * cluster > 132 * 1) continue;
            cudaMemset(d, 0, 8);
            cudaLaunchAttribute attrs[2] = {};
            attrs[0].id = cudaLaunchAttributeCooperative;
            attrs[0].val.cooperative = 1;
            attrs[1].id = cudaLaunchAttributeClusterDimension;
            attrs[1].val.clusterDim.x = cluster;
            attrs[1].val.clusterDim.y = 1;
            attrs[1].val.clusterDim.z = 1;
            cudaLaunchConfig_t config = {};
            config.gridDim = dim3(groups * cluster);
            config.blockDim = dim3(512);
            config.dynamicSmemBytes = 100 * 1024;
            config.attrs = attrs;
            config.numAttrs = 2;
            cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
            int active = -1;
            cudaError_t q = cudaOccupancyMaxActiveClusters(&active, probe, &config);
            cudaError_t e = cudaLaunchKernelEx(&config, probe, d, d + 1);
            cudaError_t s = cudaDeviceSynchronize();
            int h[2] = {-1, -1};
            cudaMemcpy(h, d, 8, cudaMemcpyDeviceToHost);
            printf("cluster %d groups %d: max active clusters %d (%s) launch %s sync %s counter %d bad %d\n",
                   cluster, groups, active, cudaGetErrorString(q), cudaGetErrorString(e),
                   cudaGetErrorString(s), h[0], h[1]);
            cudaGetLastError();
        }
    }
    return 0;
}
