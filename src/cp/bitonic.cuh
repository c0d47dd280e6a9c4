/*
 * cp/bitonic.cuh — a block's ascending sort of up to DSA_MAX_TOPK ids in shared memory, for the
 * merge kernels whose selected ids come in no usable order (select always; tree when the lists'
 * ids do not ascend).
 */
#pragma once

/* Sorts sel[0, n2) ascending: a bitonic network (n2 a power of two, 64..DSA_MAX_TOPK), thread t
 * holding elements 2t and 2t + 1 in registers — partners 1 apart in the thread, 2..32 apart in the
 * warp (shuffles), 64 and more through shared memory (two barriers a step: 30 at 2048, where the
 * one-element-pair-a-thread network took 66). Threads past n2 / 2 (whole warps) only meet the
 * barriers. */
static __device__ __forceinline__ int bitonic_keep(int v, int p, int i, int l, int size) {
  const bool up = (i & size) == 0, lower = i < l;
  return lower == up ? min(v, p) : max(v, p);
}

static __device__ void bitonic_sort(int *sel, int n2) {
  const int t = threadIdx.x;
  const bool active = 2 * t < n2; /* warp-uniform: n2 is a multiple of 64 */
  int v0 = active ? sel[2 * t] : 0, v1 = active ? sel[2 * t + 1] : 0;
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride >= 64) { /* across warps */
        if (active) {
          sel[2 * t] = v0;
          sel[2 * t + 1] = v1;
        }
        __syncthreads();
        if (active) {
          const int i0 = 2 * t, i1 = 2 * t + 1;
          v0 = bitonic_keep(v0, sel[i0 ^ stride], i0, i0 ^ stride, size);
          v1 = bitonic_keep(v1, sel[i1 ^ stride], i1, i1 ^ stride, size);
        }
        __syncthreads();
      } else if (stride >= 2) { /* within the warp: lane t ^ (stride / 2) holds the partners */
        if (active) {
          const int p0 = __shfl_xor_sync(0xffffffffu, v0, stride >> 1);
          const int p1 = __shfl_xor_sync(0xffffffffu, v1, stride >> 1);
          const int i0 = 2 * t, i1 = 2 * t + 1;
          v0 = bitonic_keep(v0, p0, i0, i0 ^ stride, size);
          v1 = bitonic_keep(v1, p1, i1, i1 ^ stride, size);
        }
      } else if (active) { /* the thread's own pair */
        const bool up = ((2 * t) & size) == 0;
        const int lo = min(v0, v1), hi = max(v0, v1);
        v0 = up ? lo : hi;
        v1 = up ? hi : lo;
      }
    }
  }
  if (active) {
    sel[2 * t] = v0;
    sel[2 * t + 1] = v1;
  }
  __syncthreads();
}
