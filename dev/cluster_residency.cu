/*
 * dev/cluster_residency.cu — how many CTAs clusters of s = 1..8 keep resident at once, one CTA an SM
 * (200 KB of shared memory, as every cluster kernel of the library takes over 114 KB): what
 * cudaOccupancyMaxActiveClusters answers (the library's probe, src/common/cluster_probe.cu, asks the
 * same for s = 2..8) against a measured wave — the CTAs of a grid of 3 x SMs CTAs, each spinning 30 us,
 * that start within 10 us of the first. A cluster's CTAs share a GPC, so where a GPC's SMs do not divide
 * by s some stay idle; the attention plans cost their splits by these waves (src/host/plan.c).
 * Usage: dsa-dev-cluster-residency   (on the GPU machine; < 1 s)
 */
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

__global__ void cr_spin(unsigned long long *start) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  if (threadIdx.x == 0) start[blockIdx.x] = t0;
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < 30000);
}

int main() {
  const int smem = 200 * 1024;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms <= 0) {
    printf("no GPU\n");
    return 77;
  }
  cudaFuncSetAttribute(cr_spin, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  unsigned long long *d = nullptr;
  cudaMalloc(&d, sizeof(unsigned long long) * 3 * sms);
  printf("%d SMs; clusters of s, one CTA an SM\n  s  clusters (occupancy API)  CTAs  | CTAs in the measured first wave\n",
         sms);
  for (int s = 1; s <= 8; ++s) {
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = s;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    const int grid = 3 * sms / s * s;
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(grid);
    c.blockDim = dim3(128);
    c.dynamicSmemBytes = smem;
    c.attrs = &at;
    c.numAttrs = 1;
    int clusters = -1;
    const cudaError_t eq = cudaOccupancyMaxActiveClusters(&clusters, cr_spin, &c);
    cudaMemset(d, 0, sizeof(unsigned long long) * grid);
    const cudaError_t el = cudaLaunchKernelEx(&c, cr_spin, d);
    cudaDeviceSynchronize();
    std::vector<unsigned long long> t(grid);
    cudaMemcpy(t.data(), d, sizeof(unsigned long long) * grid, cudaMemcpyDeviceToHost);
    const unsigned long long first = *std::min_element(t.begin(), t.end());
    int wave = 0;
    for (unsigned long long x : t) wave += x - first < 10000;
    printf("  %d  %8d                  %4d  | %4d  %s%s\n", s, clusters, clusters * s, wave,
           eq ? cudaGetErrorString(eq) : "", el ? cudaGetErrorString(el) : "");
  }
  cudaFree(d);
  return 0;
}
