/*
 * launch.cuh — every kernel launch goes through dsa_launch: cudaLaunchKernelEx returns this
 * launch's own status, where `kernel<<<...>>>` followed by cudaGetLastError() would also report
 * (and clear) an error the caller had left pending on the thread. Optionally marks the launch as a
 * programmatic dependent of the previous kernel in the stream (the kernel then calls
 * griddepcontrol.wait before reading what that kernel wrote).
 */
#pragma once
#include <cuda_runtime.h>

#include <atomic>

/* cooperative: every CTA of the grid resident at once (cudaLaunchAttributeCooperative), so that CTAs
 * may wait for each other (indexer/fused_topk.cuh); the launch fails where the grid cannot be. */
template <typename... KArgs, typename... Args>
static cudaError_t dsa_launch_attrs(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                    bool programmatic, unsigned cluster_x, bool cooperative, Args &&...args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[3];
  unsigned n = 0;
  if (cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  if (programmatic) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 0) { /* thread-block clusters of cluster_x CTAs along x (grid.x a multiple of it) */
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = n ? attr : nullptr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t dsa_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, bool programmatic, unsigned cluster_x, Args &&...args) {
  return dsa_launch_attrs(kernel, grid, block, smem, stream, programmatic, cluster_x, false,
                          static_cast<Args &&>(args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t dsa_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                              cudaStream_t stream, bool programmatic, Args &&...args) {
  return dsa_launch_cluster(kernel, grid, block, smem, stream, programmatic, 0u, static_cast<Args &&>(args)...);
}

/* Per kernel (a static at each launch site): the dynamic shared-memory limit set so far on each
 * device, 0 = not yet; and the last occupancy asked of it on each device (cooperative launches):
 * smem << 32 | threads a block << 16 | CTAs an SM + 1, 0 = none. */
typedef struct {
  std::atomic<int> limit[64];
  std::atomic<unsigned long long> occupancy[64];
} dsa_smem_cache;

/* Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KB — once per
 * kernel and device: cudaFuncSetAttribute clears an error the caller left pending in the runtime
 * (seen with CUDA 13.0; launches do not), so repeated calls must not run it. */
template <typename... KArgs>
static cudaError_t dsa_set_smem(void (*kernel)(KArgs...), size_t smem, dsa_smem_cache *cache, bool force) {
  if (smem <= 48 * 1024) return cudaSuccess;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  std::atomic<int> *slot = dev >= 0 && dev < 64 ? &cache->limit[dev] : nullptr;
  if (!force && slot && slot->load(std::memory_order_relaxed) >= (int)smem) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err == cudaSuccess && slot) slot->store((int)smem, std::memory_order_relaxed);
  return err;
}

/* dsa_launch(_cluster) for a kernel that may need more than 48 KB of dynamic shared memory: sets the
 * limit (once), launches, and if the launch fails — a device reset drops the limit with the old
 * context — sets it again and retries once. */
template <typename... KArgs, typename... Args>
static cudaError_t dsa_launch_smem_cluster(void (*kernel)(KArgs...), dsa_smem_cache *cache, dim3 grid, dim3 block,
                                           size_t smem, cudaStream_t stream, bool programmatic, unsigned cluster_x,
                                           Args &&...args) {
  cudaError_t err = dsa_set_smem(kernel, smem, cache, false);
  if (err != cudaSuccess) return err;
  err = dsa_launch_cluster(kernel, grid, block, smem, stream, programmatic, cluster_x, args...);
  if (err == cudaSuccess || smem <= 48 * 1024) return err;
  if (dsa_set_smem(kernel, smem, cache, true) != cudaSuccess) return err;
  return dsa_launch_cluster(kernel, grid, block, smem, stream, programmatic, cluster_x, args...);
}

template <typename... KArgs, typename... Args>
static cudaError_t dsa_launch_smem(void (*kernel)(KArgs...), dsa_smem_cache *cache, dim3 grid, dim3 block,
                                   size_t smem, cudaStream_t stream, bool programmatic, Args &&...args) {
  return dsa_launch_smem_cluster(kernel, cache, grid, block, smem, stream, programmatic, 0u, args...);
}

/* CTAs of `kernel` an SM can hold with `threads` a block and `smem` bytes (the occupancy calculator,
 * a host computation in the driver), asked once per kernel, device and shape: the launch site's
 * cache keeps the last answer of each device (a decode step asks the same shape every layer). */
template <typename... KArgs>
static cudaError_t dsa_occupancy(void (*kernel)(KArgs...), dsa_smem_cache *cache, int threads, size_t smem,
                                 int *per_sm) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  std::atomic<unsigned long long> *slot = dev >= 0 && dev < 64 ? &cache->occupancy[dev] : nullptr;
  const unsigned long long shape = (unsigned long long)smem << 32 | (unsigned long long)(threads & 0xffff) << 16;
  if (slot && smem <= 0xffffffffu) {
    const unsigned long long got = slot->load(std::memory_order_relaxed);
    if (got != 0 && (got & ~0xffffull) == shape) {
      *per_sm = (int)(got & 0xffff) - 1;
      return cudaSuccess;
    }
  }
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, threads, smem)) != cudaSuccess) return err;
  if (slot && smem <= 0xffffffffu && *per_sm >= 0 && *per_sm < 0xffff)
    slot->store(shape | (unsigned long long)(*per_sm + 1), std::memory_order_relaxed);
  return cudaSuccess;
}

/* A cooperative launch of a kernel that may need more than 48 KB (the limit set once, as above) on a
 * device of `sms` SMs (the caller's cached count, host/device.c). *resident: whether `grid` can be
 * resident at once (dsa_occupancy); when it cannot, nothing is launched (cudaSuccess). */
template <typename... KArgs, typename... Args>
static cudaError_t dsa_launch_smem_cooperative(void (*kernel)(KArgs...), dsa_smem_cache *cache, dim3 grid, dim3 block,
                                               size_t smem, cudaStream_t stream, int sms, bool *resident,
                                               Args &&...args) {
  *resident = false;
  cudaError_t err = dsa_set_smem(kernel, smem, cache, false);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  if ((err = dsa_occupancy(kernel, cache, (int)(block.x * block.y * block.z), smem, &per_sm)) != cudaSuccess) return err;
  if ((long long)per_sm * sms < (long long)grid.x * grid.y * grid.z) return cudaSuccess;
  *resident = true;
  return dsa_launch_attrs(kernel, grid, block, smem, stream, false, 0u, true, static_cast<Args &&>(args)...);
}
