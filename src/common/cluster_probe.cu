/*
 * common/cluster_probe.cu — how many clusters of s CTAs the current device keeps resident at once,
 * for the attention plans (host/plan.c) that split a token's rows over a cluster (rows_as_m,
 * heads_as_m). A cluster's CTAs run on one GPC; with one CTA an SM (each of those kernels takes over
 * 114 KB of shared memory) the count is the GPCs' SMs divided by s, rounded down GPC by GPC, so a
 * wave of clusters of 8 holds fewer CTAs than the SMs (an H100 SXM: 15 clusters, 120 of 132), and
 * how many fewer depends on which SMs the part has fused off. The occupancy calculator answers for
 * an empty kernel asking enough shared memory to sit alone on an SM. Called once per device
 * (host/device.c).
 */
#include <cuda_runtime.h>

#include "host/status.h"

#define PROBE_SMEM (160 * 1024) /* over half an SM's 228 KB: one CTA an SM */

static __global__ void cluster_probe_kernel() {}

extern "C" int dsa_cluster_probe(int cluster_size, int *clusters) {
  *clusters = 0;
  /* cudaFuncSetAttribute clears an error the caller left pending: do not ask then */
  if (cudaPeekAtLastError() != cudaSuccess) return DSA_PROBE_ERROR_PENDING;
  cudaError_t err = cudaFuncSetAttribute(cluster_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, PROBE_SMEM);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); /* the probe's own error (none was pending), not left for the caller */
    return (int)err;
  }
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = (unsigned)cluster_size;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)cluster_size);
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = PROBE_SMEM;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  err = cudaOccupancyMaxActiveClusters(clusters, cluster_probe_kernel, &cfg);
  if (err != cudaSuccess) (void)cudaGetLastError();
  return (int)err;
}
