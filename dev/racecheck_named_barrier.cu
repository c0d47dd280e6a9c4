/*
 * dev/racecheck_named_barrier.cu — does compute-sanitizer's racecheck model a named barrier that
 * only some warps of a CTA use? (docs/PERF.md: the fused decode indexer's one-token variant, whose
 * 12 consumer warps meet on named barrier 1 while its 3 idle producer warps do not, reported hazards
 * between accesses a __syncthreads separates; its MTP variant, whose producers also sync on a named
 * barrier, reported none.)
 *
 * One kernel, 512 threads, the select phase's pattern after the roles: a default written before a
 * __syncthreads, the owner's value after it, read after a third. Modes (the roles before it):
 *   0  none: every warp goes straight to the pattern
 *   1  warps 4-15 meet on `bar.sync 1, 384` first (the one-token kernel's q-staged barrier), warps 0-3
 *      do not
 *   2  as 1, and warps 0-3 meet on `bar.sync 2, 128` (each warp has passed one named barrier)
 *   3  the seesaw's hand-over (attention/heads_as_m.cu, DSA_ATTN_SEESAW) instead of the pattern: warps
 *      0-3 write a row each quad (its first lane) and `bar.arrive 3, 256`; warps 4-7 `bar.sync 3, 256`
 *      and read them (the same warp index, the same rows, as the seesaw's heads)
 *   4  its round trip through one buffer: as 3, then each quad of warps 4-7 overwrites its row (after
 *      __syncwarp: the quad has read it) and `bar.arrive 4, 256`; warps 0-3 `bar.sync 4, 256` and
 *      read that (a write after a read the barriers order: the seesaw's m, alpha and P buffers serve
 *      both directions)
 * In modes 3 and 4 the PTX memory model orders every access (bar.arrive synchronizes with the
 * bar.sync that completes the barrier): a hazard reported there is the tool's.
 * The program checks its output itself; run it under `compute-sanitizer --tool racecheck` once a
 * mode (`dsa-dev-racecheck-named-barrier MODE`): a hazard reported in mode 1 but not 0 is the tool's,
 * since the accesses are ordered by barrier 0 in every mode.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/ptx/sync.cuh"

__global__ void __launch_bounds__(512, 2) named_barrier_pattern(int *out, int mode) {
  __shared__ int slot[32];
  const int tid = threadIdx.x, warp = tid >> 5;
  if (mode >= 3) { /* warps 0-7, a quad of lanes a row as the seesaw's heads: row 8 (warp % 4) + lane / 4,
                      written by its first lane, read by all four; out as the pattern's when right */
    __shared__ int row_s[32];
    const int row = 8 * (warp & 3) + ((tid & 31) >> 2), want = 480 + (tid & 31);
    int v = -1;
    if (warp < 4) {
      if ((tid & 3) == 0) row_s[row] = mode == 3 ? 1000 + row : -2;
      ptx_bar_arrive(3, 256);
      if (mode == 4) {
        ptx_bar_sync(4, 256);
        v = row_s[row];
      } else {
        v = 1000 + row;
      }
    } else if (warp < 8) {
      ptx_bar_sync(3, 256);
      v = row_s[row];
      if (mode == 4) {
        __syncwarp(); /* the quad has read before its first lane writes */
        if ((tid & 3) == 0) row_s[row] = v == -2 ? 1000 + row : -3;
        ptx_bar_arrive(4, 256);
        v = 1000 + row;
      }
    } else {
      v = 1000 + row;
    }
    out[blockIdx.x * 512 + tid] = v == 1000 + row ? want : -1;
    return;
  }
  if (mode >= 1 && warp >= 4) ptx_bar_sync(1, 384);
  if (mode >= 2 && warp < 4) ptx_bar_sync(2, 128);
  __syncthreads();
  if (tid < 32) slot[tid] = -1; /* the default answer */
  __syncthreads();
  if (tid >= 480) slot[tid - 480] = tid; /* the owner's */
  __syncthreads();
  out[blockIdx.x * 512 + tid] = slot[tid & 31];
}

int main(int argc, char **argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 1;
  const int ctas = 264; /* two a SM on 132 SMs, as the one-token kernel */
  int *d = nullptr;
  if (cudaMalloc(&d, sizeof(int) * 512 * ctas) != cudaSuccess) {
    printf("no GPU: skipped\n");
    return 0;
  }
  named_barrier_pattern<<<ctas, 512>>>(d, mode);
  int *h = (int *)malloc(sizeof(int) * 512 * ctas);
  cudaError_t err = cudaMemcpy(h, d, sizeof(int) * 512 * ctas, cudaMemcpyDeviceToHost);
  int bad = err != cudaSuccess;
  for (int i = 0; i < 512 * ctas && !bad; i++) bad |= h[i] != 480 + (i & 31);
  printf("mode %d: %s (%s)\n", mode, bad ? "WRONG OUTPUT" : "output as ordered", cudaGetErrorString(err));
  free(h);
  cudaFree(d);
  return bad;
}
