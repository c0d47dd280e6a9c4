/*
 * topk/radix.cuh — what the three top-k kernels (registers.cu, slices.cu, chain.cu) share: the order
 * they select by and the pieces of a radix select.
 *
 * For row t (L = visible length, k = min(topk, L)): the k positions with the largest scores, ties to
 * the lower position, NaN below every number. Rows with L <= topk select every position without
 * reading a score. Scores are ranked through a 64-bit composite that is unique per element
 * (common/score_key.cuh):
 *   comp = key(score) << 32 | ~position,  key = order-preserving bits of the float (NaN -> 0)
 * so "largest k composites" is exactly the contract's order, and a radix select over comp always
 * ends with the k-th element isolated: a histogram of one digit (11 bits) finds the bin holding the
 * k-th composite (find_bin), the elements above it are selected, and the next digit is counted only
 * over that bin's, until its bin holds exactly what is still needed.
 */
#pragma once
#include <stdint.h>

#include "common/score_key.cuh"
#include "kernels.h"

/* Exclusive prefix sum over the block (blockDim.x a multiple of 32, <= 1024) with warp shuffles;
 * *total gets the block's sum. scratch: 32 ints of shared memory. */
static __device__ int block_exclusive_sum(int v, int *scratch, int *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < nw ? scratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  const int excl = x - v + (warp ? scratch[warp - 1] : 0);
  *total = scratch[nw - 1];
  __syncthreads(); /* scratch may be reused right after */
  return excl;
}

/* Find, in a histogram of nb bins, the bin holding the need-th largest element (counting from the
 * top bin). Returns the bin, and in *above the count in higher bins. All threads of the block get
 * the answer. scratch: 34 ints of shared memory. */
static __device__ int find_bin(const uint32_t *hist, int nb, int need, int *above, int *scratch) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const int per = (nb + nt - 1) / nt;
  /* If no bin reaches `need` (fewer elements than need: only with inconsistent inputs, e.g. an
   * output aliasing a length), the answer is bin 0: defined, and in range. */
  if (tid == 0) {
    scratch[32] = 0;
    scratch[33] = 0;
  }
  /* thread i owns bins [nb - per*(i+1), nb - per*i) — thread 0 the highest. */
  const int hi = nb - per * tid, lo = max(0, hi - per);
  int sum = 0;
  for (int b = lo; b < hi; b++) sum += hist[b];
  int total;
  const int before = block_exclusive_sum(sum, scratch, &total); /* elements in higher bins */
  if (before < need && before + sum >= need) {
    int run = before;
    for (int b = hi - 1; b >= lo; b--) {
      if (run + (int)hist[b] >= need) {
        scratch[32] = b;
        scratch[33] = run;
        break;
      }
      run += hist[b];
    }
  }
  __syncthreads();
  const int bin = scratch[32];
  *above = scratch[33];
  __syncthreads();
  return bin;
}


/* The normalised composite of the slices and registers kernels: the key's offset from the row's smallest key
 * (so the first digit spreads the row's actual range over the bins, not over all of float space)
 * above ~position. Same order as make_comp. */
static __device__ __forceinline__ uint64_t tk_offset_comp(uint32_t key, uint32_t kmin, int pos) {
  return ((uint64_t)(key - kmin) << 32) | (uint32_t)~(uint32_t)pos;
}

